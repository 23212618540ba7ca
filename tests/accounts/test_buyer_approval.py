"""Buyers on their own (docs/security.md#buyer-accounts): a buyer signs up (``accounts.services.buyer_signup``) and may
read the catalog and ask for quotes, but buys nothing until the operator approves the organisation's buyer account, in
the admin, with ``approve_buyer`` or with the staff API; the migration approves the buyers that existed before."""
from __future__ import annotations

import uuid
from decimal import Decimal
from importlib import import_module

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.utils import timezone

from accounts import roles
from accounts.models import LedgerEntry, MoneyAccount, MoneyEntry, User
from accounts.services import buyer_approve, buyer_signup
from ldpmarket.problems import PROBLEM_BASE, NotABuyer, SignUpRefused
from market.models import Purchase
from tests.factories import AuditorFactory, BuyerFactory, OwnerFactory, StaffFactory, fund
from tests.market.api.conftest import POLICY, buy, client_for, contribute, credit

pytestmark = pytest.mark.django_db

STRONG = "Correct-horse-battery-9"
NOT_APPROVED = PROBLEM_BASE + "buyer-not-approved"


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"approval-tests-{uuid.uuid4()}"}}
    settings.LDP_OPERATOR_EMAILS = ["operators@example.org"]


def signup(username="dana", email="dana@example.org", **kw) -> User:
    fields = dict(username=username, name="Dana Scully", organisation="Lab of Things", email=email, password=STRONG)
    return buyer_signup(**{**fields, **kw})


@pytest.fixture
def newcomer(django_capture_on_commit_callbacks):
    """A buyer who signed up alone, with credit (as if topped up), not approved."""
    with django_capture_on_commit_callbacks(execute=True):
        user = signup()
    fund(user, "100")
    return user


@pytest.fixture
def categorical(db):
    from tests.factories import CategoricalAttributeFactory

    attribute = CategoricalAttributeFactory(labels=["red", "green", "blue"], price_policy=POLICY)
    contribute(attribute, ["red", "green", "blue"] * 10, ceiling="2", seed=1)
    return attribute


# -------------------------------------------------------------------------------------------------- sign-up

def test_signup_makes_an_unapproved_buyer_with_zero_credit_and_two_emails(mailoutbox,
                                                                          django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        user = signup()
    user.refresh_from_db()
    assert (user.role, user.organisation, user.first_name, user.buyer_approved_at) == (
        "buyer", "Lab of Things", "Dana Scully", None)
    assert user.check_password(STRONG)
    assert roles.can_buy(user) and not roles.buyer_is_approved(user)
    account = MoneyAccount.objects.get(user=user, kind=MoneyAccount.Kind.BUYER_CREDIT)
    assert account.balance == 0 and not MoneyEntry.objects.filter(account=account).exists()
    assert sorted(m.to[0] for m in mailoutbox) == ["dana@example.org", "operators@example.org"]
    to_buyer = next(m for m in mailoutbox if m.to == ["dana@example.org"])
    to_operators = next(m for m in mailoutbox if m.to == ["operators@example.org"])
    assert "awaiting" in to_buyer.body.lower() or "approve" in to_buyer.body.lower()
    assert "dana" in to_operators.subject and "approve_buyer dana" in to_operators.body


def test_signup_refuses_taken_names_and_addresses_whatever_their_case_and_weak_passwords():
    signup()
    with pytest.raises(SignUpRefused) as taken:
        signup(username="DANA", email="DANA@Example.org")
    assert set(taken.value.errors) == {"username", "email"}
    with pytest.raises(SignUpRefused) as weak:
        signup(username="erin", email="erin@example.org", password="123")
    assert set(weak.value.errors) == {"password"}
    with pytest.raises(SignUpRefused) as blank:
        signup(username="fay", email="not an address", organisation=" ", name="")
    assert set(blank.value.errors) == {"email", "organisation", "name"}
    assert User.objects.filter(role="buyer").count() == 1


def test_the_operators_address_falls_back_to_admins(settings, mailoutbox, django_capture_on_commit_callbacks):
    settings.LDP_OPERATOR_EMAILS = []
    settings.ADMINS = [("Ops", "ops@example.org")]
    with django_capture_on_commit_callbacks(execute=True):
        signup()
    assert sorted(m.to[0] for m in mailoutbox) == ["dana@example.org", "ops@example.org"]


# ---------------------------------------------------------------------------------- no purchase before approval

def test_an_unapproved_buyer_may_quote_but_not_buy_and_nothing_is_charged(newcomer, categorical):
    api = client_for(newcomer)
    assert api.get("/api/v1/datasets/").status_code == 200
    assert Decimal(api.get("/api/v1/account/").json()["balance"]) == 100
    quote = api.post("/api/v1/quotes/", {"attribute": categorical.id, "epsilon": "1"}, format="json")
    assert quote.status_code == 200, quote.content[:300]
    ledger, money = LedgerEntry.objects.count(), MoneyEntry.objects.count()
    refused = buy(api, categorical.id, "1")
    assert refused.status_code == 403 and refused["Content-Type"] == "application/problem+json"
    assert refused.json()["type"] == NOT_APPROVED
    from_quote = api.post("/api/v1/purchases/", {"quote": quote.json()["quote"]}, format="json",
                          HTTP_IDEMPOTENCY_KEY="k-quote")
    assert from_quote.status_code == 403 and from_quote.json()["type"] == NOT_APPROVED
    survey = api.post("/api/v1/surveys/", {"attribute": categorical.id, "mechanism": "warner", "epsilon": "1"},
                      format="json", HTTP_IDEMPOTENCY_KEY="k-survey")
    assert survey.status_code == 403 and survey.json()["type"] == NOT_APPROVED
    assert credit(newcomer) == Decimal("100")
    assert not Purchase.objects.filter(buyer=newcomer).exists()
    assert (LedgerEntry.objects.count(), MoneyEntry.objects.count()) == (ledger, money)


def test_the_pipeline_itself_refuses_an_unapproved_buyer(newcomer, categorical):
    from ldpmarket.problems import BuyerNotApproved
    from market.purchases import pipeline

    request = pipeline.PurchaseRequest(attribute=categorical, epsilon=Decimal("1"), cohort=None)
    with pytest.raises(BuyerNotApproved):
        pipeline.purchase_request(buyer=newcomer, request=request, idempotency_key="k")
    assert not Purchase.objects.filter(buyer=newcomer).exists()


# ------------------------------------------------------------------------------------------ approving: the service

def test_approve_is_idempotent_refuses_non_buyers_and_mails_once(newcomer, mailoutbox,
                                                                 django_capture_on_commit_callbacks):
    staff = StaffFactory()
    mailoutbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        first = buyer_approve(buyer=newcomer, approved_by=staff)
        again = buyer_approve(buyer=newcomer)
    assert first.buyer_approved_at is not None and first.buyer_approved_by_id == staff.id
    assert (again.buyer_approved_at, again.buyer_approved_by_id) == (first.buyer_approved_at, staff.id)
    assert [m.to for m in mailoutbox] == [["dana@example.org"]] and "approved" in mailoutbox[0].subject.lower()
    for other in (OwnerFactory(), AuditorFactory(), staff):
        with pytest.raises(NotABuyer):
            buyer_approve(buyer=other)


def test_only_buyers_carry_an_approval_and_leaving_the_role_clears_it(newcomer):
    buyer_approve(buyer=newcomer)
    roles.grant_role(User.objects.get(pk=newcomer.pk), "owner")
    assert User.objects.get(pk=newcomer.pk).buyer_approved_at is None
    with pytest.raises(IntegrityError), transaction.atomic():  # the CHECK user_approval_only_buyers
        User.objects.filter(pk=newcomer.pk).update(buyer_approved_at=timezone.now())


def test_buyers_made_by_the_operator_are_approved(db):
    call_command("create_buyer", "gil", "--password", STRONG, "--organisation", "Lab", stdout=None)
    assert roles.buyer_is_approved(User.objects.get(username="gil"))
    from market.management.commands.load_demo import demo_users

    buyer, _ = demo_users()
    assert roles.buyer_is_approved(User.objects.get(pk=buyer.pk))


# ---------------------------------------------------------------------------------------- the three approval paths

def test_the_admin_action_approves_selected_buyers_for_staff_only(newcomer, mailoutbox,
                                                                  django_capture_on_commit_callbacks):
    url = "/admin/accounts/user/"
    auditor = Client()
    auditor.force_login(AuditorFactory())
    refused = auditor.post(url, {"action": "approve_buyers", "_selected_action": [newcomer.id]})
    assert refused.status_code == 403
    assert User.objects.get(pk=newcomer.pk).buyer_approved_at is None
    staff_user = StaffFactory()
    staff = Client()
    staff.force_login(staff_user)
    listing = staff.get(url + "?approval=awaiting")
    assert listing.status_code == 200 and newcomer.username in listing.content.decode()
    assert "Approve selected buyers" in listing.content.decode()
    mailoutbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        done = staff.post(url, {"action": "approve_buyers", "_selected_action": [newcomer.id]}, follow=True)
    assert done.status_code == 200 and "Approved 1 buyer account" in done.content.decode()
    approved = User.objects.get(pk=newcomer.pk)
    assert approved.buyer_approved_at is not None and approved.buyer_approved_by_id == staff_user.id
    assert [m.to for m in mailoutbox] == [["dana@example.org"]]
    assert newcomer.username not in staff.get(url + "?approval=awaiting").content.decode()


def test_the_command_approves_buyers(newcomer, capsys):
    call_command("approve_buyer", newcomer.username)
    assert roles.buyer_is_approved(User.objects.get(pk=newcomer.pk))
    call_command("approve_buyer", newcomer.username)  # again: said, nothing changes
    assert "approved already" in capsys.readouterr().out
    owner = OwnerFactory()
    with pytest.raises(CommandError, match="Not a buyer"):
        call_command("approve_buyer", owner.username)
    with pytest.raises(CommandError, match="No such user"):
        call_command("approve_buyer", "nobody-here")


def test_the_staff_api_lists_and_approves_and_the_buyer_can_buy_then(newcomer, categorical):
    staff_api = client_for(StaffFactory())
    approved_buyer = BuyerFactory()
    waiting = staff_api.get("/api/v1/staff/buyers/?approved=false")
    assert waiting.status_code == 200
    assert [b["username"] for b in waiting.json()["results"]] == [newcomer.username]
    assert waiting.json()["results"][0]["approved"] is False
    everyone = {b["username"] for b in staff_api.get("/api/v1/staff/buyers/").json()["results"]}
    assert everyone == {newcomer.username, approved_buyer.username}
    assert staff_api.get("/api/v1/staff/buyers/?approved=maybe").status_code == 400
    response = staff_api.post(f"/api/v1/staff/buyers/{newcomer.id}/approve/")
    assert response.status_code == 200 and response.json()["approved"] is True
    assert staff_api.post(f"/api/v1/staff/buyers/{newcomer.id}/approve/").status_code == 200  # idempotent
    assert staff_api.post(f"/api/v1/staff/buyers/{OwnerFactory().id}/approve/").json()["type"] == (
        PROBLEM_BASE + "not-a-buyer")
    assert staff_api.post("/api/v1/staff/buyers/999999/approve/").status_code == 404
    bought = buy(client_for(User.objects.get(pk=newcomer.pk)), categorical.id, "1")
    assert bought.status_code == 201, bought.content[:300]


@pytest.mark.parametrize("who", ["auditor", "owner", "buyer", "anonymous"])
def test_the_staff_api_is_for_staff_only(newcomer, who):
    user = {"auditor": AuditorFactory, "owner": OwnerFactory, "buyer": BuyerFactory}.get(who)
    api = client_for(user() if user else None)
    expected = 401 if who == "anonymous" else 403
    assert api.get("/api/v1/staff/buyers/").status_code == expected
    assert api.post(f"/api/v1/staff/buyers/{newcomer.id}/approve/").status_code == expected
    assert User.objects.get(pk=newcomer.pk).buyer_approved_at is None


def test_the_buyer_password_signs_in_for_a_token_before_approval(newcomer):
    from rest_framework.test import APIClient

    response = APIClient().post("/api/v1/auth/token/", {"username": newcomer.username, "password": STRONG},
                                format="json")
    assert response.status_code == 200 and response.json()["token"]


# ------------------------------------------------------------------------------------------------- the migration

MIGRATION = "accounts.migrations.0020_buyer_approval_token_names"


def test_the_migration_approves_every_existing_buyer(db):
    User.objects.create(username="old-buyer", role="buyer")
    User.objects.create(username="old-owner", role="owner")
    from django.apps import apps

    import_module(MIGRATION).approve_existing_buyers(apps, None)
    assert User.objects.get(username="old-buyer").buyer_approved_at is not None
    assert User.objects.get(username="old-owner").buyer_approved_at is None


@pytest.mark.django_db(transaction=True)
def test_the_migration_executor_approves_buyers_made_before_it():
    executor = MigrationExecutor(connection)
    before, after = [("accounts", "0019_distribution_columns")], [("accounts", "0020_buyer_approval_token_names")]
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("accounts", "User")
    old.objects.create(username="early-buyer", role="buyer", password="!")
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)
    assert User.objects.get(username="early-buyer").buyer_approved_at is not None


def test_the_admin_approves_a_buyer_it_makes_but_not_one_it_only_edits(newcomer):
    """``UserAdmin.save_model``'s rule (``accounts.roles.sync_buyer_approval``): an account made a buyer by the
    operator is approved by that act; editing another field of a buyer awaiting approval approves nothing."""
    staff = StaffFactory()
    roles.sync_buyer_approval(newcomer, approved_by=staff, approve=False)  # an edit of the organisation, say
    assert newcomer.buyer_approved_at is None
    owner = OwnerFactory()
    owner.role = User.Role.BUYER
    roles.sync_buyer_approval(owner, approved_by=staff)  # the role changed to buyer in the admin
    assert owner.buyer_approved_at is not None and owner.buyer_approved_by == staff
    owner.role = User.Role.AUDITOR
    roles.sync_buyer_approval(owner, approved_by=staff, approve=False)
    assert (owner.buyer_approved_at, owner.buyer_approved_by) == (None, None)
