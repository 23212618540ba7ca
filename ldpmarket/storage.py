"""The storage dialects: every PostgreSQL/SQLite difference of the apps, in this one module
(docs/architecture.md#storage).

The apps ask for set-based operations -- write many rows, update many rows,
lock-or-create keyed rows, take advisory locks, stream ids -- and each one
here has a PostgreSQL path (binary or text ``COPY``, ``unnest`` arrays, row
locks, server-side cursors: no Python work per row) and an SQLite path
(``executemany``, keyset batches; SQLite has no row locks: a writing
transaction holds the whole database).  Nothing else outside migrations,
tests and the audit's own dialect module (``audit.sql``) asks which database
it is on.  Plumbing: this module imports no app.
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import numpy as np
from django.db import Error, connection, models, transaction

from . import pgbinary

#: Most parameters one SQLite statement takes (its historical SQLITE_MAX_VARIABLE_NUMBER is 999).
SQLITE_MAX_PARAMS = 900
#: Up to this many rows, ``write_columns`` and ``update_columns`` send one plain statement on PostgreSQL: a
#: purchase's two money movements took 4 ms through a temporary table and COPY, 2 ms this way (E3's phases).
SMALL = 8


def is_postgresql() -> bool:
    """Whether the default database is PostgreSQL (otherwise SQLite, the tests' and the demo's default)."""
    return connection.vendor == "postgresql"


def has_binary_copy() -> bool:
    """Whether binary ``COPY`` is available: PostgreSQL through psycopg 3 (its ``cursor.copy``)."""
    if not is_postgresql():
        return False
    # PostgreSQL only: Django's PostgreSQL backend needs psycopg, which an SQLite set-up need not have
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return is_psycopg3


def int64_le_at(blob: str, index: str) -> str:
    """An SQL expression: the little-endian int64 at position ``index`` (8 bytes each) of the binary column
    ``blob``, for values in [0, 2**40) (micro-epsilons).  PostgreSQL: ``get_byte`` arithmetic; SQLite: a function
    of this module registered on the connection."""
    if is_postgresql():
        return "(" + " + ".join(f"get_byte({blob}, ({index}) * 8 + {k})::bigint * {256 ** k}" for k in range(5)) + ")"
    connection.ensure_connection()
    connection.connection.create_function("ldp_int64_le", 2, _int64_le, deterministic=True)
    return f"ldp_int64_le({blob}, {index})"


def unflattened(select: str) -> str:
    """A table expression: the query ``select``, computed as written.  PostgreSQL: ``OFFSET 0`` keeps the planner
    from merging it into the query around it, so what it computes per row (a chain head read from its block, say)
    is computed there, and only its result travels on through the joins.  SQLite: the query in parentheses."""
    return f"({select} OFFSET 0)" if is_postgresql() else f"({select})"


def in_memory(blob: str) -> str:
    """An SQL expression: the binary column ``blob`` as a value in memory.  PostgreSQL stores a large one (a chain
    block's ``heads``: 8 bytes a slot) compressed or out of line and decompresses it at every use: each
    ``get_byte`` of :func:`int64_le_at` would decompress the whole blob again.  A copy made once per row
    (``|| ''``, in an :func:`unflattened` query) is read from memory instead (ten times faster for a block's
    values).  SQLite: the column."""
    return f"({blob} || ''::bytea)" if is_postgresql() else blob


def _int64_le(blob, index):
    return None if blob is None or index is None else int.from_bytes(bytes(blob)[index * 8:index * 8 + 8], "little")


def _adapt(rows):
    """Values as Django would store them on SQLite (datetimes; decimals go through Django's sqlite3 adapter)."""
    ops = connection.ops
    for row in rows:
        yield tuple(ops.adapt_datetimefield_value(v) if isinstance(v, datetime) else v for v in row)


# ------------------------------------------------------------------------------------------- array columns

class Int64ArrayField(models.Field):
    """A one-dimensional array of 64-bit integers, read as a numpy ``int64`` array: ``bigint[]`` on PostgreSQL
    (written by binary ``COPY``: ``pgbinary.Column.int8_array``; unnested by SQL views), the JSON text of the
    list on SQLite (``json_each`` unnests it).  The compact ledger keeps its per-value columns in such arrays
    (docs/budget-rules.md#the-ledger)."""

    description = "A one-dimensional array of 64-bit integers"

    def db_type(self, connection):
        return "bigint[]" if connection.vendor == "postgresql" else "text"

    def from_db_value(self, value, expression, connection):
        if value is None:
            return None
        if isinstance(value, str):
            value = json.loads(value)
        return np.asarray(value, dtype=np.int64)

    def to_python(self, value):
        if value is None or isinstance(value, np.ndarray):
            return value
        if isinstance(value, str):
            value = json.loads(value)
        return np.asarray(value, dtype=np.int64)

    def get_db_prep_value(self, value, connection, prepared=False):
        if value is None:
            return None
        ints = [int(v) for v in np.asarray(value, dtype=np.int64).tolist()]
        return ints if connection.vendor == "postgresql" else json.dumps(ints, separators=(",", ":"))

    def value_to_string(self, obj):
        value = self.value_from_object(obj)
        return "" if value is None else json.dumps(np.asarray(value).tolist())


def value_ranges_overlap(low: str, high: str, ids: list[int]) -> tuple[str, list] | None:
    """A WHERE clause (and its parameters) keeping the rows whose ``[low, high]`` range of ids holds one of
    ``ids``: PostgreSQL ``int8range(low, high, '[]') && '{[a,a],[b,b],...}'::int8multirange``, which a GiST index
    on that expression serves; ``None`` on SQLite (no index to use: the caller's own filter suffices)."""
    if not ids or not is_postgresql():
        return None
    ranges = "{" + ",".join(f"[{int(v)},{int(v)}]" for v in ids) + "}"
    return f"int8range({low}, {high}, '[]') && %s::int8multirange", [ranges]


# ------------------------------------------------------------------------------------------- writing rows

def insert_rows(table: str, columns: list[str], rows) -> None:
    """Append ``rows`` (tuples in ``columns`` order) to ``table``.

    PostgreSQL: one text ``COPY table (columns) FROM STDIN``.  SQLite: one ``INSERT`` executemany.
    """
    rows = list(rows)
    if not rows:
        return
    cols = ", ".join(columns)
    with connection.cursor() as cur:
        if is_postgresql():
            with cur.cursor.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join(["%s"] * len(columns))
            cur.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", list(_adapt(rows)))


def update_rows(table: str, key: str, columns: list[str], rows, *, types: dict[str, str]) -> None:
    """``UPDATE table SET col = value ... WHERE key = row key`` for every row ``(key, *values)``.

    The caller holds the rows' locks and computed the final values.  PostgreSQL: text ``COPY`` into a
    temporary table (``types`` gives each column's SQL type) and one ``UPDATE ... FROM``.  SQLite: one
    ``UPDATE`` executemany.
    """
    rows = list(rows)
    if not rows:
        return
    with connection.cursor() as cur:
        if is_postgresql():
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


def write_columns(table: str, columns: dict[str, pgbinary.Column], n: int) -> None:
    """Append ``n`` rows given as columns (``pgbinary.Column``) to ``table``; row order is not kept.

    PostgreSQL (psycopg 3): one binary ``COPY`` built by numpy (``pgbinary.copy_columns``), no Python object
    per row.  SQLite: one ``INSERT`` executemany of the columns' Python values (``Column.values``).
    """
    if n == 0:
        return
    # A few rows of scalars: one INSERT ... VALUES, cheaper than setting up a COPY (bytes and arrays go by COPY:
    # an INSERT would quote them as text)
    blobs = any(col.data.ndim > 1 and col.kind != "numeric" for col in columns.values())
    if n <= SMALL and not blobs and is_postgresql():
        names = list(columns)
        rows = list(_adapt(zip(*(col.values() for col in columns.values()))))
        marks = ", ".join(["(" + ", ".join(["%s"] * len(names)) + ")"] * n)
        with connection.cursor() as cur:
            cur.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES {marks}", [v for r in rows for v in r])
        return
    if has_binary_copy():
        # (the raw psycopg cursor's errors come out as Django's: a UNIQUE violation is an IntegrityError)
        with connection.cursor() as cur, connection.wrap_database_errors:
            pgbinary.copy_columns(cur.cursor, table, columns, n)
        return
    insert_rows(table, list(columns), zip(*(col.values() for col in columns.values())))


def check_deferred_constraints() -> None:
    """Run the row checks the transaction has deferred so far (foreign keys), now rather than at commit, and
    defer the later ones again.  PostgreSQL: ``SET CONSTRAINTS ALL IMMEDIATE`` then ``... DEFERRED`` (a purchase
    does this before it takes the one lock all purchases share, so that its commit is short).  SQLite: nothing
    (its checks run at commit, under its database lock)."""
    if not is_postgresql():
        return
    with connection.cursor() as cur:
        cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cur.execute("SET CONSTRAINTS ALL DEFERRED")


def update_columns(table: str, key: str, columns: dict[str, pgbinary.Column], n: int, *,
                   types: dict[str, str], temp: str) -> int:
    """``UPDATE table SET col = value ... WHERE key = row key`` for ``n`` rows given as columns (``key``'s
    among them); returns the number of rows updated.  The caller holds the rows' locks.

    PostgreSQL (psycopg 3): a temporary table ``temp`` (``types`` gives each column's SQL type), one binary
    ``COPY`` into it, one ``UPDATE table a ... FROM temp t``, and it is dropped.  SQLite: one ``UPDATE``
    executemany of the columns' Python values.
    """
    if n == 0:
        return 0
    names = list(columns)
    others = [c for c in names if c != key]
    with connection.cursor() as wrapper:
        if n <= SMALL and is_postgresql():  # a few rows: one UPDATE ... FROM (VALUES ...), no temporary table
            rows = list(_adapt(zip(*(columns[c].values() for c in names))))
            marks = ", ".join(["(" + ", ".join(f"%s::{types[c]}" for c in names) + ")"] * n)
            sets = ", ".join(f"{c} = t.{c}" for c in others)
            wrapper.execute(f"UPDATE {table} a SET {sets} FROM (VALUES {marks}) t({', '.join(names)}) "
                            f"WHERE a.{key} = t.{key}", [v for r in rows for v in r])
            return wrapper.rowcount
        if has_binary_copy():
            cur = wrapper.cursor
            cur.execute(f"CREATE TEMP TABLE {temp} ({', '.join(f'{c} {types[c]}' for c in names)}) ON COMMIT DROP")
            pgbinary.copy_columns(cur, temp, columns, n)
            sets = ", ".join(f"{c} = t.{c}" for c in others)
            cur.execute(f"UPDATE {table} a SET {sets} FROM {temp} t WHERE a.{key} = t.{key}")
            updated = cur.rowcount
            cur.execute(f"DROP TABLE {temp}")
            return updated
        sets = ", ".join(f"{c} = %s" for c in others)
        values = [columns[c].values() for c in [*others, key]]
        wrapper.executemany(f"UPDATE {table} SET {sets} WHERE {key} = %s", list(_adapt(zip(*values))))
        return wrapper.rowcount


def int_array_literal(ids) -> str:
    """The text form ``{1,2,3}`` of an integer array, bound as one string and cast in SQL (``%s::bigint[]``):
    measured 3x faster than letting psycopg quote a Python list element by element (Django binds parameters
    client-side), about 0.3 us per element."""
    return "{" + ",".join(map(str, np.asarray(ids, dtype=np.int64).tolist())) + "}"


def set_where_in(table: str, key: str, ids: np.ndarray, values: dict[str, object], *, alias: str = "t") -> None:
    """``UPDATE table SET col = value ... WHERE key IN ids``: the same values for every row (ids: integers).

    PostgreSQL: one statement, the ids as one array (``UPDATE table alias SET ... FROM unnest(%s::bigint[])
    u(id) WHERE alias.key = u.id``), planned as index probes (``index_probes``; ``key`` must be indexed).
    SQLite: one ``UPDATE ... WHERE key = %s`` executemany.
    """
    if ids.size == 0:
        return
    cols, params = list(values), list(values.values())
    sets = ", ".join(f"{c} = %s" for c in cols)
    if is_postgresql():
        with index_probes(), connection.cursor() as cur:
            cur.execute(f"UPDATE {table} {alias} SET {sets} FROM unnest(%s::bigint[]) u(id) "
                        f"WHERE {alias}.{key} = u.id", [*params, int_array_literal(ids)])
        return
    with connection.cursor() as cur:
        fixed = next(_adapt([params]))
        cur.executemany(f"UPDATE {table} SET {sets} WHERE {key} = %s", [(*fixed, i) for i in ids.tolist()])


#: The planner settings ``index_probes`` turns off for the statements inside it.
_JOIN_METHODS = ("enable_hashjoin", "enable_mergejoin")


@contextmanager
def index_probes():
    """PostgreSQL: the statements inside are planned without hash or merge joins, so that a statement keyed by an
    array of ids (``FROM unnest(ids) u(id) WHERE t.key = u.id``) probes ``key``'s index once per id: its cost
    grows with the ids, never with the table.  Left to itself the planner hashes the whole table once the array
    is large, which costs the table's size (a purchase of 10^5 values beside 10^7 other budget rows paid for
    10^7) and spills to disk beyond ``work_mem``.  Measured on PostgreSQL 15, 128 MB ``shared_buffers``, a
    budget table of 10^7 rows: 4.4-5.2 us per row for 10^5, 10^6 and 10^7 ids as probes; hashed 36, 8.9 and
    25 us (docs/architecture.md#updates-keyed-by-an-array-of-ids).

    The settings are ``SET LOCAL`` (``set_config(..., true)``) inside one transaction and put back as they
    were on the way out; an error rolls them back with the statement.
    """
    with transaction.atomic(savepoint=False), connection.cursor() as cur:
        off = ", ".join(f"set_config('{name}', 'off', true)" for name in _JOIN_METHODS)
        now = ", ".join(f"current_setting('{name}') AS {name}" for name in _JOIN_METHODS)
        cur.execute(f"SELECT {', '.join(_JOIN_METHODS)}, {off} FROM (SELECT {now}) before")
        before = cur.fetchone()[:len(_JOIN_METHODS)]
        yield
        restore = ", ".join(f"set_config('{name}', %s, true)" for name in _JOIN_METHODS)
        cur.execute(f"SELECT {restore}", list(before))


# ------------------------------------------------------------------------------------------- locking

def lock_or_create(table: str, key: str, keys: np.ndarray, *, select: str, match: dict[str, object],
                   defaults: dict[str, object]) -> list[tuple]:
    """The rows ``SELECT select FROM table WHERE match AND key IN keys``, locked, the missing ones created
    first (with ``match`` and ``defaults``; a unique constraint on ``key`` and ``match`` makes creation
    idempotent).  ``keys`` are distinct integers; rows come back in no particular order.

    PostgreSQL: one ``SELECT ... WHERE key = ANY(array) ORDER BY id FOR UPDATE``; only if some row is missing,
    one ``INSERT ... SELECT FROM unnest(array) ON CONFLICT DO NOTHING`` and the same ``SELECT`` again
    (re-locking a held row is free), so the locks are still taken in id order whatever a concurrent
    transaction created meanwhile.  SQLite (no row locks; the transaction holds the database's write lock):
    one ``INSERT OR IGNORE`` executemany, then the ``SELECT`` in chunks of keys.
    """
    if keys.size == 0:
        return []
    where = " AND ".join(f"{c} = %s" for c in match)
    fixed = list(match.values())
    with connection.cursor() as cur:
        if is_postgresql():
            lock = (f"SELECT {select} FROM {table} WHERE {where} AND {key} = ANY(%s::bigint[]) "
                    f"ORDER BY id FOR UPDATE")
            array = int_array_literal(keys)
            cur.execute(lock, [*fixed, array])
            rows = cur.fetchall()
            if len(rows) < keys.size:
                cols = ", ".join([key, *match, *defaults])
                marks = ", ".join(["u"] + ["%s"] * (len(match) + len(defaults)))
                cur.execute(f"INSERT INTO {table} ({cols}) SELECT {marks} FROM unnest(%s::bigint[]) u "
                            f"ON CONFLICT DO NOTHING", [*fixed, *defaults.values(), array])
                cur.execute(lock, [*fixed, array])
                rows = cur.fetchall()
            return rows
        cols = ", ".join([key, *match, *defaults])
        marks = ", ".join(["%s"] * (1 + len(match) + len(defaults)))
        tail = [*fixed, *defaults.values()]
        cur.executemany(f"INSERT OR IGNORE INTO {table} ({cols}) VALUES ({marks})",
                        list(_adapt((k, *tail) for k in keys.tolist())))
        rows = []
        step = SQLITE_MAX_PARAMS - len(fixed)
        for start in range(0, keys.size, step):
            chunk = keys[start:start + step].tolist()
            cur.execute(f"SELECT {select} FROM {table} WHERE {where} AND {key} IN ({', '.join(['%s'] * len(chunk))})",
                        [*fixed, *chunk])
            rows += cur.fetchall()
        return rows


@contextmanager
def advisory_lock_shared(classid: int, objid: int):
    """Hold the shared advisory lock ``(classid, objid)`` for the block: others may hold it too, and
    ``advisory_locks_held`` sees it.

    PostgreSQL: ``pg_advisory_xact_lock_shared`` inside a transaction (held until it ends), otherwise
    ``pg_advisory_lock_shared`` held by the session and released at the end of the block (a killed process's
    lock ends with its session).  SQLite: nothing (no concurrent sessions to tell).
    """
    if not is_postgresql():
        yield
        return
    key = [int(classid), int(objid)]
    scoped = connection.in_atomic_block
    with connection.cursor() as cur:
        cur.execute(f"SELECT pg_advisory{'_xact' if scoped else ''}_lock_shared(%s, %s)", key)
    try:
        yield
    finally:
        if not scoped:
            try:
                with connection.cursor() as cur:
                    cur.execute("SELECT pg_advisory_unlock_shared(%s, %s)", key)
            except Error:  # the session is gone, and its lock with it
                pass


def advisory_locks_held(classid: int) -> set[int]:
    """Second keys of the two-key advisory locks ``(classid, k)`` some session holds now, in this database.

    PostgreSQL: read from ``pg_locks``.  SQLite: the empty set (``advisory_lock_shared`` takes nothing).
    """
    if not is_postgresql():
        return set()
    with connection.cursor() as cur:
        cur.execute("SELECT DISTINCT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND classid = %s::bigint::oid AND objsubid = 2 "
                    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                    [int(classid)])
        return {r[0] for r in cur.fetchall()}


def row_not_held(alias: str) -> str:
    """An SQL condition on the row ``alias`` of a table: no transaction still running has locked or updated it.
    It takes no lock itself, so it never makes a writer wait, nor a writer's ``NOWAIT`` fail (a ``SKIP LOCKED``
    read would hold the rows it reads).

    PostgreSQL: the row's ``xmax`` (the last transaction that locked, updated or deleted it) is not the id of a
    transaction or subtransaction that is still running, as ``pg_locks`` shows (each running one holds the lock of
    its own id).  A row locked by several transactions at once has a multixact id there instead, which this does
    not resolve: for the rows it is used on (unfinished purchases, which only their executing transaction locks)
    that does not happen.  SQLite: always true (no row locks; a writing transaction holds the whole database).
    """
    if not is_postgresql():
        return "1 = 1"
    return (f"NOT EXISTS (SELECT 1 FROM pg_locks held WHERE held.locktype = 'transactionid' AND held.granted "
            f"AND held.transactionid = {alias}.xmax)")


# ------------------------------------------------------------------------------------------- reading

def id_batches(ids, key: str, batch_size: int) -> Iterator[list]:
    """The values of ``ids`` (a ``values_list(key, flat=True)`` queryset ordered by ``key``) in lists of
    ``batch_size``, each read after the caller has handled the previous one (it may commit in between).

    PostgreSQL outside a transaction: one query, streamed from a server-side cursor (``WITH HOLD`` in
    autocommit, so it outlives each batch's commit); re-running the query per batch would cost a scan per
    batch, quadratic in the ids.  Elsewhere (SQLite, or inside a transaction): keyset batches
    (``key > last``).
    """
    if is_postgresql() and not connection.in_atomic_block:
        stream = ids.iterator(chunk_size=batch_size)
        while batch := list(itertools.islice(stream, batch_size)):
            yield batch
        return
    last = None
    while True:
        page = ids if last is None else ids.filter(**{f"{key}__gt": last})
        batch = list(page[:batch_size])
        if not batch:
            return
        yield batch
        last = batch[-1]

