"""Issue 31: one precision policy for money amounts (docs/money.md#how-amounts-are-shown).

Nothing is rounded for display; machines get decimal strings with exactly 4 places and the currency; people get
the amount with its currency code, 2 places for a whole number of cents and all 4 otherwise.
"""
from __future__ import annotations

import re
import uuid
from decimal import Decimal

import numpy as np
import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.models import MoneyAccount
from accounts.money import services as money
from accounts.money.format import format_money
from accounts.roles import grant_role
from ldpmarket_client.money import format_money_text
from tests.factories import BuyerFactory, CategoricalAttributeFactory, OwnerFactory, fund, make_owners

D = Decimal

#: The examples of issue 31: the stored amount, what people read, what machines read.
EXAMPLES = [
    (D("15.0400000000000"), "15.04 EUR", "15.0400"),  # a SUM() of decimals, as SQLite gives it
    (D("15.0400"), "15.04 EUR", "15.0400"),
    (D("0.0128"), "0.0128 EUR", "0.0128"),
    (D("0.0080"), "0.0080 EUR", "0.0080"),
    (D("0.008"), "0.0080 EUR", "0.0080"),
    (D("1.7550"), "1.7550 EUR", "1.7550"),
    (D("-1.7600"), "-1.76 EUR", "-1.7600"),
    (D("-1.7550"), "-1.7550 EUR", "-1.7550"),
    (D("0"), "0.00 EUR", "0.0000"),
    (D("-0.0000"), "0.00 EUR", "0.0000"),
    (D("100"), "100.00 EUR", "100.0000"),
    (D("0.0001"), "0.0001 EUR", "0.0001"),
    (D("999999999999.9999"), "999999999999.9999 EUR", "999999999999.9999"),
]


def machine_amount(amount) -> str:
    from accounts.money.format import machine_amount as machine  # new in issue 31: imported here so the other
    return machine(amount)                                          # tests of this file run on the old code too


def api_client(user) -> APIClient:
    client = APIClient()
    _, key = AuthToken.objects.create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def contribute(attribute, n: int, owners=None):
    from market.values.services import values_create_many

    owners = owners or make_owners(n, f"mp-{uuid.uuid4().hex[:6]}")
    return values_create_many(attribute=attribute, owners=owners, raws=["red"] * n, ceiling="2",
                              rng=np.random.default_rng(0))


def buy(buyer, attribute, epsilon="1"):
    from market.purchases.execution import purchase_claim, purchase_execute

    p, _ = purchase_claim(buyer=buyer, attribute=attribute, epsilon=epsilon, cohort=None,
                          idempotency_key=uuid.uuid4().hex)
    return purchase_execute(purchase_id=p.id, rng=np.random.default_rng(0))


def policy(price_at_1: str) -> dict:
    """``price_at_1`` per value at epsilon 1 (and after), owners get 80%."""
    return {"points": [["0", "0"], ["1", price_at_1]], "owner_share": "0.8"}


@pytest.fixture
def buyer(db):
    user = BuyerFactory()
    fund(user, "100")
    return user


# ------------------------------------------------------------------------------------------------ the rule

@pytest.mark.parametrize("stored, human, machine", EXAMPLES)
def test_people_read_two_places_for_whole_cents_else_four(stored, human, machine, settings):
    settings.LDP_CURRENCY = "EUR"
    assert format_money(stored) == human


@pytest.mark.parametrize("stored, human, machine", EXAMPLES)
def test_machines_read_exactly_four_places(stored, human, machine):
    assert machine_amount(stored) == machine


@pytest.mark.parametrize("stored, human, machine", EXAMPLES)
def test_the_clients_formatter_agrees(stored, human, machine, settings):
    settings.LDP_CURRENCY = "EUR"
    assert format_money_text(machine, "EUR") == format_money(stored) == human
    assert format_money_text(stored, "EUR") == human


@pytest.mark.parametrize("bad", [D("0.00005"), D("1.23456"), D("-0.00001"), "0.12345", 0.1, D("NaN")])
def test_an_amount_that_would_need_rounding_is_refused_not_rounded(bad):
    """Old code: ``format_money(Decimal("0.00005"))`` was "0.00 EUR" (rounded to an amount that was not stored)."""
    with pytest.raises(ValueError):
        format_money(bad)
    with pytest.raises(ValueError):
        machine_amount(bad)
    with pytest.raises(ValueError):
        format_money_text(bad, "EUR")


@hsettings(max_examples=300, deadline=None)
@given(units=st.integers(min_value=-(10 ** 16) + 1, max_value=10 ** 16 - 1))
def test_every_stored_amount_reads_back_exactly(units):
    """Property: for any amount a NUMERIC(16, 4) column holds, both formats parse back to exactly that Decimal, the
    machine format has exactly 4 places, the human one 2 or 4, and the client's formatter says the same."""
    from django.conf import settings

    stored = (D(units) / 10_000).quantize(D("0.0001"))
    machine = machine_amount(stored)
    assert re.fullmatch(r"-?\d+\.\d{4}", machine) and D(machine) == stored
    human = format_money(stored)
    amount, currency = human.split(" ")
    assert currency == settings.LDP_CURRENCY and D(amount) == stored
    assert re.fullmatch(r"-?\d+\.(\d{2}|\d{4})", amount)
    assert len(amount.split(".")[1]) == (2 if stored == stored.quantize(D("0.01")) else 4)
    assert format_money_text(machine, currency) == human


# ------------------------------------------------------------------------------------------------ the API

@pytest.mark.django_db
def test_account_api_gives_the_exact_balance(buyer):
    """Old code: an owner earning 0.0128 read ``"balance": "0.01"`` (rounded to cents), and a buyer "100.00"."""
    from accounts.money.services import earnings_settle

    attribute = CategoricalAttributeFactory(labels=["red", "green"], price_policy=policy("0.016"))
    value = contribute(attribute, 1)[0]
    buy(buyer, attribute)
    owner = value.owner
    body = api_client(owner).get("/api/v1/account/").json()
    assert body == {"kind": "owner_earnings", "currency": "EUR", "balance": "0.0000", "pending": "0.0128"}
    earnings_settle(shard=attribute.id)
    body = api_client(owner).get("/api/v1/account/").json()
    assert body == {"kind": "owner_earnings", "currency": "EUR", "balance": "0.0128", "pending": "0.0000"}
    assert MoneyAccount.objects.get(user=owner, kind="owner_earnings").balance == D(body["balance"])
    assert api_client(buyer).get("/api/v1/account/").json()["balance"] == "99.9840"


@pytest.mark.django_db
def test_quote_purchase_and_statement_agree_on_the_exact_price(buyer):
    """Old code: the quote said "1.7550" but the statement "-1.76" and the balance "98.24" (rounded); quotes and
    purchases named no currency."""
    attribute = CategoricalAttributeFactory(labels=["red", "green"], price_policy=policy("0.0351"))
    contribute(attribute, 50)
    c = api_client(buyer)
    quote = c.post("/api/v1/quotes/", {"attribute": attribute.id, "epsilon": "1"}, format="json").json()
    assert quote["price"] == "1.7550" and quote["price_per_value"] == "0.0351"
    r = c.post("/api/v1/purchases/", {"quote": quote["quote"]}, format="json", HTTP_IDEMPOTENCY_KEY="k-1755")
    assert r.status_code == 201, r.content
    assert r.json()["price"] == "1.7550"
    row = c.get("/api/v1/account/statement/").json()["results"][0]
    assert (row["amount"], row["balance_after"], row["currency"]) == ("-1.7550", "98.2450", "EUR")
    assert c.get("/api/v1/account/").json()["balance"] == "98.2450"
    assert quote["currency"] == r.json()["currency"] == "EUR"
    catalog = c.get(f"/api/v1/datasets/{attribute.dataset_id}/").json()
    (policy_out,) = [a["price_policy"] for a in catalog["attributes"] if a["id"] == attribute.id]
    assert policy_out["currency"] == "EUR" and policy_out["points"][1]["price"] == "0.0351"


@pytest.mark.django_db
def test_staff_topup_answers_with_four_places(buyer):
    staff = OwnerFactory()
    grant_role(staff, "staff")
    r = api_client(staff).post("/api/v1/staff/topups/", {"buyer": buyer.username, "amount": "25.5", "reason": "x"},
                               format="json", HTTP_IDEMPOTENCY_KEY="t-precision")
    assert r.status_code == 201, r.content
    assert (r.json()["amount"], r.json()["balance_after"], r.json()["currency"]) == ("25.5000", "125.5000", "EUR")


# ------------------------------------------------------------------------------------------------ pages

@pytest.mark.django_db
def test_admin_overview_shows_revenue_exactly_with_its_currency(buyer):
    """Old code: "Revenue 15.0400000000000", no currency (SQLite's SUM of decimals, shown raw)."""
    from audit.overview import overview

    attribute = CategoricalAttributeFactory(labels=["red", "green"], price_policy=policy("0.3008"))
    contribute(attribute, 25)
    buy(buyer, attribute)
    other = BuyerFactory()
    fund(other, "100")
    buy(other, attribute)  # 2 x 25 x 0.3008 = 15.04
    stats = overview().stats
    assert str(stats["revenue"]) == "15.0400"
    staff = OwnerFactory()
    grant_role(staff, "staff")
    client = Client()
    client.force_login(staff)
    page = client.get(reverse("admin:ldp_overview")).content.decode()
    assert re.search(r"<th>Revenue</th><td class=\"num\">15\.04 EUR</td>", page), re.findall(r"Revenue.{0,60}", page)


@pytest.mark.django_db
def test_portal_shows_fractions_of_a_cent_with_four_places(buyer):
    """Old code: the owner's dashboard said "0.008 EUR" for earnings of 0.0080 (3 places: neither rule)."""
    attribute = CategoricalAttributeFactory(labels=["red", "green"], price_policy=policy("0.01"))
    owner = OwnerFactory()
    contribute(attribute, 1, owners=[owner])
    buy(buyer, attribute)
    client = Client()
    client.force_login(owner)
    html = client.get("/portal/").content.decode()
    assert 'id="earnings-total">0.0080 EUR<' in html
    assert 'id="money-pending">0.0080 EUR<' in client.get("/portal/money/").content.decode()
    money.earnings_settle(shard=attribute.id)
    page = client.get("/portal/money/").content.decode()
    assert 'id="money-balance">0.0080 EUR<' in page and 'id="money-pending">0.00 EUR<' in page


@pytest.mark.django_db
def test_payout_refusal_names_the_balance_by_the_rule(buyer):
    """Old code: "... but your earnings are 0.008 EUR." (the balance with its trailing zeros dropped)."""
    attribute = CategoricalAttributeFactory(labels=["red", "green"], price_policy=policy("0.01"))
    owner = OwnerFactory()
    contribute(attribute, 1, owners=[owner])
    buy(buyer, attribute)
    money.earnings_settle(shard=attribute.id)
    with pytest.raises(money.PayoutRefused) as refused:
        money.payout_request(owner=owner, amount="5")
    assert "You asked for 5.00 EUR but your earnings are 0.0080 EUR." in str(refused.value)


@pytest.mark.django_db
def test_owner_export_gives_amounts_with_four_places_and_the_currency(buyer):
    """Old code: the export's ``pending`` was "0" and ``total`` "0.0000" (no single format) and named no currency."""
    from market.values import owner_rows

    attribute = CategoricalAttributeFactory(labels=["red", "green"], price_policy=policy("0.016"))
    owner = OwnerFactory()
    contribute(attribute, 1, owners=[owner])
    earnings = owner_rows.export(owner)["earnings"]
    assert (earnings["pending"], earnings["balance"], earnings["total"]) == ("0.0000", "0.0000", "0.0000")
    assert earnings["currency"] == "EUR"
    buy(buyer, attribute)
    money.earnings_settle(shard=attribute.id)
    exported = owner_rows.export(owner)
    assert exported["earnings"]["balance"] == "0.0128" and exported["values"][0]["earned"] == "0.0128"
    assert [e["amount"] for e in exported["earnings"]["entries"]] == ["0.0128"]


def test_audit_messages_write_amounts_by_the_rule(settings):
    """Old code: the budget audit wrote "12.5000 EUR" (4 places for whole cents)."""
    from audit.report import money_text

    settings.LDP_CURRENCY = "EUR"
    assert money_text(125_000) == "12.50 EUR"
    assert money_text(128) == "0.0128 EUR"
    assert money_text(-17_550) == "-1.7550 EUR"


@pytest.mark.django_db
def test_sums_of_money_come_back_with_four_places(buyer):
    """Every SUM() of amounts is quantized to 4 places (a SUM of decimals can come back with 13)."""
    from accounts.money import selectors

    attribute = CategoricalAttributeFactory(labels=["red", "green"], price_policy=policy("0.016"))
    owner = OwnerFactory()
    contribute(attribute, 1, owners=[owner])
    assert str(selectors.unsettled_earnings(owner)) == "0.0000"
    buy(buyer, attribute)
    assert str(selectors.unsettled_earnings(owner)) == "0.0128"
    money.earnings_settle(shard=attribute.id)
    assert str(selectors.earnings_credited(owner)) == "0.0128"
    assert str(selectors.unsettled_earnings(owner)) == "0.0000"


@pytest.mark.django_db
def test_refusals_name_amounts_by_the_rule_with_the_currency():
    """Old code: "This purchase costs 1.7550 but your credit is 1.0000." (no currency, 4 places for whole cents)."""
    poor = BuyerFactory()
    fund(poor, "1")
    attribute = CategoricalAttributeFactory(labels=["red", "green"], price_policy=policy("0.0351"))
    contribute(attribute, 50)
    r = api_client(poor).post("/api/v1/purchases/", {"attribute": attribute.id, "epsilon": "1"}, format="json",
                              HTTP_IDEMPOTENCY_KEY="k-poor")
    assert r.status_code == 402, r.content
    assert r.json()["detail"] == "This purchase costs 1.7550 EUR but your credit is 1.00 EUR."


@pytest.mark.django_db
def test_a_price_rise_since_the_quote_is_said_by_the_rule(buyer):
    """Old code: "The price is now 2.0000, more than the 1.7550 quoted" (no currency, 4 places for whole cents)."""
    attribute = CategoricalAttributeFactory(labels=["red", "green"], price_policy=policy("0.0351"))
    contribute(attribute, 50)
    c = api_client(buyer)
    quote = c.post("/api/v1/quotes/", {"attribute": attribute.id, "epsilon": "1"}, format="json").json()
    attribute.price_policy = policy("0.04")
    attribute.save(update_fields=["price_policy"])
    r = c.post("/api/v1/purchases/", {"quote": quote["quote"]}, format="json", HTTP_IDEMPOTENCY_KEY="k-rise")
    assert r.status_code == 409, r.content
    assert r.json()["detail"].startswith("The price is now 2.00 EUR, more than the 1.7550 EUR quoted")


@pytest.mark.django_db
def test_owner_api_gives_earnings_with_four_places_and_the_currency(buyer):
    """Old code: ``earned`` came without its currency."""
    attribute = CategoricalAttributeFactory(labels=["red", "green"], price_policy=policy("0.016"))
    owner = OwnerFactory()
    contribute(attribute, 1, owners=[owner])
    buy(buyer, attribute)
    (row,) = api_client(owner).get("/api/v1/owner/values/").json()["results"]
    assert (row["earned"], row["currency"]) == ("0.0128", "EUR")


@pytest.mark.django_db
def test_ledger_csv_export_gives_earnings_with_four_places(buyer):
    """A guard (already so before issue 31): the ledger's CSV ``earning`` is the exact amount with 4 places."""
    import csv
    import io

    from accounts.models import LedgerEntry
    from audit.export import export_csv_rows

    attribute = CategoricalAttributeFactory(labels=["red", "green"], price_policy=policy("0.01"))
    contribute(attribute, 1)
    buy(buyer, attribute)
    rows = list(csv.DictReader(io.StringIO("".join(export_csv_rows(LedgerEntry.objects.all())))))
    assert [r["earning"] for r in rows if r["purchase_id"]] == ["0.0080"]
