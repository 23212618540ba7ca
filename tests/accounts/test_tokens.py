"""API tokens (docs/security.md, "Credentials and sign-in"): digests at rest, an expiry, revocation.

``POST /api/v1/auth/token/`` answers a new token and its expiry; the database keeps only a digest of it
(no column of any table holds the key); a token past its expiry, or revoked with ``POST /api/v1/auth/logout/``
(that token) or ``POST /api/v1/auth/logout-all/`` (every token of the account), is refused with 401.
``Authorization: Token <key>`` stays the scheme.
"""
from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta

import pytest
import time_machine
from django.apps import apps
from django.conf import settings as django_settings
from django.db import connection, models
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from tests.factories import PASSWORD, BuyerFactory

pytestmark = pytest.mark.django_db

TOKEN_URL = "/api/v1/auth/token/"
PROBLEM = "application/problem+json"


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    """A private cache per test, so that throttle counts never leak between tests."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"token-tests-{uuid.uuid4()}"}}


def ttl() -> timedelta:
    return timedelta(hours=getattr(django_settings, "LDP_TOKEN_TTL_HOURS", 24))


def obtain(user, client=None) -> dict:
    response = (client or APIClient()).post(TOKEN_URL, {"username": user.username, "password": PASSWORD},
                                            format="json")
    assert response.status_code == 200, response.content[:500]
    return response.json()


def with_token(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_the_token_endpoint_answers_a_token_and_its_expiry():
    buyer = BuyerFactory()
    before = timezone.now()
    body = obtain(buyer)
    assert set(body) == {"token", "expiry"}, body
    expiry = parse_datetime(body["expiry"])
    assert expiry is not None and before + ttl() <= expiry <= timezone.now() + ttl()
    assert with_token(body["token"]).get("/api/v1/purchases/").status_code == 200
    # every sign-in gets its own token (each can be revoked alone)
    assert obtain(buyer)["token"] != body["token"]


def _text_columns():
    for model in apps.get_models(include_auto_created=True):
        if model._meta.proxy or not model._meta.managed:
            continue
        for field in model._meta.concrete_fields:
            if isinstance(field, (models.CharField, models.TextField)):
                yield model, field


def test_the_database_keeps_only_a_digest_of_the_token():
    key = obtain(BuyerFactory())["token"]
    holding = [f"{model._meta.db_table}.{field.column}" for model, field in _text_columns()
               if model._default_manager.filter(**{f"{field.name}__contains": key}).exists()]
    assert holding == [], f"the token is stored in clear in {holding}"
    # what is stored is its SHA-512 digest, and at most a short prefix used to find the row
    from knox.models import AuthToken

    row = AuthToken.objects.get()
    assert row.digest == hashlib.sha512(key.encode()).hexdigest()
    assert len(row.token_key) <= 15 < len(key)


def test_an_expired_token_is_refused():
    buyer = BuyerFactory()
    key = obtain(buyer)["token"]
    with time_machine.travel(timezone.now() + ttl() - timedelta(minutes=1)):
        assert with_token(key).get("/api/v1/purchases/").status_code == 200
    with time_machine.travel(timezone.now() + ttl() + timedelta(minutes=1)):
        response = with_token(key).get("/api/v1/purchases/")
        assert response.status_code == 401, response.content[:300]
        assert response["Content-Type"] == PROBLEM and response["WWW-Authenticate"].startswith("Token")
        # a new sign-in gives a working token again
        assert with_token(obtain(buyer)["token"]).get("/api/v1/purchases/").status_code == 200


def test_a_revoked_token_is_refused_and_the_others_still_work():
    buyer = BuyerFactory()
    first, second = obtain(buyer)["token"], obtain(buyer)["token"]
    response = with_token(first).post("/api/v1/auth/logout/")
    assert response.status_code == 204, response.content[:300]
    assert with_token(first).get("/api/v1/purchases/").status_code == 401
    assert with_token(second).get("/api/v1/purchases/").status_code == 200


def test_logout_all_revokes_every_token_of_the_account_only():
    buyer, other = BuyerFactory(), BuyerFactory()
    mine = [obtain(buyer)["token"] for _ in range(3)]
    theirs = obtain(other)["token"]
    assert with_token(mine[0]).post("/api/v1/auth/logout-all/").status_code == 204
    assert [with_token(k).get("/api/v1/purchases/").status_code for k in mine] == [401, 401, 401]
    assert with_token(theirs).get("/api/v1/purchases/").status_code == 200


def test_a_password_change_revokes_every_token_of_that_user_only():
    """Issue 27: a token kept working after its user's password changed.  ``set_password`` then ``save`` is
    what every path runs (the admin's password form, ``changepassword``, ``create_buyer``)."""
    buyer, other = BuyerFactory(), BuyerFactory()
    mine = [obtain(buyer)["token"] for _ in range(2)]
    theirs = obtain(other)["token"]
    buyer.set_password("a-new-passphrase-for-issue-27")
    buyer.save()
    assert [with_token(k).get("/api/v1/purchases/").status_code for k in mine] == [401, 401]
    assert with_token(theirs).get("/api/v1/purchases/").status_code == 200
    # Saving without a new password (a role or e-mail change) keeps the tokens.
    fresh = obtain(other)["token"]
    other.email = "other@example.org"
    other.save()
    assert with_token(fresh).get("/api/v1/purchases/").status_code == 200


def test_the_admins_password_form_revokes_the_users_tokens(client):
    """The same through the admin's own "change password" form, as a staff member resets a buyer's password."""
    from accounts.roles import grant_role
    from tests.factories import UserFactory

    staff = UserFactory(username="issue27-staff")
    grant_role(staff, "staff")
    buyer = BuyerFactory()
    token = obtain(buyer)["token"]
    client.force_login(staff)
    response = client.post(f"/admin/accounts/user/{buyer.pk}/password/",
                           {"password1": "b-new-passphrase-27", "password2": "b-new-passphrase-27",
                            "usable_password": "true"})
    assert response.status_code == 302, response.content[:500]
    assert with_token(token).get("/api/v1/purchases/").status_code == 401


def test_revoking_needs_a_token():
    assert APIClient().post("/api/v1/auth/logout/").status_code == 401
    assert with_token("0" * 64).post("/api/v1/auth/logout/").status_code == 401


@pytest.mark.parametrize("header", ["Bearer {key}", "Token", "Token {key} extra", "Token caf\u00e9",
                                    "Token \u00ff" * 3])
def test_malformed_or_foreign_authorization_headers_are_401_not_500(header):
    key = obtain(BuyerFactory())["token"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header.format(key=key))
    response = client.get("/api/v1/purchases/")
    assert response.status_code == 401, (header, response.status_code, response.content[:300])


class _Editor:
    """What the migration uses of a schema editor (SQLite's cannot open inside the test's transaction)."""

    connection = connection

    def quote_name(self, name):
        return connection.ops.quote_name(name)

    def execute(self, sql):
        with connection.cursor() as cursor:
            cursor.execute(sql)


def test_tokens_made_before_the_switch_keep_working_until_they_expire():
    """The migration turns each old clear-text token into a digest with an expiry and drops the old table."""
    import importlib

    migration = importlib.import_module("accounts.migrations.0008_api_tokens_as_digests")
    buyer = BuyerFactory()
    old_key = "a" * 20 + uuid.uuid4().hex[:20]
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamp NOT NULL, "
                       "user_id bigint NOT NULL)")
        cursor.execute("INSERT INTO authtoken_token (key, created, user_id) VALUES (%s, %s, %s)",
                       [old_key, timezone.now(), buyer.pk])
    migration.tokens_to_digests(apps, _Editor())
    assert "authtoken_token" not in connection.introspection.table_names()
    holding = [f"{m._meta.db_table}.{f.column}" for m, f in _text_columns()
               if m._default_manager.filter(**{f"{f.name}__contains": old_key}).exists()]
    assert holding == []
    assert with_token(old_key).get("/api/v1/purchases/").status_code == 200
    with time_machine.travel(timezone.now() + ttl() + timedelta(minutes=1)):
        assert with_token(old_key).get("/api/v1/purchases/").status_code == 401
