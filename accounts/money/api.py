"""The money API (docs/money.md): your account and statement, the platform's fee statement, staff top-ups.

Amounts are decimal strings with exactly four places, never rounded (``accounts.money.format.MoneyField``,
docs/money.md#how-amounts-are-shown); every payload names its ``currency`` (setting ``LDP_CURRENCY``).
"""
from __future__ import annotations

from decimal import Decimal

from django.db.models import Q
from django.urls import path
from django_filters import rest_framework as filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, permissions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import roles
from accounts.models import MoneyAccount, MoneyEntry, User
from accounts.money import selectors
from accounts.money import services as money
from accounts.money.format import MoneyField
from ldpmarket.api import IdempotencyKeyInvalid, IdempotencyKeyRequired, Problem, idempotency_key
from ldpmarket.fields import WhenFilter
from ldpmarket.numbers import as_id
from ldpmarket.openapi import problems as _problems


class NoMoneyAccount(Problem):
    status = 404
    slug = "no-money-account"
    title = "No money account"


class MoneyAccountSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["buyer_credit", "owner_earnings"])
    currency = serializers.CharField(help_text="ISO 4217 code (setting LDP_CURRENCY).")
    balance = MoneyField()
    pending = MoneyField(
        help_text="Owners: earned and being settled into the balance (docs/money.md#settlement); 0.0000 for buyers.")


class MoneyEntrySerializer(serializers.ModelSerializer):
    amount = MoneyField(help_text="Signed: negative when money left the account.")
    balance_after = MoneyField()
    currency = serializers.SerializerMethodField()

    class Meta:
        model = MoneyEntry
        fields = ["id", "created_at", "amount", "balance_after", "currency", "kind", "memo", "purchase"]

    def get_currency(self, entry) -> str:
        return money.currency()


class StatementFilter(filters.FilterSet):
    # ISO 8601 (ASCII), compared in UTC: any offset Python reads (up to +-23:59) is converted first, so the
    # database never sees one it refuses (PostgreSQL stops at +-15:59); one that leaves the years 1-9999 is a 400
    since = WhenFilter(field_name="created_at", lookup_expr="gte",
                       help_text="Only movements at or after this time (ISO 8601).")
    until = WhenFilter(field_name="created_at", lookup_expr="lt",
                       help_text="Only movements before this time (ISO 8601).")

    class Meta:
        model = MoneyEntry
        fields = ["since", "until"]


class HasAccount(permissions.IsAuthenticated):
    """Buyers (credit) and owners (earnings); staff and auditors have no account of their own: 404."""

    def has_permission(self, request, view):
        if not super().has_permission(request, view):
            return False
        if selectors.account_kind(request.user) is None:
            raise NoMoneyAccount("Only buyers and owners have a money account; staff read the platform's fee "
                                 "statement at /api/v1/staff/fees/.")
        return True


class AccountView(APIView):
    permission_classes = [HasAccount]

    @extend_schema(summary="Your money account: balance and currency",
                   responses={200: MoneyAccountSerializer, **_problems(401, 429, NoMoneyAccount)})
    def get(self, request):
        kind = selectors.account_kind(request.user)
        pending = (selectors.unsettled_earnings(request.user) if kind == MoneyAccount.Kind.OWNER_EARNINGS
                   else Decimal("0"))
        return Response(MoneyAccountSerializer({"kind": kind, "currency": money.currency(),
                                                "balance": selectors.balance(request.user, kind),
                                                "pending": pending}).data)


class StatementView(generics.ListAPIView):
    """Every movement of your account, newest first (cursor pagination)."""

    permission_classes = [HasAccount]
    serializer_class = MoneyEntrySerializer
    filterset_class = StatementFilter

    def get_queryset(self):
        user = self.request.user
        kind = selectors.account_kind(user)
        if kind is None:  # the schema generator, without a user
            return MoneyEntry.objects.none()
        return selectors.statement(user, kind)

    @extend_schema(summary="Your account's statement", responses={200: MoneyEntrySerializer(many=True),
                                                                  **_problems(400, 401, 429, NoMoneyAccount)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class IsStaff(permissions.IsAuthenticated):
    message = "Only staff can do this."

    def has_permission(self, request, view):
        return super().has_permission(request, view) and roles.is_staff_role(request.user)


class CanAudit(permissions.IsAuthenticated):
    message = "Only staff and auditors can read the platform's fees."

    def has_permission(self, request, view):
        return super().has_permission(request, view) and roles.can_audit(request.user)


class FeeStatementView(StatementView):
    """The platform's fee account, newest first: every fee it was credited (staff and auditors)."""

    permission_classes = [CanAudit]

    def get_queryset(self):
        return selectors.platform_statement()

    @extend_schema(summary="The platform's fee statement",
                   responses={200: MoneyEntrySerializer(many=True), **_problems(400, 401, 403, 429)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class TopUpRequestSerializer(serializers.Serializer):
    buyer = serializers.CharField(help_text="The buyer's user id or username.")
    amount = serializers.CharField(help_text='A positive amount with at most two decimals, e.g. "100.00".')
    reason = serializers.CharField(max_length=200)

    def validate_buyer(self, raw):
        by_id = as_id(raw)  # ASCII digits in range: not "١٠" nor "²" (isdigit() says yes to both)
        query = Q(username=raw) | (Q(id=by_id) if by_id is not None else Q())
        found = list(User.objects.filter(query)[:2])
        if len(found) != 1:
            raise serializers.ValidationError(f"No single user is {raw!r}.")
        return found[0]

    def validate_amount(self, raw):
        try:
            return money.parse_amount(raw)
        except money.MoneyError as e:
            raise serializers.ValidationError(str(e)) from None


class TopUpSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    buyer = serializers.IntegerField(source="buyer_id")
    amount = MoneyField()
    balance_after = MoneyField(source="entry.balance_after")
    reason = serializers.CharField()
    created_at = serializers.DateTimeField()
    currency = serializers.SerializerMethodField()

    def get_currency(self, t) -> str:
        return money.currency()


class TopUpView(APIView):
    permission_classes = [IsStaff]

    @extend_schema(
        summary="Top up a buyer's credit (staff)",
        request=TopUpRequestSerializer,
        parameters=[OpenApiParameter(
            "Idempotency-Key", OpenApiTypes.STR, OpenApiParameter.HEADER, required=True,
            description="A unique key per intended top-up: a retry with the same key credits once.")],
        responses={200: OpenApiResponse(TopUpSerializer, description="A replay: the top-up made with this key."),
                   201: TopUpSerializer,
                   **_problems(400, 401, 403, 429, IdempotencyKeyRequired, IdempotencyKeyInvalid, money.NotABuyer,
                               money.TopUpConflict, d409="This Idempotency-Key was used for another top-up.")})
    def post(self, request):
        key = idempotency_key(request, what="top-up")
        body = TopUpRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        topup = money.money_topup(buyer=body.validated_data["buyer"], amount=body.validated_data["amount"],
                                  reason=body.validated_data["reason"], by=request.user, idempotency_key=key)
        return Response(TopUpSerializer(topup).data, status=200 if getattr(topup, "replayed", False) else 201)


#: Routes, mounted under /api/v1/ by ``market.api.urls`` (an include by name: no interface imports another).
urlpatterns = [
    path("account/", AccountView.as_view(), name="account"),
    path("account/statement/", StatementView.as_view(), name="account-statement"),
    path("staff/topups/", TopUpView.as_view(), name="staff-topups"),
    path("staff/fees/", FeeStatementView.as_view(), name="staff-fees"),
]
