"""The auditors' read-only JSON view of the privacy ledger (docs/budget-rules.md#the-audit).

``GET /api/v1/audit/ledger/`` (mounted by ``accounts.audit_urls``): ledger
entries in id order with cursor pagination (``?cursor=``, ``?page_size=`` up
to 1000), filtered by ``owner`` and ``buyer`` (id or username), ``attribute``,
``value``, ``purchase``, ``kind`` and ``created_after`` (inclusive) /
``created_before`` (exclusive) as ISO 8601 dates or date-times.  Only auditors,
staff and superusers may read it; it has no write method at all.
"""
from __future__ import annotations

from datetime import datetime, time, timezone as dt_timezone

import django_filters
from django import forms
from django.db.models import F, Q
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import generics, permissions, serializers

from drf_spectacular.utils import extend_schema, extend_schema_view

from ldpmarket.api import CursorPagination
from market.api.views import problems

from .models import LedgerEntry
from .roles import can_audit


class CanAudit(permissions.BasePermission):
    message = "Only auditors and staff may read the ledger."

    def has_permission(self, request, view):
        return can_audit(request.user)


def parse_when(value: str) -> datetime:
    """An ISO 8601 date-time (naive means UTC) or date (midnight UTC)."""
    text = (value or "").strip()
    when = parse_datetime(text)
    if when is None:
        day = parse_date(text)
        if day is None:
            raise ValueError(f"{value!r} is not an ISO 8601 date or date-time")
        when = datetime.combine(day, time.min)
    if timezone.is_naive(when):
        when = timezone.make_aware(when, dt_timezone.utc)
    return when


class WhenField(forms.Field):
    def to_python(self, value):
        if value in (None, ""):
            return None
        try:
            return parse_when(str(value))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class WhenFilter(django_filters.Filter):
    field_class = WhenField


class UserRefFilter(django_filters.CharFilter):
    """A user given by numeric id or by username."""

    def __init__(self, *args, path: str, **kwargs):
        self.path = path
        super().__init__(*args, **kwargs)

    def filter(self, qs, value):
        if value in (None, ""):
            return qs
        value = value.strip()
        if value.isdigit():
            return qs.filter(Q(**{f"{self.path}_id": int(value)}))
        return qs.filter(**{f"{self.path}__username": value})


class LedgerEntryFilter(django_filters.FilterSet):
    owner = UserRefFilter(path="value__owner", help_text="owner id or username")
    buyer = UserRefFilter(path="purchase__buyer", help_text="buyer id or username")
    attribute = django_filters.NumberFilter(field_name="value__attribute_id", help_text="attribute id")
    value = django_filters.NumberFilter(field_name="value_id", help_text="value id")
    purchase = django_filters.NumberFilter(field_name="purchase_id", help_text="purchase id")
    kind = django_filters.ChoiceFilter(choices=LedgerEntry.Kind.choices)
    guarantee = django_filters.ChoiceFilter(choices=[c for c in LedgerEntry.Guarantee.choices if c[0]],
                                            help_text="releases with this guarantee")
    created_after = WhenFilter(field_name="created_at", lookup_expr="gte",
                               help_text="ISO 8601 date or date-time, inclusive")
    created_before = WhenFilter(field_name="created_at", lookup_expr="lt",
                                help_text="ISO 8601 date or date-time, exclusive")

    class Meta:
        model = LedgerEntry
        fields = ["owner", "buyer", "attribute", "value", "purchase", "kind", "guarantee", "created_after",
                  "created_before"]


def ledger_filterset(data, queryset=None) -> LedgerEntryFilter:
    return LedgerEntryFilter(data=data, queryset=queryset if queryset is not None else LedgerEntry.objects.all())


class LedgerEntrySerializer(serializers.ModelSerializer):
    block_hash = serializers.CharField(read_only=True)
    attribute = serializers.IntegerField(source="attribute_id", read_only=True)
    owner = serializers.IntegerField(source="owner_id", read_only=True)
    buyer = serializers.IntegerField(source="buyer_id", read_only=True, allow_null=True)
    mechanism = serializers.CharField(source="purchase_mechanism", read_only=True, allow_null=True,
                                      help_text="The purchase's mechanism (releases only): gradual_rr for chains; "
                                                "urr, urap, rr3, lpp, private_sample; or a survey's.")
    guarantee_label = serializers.SerializerMethodField(
        help_text="What the epsilon guarantees: epsilon-LDP, epsilon-ULDP, or (improved Christofides) per-report "
                  "eps under a non-collusion assumption; empty for budget events and chain releases.")

    class Meta:
        model = LedgerEntry
        fields = ["id", "block", "block_hash", "created_at", "kind", "value", "attribute", "owner", "purchase", "buyer",
                  "mechanism", "epsilon", "guarantee", "guarantee_label", "chain_loss_before", "chain_loss_after",
                  "oneshot_loss_before", "oneshot_loss_after", "ceiling", "schedule_start", "schedule_cap",
                  "schedule_start_at", "schedule_end_at", "schedule_shape", "schedule_steps"]
        read_only_fields = fields

    def get_guarantee_label(self, obj) -> str:
        return LedgerEntry.Guarantee(obj.guarantee).label if obj.guarantee else ""


class LedgerPagination(CursorPagination):
    """Opaque cursors over ``id`` (oldest first: the ledger's own order)."""

    ordering = "id"
    page_size = 100
    max_page_size = 1000


@extend_schema_view(get=extend_schema(responses={200: LedgerEntrySerializer(many=True), **problems(400, 401, 403, 429)}))
class LedgerEntryList(generics.ListAPIView):
    """The privacy ledger, read-only, for auditors and staff: filter by owner, buyer, attribute and time."""

    serializer_class = LedgerEntrySerializer
    permission_classes = [permissions.IsAuthenticated, CanAudit]
    pagination_class = LedgerPagination
    filterset_class = LedgerEntryFilter
    filter_backends = [DjangoFilterBackend]
    # Joined columns as annotations: the value rows (with their sealed data) are never loaded.
    queryset = LedgerEntry.objects.annotate(
        block_hash=F("block__hash"), attribute_id=F("value__attribute_id"), owner_id=F("value__owner_id"),
        buyer_id=F("purchase__buyer_id"), purchase_mechanism=F("purchase__mechanism")).order_by("id")
