"""The admin console reads well (issue 13, item 5): the Audit links on the index, "Ledger entries" and "Money
entries", amounts with their currency, readable object names, list pages trimmed for 1280 px, the role documented.
The pages at 1280 px in a real browser (no horizontal overflow, no CSP violation): tests/portal/test_browser.py."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from accounts.admin import BudgetAccountAdmin
from accounts.console import usage_bar
from accounts.models import BudgetAccount, LedgerBlock, LedgerEntry, LedgerHead, MoneyAccount, MoneyEntry, User
from accounts.money.format import format_amount, format_money
from audit.admin import LedgerEntryAdmin
from market.admin import PurchaseAdmin, ValueAdmin
from market.models import ChainBlock, ChainPoint, Purchase, PurchaseChunk, Value
from tests.audit.test_admin import url

pytestmark = pytest.mark.urls("tests.audit.urls")

#: At most this many columns on a change list (more overflow a 1280 px screen beside the filters).
MAX_COLUMNS = 9


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_audit_links_on_the_index_load_their_stylesheet(market, auditor):
    page = client_of(auditor).get("/admin/").content.decode()
    assert 'id="ldp-audit-links"' in page
    # ldp/admin.css sizes the link column; without it Django's dashboard CSS printed one letter per line
    assert "ldp/admin.css" in page
    assert "white-space: nowrap" in open("accounts/static/ldp/admin.css").read()


def test_ledger_and_money_entries_are_named_so(market, auditor):
    assert str(LedgerEntry._meta.verbose_name_plural) == "ledger entries"
    assert str(MoneyEntry._meta.verbose_name_plural) == "money entries"
    page = client_of(auditor).get("/admin/").content.decode()
    assert "Ledger entries" in page and "Money entries" in page
    assert "Ledger entrys" not in page and "Money entrys" not in page


def test_amounts_have_two_places_and_the_currency(market, auditor, settings):
    assert format_amount(Decimal("12.5000")) == "12.50"
    assert format_amount(Decimal("0.0125")) == "0.0125"
    assert format_amount(None) == "0.00"
    assert format_money(Decimal("3")) == "3.00 EUR"
    settings.LDP_CURRENCY = "CHF"
    assert format_money(Decimal("3")) == "3.00 CHF"
    settings.LDP_CURRENCY = "EUR"

    client = client_of(auditor)
    entry = MoneyEntry.objects.order_by("id").first()
    page = client.get(url(MoneyEntry, "changelist")).content.decode()
    assert f"{format_amount(entry.amount)} EUR" in page
    page = client.get(url(MoneyEntry, "change", entry.pk)).content.decode()
    assert f"{format_amount(entry.amount)} EUR" in page and f"{format_amount(entry.balance_after)} EUR" in page
    account = MoneyAccount.objects.order_by("id").first()
    assert f"{format_amount(account.balance)} EUR" in client.get(url(MoneyAccount, "changelist")).content.decode()
    purchase = Purchase.objects.order_by("id").first()
    assert f"{format_amount(purchase.price)} EUR" in client.get(url(Purchase, "changelist")).content.decode()


def test_objects_have_readable_names(market):
    for model in (BudgetAccount, LedgerBlock, LedgerHead, LedgerEntry, MoneyAccount, MoneyEntry, Value, ChainBlock,
                  ChainPoint, Purchase, PurchaseChunk):
        obj = model.objects.order_by("pk").first()
        assert obj is not None, model
        assert " object (" not in str(obj), (model, str(obj))
    entry = LedgerEntry.objects.filter(kind=LedgerEntry.Kind.CHAIN_RELEASE).order_by("id").first()
    assert str(entry) == f"Ledger entry #{entry.id}: Chain release at ε {entry.epsilon.normalize():f}, " \
                         f"value #{entry.value_id}"
    money = MoneyEntry.objects.order_by("id").first()
    assert format_amount(money.amount) + " EUR" in str(money)


def test_change_lists_are_trimmed_for_1280_px():
    from django.contrib import admin

    for model_admin in (BudgetAccountAdmin, LedgerEntryAdmin, PurchaseAdmin, ValueAdmin):
        assert len(model_admin.list_display) <= MAX_COLUMNS, model_admin
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label in ("accounts", "market"):
            assert len(model_admin.list_display) <= MAX_COLUMNS, model


def test_usage_bar_has_no_style_attribute():
    html = usage_bar(Decimal("1"), Decimal("2"))
    assert "style=" not in html and "<meter" in html and 'value="50"' in html


def test_the_role_is_documented_on_the_user_forms(market, staff):
    help_text = str(User._meta.get_field("role").help_text)
    for words in ("Owner", "Buyer", "Auditor", "Staff", "owner portal"):
        assert words in help_text
    client = client_of(staff)
    for page in (client.get(reverse("admin:accounts_user_add")), client.get(url(User, "change", staff.pk))):
        assert page.status_code == 200
        assert "contributes values and uses the owner portal" in page.content.decode()
