"""``ldpmarket.storage``: each set-based operation does the same on PostgreSQL and on SQLite (the suite runs on
SQLite by default and on PostgreSQL when DATABASE_URL is set), and ``pgbinary.Column.values`` decodes what the
binary COPY encodes."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import numpy as np
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from accounts.ledger.hashchain import micros
from accounts.models import User
from ldpmarket import storage
from ldpmarket.pgbinary import Column
from tests.factories import make_owners

NOW = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=timezone.utc)


def _table(name: str, columns: str, unique: str | None = None) -> str:
    """A temporary table ``name`` with an integer primary key ``id`` (the test's transaction drops it)."""
    pk = "id bigserial PRIMARY KEY" if storage.is_postgresql() else "id integer PRIMARY KEY AUTOINCREMENT"
    extra = f", UNIQUE ({unique})" if unique else ""
    with connection.cursor() as cur:
        cur.execute(f"CREATE TEMP TABLE {name} ({pk}, {columns}{extra})")
    return name


def _rows(sql: str, params=()) -> list[tuple]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _dec(v, places: int) -> Decimal | None:
    """A stored numeric as an exact Decimal (SQLite hands back floats)."""
    return None if v is None else Decimal(str(v)).quantize(Decimal(1).scaleb(-places))


def _at(v) -> datetime | None:
    """A stored timestamp as an aware datetime (SQLite hands back naive UTC, or Django's text)."""
    if v is None:
        return v
    v = v if isinstance(v, datetime) else datetime.fromisoformat(v)
    return v if v.tzinfo else v.replace(tzinfo=timezone.utc)


# --------------------------------------------------------------------------- dialect

def test_the_dialect_is_the_connection_s():
    assert storage.is_postgresql() == (connection.vendor == "postgresql")
    assert storage.has_binary_copy() == storage.is_postgresql()  # the suite's PostgreSQL runs psycopg 3


# --------------------------------------------------------------------------- Column.values (no database)

def test_column_values_decode_what_binary_copy_encodes():
    null = np.array([False, True, False, False])
    assert Column.int8([5, 6, -7, 8], null=null).values() == [5, None, -7, 8]
    assert Column.int4([1, 2, 3, 4]).values() == [1, 2, 3, 4]
    assert Column.numeric([1_500_000, 9, -25, 0], 6, null=null).values() == [
        Decimal("1.500000"), None, Decimal("-0.000025"), Decimal("0.000000")]
    assert Column.numeric([12_3456, -1], 4).values() == [Decimal("12.3456"), Decimal("-0.0001")]
    stamps = [micros(NOW), micros(NOW + timedelta(days=400, microseconds=1)), 0, micros(NOW)]
    assert Column.timestamp(stamps, null=null).values() == [
        NOW, None, datetime(1970, 1, 1, tzinfo=timezone.utc), NOW]
    assert Column.text([2, 0, 1, 2], ["a", "b", ""], null=null).values() == ["", None, "b", ""]
    raw = np.frombuffer(b"abcdefgh", dtype=np.uint8).reshape(4, 2)
    assert Column(raw).values() == [b"ab", b"cd", b"ef", b"gh"]


def test_column_values_keep_decimal_places_as_from_micro_does():
    """The SQLite path binds the same Decimals the ORM would (``accounts.epsilon.from_micro``)."""
    from accounts.epsilon import from_micro

    units = [0, 1, 999_999, 1_000_000, 123_456_789]
    assert [str(d) for d in Column.numeric(units, 6).values()] == [str(from_micro(u)) for u in units]


# --------------------------------------------------------------------------- writes

@pytest.mark.django_db
def test_write_columns_appends_the_rows_with_nulls_texts_and_timestamps():
    t = _table("ldp_st_write", "k bigint, eps numeric(12, 6), memo text, at timestamp with time zone, n integer")
    n = 6
    null = np.array([False, True, False, False, True, False])
    codes = np.array([0, 1, 2, 1, 0, 2])
    choices = ["purchase", "platform fee", ""]
    stamps = np.array([micros(NOW + timedelta(hours=i, microseconds=i)) for i in range(n)])
    storage.write_columns(t, {
        "k": Column.int8(np.arange(n) * 10),
        "eps": Column.numeric(np.arange(n) * 250_001, 6, null=null),
        "memo": Column.text(codes, choices),
        "at": Column.timestamp(stamps, null=null[::-1]),
        "n": Column.int4(np.arange(n) - 2, null=null),
    }, n)
    storage.write_columns(t, {"k": Column.int8([])}, 0)  # nothing: no statement, no error
    rows = sorted(_rows(f"SELECT k, eps, memo, at, n FROM {t}"))
    assert len(rows) == n
    for i, (k, eps, memo, at, m) in enumerate(rows):
        assert k == 10 * i
        assert _dec(eps, 6) == (None if null[i] else Decimal(i * 250_001).scaleb(-6))
        assert memo == choices[codes[i]]
        assert _at(at) == (None if null[::-1][i] else NOW + timedelta(hours=i, microseconds=i))
        assert m == (None if null[i] else i - 2)


@pytest.mark.django_db
def test_insert_rows_and_update_rows():
    t = _table("ldp_st_rows", "k bigint, x numeric(12, 6), at timestamp with time zone")
    storage.insert_rows(t, ["k", "x", "at"], [(k, Decimal(k).scaleb(-6), NOW) for k in range(1, 6)])
    storage.insert_rows(t, ["k", "x", "at"], [])
    later = NOW + timedelta(seconds=1)
    storage.update_rows(t, "k", ["x", "at"], [(2, Decimal("7.5"), later), (4, Decimal("0.000001"), later)],
                        types={"k": "bigint", "x": "numeric(12,6)", "at": "timestamptz"})
    rows = {k: (_dec(x, 6), _at(at)) for k, x, at in _rows(f"SELECT k, x, at FROM {t}")}
    assert rows == {1: (Decimal("0.000001"), NOW), 2: (Decimal("7.500000"), later),
                    3: (Decimal("0.000003"), NOW), 4: (Decimal("0.000001"), later), 5: (Decimal("0.000005"), NOW)}


@pytest.mark.django_db
def test_update_columns_sets_the_rows_by_key_and_counts_them():
    t = _table("ldp_st_cols", "balance numeric(16, 4)")
    storage.insert_rows(t, ["id", "balance"], [(i, Decimal(0)) for i in range(1, 6)])
    ids = np.array([4, 1, 5])
    updated = storage.update_columns(t, "id", {"id": Column.int8(ids), "balance": Column.numeric([125, 0, 99_999], 4)},
                                     ids.size, types={"id": "bigint", "balance": "numeric(16, 4)"}, temp="ldp_st_tmp")
    assert updated == 3
    assert {i: _dec(b, 4) for i, b in _rows(f"SELECT id, balance FROM {t}")} == {
        1: Decimal("0.0000"), 2: Decimal("0.0000"), 3: Decimal("0.0000"), 4: Decimal("0.0125"), 5: Decimal("9.9999")}
    missing = storage.update_columns(t, "id", {"id": Column.int8([2, 99]), "balance": Column.numeric([1, 1], 4)}, 2,
                                     types={"id": "bigint", "balance": "numeric(16, 4)"}, temp="ldp_st_tmp")
    assert missing == 1  # the caller sees that a row was not there
    assert storage.update_columns(t, "id", {"id": Column.int8([])}, 0, types={}, temp="ldp_st_tmp") == 0


@pytest.mark.django_db
def test_set_where_in_sets_the_same_values_on_the_listed_rows_in_one_statement():
    t = _table("ldp_st_set", "v bigint, loss numeric(12, 6), at timestamp with time zone")
    storage.insert_rows(t, ["v", "loss", "at"], [(v, Decimal(0), NOW) for v in range(10, 20)])
    later = NOW + timedelta(minutes=5)
    with CaptureQueriesContext(connection) as queries:
        storage.set_where_in(t, "v", np.array([11, 13, 19]), {"loss": Decimal("0.25"), "at": later}, alias="b")
    # one UPDATE (an executemany on SQLite), never one per row; on PostgreSQL beside it the plan's settings, set
    # and put back (index_probes)
    assert len(queries) == (3 if storage.is_postgresql() else 1)
    storage.set_where_in(t, "v", np.array([], dtype=np.int64), {"loss": Decimal(9)})
    got = {v: (_dec(loss, 6), _at(at)) for v, loss, at in _rows(f"SELECT v, loss, at FROM {t}")}
    assert got == {v: ((Decimal("0.250000"), later) if v in (11, 13, 19) else (Decimal("0.000000"), NOW))
                   for v in range(10, 20)}


def _plan(sql: str) -> str:
    return "\n".join(r[0] for r in _rows("EXPLAIN " + sql))


def _join_settings() -> tuple:
    return _rows("SELECT current_setting('enable_hashjoin'), current_setting('enable_mergejoin')")[0]


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="planner settings: PostgreSQL only")
def test_set_where_in_probes_the_index():
    """Keyed by many ids, the UPDATE is planned as index probes, not as a hash of the whole table, and the
    planner's settings are as they were afterwards (docs/architecture.md#updates-keyed-by-an-array-of-ids)."""
    t = _table("ldp_st_probe", "v bigint NOT NULL UNIQUE, loss numeric(12, 6) NOT NULL")
    n = 50_000
    with connection.cursor() as cur:
        cur.execute(f"INSERT INTO {t} (v, loss) SELECT g, 0 FROM generate_series(1, {n}) g")
        cur.execute(f"ANALYZE {t}")
    ids = np.arange(1, n + 1, 2)
    with CaptureQueriesContext(connection) as queries:
        storage.set_where_in(t, "v", ids, {"loss": Decimal("0.5")}, alias="b")
    sqls = [q["sql"] for q in queries]
    assert len(sqls) == 3 and "set_config('enable_hashjoin', 'off', true)" in sqls[0] and sqls[1].startswith("UPDATE")
    update = sqls[1]
    assert _join_settings() == ("on", "on")
    assert "Hash Join" in _plan(update)  # left to itself, the planner hashes the table
    with transaction.atomic(), storage.index_probes():
        plan = _plan(update)
    assert "Nested Loop" in plan and "Index Scan" in plan and "Hash" not in plan, plan
    assert _join_settings() == ("on", "on")
    assert _rows(f"SELECT count(*), sum(loss) FROM {t} WHERE loss > 0")[0] == (ids.size, Decimal("0.5") * ids.size)


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="planner settings: PostgreSQL only")
def test_index_probes_puts_back_the_caller_s_settings_and_an_error_rolls_them_back():
    with pytest.raises(RuntimeError), transaction.atomic():
        with storage.index_probes():
            assert _join_settings() == ("off", "off")
            raise RuntimeError("the statement failed")
    assert _join_settings() == ("on", "on")
    with connection.cursor() as cur:
        cur.execute("SET LOCAL enable_mergejoin = off")  # the caller's own, to the end of the test's transaction
    with storage.index_probes():
        assert _join_settings() == ("off", "off")
    assert _join_settings() == ("on", "off")  # as the caller had them


# --------------------------------------------------------------------------- locks

@pytest.mark.django_db
def test_lock_or_create_returns_every_keyed_row_creating_only_the_missing():
    t = _table("ldp_st_acct", "user_id bigint, kind text, balance numeric(16, 4)", unique="user_id, kind")
    storage.insert_rows(t, ["user_id", "kind", "balance"],
                        [(1, "owner", Decimal("2.5")), (3, "owner", Decimal(1)), (2, "buyer", Decimal(7))])
    select = "user_id, id, CAST(round(balance * 10000) AS bigint)"
    with CaptureQueriesContext(connection) as queries:
        rows = storage.lock_or_create(t, "user_id", np.array([1, 2, 3, 4]), select=select,
                                      match={"kind": "owner"}, defaults={"balance": 0})
    got = {u: (i, b) for u, i, b in rows}
    assert sorted(got) == [1, 2, 3, 4] and len(rows) == 4
    assert got[1][1] == 25_000 and got[3][1] == 10_000 and got[2][1] == 0 and got[4][1] == 0
    if storage.is_postgresql():
        locking = [q["sql"] for q in queries if "FOR UPDATE" in q["sql"]]
        assert len(locking) == 2 and all("ORDER BY id FOR UPDATE" in q for q in locking)  # lock, create, re-lock
    again = storage.lock_or_create(t, "user_id", np.array([4, 2, 1, 3]), select=select,
                                   match={"kind": "owner"}, defaults={"balance": 0})
    assert {u: (i, b) for u, i, b in again} == got  # nothing created twice
    assert _rows(f"SELECT count(*) FROM {t}") == [(5,)]
    assert storage.lock_or_create(t, "user_id", np.array([], dtype=np.int64), select=select,
                                  match={"kind": "owner"}, defaults={"balance": 0}) == []


@pytest.mark.django_db
def test_lock_or_create_takes_more_keys_than_one_sqlite_statement_binds():
    t = _table("ldp_st_many", "user_id bigint, kind text, balance numeric(16, 4)", unique="user_id, kind")
    keys = np.arange(1, 2 * storage.SQLITE_MAX_PARAMS + 7)
    rows = storage.lock_or_create(t, "user_id", keys, select="user_id, id, 0", match={"kind": "owner"},
                                  defaults={"balance": 0})
    assert sorted(r[0] for r in rows) == keys.tolist()


@pytest.mark.django_db(transaction=True)
def test_advisory_lock_shared_is_seen_while_held_outside_a_transaction():
    classid, objid = 0x4C445054, 77  # "LDPT"
    assert objid not in storage.advisory_locks_held(classid)
    with storage.advisory_lock_shared(classid, objid):
        with storage.advisory_lock_shared(classid, objid):  # shared: taken twice
            held = storage.advisory_locks_held(classid)
    assert held == ({objid} if storage.is_postgresql() else set())
    assert objid not in storage.advisory_locks_held(classid)  # released with the block (SQLite: never taken)


@pytest.mark.django_db
def test_advisory_lock_shared_inside_a_transaction_lasts_until_it_ends():
    classid, objid = 0x4C445054, 78
    with transaction.atomic():
        with storage.advisory_lock_shared(classid, objid):
            pass
        assert storage.advisory_locks_held(classid) == ({objid} if storage.is_postgresql() else set())


# --------------------------------------------------------------------------- reading

def _owner_ids(n: int) -> list[int]:
    make_owners(n, "storage-owner")
    return list(User.objects.filter(username__startswith="storage-owner-").order_by("id")
                .values_list("id", flat=True))


def _batches(batch_size: int) -> list[list[int]]:
    ids = User.objects.filter(username__startswith="storage-owner-").order_by("id").values_list("id", flat=True)
    return list(storage.id_batches(ids, "id", batch_size))


@pytest.mark.django_db(transaction=True)
def test_id_batches_outside_a_transaction_each_batch_committing():
    """Outside a transaction (PostgreSQL: the server-side cursor): every id once, in order, while the caller
    commits a transaction per batch."""
    expected = _owner_ids(23)
    ids = User.objects.filter(username__startswith="storage-owner-").order_by("id").values_list("id", flat=True)
    batches = []
    for batch in storage.id_batches(ids, "id", 10):
        with transaction.atomic():
            User.objects.filter(id__in=batch).update(first_name="seen")
        batches.append(batch)
    assert [len(b) for b in batches] == [10, 10, 3]
    assert sum(batches, []) == expected
    assert User.objects.filter(username__startswith="storage-owner-", first_name="seen").count() == 23


@pytest.mark.django_db
def test_id_batches_inside_a_transaction_by_keyset():
    expected = _owner_ids(12)
    assert _batches(5) == [expected[:5], expected[5:10], expected[10:]]
    assert _batches(12) == [expected]
    assert list(storage.id_batches(User.objects.none().values_list("id", flat=True), "id", 5)) == []


@pytest.mark.django_db
def test_int64_le_at_reads_each_slot_of_a_little_endian_array_in_sql():
    """``storage.int64_le_at``: the same integers as numpy reads, in SQL, on either database (the sweeper reads
    chain heads with it)."""
    heads = np.array([0, 1, 255, 256, 700_000_000, 2**40 - 1, 12_345_678], dtype="<i8")
    slots = ", ".join(f"({k})" for k in range(heads.size))
    with connection.cursor() as cur:
        cur.execute(f"WITH h(b) AS (SELECT %s), s(k) AS (VALUES {slots}) "
                    f"SELECT s.k, {storage.int64_le_at('h.b', 's.k')} FROM h, s ORDER BY s.k", [heads.tobytes()])
        got = [row[1] for row in cur.fetchall()]
    assert got == heads.tolist()
