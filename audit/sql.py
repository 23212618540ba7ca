"""The audit's dialect-specific SQL: every PostgreSQL/SQLite difference of the audit, in this one module.

* integer expressions over columns (:func:`integer`, :func:`micro`, :func:`units`, :func:`timestamp_us`,
  :func:`code`, :func:`flag`): exact integers -- micro-epsilons, money in ten-thousandths, microseconds -- so the
  checks compare integers, never floats;
* :func:`fetch_ints` (one query per table; on PostgreSQL one binary ``COPY``) and :func:`fetch_rows`;
* :func:`snapshot`: one consistent snapshot for reading every table;
* the ledger export's server-side CSV (:func:`export_csv`, ``COPY ... TO STDOUT (FORMAT CSV)``).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import numpy as np
from django.db import connection, transaction
from django.db.models import CharField, F, Func, Value

from accounts.epsilon import MICRO
from accounts.money.units import UNITS as MONEY_UNITS
from ldpmarket import storage
from market.chains.pgcopy import copy_out, parse_rows


def postgresql() -> bool:
    return storage.is_postgresql()


# ------------------------------------------------------------------------------------------- expressions

def integer(expr: str) -> str:
    return f"CAST({expr} AS BIGINT)" if postgresql() else f"CAST({expr} AS INTEGER)"


def scaled(col: str, scale: int, null: int | None = -1) -> str:
    """Exact integer ``col * scale`` of a NUMERIC column (PostgreSQL numeric is exact; SQLite stores 6-place reals)."""
    expr = integer(f"ROUND({col} * {scale})")
    return expr if null is None else f"COALESCE({expr}, {null})"


def micro(col: str, null: int | None = -1) -> str:
    return scaled(col, MICRO, null)


def units(col: str) -> str:
    return scaled(col, MONEY_UNITS, None)


def timestamp_us(col: str) -> str:
    """Microseconds since the epoch of a timestamp column (-1 for NULL)."""
    if postgresql():
        return f"COALESCE(CAST(EXTRACT(EPOCH FROM {col}) * 1000000 AS BIGINT), -1)"
    # Django stores UTC datetimes in SQLite as 'YYYY-MM-DD HH:MM:SS[.ffffff]'.
    # The fraction is cut off before strftime, which would round .9995 s and above up to the next second.
    seconds = f"CAST(strftime('%s', substr({col}, 1, 19)) AS INTEGER)"
    micros = f"CAST(CASE WHEN length({col}) > 19 THEN substr({col} || '000000', 21, 6) ELSE '0' END AS INTEGER)"
    return f"COALESCE({seconds} * 1000000 + {micros}, -1)"


def code(col: str, names: list[str], unknown: int = -2) -> str:
    """The position of a text column's value in ``names`` (``unknown`` when it is none of them)."""
    whens = " ".join(f"WHEN '{n}' THEN {i}" for i, n in enumerate(names))
    return integer(f"CASE {col} {whens} ELSE {unknown} END")


def flag(cond: str) -> str:
    return integer(f"CASE WHEN {cond} THEN 1 ELSE 0 END")


def sum_exceeds(columns: list[str], limit: str) -> str:
    """A condition: the sum of the epsilon columns ``columns`` exceeds the column ``limit``, exactly.  PostgreSQL
    compares the NUMERIC values (2.5 times faster than their micro-epsilons); SQLite, which stores 6-place decimals
    as doubles, their micro-epsilons (there ``0.1 + 0.2 > 0.3``)."""
    if postgresql():
        return f"{' + '.join(columns)} > {limit}"
    return f"{' + '.join(micro(c, None) for c in columns)} > {micro(limit, None)}"


# ------------------------------------------------------------------------------------------- reading

def fetch_ints(select: list[str], table: str, order: str = "id") -> np.ndarray:
    """``SELECT select FROM table ORDER BY order`` as an (n, len(select)) int64 array; every expression is an integer.

    PostgreSQL: one binary ``COPY ... TO STDOUT`` parsed by numpy; elsewhere one fetch.
    """
    k = len(select)
    pg = postgresql()
    if pg:
        select = [f"CAST(({x}) AS BIGINT)" for x in select]
    sql = f"SELECT {', '.join(select)} FROM {table} ORDER BY {order}"
    with connection.cursor() as cur:
        if pg:

            data = copy_out(cur.cursor, sql)
            rows = parse_rows(data, [(f"c{j}", ">i8") for j in range(k)])
            return np.stack([rows[f"c{j}"].astype(np.int64) for j in range(k)], axis=1) if rows.size else \
                np.zeros((0, k), dtype=np.int64)
        cur.execute(sql)
        rows = cur.fetchall()
    return np.array(rows, dtype=np.int64).reshape(len(rows), k)


def release_values() -> str:
    """A table expression: one row per value of every compact ledger release row, with ``row_id, k`` (its place in
    the row), ``shard, purchase, value, owner`` and ``earning`` (-1 when not recorded).  PostgreSQL unnests the
    arrays; SQLite walks the JSON arrays."""
    if postgresql():
        return ("(SELECT r.id AS row_id, u.k, r.shard, r.purchase_id AS purchase, u.v AS value, u.o AS owner, "
                "COALESCE(u.e, -1) AS earning FROM accounts_ledgerrelease r CROSS JOIN LATERAL "
                "unnest(r.value_ids, r.owner_ids, r.earnings) WITH ORDINALITY AS u(v, o, e, k)) x")
    at = lambda col: f"json_extract(r.{col}, '$[' || j.key || ']')"  # noqa: E731
    return (f"(SELECT r.id AS row_id, j.key AS k, r.shard AS shard, r.purchase_id AS purchase, j.value AS value, "
            f"{at('owner_ids')} AS owner, COALESCE({at('earnings')}, -1) AS earning "
            f"FROM accounts_ledgerrelease r, json_each(r.value_ids) j) x")


def fetch_rows(sql: str) -> list[tuple]:
    """The rows of one query, as the driver returns them."""
    with connection.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


@contextlib.contextmanager
def snapshot():
    """Read every table from one consistent snapshot, so purchases committing meanwhile raise no false alarm.

    PostgreSQL: a ``REPEATABLE READ, READ ONLY`` transaction; SQLite: one
    transaction (its first read takes the snapshot).  Inside a caller's
    transaction (tests, another service) the caller's transaction is used as it is.
    """
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        if postgresql():
            with connection.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


# ------------------------------------------------------------------------------------------- the CSV export

#: Timestamps are written as ISO 8601 in UTC with microseconds by both paths.
_PG_ISO = "to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')"
_CHUNK = 1 << 16


def iso_utc(field: str) -> Func:
    """PostgreSQL: a timestamp column as ISO 8601 text in UTC with microseconds (what Python's path writes)."""
    return Func(F(field), template=_PG_ISO, output_field=CharField())


def blank_as_null(field: str) -> Func:
    """A text column with "" as NULL (``COPY`` writes "" as ``""``, Python's csv writes nothing)."""
    return Func(F(field), Value(""), function="NULLIF", output_field=CharField())


def copy_csv(values_queryset) -> Iterator[str]:
    """PostgreSQL: the server writes the CSV (``COPY (query) TO STDOUT``); chunks of ~64 KB are passed on."""
    sql, params = values_queryset.query.sql_with_params()
    with connection.cursor() as cur:
        with cur.cursor.copy(f"COPY ({sql}) TO STDOUT (FORMAT CSV)", params) as copy:
            buf, size = [], 0
            for data in copy:
                buf.append(bytes(data))
                size += len(data)
                if size >= _CHUNK:
                    yield b"".join(buf).decode()
                    buf, size = [], 0
            if buf:
                yield b"".join(buf).decode()


def export_csv(server_values: Callable[[], object], python_rows: Callable[[], Iterator[str]]) -> Iterator[str]:
    """The export's CSV rows: on PostgreSQL ``COPY`` of ``server_values()`` (timestamps formatted in SQL),
    elsewhere ``python_rows()``; the bytes agree."""
    if postgresql():
        return copy_csv(server_values())
    return python_rows()
