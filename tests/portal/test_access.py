"""Who may use the owner portal: sign-up, sign-in (with the sign-in lockout), sign-out, CSRF, roles, and owner
isolation."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from accounts.models import LedgerEntry, User
from tests.factories import BuyerFactory, OwnerFactory

pytestmark = pytest.mark.django_db


def value_urls(value_id: int) -> list[str]:
    return [f"/portal/values/{value_id}/", f"/portal/values/{value_id}/ceiling/",
            f"/portal/values/{value_id}/schedule/", f"/portal/values/{value_id}/pause/",
            f"/portal/values/{value_id}/resume/", f"/portal/values/{value_id}/delete-raw/"]


OWNER_PAGES = ["/portal/", "/portal/contribute/", "/portal/releases/", "/portal/export/"]


# ------------------------------------------------------------------------------------------------- sign-up

def test_signing_up_creates_an_owner_and_signs_them_in(client):
    response = client.post("/portal/signup/", {"username": "dora", "email": "dora@example.org",
                                               "password1": "a long unusual passphrase", "password2":
                                                   "a long unusual passphrase"})
    assert response.status_code == 302 and response["Location"] == "/portal/"
    user = User.objects.get(username="dora")
    assert user.role == User.Role.OWNER and user.check_password("a long unusual passphrase")
    assert not user.is_staff
    page = client.get("/portal/")
    assert page.status_code == 200 and b"Welcome, dora" in page.content


@pytest.mark.parametrize("body, field, words", [
    ({"username": "erin", "password1": "short", "password2": "short"}, "password1", "too short"),
    ({"username": "erin", "password1": "password123", "password2": "password123"}, "password1", "too common"),
    ({"username": "erin", "password1": "83749302018473", "password2": "83749302018473"}, "password1",
     "entirely numeric"),
    ({"username": "erinsmith", "password1": "erinsmith1", "password2": "erinsmith1"}, "password1",
     "too similar"),
    ({"username": "erin", "password1": "a long unusual passphrase", "password2": "a long unusual passphrasE"},
     "password2", "not the same"),
    ({"username": "bad name!", "password1": "a long unusual passphrase", "password2": "a long unusual passphrase"},
     "username", "valid username"),
    ({"username": "", "password1": "", "password2": ""}, "username", "choose a username"),
    ({"username": "erin", "email": "not-an-address", "password1": "a long unusual passphrase",
      "password2": "a long unusual passphrase"}, "email", "does not look like an e-mail"),
])
def test_sign_up_errors_are_explained(client, body, field, words):
    response = client.post("/portal/signup/", body)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors and words in " ".join(errors[field]), errors
    assert words in response.content.decode()
    assert not User.objects.filter(username=body["username"]).exists()


def test_a_username_is_taken_whatever_its_case(client, owner):
    response = client.post("/portal/signup/", {"username": owner.username.upper(), "password1":
                                               "a long unusual passphrase", "password2": "a long unusual passphrase"})
    assert "already taken" in " ".join(response.context["form"].errors["username"])


def test_the_signup_service_validates_the_password():
    from django.core.exceptions import ValidationError

    from portal.services import user_signup

    with pytest.raises(ValidationError):
        user_signup(username="frank", password="frank")
    user = user_signup(username="frank", password="a long unusual passphrase", email="Frank@EXAMPLE.org")
    assert user.role == User.Role.OWNER and user.email == "Frank@example.org"
    with pytest.raises(ValidationError, match="already taken"):
        user_signup(username="FRANK", password="another long passphrase")


# ------------------------------------------------------------------------------------------------- sign-in

def test_an_owner_signs_in_and_out(client, owner, password):
    response = client.post("/portal/login/", {"username": owner.username, "password": password})
    assert response.status_code == 302 and response["Location"] == "/portal/"
    assert client.get("/portal/").status_code == 200
    assert client.get("/portal/logout/").status_code == 405, "signing out needs a POST"
    response = client.post("/portal/logout/")
    assert response.status_code == 302 and response["Location"] == "/portal/login/"
    assert client.get("/portal/").status_code == 302


def test_sign_in_follows_next(client, owner, password):
    response = client.post("/portal/login/?next=/portal/releases/",
                           {"username": owner.username, "password": password, "next": "/portal/releases/"})
    assert response["Location"] == "/portal/releases/"


def test_a_wrong_password_is_explained(client, owner):
    response = client.post("/portal/login/", {"username": owner.username, "password": "wrong"})
    assert response.status_code == 200
    assert "do not match an account" in response.content.decode()


def test_sign_in_is_locked_out_after_five_failures(client, owner, password, settings):
    limit = settings.LDP_SIGNIN_FAILURES_PER_ACCOUNT
    for _ in range(limit - 1):
        response = client.post("/portal/login/", {"username": owner.username, "password": "wrong"})
        assert "do not match" in response.content.decode()
    response = client.post("/portal/login/", {"username": owner.username, "password": "wrong"})
    assert response.status_code == 429, "the failure that reaches the limit starts the lockout"
    response = client.post("/portal/login/", {"username": owner.username.upper(), "password": password})
    assert response.status_code == 429, "even the right password is refused while locked out"
    assert "Too many failed sign-ins" in response.content.decode() and response["Retry-After"]
    assert "_auth_user_id" not in client.session
    # Another address is not locked out for this username, and a success there forgives nothing here.
    elsewhere = Client(REMOTE_ADDR="10.9.8.7")
    assert elsewhere.post("/portal/login/", {"username": owner.username, "password": password}).status_code == 302
    assert client.post("/portal/login/", {"username": owner.username, "password": password}).status_code == 429


def test_a_successful_sign_in_resets_the_failure_count(client, owner, password, settings):
    limit = settings.LDP_SIGNIN_FAILURES_PER_ACCOUNT
    for _ in range(limit - 1):
        client.post("/portal/login/", {"username": owner.username, "password": "wrong"})
    assert client.post("/portal/login/", {"username": owner.username, "password": password}).status_code == 302
    client.post("/portal/logout/")
    for _ in range(limit - 1):
        client.post("/portal/login/", {"username": owner.username, "password": "wrong"})
    assert client.post("/portal/login/", {"username": owner.username, "password": password}).status_code == 302


@pytest.mark.parametrize("role", ["buyer", "auditor", "staff"])
def test_non_owners_cannot_sign_in_to_the_portal(client, role, password, request):
    user = request.getfixturevalue(role)
    response = client.post("/portal/login/", {"username": user.username, "password": password})
    assert response.status_code == 200
    assert "This portal is for data owners" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_forms_are_csrf_protected(owner, password, value):
    strict = Client(enforce_csrf_checks=True)
    assert strict.post("/portal/login/", {"username": owner.username, "password": password}).status_code == 403
    assert strict.post("/portal/signup/", {"username": "x"}).status_code == 403
    strict.force_login(owner)
    for url in [f"/portal/values/{value.id}/pause/", f"/portal/values/{value.id}/ceiling/", "/portal/logout/"]:
        assert strict.post(url, {"ceiling": "5"}).status_code == 403, url
    assert not LedgerEntry.objects.filter(kind=LedgerEntry.Kind.PAUSE).exists()
    page = strict.get("/portal/login/")
    assert b"csrfmiddlewaretoken" in page.content


# ------------------------------------------------------------------------------------------------- roles

def test_anonymous_visitors_are_sent_to_sign_in(client, value):
    for url in OWNER_PAGES + value_urls(value.id):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/portal/login/?next="), url


@pytest.mark.parametrize("role", ["buyer", "auditor", "staff"])
def test_buyers_auditors_and_staff_cannot_use_the_owner_pages(client, role, value, attribute, request):
    user = request.getfixturevalue(role)
    client.force_login(user)
    for url in OWNER_PAGES + value_urls(value.id) + [f"/portal/contribute/{attribute.id}/"]:
        response = client.get(url)
        assert response.status_code == 403, (url, response.status_code)
        assert b"This portal is for data owners" in response.content
        response = client.post(url, {"ceiling": "5"})
        assert response.status_code == 403, (url, response.status_code)
    assert LedgerEntry.objects.filter(value=value).count() == 1


def test_owners_never_reach_another_owners_value(owner_client, value, other_value):
    """Every value URL with another owner's value id is a 404 (GET and POST), and nothing changes."""
    before = list(LedgerEntry.objects.filter(value=other_value).values_list("id", flat=True))
    for url in value_urls(other_value.id):
        get = owner_client.get(url)
        assert get.status_code == 404, (url, get.status_code)
        post = owner_client.post(url, {"ceiling": "0.1", "start": "0", "cap": "1", "duration": "1", "unit": "days",
                                       "shape": "linear", "action": "save"})
        assert post.status_code == 404, (url, post.status_code)
        assert b"blue" not in get.content + post.content
    assert list(LedgerEntry.objects.filter(value=other_value).values_list("id", flat=True)) == before
    other_value.refresh_from_db()
    assert other_value.raw_sealed is not None
    for url in value_urls(999_999):
        assert owner_client.get(url).status_code == 404 and owner_client.post(url).status_code == 404


def test_the_portal_shows_only_the_owners_own_values(owner_client, value, other_value, other_owner):
    for url in ["/portal/", "/portal/releases/", "/portal/export/", "/portal/contribute/"]:
        body = owner_client.get(url).content.decode()
        assert other_owner.username not in body and other_owner.email not in body, url
        assert f"/portal/values/{other_value.id}/" not in body, url
    exported = json.loads(owner_client.get("/portal/export/").content)
    assert [v["id"] for v in exported["values"]] == [value.id]
    assert [v["raw_value"] for v in exported["values"]] == ["green"]


def test_a_second_owner_sees_only_their_own_dashboard(client, value, password):
    other = OwnerFactory()
    client.force_login(other)
    body = client.get("/portal/").content.decode()
    assert "You have not contributed any values yet" in body
    assert "green" not in body


def test_buyers_appear_only_as_their_organisation(owner_client, value, attribute):
    from tests.portal.conftest import fund, purchase

    buyer = BuyerFactory(username="hidden-username", email="hidden@example.org", organisation="")
    fund(buyer, "10")
    purchase(buyer, attribute, "0.3")
    for url in ["/portal/", "/portal/releases/", f"/portal/values/{value.id}/", "/portal/export/"]:
        body = owner_client.get(url).content.decode()
        assert "hidden-username" not in body and "hidden@example.org" not in body, url
        assert "Organisation not given" in body, url
