"""Set-based writes of many rows: COPY on PostgreSQL, executemany elsewhere.

``insert_rows`` appends rows to a table; ``update_rows`` sets columns of rows
identified by a key: on PostgreSQL by COPY into a temporary table and one
``UPDATE ... FROM``, so a purchase of a million values is a handful of
statements, never a statement per row.
"""
from __future__ import annotations

from datetime import datetime

from django.db import connection


def _adapt(rows):
    """Values as Django would store them on a non-PostgreSQL backend (datetimes, decimals)."""
    ops = connection.ops
    for row in rows:
        yield tuple(ops.adapt_datetimefield_value(v) if isinstance(v, datetime) else v for v in row)


def insert_rows(table: str, columns: list[str], rows) -> None:
    rows = list(rows)
    if not rows:
        return
    cols = ", ".join(columns)
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            with cur.cursor.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join(["%s"] * len(columns))
            cur.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", list(_adapt(rows)))


def update_rows(table: str, key: str, columns: list[str], rows, *, types: dict[str, str]) -> None:
    """``UPDATE table SET col = value ... WHERE key = row key`` for every row ``(key, *values)``.

    The caller holds the rows' locks and computed the final values.  ``types``
    gives each column's SQL type for the temporary table (PostgreSQL).
    """
    rows = list(rows)
    if not rows:
        return
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            tmp = f"tmp_{table}"
            defs = ", ".join(f"{c} {types[c]}" for c in [key, *columns])
            cur.execute(f"CREATE TEMP TABLE {tmp} ({defs}) ON COMMIT DROP")
            with cur.cursor.copy(f"COPY {tmp} ({key}, {', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            sets = ", ".join(f"{c} = t.{c}" for c in columns)
            cur.execute(f"UPDATE {table} c SET {sets} FROM {tmp} t WHERE c.{key} = t.{key}")
            cur.execute(f"DROP TABLE {tmp}")
        else:
            sets = ", ".join(f"{c} = %s" for c in columns)
            cur.executemany(f"UPDATE {table} SET {sets} WHERE {key} = %s", list(_adapt((*r[1:], r[0]) for r in rows)))
