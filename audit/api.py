"""The auditors' read-only JSON view of the privacy ledger (docs/budget-rules.md#the-audit).

``GET /api/v1/audit/ledger/`` (mounted from ``audit.api.urlpatterns``): ledger
entries in id order with cursor pagination (``?cursor=``, ``?page_size=`` up
to 1000), filtered by ``owner`` and ``buyer`` (id or username), ``attribute``,
``value``, ``purchase``, ``kind`` and ``created_after`` (inclusive) /
``created_before`` (exclusive) as ISO 8601 dates or date-times (``audit.filters``).  Only auditors,
staff and superusers may read it; it has no write method at all.
"""
from __future__ import annotations

import base64

from django.db.models import F
from django.urls import path
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import exceptions, generics, permissions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.ledger.entries import MAX_PAGE, block_entries
from accounts.ledger.receipts_http import ReceiptsQuery, ReceiptsSerializer, receipts_response
from accounts.models import LedgerEntry
from accounts.roles import can_audit
from ldpmarket.api import CursorPagination
from ldpmarket.fields import StrictIntegerField
from ldpmarket.openapi import problems
from ldpmarket.problems import NoSuchCheckpoint
from mechanisms import registry

from .filters import LedgerEntryFilter


class CanAudit(permissions.BasePermission):
    message = "Only auditors and staff may read the ledger."

    def has_permission(self, request, view):
        return can_audit(request.user)


class LedgerEntrySerializer(serializers.ModelSerializer):
    block_hash = serializers.CharField(read_only=True)
    attribute = serializers.IntegerField(source="attribute_id", read_only=True)
    owner = serializers.IntegerField(source="owner_id", read_only=True)
    buyer = serializers.IntegerField(source="buyer_id", read_only=True, allow_null=True)
    mechanism = serializers.CharField(source="purchase_mechanism", read_only=True, allow_null=True,
                                      help_text="The purchase's mechanism (releases only): gradual_rr for chains; "
                                                f"{', '.join(registry.ONESHOT_CODES)}; or a survey's.")
    guarantee_label = serializers.SerializerMethodField(
        help_text="What the epsilon guarantees: epsilon-LDP, epsilon-ULDP, or (improved Christofides) per-report "
                  "eps under a non-collusion assumption; empty for budget events and chain releases.")

    class Meta:
        model = LedgerEntry
        fields = ["id", "block", "block_hash", "created_at", "kind", "value", "attribute", "owner", "purchase", "buyer",
                  "mechanism", "epsilon", "guarantee", "guarantee_label", "chain_loss_before", "chain_loss_after",
                  "oneshot_loss_before", "oneshot_loss_after", "ceiling", "earning", "schedule_start",
                  "schedule_cap", "schedule_start_at", "schedule_end_at", "schedule_shape", "schedule_steps"]
        read_only_fields = fields

    def get_guarantee_label(self, obj) -> str:
        return LedgerEntry.Guarantee(obj.guarantee).label if obj.guarantee else ""


class LedgerPagination(CursorPagination):
    """Opaque cursors over ``id`` (oldest first: the ledger's own order)."""

    ordering = "id"
    page_size = 100
    max_page_size = 1000


@extend_schema_view(get=extend_schema(responses={200: LedgerEntrySerializer(many=True),
                                                 **problems(400, 401, 403, 429)}))
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


class BlockEntriesQuery(serializers.Serializer):
    start = StrictIntegerField(min_value=0, required=False, default=0,
                               help_text="The position of the first entry to give (0: the block's first).")
    limit = StrictIntegerField(min_value=1, max_value=MAX_PAGE, required=False, default=1000,
                               help_text=f"How many entries to give (at most {MAX_PAGE}).")


class BlockEntrySerializer(serializers.Serializer):
    position = serializers.IntegerField(help_text="The entry's position in its block.")
    id = serializers.IntegerField(help_text="The entry's id (block id * 2^24 + position).")
    data = serializers.SerializerMethodField(help_text=(
        "The entry's leaf data, base64: SHA-256(0x00 || data) is its leaf in the block's entry tree "
        "(docs/receipts.md#entry-data). Version 2 holds the entry's blinding key."))

    def get_data(self, obj) -> str:
        return base64.b64encode(obj["data"]).decode()


class BlockEntriesSerializer(serializers.Serializer):
    block = serializers.IntegerField()
    shard = serializers.IntegerField()
    hash = serializers.CharField(help_text="The block's hash (hex).")
    entry_count = serializers.IntegerField()
    version = serializers.IntegerField(help_text="The leaf version of the block's entries (1 or 2).")
    log_index = serializers.IntegerField(allow_null=True, help_text="The block's leaf in the checkpoint log; null "
                                                                    "before a checkpoint covers it.")
    start = serializers.IntegerField()
    entries = BlockEntrySerializer(many=True)
    next = serializers.IntegerField(allow_null=True, help_text="The next page's start; null after the last entry.")


@extend_schema(summary="A block's entries as its entry tree hashes them", parameters=[BlockEntriesQuery],
               responses={200: BlockEntriesSerializer, **problems(400, 401, 403, 404, 429)})
class BlockEntriesView(APIView):
    """A ledger block's entries as leaf data, for auditors and staff (docs/receipts.md#the-monitor): whoever holds
    them recomputes the block's entries root, which the checkpoint log's block leaf states, and replays the budget
    rules on every entry (``ldpmarket-client monitor``)."""

    permission_classes = [permissions.IsAuthenticated, CanAudit]

    def get(self, request, block_id: int):
        query = BlockEntriesQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        page = block_entries(block_id, query.validated_data["start"], query.validated_data["limit"])
        if page is None:
            raise exceptions.NotFound("No ledger block has this id.")
        return Response(BlockEntriesSerializer(page).data)


class AuditReceiptsQuery(ReceiptsQuery):
    value = StrictIntegerField(min_value=1, help_text="The value whose receipts to fetch.")


@extend_schema(summary="Receipts of a value", parameters=[AuditReceiptsQuery],
               responses={200: ReceiptsSerializer, **problems(400, 401, 403, 404, 429, NoSuchCheckpoint)})
class ReceiptsView(APIView):
    """Any value's receipts, for auditors and staff (docs/receipts.md): the same file its owner gets, so an auditor
    can check that what the owner was shown is in the log everybody sees."""

    permission_classes = [permissions.IsAuthenticated, CanAudit]

    def get(self, request):
        query = AuditReceiptsQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        value = query.validated_data["value"]
        if not LedgerEntry.objects.of_values([value]).exists():
            raise exceptions.NotFound("No ledger entry concerns this value.")
        return receipts_response(request, [value], tree_size=query.validated_data.get("tree_size"), more=False)


#: Routes; the project mounts them with ``path("api/v1/audit/", include("audit.api"))``.
app_name = "audit"
urlpatterns = [
    path("ledger/", LedgerEntryList.as_view(), name="ledger"),
    path("blocks/<ascii_id:block_id>/entries/", BlockEntriesView.as_view(), name="block-entries"),
    path("receipts/", ReceiptsView.as_view(), name="receipts"),
]
