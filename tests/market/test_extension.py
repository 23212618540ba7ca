"""Chain extension (market.chains.extension.chains_extend, the extend_chains task): targets, batches, idempotency."""
from __future__ import annotations

import io
import threading
import time
from decimal import Decimal

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection, transaction

from accounts.models import BudgetAccount
from market.chains import extension, store
from market.chains import grow as chains
from market.chains.extension import _extend_batch, chains_extend
from market.models import Value
from market.tasks import extend_chains
from market.values.sealing import SealBroken
from market.values.services import value_delete_raw
from tests.factories import (
    CategoricalAttributeFactory,
    chain_head,
    chain_heads,
    chain_rows,
    contribute,
    replace_chain,
    stored_chains,
)

D = Decimal


def grid(lo: str, hi: str, step: str = "0.1") -> list[int]:
    return list(range(int(D(lo) * 10**6), int(D(hi) * 10**6) + 1, int(D(step) * 10**6)))


def set_ceilings(values, ceiling):
    BudgetAccount.objects.filter(value__in=values).update(ceiling=D(ceiling))


@pytest.fixture
def values(categorical):
    return contribute(categorical, ["red", "green", "blue"] * 10, ceiling="0.3")


def test_extension_grows_to_the_last_grid_point_and_a_rerun_changes_nothing(values, categorical):
    set_ceilings(values, "0.74")
    assert chains_extend(attribute_id=categorical.id) == 30
    stored = stored_chains(categorical)
    assert all(stored[v.id][0].tolist() == grid("0.1", "0.7") for v in values)
    assert set(chain_heads(Value.objects.filter(id__in=[v.id for v in values])).values()) == {(D("0.7"), 7)}
    before = chain_rows(categorical)
    assert chains_extend(attribute_id=categorical.id) == 0
    assert extend_chains.delay(categorical.id).get() == 0
    assert extend_chains.delay(categorical.id, [v.id for v in values]).get() == 0
    out = io.StringIO()
    call_command("extend_chains", attribute=categorical.id, stdout=out)
    assert "extended 0 chains" in out.getvalue()
    assert chain_rows(categorical) == before, "a re-run must leave every chain byte-identical"


def test_a_ceiling_between_grid_points_or_below_the_next_one_extends_nothing(values, categorical):
    set_ceilings(values, "0.399999")
    before = chain_rows(categorical)
    assert chains_extend(attribute_id=categorical.id) == 0
    assert chain_rows(categorical) == before


def test_extension_stops_at_the_grid_stop(db):
    attribute = CategoricalAttributeFactory(grid_start=D("0"), grid_step=D("0.25"), grid_stop=D("1.1"))
    vs = contribute(attribute, ["red", "blue"], ceiling="0.3")
    assert stored_chains(attribute)[vs[0].id][0].tolist() == [0, 250_000]  # epsilon 0 (uniform noise) first
    set_ceilings(vs, "5")
    assert chains_extend(attribute_id=attribute.id) == 2
    assert stored_chains(attribute)[vs[0].id][0].tolist() == [0, 250_000, 500_000, 750_000, 1_000_000]
    assert chains_extend(attribute_id=attribute.id) == 0  # head 1.0 < stop 1.1, but no grid point is left


def test_a_ceiling_below_the_grid_start_still_gets_the_first_point(db):
    attribute = CategoricalAttributeFactory(grid_start=D("0.5"), grid_step=D("0.5"))
    [v] = contribute(attribute, ["green"], ceiling="0.2")
    assert chain_head(v) == (D("0.5"), 1)  # pre-generation costs nothing
    assert chains_extend(attribute_id=attribute.id) == 0


def test_extension_makes_one_relax_call_per_grid_step_and_head_group(values, categorical, monkeypatch):
    """Vectorized: the number of relax calls depends on the grid steps and distinct heads, not on the rows."""
    set_ceilings(values[:10], "0.6")
    assert chains_extend(attribute_id=categorical.id) == 10
    calls = []
    real = chains.relax

    def counting(outputs, inputs, eps_from, eps_to, m, rng=None):
        calls.append((round(float(eps_from), 6), round(float(eps_to), 6), len(outputs)))
        return real(outputs, inputs, eps_from, eps_to, m, rng)

    monkeypatch.setattr(chains, "relax", counting)
    set_ceilings(values, "1.0")
    assert chains_extend(attribute_id=categorical.id) == 30
    # 20 rows go 0.3 -> 1.0 (7 steps), the 10 rows already at 0.6 go to 1.0 (4 steps): one call per step each
    behind = [(round(0.3 + k / 10, 6), round(0.4 + k / 10, 6), 20) for k in range(7)]
    ahead = [(round(0.6 + k / 10, 6), round(0.7 + k / 10, 6), 10) for k in range(4)]
    assert sorted(calls) == sorted(behind + ahead)
    assert all(e.tolist() == grid("0.1", "1.0") for e, _ in stored_chains(categorical).values())


def test_batches_of_whole_blocks_give_the_same_chains_shape(categorical, monkeypatch, settings):
    settings.LDP_CHAIN_BLOCK = 4
    values = contribute(categorical, ["red", "green", "blue"] * 10, ceiling="0.3")  # 8 blocks: 7 of 4, then 2
    set_ceilings(values, "0.5")
    calls = []
    real = chains.grow
    monkeypatch.setattr(chains, "grow", lambda inputs, *a, **k: calls.append(len(inputs)) or real(inputs, *a, **k))
    assert chains_extend(attribute_id=categorical.id, batch_size=8) == 30  # two blocks per batch
    assert calls == [8, 8, 8, 6]
    assert all(e.tolist() == grid("0.1", "0.5") for e, _ in stored_chains(categorical).values())
    assert chains_extend(attribute_id=categorical.id, batch_size=7) == 0


def test_only_the_named_values_and_attribute_are_extended(values, categorical):
    other = CategoricalAttributeFactory()
    others = contribute(other, ["red"] * 3, ceiling="0.3")
    set_ceilings(values + others, "0.9")
    assert extend_chains.delay(categorical.id, [values[0].id, values[5].id]).get() == 2
    heads = {v: h for v, (h, _) in chain_heads(Value.objects.all()).items()}
    assert heads[values[0].id] == heads[values[5].id] == D("0.9")
    assert {heads[v.id] for v in values[1:5] + values[6:] + others} == {D("0.3")}


def test_values_without_their_raw_datum_keep_their_chain_and_are_skipped(values, categorical):
    value_delete_raw(value_id=values[0].id)
    before = chain_rows(categorical)[values[0].id]
    set_ceilings(values, "0.5")
    assert chains_extend(attribute_id=categorical.id) == 29
    assert chain_rows(categorical)[values[0].id] == before


def test_extension_continues_from_a_head_off_the_grid(values, categorical):
    """A purchase may extend a chain to an epsilon off the grid (e.g. 0.55); the next grid point follows it."""
    v = values[0]
    eps, out = stored_chains(categorical)[v.id]
    new_eps = np.append(eps, 550_000)
    new_out = np.vstack([out, out[-1:]])
    replace_chain(v, new_eps, new_out)
    assert chain_head(v) == (D("0.55"), 4)
    set_ceilings([v], "0.8")
    assert chains_extend(attribute_id=categorical.id) == 1
    eps2, out2 = stored_chains(categorical)[v.id]
    assert eps2.tolist() == [100_000, 200_000, 300_000, 550_000, 600_000, 700_000, 800_000]
    np.testing.assert_array_equal(out2[:4], new_out)


def test_a_sealed_input_moved_to_another_value_stops_the_batch_and_changes_nothing(values, categorical):
    a, b = values[0], values[1]
    Value.objects.filter(id=a.id).update(input_sealed=Value.objects.get(id=b.id).input_sealed)
    set_ceilings(values, "0.6")
    before = chain_rows(categorical)
    with pytest.raises(SealBroken):
        chains_extend(attribute_id=categorical.id)
    assert chain_rows(categorical) == before


# ---------------------------------------------------------------------------------------------
# PostgreSQL: concurrent extension and row locks
# ---------------------------------------------------------------------------------------------

def _in_thread(fn):
    result = {}

    def run():
        try:
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            result["error"] = exc
        finally:
            connection.close()

    t = threading.Thread(target=run)
    t.start()
    return t, result


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_extensions_extend_each_chain_once():
    attribute = CategoricalAttributeFactory()
    vs = contribute(attribute, ["red", "green", "blue"] * 200, ceiling="0.2")
    set_ceilings(vs, "1.5")
    barrier = threading.Barrier(2)

    def work():
        barrier.wait()
        return chains_extend(attribute_id=attribute.id, batch_size=50)

    runs = [_in_thread(work) for _ in range(2)]
    for t, _ in runs:
        t.join(60)
    assert all("error" not in r for _, r in runs), [r.get("error") for _, r in runs]
    assert sum(r["value"] for _, r in runs) == 600  # every chain extended by exactly one of them
    stored = stored_chains(attribute)
    assert all(e.tolist() == grid("0.1", "1.5") for e, _ in stored.values())
    assert chains_extend(attribute_id=attribute.id) == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_chains_locked_by_another_transaction_are_not_silently_left_behind():
    """While a purchase (say) holds the attribute's chain lock, an extension run must either wait for it or fail
    so that Celery retries; returning normally with a chain still below its ceiling loses the extension for
    good (nothing enqueues it again until the ceiling rises once more)."""
    attribute = CategoricalAttributeFactory()
    vs = contribute(attribute, ["red", "green", "blue"], ceiling="0.2")
    set_ceilings(vs, "0.6")
    locked, released = threading.Event(), threading.Event()

    def hold_lock():
        with transaction.atomic():
            store.lock(attribute.id)
            locked.set()
            time.sleep(1.0)
        released.set()

    holder, result = _in_thread(hold_lock)
    assert locked.wait(10)
    try:
        extended = chains_extend(attribute_id=attribute.id)
    except Exception:  # noqa: BLE001 - failing (to be retried) is an acceptable answer
        extended = None
    holder.join(30)
    assert "error" not in result, result.get("error")
    heads = {v: h for v, (h, _) in chain_heads(Value.objects.filter(id__in=[v.id for v in vs])).items()}
    if extended is not None:
        assert heads[vs[1].id] == D("0.6"), (
            f"chains_extend returned {extended} but left the locked chain at {heads[vs[1].id]} below its ceiling")
    assert heads[vs[0].id] == heads[vs[2].id] == D("0.6")


def test_celery_is_configured_for_redelivery_and_beat_advances_schedules(settings):
    """What the worker-fault tests rely on, checked without a broker."""
    from ldpmarket.celery import app

    assert app.conf.task_acks_late is True and app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1
    assert "market.tasks.extend_chains" in app.tasks and "market.tasks.advance_schedules" in app.tasks
    beat = [entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()]
    assert "market.tasks.advance_schedules" in beat


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_extension_reads_each_batch_with_one_binary_copy_and_commits_per_batch(settings):
    """Each batch of whole blocks is its own transaction, and reads its values with one binary COPY
    (``market.chains.pgcopy.extension_rows``)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.LDP_CHAIN_BLOCK = 8
    attribute = CategoricalAttributeFactory()
    vs = contribute(attribute, ["red", "green", "blue"] * 20, ceiling="0.2")  # 8 blocks
    set_ceilings(vs, "0.5")
    with CaptureQueriesContext(connection) as ctx:
        assert chains_extend(attribute_id=attribute.id, batch_size=16) == 60
    assert sum(q["sql"] == "COMMIT" for q in ctx.captured_queries) >= 4  # 8 blocks, two per batch
    assert all(e.tolist() == grid("0.1", "0.5") for e, _ in stored_chains(attribute).values())
    assert chains_extend(attribute_id=attribute.id, batch_size=16) == 0


def _read_ahead_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("extension-read-ahead")]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_each_next_batch_is_read_ahead(settings, monkeypatch):
    """Called as the task calls it (no transaction around it), extension reads each batch's values in one
    read-ahead thread while the batch before grows (``market.chains.extension._read_ahead``), the first batch a quarter
    of the others and each next one at most half again as large as the one before; each batch gets exactly the rows
    it would have read itself.  Inside a transaction each batch reads its own."""
    from market.chains import pgcopy

    settings.LDP_CHAIN_BLOCK = 8
    attribute = CategoricalAttributeFactory()
    set_ceilings(contribute(attribute, ["red", "green", "blue"] * 20, ceiling="0.2"), "0.6")  # 8 blocks
    readers, batches = [], []
    real_read, real_batch = pgcopy.extension_rows, _extend_batch
    monkeypatch.setattr(pgcopy, "extension_rows",
                        lambda *a, **k: readers.append(threading.current_thread().name) or real_read(*a, **k))
    monkeypatch.setattr(extension, "_extend_batch", lambda attribute, grid, block_ids, rng, value_ids=None, rows=None:
                        batches.append((list(block_ids), rows)) or real_batch(attribute, grid, block_ids, rng,
                                                                              value_ids, rows=rows))
    assert chains_extend(attribute_id=attribute.id, batch_size=32) == 60  # up to 4 blocks a batch, the first 1
    assert [len(b) for b, _ in batches] == [1, 2, 3, 2]
    assert batches[0][1] is None and batches[1][1] is not None  # the first batch reads its own rows
    assert len(readers) == 4 and readers.count(threading.current_thread().name) == 1
    assert sum(name.startswith("extension-read-ahead") for name in readers) == 3
    assert not _read_ahead_threads()  # the thread and its connection are gone
    for block_ids, rows in batches[1:]:  # the values have not changed since: the same rows, read now
        again = real_read(attribute, block_ids)
        assert rows is not None and set(rows) == set(again)
        for name in again:
            np.testing.assert_array_equal(rows[name], again[name], err_msg=name)
    assert all(e.tolist() == grid("0.1", "0.6") for e, _ in stored_chains(attribute).values())
    set_ceilings(Value.objects.filter(attribute=attribute), "0.8")
    readers.clear(), batches.clear()
    with transaction.atomic():
        assert chains_extend(attribute_id=attribute.id, batch_size=32) == 60
    assert readers == [threading.current_thread().name] * 2 and all(rows is None for _, rows in batches)
    assert [len(b) for b, _ in batches] == [4, 4]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_batch_that_fails_stops_the_read_ahead_and_keeps_the_batches_before(settings, monkeypatch):
    settings.LDP_CHAIN_BLOCK = 8
    attribute = CategoricalAttributeFactory()
    vs = contribute(attribute, ["red", "green", "blue"] * 20, ceiling="0.2")
    set_ceilings(vs, "0.5")
    real, calls = chains.grow, []

    def grow(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the worker failed mid-task")
        return real(*args, **kwargs)

    monkeypatch.setattr(chains, "grow", grow)
    with pytest.raises(RuntimeError):
        chains_extend(attribute_id=attribute.id, batch_size=16)
    assert not _read_ahead_threads()
    heads = [e[-1] for e, _ in stored_chains(attribute).values()]
    assert heads.count(grid("0.1", "0.5")[-1]) == 8  # the first batch (one block) committed, the next rolled back
    monkeypatch.setattr(chains, "grow", real)
    assert chains_extend(attribute_id=attribute.id, batch_size=16) == 52


def test_the_new_points_of_a_growth_are_its_steps_in_value_then_epsilon_order():
    """``_new_points``: every value grown alike gives views of the growth's arrays; values grown unequally give
    the masked points; both in (value, step) order."""
    eps = np.array([[2, 3, 4], [2, 3, 4]]) * 100_000
    out = np.arange(2 * 3 * 2).reshape(2, 3, 2)
    block_of, slot = np.array([7, 7]), np.array([0, 5])
    alike = extension._new_points(chains.Growth(eps=eps, out=out, count=np.array([3, 3])), block_of, slot)
    assert [a.tolist() for a in alike[:3]] == [[7] * 6, [0, 0, 0, 5, 5, 5], eps.reshape(-1).tolist()]
    assert alike[3].tolist() == out.reshape(6, 2).tolist() and np.shares_memory(alike[3], out)
    unequal = extension._new_points(chains.Growth(eps=np.where([[1, 1, 1], [1, 0, 0]], eps, -1), out=out,
                                                  count=np.array([3, 1])), block_of, slot)
    assert [a.tolist() for a in unequal] == [[7] * 4, [0, 0, 0, 5], [200_000, 300_000, 400_000, 200_000],
                                            out[[0, 0, 0, 1], [0, 1, 2, 0]].tolist()]
    none = extension._new_points(chains.Growth(eps=np.zeros((2, 0), dtype=np.int64),
                                                out=np.zeros((2, 0, 2), dtype=np.int64), count=np.zeros(2)),
                                 block_of, slot)
    assert all(a.shape[0] == 0 for a in none)
