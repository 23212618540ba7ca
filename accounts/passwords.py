"""Password rules beyond Django's own (``AUTH_PASSWORD_VALIDATORS``; docs/security.md).

The validators run wherever a password is chosen: the portal's sign-up, the admin's user forms,
``createsuperuser`` and ``changepassword``.
"""
from __future__ import annotations

from django.core.exceptions import ValidationError


class NotOnlyWhitespaceValidator:
    """Refuse a password made only of spaces, tabs, line breaks or other blank characters.

    Django's length check counts them, so ``"            "`` would otherwise pass every other validator.
    """

    message = ("This password is made only of spaces (or other blank characters). Choose one with letters, "
               "digits or symbols.")

    def validate(self, password, user=None):
        if password is not None and not password.strip():
            raise ValidationError(self.message, code="password_only_whitespace")

    def get_help_text(self):
        return "Your password cannot be made only of spaces."
