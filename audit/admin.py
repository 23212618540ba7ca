"""The console's ledger pages and audit pages (docs/budget-rules.md#the-audit).

The ledger's entries, blocks and head, read-only for everybody (access as in ``accounts.admin``: auditors, staff
and superusers read; nobody changes a row), and the audit pages under the ledger's entries, for auditors and staff:

* ``/admin/accounts/ledgerentry/audit/`` (``admin:ldp_audit_budgets``): the budget audit (``audit.budget_audit``);
* ``.../privacy-audit/`` (``admin:ldp_privacy_audit``): the privacy audit by inference (``audit.privacy``);
* ``.../overview/`` (``admin:ldp_overview``): counts and charts (``audit.overview``);
* ``.../export/`` (``admin:ldp_export_ledger``): the ledger as CSV, filtered (``audit.export``).

The models stay in ``accounts`` (their admin URLs and permissions keep the ``accounts`` label).
"""
from __future__ import annotations

from dataclasses import replace

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from accounts.console import IdFilter, ReadOnlyAdmin, ReadOnlyInline, admin_link, id_filter, money_text, plain_epsilon
from accounts.models import (
    LedgerBlock,
    LedgerCheckpoint,
    LedgerCheckpointLeaf,
    LedgerCosignature,
    LedgerEntry,
    LedgerHead,
    LedgerLogKey,
    LedgerWitness,
)
from accounts.roles import can_audit
from ldpmarket.numbers import NumberError, as_id, parse_ascii_int
from market.models import Attribute

from .budget_audit import audit_budgets
from .charts import data_uri
from .export import export_csv_rows
from .filters import LedgerEntryFilter
from .overview import overview
from .privacy import privacy_audit


class AttributeListFilter(admin.SimpleListFilter):
    title = "attribute"
    parameter_name = "attribute"

    def lookups(self, request, model_admin):
        return [(a.id, str(a)) for a in Attribute.objects.select_related("dataset").order_by("id")]

    def queryset(self, request, queryset):
        return queryset.filter(value__attribute_id=self.value()) if self.value() else queryset


class ValueIdFilter(IdFilter):
    """``?value=<id>``: a value's entries (the budget's link), read with ``LedgerEntry.objects.of_values`` (only
    the compact rows holding the value are unnested)."""

    title = "value"
    parameter_name = "value"

    def of(self, queryset, pk: int):
        return queryset.of_values([pk])


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ("id", "created_at", "kind", "value_link", "purchase_link", "epsilon_text", "loss_change",
                    "ceiling_text")
    # the id filters are the links of a budget, a purchase and a block to their entries (shown only while set)
    list_filter = ("kind", "guarantee", ("created_at", admin.DateFieldListFilter), AttributeListFilter,
                   ValueIdFilter, id_filter("purchase"), id_filter("block"))
    search_ids = ("value_id", "purchase_id", "block_id")
    search_users = ("value__owner", "purchase__buyer")
    search_help_text = "A value, purchase or block id, or an owner's or buyer's username."
    ordering = ("-id",)
    fields = ("id", "block_link", "created_at", "kind", "value_link", "purchase_link", "epsilon", "guarantee",
              "chain_loss_before", "chain_loss_after", "oneshot_loss_before", "oneshot_loss_after", "ceiling",
              "schedule_start", "schedule_cap", "schedule_start_at", "schedule_end_at", "schedule_shape",
              "schedule_steps")
    readonly_fields = ("id", "block_link", "value_link", "purchase_link")
    change_list_template = "admin/ldp/ledgerentry_change_list.html"

    @admin.display(description="value", ordering="value_id")
    def value_link(self, obj):
        return admin_link("market_value", obj.value_id)

    @admin.display(description="purchase", ordering="purchase_id")
    def purchase_link(self, obj):
        return admin_link("market_purchase", obj.purchase_id)

    @admin.display(description="block", ordering="block_id")
    def block_link(self, obj):
        return admin_link("accounts_ledgerblock", obj.block_id)

    @admin.display(description="epsilon", ordering="epsilon")
    def epsilon_text(self, obj):
        return plain_epsilon(obj.epsilon)

    @admin.display(description="ceiling", ordering="ceiling")
    def ceiling_text(self, obj):
        return plain_epsilon(obj.ceiling)

    @admin.display(description="loss (chain + one-shot)")
    def loss_change(self, obj):
        before = obj.chain_loss_before + obj.oneshot_loss_before
        after = obj.chain_loss_after + obj.oneshot_loss_after
        return plain_epsilon(after) if before == after else f"{plain_epsilon(before)} → {plain_epsilon(after)}"

    @admin.display(description="chain loss")
    def chain_change(self, obj):
        if obj.chain_loss_before == obj.chain_loss_after:
            return obj.chain_loss_after
        return f"{obj.chain_loss_before} -> {obj.chain_loss_after}"

    @admin.display(description="one-shot loss")
    def oneshot_change(self, obj):
        if obj.oneshot_loss_before == obj.oneshot_loss_after:
            return obj.oneshot_loss_after
        return f"{obj.oneshot_loss_before} -> {obj.oneshot_loss_after}"

    # ----------------------------------------------------------------------------- audit pages

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("audit/", wrap(self.audit_view), name="ldp_audit_budgets"),
            path("privacy-audit/", wrap(self.privacy_view), name="ldp_privacy_audit"),
            path("overview/", wrap(self.overview_view), name="ldp_overview"),
            path("export/", wrap(self.export_view), name="ldp_export_ledger"),
        ] + super().get_urls()

    def _context(self, request, title: str, **extra):
        if not can_audit(request.user):
            raise PermissionDenied
        return {**self.admin_site.each_context(request), "title": title, "opts": self.model._meta, **extra}

    def audit_view(self, request):
        context = self._context(request, "Budget audit")
        anchor = request.GET.get("anchor", "").strip()
        report = audit_budgets(anchor=anchor or None)
        return TemplateResponse(request, "admin/ldp/audit_budgets.html",
                                {**context, "report": report, "anchor": anchor})

    def privacy_view(self, request):
        context = self._context(request, "Privacy audit by inference")
        try:
            sample = min(max(parse_ascii_int(request.GET.get("sample", "1000")), 2), 20000)
            levels = min(max(parse_ascii_int(request.GET.get("levels", "10")), 1), 50)
        except NumberError:
            sample, levels = 1000, 10
        attribute = request.GET.get("attribute", "")
        pk = as_id(attribute)
        ids = [pk] if pk is not None else None
        report = privacy_audit(sample=sample, levels=levels, attribute_ids=ids)
        return TemplateResponse(request, "admin/ldp/privacy_audit.html", {
            **context, "report": report, "plot": data_uri(report.png), "sample": sample, "levels": levels,
            "attribute": attribute})

    def overview_view(self, request):
        context = self._context(request, "Overview")
        ov = overview()
        ov = replace(ov, stats={**ov.stats, "revenue": money_text(ov.stats["revenue"])})  # "15.04 EUR"
        return TemplateResponse(request, "admin/ldp/overview.html", {
            **context, "overview": ov, "loss_plot": data_uri(ov.loss_png), "sales_plot": data_uri(ov.sales_png)})

    def export_view(self, request):
        context = self._context(request, "Export the ledger as CSV")
        data = {k: v for k, v in request.GET.items() if k in LedgerEntryFilter.base_filters and v != ""}
        fs = LedgerEntryFilter(data=data, queryset=LedgerEntry.objects.all())
        if request.GET.get("download") and fs.is_valid():
            stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
            response = StreamingHttpResponse(export_csv_rows(fs.qs), content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="ledger-{stamp}.csv"'
            return response
        status = 400 if request.GET.get("download") else 200
        return TemplateResponse(request, "admin/ldp/export_ledger.html",
                                {**context, "filterset": fs, "form": fs.form}, status=status)


@admin.register(LedgerBlock)
class LedgerBlockAdmin(ReadOnlyAdmin):
    list_display = ("id", "shard", "created_at", "entry_count", "short_hash", "short_prev")
    list_filter = ("shard",)
    ordering = ("-id",)
    search_ids = ("id",)
    fields = ("id", "shard", "created_at", "entry_count", "prev_hash", "hash", "entries")
    readonly_fields = ("id", "entries")

    @admin.display(description="hash")
    def short_hash(self, obj):
        return obj.hash[:16] + "..."

    @admin.display(description="previous hash")
    def short_prev(self, obj):
        return obj.prev_hash[:16] + "..."

    @admin.display(description="entries")
    def entries(self, obj):
        url = reverse("admin:accounts_ledgerentry_changelist") + f"?block={obj.id}"
        return format_html('<a href="{}">the {} entries of this block</a>', url, obj.entry_count)


class CheckpointLeafInline(ReadOnlyInline):
    model = LedgerCheckpointLeaf
    fields = ("index", "shard", "blocks", "head_hash", "block_id", "entry_count", "entries_root")


class CosignatureInline(ReadOnlyInline):
    """The witnesses' cosignatures of a checkpoint (docs/receipts.md#witnesses)."""

    model = LedgerCosignature
    fields = ("witness", "timestamp", "received_at", "line")


@admin.register(LedgerWitness)
class LedgerWitnessAdmin(ReadOnlyAdmin):
    """The witnesses of ``LDP_WITNESS_POLICY`` and their latest answers (docs/receipts.md#witnesses): a refusal
    (403, 404, 422) also fails the budget audit."""

    list_display = ("name", "url", "size", "last_status", "failures", "last_attempt_at", "next_attempt_at",
                    "short_error")
    ordering = ("name",)
    fields = ("name", "vkey", "url", "size", "last_status", "last_error", "failures", "last_attempt_at",
              "next_attempt_at")

    @admin.display(description="last error")
    def short_error(self, obj):
        return (obj.last_error[:80] + "...") if len(obj.last_error) > 80 else (obj.last_error or "-")


@admin.register(LedgerLogKey)
class LedgerLogKeyAdmin(ReadOnlyAdmin):
    """The keys that have signed the ledger's checkpoints (docs/receipts.md#rotating-the-log-key)."""

    list_display = ("vkey", "first_size", "last_size", "added_at", "retired_at")
    ordering = ("-first_size",)
    fields = ("vkey", "public_key", "key_id", "first_size", "last_size", "added_at", "retired_at")


@admin.register(LedgerCheckpoint)
class LedgerCheckpointAdmin(ReadOnlyAdmin):
    """Signed checkpoints of the ledger (docs/budget-rules.md#checkpoints), with the leaves each appended."""

    list_display = ("id", "created_at", "tree_size", "short_root", "short_key", "cosigned_by")
    ordering = ("-tree_size",)
    fields = ("id", "created_at", "tree_size", "root_hash", "key_id", "signature", "note")
    inlines = [CosignatureInline, CheckpointLeafInline]

    @admin.display(description="witnessed by")
    def cosigned_by(self, obj):
        return ", ".join(obj.cosignatures.order_by("witness__name").values_list("witness__name", flat=True)) or "-"

    @admin.display(description="root hash")
    def short_root(self, obj):
        return obj.root_hash[:16] + "..."

    @admin.display(description="signed by key")
    def short_key(self, obj):
        return obj.key_id[:16] + "..."


@admin.register(LedgerHead)
class LedgerHeadAdmin(ReadOnlyAdmin):
    list_display = ("shard", "blocks", "last_block", "head_hash")
    ordering = ("shard",)
    fields = ("shard", "blocks", "last_block", "head_hash")
    readonly_fields = ("head_hash",)

    @admin.display(description="hash of the last block")
    def head_hash(self, obj):
        return obj.last_block.hash if obj.last_block_id else "-"
