"""The PostgreSQL fast path of chain extension (``market.pgcopy``) against the generic ORM path.

Both paths take the same rows in the same order and call ``chains.grow`` alike,
so with the same seeded generator they must store byte-identical chains.  Run
with ``DATABASE_URL`` pointing at PostgreSQL; on SQLite the database tests are
skipped (the binary-format unit tests at the end run everywhere).
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
from market import chains, pgcopy, services
from market.models import Attribute, Chain, Value
from market.tasks import extend_chains
from tests.factories import CategoricalAttributeFactory, StringAttributeFactory, make_owners

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
    return [(bytes(e), bytes(o), n, h, bytes(ho), u) for e, o, n, h, ho, u in
            Chain.objects.filter(value__attribute=attribute).order_by("value_id")
            .values_list("epsilons", "outputs", "length", "head", "head_output", "updated_at")]


def _expected_points(attribute: Attribute, ceiling: str) -> np.ndarray:
    grid = chains.Grid.of(attribute)
    top = int(grid.last_point_upto(np.array([to_micro(Decimal(ceiling))]))[0])
    return np.arange(grid.start, top + 1, grid.step, dtype=np.int64)


def _check_decodes(attribute: Attribute, ceilings: list[str]) -> None:
    """Every chain decodes to the grid up to its ceiling, outputs in range, head and last step agree."""
    width, m = attribute.width, attribute.domain_size
    stored = _stored(attribute)
    for (eps_blob, out_blob, length, head, head_output, _), c in zip(stored, ceilings, strict=True):
        eps, out = chains.decode(eps_blob, out_blob, width)
        points = _expected_points(attribute, c)
        np.testing.assert_array_equal(eps, points)
        assert length == points.size == out.shape[0]
        assert head == from_micro(int(points[-1]))
        assert out.min() >= 0 and out.max() < m
        assert np.frombuffer(head_output, dtype=chains.OUT).tolist() == out[-1].tolist()


@pytest.fixture
def fast_calls(monkeypatch):
    """Counts batches that went through ``pgcopy.extend_batch`` (so a test knows the fast path ran)."""
    calls = []
    original = pgcopy.extend_batch

    def spy(*args, **kwargs):
        calls.append(args[2])
        return original(*args, **kwargs)

    monkeypatch.setattr(pgcopy, "extend_batch", spy)
    return calls


pg = pytest.mark.postgres


@pg
@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["categorical", "string"])
@pytest.mark.parametrize("batch_size", [1000, 7])
def test_fast_and_generic_paths_store_identical_chains(kind, batch_size, fast_calls, monkeypatch):
    """Same inputs, same seeded generator: byte-identical epsilons, outputs, lengths and heads.

    The ceilings mix 0, 1, 2, 9, 19 and 31 new steps in every batch; batch_size 7 makes
    several batches inside one test transaction (the temporary table must not linger).
    """
    fast_attr, generic_attr = _attribute(kind), _attribute(kind)
    n = 40
    fast_values, generic_values = _values(fast_attr, n), _values(generic_attr, n)
    assert [r[:5] for r in _stored(fast_attr)] == [r[:5] for r in _stored(generic_attr)]  # same start
    ceilings = _raise(fast_values, CEILINGS)
    _raise(generic_values, CEILINGS)
    growing = sum(1 for c in ceilings if _expected_points(fast_attr, c).size > 1)

    assert services.chains_extend(attribute_id=fast_attr.id, batch_size=batch_size,
                                  rng=np.random.default_rng(99)) == growing
    assert fast_calls, "the PostgreSQL fast path did not run"
    calls = len(fast_calls)
    monkeypatch.setattr(pgcopy, "enabled", lambda: False)
    assert services.chains_extend(attribute_id=generic_attr.id, batch_size=batch_size,
                                  rng=np.random.default_rng(99)) == growing
    assert len(fast_calls) == calls, "the generic path went through pgcopy"

    fast, generic = _stored(fast_attr), _stored(generic_attr)
    assert [r[:5] for r in fast] == [r[:5] for r in generic]
    _check_decodes(fast_attr, ceilings)


@pg
@pytest.mark.django_db
def test_rerun_is_a_noop_and_task_path(fast_calls):
    attribute = _attribute()
    values = _values(attribute, 30)
    ceilings = _raise(values, CEILINGS)
    grown = extend_chains.apply(args=[attribute.id]).get()
    assert grown == sum(1 for c in ceilings if _expected_points(attribute, c).size > 1)
    before = _stored(attribute)
    assert extend_chains.apply(args=[attribute.id]).get() == 0
    assert services.chains_extend(attribute_id=attribute.id, batch_size=4) == 0
    assert _stored(attribute) == before  # not even updated_at moved
    _check_decodes(attribute, ceilings)
    assert fast_calls


@pg
@pytest.mark.django_db
def test_mixed_step_counts_in_one_batch_and_restricted_ids(fast_calls):
    attribute = _attribute()
    values = _values(attribute, 70)
    ceilings = _raise(values, CEILINGS)
    chosen = [v.id for v in values[::3]]
    extended = services.chains_extend(attribute_id=attribute.id, value_ids=chosen, batch_size=10_000)
    assert extended == sum(1 for i in range(0, 70, 3) if _expected_points(attribute, ceilings[i]).size > 1)
    assert len(fast_calls) == 1
    for i, row in enumerate(_stored(attribute)):
        want = _expected_points(attribute, ceilings[i] if i % 3 == 0 else "0.1").size
        assert row[2] == want
    services.chains_extend(attribute_id=attribute.id)
    _check_decodes(attribute, ceilings)


@pg
@pytest.mark.django_db
def test_sparse_ids_take_the_index_lookup_plan(fast_calls):
    """Ids far apart (span > DENSE_SPAN x count) are read by index lookups, not range scans: same result."""
    attribute = _attribute()
    values = _values(attribute, 70)
    ceilings = _raise(values, ["3.2"] * 69 + ["0.35"])
    chosen = [values[0].id, values[40].id, values[69].id]
    assert max(chosen) - min(chosen) + 1 > pgcopy.DENSE_SPAN * len(chosen)
    assert services.chains_extend(attribute_id=attribute.id, value_ids=chosen) == 3
    lengths = dict(Chain.objects.filter(value__attribute=attribute).values_list("value_id", "length"))
    assert {vid: n for vid, n in lengths.items() if n > 1} == {values[0].id: 32, values[40].id: 32,
                                                                values[69].id: 3}
    services.chains_extend(attribute_id=attribute.id)
    _check_decodes(attribute, ceilings)


@pg
@pytest.mark.django_db
def test_value_with_deleted_raw_is_skipped(fast_calls):
    attribute = _attribute()
    values = _values(attribute, 12)
    services.value_delete_raw(value_id=values[5].id)
    assert Value.objects.get(id=values[5].id).input_sealed is None
    _raise(values, ["2"])
    before = Chain.objects.get(value_id=values[5].id)
    assert services.chains_extend(attribute_id=attribute.id) == 11
    after = Chain.objects.get(value_id=values[5].id)
    assert (bytes(after.epsilons), after.length, after.head, after.updated_at) == \
        (bytes(before.epsilons), 1, Decimal("0.1"), before.updated_at)
    heads = dict(Chain.objects.filter(value__attribute=attribute).values_list("value_id", "head"))
    assert all(h == Decimal("2") for vid, h in heads.items() if vid != values[5].id)
    assert fast_calls


@pg
@pytest.mark.django_db
def test_a_failing_batch_leaves_every_chain_untouched(monkeypatch):
    """The UPDATE runs for part of the rows, then the batch fails: all of it rolls back; a rerun completes."""
    attribute = _attribute()
    values = _values(attribute, 25)
    ceilings = _raise(values, CEILINGS)
    before = _stored(attribute)
    original = pgcopy.growth_bodies
    monkeypatch.setattr(pgcopy, "growth_bodies", lambda *a: original(*a)[:1])  # only one step-count group
    with pytest.raises(RuntimeError, match="instead of"):
        services.chains_extend(attribute_id=attribute.id)
    assert _stored(attribute) == before
    monkeypatch.setattr(pgcopy, "growth_bodies", original)
    services.chains_extend(attribute_id=attribute.id)
    _check_decodes(attribute, ceilings)


@pg
@pytest.mark.django_db(transaction=True)
def test_a_chain_locked_elsewhere_is_waited_for_and_not_extended_twice():
    """Locks are blocking, in value-id order (as the generic path): a chain held by another transaction
    is waited for; if that transaction extended it meanwhile, the re-checked filter drops it (no double
    extension); a chain only held (not changed) is extended once the lock is released."""
    attribute = _attribute()
    values = _values(attribute, 10)
    ceilings = _raise(values, ["1"])
    extended_elsewhere, held_only = values[3].id, values[6].id
    holding, results = threading.Event(), {}

    def hold(extend: bool):
        try:
            with transaction.atomic():
                if extend:  # a concurrent run (or a purchase) extends this chain and commits later
                    results["other"] = services.chains_extend(attribute_id=attribute.id,
                                                              value_ids=[extended_elsewhere])
                list(Chain.objects.select_for_update().filter(value_id__in=[extended_elsewhere, held_only])
                     .values_list("value_id"))
                holding.set()
                time.sleep(1.0)
        except Exception as exc:  # noqa: BLE001 - reported below
            results["error"] = repr(exc)
        finally:
            holding.set()
            connection.close()

    thread = threading.Thread(target=hold, args=(True,))
    thread.start()
    assert holding.wait(30)
    start = time.monotonic()
    extended = services.chains_extend(attribute_id=attribute.id)
    waited = time.monotonic() - start
    thread.join(30)
    assert "error" not in results, results["error"]
    assert results["other"] == 1
    assert extended == 9 and waited > 0.5
    _check_decodes(attribute, ceilings)  # every chain, the contested one too, is 0.1 .. 1.0 exactly once
    assert services.chains_extend(attribute_id=attribute.id) == 0


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


@pg
@pytest.mark.django_db
def test_numeric_heads_written_in_binary_round_trip():
    micro = np.array([0, 1, 99, 100_000, 2_050_000, 3_141_592, 699_999_999, 700_000_000])
    with connection.cursor() as wrapper:
        wrapper.execute("CREATE TEMP TABLE ldp_numeric_check (id bigint, head numeric(12, 6))")
        pgcopy.copy_in(wrapper.cursor, "ldp_numeric_check",
                       [pgcopy.binary_rows([np.arange(micro.size), pgcopy._numeric_micro(micro)])])
        wrapper.execute("SELECT head FROM ldp_numeric_check ORDER BY id")
        heads = [row[0] for row in wrapper.fetchall()]
        wrapper.execute("DROP TABLE ldp_numeric_check")
    assert heads == [from_micro(int(m)) for m in micro]
