"""The money API (docs/money.md): GET /api/v1/account/, /account/statement/, /staff/fees/ and POST /staff/topups/."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command

from accounts.models import LedgerEntry, MoneyAccount, MoneyEntry, TopUp, User
from accounts.money.services import earnings_settle
from accounts.roles import grant_role
from tests.factories import StaffFactory

from .conftest import LABELS, assert_problem, buy, client_for, contribute, credit

pytestmark = pytest.mark.django_db

TOPUPS = "/api/v1/staff/topups/"


def test_buyer_sees_balance_and_currency(api, buyer, settings):
    settings.LDP_CURRENCY = "CHF"
    r = api.get("/api/v1/account/")
    assert r.status_code == 200
    assert r.json() == {"kind": "buyer_credit", "currency": "CHF", "balance": "100.0000", "pending": "0.0000"}


def test_statement_lists_every_movement_newest_first_with_signed_amounts(api, buyer, categorical):
    contribute(categorical, LABELS[:3])
    r = buy(api, categorical.id, "0.5")
    assert r.status_code == 201, r.content
    price = Decimal(r.json()["price"])
    body = api.get("/api/v1/account/statement/").json()
    assert set(body) >= {"next", "previous", "results"}
    rows = body["results"]
    assert [row["kind"] for row in rows] == ["purchase", "adjustment"]  # the factory's deposit is an adjustment
    assert rows[0]["amount"] == f"{-price:.4f}" and rows[0]["purchase"] == r.json()["id"]  # exact, 4 places
    assert rows[0]["balance_after"] == f"{Decimal(100) - price:.4f}" == api.get("/api/v1/account/").json()["balance"]
    assert rows[0]["currency"] == "EUR" and set(rows[0]) >= {"id", "created_at", "memo"}


def test_statement_pages_by_cursor_and_filters_by_time(api, buyer):
    from accounts.money.services import money_topup

    for i in range(5):
        money_topup(buyer=buyer, amount="1.00", reason=f"r{i}", by=None)
    first = api.get("/api/v1/account/statement/?page_size=2").json()
    assert len(first["results"]) == 2 and first["next"]
    second = api.get(first["next"]).json()
    assert {r["id"] for r in first["results"]}.isdisjoint(r["id"] for r in second["results"])
    newest = MoneyEntry.objects.filter(account__user=buyer).order_by("-id").first()
    since = newest.created_at.isoformat().replace("+00:00", "Z")
    assert [r["id"] for r in api.get("/api/v1/account/statement/", {"since": since}).json()["results"]] == [newest.id]
    assert newest.id not in [r["id"] for r in api.get("/api/v1/account/statement/",
                                                      {"until": since}).json()["results"]]
    assert_problem(api.get("/api/v1/account/statement/?since=yesterday"), 400)
    # an offset Python reads but PostgreSQL refuses (beyond +-15:59) is compared in UTC, not a 500 (schemathesis
    # found it): 2000-01-01T00:00+16:00 is 1999-12-31T08:00Z, before every movement
    far = api.get("/api/v1/account/statement/", {"since": "2000-01-01T00:00:00+16:00"})
    assert far.status_code == 200
    assert len(far.json()["results"]) == MoneyEntry.objects.filter(account__user=buyer).count()


def test_owner_sees_earnings(categorical, api):
    values = contribute(categorical, LABELS[:3])
    assert buy(api, categorical.id, "0.5").status_code == 201
    owner = values[0].owner
    c = client_for(owner)
    share = LedgerEntry.objects.get(value=values[0], kind="chain_release").earning
    assert share > 0  # before the settlement: pending, not yet in the balance
    assert c.get("/api/v1/account/").json() == {"kind": "owner_earnings", "currency": "EUR", "balance": "0.0000",
                                                "pending": f"{share:.4f}"}
    earnings_settle(shard=categorical.id)  # the owners paid, as the task enqueued on the purchase's commit does
    acct = c.get("/api/v1/account/").json()
    earned = MoneyAccount.objects.get(user=owner, kind="owner_earnings").balance
    assert earned == share
    assert acct == {"kind": "owner_earnings", "currency": "EUR", "balance": f"{earned:.4f}", "pending": "0.0000"}
    rows = c.get("/api/v1/account/statement/").json()["results"]
    assert [r["kind"] for r in rows] == ["earning"]


@pytest.mark.parametrize("role", ["staff", "auditor"])
def test_staff_and_auditors_have_no_account(role, request):
    user = request.getfixturevalue(role)
    body = assert_problem(client_for(user).get("/api/v1/account/"), 404)
    assert body["type"].endswith("no-money-account")
    assert_problem(client_for(user).get("/api/v1/account/statement/"), 404)
    assert_problem(client_for().get("/api/v1/account/"), 401)


def test_staff_tops_up_by_username_or_id_once_per_key(buyer):
    staff = User.objects.create_user("ops", password="x-Long-enough-9")
    grant_role(staff, "staff")
    c = client_for(staff)
    r = c.post(TOPUPS, {"buyer": buyer.username, "amount": "25.50", "reason": "invoice 42"}, format="json",
               HTTP_IDEMPOTENCY_KEY="t-1")
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["buyer"] == buyer.id and body["amount"] == "25.5000" and body["balance_after"] == "125.5000"
    assert body["reason"] == "invoice 42" and body["currency"] == "EUR" and body["id"] and body["created_at"]
    again = c.post(TOPUPS, {"buyer": buyer.id, "amount": "25.50", "reason": "invoice 42"}, format="json",
                   HTTP_IDEMPOTENCY_KEY="t-1")
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    assert credit(buyer) == Decimal("125.50")
    topup = TopUp.objects.get()
    assert topup.by == staff and topup.entry.kind == "topup" and topup.entry.memo == "invoice 42"
    other = c.post(TOPUPS, {"buyer": buyer.username, "amount": "30.00", "reason": "invoice 42"}, format="json",
                   HTTP_IDEMPOTENCY_KEY="t-1")
    assert assert_problem(other, 409)["type"].endswith("topup-key-reused")
    assert credit(buyer) == Decimal("125.50")


@pytest.mark.parametrize("body, field", [
    ({"buyer": "nobody", "amount": "1.00", "reason": "x"}, "buyer"),
    ({"amount": "1.00", "reason": "x"}, "buyer"),
    ({"amount": "1.001", "reason": "x"}, "amount"),
    ({"amount": "-5", "reason": "x"}, "amount"),
    ({"amount": "NaN", "reason": "x"}, "amount"),
    ({"amount": "1e30", "reason": "x"}, "amount"),
    ({"amount": "1.00", "reason": ""}, "reason"),
])
def test_bad_topups_are_400(buyer, body, field):
    body = {"buyer": buyer.username, **body} if "buyer" not in body and field != "buyer" else body
    r = client_for(StaffFactory()).post(TOPUPS, body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert field in assert_problem(r, 400)["errors"]
    assert credit(buyer) == Decimal("100")


def test_topups_need_a_key_staff_and_a_buyer(buyer, owner, auditor):
    body = {"buyer": buyer.username, "amount": "1.00", "reason": "x"}
    staff = client_for(StaffFactory())
    assert assert_problem(staff.post(TOPUPS, body, format="json"), 400)["type"].endswith("idempotency-key-required")
    for who in (auditor, buyer, owner):
        assert_problem(client_for(who).post(TOPUPS, body, format="json", HTTP_IDEMPOTENCY_KEY="k"), 403)
    r = staff.post(TOPUPS, {**body, "buyer": owner.username}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert assert_problem(r, 400)["type"].endswith("not-a-buyer")
    assert credit(buyer) == Decimal("100")


def test_fee_statement_for_staff_and_auditors(api, categorical, buyer, auditor):
    assert buy(api, categorical.id, "0.5").status_code == 201
    fees = MoneyEntry.objects.filter(account__kind="platform")
    for who in (StaffFactory(), auditor):
        rows = client_for(who).get("/api/v1/staff/fees/").json()["results"]
        assert [r["id"] for r in rows] == [e.id for e in fees.order_by("-id")] and rows[0]["kind"] == "fee"
    assert_problem(api.get("/api/v1/staff/fees/"), 403)


def test_schema_documents_the_money_operations(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    text = out.read_text()
    for path in ("/api/v1/account/:", "/api/v1/account/statement/:", "/api/v1/staff/topups/:", "/api/v1/staff/fees/:"):
        assert path in text


@pytest.mark.parametrize("since", ["%25", "100%25", "%25s", "%25(x)s"])
def test_a_time_filter_holding_a_percent_sign_is_a_400_not_a_500(api, since):
    """The fuzz test once found ``?since=%`` a 500: django-filter formats each message with ``%``, and the
    message quotes the input (ldpmarket/fields.py, WhenField)."""
    r = api.get(f"/api/v1/account/statement/?since={since}")
    assert r.status_code == 400, r.content
    assert "is not an ISO 8601 date" in r.json()["errors"]["since"][0]
