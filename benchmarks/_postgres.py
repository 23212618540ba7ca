"""The PostgreSQL plumbing the database benchmarks (E2, E3, E4) share: a server, a database of their own, Django.

Each benchmark creates its own database on the server named by its environment variable (or ``DATABASE_URL``,
default ``postgresql://postgres@127.0.0.1:5432/``), migrates it, and drops it at the end.
"""
from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/"


def server_url(*env_names: str) -> str:
    """The server of the first of ``env_names`` (then ``DATABASE_URL``) that names a PostgreSQL URL."""
    url = next((os.environ[n] for n in (*env_names, "DATABASE_URL")
                if os.environ.get(n, "").startswith(("postgres://", "postgresql://"))), DEFAULT_SERVER)
    parts = urlsplit(url)
    return urlunsplit(("postgresql", parts.netloc, "/", "", ""))


def with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", "", ""))


def admin(url: str, sql: str) -> None:
    """Run ``sql`` on the server's ``postgres`` database, outside a transaction (CREATE/DROP DATABASE)."""
    import psycopg

    with psycopg.connect(with_db(url, "postgres"), autocommit=True) as conn:
        conn.execute(sql)


def setup_django(db_url: str, name: str) -> None:
    """Point Django at the database ``name`` of ``db_url`` (before ``django.setup()``, or repoint the
    connection when another benchmark in this process set Django up already) and migrate it."""
    os.environ["DATABASE_URL"] = db_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ldpmarket.settings")
    # fixed keys that pass the production rules (ldpmarket.keys): these settings run without DEBUG
    for key, value in (("DJANGO_SECRET_KEY", "bench-S9kQ2wE7rT4yU1iO8pA5sD3fG6hJ0lZxCvBnM-bench-secret-k"),
                       ("LDP_VALUE_KEY", "bench-V7mN2bX9cZ4lK1jH8gF5dS3aQ0wE6rT-value"),
                       ("LDP_PSEUDONYM_KEY", "bench-P3oI8uY2tR7eW1qA9sD5fG4hJ6kL0zX-pseud")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django
    from django.apps import apps

    if apps.ready:
        from django.db import connections

        conn = connections["default"]
        conn.close()
        parts = urlsplit(db_url)
        conn.settings_dict.update(NAME=name, HOST=parts.hostname or "", PORT=str(parts.port or ""),
                                  USER=parts.username or "", PASSWORD=parts.password or "")
    else:
        django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def checkpoint() -> None:
    """Flush dirty pages before a timed run: no run pays for an earlier one's checkpoint (superuser only)."""
    from django.db import connection

    try:
        with connection.cursor() as c:
            c.execute("CHECKPOINT")
    except Exception:  # not a superuser: go on without
        pass


def restore_chains(snapshot: str) -> None:
    """Chains back to the copy in ``snapshot`` (a fresh table) and every ``chain_loss`` back to 0, vacuumed and
    checkpointed: each timed purchase starts from the same state (E3, E5)."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as c:
        c.execute("TRUNCATE market_chain")
        columns = "value_id, epsilons, outputs, length, head, head_output, updated_at"
        c.execute(f"INSERT INTO market_chain ({columns}) SELECT {columns} FROM {snapshot} ORDER BY value_id")
        c.execute("UPDATE accounts_budgetaccount SET chain_loss = 0 WHERE chain_loss <> 0")
    with connection.cursor() as c:
        c.execute("VACUUM ANALYZE market_chain, accounts_budgetaccount, accounts_moneyaccount, market_holding")
    checkpoint()


def funded_buyer(username: str, credit):
    """A new buyer with ``credit`` on their account (and its entry): no holdings, so no upgrade credit."""
    from accounts.models import MoneyAccount, MoneyEntry, User

    buyer = User.objects.create(username=username, role=User.Role.BUYER, password="!")
    account = MoneyAccount.objects.create(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT, balance=credit)
    MoneyEntry.objects.create(account=account, amount=credit, balance_after=credit, memo="benchmark credit")
    return buyer
