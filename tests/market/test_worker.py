"""Chain extension on a REAL Celery worker (prefork, Redis broker, the test PostgreSQL database).

The worker (``tests.workerproc``) runs the production settings module (``ldpmarket.settings``: not eager,
acks_late, reject_on_worker_lost) with the test keys, the test database and a broker namespace (Redis
database, key prefix, queue) of the test's own, so no stale task from elsewhere can reach it and it takes
nothing from anyone else; what the service path enqueues on commit is sent there.  The tests commit their
data (``transaction=True``) so the worker sees it, and always stop their workers and drop their namespace.

Fault tests (docs/quality-targets.md#reliability): the worker is SIGKILLed in the middle of an extension that
runs in many small batches (``LDP_EXTENSION_BATCH``, of whole chain blocks: ``LDP_CHAIN_BLOCK``), after some
batches have committed.
"""
from __future__ import annotations

import os
import re
import signal
import time
import uuid
from decimal import Decimal

import numpy as np
import pytest

from accounts.epsilon import from_micro, to_micro
from accounts.models import BudgetAccount, LedgerRelease, MoneyAccount, MoneyEntry, Settlement
from accounts.services import budget_set_ceiling
from audit.budget_audit import audit_budgets
from market import tasks
from market.chains.extension import chains_extend
from market.models import ChainBlock, ChainPoint, Purchase, Value
from market.purchases.execution import purchase_claim
from market.purchases.pricing import DEFAULT_POLICY, PricePolicy
from tests.factories import BuyerFactory, CategoricalAttributeFactory, chain_heads, chain_rows, contribute, fund
from tests.market.stats import ALPHA, chi_square, pair_laws, table
from tests.workerproc import Broker, wait_until

pytestmark = [
    pytest.mark.worker, pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis: set REDIS_URL (CI runs these)"),
]

D = Decimal


@pytest.fixture
def broker(transactional_db, tmp_path, monkeypatch):
    """A broker namespace of the test's own; what the service path enqueues is sent (not run eagerly) to it."""
    namespace = Broker(tmp_path)
    namespace.route_project_tasks(monkeypatch)
    try:
        yield namespace
    finally:
        namespace.close()
        # the database flush after the test needs the killed workers' sessions gone
        wait_until(lambda: not any(w.sessions() for w in namespace.workers), 30, interval=0.1)


def send_extension(broker, attribute_id: int) -> None:
    broker.send(tasks.extend_chains.name, attribute_id)


def extended_count(attribute, head) -> int:
    """Chains of the attribute whose head (in their block's ``heads``) is ``head``."""
    micro = to_micro(head)
    return sum(int((np.frombuffer(bytes(h), "<i8") == micro).sum())
               for h in ChainBlock.objects.filter(attribute=attribute).values_list("heads", flat=True))


def at_rest(attribute) -> list[tuple]:
    """The stored point rows themselves (a row sealed again has new bytes, a row updated a new revision)."""
    return [(b, e, bytes(p), bytes(s), r) for b, e, p, s, r in ChainPoint.objects.filter(attribute=attribute)
            .order_by("block_id", "epsilon").values_list("block_id", "epsilon", "present", "sealed", "revision")]


def test_a_real_worker_extends_chains_enqueued_on_commit(broker):
    worker = broker.start(LDP_EXTENSION_BATCH=20000)
    attribute = CategoricalAttributeFactory()
    values = contribute(attribute, ["red", "green", "blue"] * 100, ceiling="0.2")
    # the service path: raising one ceiling enqueues its extension on commit, the worker runs it
    budget_set_ceiling(value_id=values[0].id, ceiling="0.9")
    wait_until(lambda: extended_count(attribute, D("0.9")) == 1, 60, message=worker.log)
    # and a task sent for the whole attribute extends every chain whose ceiling passed its head
    BudgetAccount.objects.filter(value__in=values).update(ceiling=D("1.25"))
    send_extension(broker, attribute.id)
    wait_until(lambda: extended_count(attribute, D("1.2")) == 300, 60, message=worker.log)
    before, stored = chain_rows(attribute), at_rest(attribute)
    assert {np.frombuffer(r[0], "<i8").tolist() == list(range(100_000, 1_200_001, 100_000))
            for r in before.values()} == {True}
    # idempotent on the worker too: a second task changes nothing
    send_extension(broker, attribute.id)
    pattern = re.compile(r"extend_chains\[[0-9a-f-]+\] succeeded in [0-9.e-]+s: (\d+)")

    def results():
        return pattern.findall(worker.text())

    wait_until(lambda: len(results()) >= 3, 60, message=worker.log)
    assert results() == ["1", "300", "0"]
    assert chain_rows(attribute) == before and at_rest(attribute) == stored


def test_a_purchase_run_by_the_worker_gets_its_owners_earnings_settled_by_itself(broker):
    """The worker runs a purchase; its commit enqueues its attribute's settlement (``settle_earnings``), which the
    worker runs too: with nothing more from the test, the pending account empties into the owners' balances."""
    worker = broker.start()
    attribute = CategoricalAttributeFactory(price_policy=DEFAULT_POLICY)
    values = contribute(attribute, ["red", "green", "blue"] * 5, ceiling="2")
    buyer = BuyerFactory()
    fund(buyer, "10")
    purchase, _ = purchase_claim(buyer=buyer, attribute=attribute, epsilon=D("1.5"), cohort=None,
                                 idempotency_key=uuid.uuid4().hex)
    broker.send(tasks.run_purchase.name, purchase.id)
    policy = PricePolicy.parse(DEFAULT_POLICY)
    share = D(int(policy.owner_units(policy.charge_units(1_500_000, np.zeros(1, dtype=np.int64)))[0])) / 10_000
    assert share > 0

    def earnings():
        return dict(MoneyAccount.objects.filter(kind=MoneyAccount.Kind.OWNER_EARNINGS)
                    .values_list("user_id", "balance"))

    def settled():
        pending = MoneyAccount.objects.filter(kind=MoneyAccount.Kind.OWNERS_PENDING, shard=attribute.id).first()
        return pending is not None and pending.balance == 0 and len(earnings()) == len(values)

    wait_until(settled, 90, interval=0.1, message=worker.log)
    purchase.refresh_from_db()
    assert purchase.status == Purchase.Status.COMPLETED and purchase.included == len(values), purchase.error
    assert earnings() == {v.owner_id: share for v in values}
    # the purchase credited the pending account with every owner's share; one settlement paid it all out
    pending = MoneyAccount.objects.get(kind=MoneyAccount.Kind.OWNERS_PENDING, shard=attribute.id)
    assert list(MoneyEntry.objects.filter(account=pending).order_by("id").values_list("amount", flat=True)) == [
        share * len(values), -share * len(values)]
    [s] = Settlement.objects.filter(shard=attribute.id)
    rows = LedgerRelease.objects.filter(shard=attribute.id)
    assert (s.after_release, s.through_release, s.releases) == (0, max(r.id for r in rows), rows.count())
    assert (s.amount, s.owners) == (share * len(values), len(values))
    pattern = re.compile(r"settle_earnings\[[0-9a-f-]+\] succeeded in [0-9.e-]+s: (\d+)")
    wait_until(lambda: pattern.findall(worker.text()), 30, message=worker.log)
    assert pattern.findall(worker.text()) == ["1"], worker.log()
    report = audit_budgets()
    assert report.ok, report.as_text()


# ---------------------------------------------------------------------------------------------
# Worker faults
# ---------------------------------------------------------------------------------------------

N_VALUES = 9000
BATCH = 100
OLD_HEAD, TARGET = D("0.2"), D("4.0")
OLD_EPS = [100_000, 200_000]
TARGET_EPS = list(range(100_000, 4_000_001, 100_000))


#: The workers' settings: batches of one block of BATCH values.
SMALL_BATCHES = {"LDP_EXTENSION_BATCH": BATCH, "LDP_CHAIN_BLOCK": BATCH}


@pytest.fixture
def big(transactional_db, settings):
    settings.LDP_CHAIN_BLOCK = BATCH  # 90 blocks of 100 values
    attribute = CategoricalAttributeFactory()
    raws = ["red", "green", "blue"] * (N_VALUES // 3)
    values = contribute(attribute, raws, ceiling=str(OLD_HEAD))
    truth = {v.id: attribute.labels.index(r) for v, r in zip(values, raws)}
    snapshot = chain_rows(attribute)
    BudgetAccount.objects.filter(value__attribute=attribute).update(ceiling=TARGET)
    return attribute, truth, snapshot


def kill_when_some_batches_committed(worker, attribute, kill) -> int:
    """Wait until at least two batches are in (but not all), then ``kill``; returns the chains done before it."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = extended_count(attribute, TARGET)
        if done >= 2 * BATCH:
            kill()
            return done
        time.sleep(0.02)
    raise AssertionError(f"the extension did not start: {worker.log()}")


def assert_each_chain_old_or_complete(attribute, snapshot) -> dict[str, int]:
    """Every chain is either identical to before the extension or fully extended on top of it, and its block's
    head for it is its highest stored point."""
    kinds = {"old": 0, "complete": 0}
    heads = chain_heads(Value.objects.filter(attribute=attribute))
    for vid, (eps_b, out_b, length, head) in chain_rows(attribute).items():
        old = snapshot[vid]
        assert heads[vid] == (from_micro(head), length), f"chain {vid}: its head is not its last point"
        if (eps_b, out_b, length, head) == old:
            kinds["old"] += 1
            continue
        eps = np.frombuffer(eps_b, "<i8").tolist()
        out = np.frombuffer(out_b, "<i2")
        assert eps == TARGET_EPS and length == len(TARGET_EPS) and head == to_micro(TARGET), f"chain {vid} is partial"
        assert out.size == length and out_b[:len(old[1])] == old[1], f"chain {vid} lost its stored prefix"
        kinds["complete"] += 1
    return kinds


def assert_law_unchanged(attribute, truth) -> None:
    """The completed chains still have the forward chain's law (made, killed, resumed: one law)."""
    rows = chain_rows(attribute)
    ids = sorted(rows)
    out = np.stack([np.frombuffer(rows[i][1], "<i2").astype(np.int64) for i in ids])
    a = np.array([truth[i] for i in ids])
    eps = [e / 1e6 for e in TARGET_EPS]
    for i, j in [(1, 2), (0, len(eps) - 1), (1, 9)]:
        stat, df, p = chi_square(table(a, out[:, i] * 3 + out[:, j], 3, 9), pair_laws(eps[:j + 1], 3, i, j))
        assert p > ALPHA, f"pair ({eps[i]}, {eps[j]}) after the kill: chi2={stat:.1f}, df={df}, p={p:.2e}"


def test_a_killed_worker_leaves_no_partial_chain_and_a_new_worker_completes(broker, big):
    attribute, truth, snapshot = big
    first = broker.start(**SMALL_BATCHES)
    send_extension(broker, attribute.id)
    done = kill_when_some_batches_committed(first, attribute, first.kill_group)
    wait_until(lambda: first.sessions() == 0, 30, message=lambda: "the killed worker's sessions linger")
    kinds = assert_each_chain_old_or_complete(attribute, snapshot)
    assert kinds["complete"] >= done and kinds["complete"] % BATCH == 0, kinds  # whole batches only
    assert 0 < kinds["complete"] < N_VALUES, f"the kill was not in the middle of the extension: {kinds}"
    # a new worker; the killed one never acknowledged its task, so it is sent again (Redis would redeliver it
    # only after the broker's visibility timeout)
    second = broker.start(**SMALL_BATCHES)
    send_extension(broker, attribute.id)
    wait_until(lambda: extended_count(attribute, TARGET) == N_VALUES, 120, interval=0.2, message=second.log)
    assert assert_each_chain_old_or_complete(attribute, snapshot) == {"old": 0, "complete": N_VALUES}
    after = chain_rows(attribute)
    assert chains_extend(attribute_id=attribute.id) == 0
    assert chain_rows(attribute) == after
    assert_law_unchanged(attribute, truth)


def test_a_pool_process_killed_mid_task_is_redelivered_and_completes(broker, big):
    """acks_late + reject_on_worker_lost: the main process sees its child die and puts the task back."""
    attribute, truth, snapshot = big
    worker = broker.start(**SMALL_BATCHES)
    send_extension(broker, attribute.id)
    [child] = worker.children()

    def kill_child():
        os.kill(child, signal.SIGKILL)

    done = kill_when_some_batches_committed(worker, attribute, kill_child)
    assert done < N_VALUES, "the extension finished before the kill"
    # no re-send: the same task comes back by itself and finishes the job
    wait_until(lambda: extended_count(attribute, TARGET) == N_VALUES, 120, interval=0.2, message=worker.log)
    log = worker.text()
    assert "WorkerLostError" in log or "signal 9" in log, worker.log()
    assert child not in worker.children()
    assert assert_each_chain_old_or_complete(attribute, snapshot) == {"old": 0, "complete": N_VALUES}
    after = chain_rows(attribute)
    assert chains_extend(attribute_id=attribute.id) == 0
    assert chain_rows(attribute) == after
    assert_law_unchanged(attribute, truth)
