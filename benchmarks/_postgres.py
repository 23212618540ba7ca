"""The PostgreSQL plumbing the database benchmarks (E2, E3, E4, E5) share: a server, a database of their own, Django.

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


def setup_django(db_url: str, name: str, *, migrate: bool = True) -> None:
    """Point Django at the database ``name`` of ``db_url`` (before ``django.setup()``, or repoint the
    connection when another benchmark in this process set Django up already) and, with ``migrate``, migrate it
    (a child process working on a database its parent migrated passes ``migrate=False``)."""
    os.environ["DATABASE_URL"] = db_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ldpmarket.settings")
    # fixed keys that pass the production rules (ldpmarket.keys): these settings run without DEBUG
    for key, value in (("DJANGO_SECRET_KEY", "bench-S9kQ2wE7rT4yU1iO8pA5sD3fG6hJ0lZxCvBnM-bench-secret-k"),
                       ("LDP_VALUE_KEY", "bench-V7mN2bX9cZ4lK1jH8gF5dS3aQ0wE6rT-value"),
                       ("LDP_PSEUDONYM_KEY", "bench-P3oI8uY2tR7eW1qA9sD5fG4hJ6kL0zX-pseud")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("LDP_LOG_ORIGIN", "bench.ldpmarket.localhost/log")  # required without DEBUG
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
    if not migrate:
        return
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


#: The chain tables a snapshot copies (``snapshot_chains``) and ``restore_chains`` puts back.
CHAIN_POINT_COLUMNS = "id, block_id, attribute_id, epsilon, present, sealed, revision, value_key_id"


def snapshot_chains(snapshot: str) -> None:
    """Copy every chain as it is now into two plain tables, ``<snapshot>_points`` (the ``market_chainpoint`` rows)
    and ``<snapshot>_blocks`` (each ``market_chainblock``'s id, heads and revision), for ``restore_chains``."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as c:
        c.execute(f"DROP TABLE IF EXISTS {snapshot}_points, {snapshot}_blocks")
        c.execute(f"CREATE TABLE {snapshot}_points AS SELECT {CHAIN_POINT_COLUMNS} FROM market_chainpoint "
                  f"ORDER BY block_id, epsilon")
        c.execute(f"CREATE TABLE {snapshot}_blocks AS SELECT id, heads, revision FROM market_chainblock ORDER BY id")


def restore_chains(snapshot: str, *, budgets: bool = True) -> None:
    """Chains back to the copy ``snapshot_chains(snapshot)`` took (``market_chainpoint`` emptied and re-filled,
    each ``market_chainblock``'s heads and revision put back) and, with ``budgets``, every ``chain_loss`` back to
    0; vacuumed and checkpointed: each timed run starts from the same state (E2, E3, E5)."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as c:
        c.execute("TRUNCATE market_chainpoint")
        c.execute(f"INSERT INTO market_chainpoint ({CHAIN_POINT_COLUMNS}) SELECT {CHAIN_POINT_COLUMNS} "
                  f"FROM {snapshot}_points ORDER BY block_id, epsilon")
        c.execute(f"UPDATE market_chainblock b SET heads = s.heads, revision = s.revision FROM {snapshot}_blocks s "
                  f"WHERE s.id = b.id AND (b.heads <> s.heads OR b.revision <> s.revision)")
        c.execute("SELECT setval(pg_get_serial_sequence('market_chainpoint', 'id'), "
                  "coalesce((SELECT max(id) FROM market_chainpoint), 0) + 1, false)")
        if budgets:
            c.execute("UPDATE accounts_budgetaccount SET chain_loss = 0 WHERE chain_loss <> 0")
    tables = "market_chainpoint, market_chainblock" + (
        ", accounts_budgetaccount, accounts_moneyaccount" if budgets else "")
    with connection.cursor() as c:
        c.execute(f"VACUUM ANALYZE {tables}")
    checkpoint()


def chain_stats(attribute_id: int | None = None) -> dict:
    """The stored chains' shape, from the blocks' heads and the points' bitmaps (nothing opened): per used slot,
    the fewest and most points and the lowest and highest head (micro-epsilons); and the block count."""
    import numpy as np

    from market.chains import store
    from market.models import ChainBlock

    blocks = ChainBlock.objects.all()
    if attribute_id is not None:
        blocks = blocks.filter(attribute_id=attribute_id)
    sizes = dict(blocks.values_list("id", "size"))
    points, heads = [], []
    ids = sorted(sizes)
    for k in range(0, len(ids), 256):
        for bid, block in store.read(ids[k:k + 256]).items():
            size = sizes[bid]
            points.append(block.present[:, :size].sum(axis=0))
            heads.append(block.heads[:size])
    points = np.concatenate(points) if points else np.zeros(0, dtype=np.int64)
    heads = np.concatenate(heads) if heads else np.zeros(0, dtype=np.int64)
    return {"blocks": len(ids), "values": int(points.size),
            "points": (int(points.min()), int(points.max())) if points.size else (0, 0),
            "heads": (int(heads.min()), int(heads.max())) if heads.size else (0, 0)}


def funded_buyer(username: str, credit):
    """A new buyer with ``credit`` on their account (and its entry): no holdings, so no upgrade credit."""
    from accounts.models import MoneyAccount, MoneyEntry, User

    buyer = User.objects.create(username=username, role=User.Role.BUYER, password="!")
    account = MoneyAccount.objects.create(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT, balance=credit)
    MoneyEntry.objects.create(account=account, amount=credit, balance_after=credit, memo="benchmark credit")
    return buyer
