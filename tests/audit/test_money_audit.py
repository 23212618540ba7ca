"""``audit_budgets`` and money movements beyond purchases: top-ups and payouts reconcile (docs/money.md)."""
from __future__ import annotations

from decimal import Decimal as D

import numpy as np
import pytest
from django.db.models import F

from accounts import money
from accounts.models import MoneyAccount, MoneyEntry, PayoutRequest, TopUp
from audit.budget_audit import audit_budgets
from tests.audit.conftest import buy, tampering
from tests.factories import CategoricalAttributeFactory, contribute
from tests.audit.test_audit_budgets import failed

pytestmark = pytest.mark.django_db


@pytest.fixture
def moved(market, staff):
    """The audit's market plus a top-up, and an owner's payouts: one settled, one rejected, one requested."""
    money.money_topup(buyer=market.buyer, amount="20.00", reason="invoice 1", by=staff, idempotency_key="i1")
    pricey = CategoricalAttributeFactory(price_policy={"points": [["0", "0"], ["10", "10"]], "owner_share": "0.8"})
    richest = [v.owner for v in contribute(pricey, ["red", "green", "blue"], ceiling="2")]
    buy(market.buyer, pricey, "1", np.random.default_rng(3))  # 0.80 to each owner
    money.earnings_settle(shard=pricey.id)
    payouts = [money.payout_request(owner=owner, amount="0.01") for owner in richest]
    owner = richest[1]  # its payout is rejected: the money came back
    money.payout_settle(payout_id=payouts[0].id, by=staff)
    money.payout_reject(payout_id=payouts[1].id, by=staff)
    return market, owner, payouts


def test_topups_and_payouts_pass(moved):
    report = audit_budgets()
    assert report.ok, report.as_text()
    names = [c.name for c in report.checks]
    for fragment in ("each top-up is one credit", "each payout holds", "belongs to its top-up or payout",
                     "purchases' and settlements' movements", "neither created nor lost"):
        assert any(fragment in n for n in names), fragment


def forge_topup_movement(m):
    market, _, _ = m
    account = MoneyAccount.objects.get(user=market.buyer, kind="buyer_credit")
    MoneyEntry.objects.create(account=account, amount=D(5), balance_after=account.balance + D(5), kind="topup",
                              memo="forged")
    MoneyAccount.objects.filter(id=account.id).update(balance=F("balance") + D(5))


def edit_topup_amount(m):
    TopUp.objects.update(amount=F("amount") + D(1))


def edit_payout_amount(m):
    PayoutRequest.objects.filter(id=m[2][0].id).update(amount=D("0.005"))


def forge_payout_return(m):
    _, owner, _ = m
    account = MoneyAccount.objects.get(user=owner, kind="owner_earnings")
    MoneyEntry.objects.create(account=account, amount=D(1), balance_after=account.balance + D(1), kind="payout",
                              memo="forged return")
    MoneyAccount.objects.filter(id=account.id).update(balance=F("balance") + D(1))


def relabel_earning(m):
    MoneyEntry.objects.filter(id=MoneyEntry.objects.filter(kind="earning").order_by("id").first().id).update(
        kind="adjustment")


def move_topup_to_another_account(m):
    market, owner, _ = m
    entry = TopUp.objects.get().entry
    other = MoneyAccount.objects.get(user=owner, kind="owner_earnings")
    MoneyEntry.objects.filter(id=entry.id).update(account=other)


CASES = {
    "a top-up movement without its record": (forge_topup_movement, ["belongs to its top-up or payout"]),
    "a top-up's amount edited": (edit_topup_amount, ["each top-up is one credit"]),
    "a payout's amount edited": (edit_payout_amount, ["each payout holds"]),
    "a payout return forged": (forge_payout_return, ["belongs to its top-up or payout", "credited only by purchases"]),
    "an earning relabelled": (relabel_earning, ["purchases' and settlements' movements"]),
    "a top-up credited to an owner": (move_topup_to_another_account, ["each top-up is one credit"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_money_tampering_is_caught(moved, case):
    tamper, expected = CASES[case]
    assert audit_budgets().ok
    with tampering():
        tamper(moved)
    report = audit_budgets()
    assert not report.ok
    failed(report, *expected)
    for c in report.failed:
        assert c.examples, c.name
