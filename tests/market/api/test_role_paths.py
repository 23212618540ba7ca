"""Roles x endpoints x objects, with each role made through every path a deployment uses (docs/security.md, "Roles").

A role is given by ``accounts.roles.grant_role``, by the admin's user form (add, and change, posted by a real
staff account signed in through the admin's login page), by ``createsuperuser`` (a superuser: staff), by portal
sign-up (owners) and by the test factories.  Whatever the path, an account of a role must be able to do exactly
what the role allows, across the buyer API, the audit API, the owner portal and the admin console:

* owners: the portal only;
* buyers: quotes, purchases, surveys, and the bookkeeping and data of their own purchases only (another buyer's
  purchase is a 404);
* auditors: every purchase's and survey's bookkeeping, the ledger, the console, never the purchased data
  (outputs, estimates, a survey's result, the outputs stored in chains) nor raw values; they write nothing;
* staff and superusers: everything, purchased data and raw values included; they do not buy.

Each test builds one account through one path and checks every cell for it; a failure lists every cell that
differs (``endpoint: expected != observed``).
"""
from __future__ import annotations

import uuid

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from accounts.models import LedgerEntry, User
from accounts.roles import grant_role
from market.models import Purchase, Value
from tests.factories import AuditorFactory, BuyerFactory, OwnerFactory, StaffFactory, fund
from tests.market.api.conftest import PROBLEM, buy, client_for

pytestmark = pytest.mark.django_db

STRONG = "a long and unusual pass phrase 9"
ROLES = ("owner", "buyer", "auditor", "staff")
FACTORIES = {"owner": OwnerFactory, "buyer": BuyerFactory, "auditor": AuditorFactory, "staff": StaffFactory}


# ------------------------------------------------------------------------------------------ the paths

def by_factory(role: str, world) -> User:
    return FACTORIES[role]()


def by_grant_role(role: str, world) -> User:
    user = User.objects.create_user(f"granted-{role}", f"{role}@example.org", STRONG)
    return grant_role(user, role)


def staff_console(world) -> Client:
    """A real staff account (``grant_role``), signed in through the admin's own login page."""
    if "console" not in world:
        grant_role(User.objects.create_user("operator", "operator@example.org", STRONG), "staff")
        client = Client()
        response = client.post("/admin/login/?next=/admin/", {"username": "operator", "password": STRONG})
        assert response.status_code == 302 and response["Location"] == "/admin/", response.content[:500]
        world["console"] = client
    return world["console"]


def by_admin_add_form(role: str, world) -> User:
    name = f"added-{role}"
    response = staff_console(world).post(reverse("admin:accounts_user_add"), {
        "username": name, "usable_password": "true", "password1": STRONG, "password2": STRONG, "role": role,
        "organisation": "Org" if role == "buyer" else "", "_save": "Save"})
    assert response.status_code == 302, response.content.decode()[:3000]
    return User.objects.get(username=name)


def by_admin_change_form(role: str, world) -> User:
    """An owner signed up through the portal's service, then given ``role`` on the admin's change form."""
    from portal.services import user_signup

    user = user_signup(username=f"changed-{role}", password=STRONG, email=f"changed-{role}@example.org")
    response = staff_console(world).post(reverse("admin:accounts_user_change", args=[user.pk]), {
        "username": user.username, "first_name": "", "last_name": "", "email": user.email, "role": role,
        "organisation": "Org" if role == "buyer" else "", "is_active": "on",
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"), "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "last_login_0": "", "last_login_1": "", "_save": "Save"})
    assert response.status_code == 302, response.content.decode()[:3000]
    return User.objects.get(pk=user.pk)


def by_portal_signup(role: str, world) -> User:
    from portal.services import user_signup

    return user_signup(username="signed-up", password=STRONG, email="signed-up@example.org")


def by_createsuperuser(role: str, world) -> User:
    import os

    os.environ["DJANGO_SUPERUSER_PASSWORD"] = STRONG
    try:
        call_command("createsuperuser", "--noinput", username="root", email="root@example.org", verbosity=0)
    finally:
        del os.environ["DJANGO_SUPERUSER_PASSWORD"]
    return User.objects.get(username="root")


PATHS = {"factory": by_factory, "grant_role": by_grant_role, "admin_add_form": by_admin_add_form,
         "admin_change_form": by_admin_change_form}
#: (path, role as made, role it must act as)
IDENTITIES = ([(path, role, role) for path in PATHS for role in ROLES]
              + [("portal_signup", "owner", "owner"), ("createsuperuser", "superuser", "staff")])
MAKERS = {**PATHS, "portal_signup": by_portal_signup, "createsuperuser": by_createsuperuser}


# ------------------------------------------------------------------------------------------- the world

@pytest.fixture
def world(db, categorical, binary):
    """Another buyer's completed purchase and survey, with the values they released."""
    other = BuyerFactory()
    fund(other, "100")
    purchase = buy(client_for(other), categorical.id, "1")
    assert purchase.status_code == 201, purchase.content
    survey = client_for(other).post("/api/v1/surveys/", {"attribute": binary.id, "mechanism": "warner",
                                                          "epsilon": "0.2"},
                                    format="json", HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()))
    assert survey.status_code == 201, survey.content
    value = Value.objects.filter(attribute=categorical).order_by("id").first()
    return {"attribute": categorical, "binary": binary, "purchase": purchase.json()["id"],
            "survey": survey.json()["id"], "value": value, "labels": ("red", "green", "blue")}


# ------------------------------------------------------------------------------------------- the cells

def expected(role: str) -> dict[str, str]:
    """What ``role`` must observe at each endpoint: a status, with what the body shows where it matters."""
    owner, buyer, auditor, staff = (role == r for r in ROLES)
    console = auditor or staff
    cells = {
        "api GET datasets": "200",
        "api POST quotes": "200" if buyer else "403",
        "api POST purchases": "201" if buyer else "403",
        "api POST surveys": "201" if buyer else "403",
        "api GET purchases": "403" if owner else "200 own" if buyer else "200 all",
        "api GET another's purchase": "404" if buyer else "403" if owner else "200",
        "api GET another's outputs": "404" if buyer else "200" if staff else "403",
        "api GET another's outputs.csv": "404" if buyer else "200" if staff else "403",
        "api GET another's estimate": "404" if buyer else "200" if staff else "403",
        "api GET surveys": "403" if owner else "200 own" if buyer else "200 all+result" if staff
        else "200 all-result",  # (a buyer has none yet when it is read)
        "api GET another's survey": "404" if buyer else "403" if owner else "200+result" if staff else "200-result",
        "api GET audit ledger": "200" if console else "403",
        "portal GET dashboard": "200" if owner else "403",
        "admin GET index": "200" if console else "302",
        "admin GET ledger": "200" if console else "302",
        "admin GET purchase page": "200" if console else "302",
        "admin GET value page's chain steps": "200+outputs" if staff else "200-outputs" if auditor else "302",
        "admin GET value page": "200+raw" if staff else "200-raw" if auditor else "302",
        "admin GET add user": "200" if staff else "403" if auditor else "302",
        "admin POST delete ledger entry": "403" if console else "302",
        "admin POST change purchase": "403" if console else "302",
    }
    if buyer:  # their own purchase, made in the "POST purchases" cell
        cells.update({"api GET own outputs": "200", "api GET own estimate": "200", "api GET own survey": "200+result"})
    return cells


def observe(user: User, world) -> dict[str, str]:
    api, session = client_for(user), Client()
    session.force_login(user)
    a, pid, sid, value = world["attribute"], world["purchase"], world["survey"], world["value"]
    out: dict[str, str] = {}

    def status(name, response, extra=""):
        code = response.status_code
        if code >= 400 and name.startswith("api"):
            assert response["Content-Type"] == PROBLEM, (name, code, response.content[:200])
        out[name] = f"{code}{extra}"
        return response

    # Reads first, then writes (a buyer's own purchase is made by the "POST purchases" cell).
    status("api GET datasets", api.get("/api/v1/datasets/"))
    r = api.get("/api/v1/purchases/")
    ids = {p["id"] for p in r.json()["results"]} if r.status_code == 200 else set()
    status("api GET purchases", r, "" if r.status_code != 200 else " all" if pid in ids else " own")
    status("api GET another's purchase", api.get(f"/api/v1/purchases/{pid}/"))
    status("api GET another's outputs", api.get(f"/api/v1/purchases/{pid}/outputs/"))
    status("api GET another's outputs.csv", api.get(f"/api/v1/purchases/{pid}/outputs/?format=csv"))
    status("api GET another's estimate", api.get(f"/api/v1/purchases/{pid}/estimate/"))
    r = api.get("/api/v1/surveys/")
    if r.status_code == 200:
        rows = r.json()["results"]
        whose = "all" if sid in {s["id"] for s in rows} else "own"
        shown = {s["result"] is not None for s in rows}
        status("api GET surveys", r, f" {whose}" + {frozenset(): "", frozenset({True}): "+result",
                                                    frozenset({False}): "-result"}.get(frozenset(shown), "±result"))
    else:
        status("api GET surveys", r)
    r = api.get(f"/api/v1/surveys/{sid}/")
    status("api GET another's survey", r, "" if r.status_code != 200 else
           "+result" if r.json()["result"] is not None else "-result")
    status("api GET audit ledger", api.get("/api/v1/audit/ledger/"))

    status("portal GET dashboard", session.get("/portal/"))

    status("admin GET index", session.get("/admin/"))
    status("admin GET ledger", session.get(reverse("admin:accounts_ledgerentry_changelist")))
    status("admin GET purchase page", session.get(reverse("admin:market_purchase_change", args=[pid])))
    r = session.get(reverse("admin:market_value_change", args=[value.id]))
    page = r.content.decode()
    steps = page[page.find("<h2>Chain steps ("):] if "<h2>Chain steps (" in page else None  # its table, below
    status("admin GET value page's chain steps", r, "" if r.status_code != 200 else "-steps" if steps is None else
           "+outputs" if any(f"<td>{label}</td>" in steps for label in world["labels"]) else "-outputs")
    status("admin GET value page", r, "" if r.status_code != 200 else
           "+raw" if b'id="ldp-raw-value"' in r.content else "-raw")
    status("admin GET add user", session.get(reverse("admin:accounts_user_add")))

    entries, purchases = LedgerEntry.objects.count(), list(Purchase.objects.values_list("id", "status", "price"))
    entry = LedgerEntry.objects.order_by("id").first()
    status("admin POST delete ledger entry",
           session.post(reverse("admin:accounts_ledgerentry_delete", args=[entry.pk]), {"post": "yes"}))
    status("admin POST change purchase", session.post(reverse("admin:market_purchase_change", args=[pid]),
                                                      {"status": "failed", "price": "0", "_save": "Save"}))
    assert LedgerEntry.objects.count() == entries and list(Purchase.objects.values_list("id", "status", "price")) \
        == purchases, "a refused admin write changed something"

    body = {"attribute": a.id, "epsilon": "0.5"}
    status("api POST quotes", api.post("/api/v1/quotes/", body, format="json"))
    r = status("api POST purchases", api.post("/api/v1/purchases/", body, format="json",
                                              HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4())))
    own = r.json()["id"] if r.status_code == 201 else None
    r = status("api POST surveys", api.post("/api/v1/surveys/", {"attribute": world["binary"].id,
                                                                 "mechanism": "warner", "epsilon": "0.1"},
                                            format="json", HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4())))
    own_survey = r.json()["id"] if r.status_code == 201 else None
    if own is not None:
        status("api GET own outputs", api.get(f"/api/v1/purchases/{own}/outputs/"))
        status("api GET own estimate", api.get(f"/api/v1/purchases/{own}/estimate/"))
    if own_survey is not None:
        r = api.get(f"/api/v1/surveys/{own_survey}/")
        status("api GET own survey", r, "" if r.status_code != 200 else
               "+result" if r.json()["result"] is not None else "-result")
    return out


@pytest.mark.parametrize("path, made_as, acts_as", IDENTITIES, ids=[f"{p}-{m}" for p, m, _ in IDENTITIES])
def test_every_role_made_every_way_can_do_exactly_what_its_role_allows(world, path, made_as, acts_as):
    user = MAKERS[path](made_as if made_as != "superuser" else "staff", world)
    if acts_as == "buyer":
        fund(user, "100")
    if path != "createsuperuser":
        assert user.role == made_as
    observed, want = observe(user, world), expected(acts_as)
    wrong = {k: f"{want.get(k)} != {observed.get(k)}" for k in sorted(set(want) | set(observed))
             if want.get(k) != observed.get(k)}
    assert not wrong, f"{path} {made_as} (is_staff={user.is_staff}, is_superuser={user.is_superuser}): {wrong}"


def test_the_paths_set_is_staff_as_grant_role_does(world):
    """Every path leaves ``is_staff`` exactly where ``grant_role`` puts it, so no interface can tell an auditor from
    staff by it (the bug this module guards against: an auditor read purchased data because it had is_staff)."""
    for path, made_as, acts_as in IDENTITIES:
        user = MAKERS[path](made_as if made_as != "superuser" else "staff", world)
        assert user.is_staff == (acts_as in ("auditor", "staff")), (path, made_as)
        user.delete()
