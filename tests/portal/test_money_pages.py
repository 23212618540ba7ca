"""Money in the owner portal (earnings, payouts, statement) and in the admin console (top-ups, settling payouts),
through the real pages with the test client (docs/money.md)."""
from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.test import Client

from accounts.models import MoneyAccount, MoneyEntry, PayoutRequest, TopUp, User
from accounts.money import services as money
from accounts.roles import grant_role
from tests.factories import BuyerFactory, CategoricalAttributeFactory, OwnerFactory

from .conftest import contribute_one, purchase
from .test_pages import text

pytestmark = pytest.mark.django_db

PRICEY = {"points": [["0", "0"], ["10", "10"]], "owner_share": "0.8"}  # 1.00 per value at epsilon 1


@pytest.fixture
def earning_owner(owner, buyer):
    """An owner paid 0.80 for one sale: the purchase's earnings settled, as the task enqueued on its commit does."""
    attribute = CategoricalAttributeFactory(labels=["red", "green", "blue"], price_policy=PRICEY)
    contribute_one(owner, attribute, "red", ceiling="2")
    purchase(buyer, attribute, "1")
    money.earnings_settle(shard=attribute.id)
    return owner


def earnings(owner) -> Decimal:
    return MoneyAccount.objects.get(user=owner, kind="owner_earnings").balance


def staff_client() -> tuple[Client, User]:
    user = User.objects.create_user("operator", password="Operator-password-9")
    grant_role(user, "staff")  # as a deployment makes staff
    client = Client()
    client.force_login(user)
    return client, user


# ------------------------------------------------------------------------------------------------ portal

def test_the_money_page_shows_balance_statement_and_currency(owner_client, earning_owner, settings):
    settings.LDP_CURRENCY = "GBP"
    r = owner_client.get("/portal/money/")
    assert r.status_code == 200
    page, html = text(r), r.content.decode()
    assert re.search(r'id="money-balance">0\.80 GBP<', html)
    assert re.search(r'id="money-pending">0(\.00)? GBP<', html)  # everything earned is settled
    assert "Earning · settled earnings" in page and "0.80 GBP" in page
    assert "No payouts yet." in page
    assert 'href="/portal/money/"' in owner_client.get("/portal/").content.decode()  # in the navigation
    assert "GBP" in text(owner_client.get("/portal/"))


def test_unsettled_earnings_show_as_pending_until_settled_into_the_balance(owner_client, owner, buyer):
    """Right after a sale the owner's share is pending (earned, not yet in the balance); once the attribute's
    earnings are settled it is in the balance, with the settlement's entry in the statement."""
    attribute = CategoricalAttributeFactory(labels=["red", "green", "blue"], price_policy=PRICEY)
    contribute_one(owner, attribute, "red", ceiling="2")
    purchase(buyer, attribute, "1")
    html = owner_client.get("/portal/money/").content.decode()
    assert re.search(r'id="money-pending">0\.80 EUR<', html)
    assert re.search(r'id="money-balance">0\.00 EUR<', html)
    assert "settled earnings" not in html
    assert MoneyAccount.objects.get(kind="owners_pending", shard=attribute.id).balance == Decimal("0.80")

    settlement = money.earnings_settle(shard=attribute.id)
    assert settlement is not None and settlement.amount == Decimal("0.80") and settlement.owners == 1
    r = owner_client.get("/portal/money/")
    page, html = text(r), r.content.decode()
    assert re.search(r'id="money-pending">0\.00 EUR<', html)
    assert re.search(r'id="money-balance">0\.80 EUR<', html)
    assert "Earning · settled earnings" in page
    assert earnings(owner) == Decimal("0.80")
    assert MoneyAccount.objects.get(kind="owners_pending", shard=attribute.id).balance == Decimal(0)
    assert money.earnings_settle(shard=attribute.id) is None  # nothing left to settle


def test_an_owner_requests_a_payout_and_sees_it(owner_client, earning_owner):
    r = owner_client.post("/portal/money/payout/", {"amount": "0.50"}, follow=True)
    page = text(r)
    assert "Payout" in page and "0.50 EUR requested" in page
    assert earnings(earning_owner) == Decimal("0.30")
    assert re.search(r'id="money-held">0\.50 EUR<', r.content.decode())
    assert "Requested" in page and "Payout · payout requested" in page
    r = owner_client.post("/portal/money/payout/", {"amount": ""}, follow=True)  # the rest, in whole cents
    assert earnings(earning_owner) == Decimal(0) and PayoutRequest.objects.count() == 2


@pytest.mark.parametrize("amount, words", [("5", "but your earnings are 0.80 EUR"), ("0.001", "two decimal places"),
                                           ("-1", "positive amount"), ("abc", "such as 25.00"),
                                           # read by Python as 0.50 (docs/errors.md#numbers-in-requests)
                                           ("+0.50", "such as 25.00"), ("0.5_0", "such as 25.00"),
                                           ("\u0660.\u0665\u0660", "such as 25.00"), ("5e-1", "such as 25.00")])
def test_payout_errors_are_explained(owner_client, earning_owner, amount, words):
    page = text(owner_client.post("/portal/money/payout/", {"amount": amount}, follow=True))
    assert words in page
    assert earnings(earning_owner) == Decimal("0.80") and not PayoutRequest.objects.exists()


def test_only_owners_use_the_money_pages(client, earning_owner):
    assert client.get("/portal/money/").status_code == 302  # to sign in
    client.force_login(BuyerFactory())
    assert client.get("/portal/money/").status_code == 403
    assert client.post("/portal/money/payout/", {"amount": "0.10"}).status_code == 403
    assert client.get("/portal/money/payout/").status_code in (403, 405)
    assert not PayoutRequest.objects.exists()


# ------------------------------------------------------------------------------------------------ admin

def test_staff_top_up_buyers_with_a_reason_in_the_admin(buyer):
    client, staff = staff_client()
    owner = OwnerFactory()
    url = "/admin/accounts/user/"
    form = client.post(url, {"action": "top_up_credit", "_selected_action": [buyer.id, owner.id]})
    assert form.status_code == 200 and "Top up credit" in text(form) and "Not buyers, left out" in text(form)
    before = MoneyAccount.objects.get(user=buyer).balance
    missing = client.post(url, {"action": "top_up_credit", "_selected_action": [buyer.id], "apply": "1",
                                "amount": "12.34", "reason": ""})
    assert missing.status_code == 200 and MoneyAccount.objects.get(user=buyer).balance == before
    done = client.post(url, {"action": "top_up_credit", "_selected_action": [buyer.id, owner.id], "apply": "1",
                             "amount": "12.34", "reason": "conference voucher"}, follow=True)
    assert "Credited 12.34 EUR to 1 buyer(s)" in text(done)
    assert MoneyAccount.objects.get(user=buyer).balance == before + Decimal("12.34")
    t = TopUp.objects.get()
    assert (t.by, t.reason, t.entry.memo) == (staff, "conference voucher", "conference voucher")
    # the same from the buyer accounts' list
    account = MoneyAccount.objects.get(user=buyer)
    client.post("/admin/accounts/moneyaccount/", {"action": "top_up_credit", "_selected_action": [account.id],
                                                  "apply": "1", "amount": "1", "reason": "r"})
    assert MoneyAccount.objects.get(user=buyer).balance == before + Decimal("13.34")
    listing = text(client.get("/admin/accounts/moneyaccount/"))
    assert f"{before + Decimal('13.34'):.2f} EUR" in listing


def test_auditors_cannot_top_up_or_settle(buyer, earning_owner, auditor):
    client = Client()
    client.force_login(auditor)
    r = client.post("/admin/accounts/user/", {"action": "top_up_credit", "_selected_action": [buyer.id],
                                              "apply": "1", "amount": "5", "reason": "x"})
    assert r.status_code == 403
    p = money.payout_request(owner=earning_owner, amount="0.10")
    r = client.post("/admin/accounts/payoutrequest/", {"action": "settle", "_selected_action": [p.id]})
    assert r.status_code == 403
    assert not TopUp.objects.exists() and PayoutRequest.objects.get().status == "requested"
    assert client.get("/admin/accounts/payoutrequest/").status_code == 200  # auditors read


def test_staff_settle_and_reject_payouts_in_the_admin(earning_owner):
    client, staff = staff_client()
    a = money.payout_request(owner=earning_owner, amount="0.30")
    b = money.payout_request(owner=earning_owner, amount="0.20")
    listing = text(client.get("/admin/accounts/payoutrequest/"))
    assert "0.30 EUR" in listing and "Requested" in listing
    r = client.post("/admin/accounts/payoutrequest/", {"action": "settle", "_selected_action": [a.id]}, follow=True)
    assert "Settled 1 payout(s), 0.30 EUR" in text(r)
    r = client.post("/admin/accounts/payoutrequest/", {"action": "reject", "_selected_action": [a.id, b.id]},
                    follow=True)
    assert "Rejected 1 payout(s), 0.20 EUR" in text(r) and "already settled" in text(r)
    assert dict(PayoutRequest.objects.values_list("id", "status")) == {a.id: "settled", b.id: "rejected"}
    assert PayoutRequest.objects.get(id=a.id).decided_by == staff
    assert earnings(earning_owner) == Decimal("0.50")


def test_the_platform_fee_statement_in_the_admin(earning_owner):
    client, _ = staff_client()
    fee = MoneyEntry.objects.get(account__kind="platform")
    page = text(client.get("/admin/accounts/moneyentry/?account__kind__exact=platform"))
    assert f"{fee.amount:.2f} EUR" in page and "Platform fee" in page
