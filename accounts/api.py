"""API tokens (docs/security.md, "Credentials and sign-in"): obtain one, revoke it, revoke them all.

* ``POST /api/v1/auth/token/``: username and password -> a new token and its expiry.  Failed attempts count
  towards the one sign-in lockout policy (``accounts.lockout``); a locked-out sign-in is a 429 problem.
* ``POST /api/v1/auth/logout/``: revoke the token the request is made with.
* ``POST /api/v1/auth/logout-all/``: revoke every token of the account.
"""
from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import OpenApiResponse, extend_schema
from knox.views import LoginView, LogoutAllView, LogoutView
from rest_framework import exceptions, serializers
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.parsers import FormParser
from rest_framework.permissions import AllowAny

from ldpmarket.api import AnonThrottle, DecimalJSONParser, Problem
from ldpmarket.openapi import ProblemSerializer
from ldpmarket.problems import problem_type

from .lockout import PROBLEM_SLUG, PROBLEM_TITLE, is_locked_out, locked_message, seconds_left
from .tokens import TokenAuthentication

PROBLEM = "application/problem+json"


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="Send as the header Authorization: Token <token>. Shown once: the "
                                            "service keeps only a digest of it.")
    expiry = serializers.DateTimeField(help_text="When the token stops working (get a new one then).")


class SignInLocked(Problem):
    """Too many failed sign-ins for this account from this address, or from this address (docs/security.md)."""

    status = 429
    slug = PROBLEM_SLUG
    title = PROBLEM_TITLE

    def __init__(self, detail=None, *, retry_after: int | None = None):
        super().__init__(detail or locked_message())
        self.retry_after = retry_after

    @classmethod
    def now(cls, request, credentials=None) -> "SignInLocked":
        """The lockout of this request, with the seconds until it ends as ``Retry-After``."""
        return cls(retry_after=max(1, round(seconds_left(request, credentials))))


class ObtainTokenView(LoginView):
    """Exchange a username and password for a new API token (send it as ``Authorization: Token <token>``)."""

    authentication_classes = ()
    permission_classes = (AllowAny,)
    parser_classes = (DecimalJSONParser, FormParser)
    throttle_classes = (AnonThrottle,)

    @extend_schema(
        summary="Get an API token", request=AuthTokenSerializer, auth=[],
        responses={200: TokenSerializer,
                   (400, PROBLEM): OpenApiResponse(ProblemSerializer, description="Wrong username or password."),
                   (429, PROBLEM): OpenApiResponse(ProblemSerializer, description=(
                       "Too many attempts: too many failed sign-ins or requests from this address; Retry-After "
                       f"says when to try again. Problem types: `{problem_type(PROBLEM_SLUG)}` ({PROBLEM_TITLE})."))})
    def post(self, request, format=None):
        serializer = AuthTokenSerializer(data=request.data, context={"request": request})
        if not serializer.is_valid():
            if is_locked_out(request):
                raise SignInLocked.now(request)
            raise exceptions.ValidationError(serializer.errors)
        request.user = serializer.validated_data["user"]
        return super().post(request, format=format)


class RevokeTokenView(LogoutView):
    """Revoke the token this request is made with; the account's other tokens keep working."""

    authentication_classes = (TokenAuthentication,)

    @extend_schema(summary="Revoke this API token", request=None,
                   responses={204: OpenApiResponse(description="Revoked: the token no longer works."),
                              (401, PROBLEM): OpenApiResponse(ProblemSerializer, description="No valid token.")})
    def post(self, request, format=None):
        return super().post(request, format=format)


class RevokeAllTokensView(LogoutAllView):
    """Revoke every API token of the account (for example after a token may have leaked)."""

    authentication_classes = (TokenAuthentication,)

    @extend_schema(summary="Revoke every API token of the account", request=None,
                   responses={204: OpenApiResponse(description="Revoked: none of the account's tokens works."),
                              (401, PROBLEM): OpenApiResponse(ProblemSerializer, description="No valid token.")})
    def post(self, request, format=None):
        return super().post(request, format=format)


#: Routes, mounted under /api/v1/ by ``market.api.urls`` (an include by name: no interface imports another).
urlpatterns = [
    path("auth/token/", ObtainTokenView.as_view(), name="token"),
    path("auth/logout/", RevokeTokenView.as_view(), name="token-revoke"),
    path("auth/logout-all/", RevokeAllTokensView.as_view(), name="token-revoke-all"),
]
