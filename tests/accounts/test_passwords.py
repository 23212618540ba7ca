"""Passwords made only of whitespace are refused wherever a password is chosen (docs/security.md)."""
from __future__ import annotations

from io import StringIO
from unittest import mock

import pytest
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management import call_command

from accounts.models import User
from tests.factories import PASSWORD, StaffFactory

pytestmark = pytest.mark.django_db

BLANKS = [" " * 12, "\t" * 10 + "  ", "\u00a0" * 9 + "\u2003" * 3, " \n \r\n      "]


@pytest.mark.parametrize("password", BLANKS)
def test_the_validators_refuse_a_whitespace_only_password(password):
    with pytest.raises(ValidationError) as caught:
        validate_password(password, user=User(username="walter"))
    assert any("only of spaces" in m for m in caught.value.messages), caught.value.messages


def test_a_password_with_spaces_inside_is_still_fine():
    validate_password("  a long unusual passphrase  ", user=User(username="walter"))


def test_portal_sign_up_refuses_it(client):
    blank = " " * 14
    response = client.post("/portal/signup/", {"username": "walter", "password1": blank, "password2": blank})
    assert response.status_code == 200
    assert "only of spaces" in " ".join(response.context["form"].errors["password1"])
    assert not User.objects.filter(username="walter").exists()


def test_the_admin_user_forms_refuse_it(client):
    staff = StaffFactory(is_superuser=True)
    client.force_login(staff)
    blank = " " * 14
    response = client.post("/admin/accounts/user/add/", {
        "username": "walter", "password1": blank, "password2": blank, "usable_password": "true",
        "role": "owner"})
    assert response.status_code == 200, response.status_code
    assert "only of spaces" in response.content.decode()
    assert not User.objects.filter(username="walter").exists()
    # changing a password in the admin too
    response = client.post(f"/admin/accounts/user/{staff.pk}/password/", {"password1": blank, "password2": blank})
    assert "only of spaces" in response.content.decode()
    staff.refresh_from_db()
    assert staff.check_password(PASSWORD)


def test_createsuperuser_refuses_it():
    blank = " " * 14
    answers = iter([blank, blank, "a long unusual passphrase", "a long unusual passphrase"])
    err = StringIO()
    with mock.patch("django.contrib.auth.management.commands.createsuperuser.getpass.getpass",
                    lambda prompt="": next(answers)), \
            mock.patch("builtins.input", lambda prompt="": "n"):
        call_command("createsuperuser", interactive=True, username="root", email="root@example.org",
                     stdout=StringIO(), stderr=err, stdin=mock.Mock(isatty=lambda: True))
    # Django's own check refuses it before the validators run; either way the blank password is not taken
    assert "Blank passwords aren't allowed" in err.getvalue() or "only of spaces" in err.getvalue()
    assert User.objects.get(username="root").check_password("a long unusual passphrase")
