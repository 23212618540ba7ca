"""``audit_budgets`` and money movements beyond purchases: top-ups and payouts reconcile (docs/money.md)."""
from __future__ import annotations

from decimal import Decimal as D

import numpy as np
import pytest
from django.db.models import F

from accounts.models import LedgerRelease, MoneyAccount, MoneyEntry, PayoutRequest, Settlement, TopUp
from accounts.money import services as money
from audit.budget_audit import audit_budgets
from tests.audit.conftest import buy, tampering
from tests.audit.test_audit_budgets import failed, names
from tests.factories import CategoricalAttributeFactory, contribute

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


# ---------------------------------------------------------------------------------------------------------------
# Owners' earnings and their settlement (docs/money.md#settlement)
# ---------------------------------------------------------------------------------------------------------------

SETTLEMENT_CHECKS = (
    "each released value's owner in the ledger is the value's owner",
    "per purchase: the owners' pending credit equals the earnings its ledger rows record",
    "a purchase credits the pending account of its own attribute",
    "each attribute's settlements follow each other without gap or overlap",
    "each settlement credits every owner exactly their values' earnings in the rows it covers",
    "each settlement debits its attribute's pending account what it credits the owners",
    "each attribute's pending account holds exactly its earnings not settled yet",
)


def _pending(market) -> MoneyAccount:
    return MoneyAccount.objects.get(kind="owners_pending", shard=market.attribute.id)


def test_the_market_settles_its_first_purchase_and_passes(market):
    """The audit's market: the first purchase's earnings settled, the second's pending; every check passes, the
    settlement checks with rows to check."""
    first, second = market.purchases
    [s] = Settlement.objects.filter(shard=market.attribute.id)
    rows = LedgerRelease.objects.filter(shard=market.attribute.id)
    assert (s.after_release, s.through_release) == (0, max(rows.filter(purchase=first).values_list("id", flat=True)))
    assert s.amount > 0 and s.owners == first.included

    def earned(p):
        return sum(int(x) for r in rows.filter(purchase=p) for x in r.earnings)

    assert s.amount == D(earned(first)) / 10_000
    assert _pending(market).balance == D(earned(second)) / 10_000 > 0
    report = audit_budgets()
    assert report.ok, report.as_text()
    checks = {c.name: c for c in report.checks}
    for name in SETTLEMENT_CHECKS:
        assert checks[name].checked > 0, name


def _shift(entry: MoneyEntry, delta: D) -> None:
    """Change a money entry's amount by ``delta`` and keep its account's replay consistent: its own and every
    later entry's ``balance_after`` and the account's balance move by ``delta`` too (what a careful forger
    does)."""
    MoneyEntry.objects.filter(id=entry.id).update(amount=F("amount") + delta)
    MoneyEntry.objects.filter(account_id=entry.account_id, id__gte=entry.id).update(
        balance_after=F("balance_after") + delta)
    MoneyAccount.objects.filter(id=entry.account_id).update(balance=F("balance") + delta)


def _remove(entries) -> None:
    """Delete money entries, each account's later ``balance_after`` and its balance adjusted to match."""
    for entry in sorted(entries, key=lambda e: -e.id):
        MoneyEntry.objects.filter(account_id=entry.account_id, id__gt=entry.id).update(
            balance_after=F("balance_after") - entry.amount)
        MoneyAccount.objects.filter(id=entry.account_id).update(balance=F("balance") - entry.amount)
        MoneyEntry.objects.filter(id=entry.id).delete()


def _credits(settlement) -> list[MoneyEntry]:
    return list(MoneyEntry.objects.filter(settlement=settlement, amount__gt=0).order_by("id"))


def move_settled_credit(market):
    """One owner's settlement credit lowered, another's raised as much: the settlement still nets to zero, debits
    what it credits, and money is conserved; each account replays."""
    a, b = _credits(Settlement.objects.get())[:2]
    _shift(a, -D("0.0010"))
    _shift(b, D("0.0010"))


def raise_settled_credit(market):
    """One owner's settlement credit raised (its account kept consistent): more than the ledger says it earned."""
    _shift(_credits(Settlement.objects.get())[0], D("0.0100"))


def redirect_release_owner(market):
    """An unsettled release's owner replaced by another user (the owners are not covered by the hash as such);
    then the settlement pays the forged owner, as the application would."""
    row = LedgerRelease.objects.filter(purchase=market.purchases[1]).order_by("id").first()
    thief = market.scheduled[0].owner_id
    owners = np.asarray(row.owner_ids).copy()
    assert owners[0] != thief
    owners[0] = thief
    LedgerRelease.objects.filter(id=row.id).update(owner_ids=owners)
    money.earnings_settle(shard=market.attribute.id)


def forge_pending_balance(market):
    """The pending account's balance raised, with a forged entry to match (kind adjustment: as a deposit)."""
    pending = _pending(market)
    MoneyEntry.objects.create(account=pending, amount=D("0.5"), balance_after=pending.balance + D("0.5"),
                              kind="adjustment", memo="deposit")
    MoneyAccount.objects.filter(id=pending.id).update(balance=F("balance") + D("0.5"))


def drain_pending_balance(market):
    """Unsettled earnings moved off the pending account to an owner by two forged adjustments (money conserved)."""
    pending = _pending(market)
    amount = pending.balance
    thief = MoneyAccount.objects.filter(kind="owner_earnings").order_by("id").first()
    MoneyEntry.objects.create(account=pending, amount=-amount, balance_after=0, kind="adjustment", memo="moved")
    MoneyAccount.objects.filter(id=pending.id).update(balance=0)
    MoneyEntry.objects.create(account=thief, amount=amount, balance_after=thief.balance + amount,
                              kind="adjustment", memo="moved")
    MoneyAccount.objects.filter(id=thief.id).update(balance=F("balance") + amount)


def delete_settlement(market):
    """The first of two settlements deleted with its money entries, every account's replay kept consistent (the
    owners lose their credits, the pending account gets the amount back)."""
    money.earnings_settle(shard=market.attribute.id)  # the second purchase's earnings: a second settlement
    first = Settlement.objects.order_by("id").first()
    assert Settlement.objects.count() == 2
    _remove(list(MoneyEntry.objects.filter(settlement=first)))
    Settlement.objects.filter(id=first.id).delete()


def edit_pending_credit(market):
    """A purchase's credit to the pending account raised, its platform fee lowered as much: the purchase still
    nets to zero and every account replays."""
    second = market.purchases[1]
    credit = MoneyEntry.objects.get(purchase=second, account=_pending(market))
    fee = MoneyEntry.objects.get(purchase=second, kind="fee")
    _shift(credit, D("0.0003"))
    _shift(fee, -D("0.0003"))


SETTLEMENT_CASES = {
    # case: (tampering, the checks that fail: exactly these)
    "a settled credit moved between owners": (
        move_settled_credit, ["each settlement credits every owner exactly"]),
    "a settled credit raised": (
        raise_settled_credit, ["each settlement credits every owner exactly",
                               "each settlement debits its attribute's pending account what it credits",
                               "money is neither created nor lost"]),
    "a release's owner redirected, then settled": (
        redirect_release_owner, ["each released value's owner in the ledger is the value's owner"]),
    "the pending balance raised with a forged entry": (
        forge_pending_balance, ["each attribute's pending account holds exactly its earnings not settled yet",
                                "credited only by purchases and settlements"]),
    "the pending balance drained by forged entries": (
        drain_pending_balance, ["each attribute's pending account holds exactly its earnings not settled yet",
                                "credited only by purchases and settlements"]),
    "a settlement deleted with its entries": (
        delete_settlement, ["each attribute's settlements follow each other without gap or overlap",
                            "each attribute's pending account holds exactly its earnings not settled yet"]),
    "a purchase's pending credit edited": (
        edit_pending_credit, ["per purchase: the owners' pending credit equals the earnings its ledger rows record",
                              "each attribute's pending account holds exactly its earnings not settled yet"]),
}


MONEY_CREATED = {"a settled credit raised", "the pending balance raised with a forged entry"}


@pytest.mark.parametrize("case", list(SETTLEMENT_CASES))
def test_settlement_tampering_is_caught(market, case):
    tamper, expected = SETTLEMENT_CASES[case]
    assert audit_budgets().ok
    total = sum(MoneyAccount.objects.values_list("balance", flat=True))  # in Decimal (SQLite sums floats)
    with tampering():
        tamper(market)
    report = audit_budgets()
    assert not report.ok
    failed(report, *expected)
    assert len(names(report)) == len(expected), names(report)  # and nothing else: each check names its case
    for c in report.failed:
        assert c.examples, c.name
    if case not in MONEY_CREATED:  # the others only move money, as a forger hiding the change would
        assert sum(MoneyAccount.objects.values_list("balance", flat=True)) == total
        assert "money is neither created nor lost" not in " ".join(names(report))
