"""Top-ups, payouts and purchases at once (docs/money.md): real threads on PostgreSQL never lose or create money.

Buyers are topped up while they buy, owners ask for payouts while they are paid, and an operator settles and
rejects payouts meanwhile.  Afterwards every balance is the sum of its entries, what all accounts hold equals what
came in less what was paid out, each buyer's credit is their deposits and top-ups less their purchases, and the
audit passes.
"""
from __future__ import annotations

import random
import time
from decimal import Decimal

import pytest
from django.db.models import Sum

from accounts.models import MoneyAccount, MoneyEntry, PayoutRequest, TopUp, User
from accounts.money import services
from audit.budget_audit import audit_budgets
from ldpmarket import problems
from market.models import Purchase
from market.purchases import execution as purchases
from tests.market.test_purchase_concurrency import market_setup, run_concurrently  # noqa: F401 (fixture)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

EPSILONS = ["0.2", "0.4", "0.6", "0.8"]


def test_topups_payouts_and_purchases_at_once_keep_every_cent(market_setup):  # noqa: F811
    attribute, values, buyers = market_setup
    attribute.price_policy = {"points": [["0", "0"], ["10", "1"]], "owner_share": "0.8"}  # owners earn cents
    attribute.save(update_fields=["price_policy"])
    staff = User.objects.create(username="ops", role="staff", is_staff=True)
    owners = sorted({v.owner_id for v in values})[:8]
    jobs = []
    for k, buyer in enumerate(buyers):
        def shopper(buyer=buyer, k=k):
            for j, eps in enumerate(EPSILONS):
                p, _ = purchases.purchase_claim(buyer=buyer, attribute=attribute, epsilon=eps, cohort=None,
                                                idempotency_key=f"{buyer.id}-{j}")
                try:
                    purchases.purchase_execute(purchase_id=p.id)
                except problems.InsufficientCredit:
                    pass

        def topper(buyer=buyer, k=k):
            for j in range(4):
                services.money_topup(buyer=buyer, amount="0.05", reason=f"round {j}", by=staff,
                                  idempotency_key=f"t-{buyer.id}-{j}")
                # a retry of the same top-up (as a client after a timeout) credits nothing more
                services.money_topup(buyer=buyer, amount="0.05", reason=f"round {j}", by=staff,
                                  idempotency_key=f"t-{buyer.id}-{j}")
        jobs += [shopper, topper]

    for i, owner_id in enumerate(owners):
        def payee(owner_id=owner_id, i=i):
            owner = User.objects.get(id=owner_id)
            rnd = random.Random(i)
            made = 0
            for _ in range(400):
                try:
                    p = services.payout_request(owner=owner, amount="0.01")
                except services.PayoutRefused:
                    time.sleep(0.005)  # not earned yet
                    continue
                decide = services.payout_settle if rnd.random() < 0.5 else services.payout_reject
                decide(payout_id=p.id, by=staff)
                made += 1
                if made == 4:
                    break
        jobs.append(payee)

    assert run_concurrently(jobs) == []

    # Every balance is the sum of its entries.
    for account in MoneyAccount.objects.all():
        assert MoneyEntry.objects.filter(account=account).aggregate(s=Sum("amount"))["s"] == account.balance
    # Nothing created or lost: holdings = deposits (10 each) + top-ups - payouts held or settled.
    topped = TopUp.objects.aggregate(s=Sum("amount"))["s"]
    assert topped == Decimal("0.20") * len(buyers) and TopUp.objects.count() == 4 * len(buyers)
    paid = (PayoutRequest.objects.exclude(status="rejected").aggregate(s=Sum("amount"))["s"] or Decimal(0))
    total = MoneyAccount.objects.aggregate(s=Sum("balance"))["s"]
    assert total == Decimal(10) * len(buyers) + topped - paid
    for b in buyers:
        spent = Purchase.objects.filter(buyer=b, status="completed").aggregate(s=Sum("price"))["s"] or Decimal(0)
        assert MoneyAccount.objects.get(user=b, kind="buyer_credit").balance == Decimal("10.20") - spent
    assert Purchase.objects.filter(status="completed").exists()
    assert PayoutRequest.objects.filter(status="settled").exists()
    assert PayoutRequest.objects.filter(status="rejected").exists()
    report = audit_budgets()
    assert report.ok, report.as_text()


def test_concurrent_retries_of_one_top_up_credit_once(market_setup):  # noqa: F811
    _, _, buyers = market_setup
    buyer = buyers[0]
    results = []

    def retry():
        results.append(services.money_topup(buyer=buyer, amount="1.00", reason="same", by=None,
                                         idempotency_key="one-key").id)

    assert run_concurrently([retry] * 6) == []
    assert len(set(results)) == 1 and TopUp.objects.count() == 1
    assert MoneyAccount.objects.get(user=buyer, kind="buyer_credit").balance == Decimal("11.00")
