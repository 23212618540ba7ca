"""Money services and commands (docs/money.md): top-ups, create_buyer, payouts and their settlement."""
from __future__ import annotations

from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction

from accounts.models import MoneyAccount, MoneyEntry, PayoutRequest, TopUp, User
from accounts.money import services as money
from tests.factories import BuyerFactory, OwnerFactory, StaffFactory

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def balance(user, kind="buyer_credit") -> Decimal:
    return MoneyAccount.objects.get(user=user, kind=kind).balance


def earn(owner, amount: str) -> MoneyAccount:
    """Give an owner earnings as a sale would leave them (an entry of kind earning; the audit tests use real sales)."""
    account, _ = MoneyAccount.objects.get_or_create(user=owner, kind="owner_earnings")
    account.balance += Decimal(amount)
    account.save()
    MoneyEntry.objects.create(account=account, amount=Decimal(amount), balance_after=account.balance, kind="adjustment",
                              memo="test earnings")
    return account


# ------------------------------------------------------------------------------------------------ top-ups

def test_topup_credits_exactly_with_its_reason_and_author():
    buyer, staff = BuyerFactory(), StaffFactory()
    t = money.money_topup(buyer=buyer, amount="0.10", reason="  refund  ", by=staff)
    t2 = money.money_topup(buyer=buyer, amount=Decimal("0.20"), reason="bonus", by=None)
    assert balance(buyer) == Decimal("0.30")  # exact: 0.1 + 0.2 in floats would not be
    assert (t.reason, t.by, t.entry.kind, t.entry.memo, t.entry.amount) == ("refund", staff, "topup", "refund",
                                                                            Decimal("0.10"))
    assert t2.entry.balance_after == Decimal("0.30")


@pytest.mark.parametrize("amount", ["0", "-1", "0.001", "abc", "1e30", "Infinity", "NaN", ""])
def test_topup_refuses_bad_amounts(amount):
    buyer = BuyerFactory()
    with pytest.raises(money.MoneyError):
        money.money_topup(buyer=buyer, amount=amount, reason="x", by=None)
    assert not MoneyEntry.objects.exists()


def test_topup_needs_a_reason_and_a_buyer():
    with pytest.raises(money.MoneyError):
        money.money_topup(buyer=BuyerFactory(), amount="1", reason="  ", by=None)
    for who in (OwnerFactory(), StaffFactory()):
        with pytest.raises(money.NotABuyer):
            money.money_topup(buyer=who, amount="1", reason="x", by=None)
    assert not TopUp.objects.exists()


def test_topup_key_credits_once_and_refuses_another_body():
    buyer = BuyerFactory()
    first = money.money_topup(buyer=buyer, amount="5", reason="a", by=None, idempotency_key="k")
    again = money.money_topup(buyer=buyer, amount="5.00", reason="a", by=None, idempotency_key="k")
    assert again.id == first.id and again.replayed and balance(buyer) == Decimal(5)
    with pytest.raises(money.TopUpConflict):
        money.money_topup(buyer=buyer, amount="6", reason="a", by=None, idempotency_key="k")
    with pytest.raises(money.TopUpConflict):
        money.money_topup(buyer=BuyerFactory(), amount="5", reason="a", by=None, idempotency_key="k")
    assert TopUp.objects.count() == 1 and balance(buyer) == Decimal(5)


def test_database_refuses_a_topup_without_reason_or_a_negative_one():
    buyer = BuyerFactory()
    t = money.money_topup(buyer=buyer, amount="5", reason="a", by=None)
    for field, value in (("reason", ""), ("amount", Decimal("-1"))):
        with pytest.raises(IntegrityError), transaction.atomic():
            TopUp.objects.filter(id=t.id).update(**{field: value})


def test_credit_topup_command_prints_currency(settings):
    settings.LDP_CURRENCY = "USD"
    buyer = BuyerFactory(username="carol")
    out = run("credit_topup", "carol", "12.5", "--reason", "invoice 7")
    assert "credited 12.50 USD; balance 12.50 USD" in out and "invoice 7" in out
    assert run("credit_topup", str(buyer.id), "1", "--reason", "r", "--key", "x").count("credited 1.00 USD") == 1
    assert "already credited" in run("credit_topup", "carol", "1", "--reason", "r", "--key", "x")
    assert balance(buyer) == Decimal("13.50")
    for args in (("nobody", "1"), ("carol", "1.234"), ("carol", "-3")):
        with pytest.raises(CommandError):
            run("credit_topup", *args, "--reason", "r")
    with pytest.raises(CommandError):
        run("credit_topup", OwnerFactory().username, "1", "--reason", "r")


def test_create_buyer_makes_a_buyer_as_a_deployment_does():
    out = run("create_buyer", "dana", "--email", "d@example.org", "--organisation", "Lab", "--password",
              "Correct-horse-battery-9", "--credit", "500")
    assert "Created buyer dana" in out and "500.00 EUR" in out
    dana = User.objects.get(username="dana")
    assert (dana.role, dana.is_staff, dana.email, dana.organisation) == ("buyer", False, "d@example.org", "Lab")
    assert dana.check_password("Correct-horse-battery-9")
    assert balance(dana) == Decimal(500) and TopUp.objects.get(buyer=dana).reason == "initial credit (create_buyer)"
    with pytest.raises(CommandError, match="already exists"):
        run("create_buyer", "dana", "--password", "Correct-horse-battery-9")
    with pytest.raises(CommandError, match="Password refused"):
        run("create_buyer", "erin", "--password", "123")
    with pytest.raises(CommandError):
        run("create_buyer", "erin", "--password", "Correct-horse-battery-9", "--credit", "0.001")
    assert not User.objects.filter(username="erin").exists()


def test_create_buyer_asks_for_the_password(monkeypatch):
    from accounts.management.commands import create_buyer

    answers = iter(["Correct-horse-battery-9", "Correct-horse-battery-9"])
    monkeypatch.setattr(create_buyer.getpass, "getpass", lambda prompt: next(answers))
    monkeypatch.setattr(create_buyer.Command, "stdin_isatty", staticmethod(lambda: True))
    run("create_buyer", "fay")
    assert User.objects.get(username="fay").check_password("Correct-horse-battery-9")


# ------------------------------------------------------------------------------------------------ payouts

def test_payout_holds_money_and_never_exceeds_the_balance():
    owner = OwnerFactory()
    earn(owner, "10.5050")
    p = money.payout_request(owner=owner, amount="4")
    assert balance(owner, "owner_earnings") == Decimal("6.5050") and p.hold.amount == Decimal(-4)
    with pytest.raises(money.PayoutRefused):
        money.payout_request(owner=owner, amount="6.51")
    whole = money.payout_request(owner=owner)  # the whole balance, in whole cents
    assert whole.amount == Decimal("6.50") and balance(owner, "owner_earnings") == Decimal("0.0050")
    with pytest.raises(money.PayoutRefused):
        money.payout_request(owner=owner)
    with pytest.raises(money.PayoutRefused):
        money.payout_request(owner=BuyerFactory(), amount="1")


def test_settle_and_reject():
    owner, staff = OwnerFactory(), StaffFactory()
    earn(owner, "10")
    a = money.payout_request(owner=owner, amount="3")
    b = money.payout_request(owner=owner, amount="2")
    money.payout_settle(payout_id=a.id, by=staff)
    money.payout_reject(payout_id=b.id, by=staff, note="bank details missing")
    a.refresh_from_db(), b.refresh_from_db()
    assert (a.status, a.decided_by, b.status, b.release.amount) == ("settled", staff, "rejected", Decimal(2))
    assert balance(owner, "owner_earnings") == Decimal(7)
    for service in (money.payout_settle, money.payout_reject):
        for p in (a, b):
            with pytest.raises(money.PayoutRefused):
                service(payout_id=p.id, by=staff)
    assert balance(owner, "owner_earnings") == Decimal(7)


def test_settle_payouts_command():
    owner = OwnerFactory(username="olga")
    earn(owner, "10")
    a = money.payout_request(owner=owner, amount="3")
    b = money.payout_request(owner=owner, amount="2")
    c = money.payout_request(owner=owner, amount="1")
    listing = run("settle_payouts")
    assert f"payout {a.id}: olga 3.00 EUR" in listing and "3 requested payout(s), 6.00 EUR in all." in listing
    out = run("settle_payouts", "--reject", str(b.id), "--id", str(a.id), "--note", "paid by transfer")
    assert "rejected, 2.00 EUR back to olga" in out and "1 payout(s) settled, 3.00 EUR" in out
    assert "1 payout(s) settled, 1.00 EUR" in run("settle_payouts", "--all")
    statuses = dict(PayoutRequest.objects.values_list("id", "status"))
    assert statuses == {a.id: "settled", b.id: "rejected", c.id: "settled"}
    assert PayoutRequest.objects.get(id=a.id).note == "paid by transfer"
    with pytest.raises(CommandError):
        run("settle_payouts", "--id", str(a.id))
    with pytest.raises(CommandError, match="No payout"):
        run("settle_payouts", "--id", "999999")
    assert balance(owner, "owner_earnings") == Decimal(6)


def test_database_keeps_payouts_consistent():
    owner = OwnerFactory()
    earn(owner, "10")
    p = money.payout_request(owner=owner, amount="3")
    for change in ({"status": "settled"}, {"status": "rejected"}, {"amount": Decimal(0)}):
        with pytest.raises(IntegrityError), transaction.atomic():
            PayoutRequest.objects.filter(id=p.id).update(**change)
