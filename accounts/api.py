"""API tokens (docs/security.md, "Credentials and sign-in"): obtain one, revoke it, revoke them all.

* ``POST /api/v1/auth/token/``: username and password -> a new token and its expiry.  Failed attempts count
  towards the one sign-in lockout policy (``accounts.lockout``); a locked-out sign-in is a 429 problem.
* ``POST /api/v1/auth/logout/``: revoke the token the request is made with.
* ``POST /api/v1/auth/logout-all/``: revoke every token of the account.

Buyer accounts (docs/security.md#buyer-accounts), staff only:

* ``GET /api/v1/staff/buyers/?approved=false``: the buyer accounts (awaiting approval, with ``approved=false``);
* ``POST /api/v1/staff/buyers/<id>/approve/``: approve one (``accounts.services.buyer_approve``; idempotent).
"""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.urls import path
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiResponse, extend_schema
from knox.views import LoginView, LogoutAllView, LogoutView
from rest_framework import exceptions, generics, permissions, serializers
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.parsers import FormParser
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

import ldpmarket.fields  # noqa: F401 (registers the path converter ascii_id)
from ldpmarket.api import AnonThrottle, DecimalJSONParser, Problem
from ldpmarket.openapi import ProblemSerializer, problems
from ldpmarket.problems import NotABuyer, problem_type

from . import roles
from .lockout import PROBLEM_SLUG, PROBLEM_TITLE, is_locked_out, locked_message, seconds_left
from .models import User
from .services import buyer_approve
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


# ----------------------------------------------------------------------------------- buyer accounts (staff)

class IsStaff(permissions.IsAuthenticated):
    message = "Only staff can do this."

    def has_permission(self, request, view):
        return super().has_permission(request, view) and roles.is_staff_role(request.user)


class BuyerAccountSerializer(serializers.ModelSerializer):
    name = serializers.CharField(source="first_name", help_text="The name given at sign-up.")
    approved = serializers.SerializerMethodField(help_text="Whether the account may buy.")
    approved_at = serializers.DateTimeField(source="buyer_approved_at", allow_null=True,
                                            help_text="When the operator approved it (null: awaiting approval).")
    approved_by = serializers.IntegerField(source="buyer_approved_by_id", allow_null=True,
                                           help_text="The user id of who approved it (null: a command or the "
                                                     "deployment, or awaiting).")

    class Meta:
        model = User
        fields = ["id", "username", "name", "organisation", "email", "date_joined", "approved", "approved_at",
                  "approved_by"]

    def get_approved(self, user) -> bool:
        return user.buyer_approved_at is not None


class BuyerFilter(filters.FilterSet):
    approved = filters.ChoiceFilter(choices=[("true", "true"), ("false", "false")], method="filter_approved",
                                    help_text="false: the accounts awaiting approval; true: the approved ones.")

    class Meta:
        model = User
        fields = ["approved"]

    def filter_approved(self, queryset, name, value):
        return queryset.filter(buyer_approved_at__isnull=value != "true")


class BuyerListView(generics.ListAPIView):
    """The buyer accounts, newest first; ``?approved=false`` lists those awaiting approval (staff)."""

    permission_classes = [IsStaff]
    serializer_class = BuyerAccountSerializer
    filterset_class = BuyerFilter

    def get_queryset(self):
        return User.objects.filter(role=User.Role.BUYER).order_by("-id")

    @extend_schema(summary="Buyer accounts, and those awaiting approval (staff)",
                   responses={200: BuyerAccountSerializer(many=True), **problems(400, 401, 403, 429)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class BuyerApproveView(APIView):
    """Approve a buyer account (staff): it may buy from now on, and the buyer is told by e-mail.  Idempotent."""

    permission_classes = [IsStaff]

    @extend_schema(summary="Approve a buyer account (staff)", request=None,
                   responses={200: BuyerAccountSerializer, **problems(401, 403, 404, 429, NotABuyer)})
    def post(self, request, pk):
        user = get_object_or_404(User, pk=pk)
        return Response(BuyerAccountSerializer(buyer_approve(buyer=user, approved_by=request.user)).data)


#: Routes, mounted under /api/v1/ by ``market.api.urls`` (an include by name: no interface imports another).
urlpatterns = [
    path("auth/token/", ObtainTokenView.as_view(), name="token"),
    path("auth/logout/", RevokeTokenView.as_view(), name="token-revoke"),
    path("auth/logout-all/", RevokeAllTokensView.as_view(), name="token-revoke-all"),
    path("staff/buyers/", BuyerListView.as_view(), name="staff-buyers"),
    path("staff/buyers/<ascii_id:pk>/approve/", BuyerApproveView.as_view(), name="staff-buyer-approve"),
]
