"""API token authentication (django-rest-knox; docs/security.md, "Credentials and sign-in").

The database keeps a SHA-512 digest of each token (and its first 15 characters, to find the row), never the
token; each token has an expiry (``LDP_TOKEN_TTL_HOURS``) and can be revoked.  Clients send it as
``Authorization: Token <token>``.
"""
from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from rest_framework import exceptions
from rest_framework.authentication import get_authorization_header

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
