"""Named API tokens (``accounts.tokens``; docs/security.md#credentials-and-sign-in): a token with a name and an expiry
its user chooses, listed without the token itself, revoked one by one and only by its user."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.models import TokenName
from accounts.tokens import max_expiry, token_create, token_revoke, tokens_of
from ldpmarket.problems import NoSuchToken, TokenRefused
from tests.factories import PASSWORD, BuyerFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"named-token-tests-{uuid.uuid4()}"}}


def works(text: str) -> bool:
    return APIClient().get("/api/v1/datasets/", HTTP_AUTHORIZATION=f"Token {text}").status_code == 200


def test_a_named_token_works_until_its_chosen_expiry():
    buyer = BuyerFactory()
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        row, text = token_create(user=buyer, name="  nightly   export ", expires_in=timedelta(days=30))
    assert row.user_id == buyer.id and row.expiry == start + timedelta(days=30)
    assert TokenName.objects.get(token=row).name == "nightly export"
    assert works(text)
    with time_machine.travel(start + timedelta(days=30, seconds=1)):
        assert not works(text)


def test_the_list_names_each_token_and_never_shows_it():
    buyer, other = BuyerFactory(), BuyerFactory()
    _, first = token_create(user=buyer, name="laptop", expires_in=timedelta(hours=1))
    _, second = token_create(user=buyer, name="server", expires_in=timedelta(days=7))
    APIClient().post("/api/v1/auth/token/", {"username": buyer.username, "password": PASSWORD}, format="json")
    token_create(user=other, name="theirs", expires_in=timedelta(days=1))
    listed = tokens_of(buyer)
    assert [t.name for t in listed] == ["", "server", "laptop"]  # newest first; the sign-in token has no name
    assert {t.key for t in listed[1:]} == {second[:15], first[:15]}
    for t in listed:
        assert len(t.key) == 15 and t.expiry is not None and t.created is not None
        assert first not in repr(t) and second not in repr(t)


def test_expired_tokens_are_not_listed():
    buyer = BuyerFactory()
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        token_create(user=buyer, name="short", expires_in=timedelta(hours=1))
    with time_machine.travel(start + timedelta(hours=2), tick=False):
        assert tokens_of(buyer) == []


def test_revoking_one_token_leaves_the_others_and_only_its_user_may():
    buyer, other = BuyerFactory(), BuyerFactory()
    _, keep = token_create(user=buyer, name="keep", expires_in=timedelta(days=1))
    row, drop = token_create(user=buyer, name="drop", expires_in=timedelta(days=1))
    with pytest.raises(NoSuchToken):
        token_revoke(user=other, token_key=row.token_key)
    assert works(drop)
    token_revoke(user=buyer, token_key=row.token_key)
    assert not works(drop) and works(keep)
    assert not TokenName.objects.filter(name="drop").exists()  # the name goes with the token
    with pytest.raises(NoSuchToken):
        token_revoke(user=buyer, token_key=row.token_key)


@pytest.mark.parametrize("name, expires_in, field", [
    ("", timedelta(days=1), "name"),
    ("   ", timedelta(days=1), "name"),
    ("x" * 101, timedelta(days=1), "name"),
    ("ok", timedelta(minutes=59), "expires_in"),
    ("ok", timedelta(0), "expires_in"),
    ("ok", -timedelta(days=1), "expires_in"),
    ("ok", "forever", "expires_in"),
])
def test_bad_names_and_expiries_are_refused(name, expires_in, field):
    buyer = BuyerFactory()
    with pytest.raises(TokenRefused) as refused:
        token_create(user=buyer, name=name, expires_in=expires_in)
    assert list(refused.value.errors) == [field]
    assert not AuthToken.objects.filter(user=buyer).exists()


def test_the_longest_expiry_is_the_setting(settings):
    settings.LDP_TOKEN_MAX_HOURS = 48
    buyer = BuyerFactory()
    assert max_expiry() == timedelta(hours=48)
    token_create(user=buyer, name="two days", expires_in=timedelta(hours=48))
    with pytest.raises(TokenRefused):
        token_create(user=buyer, name="too long", expires_in=timedelta(hours=49))


def test_a_new_password_revokes_named_tokens_too():
    buyer = BuyerFactory()
    _, text = token_create(user=buyer, name="ci", expires_in=timedelta(days=1))
    buyer.set_password("Another-horse-battery-7")
    buyer.save()
    assert not works(text) and not TokenName.objects.exists()
