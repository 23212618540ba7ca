"""Portal services: the writes the owner portal needs that no other service offers.

Budgets change only through ``accounts.services`` and values only through
``market.values.services``; the portal views call those directly.  What is left is
signing up an owner.
"""
from __future__ import annotations

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from accounts.models import User


def user_signup(*, username: str, password: str, email: str = "") -> User:
    """Create an owner account with a validated password, in one transaction.

    Raises ``ValidationError`` (plain-words messages) if the username is taken
    or the password fails ``AUTH_PASSWORD_VALIDATORS``.
    """
    username = User.normalize_username(username.strip())
    email = User.objects.normalize_email(email.strip()) if email else ""
    candidate = User(username=username, email=email, role=User.Role.OWNER)
    validate_password(password, user=candidate)
    with transaction.atomic():
        if User.objects.filter(username__iexact=username).exists():
            raise ValidationError("That username is already taken; please choose another.", code="username_taken")
        try:
            with transaction.atomic():
                user = User.objects.create_user(username=username, email=email, password=password,
                                                role=User.Role.OWNER)
        except IntegrityError:
            raise ValidationError("That username is already taken; please choose another.",
                                  code="username_taken") from None
    return user
