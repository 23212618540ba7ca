"""A large purchase on a REAL Celery worker, killed in the middle (docs/quality-targets.md#reliability).

The worker (``tests.workerproc``: prefork, the production settings, the test PostgreSQL database, a Redis
broker and cache namespace of the test's own) runs ``market.tasks.run_purchase`` for a purchase of ``N``
values.  The test holds the ledger's head row, so the purchase stops, inside its transaction, at its ledger
write: its outputs resolved (progress half-way, read from the shared cache), its chains and budgets written
but not committed.  There the worker is SIGKILLed -- its whole process group (nothing gets to clean up or
reject the message), or only its pool process -- and then:

* no partial state: the purchase is not completed; no ledger entry, money entry, holding or output chunk
  exists; every budget, chain (byte for byte), money account and the ledger are as before -- checked once the
  killed session is gone, and again while the re-run waits at the same point;
* re-running completes it exactly once, with nothing sent again: ``acks_late`` + ``reject_on_worker_lost``
  mean a killed pool process's task is requeued at once, and a killed worker's unacknowledged message is
  handed to a new worker after the broker's visibility timeout (10 s in that test; an hour by default with
  Redis, and the project sets none);
* the completed purchase is right: one ledger entry per value, the quoted charge taken once (and paid out to
  owners and platform), budgets raised to the epsilon and within their ceilings, the chains' stored points
  unchanged with the new point inserted, the ledger's hash chain intact.
"""
from __future__ import annotations

import os
import re
import secrets
import signal
import uuid
from decimal import Decimal

import numpy as np
import pytest
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import Sum

from accounts.epsilon import to_micro
from accounts.models import BudgetAccount, LedgerBlock, LedgerEntry, LedgerHead, MoneyAccount, MoneyEntry
from market import selectors
from market.chains import grow as chains
from market.models import Purchase, PurchaseChunk, Value
from market.purchases import quotes
from market.purchases.eligibility import held_epsilons
from market.purchases.execution import CHUNK, purchase_claim
from market.purchases.pricing import DEFAULT_POLICY
from tests.factories import BuyerFactory, CategoricalAttributeFactory, chain_heads, chain_rows, contribute
from tests.ledger_checks import hash_chain_problems
from tests.workerproc import Broker, RowLock, wait_until

pytestmark = [
    pytest.mark.worker, pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis: set REDIS_URL (CI runs these)"),
]

N = 12_000
#: Between two grid points (0.5, 0.6): every chain gets a bridged point, so every write kind happens.
EPSILON = Decimal("0.55")
TASK = "market.tasks.run_purchase"
LABELS = ["red", "green", "blue"]


@pytest.fixture
def broker(request, transactional_db, tmp_path, settings):
    """A broker namespace of the test's own (visibility timeout: an hour, or the test's parameter, in seconds);
    the test process reads the workers' cache."""
    namespace = Broker(tmp_path, visibility_timeout=getattr(request, "param", 3600))
    settings.CACHES = namespace.cache_settings()
    try:
        yield namespace
    finally:
        namespace.close()
        # the database flush after the test needs the killed workers' sessions (and their locks) gone
        wait_until(lambda: not any(w.sessions() for w in namespace.workers), 30, interval=0.1)


@pytest.fixture
def market_state(broker, transactional_db):
    """An attribute of N values (ceiling 2, chains pre-generated to 2), a funded buyer, a claimed purchase."""
    attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=DEFAULT_POLICY)
    contribute(attribute, LABELS * (N // 3), ceiling="2")
    buyer = BuyerFactory()
    account = MoneyAccount.objects.create(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT, balance=Decimal("1000"))
    MoneyEntry.objects.create(account=account, amount=account.balance, balance_after=account.balance,
                              memo="deposit")
    quote = quotes.quote_issue(buyer_id=buyer.id, attribute=attribute, epsilon=EPSILON, cohort=None,
                            policy=selectors.price_policy_or_none(attribute))
    assert quote.included == N and quote.price > 0
    # A purchase id of its own: the workers' cache keys progress by purchase id, and another run of these tests
    # (another test database, the same Redis database) must not see this one's progress, nor this one its.
    with connection.cursor() as cur:
        cur.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)",
                    [Purchase._meta.db_table, secrets.randbelow(10 ** 12) + 10 ** 9])
    key = uuid.uuid4().hex
    purchase, created = purchase_claim(buyer=buyer, attribute=attribute, epsilon=EPSILON, cohort=None,
                                       idempotency_key=key)
    assert created
    yield attribute, buyer, purchase, quote.price
    cache.delete(selectors.progress_key(purchase.id))


def snapshot(attribute) -> dict:
    """Everything a purchase writes, as stored (the database holds only this test's data)."""
    head = LedgerHead.objects.filter(shard=attribute.id).values_list("last_block_id", flat=True).first()
    return {
        "chains": chain_rows(attribute),
        "heads": chain_heads(Value.objects.filter(attribute=attribute)),
        "budgets": list(BudgetAccount.objects.order_by("value_id").values_list()),
        "ledger": (LedgerEntry.objects.count(), LedgerBlock.objects.count(), head),
        "money": list(MoneyAccount.objects.order_by("id").values_list("id", "balance")),
        "money_entries": MoneyEntry.objects.count(),
        "chunks": PurchaseChunk.objects.count(),
    }


def purchase_row(purchase) -> dict:
    """The purchase's stored fields but those the task's start sets (``running``, its attempt, its heartbeat)."""
    row = Purchase.objects.filter(id=purchase.id).values().get()
    for started in ("status", "error", "attempts", "heartbeat_at"):
        row.pop(started)
    return row


def ledger_lock(attribute) -> RowLock:
    """Hold the head row of the attribute's ledger shard: a purchase then waits inside its transaction at its
    ledger write, after it has resolved its outputs (progress half-way) and written the chains, budgets, money
    and outputs (not committed)."""
    return RowLock(f"SELECT shard FROM {LedgerHead._meta.db_table} WHERE shard = {int(attribute.id)} FOR UPDATE")


def wait_mid_purchase(worker, purchase, *, exclude=()) -> tuple[list[int], list[dict]]:
    """Wait until one of the worker's sessions (not in ``exclude``) waits for the ledger inside its purchase.

    Returns the waiting sessions and the progress reports seen meanwhile (in order).
    """
    seen: list[dict] = []

    def waiting():
        progress = selectors.progress_get(purchase.id)
        if progress and (not seen or seen[-1] != progress):
            seen.append(progress)
        status = Purchase.objects.filter(id=purchase.id).values_list("status", flat=True).get()
        assert status != Purchase.Status.COMPLETED, f"the purchase completed while the ledger was locked: {seen}"
        return [pid for pid in worker.backends(waiting_for_lock=True) if pid not in exclude]

    return wait_until(waiting, 240, interval=0.02, message=worker.log), seen


def wait_gone(worker, pids) -> None:
    """The killed sessions end (their transactions rolled back): the server sees their client is gone."""
    wait_until(lambda: not set(pids) & set(worker.backends()), 60, interval=0.05,
               message=lambda: f"the killed worker's sessions {pids} linger")


def consistent(read):
    """``read()`` in one REPEATABLE READ transaction: one snapshot, even while the worker commits."""
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return read()


def assert_nothing_written(attribute, purchase, buyer, before: dict, row_before: dict) -> None:
    """As before the purchase, in one snapshot: only its status says ``running``."""
    def read():
        current = Purchase.objects.get(id=purchase.id)
        assert current.status == Purchase.Status.RUNNING and current.completed_at is None
        assert purchase_row(purchase) == row_before
        assert not LedgerEntry.objects.filter(purchase=purchase).exists()
        assert not MoneyEntry.objects.filter(purchase=purchase).exists()
        assert not PurchaseChunk.objects.filter(purchase=purchase).exists()
        ids = np.array(sorted(Value.objects.filter(attribute=attribute).values_list("id", flat=True)))
        assert not held_epsilons(buyer.id, attribute, ids).any()
        return snapshot(attribute)

    after = consistent(read)
    for part in before:
        assert after[part] == before[part], f"the killed purchase left {part} changed"


def assert_completed_once(attribute, purchase, buyer, price: Decimal, before: dict) -> None:
    purchase.refresh_from_db()
    assert purchase.status == Purchase.Status.COMPLETED, (purchase.status, purchase.error)
    assert purchase.included == purchase.candidates == N and purchase.new_points == N
    assert purchase.price == price
    # one set of ledger entries: one release per value, at the purchase's epsilon
    releases = LedgerEntry.objects.filter(purchase=purchase)
    assert releases.count() == N == releases.values("value_id").distinct().count()
    assert set(releases.values_list("kind", "epsilon").distinct()) == {(LedgerEntry.Kind.CHAIN_RELEASE, EPSILON)}
    assert LedgerEntry.objects.count() == before["ledger"][0] + N
    # charged once, the quoted price, and every unit of it paid to someone
    credit = MoneyAccount.objects.get(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT)
    old_balance = dict(before["money"])[credit.id]
    assert credit.balance == old_balance - price
    assert list(MoneyEntry.objects.filter(purchase=purchase, account=credit).values_list("amount", flat=True)) == [
        -price]
    assert MoneyEntry.objects.filter(purchase=purchase).aggregate(total=Sum("amount"))["total"] == 0
    assert MoneyAccount.objects.aggregate(total=Sum("balance"))["total"] == sum(b for _, b in before["money"])
    # the buyer holds every value at epsilon; the outputs are stored once
    ids = np.array(sorted(Value.objects.filter(attribute=attribute).values_list("id", flat=True)))
    assert (held_epsilons(buyer.id, attribute, ids) == int(EPSILON * 10**6)).all() and ids.size == N
    chunks = PurchaseChunk.objects.filter(purchase=purchase)
    assert chunks.count() == -(-N // CHUNK) and chunks.aggregate(n=Sum("count"))["n"] == N
    # budgets: chain loss raised to epsilon, within every ceiling
    budgets = BudgetAccount.objects.filter(value__attribute=attribute)
    assert set(budgets.values_list("chain_loss", flat=True)) == {EPSILON}
    assert all(b.chain_loss + b.oneshot_loss <= b.ceiling for b in budgets)
    # chains: the stored points and their outputs untouched, the bridged point inserted at its place
    e = to_micro(EPSILON)
    after = chain_rows(attribute)
    assert after.keys() == before["chains"].keys()
    for vid, (eps_b, out_b, length, head) in after.items():
        old_eps, old_out = chains.decode(*before["chains"][vid][:2], 1)
        new_eps, new_out = chains.decode(eps_b, out_b, 1)
        keep = new_eps != e
        assert (new_eps == e).sum() == 1 and length == old_eps.size + 1, f"chain {vid}"
        assert np.array_equal(new_eps[keep], old_eps) and np.array_equal(new_out[keep], old_out), f"chain {vid}"
        assert head == before["chains"][vid][3] and np.array_equal(new_out[-1], old_out[-1]), \
            f"chain {vid}: head changed"
    heads = chain_heads(Value.objects.filter(attribute=attribute))  # the blocks' heads too; one point more each
    assert heads == {vid: (head, points + 1) for vid, (head, points) in before["heads"].items()}
    assert hash_chain_problems() == []


def completed_runs(*workers) -> list[str]:
    pattern = re.compile(rf"{re.escape(TASK)}\[[0-9a-f-]+\] succeeded in [0-9.e-]+s: '(\w+)'")
    return [r for w in workers for r in pattern.findall(w.text())]


@pytest.mark.parametrize("broker", [10], indirect=True, ids=["visibility-timeout-10s"])
def test_a_killed_worker_leaves_no_partial_purchase_and_the_redelivered_task_completes_it(broker, market_state):
    """The whole worker SIGKILLed mid-purchase; a new worker gets its message after the visibility timeout."""
    attribute, buyer, purchase, price = market_state
    before, row_before = snapshot(attribute), purchase_row(purchase)
    first = broker.start()
    with ledger_lock(attribute) as lock:
        broker.send(TASK, purchase.id)
        killed, seen = wait_mid_purchase(first, purchase)
        # progress was visible while it ran: the task's start, then its first phase done
        assert {"processed": 0, "total": N} in seen and seen[-1] == {"processed": N // 2, "total": N}, seen
        first.kill_group()
        wait_gone(first, killed)
        assert re.search(rf"{re.escape(TASK)}\[[0-9a-f-]+\] received", first.text()), first.log()
        assert broker.unacked() == 1, "the killed worker's message should wait, unacknowledged, for redelivery"
        assert_nothing_written(attribute, purchase, buyer, before, row_before)
        # a new worker; nobody sends anything: the broker hands it the dead worker's message after the timeout,
        # and the purchase runs again up to the same point
        second = broker.start()
        wait_mid_purchase(second, purchase)
        assert_nothing_written(attribute, purchase, buyer, before, row_before)
        lock.release()
        wait_until(lambda: completed_runs(second), 120, interval=0.1, message=second.log)
    assert completed_runs(first) == []
    assert completed_runs(second)[0] == "completed", second.log()
    assert_completed_once(attribute, purchase, buyer, price, before)
    assert selectors.progress_get(purchase.id) == {"processed": N, "total": N}
    # a second delivery (the visibility timeout passing during the run) would find it completed: nothing changes
    wait_until(lambda: broker.unacked() == 0, 60, message=second.log)
    assert set(completed_runs(second)) == {"completed"}, second.log()
    assert_completed_once(attribute, purchase, buyer, price, before)


def test_a_killed_pool_process_leaves_no_partial_purchase_and_its_task_is_redelivered_at_once(broker, market_state):
    """Only the pool process SIGKILLed: the worker sees it die and, reject_on_worker_lost, requeues the task."""
    attribute, buyer, purchase, price = market_state
    before, row_before = snapshot(attribute), purchase_row(purchase)
    worker = broker.start()
    with ledger_lock(attribute) as lock:
        broker.send(TASK, purchase.id)
        killed, _ = wait_mid_purchase(worker, purchase)
        [child] = worker.children()
        os.kill(child, signal.SIGKILL)
        wait_gone(worker, killed)
        assert_nothing_written(attribute, purchase, buyer, before, row_before)
        # no re-send: the same message comes back to a new pool process and runs up to the same point
        wait_mid_purchase(worker, purchase, exclude=killed)
        assert child not in worker.children()
        assert_nothing_written(attribute, purchase, buyer, before, row_before)
        lock.release()
        wait_until(lambda: completed_runs(worker), 120, interval=0.1, message=worker.log)
    log = worker.text()
    assert "WorkerLostError" in log or "signal 9" in log, worker.log()
    assert completed_runs(worker) == ["completed"], worker.log()
    assert_completed_once(attribute, purchase, buyer, price, before)
    wait_until(lambda: broker.unacked() == 0, 30, message=worker.log)
