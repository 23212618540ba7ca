"""The console's change lists filter only by their declared filters (docs/security.md, "Roles"; a red-team finding).

Django's admin lets the query string filter a change list by any lookup on a local column, declared or not:
``/admin/market/purchase/?id=8&result__estimate__startswith=0.3`` answered "1 purchase" or "0 purchases", so an
auditor (who must never read purchased data) recovered a buyer's survey estimate digit by digit.  Now every
parameter that is not the change list's own (``q``, ``o``, ``p``, ``all``, ``e``, ``_popup``, ``_facets``,
``_to_field``) or one a declared filter reads is refused with 400, on every change list an auditor can open, for
auditors, staff and superusers alike (``accounts.admin.AuditMixin.lookup_allowed``).

The roles are made as a deployment makes them: ``create_user`` then ``accounts.roles.grant_role`` (the suite's
``auditor`` fixture, the audit ``staff`` fixture), and ``createsuperuser``'s ``create_superuser``.
"""
from __future__ import annotations

import re
from html import unescape
from urllib.parse import parse_qsl

import numpy as np
import pytest
from django.contrib import admin
from django.db import models
from django.test import Client, RequestFactory

from accounts.console import AuditMixin, IdSearchMixin
from accounts.models import BudgetAccount, LedgerBlock, LedgerEntry, MoneyAccount, MoneyEntry, User
from accounts.roles import grant_role
from market.models import Purchase
from tests.audit.test_admin import money_rows, url  # noqa: F401 (money_rows: a fixture)
from tests.factories import PASSWORD, BinaryAttributeFactory
from tests.market.oneshot_helpers import POLICY, funded_buyer, run, values

pytestmark = pytest.mark.urls("tests.audit.urls")

ROLES = ["auditor", "staff", "superuser"]

#: Every change list an auditor opens (and staff: the same role predicates, no Django permissions needed).
AUDITED = {"accounts.User", "accounts.BudgetAccount", "accounts.LedgerBlock", "accounts.LedgerHead",
           "accounts.LedgerEntry", "accounts.MoneyAccount", "accounts.MoneyEntry", "accounts.TopUp",
           "accounts.PayoutRequest", "accounts.LedgerCheckpoint", "accounts.LedgerWitness", "accounts.LedgerLogKey",
           "market.Dataset", "market.Attribute",
           "market.Value", "market.Purchase", "market.PurchaseChunk"}

#: Declared filters that read a bare field name (``?<field>=...``): Django's AllValuesFieldListFilter (a field
#: without choices) and the id filters behind the console's own links.  Every other bare field name is refused.
BARE_DECLARED = {"market.Purchase": {"guarantee"}, "accounts.LedgerBlock": {"shard"},
                 "accounts.LedgerEntry": {"value", "purchase", "block"}, "accounts.MoneyEntry": {"account"}}

#: What each change list's search box reaches: ids and usernames (``IdSearchMixin``), and on the curated models
#: (users, the public catalog) the columns their pages show an auditor anyway.
SEARCH_FIELDS = {"accounts.User": ("username", "email", "organisation"), "market.Dataset": ("title", "description"),
                 "market.Attribute": ("name", "dataset__title")}


# ------------------------------------------------------------------------------------------------ helpers

def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def viewable(user):
    """The registered change lists ``user`` may open, by label."""
    request = RequestFactory().get("/admin/")
    request.user = user
    return {m._meta.label: (m, a) for m, a in admin.site._registry.items() if a.has_view_permission(request)}


def get(client, address: str) -> int | str:
    """The status of a GET, or the exception's name if the view raised (the old code did, for some lookups)."""
    try:
        return client.get(address).status_code
    except Exception as exc:  # noqa: BLE001 - recorded, then asserted on
        return type(exc).__name__


def undeclared_lookups(model) -> list[str]:
    """Lookups no declared filter reads: on every column, a few on the text and JSON ones, through each foreign
    key, on the id, and names that are no field at all."""
    label = model._meta.label
    lookups = ["id=1", "pk=1", "id__gt=0", "id__exact=1", "id__in=1,2", "nonexistent=1", "nonexistent__startswith=x",
               "_changelist_filters=id%3D1", "search=x", "q__startswith=x"]
    for field in model._meta.concrete_fields:
        lookups.append(f"{field.name}__startswith=x")
        if field.name not in BARE_DECLARED.get(label, ()):
            lookups.append(f"{field.name}=1")
        if isinstance(field, (models.CharField, models.TextField, models.JSONField)):
            lookups += [f"{field.name}__icontains=x", f"{field.name}__regex=.", f"{field.name}__contains=x"]
        if isinstance(field, models.JSONField):
            lookups += [f"{field.name}__estimate__startswith=0", f"{field.name}__has_key=estimate"]
        if field.is_relation:
            lookups.append(f"{field.name}_id=1")
            if field.related_model is User:
                lookups += [f"{field.name}__password__startswith=pbkdf2", f"{field.name}__email__icontains=@"]
            else:
                lookups.append(f"{field.name}__id__gt=0")
    if model is User:
        lookups += ["password__startswith=pbkdf2", "groups__name=x", "user_permissions__codename__startswith=view"]
    return lookups


# ------------------------------------------------------------------------------------------------ fixtures

@pytest.fixture
def survey(db) -> Purchase:
    """A completed Warner survey: its ``result`` holds the estimate, which only its buyer and staff may read."""
    attribute = BinaryAttributeFactory(price_policy=POLICY)
    values(attribute, ["yes"] * 30 + ["no"] * 70, ceiling="2")
    purchase = run(funded_buyer(), attribute, mechanism="warner", epsilon="0.8", rng=np.random.default_rng(4))
    assert purchase.status == Purchase.Status.COMPLETED and purchase.result["estimate"] is not None
    return purchase


@pytest.fixture
def rows(market, money_rows, survey, policy_witness):  # noqa: F811 (money_rows is the fixture imported above)
    """A row of every model (chain and survey purchases, money, a checkpoint and its key, a witness of the policy)."""
    return survey


@pytest.fixture(params=ROLES)
def reader(request, rows):
    """An auditor, staff or a superuser, each made as a deployment makes it."""
    user = request.getfixturevalue(request.param)
    assert user.is_staff and not user.user_permissions.exists()  # grant_role set is_staff, and nothing else
    return user


def estimate_prefixes(purchase: Purchase) -> tuple[str, str]:
    """A true prefix of the survey's estimate (as the database writes it) and a wrong one of the same length."""
    text = repr(float(purchase.result["estimate"]))
    true = text[:4]
    wrong = true[:-1] + ("1" if true[-1] != "1" else "2")
    return true, wrong


# ------------------------------------------------------------------------------------------------ the finding

def test_a_survey_estimate_can_no_longer_be_read_digit_by_digit(rows, reader):
    survey = rows
    true, wrong = estimate_prefixes(survey)
    # What the query string asked the database: a yes/no answer about the estimate, as a row count.
    assert Purchase.objects.filter(id=survey.id, result__estimate__startswith=true).count() == 1
    assert Purchase.objects.filter(id=survey.id, result__estimate__startswith=wrong).count() == 0
    client = client_of(reader)
    base = url(Purchase, "changelist")
    assert client.get(f"{base}?id={survey.id}").status_code == 400  # id is no declared filter either
    for lookup in (f"result__estimate__startswith={true}", f"result__estimate__startswith={wrong}",
                   f"result__icontains={true}", f"result__icontains={wrong}", f"result__estimate__gt={true}",
                   f"result__estimate__regex=^{re.escape(true)}", "parameters__icontains=p"):
        for address in (f"{base}?id={survey.id}&{lookup}", f"{base}?{lookup}", f"{base}?q={survey.id}&{lookup}",
                        f"{base}?status__exact=completed&{lookup}"):
            response = client.get(address)
            assert response.status_code == 400, (address, response.status_code)
            assert b"Bad Request (400)" in response.content and b"result_list" not in response.content


def test_search_reaches_ids_and_usernames_only(rows, auditor):
    survey = rows
    true, _ = estimate_prefixes(survey)
    for label, (model, model_admin) in viewable(auditor).items():
        if isinstance(model_admin, IdSearchMixin):
            assert tuple(model_admin.search_fields) == ("pk",), label  # the lookups are IdSearchMixin's own
        else:
            assert tuple(model_admin.search_fields) == SEARCH_FIELDS[label], label
    client = client_of(auditor)
    base = url(Purchase, "changelist")

    def found(term):
        response = client.get(base, {"q": term})
        assert response.status_code == 200
        return [p.id for p in response.context["cl"].result_list]

    assert found(str(survey.id)) == [survey.id]
    assert survey.id in found(survey.buyer.username)
    for term in (true, str(survey.result["estimate"]), "estimate", "warner", survey.idempotency_key):
        assert survey.id not in found(term), term


def test_purchases_and_the_ledger_are_filtered_by_exactly_their_declared_filters(rows, auditor, rf):
    """What an auditor may filter these two by (docs/security.md, "Roles"), and the finding's lookups refused."""
    request = rf.get("/")
    request.user = auditor
    declared = {
        Purchase: {"status__exact", "status__isnull", "mechanism__exact", "mechanism__isnull", "guarantee",
                   "guarantee__isnull", "attribute__id__exact", "attribute__isnull", "created_at__gte",
                   "created_at__lt"},
        LedgerEntry: {"kind__exact", "kind__isnull", "guarantee__exact", "guarantee__isnull", "created_at__gte",
                      "created_at__lt", "attribute", "value", "purchase", "block"},
    }
    for model, names in declared.items():
        model_admin = admin.site._registry[model]
        for name in names:
            assert model_admin.lookup_allowed(name, "1", request), (model, name)
        for name in ("id", "id__gt", "result__estimate__startswith", "result__icontains", "epsilon__gte",
                     "created_at__year", "value__owner__password", "buyer__username", "value_id", "purchase__id"):
            assert not model_admin.lookup_allowed(name, "1", request), (model, name)


# ------------------------------------------------------------------------------------------------ the role matrix

def test_every_change_list_an_auditor_opens_checks_its_query_string(rows, auditor, staff):
    assert set(viewable(auditor)) == AUDITED
    assert set(viewable(staff)) == AUDITED
    for label, (_, model_admin) in viewable(auditor).items():
        assert isinstance(model_admin, AuditMixin), label  # the one place the query string is checked


def test_the_plain_change_lists_and_their_own_parameters_are_accepted(reader):
    client = client_of(reader)
    for label, (model, model_admin) in sorted(viewable(reader).items()):
        if label not in AUDITED:
            continue  # Django's own admins (groups; knox and axes): superusers only, by Django permission
        base = url(model, "changelist")
        plain = client.get(base)
        assert plain.status_code == 200, label
        default = [obj.pk for obj in plain.context["cl"].result_list]
        assert default, label  # a row of every model
        own = ["q=1", "p=1&all=", "e=1", f"_popup=1&_to_field={model._meta.pk.name}", "_facets=True",
               "o=" + ".".join(f"-{i}" for i in range(len(model_admin.list_display)))]
        for params in own:
            assert client.get(f"{base}?{params}").status_code == 200, (label, params)
        # the ordering indexes the displayed columns; anything else is ignored (Django's ChangeList.get_ordering)
        response = client.get(f"{base}?o=99.-id.result.password.0__1")
        assert response.status_code == 200, label
        assert [obj.pk for obj in response.context["cl"].result_list] == default, label
        assert get(client, f"{base}?_to_field=password") == 400, label


def test_every_declared_filter_is_accepted(reader):
    client = client_of(reader)
    for label in sorted(AUDITED):
        model, _ = viewable(reader)[label]
        base = url(model, "changelist")
        cl = client.get(base).context["cl"]
        for spec in cl.filter_specs:
            expected = set(spec.expected_parameters())
            queries = [choice["query_string"] for choice in spec.choices(cl)]
            for query in queries:
                assert {k for k, _ in parse_qsl(query.lstrip("?"), keep_blank_values=True)} <= expected, query
                assert client.get(base + query).status_code == 200, (label, query)
            # with the change list's own parameters and another filter
            other = next((query for other_spec in cl.filter_specs if other_spec is not spec
                          for query in [c["query_string"] for c in other_spec.choices(cl)][1:2]), "?")
            combined = f"{base}{queries[-1]}&{other.lstrip('?')}&_facets=True&o=-1&q=1"
            assert client.get(combined).status_code == 200, (label, combined)
            for name in expected:
                if name.endswith(("__isnull", "__isempty")):
                    assert client.get(base, {name: "1"}).status_code == 200, (label, name)


def test_the_consoles_own_links_to_entries_use_declared_filters(rows, reader):
    """A budget's, a purchase's and a block's links to their ledger entries, an account's to its movements."""
    client = client_of(reader)
    budget = BudgetAccount.objects.order_by("value_id").first()
    purchase = Purchase.objects.filter(ledger_entries__isnull=False).order_by("id").first()
    block = LedgerBlock.objects.order_by("id").first()
    account = MoneyAccount.objects.filter(entries__isnull=False).order_by("id").first()
    cases = [(url(BudgetAccount, "change", budget.pk), "value", LedgerEntry.objects.filter(value_id=budget.pk)),
             (url(Purchase, "change", purchase.pk), "purchase", LedgerEntry.objects.filter(purchase_id=purchase.pk)),
             (url(LedgerBlock, "change", block.pk), "block", LedgerEntry.objects.filter(block_id=block.pk)),
             (url(MoneyAccount, "change", account.pk), "account", MoneyEntry.objects.filter(account_id=account.pk))]
    for page, name, expected in cases:
        html = client.get(page).content.decode()
        (link,) = {unescape(h) for h in re.findall(r'href="([^"]+\?' + name + r'=\d+)"', html)}
        response = client.get(f"{link}&all=&_facets=True")
        assert response.status_code == 200, link
        assert sorted(o.pk for o in response.context["cl"].result_list) == sorted(expected.values_list("pk",
                                                                                                       flat=True))
        assert response.context["cl"].has_active_filters  # shown in the sidebar, with "All" to clear it
        assert f"#{link.rsplit('=', 1)[1]}" in response.content.decode()
        path = link.split("?")[0]
        assert get(client, f"{path}?{name}=abc") == 302  # an id filter given no id: Django's "invalid lookup"
        assert get(client, f"{path}?{name}__gt=0") == 400


def test_every_undeclared_lookup_is_refused_with_400(reader):
    client = client_of(reader)
    not_refused = []
    tried = 0
    for label in sorted(AUDITED):
        model, _ = viewable(reader)[label]
        base = url(model, "changelist")
        for lookup in undeclared_lookups(model):
            for address in (f"{base}?{lookup}", f"{base}?o=1&p=1&q=1&{lookup}"):
                tried += 1
                status = get(client, address)
                if status != 400:
                    not_refused.append((address, status))
    assert tried > 500
    assert not not_refused, f"{len(not_refused)} of {tried} not refused: {not_refused[:6]}"


def test_a_staff_action_on_an_undeclared_lookup_is_refused(rows, staff):
    client = client_of(staff)
    account = MoneyAccount.objects.filter(kind=MoneyAccount.Kind.BUYER_CREDIT).order_by("id").first()
    data = {"action": "top_up_credit", "_selected_action": [account.pk], "index": 0}
    base = url(MoneyAccount, "changelist")
    assert client.post(f"{base}?kind__exact=buyer_credit", data).status_code == 200  # the top-up form
    assert client.post(f"{base}?balance__gt=0", data).status_code == 400
    assert client.post(f"{base}?user__password__startswith=pbkdf2", data).status_code == 400


# ------------------------------------------------------------------------------------------------ no console role

@pytest.mark.parametrize("role", [User.Role.OWNER, User.Role.BUYER])
def test_owners_and_buyers_stay_refused(rows, role):
    survey = rows
    true, _ = estimate_prefixes(survey)
    user = grant_role(User.objects.create_user(f"a-{role}", f"{role}@example.org", PASSWORD), role)
    assert not user.is_staff
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    base = url(Purchase, "changelist")
    addresses = (base, f"{base}?status__exact=completed", f"{base}?id={survey.id}&result__estimate__startswith={true}")
    for address in addresses:
        response = client.get(address)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/"), address
    # is_staff set by hand (not through grant_role) lets the login page through, and the role still refuses
    User.objects.filter(pk=user.pk).update(is_staff=True)
    for address in addresses:
        assert client.get(address).status_code == 403, address


@pytest.mark.parametrize("path", [
    "/admin/accounts/budgetaccount/?value=²", "/admin/accounts/ledgerentry/?purchase=²",
    "/admin/accounts/budgetaccount/?q=²", "/admin/market/value/²/change/",
    "/admin/accounts/ledgerentry/privacy-audit/?attribute=²&sample=²&levels=١٠",
])
def test_digits_other_than_ascii_in_the_console_are_refused_not_500(path, client, django_user_model):
    """Issue 27 (numbers parse leniently): ``"²".isdigit()`` is true but ``int("²")`` raises, so these were
    500s; ids in the console are ASCII digits only now (``ldpmarket.numbers``)."""
    from accounts.roles import grant_role

    staff = django_user_model.objects.create_user("console-digits", password="a-long-passphrase-27")
    grant_role(staff, "staff")
    client.force_login(staff)
    client.raise_request_exception = False
    response = client.get(path)
    assert response.status_code < 500, (path, response.status_code)
