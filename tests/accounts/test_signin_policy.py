"""One sign-in lockout policy for the token endpoint, the portal and /admin/ (docs/security.md).

Failed sign-ins are counted per (account, client address) and per client address across accounts; either
limit reached locks that pair (or that address) out until the cool-off has passed since its last counted
failure. The client address is REMOTE_ADDR; ``X-Forwarded-For`` counts only when the request comes from a
proxy listed in ``LDP_TRUSTED_PROXIES``. The owner signing in from another address is not locked out.
"""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import time_machine
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tests.factories import PASSWORD, BuyerFactory, OwnerFactory, StaffFactory

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"
TOKEN_URL = "/api/v1/auth/token/"
ADMIN_LOGIN = "/admin/login/?next=/admin/"
ATTACKER = "198.51.100.66"
OWNER_HOME = "203.0.113.10"


def per_account() -> int:
    return getattr(django_settings, "LDP_SIGNIN_FAILURES_PER_ACCOUNT", 5)


def per_address() -> int:
    return getattr(django_settings, "LDP_SIGNIN_FAILURES_PER_ADDRESS", 20)


def cool_off() -> timedelta:
    return timedelta(minutes=getattr(django_settings, "LDP_SIGNIN_COOLOFF_MINUTES", 15))


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    """A private cache per test, so that throttle counts never leak between tests."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"signin-tests-{uuid.uuid4()}"}}


def token(username, password, *, addr=ATTACKER, xff=None):
    extra = {"REMOTE_ADDR": addr}
    if xff:
        extra["HTTP_X_FORWARDED_FOR"] = xff
    return APIClient().post(TOKEN_URL, {"username": username, "password": password}, format="json", **extra)


def portal(username, password, *, addr=ATTACKER, xff=None):
    extra = {"HTTP_X_FORWARDED_FOR": xff} if xff else {}
    return Client(REMOTE_ADDR=addr).post("/portal/login/", {"username": username, "password": password}, **extra)


def admin(username, password, *, addr=ATTACKER, xff=None):
    extra = {"HTTP_X_FORWARDED_FOR": xff} if xff else {}
    return Client(REMOTE_ADDR=addr).post(ADMIN_LOGIN, {"username": username, "password": password,
                                                       "next": "/admin/"}, **extra)


def rotating(i: int) -> str:
    return f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"


def assert_locked_problem(response):
    assert response.status_code == 429, (response.status_code, response.content[:300])
    assert response["Content-Type"] == PROBLEM
    body = response.json()
    assert body["type"].endswith("/sign-in-locked") and body["status"] == 429
    assert 0 < int(response["Retry-After"]) <= cool_off().total_seconds()
    return body


# ------------------------------------------------------------------------------------------- token endpoint

def test_130_guesses_with_rotating_forwarded_for_are_locked_out_after_the_limit(settings):
    # the lockout alone: the anonymous rate limit (which now also keys on the client address) is off here
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {
        **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "anon": None}}
    buyer = BuyerFactory()
    statuses = [token(buyer.username, f"guess-{i}", xff=rotating(i)).status_code for i in range(130)]
    # the failure that reaches the limit is answered with the lockout; every later guess is refused unread
    assert statuses[:per_account() - 1] == [400] * (per_account() - 1), statuses
    assert statuses[per_account() - 1:] == [429] * (131 - per_account()), statuses
    # even the right password is refused from that address while the lockout lasts, as a problem document
    assert_locked_problem(token(buyer.username, PASSWORD, xff=rotating(999)))


def test_spraying_across_accounts_is_limited_per_address():
    real = BuyerFactory()
    names = [f"sprayed-{i}" for i in range(per_address())] + [real.username]
    statuses = [token(name, "Winter2025!", xff=rotating(i)).status_code for i, name in enumerate(names)]
    assert statuses[:per_address() - 1] == [400] * (per_address() - 1), statuses
    assert statuses[per_address() - 1:] == [429, 429], statuses
    assert_locked_problem(token(real.username, PASSWORD, xff=rotating(7)))
    # the account's owner elsewhere is not locked out
    assert token(real.username, PASSWORD, addr=OWNER_HOME).status_code == 200


def test_the_owner_from_another_address_still_signs_in_and_the_lockout_ends_after_the_cool_off():
    buyer = BuyerFactory()
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        for i in range(per_account() + 3):
            token(buyer.username, f"guess-{i}")
        assert_locked_problem(token(buyer.username, PASSWORD))
        assert token(buyer.username, PASSWORD, addr=OWNER_HOME).status_code == 200
        assert token(buyer.username, "a typo", addr=OWNER_HOME).status_code == 400
        assert token(buyer.username, PASSWORD, addr=OWNER_HOME).status_code == 200
    with time_machine.travel(start + cool_off() - timedelta(seconds=5), tick=False):
        assert_locked_problem(token(buyer.username, PASSWORD))
    with time_machine.travel(start + cool_off() + timedelta(seconds=5), tick=False):
        assert token(buyer.username, PASSWORD).status_code == 200


def test_usernames_are_counted_whatever_their_case_and_spaces():
    buyer = BuyerFactory()
    variants = [buyer.username, buyer.username.upper(), f" {buyer.username} ", buyer.username.title()]
    for i in range(per_account()):
        token(variants[i % len(variants)], f"guess-{i}")
    assert_locked_problem(token(buyer.username, PASSWORD))


# --------------------------------------------------------------------------------------- /admin/ and portal

def test_the_admin_sign_in_locks_out():
    staff = StaffFactory()
    for i in range(per_account() - 1):
        response = admin(staff.username, f"guess-{i}", xff=rotating(i))
        assert response.status_code == 200
    assert admin(staff.username, "guess", xff=rotating(98)).status_code == 429
    locked = admin(staff.username, PASSWORD, xff=rotating(99))
    assert locked.status_code == 429, "the right password is refused while the lockout lasts"
    assert "Too many failed sign-ins" in locked.content.decode()
    assert "_auth_user_id" not in locked.wsgi_request.session
    # staff signing in from their own address are not locked out
    assert admin(staff.username, PASSWORD, addr=OWNER_HOME).status_code == 302


def test_the_portal_sign_in_locks_out_and_says_so():
    owner = OwnerFactory()
    for i in range(per_account() - 1):
        assert "do not match" in portal(owner.username, f"guess-{i}", xff=rotating(i)).content.decode()
    assert portal(owner.username, "guess", xff=rotating(98)).status_code == 429
    locked = portal(owner.username, PASSWORD)
    assert locked.status_code == 429
    page = locked.content.decode()
    assert "Too many failed sign-ins" in page and "15 minutes" in page
    assert portal(owner.username, PASSWORD, addr=OWNER_HOME).status_code == 302


def test_one_policy_counts_failures_at_every_sign_in():
    staff = StaffFactory()  # staff may use the token endpoint and /admin/; the portal refuses them after the check
    n = per_account()
    failures = [token, admin, portal] * n
    for i, attempt in enumerate(failures[:n]):
        attempt(staff.username, f"guess-{i}")
    assert_locked_problem(token(staff.username, PASSWORD))
    assert admin(staff.username, PASSWORD).status_code == 429
    assert portal(staff.username, PASSWORD).status_code == 429


def test_a_success_forgives_that_accounts_failures_from_that_address_only():
    owner = OwnerFactory()
    for _ in range(2):
        for i in range(per_account() - 1):
            assert token(owner.username, f"guess-{i}").status_code == 400
        assert token(owner.username, PASSWORD).status_code == 200
    # but a success cannot wipe the failures against other accounts (that would defeat the per-address limit)
    for i in range(per_address() - 1):
        token(f"someone-{i}", "guess")
    assert token(owner.username, PASSWORD).status_code == 200
    assert_locked_problem(token("someone-else", "guess"))


# ------------------------------------------------------------------------------------------ trusted proxies

def test_forwarded_for_counts_only_from_a_trusted_proxy(settings):
    settings.LDP_TRUSTED_PROXIES = ["192.0.2.0/24", "2001:db8::1"]
    buyer = BuyerFactory()
    proxy = "192.0.2.5"
    # behind the proxy, the client is the address the proxy saw: spoofed entries to its left change nothing
    for i in range(per_account() - 1):
        assert token(buyer.username, f"guess-{i}", addr=proxy, xff=f"{rotating(i)}, {ATTACKER}").status_code == 400
    assert token(buyer.username, "guess", addr=proxy, xff=f"9.9.9.9, {ATTACKER}").status_code == 429
    assert_locked_problem(token(buyer.username, PASSWORD, addr=proxy, xff=f"1.2.3.4, {ATTACKER}"))
    assert_locked_problem(token(buyer.username, PASSWORD, addr="2001:db8::1", xff=ATTACKER))
    # another client behind the same proxy is another address
    assert token(buyer.username, PASSWORD, addr=proxy, xff=OWNER_HOME).status_code == 200
    # and the attacker coming directly is the same address
    assert_locked_problem(token(buyer.username, PASSWORD, addr=ATTACKER))


def test_client_address_resolution():
    from ldpmarket.clientaddr import client_address

    trusted = ["10.0.0.0/8", "192.0.2.1"]
    cases = [
        ({"REMOTE_ADDR": "203.0.113.9", "HTTP_X_FORWARDED_FOR": "1.1.1.1"}, "203.0.113.9"),   # not from a proxy
        ({"REMOTE_ADDR": "10.1.2.3", "HTTP_X_FORWARDED_FOR": "1.1.1.1, 203.0.113.9"}, "203.0.113.9"),
        ({"REMOTE_ADDR": "10.1.2.3", "HTTP_X_FORWARDED_FOR": "203.0.113.9, 192.0.2.1"}, "203.0.113.9"),  # 2 hops
        ({"REMOTE_ADDR": "10.1.2.3", "HTTP_X_FORWARDED_FOR": "garbage, 203.0.113.9"}, "203.0.113.9"),
        ({"REMOTE_ADDR": "10.1.2.3", "HTTP_X_FORWARDED_FOR": "203.0.113.9, garbage"}, "10.1.2.3"),
        ({"REMOTE_ADDR": "10.1.2.3"}, "10.1.2.3"),
        ({"REMOTE_ADDR": "10.1.2.3", "HTTP_X_FORWARDED_FOR": "10.4.4.4"}, "10.4.4.4"),  # only proxies: the first
        ({"REMOTE_ADDR": "10.1.2.3", "HTTP_X_FORWARDED_FOR": " 2001:DB8::7 "}, "2001:db8::7"),
    ]
    for meta, expected in cases:
        assert client_address(meta, trusted) == expected, meta
    assert client_address({"REMOTE_ADDR": "10.1.2.3", "HTTP_X_FORWARDED_FOR": "1.1.1.1"}, []) == "10.1.2.3"


def test_the_anonymous_rate_limit_keys_on_the_client_address_too(settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {
        **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "anon": "3/minute"}}
    statuses = [token(f"nobody-{i}", "guess", xff=rotating(i)).status_code for i in range(4)]
    assert statuses == [400, 400, 400, 429]
