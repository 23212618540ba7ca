"""API token authentication (django-rest-knox; docs/security.md, "Credentials and sign-in"), and named tokens.

The database keeps a SHA-512 digest of each token (and its first 15 characters, to find the row), never the
token; each token has an expiry (``LDP_TOKEN_TTL_HOURS``) and can be revoked.  Clients send it as
``Authorization: Token <token>``.

Named tokens (the buyer's token page): :func:`token_create` makes one with a name and an expiry the user chooses
(1 hour to ``LDP_TOKEN_MAX_HOURS``), :func:`tokens_of` lists a user's tokens (name, created, expiry and the first
characters, never the token) and :func:`token_revoke` revokes one of them.  The name is a side table of knox's
token (``accounts.models.TokenName``), deleted with it.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.models import AuthToken
from rest_framework import exceptions
from rest_framework.authentication import get_authorization_header

from ldpmarket.problems import NoSuchToken, TokenRefused

from .models import TokenName, User

#: What a client sending another scheme (``Authorization: Bearer ...``, as many HTTP libraries do) is told.
WRONG_SCHEME = ("The Authorization header uses the {scheme!r} scheme; this API expects "
                "'Authorization: Token <key>' with the token from POST /api/v1/auth/token/ "
                "(docs/security.md, \"Credentials and sign-in\").")


class TokenAuthentication(KnoxTokenAuthentication):
    """knox's authentication, with a header that is not UTF-8 refused as an invalid token (401, not a 500)."""

    def authenticate(self, request):
        """knox's, but ``Bearer <key>`` (the usual OAuth scheme) is a 401 that names the right scheme, not an
        anonymous request answered "credentials were not provided"."""
        auth = get_authorization_header(request).split()
        if auth and auth[0].lower() == b"bearer":
            raise exceptions.AuthenticationFailed(WRONG_SCHEME.format(scheme="Bearer"))
        return super().authenticate(request)

    def authenticate_credentials(self, token: bytes):
        try:
            token.decode("utf-8")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        return super().authenticate_credentials(token)


class TokenScheme(OpenApiAuthenticationExtension):
    """The OpenAPI security scheme of :class:`TokenAuthentication` (``Authorization: Token <token>``)."""

    target_class = "accounts.tokens.TokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(header_name="Authorization",
                                                   token_prefix=self.target.authenticate_header(None))


# ------------------------------------------------------------------------------------------ named tokens

#: The shortest expiry a named token may have.
MIN_EXPIRY = timedelta(hours=1)
#: Longest name (the column's size).
NAME_MAX = 100


def max_expiry() -> timedelta:
    """The longest expiry a named token may have: ``LDP_TOKEN_MAX_HOURS`` (docs/security.md)."""
    return timedelta(hours=settings.LDP_TOKEN_MAX_HOURS)


@dataclass(frozen=True)
class TokenInfo:
    """One API token as its owner sees it: never the token, only its first characters (``key``, which
    :func:`token_revoke` takes)."""

    key: str
    name: str
    created: datetime
    expiry: datetime | None


def token_create(*, user: User, name: str, expires_in: timedelta) -> tuple[AuthToken, str]:
    """A new API token of ``user`` named ``name`` that stops working after ``expires_in`` (1 hour to
    :func:`max_expiry`): the token row and the token, whose text is shown once (only its digest is kept).  A name
    that is empty or too long, or an expiry out of range, is a ``TokenRefused`` naming the field."""
    name = " ".join((name or "").split())
    if not name:
        raise TokenRefused("Name the token (for example the program or machine that uses it).", field="name")
    if len(name) > NAME_MAX:
        raise TokenRefused(f"A token's name has at most {NAME_MAX} characters.", field="name")
    if not isinstance(expires_in, timedelta) or not MIN_EXPIRY <= expires_in <= max_expiry():
        raise TokenRefused(f"A token expires after 1 hour at the earliest and {settings.LDP_TOKEN_MAX_HOURS} hours "
                           f"at the latest.", field="expires_in")
    with transaction.atomic():
        row, text = AuthToken.objects.create(user=user, expiry=expires_in)
        TokenName.objects.create(token=row, name=name)
    return row, text


def tokens_of(user: User) -> list[TokenInfo]:
    """``user``'s API tokens that have not expired, newest first (unnamed ones, from ``POST /api/v1/auth/token/``,
    with an empty name)."""
    rows = (AuthToken.objects.filter(user=user).exclude(expiry__lte=timezone.now())
            .select_related("token_name").order_by("-created"))
    return [TokenInfo(key=row.token_key, name=_name(row), created=row.created, expiry=row.expiry) for row in rows]


def _name(row: AuthToken) -> str:
    try:
        return row.token_name.name
    except TokenName.DoesNotExist:
        return ""


def token_revoke(*, user: User, token_key: str) -> None:
    """Revoke ``user``'s token whose first characters are ``token_key`` (:attr:`TokenInfo.key`); another user's, or
    one already revoked, is ``NoSuchToken``."""
    with transaction.atomic():
        deleted, _ = AuthToken.objects.filter(user=user, token_key=str(token_key or "")).delete()
    if not deleted:
        raise NoSuchToken("You have no API token starting with these characters (revoked already?).")
