"""The PostgreSQL fast path of chain extension's read (``market.chains.pgcopy.extension_rows``) against the generic
ORM path (``market.chains.extension.extension_rows``).

Both paths read the same rows in the same (block, slot) order, and extension calls ``chains.grow`` alike on
them, so with the same seeded generator they must store the same chains.  Run with ``DATABASE_URL`` pointing at
PostgreSQL; on SQLite the database tests are skipped (the binary-format unit tests at the end run everywhere).
"""
from __future__ import annotations

import struct
import threading
import time
from decimal import Decimal

import numpy as np
import pytest
from django.db import connection, transaction

from accounts.epsilon import from_micro, to_micro
from accounts.models import BudgetAccount
from market.chains import grow as chains
from market.chains import pgcopy
from market.chains import store as chainstore
from market.chains.extension import chains_extend, extension_rows
from market.models import Attribute, ChainBlock, ChainPoint, Value
from market.tasks import extend_chains
from market.values import services
from tests.factories import (
    CategoricalAttributeFactory,
    StringAttributeFactory,
    chain_heads,
    chain_rows,
    make_owners,
    stored_chains,
)

LABELS = ["a", "b", "c", "d", "e"]
#: Ceilings giving 0 (equal to the head, or between grid points), 1, 2, 9, 19 and 31 new steps from 0.1.
CEILINGS = ["0.1", "0.15", "0.2", "0.35", "1", "2.05", "3.2"]


def _attribute(kind: str = "categorical", **kw) -> Attribute:
    if kind == "string":
        return StringAttributeFactory(**kw)
    return CategoricalAttributeFactory(labels=LABELS, **kw)


def _raws(kind: str, n: int, seed: int) -> list:
    gen = np.random.default_rng(seed)
    if kind == "string":
        return [f"word{int(i)}" for i in gen.integers(0, 50, n)]
    return [LABELS[int(i)] for i in gen.integers(0, len(LABELS), n)]


def _values(attribute: Attribute, n: int, *, seed: int = 1, prefix: str = "pg") -> list[Value]:
    owners = make_owners(n, prefix=f"{prefix}-{attribute.id}")
    return services.values_create_many(attribute=attribute, owners=owners,
                                       raws=_raws(attribute.kind, n, seed), ceiling="0.1",
                                       rng=np.random.default_rng(seed))


def _raise(values: list[Value], ceilings: list[str]) -> list[str]:
    """Give value i the ceiling ``ceilings[i % len]``; returns each value's ceiling."""
    per_value = [ceilings[i % len(ceilings)] for i in range(len(values))]
    for c in set(per_value):
        BudgetAccount.objects.filter(value_id__in=[v.id for v, pc in zip(values, per_value) if pc == c]) \
            .update(ceiling=Decimal(c))
    return per_value


def _stored(attribute: Attribute) -> list[tuple]:
    """Each value's chain, opened, by value id: ``(epsilons bytes, outputs bytes, length, head)``."""
    rows = chain_rows(attribute)
    return [rows[v] for v in sorted(rows)]


def _at_rest(attribute: Attribute) -> tuple:
    """The stored rows themselves (sealed bytes, bitmaps, heads, revisions): a write changes them."""
    points = [(b, e, bytes(p), bytes(s), r) for b, e, p, s, r in ChainPoint.objects.filter(attribute=attribute)
              .order_by("block_id", "epsilon").values_list("block_id", "epsilon", "present", "sealed", "revision")]
    blocks = [(i, bytes(h), r) for i, h, r in ChainBlock.objects.filter(attribute=attribute).order_by("index")
              .values_list("index", "heads", "revision")]
    return points, blocks


def _expected_points(attribute: Attribute, ceiling: str) -> np.ndarray:
    grid = chains.Grid.of(attribute)
    top = int(grid.last_point_upto(np.array([to_micro(Decimal(ceiling))]))[0])
    return np.arange(grid.start, top + 1, grid.step, dtype=np.int64)


def _check_decodes(attribute: Attribute, ceilings: list[str]) -> None:
    """Every chain is the grid up to its ceiling, outputs in range, and its block's head is its last point."""
    m = attribute.domain_size
    stored = stored_chains(attribute)
    values = list(Value.objects.filter(attribute=attribute).order_by("id"))
    heads = chain_heads(values)
    assert len(values) == len(ceilings)
    for v, c in zip(values, ceilings, strict=True):
        eps, out = stored[v.id]
        points = _expected_points(attribute, c)
        np.testing.assert_array_equal(eps, points)
        assert out.shape[0] == points.size
        assert heads[v.id] == (from_micro(int(points[-1])), points.size)
        assert out.min() >= 0 and out.max() < m


def _block_ids(attribute: Attribute) -> list[int]:
    return list(ChainBlock.objects.filter(attribute=attribute).order_by("index").values_list("id", flat=True))


def _generic_rows(monkeypatch, attribute, block_ids, value_ids=None) -> dict:
    with monkeypatch.context() as m:
        m.setattr(pgcopy, "enabled", lambda: False)
        return extension_rows(attribute, block_ids, value_ids)


def _assert_same_rows(fast: dict, generic: dict) -> None:
    assert set(fast) == set(generic) == {"value_id", "owner_id", "block_id", "slot", "ceiling", "key_id",
                                         "sealed"}
    for name, column in fast.items():
        assert column.dtype == generic[name].dtype, name
        np.testing.assert_array_equal(column, generic[name], err_msg=name)


@pytest.fixture
def fast_calls(monkeypatch):
    """Counts batches read through ``pgcopy.extension_rows`` (so a test knows the fast path ran)."""
    calls = []
    original = pgcopy.extension_rows

    def spy(*args, **kwargs):
        calls.append(list(args[1]))
        return original(*args, **kwargs)

    monkeypatch.setattr(pgcopy, "extension_rows", spy)
    return calls


pg = pytest.mark.postgres


@pg
@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["categorical", "string"])
def test_extension_rows_are_those_of_the_generic_path(kind, settings, monkeypatch):
    """Same columns, dtypes, rows and (block, slot) order: all blocks, some blocks, some value ids, a value
    without its input (skipped by both), an empty block list, and another attribute's blocks (nothing)."""
    settings.LDP_CHAIN_BLOCK = 8
    attribute, other = _attribute(kind), _attribute(kind)
    values = _values(attribute, 30)
    _values(other, 5, prefix="other")
    ceilings = _raise(values, CEILINGS)
    services.value_delete_raw(value_id=values[9].id)
    blocks = _block_ids(attribute)
    assert len(blocks) == 4
    assert pgcopy.enabled()

    fast = pgcopy.extension_rows(attribute, blocks)
    _assert_same_rows(fast, _generic_rows(monkeypatch, attribute, blocks))
    assert fast["value_id"].tolist() == [v.id for v in values if v.id != values[9].id]
    assert fast["ceiling"].tolist() == [to_micro(Decimal(c)) for v, c in zip(values, ceilings) if v != values[9]]
    assert fast["slot"].tolist() == [i % 8 for i in range(30) if i != 9]
    assert fast["sealed"].shape == (29, len(bytes(values[0].input_sealed)))
    assert bytes(fast["sealed"][0]) == bytes(Value.objects.get(id=values[0].id).input_sealed)

    some = [blocks[3], blocks[1]]
    _assert_same_rows(pgcopy.extension_rows(attribute, some), _generic_rows(monkeypatch, attribute, some))
    chosen = [values[0].id, values[9].id, values[17].id, values[29].id]
    fast = pgcopy.extension_rows(attribute, blocks, chosen)
    _assert_same_rows(fast, _generic_rows(monkeypatch, attribute, blocks, chosen))
    assert fast["value_id"].tolist() == [values[0].id, values[17].id, values[29].id]
    for empty in (pgcopy.extension_rows(attribute, []), pgcopy.extension_rows(attribute, _block_ids(other))):
        _assert_same_rows(empty, _generic_rows(monkeypatch, attribute, []))
        assert empty["value_id"].size == 0


@pg
@pytest.mark.django_db
def test_ceilings_are_read_as_exact_micro_epsilons(monkeypatch):
    """The binary read rounds ``ceiling * 10**6`` in the database to an integer: exactly ``to_micro``."""
    attribute = _attribute()
    values = _values(attribute, 6)
    ceilings = ["0.000001", "0.1", "2.05", "3.141592", "29.999999", "30"]
    _raise(values, ceilings)
    blocks = _block_ids(attribute)
    fast = pgcopy.extension_rows(attribute, blocks)
    assert fast["ceiling"].tolist() == [to_micro(Decimal(c)) for c in ceilings]
    _assert_same_rows(fast, _generic_rows(monkeypatch, attribute, blocks))


@pg
@pytest.mark.django_db
def test_a_sealed_input_of_another_length_is_refused_not_misread():
    """The values come as fixed-width records in one bytea: a sealed input of another length would shift every
    record after it, so the read refuses the batch (as the per-row parse did)."""
    attribute = _attribute()
    values = _values(attribute, 6)
    blocks = _block_ids(attribute)
    width = len(bytes(values[0].input_sealed))
    for length in (width + 16, width - 1):
        Value.objects.filter(id=values[2].id).update(input_sealed=b"\x01" * length)
        with pytest.raises(pgcopy.CopyFormatError, match="not of"):
            pgcopy.extension_rows(attribute, blocks)
    Value.objects.filter(id=values[2].id).update(input_sealed=values[2].input_sealed)
    assert pgcopy.extension_rows(attribute, blocks)["value_id"].tolist() == [v.id for v in values]


@pg
@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["categorical", "string"])
@pytest.mark.parametrize("batch_size", [1000, 7])
def test_fast_and_generic_paths_store_identical_chains(kind, batch_size, fast_calls, monkeypatch, settings):
    """Same inputs, same seeded generator: the same epsilons, outputs, lengths and heads.

    The ceilings mix 0, 1, 2, 9, 19 and 31 new steps in every block; with blocks of 4, batch_size 7 makes one
    block per batch, so several batches inside one test transaction.
    """
    settings.LDP_CHAIN_BLOCK = 4
    fast_attr, generic_attr = _attribute(kind), _attribute(kind)
    n = 40
    fast_values, generic_values = _values(fast_attr, n), _values(generic_attr, n)
    assert _stored(fast_attr) == _stored(generic_attr)  # same start
    ceilings = _raise(fast_values, CEILINGS)
    _raise(generic_values, CEILINGS)
    growing = sum(1 for c in ceilings if _expected_points(fast_attr, c).size > 1)

    assert chains_extend(attribute_id=fast_attr.id, batch_size=batch_size,
                                  rng=np.random.default_rng(99)) == growing
    assert len(fast_calls) == (10 if batch_size == 7 else 1), "the PostgreSQL fast path did not run per batch"
    calls = len(fast_calls)
    monkeypatch.setattr(pgcopy, "enabled", lambda: False)
    assert chains_extend(attribute_id=generic_attr.id, batch_size=batch_size,
                                  rng=np.random.default_rng(99)) == growing
    assert len(fast_calls) == calls, "the generic path went through pgcopy"

    assert _stored(fast_attr) == _stored(generic_attr)
    _check_decodes(fast_attr, ceilings)


@pg
@pytest.mark.django_db
def test_rerun_is_a_noop_and_task_path(fast_calls):
    attribute = _attribute()
    values = _values(attribute, 30)
    ceilings = _raise(values, CEILINGS)
    grown = extend_chains.apply(args=[attribute.id]).get()
    assert grown == sum(1 for c in ceilings if _expected_points(attribute, c).size > 1)
    before = _at_rest(attribute)
    assert extend_chains.apply(args=[attribute.id]).get() == 0
    assert chains_extend(attribute_id=attribute.id, batch_size=4) == 0
    assert _at_rest(attribute) == before  # nothing written: not even a row sealed again or a revision moved
    _check_decodes(attribute, ceilings)
    assert fast_calls


@pg
@pytest.mark.django_db
def test_mixed_step_counts_in_one_batch_and_restricted_ids(fast_calls):
    attribute = _attribute()
    values = _values(attribute, 70)
    ceilings = _raise(values, CEILINGS)
    chosen = [v.id for v in values[::3]]
    extended = chains_extend(attribute_id=attribute.id, value_ids=chosen, batch_size=10_000)
    assert extended == sum(1 for i in range(0, 70, 3) if _expected_points(attribute, ceilings[i]).size > 1)
    assert len(fast_calls) == 1
    for i, row in enumerate(_stored(attribute)):
        want = _expected_points(attribute, ceilings[i] if i % 3 == 0 else "0.1").size
        assert row[2] == want
    chains_extend(attribute_id=attribute.id)
    _check_decodes(attribute, ceilings)


@pg
@pytest.mark.django_db
def test_values_far_apart_read_only_their_blocks(fast_calls, settings):
    """A few values in blocks far apart: only their blocks are read, and only they grow."""
    settings.LDP_CHAIN_BLOCK = 8
    attribute = _attribute()
    values = _values(attribute, 70)
    ceilings = _raise(values, ["3.2"] * 69 + ["0.35"])
    chosen = [values[0].id, values[40].id, values[69].id]
    blocks = _block_ids(attribute)
    assert chains_extend(attribute_id=attribute.id, value_ids=chosen) == 3
    assert fast_calls == [[blocks[0], blocks[5], blocks[8]]]
    lengths = {vid: row[2] for vid, row in chain_rows(attribute).items()}
    assert {vid: n for vid, n in lengths.items() if n > 1} == {values[0].id: 32, values[40].id: 32,
                                                                values[69].id: 3}
    chains_extend(attribute_id=attribute.id)
    _check_decodes(attribute, ceilings)


@pg
@pytest.mark.django_db
def test_value_with_deleted_raw_is_skipped(fast_calls):
    attribute = _attribute()
    values = _values(attribute, 12)
    services.value_delete_raw(value_id=values[5].id)
    assert Value.objects.get(id=values[5].id).input_sealed is None
    _raise(values, ["2"])
    before = chain_rows(attribute)[values[5].id]
    assert chains_extend(attribute_id=attribute.id) == 11
    after = chain_rows(attribute)[values[5].id]
    assert after == before and after[2:] == (1, 100_000)
    heads = {vid: h for vid, (h, _) in chain_heads(Value.objects.filter(attribute=attribute)).items()}
    assert heads[values[5].id] == Decimal("0.1")
    assert all(h == Decimal(2) for vid, h in heads.items() if vid != values[5].id)
    assert fast_calls


@pg
@pytest.mark.django_db
def test_a_failing_batch_leaves_its_chains_untouched(monkeypatch, settings):
    """A batch stores its rows, then fails: all of it rolls back (the batches before it stay committed);
    a rerun completes."""
    settings.LDP_CHAIN_BLOCK = 4
    attribute = _attribute()
    values = _values(attribute, 25)  # 7 blocks; batches of two blocks
    ceilings = _raise(values, CEILINGS)
    before = chain_rows(attribute)
    original, stores = chainstore.store, []

    def store_then_fail(*args, **kwargs):
        written = original(*args, **kwargs)
        stores.append(written)
        if len(stores) == 2:
            assert written > 0
            raise RuntimeError("the batch failed after writing")
        return written

    monkeypatch.setattr(chainstore, "store", store_then_fail)
    with pytest.raises(RuntimeError, match="after writing"):
        chains_extend(attribute_id=attribute.id, batch_size=8)
    after = chain_rows(attribute)
    first_batch = {v.id for v in values[:8]}
    assert {v: r for v, r in after.items() if v not in first_batch} == \
        {v: r for v, r in before.items() if v not in first_batch}
    assert any(after[v] != before[v] for v in first_batch)  # the first batch committed
    monkeypatch.setattr(chainstore, "store", original)
    chains_extend(attribute_id=attribute.id, batch_size=8)
    _check_decodes(attribute, ceilings)


@pg
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("extend_elsewhere", [True, False])
def test_the_chain_lock_held_elsewhere_is_waited_for_and_nothing_is_extended_twice(extend_elsewhere):
    """Extension takes the attribute's chain lock before it reads: while another transaction holds it, the
    extension waits; if that transaction extended a chain meanwhile, the extension reads it grown and leaves it
    (no double extension); if it only held the lock, every chain is extended once it is released."""
    attribute = _attribute()
    values = _values(attribute, 10)
    ceilings = _raise(values, ["1"])
    extended_elsewhere = values[3].id
    holding, results = threading.Event(), {}

    def hold():
        try:
            with transaction.atomic():
                if extend_elsewhere:  # a concurrent run extends this chain and commits later
                    results["other"] = chains_extend(attribute_id=attribute.id,
                                                              value_ids=[extended_elsewhere])
                chainstore.lock(attribute.id)
                holding.set()
                time.sleep(1.0)
        except Exception as exc:  # noqa: BLE001 - reported below
            results["error"] = repr(exc)
        finally:
            holding.set()
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert holding.wait(30)
    start = time.monotonic()
    extended = chains_extend(attribute_id=attribute.id)
    waited = time.monotonic() - start
    thread.join(30)
    assert "error" not in results, results["error"]
    assert results.get("other") == (1 if extend_elsewhere else None)
    assert extended == (9 if extend_elsewhere else 10) and waited > 0.5
    _check_decodes(attribute, ceilings)  # every chain, the contested one too, is 0.1 .. 1.0 exactly once
    assert chains_extend(attribute_id=attribute.id) == 0


# --------------------------------------------------------------------------- the binary format, no database

def test_binary_rows_round_trip():
    n = 5
    ids = np.arange(n, dtype=">i8") * 1_000_003
    blob = np.arange(n * 6, dtype="<i2").reshape(n, 6)
    k = np.full(n, 3, dtype=">i4")
    data = pgcopy.HEADER + pgcopy.binary_rows([ids, blob, k]) + pgcopy.TRAILER
    rows = pgcopy.parse_rows(data, [("id", ">i8"), ("blob", ("<i2", (6,))), ("k", ">i4")])
    np.testing.assert_array_equal(rows["id"], ids)
    np.testing.assert_array_equal(rows["blob"], blob)
    np.testing.assert_array_equal(rows["k"], k)
    empty = pgcopy.parse_rows(pgcopy.HEADER + pgcopy.TRAILER, [("id", ">i8")])
    assert empty.size == 0


def test_parse_rows_refuses_nulls_and_other_widths():
    ok_row = struct.pack(">hiq", 1, 8, 7)
    null_row = struct.pack(">hi", 1, -1) + b"\0" * 8  # same size as a row, but a NULL
    with pytest.raises(pgcopy.CopyFormatError, match="NULL or an unexpected length"):
        pgcopy.parse_rows(pgcopy.HEADER + ok_row + null_row + pgcopy.TRAILER, [("id", ">i8")])
    with pytest.raises(pgcopy.CopyFormatError, match="whole number"):
        pgcopy.parse_rows(pgcopy.HEADER + ok_row + b"\0" + pgcopy.TRAILER, [("id", ">i8")])
    with pytest.raises(pgcopy.CopyFormatError):
        pgcopy.parse_rows(b"not a copy stream", [("id", ">i8")])


def test_one_row_reads_the_fields_of_a_single_row_stream():
    row = struct.pack(">hiqi", 3, 8, 42, -1) + struct.pack(">i", 3) + b"abc"
    got = pgcopy._one_row(pgcopy.HEADER + row + pgcopy.TRAILER, 3)
    assert int.from_bytes(got[0], "big") == 42 and got[1] is None and bytes(got[2]) == b"abc"
    with pytest.raises(pgcopy.CopyFormatError, match="number of fields"):
        pgcopy._one_row(pgcopy.HEADER + row + pgcopy.TRAILER, 2)
    with pytest.raises(pgcopy.CopyFormatError, match="more than one row"):
        pgcopy._one_row(pgcopy.HEADER + row + row + pgcopy.TRAILER, 3)
    with pytest.raises(pgcopy.CopyFormatError):
        pgcopy._one_row(b"not a copy stream", 3)
