"""Roles x endpoints x objects, exhaustively (docs/quality-targets.md#reliability, Authorization).

Every (role, endpoint, object) cell below is one test: anonymous callers get
401; owners and auditors never buy; a buyer reads only their own purchases (404
for another's: not even their existence is shown); auditors read every
purchase's bookkeeping but not the data bought; staff read everything.  Every
refusal is a problem+json.  The roles come from the factories, which set
``is_staff`` as ``grant_role`` does (an auditor has it); tests/market/api/test_role_paths.py
makes every role through every other path (grant_role, the admin's user form,
createsuperuser, portal sign-up) and checks the portal and the console too.  Separately: no response a buyer can get
contains a raw value, an owner's identity or a value id.  Surveys follow the purchases' rules, and auditors see a
survey's bookkeeping but not its aggregate result.
"""
from __future__ import annotations

import itertools
import json
import uuid

import pytest

from market.models import Purchase, Value
from tests.market.api.conftest import PROBLEM, buy, client_for

ROLES = ["anonymous", "owner", "buyer_a", "buyer_b", "auditor", "staff"]
OBJECTS = ["purchase_a", "purchase_b"]
SURVEYS = ["survey_a", "survey_b"]
ENDPOINTS = ["datasets", "dataset", "quote", "purchase", "purchases", "purchase_detail", "outputs", "outputs_csv",
             "estimate", "survey", "surveys", "survey_detail", "survey_as_purchase"]
OBJECT_ENDPOINTS = {"purchase_detail": OBJECTS, "outputs": OBJECTS, "outputs_csv": OBJECTS, "estimate": OBJECTS,
                    "survey_detail": SURVEYS, "survey_as_purchase": SURVEYS}


def expected(role: str, endpoint: str, obj: str | None) -> int:
    if role == "anonymous":
        return 401
    if endpoint in ("datasets", "dataset"):
        return 200
    if endpoint in ("quote", "purchase", "survey"):
        return {"buyer_a": 200, "buyer_b": 200}.get(role, 403) if endpoint == "quote" else \
            {"buyer_a": 201, "buyer_b": 201}.get(role, 403)
    if role == "owner":
        return 403
    if endpoint in ("purchases", "surveys"):
        return 200
    if endpoint == "survey_as_purchase":  # a survey is never served as a purchase, to anyone
        return 404
    if role in ("buyer_a", "buyer_b"):
        own = obj in (("purchase_a", "survey_a") if role == "buyer_a" else ("purchase_b", "survey_b"))
        return 200 if own else 404
    if role == "auditor":
        return 200 if endpoint in ("purchase_detail", "survey_detail") else 403
    return 200  # staff


CELLS = [(r, e, o) for r, e in itertools.product(ROLES, ENDPOINTS)
         for o in (OBJECT_ENDPOINTS.get(e) or [None])]


@pytest.fixture
def world(db, buyer, buyer_b, owner, auditor, staff, categorical, binary):
    """Two buyers with one completed purchase and one survey each, and one client per role."""
    pa = buy(client_for(buyer), categorical.id, "1").json()["id"]
    pb = buy(client_for(buyer_b), categorical.id, "1.5").json()["id"]
    sa = survey(client_for(buyer), binary.id, "0.2").json()["id"]
    sb = survey(client_for(buyer_b), binary.id, "0.3").json()["id"]
    users = {"owner": owner, "buyer_a": buyer, "buyer_b": buyer_b, "auditor": auditor, "staff": staff}
    clients = {role: client_for(users.get(role)) for role in ROLES}
    return {"clients": clients, "purchase_a": pa, "purchase_b": pb, "survey_a": sa, "survey_b": sb,
            "attribute": categorical, "binary": binary}


def survey(client, attribute_id, epsilon, mechanism="warner"):
    return client.post("/api/v1/surveys/", {"attribute": attribute_id, "mechanism": mechanism, "epsilon": epsilon},
                       format="json", HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()))


def call(world, role: str, endpoint: str, obj: str | None):
    client, attribute = world["clients"][role], world["attribute"]
    pid = world[obj] if obj else None
    body = {"attribute": attribute.id, "epsilon": "0.5"}
    return {
        "survey": lambda: survey(client, world["binary"].id, "0.1"),
        "surveys": lambda: client.get("/api/v1/surveys/"),
        "survey_detail": lambda: client.get(f"/api/v1/surveys/{pid}/"),
        "survey_as_purchase": lambda: client.get(f"/api/v1/purchases/{pid}/"),
        "datasets": lambda: client.get("/api/v1/datasets/"),
        "dataset": lambda: client.get(f"/api/v1/datasets/{attribute.dataset_id}/"),
        "quote": lambda: client.post("/api/v1/quotes/", body, format="json"),
        "purchase": lambda: client.post("/api/v1/purchases/", body, format="json",
                                        HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4())),
        "purchases": lambda: client.get("/api/v1/purchases/"),
        "purchase_detail": lambda: client.get(f"/api/v1/purchases/{pid}/"),
        "outputs": lambda: client.get(f"/api/v1/purchases/{pid}/outputs/"),
        "outputs_csv": lambda: client.get(f"/api/v1/purchases/{pid}/outputs/?format=csv"),
        "estimate": lambda: client.get(f"/api/v1/purchases/{pid}/estimate/"),
    }[endpoint]()


@pytest.mark.parametrize("role, endpoint, obj", CELLS, ids=[f"{r}-{e}-{o or 'none'}" for r, e, o in CELLS])
def test_authorization_table(world, role, endpoint, obj):
    response = call(world, role, endpoint, obj)
    want = expected(role, endpoint, obj)
    assert response.status_code == want, (response.status_code, getattr(response, "content", b"")[:300])
    if want >= 400:
        assert response["Content-Type"] == PROBLEM
        assert response.json()["status"] == want
    if want == 401:
        assert response["WWW-Authenticate"].startswith("Token")


def test_purchase_lists_show_exactly_what_each_role_may_see(world):
    listed = {role: {p["id"] for p in world["clients"][role].get("/api/v1/purchases/").json()["results"]}
              for role in ("buyer_a", "buyer_b", "auditor", "staff")}
    a, b = world["purchase_a"], world["purchase_b"]
    assert listed == {"buyer_a": {a}, "buyer_b": {b}, "auditor": {a, b}, "staff": {a, b}}


def test_survey_lists_show_exactly_what_each_role_may_see_and_auditors_no_result(world):
    listed = {role: {s["id"]: s["result"] for s in world["clients"][role].get("/api/v1/surveys/").json()["results"]}
              for role in ("buyer_a", "buyer_b", "auditor", "staff")}
    a, b = world["survey_a"], world["survey_b"]
    assert {k: set(v) for k, v in listed.items()} == {"buyer_a": {a}, "buyer_b": {b}, "auditor": {a, b},
                                                      "staff": {a, b}}
    assert listed["buyer_a"][a]["n"] == 50 and listed["staff"][b]["n"] == 50
    assert listed["auditor"] == {a: None, b: None}


def test_refused_writes_change_nothing(world):
    before = Purchase.objects.count()
    for role in ("anonymous", "owner", "auditor", "staff"):
        call(world, role, "purchase", None)
        call(world, role, "survey", None)
    assert Purchase.objects.count() == before


def test_no_raw_values_owner_identities_or_value_ids_reach_a_buyer(world, binary):
    attribute = world["attribute"]
    values = list(Value.objects.filter(attribute__in=[attribute, binary]).select_related("owner"))
    owner_names = {v.owner.username for v in values}
    owner_ids = {v.owner_id for v in values}
    client = world["clients"]["buyer_a"]
    pid = world["purchase_a"]
    responses = [client.get("/api/v1/datasets/"), client.get(f"/api/v1/datasets/{attribute.dataset_id}/"),
                 client.post("/api/v1/quotes/", {"attribute": attribute.id, "epsilon": "1"}, format="json"),
                 client.get("/api/v1/purchases/"), client.get(f"/api/v1/purchases/{pid}/"),
                 client.get(f"/api/v1/purchases/{pid}/outputs/"), client.get(f"/api/v1/purchases/{pid}/estimate/"),
                 client.post("/api/v1/quotes/", {"attribute": binary.id, "mechanism": "warner", "epsilon": "0.1"},
                             format="json"),
                 client.get("/api/v1/surveys/"), client.get(f"/api/v1/surveys/{world['survey_a']}/")]
    text = " ".join(r.content.decode() for r in responses)
    text += b"".join(client.get(f"/api/v1/purchases/{pid}/outputs/?format=csv").streaming_content).decode()
    assert not any(name in text for name in owner_names)
    for body in (json.loads(r.content) for r in responses):
        _assert_no_keys(body, {"owner", "owner_id", "owners", "raw", "raw_value", "value_id", "value_ids", "curator",
                               "buyer", "buyer_id", "username", "email"})
    rows = client.get(f"/api/v1/purchases/{pid}/outputs/").json()["results"]
    assert set(rows[0]) == {"pseudonym", "epsilon", "output"}
    assert not {r["pseudonym"] for r in rows} & {str(i) for i in owner_ids | {v.id for v in values}}


def _assert_no_keys(body, forbidden):
    if isinstance(body, dict):
        assert not forbidden & set(body), set(body) & forbidden
        for v in body.values():
            _assert_no_keys(v, forbidden)
    elif isinstance(body, list):
        for v in body:
            _assert_no_keys(v, forbidden)


def test_session_authentication_works_for_the_browsable_api(world, buyer):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(buyer)
    assert client.get("/api/v1/purchases/").status_code == 200
    page = client.get("/api/v1/datasets/", HTTP_ACCEPT="text/html")
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")


def test_invalid_token_is_401(world):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    r = client.get("/api/v1/datasets/")
    assert r.status_code == 401 and r["Content-Type"] == PROBLEM
