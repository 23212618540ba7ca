"""problem+json for every kind of error, the token endpoint, the OpenAPI schema, and a fuzz of the write endpoints."""
from __future__ import annotations

import pytest
from django.core.management import call_command
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.factories import PASSWORD
from tests.market.api.conftest import PROBLEM, assert_problem, client_for

pytestmark = pytest.mark.django_db


def test_openapi_schema_validates_without_warnings(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    text = out.read_text()
    for path in ("/api/v1/datasets/", "/api/v1/quotes/", "/api/v1/purchases/", "/api/v1/purchases/{id}/outputs/",
                 "/api/v1/purchases/{id}/estimate/", "/api/v1/auth/token/"):
        assert f"{path}:" in text
    assert "application/problem+json" in text and "Idempotency-Key" in text and "text/csv" in text


def test_schema_and_docs_are_served(client):
    schema = client.get("/api/schema/")
    assert schema.status_code == 200 and b"openapi" in schema.content
    assert client.get("/api/docs/").status_code == 200
    assert client.get("/api/redoc/").status_code == 200


def test_token_endpoint(buyer):
    anon = client_for(None)
    r = anon.post("/api/v1/auth/token/", {"username": buyer.username, "password": PASSWORD}, format="json")
    assert r.status_code == 200
    token = r.json()["token"]
    assert r.json()["expiry"]
    again = anon.post("/api/v1/auth/token/", {"username": buyer.username, "password": PASSWORD}, format="json")
    assert again.json()["token"] != token, "each sign-in gets its own token (docs/security.md)"
    anon.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert anon.get("/api/v1/purchases/").status_code == 200
    bad = client_for(None).post("/api/v1/auth/token/", {"username": buyer.username, "password": "no"}, format="json")
    problem = assert_problem(bad, 400)
    assert problem["errors"]["non_field_errors"]
    missing = client_for(None).post("/api/v1/auth/token/", {}, format="json")
    assert set(assert_problem(missing, 400)["errors"]) == {"username", "password"}


def test_problem_documents_follow_rfc_9457(api, categorical):
    r = api.post("/api/v1/quotes/", {"attribute": categorical.id, "epsilon": "-1"}, format="json")
    body = assert_problem(r, 400)
    assert body["type"].startswith("tag:ldpmarket") and body["title"] == "Invalid input"
    assert body["instance"] == "/api/v1/quotes/"
    assert body["errors"] == {"epsilon": ["epsilon must be greater than 0"]}
    assert "epsilon" in body["detail"]


def test_generic_http_errors_are_problems(api, categorical):
    assert_problem(api.delete("/api/v1/datasets/"), 405)
    assert api.delete("/api/v1/datasets/")["Allow"]
    assert_problem(api.put("/api/v1/purchases/1/", {}, format="json"), 405)
    unknown = api.get("/api/v1/nothing-here/")
    assert unknown.status_code == 404 and unknown["Content-Type"] == PROBLEM
    assert_problem(api.get("/api/v1/purchases/999999/"), 404)
    assert_problem(api.get("/api/v1/purchases/999999/outputs/"), 404)
    assert_problem(api.post("/api/v1/quotes/", "x=1", content_type="text/plain"), 415)


def test_not_found_outside_the_api_is_not_a_problem(client, settings):
    settings.DEBUG = False
    r = client.get("/no-such-page/")
    assert r.status_code == 404 and r["Content-Type"].startswith("text/html")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3),
    max_leaves=8)


@pytest.mark.slow
@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.fixed_dictionaries({}, optional={"attribute": json_values, "epsilon": json_values,
                                                "cohort": json_values, "quote": json_values}) | json_values,
       endpoint=st.sampled_from(["quotes", "purchases"]))
def test_no_body_makes_a_5xx(api, categorical, body, endpoint):
    r = api.post(f"/api/v1/{endpoint}/", body, format="json", HTTP_IDEMPOTENCY_KEY="fuzz")
    assert r.status_code < 500, r.content
    if r.status_code >= 400:
        assert r["Content-Type"] == PROBLEM
