"""Composition under concurrency (issue 4 item 3, docs/quality-targets.md#reliability): real threads, real PostgreSQL
connections.

Many purchases by several buyers run at once over the same values, whose
ceilings admit only some epsilons.  Afterwards every invariant of spec
docs/budget-rules.md#budgets-and-ceilings holds: no loss above its ceiling, each budget's
chain_loss is the highest epsilon in its ledger, the hash chain is intact,
and money adds up to the cent.
"""
from __future__ import annotations

import random
import threading
from decimal import Decimal

import numpy as np
import pytest
from django.db import connection, connections, transaction
from django.db.models import Max, Sum

from accounts.epsilon import to_micro
from accounts.models import BudgetAccount, LedgerEntry, MoneyAccount, MoneyEntry, User
from market.chains import store as chainstore
from market.models import Attribute, ChainBlock, ChainPoint, Dataset, Purchase, PurchaseChunk, Value
from market.purchases import execution as purchases
from market.values import services
from tests.factories import chain_heads, stored_chains
from tests.ledger_checks import hash_chain_problems

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CEILINGS = ["0.3", "0.5", "0.7", "1.0"]
EPSILONS = ["0.2", "0.4", "0.6", "0.8", "1.2", "0.45"]


@pytest.fixture
def market_setup(settings):
    settings.LDP_CHAIN_BLOCK = 16  # 60 values in 4 blocks: purchases write to several blocks
    dataset = Dataset.objects.create(title="concurrency")
    attribute = Attribute.objects.create(dataset=dataset, name="q", kind="categorical", labels=["a", "b", "c", "d"],
                                         grid_start=Decimal("0.1"), grid_step=Decimal("0.1"))
    rnd = random.Random(5)
    values = []
    for i, ceiling in enumerate(CEILINGS):
        owners = [User.objects.create(username=f"owner-{i}-{j}", role="owner") for j in range(15)]
        values += services.values_create_many(attribute=attribute, owners=owners,
                                              raws=[rnd.choice("abcd") for _ in owners], ceiling=ceiling)
    buyers = [User.objects.create(username=f"buyer-{k}", role="buyer") for k in range(6)]
    for b in buyers:
        account = MoneyAccount.objects.create(user=b, kind="buyer_credit", balance=Decimal("10"))
        MoneyEntry.objects.create(account=account, amount=Decimal("10"), balance_after=Decimal("10"), memo="top-up")
    return attribute, values, buyers


def run_concurrently(jobs, timeout: float = 180):
    """Run the jobs in threads released together by a barrier; the exceptions they raised."""
    errors = []
    barrier = threading.Barrier(len(jobs))

    def worker(job):
        try:
            barrier.wait()
            job()
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return errors


def test_concurrent_purchases_never_overspend(market_setup):
    attribute, values, buyers = market_setup
    jobs = []
    for k, buyer in enumerate(buyers):
        def job(buyer=buyer, k=k):
            for j, eps in enumerate(EPSILONS[k % 2:] + EPSILONS[:k % 2]):
                p, _ = purchases.purchase_claim(buyer=buyer, attribute=attribute, epsilon=eps, cohort=None,
                                                idempotency_key=f"{buyer.id}-{j}")
                purchases.purchase_execute(purchase_id=p.id)
        jobs.append(job)
    errors = run_concurrently(jobs)
    assert errors == []

    done = Purchase.objects.filter(status="completed")
    assert done.count() == len(buyers) * len(EPSILONS)
    # Inclusion was exact: a value is released at e iff its ceiling admits e.
    for p in done:
        admitted = sum(15 for c in CEILINGS if Decimal(c) >= p.epsilon)
        assert (p.included, p.excluded_ceiling) == (admitted, 60 - admitted)
        assert PurchaseChunk.objects.filter(purchase=p).aggregate(n=Sum("count"))["n"] or 0 == p.included

    # No loss above its ceiling; chain_loss is the highest epsilon released (ledger and budgets agree).
    released = dict(LedgerEntry.objects.filter(kind="chain_release").values("value_id")
                    .annotate(top=Max("epsilon")).values_list("value_id", "top"))
    for b in BudgetAccount.objects.filter(value__attribute=attribute):
        assert b.chain_loss + b.oneshot_loss <= b.ceiling
        assert b.chain_loss == released.get(b.value_id, Decimal(0))
        assert b.chain_loss == max((Decimal(e) for e in EPSILONS if Decimal(e) <= b.ceiling), default=Decimal(0))
    for entry in LedgerEntry.objects.filter(kind="chain_release"):
        assert entry.epsilon <= entry.ceiling and entry.chain_loss_after <= entry.ceiling
    assert hash_chain_problems() == []

    # Money: nothing created or lost; every balance is the sum of its entries; buyers paid their prices.
    assert MoneyAccount.objects.aggregate(s=Sum("balance"))["s"] == Decimal("10") * len(buyers)
    for account in MoneyAccount.objects.all():
        assert MoneyEntry.objects.filter(account=account).aggregate(s=Sum("amount"))["s"] == account.balance
    for b in buyers:
        spent = Purchase.objects.filter(buyer=b).aggregate(s=Sum("price"))["s"]
        assert MoneyAccount.objects.get(user=b, kind="buyer_credit").balance == Decimal("10") - spent

    # Every chain is still a valid chain: its grid points up to its ceiling, plus the one point bridged at 0.45
    # if its ceiling admits it, each exactly once (no fork), its head its highest point.
    grid = [100_000 * k for k in range(1, 11)]
    ceilings = dict(BudgetAccount.objects.filter(value__attribute=attribute).values_list("value_id", "ceiling"))
    heads = chain_heads(Value.objects.filter(attribute=attribute))
    for vid, (eps, out) in stored_chains(attribute).items():
        top = to_micro(ceilings[vid])
        assert eps.tolist() == sorted([g for g in grid if g <= top] + ([450_000] if top >= 450_000 else []))
        assert (eps[1:] > eps[:-1]).all() and out.shape == (eps.size, 1) and out.min() >= 0
        assert heads[vid] == (ceilings[vid], eps.size)
    # ... stored in at most one row per (block, epsilon), the bridged row written once (the first purchase at
    # 0.45 stored every admitted value's point; the others found them stored).
    blocks = ChainBlock.objects.filter(attribute=attribute).count()
    assert blocks == 4
    bridged = ChainPoint.objects.filter(attribute=attribute, epsilon=450_000)
    assert bridged.count() == blocks and set(bridged.values_list("revision", flat=True)) == {0}
    assert Purchase.objects.filter(epsilon=Decimal("0.45"), new_points__gt=0).count() == 1


def test_concurrent_replays_of_one_key_charge_once(market_setup):
    attribute, values, buyers = market_setup
    buyer = buyers[0]
    results = []

    def replay():
        p, created = purchases.purchase_claim(buyer=buyer, attribute=attribute, epsilon="0.4", cohort=None,
                                              idempotency_key="same-key")
        results.append((p.id, created, purchases.purchase_execute(purchase_id=p.id).price))

    assert run_concurrently([replay] * 6) == []
    assert len({r[0] for r in results}) == 1 and sum(r[1] for r in results) == 1
    assert Purchase.objects.filter(buyer=buyer).count() == 1
    price = Purchase.objects.get(buyer=buyer).price
    assert MoneyAccount.objects.get(user=buyer, kind="buyer_credit").balance == Decimal("10") - price
    assert LedgerEntry.objects.filter(kind="chain_release").count() == Purchase.objects.get(buyer=buyer).included


def test_postgres_rejects_overspending_even_if_a_service_tried(market_setup):
    """The CHECK constraint is the last line: a loss above the ceiling cannot be stored."""
    from django.db import IntegrityError, transaction

    attribute, values, _ = market_setup
    with pytest.raises(IntegrityError), transaction.atomic():
        BudgetAccount.objects.filter(value=values[0]).update(chain_loss=Decimal("0.31"))
    assert connection.vendor == "postgresql"


def test_a_purchase_waits_for_the_one_holding_its_budgets(market_setup):
    """Deterministic interleaving: A (eps 0.8) pauses inside its transaction, holding its locks; B (eps 0.6)
    must wait, then see A's loss.  Without the budget row locks B would read the stale loss, and its write
    would take chain_loss back down from 0.8 to 0.6 (a lost update that hides a release)."""
    attribute, values, buyers = market_setup
    a_locked, a_release, b_done = threading.Event(), threading.Event(), threading.Event()

    def pause(*_progress):
        a_locked.set()
        assert a_release.wait(30)

    def purchase_a():
        p, _ = purchases.purchase_claim(buyer=buyers[0], attribute=attribute, epsilon="0.8", cohort=None,
                                        idempotency_key="a")
        purchases.purchase_execute(purchase_id=p.id, progress=pause)

    def purchase_b():
        assert a_locked.wait(30)
        p, _ = purchases.purchase_claim(buyer=buyers[1], attribute=attribute, epsilon="0.6", cohort=None,
                                        idempotency_key="b")
        purchases.purchase_execute(purchase_id=p.id)
        b_done.set()

    def referee():
        assert a_locked.wait(30)
        assert not b_done.wait(1.5), "B finished while A held the budgets it needs"
        a_release.set()

    assert run_concurrently([purchase_a, purchase_b, referee]) == []
    top = BudgetAccount.objects.filter(value__attribute=attribute, ceiling__gte=Decimal("0.8"))
    assert set(top.values_list("chain_loss", flat=True)) == {Decimal("0.8")}
    b = Purchase.objects.get(idempotency_key="b")
    assert set(LedgerEntry.objects.filter(purchase=b, value__budget__ceiling__gte=Decimal("0.8"))
               .values_list("chain_loss_before", "chain_loss_after")) == {(Decimal("0.8"), Decimal("0.8"))}


def test_a_purchase_waits_for_the_attribute_chain_lock(market_setup):
    """Deterministic interleaving: while another transaction (an extension, say) holds the attribute's chain
    lock, a purchase that must store new points waits for it; then it reads the chains as they are and stores
    its points once."""
    attribute, values, buyers = market_setup
    locked, released, done = threading.Event(), threading.Event(), threading.Event()

    def holder():
        with transaction.atomic():
            chainstore.lock(attribute.id)
            locked.set()
            assert released.wait(30)

    def buyer():
        assert locked.wait(30)
        p, _ = purchases.purchase_claim(buyer=buyers[0], attribute=attribute, epsilon="0.45", cohort=None,
                                        idempotency_key="waits")
        purchases.purchase_execute(purchase_id=p.id)
        done.set()

    def referee():
        assert locked.wait(30)
        assert not done.wait(1.5), "the purchase stored chain points while another transaction held the lock"
        released.set()

    assert run_concurrently([holder, buyer, referee]) == []
    p = Purchase.objects.get(idempotency_key="waits")
    assert (p.status, p.included, p.new_points) == ("completed", 45, 45)
    assert ChainPoint.objects.filter(attribute=attribute, epsilon=450_000).count() == 4
    for vid, (eps, _) in stored_chains(attribute).items():
        assert np.count_nonzero(eps == 450_000) == (1 if BudgetAccount.objects.get(value_id=vid).ceiling >=
                                                    Decimal("0.45") else 0)
