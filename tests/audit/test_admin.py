"""The admin console: auditors read everything and change nothing; the ledger and money are read-only for
everybody; raw values and unreleased chain steps are for staff only; the audit pages render."""
from __future__ import annotations

import csv
import io

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from accounts.ledger.checkpoints import checkpoint_make
from accounts.models import (
    BudgetAccount,
    LedgerBlock,
    LedgerCheckpoint,
    LedgerEntry,
    LedgerHead,
    MoneyAccount,
    MoneyEntry,
    User,
)
from accounts.roles import grant_role
from market.models import Dataset, Purchase, PurchaseChunk, Value
from tests.audit.conftest import tampering
from tests.factories import PASSWORD
from tests.ledger_edits import delete_entry

pytestmark = pytest.mark.urls("tests.audit.urls")

OURS = ("accounts", "market")
#: Read-only for everybody, superusers included: they change only through the services.
READ_ONLY = [LedgerEntry, LedgerBlock, LedgerHead, LedgerCheckpoint, MoneyAccount, MoneyEntry, BudgetAccount, Value,
             Purchase, PurchaseChunk]


def registered():
    return sorted((m for m in admin.site._registry if m._meta.app_label in OURS), key=lambda m: m._meta.label)


def url(model, action, *args):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{action}", args=args)


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_every_model_of_the_service_is_registered():
    labels = {m._meta.label for m in registered()}
    assert labels == {"accounts.User", "accounts.BudgetAccount", "accounts.LedgerBlock", "accounts.LedgerHead",
                      "accounts.LedgerEntry", "accounts.MoneyAccount", "accounts.MoneyEntry", "market.Dataset",
                      "market.Attribute", "market.Value", "market.Purchase", "market.PurchaseChunk",
                      "accounts.TopUp", "accounts.PayoutRequest", "accounts.LedgerCheckpoint",
                      "accounts.LedgerWitness", "accounts.LedgerLogKey"}


@pytest.fixture
def money_rows(market):
    """A top-up and a payout request (an owner paid by a sale of a pricier attribute) and a ledger checkpoint, so
    every model has a row."""
    import numpy as np

    from accounts.money import services as money
    from tests.audit.conftest import buy
    from tests.factories import CategoricalAttributeFactory, contribute

    money.money_topup(buyer=market.buyer, amount="5.00", reason="admin test", by=None)
    pricey = CategoricalAttributeFactory(price_policy={"points": [["0", "0"], ["10", "10"]], "owner_share": "0.8"})
    (value,) = contribute(pricey, ["red"], ceiling="2")
    buy(market.buyer, pricey, "1", np.random.default_rng(1))
    money.earnings_settle(shard=pricey.id)
    money.payout_request(owner=value.owner, amount="0.50")
    checkpoint_make()


def test_auditor_logs_in_and_views_every_changelist_and_change_page(market, money_rows, auditor, policy_witness):
    client = Client()
    response = client.post("/admin/login/?next=/admin/", {"username": auditor.username, "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/admin/"
    index = client.get("/admin/")
    assert index.status_code == 200
    assert b"Budget audit" in index.content and b"Privacy audit" in index.content
    for model in registered():
        assert client.get(url(model, "changelist")).status_code == 200, model
        obj = model.objects.order_by("pk").first()
        assert obj is not None, model
        page = client.get(url(model, "change", obj.pk))
        assert page.status_code == 200, model
        assert b'name="_save"' not in page.content, model  # rendered read-only
        assert client.get(url(model, "history", obj.pk)).status_code == 200, model


def test_auditor_changes_nothing(market, money_rows, auditor, policy_witness):
    client = logged_in(auditor)
    counts = {m: m.objects.count() for m in registered()}
    for model in registered():
        obj = model.objects.order_by("pk").first()
        assert client.get(url(model, "add")).status_code == 403, model
        assert client.post(url(model, "add"), {}).status_code == 403, model
        assert client.post(url(model, "change", obj.pk), {"title": "x", "ceiling": "9"}).status_code == 403, model
        assert client.get(url(model, "delete", obj.pk)).status_code == 403, model
        assert client.post(url(model, "delete", obj.pk), {"post": "yes"}).status_code == 403, model
        assert client.post(url(model, "changelist"), {"action": "delete_selected", "_selected_action": [obj.pk],
                                                     "post": "yes"}).status_code == 403, model
    assert {m: m.objects.count() for m in registered()} == counts
    assert client.post(reverse("admin:auth_user_password_change", args=[auditor.pk]), {}).status_code == 403


def test_ledger_and_money_are_read_only_even_for_superusers(market, superuser, rf):
    checkpoint_make()  # a row of every read-only model
    client = logged_in(superuser)
    for model in READ_ONLY:
        model_admin = admin.site._registry[model]
        request = rf.get("/")
        request.user = superuser
        assert model_admin.has_view_permission(request)
        assert not model_admin.has_add_permission(request)
        assert not model_admin.has_change_permission(request)
        assert not model_admin.has_delete_permission(request)
        # the one action on money: a top-up through the money service (accounts/money/services.py), never an edit
        assert set(model_admin.get_actions(request)) == ({"top_up_credit"} if model is MoneyAccount else set()), model
        obj = model.objects.order_by("pk").first()
        assert client.get(url(model, "changelist")).status_code == 200
        assert client.get(url(model, "add")).status_code == 403
        assert client.post(url(model, "change", obj.pk), {}).status_code == 403
        assert client.post(url(model, "delete", obj.pk), {"post": "yes"}).status_code == 403
        page = client.get(url(model, "changelist"))
        assert b"delete_selected" not in page.content


def test_staff_curate_datasets_and_users_but_not_the_ledger(market, staff, owner):
    client = logged_in(staff)
    dataset = market.attribute.dataset
    response = client.post(url(Dataset, "change", dataset.pk),
                           {"title": "Renamed", "description": "d", "curator": ""})
    assert response.status_code == 302, response.content[:2000]
    dataset.refresh_from_db()
    assert dataset.title == "Renamed"
    # The attribute's grid and domain are frozen once values exist.
    page = client.get(url(type(market.attribute), "change", market.attribute.pk))
    assert b'name="grid_step"' not in page.content and b'name="description"' in page.content
    # Roles set in the admin keep is_staff in step; a staff member cannot make a superuser.
    data = {"username": owner.username, "role": "auditor", "organisation": "", "is_active": "on",
            "is_superuser": "on", "date_joined_0": "2025-01-01", "date_joined_1": "00:00:00",
            "last_login_0": "", "last_login_1": ""}
    response = client.post(url(User, "change", owner.pk), data)
    assert response.status_code == 302, response.content[:3000]
    owner.refresh_from_db()
    assert (owner.role, owner.is_staff, owner.is_superuser) == ("auditor", True, False)
    assert client.post(url(LedgerEntry, "delete", LedgerEntry.objects.first().pk), {"post": "yes"}).status_code == 403


def test_raw_values_only_for_staff_and_never_sealed_bytes(market, auditor, staff):
    value = market.fixed[1]  # "green"
    sealed = bytes(Value.objects.values_list("raw_sealed", flat=True).get(id=value.id))
    staff_page = logged_in(staff).get(url(Value, "change", value.pk))
    auditor_page = logged_in(auditor).get(url(Value, "change", value.pk))
    assert staff_page.status_code == auditor_page.status_code == 200
    assert b'<div class="readonly" id="ldp-raw-value">green</div>' in staff_page.content
    assert b"ldp-raw-value" not in auditor_page.content and b"Raw value" not in auditor_page.content
    assert b"Chain steps (" in staff_page.content  # the value's chain is listed on its page (no page of its own)
    for page in (staff_page, auditor_page, logged_in(staff).get(url(Value, "changelist"))):
        assert sealed[:40] not in page.content
        assert b"raw_sealed" not in page.content and b"input_sealed" not in page.content
    deleted = logged_in(staff).get(url(Value, "change", market.fixed[2].pk))
    assert b"(deleted by its owner)" in deleted.content


def test_chain_steps_withhold_every_output_from_auditors(market, auditor, staff):
    """The value page lists its chain's steps (its slot across its block's points). Released outputs are data
    buyers paid for and the others were never sold: auditors see neither, only each step's epsilon and whether it
    was released (staff see everything)."""
    value = market.fixed[3]  # ceiling 2, chain to 2.0 (20 steps), released up to 1.0
    assert BudgetAccount.objects.get(value=value).chain_loss == 1
    value.refresh_from_db()
    auditor_page = logged_in(auditor).get(url(Value, "change", value.pk)).content.decode()
    staff_page = logged_in(staff).get(url(Value, "change", value.pk)).content.decode()
    for page in (auditor_page, staff_page):
        assert "Chain steps (20)" in page
        assert f"20 points up to epsilon 2 (slot {value.slot} of chain block #{value.block_id})" in page
    assert auditor_page.count("<em>withheld</em>") == 20
    assert "10 released steps" in auditor_page and "10 steps above it" in auditor_page
    assert staff_page.count("<em>withheld</em>") == 0
    # the epsilons themselves are not secret
    assert all(f'<td class="num">{k / 10:g}</td>' in auditor_page for k in range(1, 21))
    assert auditor_page.count("<td>yes</td>") == 10  # nor is which steps were released
    assert not any(f"<td>{label}</td>" in auditor_page for label in ("red", "green", "blue"))
    assert sum(staff_page.count(f"<td>{label}</td>") for label in ("red", "green", "blue")) == 20


def test_people_without_a_console_role_are_kept_out(market, owner):
    client = logged_in(owner)
    assert client.get("/admin/").status_code == 302  # not is_staff: to the login page
    owner.is_staff = True  # a misconfigured owner with is_staff still sees nothing
    owner.save()
    assert client.get(url(LedgerEntry, "changelist")).status_code == 403
    assert client.get(reverse("admin:ldp_audit_budgets")).status_code == 403
    assert client.get(reverse("admin:ldp_export_ledger") + "?download=1").status_code == 403
    grant_role(owner, "buyer")
    assert client.get("/admin/").status_code == 302


def test_audit_pages_for_auditors(market, auditor):
    client = logged_in(auditor)
    page = client.get(reverse("admin:ldp_audit_budgets"))
    assert page.status_code == 200
    text = page.content.decode()
    assert "ldp-pass\">PASS" in text and "Hash chain" in text and "Money" in text and "FAIL" not in text
    overview = client.get(reverse("admin:ldp_overview"))
    assert overview.status_code == 200
    assert overview.content.count(b'src="data:image/png;base64,') == 2
    assert b"Completed purchases" in overview.content
    privacy = client.get(reverse("admin:ldp_privacy_audit") + "?sample=100&levels=3")
    assert privacy.status_code == 200
    assert b'src="data:image/png;base64,' in privacy.content and b"maximum likelihood" in privacy.content
    ledger_list = client.get(url(LedgerEntry, "changelist") + f"?q={market.fixed[3].owner.username}")
    assert ledger_list.status_code == 200 and b"Export CSV" in ledger_list.content


def test_audit_page_shows_violations(market, auditor):
    with tampering():
        delete_entry(LedgerEntry.objects.order_by("id").first())
    text = logged_in(auditor).get(reverse("admin:ldp_audit_budgets")).content.decode()
    assert "ldp-fail\">FAIL" in text and "entry count of each block" in text
    assert "records 24 entries but holds 23" in text


def test_export_view_streams_filtered_csv(market, auditor):
    client = logged_in(auditor)
    form = client.get(reverse("admin:ldp_export_ledger"))
    assert form.status_code == 200 and b'name="created_after"' in form.content
    owner = market.fixed[4].owner
    response = client.get(reverse("admin:ldp_export_ledger"), {"download": "1", "owner": owner.username})
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("text/csv") and "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(rows) == LedgerEntry.objects.filter(value__owner=owner).count() == 3
    assert {r["owner"] for r in rows} == {owner.username}
    bad = client.get(reverse("admin:ldp_export_ledger"), {"download": "1", "created_after": "yesterday"})
    assert bad.status_code == 400 and b"ISO 8601" in bad.content


def test_changelists_search_and_filter(market, auditor):
    client = logged_in(auditor)
    owner = market.fixed[5].owner
    page = client.get(url(BudgetAccount, "changelist"), {"q": owner.username})
    assert page.status_code == 200 and page.context["cl"].result_count == 1
    page = client.get(url(BudgetAccount, "changelist"), {"q": str(market.fixed[5].id)})
    assert page.context["cl"].result_count == 1
    page = client.get(url(BudgetAccount, "changelist"), {"usage": "exhausted"})
    assert page.status_code == 200
    page = client.get(url(BudgetAccount, "changelist"), {"paused__exact": "1"})
    assert page.context["cl"].result_count == 0
    page = client.get(url(LedgerEntry, "changelist"), {"kind__exact": "chain_release"})
    assert page.status_code == 200
    page = client.get(url(LedgerEntry, "changelist"), {"purchase": market.purchases[0].id})
    assert page.context["cl"].result_count == market.purchases[0].included
    assert client.get(url(LedgerEntry, "changelist"), {"q": "no such user"}).status_code == 200
