"""Nothing stranded, on REAL Celery workers (docs/operations.md, "Recovery"; docs/quality-targets.md#reliability).

* A worker SIGKILLed (its whole process group) in the middle of a purchase: nobody retries, no message is
  redelivered (the broker's visibility timeout is an hour here, as in production), and the sweeper that Celery
  beat runs resumes it within its short staleness window; it is charged once.
* A worker SIGKILLed in the middle of a chain extension: beat's sweeper sends the extension again and it
  completes, with no task sent by anyone.
* The broker and cache (a Redis server of the test's own) stopped in the middle of a purchase: the purchase
  still completes (progress is best-effort) instead of staying ``running``, and the worker lives on: once
  Redis is back it runs the next purchase.

The workers are ``tests.workerproc`` workers (prefork, production settings, the test database).
"""
from __future__ import annotations

import os
import re
import secrets
import uuid
from decimal import Decimal

import numpy as np
import pytest
from django.core.cache import cache
from django.db import connection
from django.db.models import Sum

from accounts.models import BudgetAccount, LedgerEntry, MoneyAccount, MoneyEntry
from market import selectors, tasks
from market.models import ChainBlock, Purchase, Value
from market.purchases import quotes
from market.purchases.eligibility import held_epsilons
from market.purchases.execution import purchase_claim
from market.purchases.pricing import DEFAULT_POLICY
from tests.factories import BuyerFactory, CategoricalAttributeFactory, chain_rows, contribute, fund
from tests.ledger_checks import hash_chain_problems
from tests.market.test_purchase_worker import ledger_lock, snapshot, wait_gone, wait_mid_purchase
from tests.workerproc import Broker, RedisServer, RowLock, wait_until

pytestmark = [
    pytest.mark.worker, pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis: set REDIS_URL (CI runs these)"),
]

N = 3000
LABELS = ["red", "green", "blue"]
EPSILON = Decimal("0.55")  # between two grid points: every chain gets a bridged point
TASK = "market.tasks.run_purchase"
#: The sweeper in the tests' workers: beat sends it every second; a purchase or extension is stale after 3 s.
SWEEPER = {"LDP_SWEEP_INTERVAL_SECONDS": 1, "LDP_STALE_AFTER_SECONDS": 3, "LDP_SCHEDULE_INTERVAL_SECONDS": 3600}


def _namespace(request, tmp_path, settings, **kwargs):
    namespace = Broker(tmp_path, **kwargs)
    settings.CACHES = namespace.cache_settings()  # the test reads the workers' cache
    request.addfinalizer(lambda: _close(namespace))
    return namespace


def _close(namespace) -> None:
    namespace.close()
    # the database flush after the test needs the killed workers' sessions (and their locks) gone
    wait_until(lambda: not any(w.sessions() for w in namespace.workers), 30, interval=0.1)


@pytest.fixture
def broker(request, transactional_db, tmp_path, settings):
    """A namespace on the shared Redis (the workers' database); unacknowledged messages wait an hour."""
    return _namespace(request, tmp_path, settings)


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def private_broker(request, transactional_db, tmp_path, settings, redis_server):
    """A namespace on a Redis server of the test's own, which the test may stop and start."""
    return _namespace(request, tmp_path, settings, url=redis_server.url)


def new_purchase(n: int = N):
    """An attribute of ``n`` values (ceiling 2), a funded buyer and a claimed purchase at EPSILON."""
    attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=DEFAULT_POLICY)
    contribute(attribute, (LABELS * n)[:n], ceiling="2")
    buyer = BuyerFactory()
    fund(buyer, "1000")
    quote = quotes.quote_issue(buyer_id=buyer.id, attribute=attribute, epsilon=EPSILON, cohort=None,
                            policy=selectors.price_policy_or_none(attribute))
    assert quote.included == n and quote.price > 0
    # a purchase id of its own: progress is keyed by purchase id in a cache other test runs may share
    with connection.cursor() as cur:
        cur.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)",
                    [Purchase._meta.db_table, secrets.randbelow(10 ** 12) + 10 ** 9])
    purchase, created = purchase_claim(buyer=buyer, attribute=attribute, epsilon=EPSILON, cohort=None,
                                       idempotency_key=uuid.uuid4().hex)
    assert created
    return attribute, buyer, purchase, quote.price


def assert_charged_once(attribute, buyer, purchase, price: Decimal, before: dict, n: int = N) -> None:
    """Completed once: one release per value, the quoted price debited once and paid out in full."""
    purchase.refresh_from_db()
    assert purchase.status == Purchase.Status.COMPLETED, (purchase.status, purchase.error)
    assert purchase.included == purchase.candidates == n and purchase.price == price
    releases = LedgerEntry.objects.filter(purchase=purchase)
    assert releases.count() == n == releases.values("value_id").distinct().count()
    assert LedgerEntry.objects.count() == before["ledger"][0] + n
    credit = MoneyAccount.objects.get(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT)
    assert credit.balance == dict(before["money"])[credit.id] - price
    assert list(MoneyEntry.objects.filter(purchase=purchase, account=credit).values_list("amount", flat=True)) == [
        -price]
    assert MoneyEntry.objects.filter(purchase=purchase).aggregate(total=Sum("amount"))["total"] == 0
    ids = np.array(sorted(Value.objects.filter(attribute=attribute).values_list("id", flat=True)))
    assert (held_epsilons(buyer.id, attribute, ids) == int(EPSILON * 10**6)).sum() == n
    assert set(BudgetAccount.objects.filter(value__attribute=attribute).values_list("chain_loss", flat=True)) == {
        EPSILON}
    assert hash_chain_problems() == []


def status(purchase) -> str:
    return Purchase.objects.filter(id=purchase.id).values_list("status", flat=True).get()


def runs(worker, task: str = TASK) -> list[str]:
    return re.findall(rf"{re.escape(task)}\[[0-9a-f-]+\] succeeded in [0-9.e-]+s: '?(\w+)'?", worker.text())


# ------------------------------------------------------------------------------------------ a killed worker

def test_a_purchase_whose_worker_was_killed_is_completed_by_the_sweeper_without_a_retry(broker):
    attribute, buyer, purchase, price = new_purchase()
    before = snapshot(attribute)
    first = broker.start()
    with ledger_lock(attribute):
        broker.send(TASK, purchase.id)
        killed, _ = wait_mid_purchase(first, purchase)
        first.kill_group()
        wait_gone(first, killed)
    assert status(purchase) == Purchase.Status.RUNNING
    assert broker.unacked() == 1  # its message waits for the visibility timeout (an hour): not the recovery
    # a worker with beat; nobody sends anything, nobody retries
    second = broker.start(beat=True, **SWEEPER)
    wait_until(lambda: status(purchase) != Purchase.Status.RUNNING, 60, interval=0.2,
               message=lambda: f"the purchase stayed running:\n{second.log()}")
    wait_until(lambda: runs(second), 30, interval=0.1, message=second.log)
    assert runs(second) == ["completed"], second.log()
    assert_charged_once(attribute, buyer, purchase, price, before)
    # resumed by the sweeper, not by a redelivery (the settlement of its owners' earnings, enqueued on its commit,
    # is acknowledged once it has run)
    wait_until(lambda: broker.unacked() == 1, 30, interval=0.1, message=lambda: f"unacked: {broker.unacked()}")


# --------------------------------------------------------------------------------------- a killed extension

EXT_N, EXT_BATCH = 3000, 100
OLD_HEAD, TARGET = Decimal("0.2"), Decimal("2.0")


def _grown(attribute) -> int:
    """Chains whose head (in their block's ``heads``) is the target."""
    return sum(int((np.frombuffer(bytes(h), "<i8") == 2_000_000).sum())
               for h in ChainBlock.objects.filter(attribute=attribute).values_list("heads", flat=True))


def test_an_extension_whose_worker_was_killed_is_resumed_by_beat(broker, settings):
    settings.LDP_CHAIN_BLOCK = EXT_BATCH  # blocks of 100: the workers' batches are one block each
    attribute = CategoricalAttributeFactory(labels=LABELS)
    values = contribute(attribute, (LABELS * EXT_N)[:EXT_N], ceiling=str(OLD_HEAD))
    before = chain_rows(attribute)
    BudgetAccount.objects.filter(value__attribute=attribute).update(ceiling=TARGET)
    first = broker.start(LDP_EXTENSION_BATCH=EXT_BATCH, LDP_CHAIN_BLOCK=EXT_BATCH)
    middle = values[EXT_N // 2 + EXT_BATCH // 2].block_id
    # the extension stops half-way, in the batch of this block (its earlier batches committed), waiting for the
    # block's row to write its heads and points, and is killed there
    with RowLock(f"SELECT id FROM {ChainBlock._meta.db_table} WHERE id = %s FOR UPDATE", [middle]):
        broker.send(tasks.extend_chains.name, attribute.id)
        killed = wait_until(lambda: first.backends(waiting_for_lock=True), 60, message=first.log)
        first.kill_group()
        wait_gone(first, killed)
    done = _grown(attribute)
    assert done == EXT_N // 2, done
    # a worker with beat; nobody sends anything
    second = broker.start(beat=True, LDP_EXTENSION_BATCH=EXT_BATCH, LDP_CHAIN_BLOCK=EXT_BATCH, **SWEEPER)
    wait_until(lambda: _grown(attribute) == EXT_N, 60,
               interval=0.2, message=lambda: f"the extension was not resumed:\n{second.log()}")
    after = chain_rows(attribute)
    for vid, row in after.items():  # the stored prefix kept, grown along the grid to the target
        eps = np.frombuffer(row[0], "<i8").tolist()
        assert eps == list(range(100_000, 2_000_001, 100_000)) and row[1][:len(before[vid][1])] == before[vid][1]


# ----------------------------------------------------------------------------------- the broker/cache dies

def test_redis_stopped_during_a_purchase_neither_strands_it_nor_kills_the_worker(private_broker, redis_server):
    broker = private_broker
    attribute, buyer, purchase, price = new_purchase()
    before = snapshot(attribute)
    worker = broker.start()
    with ledger_lock(attribute):
        broker.send(TASK, purchase.id)
        _, seen = wait_mid_purchase(worker, purchase)
        assert seen[-1] == {"processed": N // 2, "total": N}, seen  # progress went into the cache
        redis_server.stop()  # broker, cache and result backend gone, in the middle of the purchase
    wait_until(lambda: status(purchase) != Purchase.Status.RUNNING, 60, interval=0.2,
               message=lambda: f"the purchase stayed running:\n{worker.log()}")
    assert_charged_once(attribute, buyer, purchase, price, before)
    # the worker lives on without Redis, retrying for as long as it takes (Celery's default gives up after 100
    # tries, about 50 minutes, and the worker exits), and once Redis is back it takes the next purchase
    # (one log line: its newline is written "\n" in the JSON lines of docs/operations.md#logs)
    retrying = re.compile(r"Cannot connect to redis.*(?:\n|\\n).*Trying again in [0-9.]+ seconds\.\.\. \(1/(\w+)\)")
    tries = wait_until(lambda: retrying.search(worker.text()), 30, message=worker.log)
    assert tries.group(1) == "None", f"the worker gives up after {tries.group(1)} tries"
    assert worker.proc.poll() is None, worker.log()
    redis_server.start()
    cache.clear()
    attribute2, buyer2, purchase2, price2 = new_purchase(300)
    before2 = snapshot(attribute2)
    broker.send(TASK, purchase2.id)
    wait_until(lambda: status(purchase2) == Purchase.Status.COMPLETED, 90, interval=0.2,
               message=lambda: f"the worker took no new purchase:\n{worker.log()}")
    assert worker.proc.poll() is None, worker.log()
    assert_charged_once(attribute2, buyer2, purchase2, price2, before2, n=300)
