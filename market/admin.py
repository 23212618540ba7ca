"""Admin console for the market's models (docs/budget-rules.md#the-audit; access rules in ``accounts.admin``).

Datasets and attributes are curated by staff; values, chains, purchases,
and released outputs are read-only for everybody (a buyer's holdings are derived from their purchases).  No page ever
shows a sealed column: a value's raw datum is opened and shown on its page to staff
only, and so are the outputs stored in a chain: those released are data buyers
paid for (auditors read bookkeeping, never purchased data), the others were
never sold.  Auditors see each step's epsilon and whether it was released.
"""
from __future__ import annotations

import logging

import numpy as np
from django import forms
from django.contrib import admin
from django.db.models import Count
from django.urls import reverse
from django.utils.html import format_html

from accounts import roles
from accounts.console import AuditMixin, ReadOnlyAdmin, admin_link, money_text, usage_bar
from accounts.epsilon import MICRO, to_micro
from ldpmarket.numbers import as_id
from market.chains import store
from market.purchases.oneshot_specs import guarantee_label
from market.values import inputs as domain
from market.values import sealing

from .models import Attribute, Dataset, Purchase, PurchaseChunk, Value

log = logging.getLogger("ldpmarket.audit")

#: Steps of a chain listed on its page at most (the first and last halves when longer).
MAX_STEPS_SHOWN = 400


def output_labels(attribute: Attribute):
    """A function from a step's outputs (width,) to readable text."""
    if attribute.kind in (Attribute.Kind.CATEGORICAL, Attribute.Kind.BINARY):
        labels = domain.labels_of(attribute)
        return lambda out: labels[int(out[0])] if 0 <= int(out[0]) < len(labels) else f"? ({int(out[0])})"
    if attribute.kind == Attribute.Kind.NUMERIC:
        return lambda out: f"{'high' if int(out[0]) else 'low'} ({attribute.high if int(out[0]) else attribute.low})"
    return lambda out: "".join(str(int(b)) for b in out)


# =============================================================================================
# Curation (staff)
# =============================================================================================

@admin.register(Dataset)
class DatasetAdmin(AuditMixin, admin.ModelAdmin):
    editable = True
    list_display = ("id", "title", "curator", "attributes", "created_at")
    search_fields = ("title", "description")
    list_select_related = ("curator",)

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(n_attributes=Count("attributes"))

    @admin.display(description="attributes", ordering="n_attributes")
    def attributes(self, obj):
        return obj.n_attributes


class AttributeForm(forms.ModelForm):
    """The admin's attribute form: after the model's own validation, the one-shot fields must describe a usable
    mechanism (``domain.check_attribute``, the rule every value and purchase of the attribute is checked by)."""

    class Meta:
        model = Attribute
        fields = "__all__"

    def _post_clean(self):
        super()._post_clean()
        if not self.errors:
            try:
                domain.check_attribute(self.instance)
            except domain.InvalidAttribute as exc:
                self.add_error(None, str(exc))


@admin.register(Attribute)
class AttributeAdmin(AuditMixin, admin.ModelAdmin):
    editable = True
    form = AttributeForm
    list_display = ("id", "dataset", "name", "kind", "mechanism", "grid", "created_at")
    list_filter = ("kind", "mechanism", "dataset")
    list_select_related = ("dataset",)
    search_fields = ("name", "dataset__title")
    #: Fixed once values exist: changing them would change what stored chains and inputs mean.
    FROZEN = ("kind", "labels", "low", "high", "num_bits", "num_hashes", "num_cohorts", "mechanism", "grid_start",
              "grid_step", "grid_stop", "sensitive", "pum_tags", "num_items", "prior")

    @admin.display(description="epsilon grid")
    def grid(self, obj):
        return f"{obj.grid_start}, {obj.grid_start + obj.grid_step}, ... {obj.grid_stop}"

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and obj.values.exists():
            fields += [f for f in self.FROZEN if f not in fields]
        return fields


# =============================================================================================
# Values and chains (read-only; raw data and unreleased steps for staff only)
# =============================================================================================

class RawPresentFilter(admin.SimpleListFilter):
    title = "raw datum"
    parameter_name = "raw"

    def lookups(self, request, model_admin):
        return [("present", "present"), ("deleted", "deleted by its owner"),
                ("owner", "on its owner's device (never received)")]

    def queryset(self, request, queryset):
        if self.value() == "present":
            return queryset.filter(custody=Value.Custody.SERVICE, raw_deleted_at__isnull=True)
        if self.value() == "deleted":
            return queryset.filter(raw_deleted_at__isnull=False)
        if self.value() == "owner":
            return queryset.filter(custody=Value.Custody.OWNER)
        return queryset


@admin.register(Value)
class ValueAdmin(ReadOnlyAdmin):
    list_display = ("id", "owner", "attribute", "raw_present", "withdrawn", "loss", "ceiling", "created_at")
    list_filter = (RawPresentFilter, ("withdrawn_at", admin.EmptyFieldListFilter), "attribute")
    search_ids = ("id",)
    search_users = ("owner",)
    search_help_text = "A value id, or an owner's username."
    ordering = ("-id",)
    fields = ("id", "owner", "attribute", "cohort", "custody", "created_at", "raw_present", "raw_deleted_at",
              "withdrawn_at", "budget_link", "chain_link")
    readonly_fields = ("id", "raw_present", "budget_link", "chain_link")

    def get_queryset(self, request):
        # The sealed columns are never read here (the raw value is opened separately, for staff only).
        return (super().get_queryset(request).defer("raw_sealed", "input_sealed")
                .select_related("owner", "attribute__dataset", "budget"))

    @admin.display(description="raw datum", boolean=True)
    def raw_present(self, obj):
        """Whether the service holds the raw datum: not deleted, and not owner-held (docs/custody.md)."""
        return obj.custody == Value.Custody.SERVICE and obj.raw_deleted_at is None

    @admin.display(description="withdrawn", boolean=True)
    def withdrawn(self, obj):
        return obj.withdrawn_at is not None

    @admin.display(description="loss", ordering="budget__chain_loss")
    def loss(self, obj):
        return obj.budget.loss

    @admin.display(description="ceiling", ordering="budget__ceiling")
    def ceiling(self, obj):
        return obj.budget.ceiling

    @admin.display(description="budget")
    def budget_link(self, obj):
        b = obj.budget
        return format_html("{} &nbsp; {} of {}", admin_link("accounts_budgetaccount", obj.id, "budget"),
                           usage_bar(b.loss, b.ceiling), b.ceiling)

    @admin.display(description="chain")
    def chain_link(self, obj):
        if obj.attribute.is_oneshot or obj.block_id is None:
            return "none (one-shot mechanism: every release is a fresh draw)"
        points, head = store.lengths_and_heads([(obj.block_id, obj.slot)]).get((obj.block_id, obj.slot), (0, 0))
        return format_html("{} points up to epsilon {} (slot {} of chain block #{}); its steps are listed below",
                           points, f"{head / MICRO:g}", obj.slot, obj.block_id)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra = dict(extra_context or {})
        pk = as_id(str(object_id))
        if pk is not None:
            extra.update(self._steps(request, pk))
        if roles.can_read_raw_values(request.user) and pk is not None:
            row = Value.objects.filter(id=pk).values_list("raw_sealed", "owner_id", "attribute_id",
                                                          "value_key_id", "custody").first()
            if row is not None:
                extra["raw_value_shown"] = True
                if row[4] == Value.Custody.OWNER:
                    extra["raw_value"] = "(on its owner's device: the service never received it)"
                elif row[0] is None:
                    extra["raw_value"] = "(deleted by its owner)"
                else:
                    try:
                        extra["raw_value"] = sealing.open_raw(row[0], owner_id=row[1], attribute_id=row[2],
                                                                      key_id=row[3])
                    except sealing.SealBroken:
                        extra["raw_value"] = "(does not open with this key: tampered with or sealed elsewhere)"
                    log.info("raw value %s opened in the admin by %s", object_id, request.user.username)
        return super().change_view(request, object_id, form_url, extra)

    def _steps(self, request, value_id: int) -> dict:
        """The value's chain, step by step (its slot across its block's rows, ``market.chains.store``), with each
        output shown only to whom may see it."""
        value = Value.objects.filter(id=value_id, block__isnull=False).select_related("attribute", "budget").first()
        if value is None:
            return {}
        attribute = value.attribute
        eps, out = store.chain_of(attribute, value.block_id, value.slot)
        released = to_micro(value.budget.chain_loss)
        unreleased_shown = roles.can_read_raw_values(request.user)  # never sold: as private as the raw value
        released_shown = roles.can_read_purchased_data(request.user)  # sold: what buyers paid for
        label = output_labels(attribute)
        idx = np.arange(eps.size)
        if eps.size > MAX_STEPS_SHOWN:
            half = MAX_STEPS_SHOWN // 2
            idx = np.concatenate([idx[:half], idx[-half:]])
        steps = []
        for i in idx.tolist():
            shown = released_shown if eps[i] <= released else unreleased_shown
            steps.append({"index": i + 1, "epsilon": f"{eps[i] / MICRO:g}", "released": bool(eps[i] <= released),
                          "output": label(out[i]) if shown else None})
        return {"steps": steps, "steps_total": int(eps.size), "steps_truncated": eps.size > idx.size,
                "released_epsilon": value.budget.chain_loss,
                "withheld_released": 0 if released_shown else int((eps <= released).sum()),
                "withheld_unreleased": 0 if unreleased_shown else int((eps > released).sum())}


# =============================================================================================
# Purchases (read-only)
# =============================================================================================

@admin.register(Purchase)
class PurchaseAdmin(ReadOnlyAdmin):
    # created_at is on the purchase's page and in the date filter: the list fits 1280 px without it
    list_display = ("id", "buyer", "attribute", "mechanism", "epsilon", "guarantee_text", "status", "price_text")
    list_filter = ("status", "mechanism", "guarantee", "attribute", ("created_at", admin.DateFieldListFilter))
    list_select_related = ("buyer", "attribute__dataset")
    search_ids = ("id",)
    search_users = ("buyer",)
    search_help_text = "A purchase id, or a buyer's username."
    ordering = ("-id",)
    fields = ("id", "buyer", "attribute", "mechanism", "epsilon", "parameters", "charged_epsilon", "guarantee_text",
              "cohort", "status", "idempotency_key", "candidates", "included", "excluded_ceiling", "excluded_paused",
              "excluded_withdrawn", "excluded_no_raw", "new_points", "price_text", "error", "created_at",
              "completed_at", "heartbeat_at", "attempts", "ledger", "money")
    readonly_fields = ("id", "ledger", "money", "guarantee_text", "price_text")

    @admin.display(description="price", ordering="price")
    def price_text(self, obj):
        return money_text(obj.price)

    @admin.display(description="guarantee", ordering="guarantee")
    def guarantee_text(self, obj):
        """The guarantee in words (improved Christofides: per-report epsilon under non-collusion, aggregate only)."""

        if obj.guarantee:
            return guarantee_label(obj.guarantee)
        if obj.mechanism == "gradual_rr":
            return "epsilon-LDP, gradual release (only the highest epsilon counts)"
        return "-"

    @admin.display(description="ledger entries")
    def ledger(self, obj):
        url = reverse("admin:accounts_ledgerentry_changelist") + f"?purchase={obj.id}"
        return format_html('<a href="{}">{} releases</a>', url, obj.ledger_entries.count())

    @admin.display(description="money movements")
    def money(self, obj):
        rows = list(obj.money_entries.select_related("account").order_by("id")
                    .values_list("account__kind", "amount"))
        if not rows:
            return "none"
        totals: dict[str, object] = {}
        for kind, amount in rows:
            totals[kind] = totals.get(kind, 0) + amount
        return ("; ".join(f"{k.replace('_', ' ')}: {money_text(v)}" for k, v in totals.items())
                + f" ({len(rows)} movements)")


@admin.register(PurchaseChunk)
class PurchaseChunkAdmin(ReadOnlyAdmin):
    list_display = ("id", "purchase_link", "seq", "count")
    search_ids = ("purchase_id",)
    ordering = ("-id",)
    fields = ("id", "purchase_link", "seq", "count")
    readonly_fields = ("id", "purchase_link")

    def get_queryset(self, request):
        return super().get_queryset(request).defer("value_ids", "outputs")

    @admin.display(description="purchase", ordering="purchase_id")
    def purchase_link(self, obj):
        return admin_link("market_purchase", obj.purchase_id)


