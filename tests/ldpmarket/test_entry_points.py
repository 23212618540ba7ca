"""The service's entry points (issue 13 item 2): the landing page ``/``, the API root ``/api/v1/``, the
browsable API's sign-in under the one sign-in lockout, and the hint for a ``Bearer`` header."""
from __future__ import annotations

import re
import uuid
from html.parser import HTMLParser

import pytest
from django.conf import settings as django_settings
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import User
from accounts.roles import grant_role
from tests.factories import PASSWORD, BuyerFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"entry-tests-{uuid.uuid4()}"}}


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.tags, self.inline_styles = [], [], 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if "style" in attrs or any(name.startswith("on") for name in attrs):
            self.inline_styles += 1


def _buyer() -> User:
    """A buyer as a deployment makes one: a user, then the role through accounts.roles."""
    user = User.objects.create_user(username="api-browser", password=PASSWORD, organisation="Lab")
    return grant_role(user, "buyer")


# ----------------------------------------------------------------------------------------------- landing page
def test_the_landing_page_links_the_portal_the_api_its_docs_and_the_console():
    response = Client().get("/")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    page = _Page()
    page.feed(response.content.decode())
    for target in ["/portal/", "/api/v1/", "/api/docs/", "/admin/"]:
        assert target in page.links, (target, page.links)
    text = re.sub(r"\s+", " ", response.content.decode())
    assert "local differential privacy" in text and "budget" in text
    # CSP-safe: no script at all, no inline style, no event handler; the policy allows no inline code here
    assert "script" not in page.tags and "style" not in page.tags and page.inline_styles == 0
    policy = response.get("Content-Security-Policy", "")
    assert "unsafe-inline" not in policy
    client = Client()
    for link in page.links:  # every link leads somewhere (a page, or the sign-in in front of it)
        assert client.get(link).status_code in (200, 302), link


# --------------------------------------------------------------------------------------------------- API root
def test_the_api_root_lists_the_endpoints_to_anyone():
    response = APIClient().get("/api/v1/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    body = response.json()
    for key, path in [("datasets", "/api/v1/datasets/"), ("purchases", "/api/v1/purchases/"),
                      ("surveys", "/api/v1/surveys/"), ("quotes", "/api/v1/quotes/"),
                      ("auth/token", "/api/v1/auth/token/"),
                      ("docs", "/api/docs/"), ("schema", "/api/schema/"), ("sign-in", "/api/auth/login/")]:
        assert body[key] == f"http://testserver{path}", (key, body)
    assert "audit/ledger" not in body and "staff/topups" not in body  # staff's and auditors' own: tests/market/api
    assert all("<" not in url and "(?P" not in url for url in body.values())  # no detail or suffix routes


def test_the_api_root_is_in_the_schema():
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert schema["paths"]["/api/v1/"]["get"]["operationId"] == "api_root"


def test_the_browsable_api_root_renders():
    response = Client().get("/api/v1/", HTTP_ACCEPT="text/html")
    assert response.status_code == 200 and b"/api/v1/datasets/" in response.content
    assert b'href="/api/auth/login/?next=/api/v1/"' in response.content  # the sign-in link


# ------------------------------------------------------------------------------------------ Bearer: the hint
def test_a_bearer_header_gets_a_401_that_names_the_token_scheme():
    response = APIClient().get("/api/v1/datasets/", HTTP_AUTHORIZATION="Bearer 0123456789abcdef")
    assert response.status_code == 401
    assert response["Content-Type"].startswith("application/problem+json")
    assert response["WWW-Authenticate"] == "Token"
    assert "Token <key>" in response.json()["detail"] and "Bearer" in response.json()["detail"]


def test_a_bearer_header_with_a_valid_token_is_still_refused_with_the_hint():
    buyer = BuyerFactory()
    token = APIClient().post("/api/v1/auth/token/", {"username": buyer.username, "password": PASSWORD},
                             format="json").json()["token"]
    assert APIClient().get("/api/v1/datasets/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 200
    refused = APIClient().get("/api/v1/datasets/", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert refused.status_code == 401 and "Token <key>" in refused.json()["detail"]


# ------------------------------------------------------------------------------- browsable API: the sign-in
def test_the_browsable_api_signs_in_with_a_session_and_keeps_csrf():
    buyer = _buyer()
    client = Client(enforce_csrf_checks=True)
    form = client.get("/api/auth/login/?next=/api/v1/datasets/")
    assert form.status_code == 200 and b'name="password"' in form.content
    csrf = client.cookies["csrftoken"].value
    signed_in = client.post("/api/auth/login/", {"username": buyer.username, "password": PASSWORD,
                                                 "next": "/api/v1/datasets/", "csrfmiddlewaretoken": csrf})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/api/v1/datasets/"
    page = client.get("/api/v1/datasets/", HTTP_ACCEPT="text/html")
    assert page.status_code == 200 and buyer.username.encode() in page.content
    assert b"Sign out" in page.content and b"onclick" not in page.content.split(b"navbar-right")[-1][:800]
    # the session authenticates the API, but an unsafe request without the CSRF token is refused
    refused = client.post("/api/v1/quotes/", {"attribute": 1, "epsilon": "0.5"}, content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    # signing out is a plain POST form
    csrf = client.cookies["csrftoken"].value
    assert client.post("/api/auth/logout/", {"csrfmiddlewaretoken": csrf}).status_code == 302
    assert client.get("/api/v1/datasets/", HTTP_ACCEPT="application/json").status_code in (401, 403)


def test_the_browsable_api_sign_in_is_under_the_lockout():
    buyer = _buyer()
    attacker = Client(REMOTE_ADDR="198.51.100.77")
    limit = django_settings.LDP_SIGNIN_FAILURES_PER_ACCOUNT
    for i in range(limit - 1):
        wrong = attacker.post("/api/auth/login/", {"username": buyer.username, "password": f"guess-{i}"})
        assert wrong.status_code == 200 and b"correct username and password" in wrong.content
    # the failure that reaches the limit, and then even the right password, is refused as a page that says why
    for password in ["guess-last", PASSWORD]:
        locked = attacker.post("/api/auth/login/", {"username": buyer.username, "password": password})
        assert locked.status_code == 429, (locked.status_code, locked.content[:300])
        assert locked["Content-Type"].startswith("text/html") and int(locked["Retry-After"]) >= 1
        assert b"signing in is paused" in locked.content
        assert "_auth_user_id" not in attacker.session
    # the lockout is per account and address: the owner signs in from elsewhere
    home = Client(REMOTE_ADDR="203.0.113.10")
    assert home.post("/api/auth/login/", {"username": buyer.username, "password": PASSWORD}).status_code == 302
