"""The admin console for auditing budgets (docs/budget-rules.md#the-audit): users, budgets and money.

Who may do what is decided by role (``accounts.roles``; docs/security.md,
"Roles"), not by Django model permissions:

* auditors, staff and superusers read every model registered here and the
  audit pages (``/admin/accounts/ledgerentry/audit/``, ``.../privacy-audit/``,
  ``.../overview/``, ``.../export/``; registered with the ledger's pages by
  ``audit.admin``);
* auditors change nothing: add, change and delete are refused (403) everywhere,
  and POSTs to change lists too;
* a change list filters only by its declared filters (``list_filter``) and
  searches only ids and usernames: any other lookup in the query string
  (``?result__estimate__startswith=0.3``, ``?id__gt=0``) is refused with 400
  (``AuditMixin.lookup_allowed``), for everybody: Django's default would let
  it filter on any column and read a hidden one from the row counts;
* the ledger, budgets, chains, values, purchases and money are read-only for
  everybody, superusers included (no add, change or delete, no actions): they
  change only through the services that write the hash-chained ledger;
* staff and superusers curate datasets, attributes and users, and alone see an
  opened raw value (on a value's page) and the outputs stored in chains
  (released ones are data buyers paid for; the others were never sold).

Users enter the admin with ``is_staff``; ``accounts.roles.grant_role`` keeps it
in step with the role.
"""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import F
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from accounts.console import AuditMixin, ReadOnlyAdmin, admin_link, id_filter, usage_bar
from accounts.money import services as money
from accounts.money.format import format_money
from ldpmarket.fields import StrictDecimalFormField

from . import roles
from .lockout import AdminSignInForm
from .models import BudgetAccount, LedgerEntry, MoneyAccount, MoneyEntry, PayoutRequest, TopUp, User
from .roles import sync_staff_flag
from .services import buyer_approve

admin.site.site_header = "ldpmarket console"
# The app list stays on the index and in the breadcrumbs: beside a change list's filters the navigation sidebar
# left too little room for the columns at 1280 px.
admin.site.enable_nav_sidebar = False
admin.site.site_title = "ldpmarket console"
admin.site.index_title = "Audit and administration"
admin.site.index_template = "admin/ldp/index.html"
admin.site.login_form = AdminSignInForm  # says when the sign-in lockout refused a sign-in (docs/security.md)


# =============================================================================================
# Access by role
# =============================================================================================


# =============================================================================================
# Users
# =============================================================================================

class BuyerApprovalFilter(admin.SimpleListFilter):
    """Buyers approved, or awaiting the operator's approval (docs/security.md#buyer-accounts)."""

    title = "buyer approval"
    parameter_name = "approval"

    def lookups(self, request, model_admin):
        return [("awaiting", "buyers awaiting approval"), ("approved", "approved buyers")]

    def queryset(self, request, queryset):
        if self.value() == "awaiting":
            return queryset.filter(role=User.Role.BUYER, buyer_approved_at__isnull=True)
        if self.value() == "approved":
            return queryset.filter(role=User.Role.BUYER, buyer_approved_at__isnull=False)
        return queryset


@admin.register(User)
class UserAdmin(AuditMixin, DjangoUserAdmin):
    editable = True
    list_display = ("username", "role", "organisation", "approval", "is_staff", "is_active", "is_superuser",
                    "date_joined")
    list_filter = ("role", BuyerApprovalFilter, "is_staff", "is_active", "is_superuser")
    search_fields = ("username", "email", "organisation")
    fieldsets = DjangoUserAdmin.fieldsets[:1] + (
        ("Role", {"fields": ("role", "organisation", "buyer_approved_at", "buyer_approved_by"),
                  "description": "The role decides what the account may do (see the help under the field). "
                                 "Auditors and staff enter this console: “staff status” follows the role and is "
                                 "not set by hand. A buyer who signed up alone buys once approved (the action "
                                 "“Approve selected buyers”); a buyer made here is approved."}),
    ) + DjangoUserAdmin.fieldsets[1:]
    add_fieldsets = DjangoUserAdmin.add_fieldsets + (("Role", {"fields": ("role", "organisation")}),)

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        fields += ["is_staff", "buyer_approved_at", "buyer_approved_by"]  # follow the role and the approval
        if not roles.is_superuser(request.user):
            fields += ["is_superuser", "groups", "user_permissions"]
        return fields

    def save_model(self, request, obj, form, change):
        sync_staff_flag(obj)
        # made a buyer here: approved by this operator; another role: no approval (accounts.roles)
        roles.sync_buyer_approval(obj, approved_by=request.user, approve=not change or "role" in form.changed_data)
        super().save_model(request, obj, form, change)

    @admin.display(description="approval", ordering="buyer_approved_at")
    def approval(self, obj):
        if not roles.is_buyer_account(obj):
            return "-"
        return "approved" if obj.buyer_approved_at else "awaiting"

    actions = ["approve_buyers", "top_up_credit"]

    def get_actions(self, request):
        actions = super().get_actions(request)
        if not roles.is_staff_role(request.user):
            actions.pop("top_up_credit", None)
            actions.pop("approve_buyers", None)
        return actions

    @admin.action(description="Approve selected buyers")
    def approve_buyers(self, request, queryset):
        """Approve the selected buyer accounts (``accounts.services.buyer_approve``: each buyer is told by e-mail);
        other roles are skipped.  Staff only (also checked here: an auditor's POST never approves)."""
        if not roles.is_staff_role(request.user):
            raise PermissionDenied
        approved, skipped = [], []
        for user in queryset.order_by("id"):
            if not roles.is_buyer_account(user):
                skipped.append(user.username)
                continue
            if user.buyer_approved_at is None:
                buyer_approve(buyer=user, approved_by=request.user)
                approved.append(user.username)
        if approved:
            self.message_user(request, f"Approved {len(approved)} buyer account(s): {', '.join(approved)}.",
                              messages.SUCCESS)
        else:
            self.message_user(request, "No buyer account awaited approval among those selected.", messages.INFO)
        if skipped:
            self.message_user(request, f"Skipped, not buyers: {', '.join(skipped)}.", messages.WARNING)

    @admin.action(description="Top up the selected buyers' credit (with a reason)")
    def top_up_credit(self, request, queryset):
        return topup_action(self, request, list(queryset.order_by("id")))


# =============================================================================================
# Budgets
# =============================================================================================

class UsageFilter(admin.SimpleListFilter):
    title = "budget spent"
    parameter_name = "usage"

    def lookups(self, request, model_admin):
        return [("none", "nothing spent"), ("some", "partly spent"), ("high", "80% or more spent"),
                ("exhausted", "exhausted (loss = ceiling)")]

    def queryset(self, request, queryset):
        v = self.value()
        if v == "none":
            return queryset.filter(chain_loss=0, oneshot_loss=0)
        if v == "some":
            return queryset.filter(loss_total__gt=0, loss_total__lt=F("ceiling"))
        if v == "high":
            return queryset.filter(loss_total__gt=0, loss_total__gte=F("ceiling") * 0.8)
        if v == "exhausted":
            return queryset.filter(loss_total__gt=0, loss_total__gte=F("ceiling"))
        return queryset


@admin.register(BudgetAccount)
class BudgetAccountAdmin(ReadOnlyAdmin):
    list_display = ("value_link", "owner", "attribute", "loss", "ceiling", "usage", "paused", "policy")
    list_filter = ("paused", "schedule_shape", UsageFilter, ("value__attribute", admin.RelatedFieldListFilter))
    search_ids = ("value_id",)
    search_users = ("value__owner",)
    search_help_text = "A value id, or an owner's username."
    ordering = ("value_id",)
    fields = ("value_link", "owner", "attribute", "loss", "ceiling", "usage", "chain_loss", "oneshot_loss", "paused",
              "policy", "schedule_start", "schedule_cap", "schedule_start_at", "schedule_end_at", "schedule_shape",
              "schedule_steps", "updated_at", "ledger")
    readonly_fields = ("value_link", "owner", "attribute", "loss", "usage", "policy", "ledger")

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(
            loss_total=F("chain_loss") + F("oneshot_loss"), owner_name=F("value__owner__username"),
            attribute_name=F("value__attribute__name"), dataset_title=F("value__attribute__dataset__title"))

    @admin.display(description="value", ordering="value_id")
    def value_link(self, obj):
        return admin_link("market_value", obj.value_id)

    @admin.display(description="owner", ordering="owner_name")
    def owner(self, obj):
        return obj.owner_name

    @admin.display(description="attribute", ordering="value__attribute_id")
    def attribute(self, obj):
        return f"{obj.dataset_title} / {obj.attribute_name}"

    @admin.display(description="loss", ordering="loss_total")
    def loss(self, obj):
        return obj.chain_loss + obj.oneshot_loss

    @admin.display(description="loss / ceiling")
    def usage(self, obj):
        return usage_bar(obj.chain_loss + obj.oneshot_loss, obj.ceiling)

    @admin.display(description="policy")
    def policy(self, obj):
        if not obj.schedule_shape:
            return "fixed"
        steps = f" in {obj.schedule_steps} steps" if obj.schedule_shape == "steps" else " linearly"
        return (f"{obj.schedule_start} -> {obj.schedule_cap}{steps}, "
                f"{obj.schedule_start_at:%Y-%m-%d} to {obj.schedule_end_at:%Y-%m-%d}")

    @admin.display(description="ledger")
    def ledger(self, obj):
        url = reverse("admin:accounts_ledgerentry_changelist") + f"?value={obj.value_id}"
        n = LedgerEntry.objects.of_values([obj.value_id]).count()
        return format_html('<a href="{}">{} ledger entries</a>', url, n)


# =============================================================================================
# Money: read-only, changed only by the money services (accounts/money/services.py): top-ups and payouts
# =============================================================================================

with_currency = format_money  # an amount with its currency (accounts.money.format)


class StaffActionsMixin:
    """Money actions (top-ups, settling payouts) on a read-only page: offered to, and run for, staff only."""

    def get_actions(self, request):
        if not roles.is_staff_role(request.user):
            return {}
        return admin.ModelAdmin.get_actions(self, request)

    def changelist_view(self, request, extra_context=None):
        if request.method == "POST" and not roles.is_staff_role(request.user):
            raise PermissionDenied
        return admin.ModelAdmin.changelist_view(self, request, extra_context)


class TopUpForm(forms.Form):
    amount = StrictDecimalFormField(min_value=money.CENT, max_value=money.MAX_AMOUNT, decimal_places=2,
                                help_text="Per buyer, at most two decimals.")
    reason = forms.CharField(max_length=200, help_text="Why the credit is given (kept with the movement).")


def topup_action(model_admin, request, users):
    """The admin action behind "Top up": a form (amount, reason), then one ``money_topup`` per buyer."""
    if not roles.is_staff_role(request.user):
        raise PermissionDenied
    buyers = [u for u in users if roles.is_buyer(u)]
    skipped = [u.username for u in users if not roles.is_buyer(u)]
    form = TopUpForm(request.POST if "apply" in request.POST else None)
    form.fields["amount"].label = f"Amount ({money.currency()})"
    if form.is_bound and form.is_valid() and buyers:
        amount, reason = form.cleaned_data["amount"], form.cleaned_data["reason"]
        with transaction.atomic():
            for buyer in buyers:
                money.money_topup(buyer=buyer, amount=amount, reason=reason, by=request.user)
        model_admin.message_user(request, f"Credited {with_currency(amount)} to {len(buyers)} buyer(s): "
                                          f"{', '.join(b.username for b in buyers)}.", messages.SUCCESS)
        return None
    if not buyers:
        model_admin.message_user(request, "None of the selected users is a buyer: nothing to top up.", messages.ERROR)
        return None
    return TemplateResponse(request, "admin/money/topup.html", {
        **model_admin.admin_site.each_context(request), "title": "Top up credit", "form": form, "buyers": buyers,
        "skipped": skipped, "currency": money.currency(), "action": request.POST.get("action"),
        "selected": request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME)})

@admin.register(MoneyAccount)
class MoneyAccountAdmin(StaffActionsMixin, ReadOnlyAdmin):
    list_display = ("id", "owner_of_account", "kind", "balance_shown")
    list_filter = ("kind",)
    list_select_related = ("user",)
    search_ids = ("id", "user_id")
    search_users = ("user",)
    search_help_text = "An account or user id, or a username."
    ordering = ("id",)
    fields = ("id", "owner_of_account", "kind", "balance_shown", "entries")
    readonly_fields = ("id", "owner_of_account", "balance_shown", "entries")
    actions = ["top_up_credit"]

    @admin.action(description="Top up the selected buyer accounts (with a reason)")
    def top_up_credit(self, request, queryset):
        accounts = queryset.filter(kind=MoneyAccount.Kind.BUYER_CREDIT).select_related("user").order_by("id")
        return topup_action(self, request, [a.user for a in accounts])

    @admin.display(description="balance", ordering="balance")
    def balance_shown(self, obj):
        return with_currency(obj.balance)

    @admin.display(description="user", ordering="user__username")
    def owner_of_account(self, obj):
        return admin_link("accounts_user", obj.user_id, obj.user.username) if obj.user_id else "platform"

    @admin.display(description="entries")
    def entries(self, obj):
        url = reverse("admin:accounts_moneyentry_changelist") + f"?account={obj.id}"
        return format_html('<a href="{}">{} movements</a>', url, obj.entries.count())


@admin.register(MoneyEntry)
class MoneyEntryAdmin(ReadOnlyAdmin):
    # the kind is a filter and on the entry's page (the memo says it too): the list fits 1280 px without it
    list_display = ("id", "created_at", "account_name", "purchase_link", "amount_shown", "balance_after_shown", "memo")
    list_filter = ("account__kind", "kind", ("created_at", admin.DateFieldListFilter),
                   id_filter("account"))  # an account's movements (MoneyAccountAdmin.entries)
    list_select_related = ("account__user",)
    search_ids = ("account_id", "purchase_id")
    search_users = ("account__user",)
    search_help_text = "An account or purchase id, or a username."
    ordering = ("-id",)
    fields = ("id", "created_at", "account_name", "kind", "purchase_link", "amount_shown", "balance_after_shown",
              "memo")
    readonly_fields = ("id", "created_at", "account_name", "purchase_link", "amount_shown", "balance_after_shown")

    @admin.display(description="amount", ordering="amount")
    def amount_shown(self, obj):
        return with_currency(obj.amount)

    @admin.display(description="balance after")
    def balance_after_shown(self, obj):
        return with_currency(obj.balance_after)

    @admin.display(description="account", ordering="account_id")
    def account_name(self, obj):
        a = obj.account
        who = a.user.username if a.user_id else "platform"
        return admin_link("accounts_moneyaccount", a.id, f"{who} ({a.get_kind_display()}, #{a.id})")

    @admin.display(description="purchase", ordering="purchase_id")
    def purchase_link(self, obj):
        return admin_link("market_purchase", obj.purchase_id)


@admin.register(TopUp)
class TopUpAdmin(ReadOnlyAdmin):
    list_display = ("id", "created_at", "buyer", "amount_shown", "reason", "by")
    list_select_related = ("buyer", "by")
    search_ids = ("id", "buyer_id")
    search_users = ("buyer", "by")
    search_help_text = "A top-up or user id, or a username."
    ordering = ("-id",)
    fields = ("id", "created_at", "buyer", "amount_shown", "reason", "by", "idempotency_key", "entry")
    readonly_fields = ("id", "created_at", "amount_shown")

    @admin.display(description="amount", ordering="amount")
    def amount_shown(self, obj):
        return with_currency(obj.amount)


@admin.register(PayoutRequest)
class PayoutRequestAdmin(StaffActionsMixin, ReadOnlyAdmin):
    """Owners' payout requests; staff settle them once paid, or reject them (the amount goes back)."""

    list_display = ("id", "requested_at", "owner", "amount_shown", "status", "decided_at", "decided_by", "note")
    list_filter = ("status",)
    list_select_related = ("owner", "decided_by")
    search_ids = ("id", "owner_id")
    search_users = ("owner",)
    search_help_text = "A payout or user id, or a username."
    ordering = ("-id",)
    fields = ("id", "requested_at", "owner", "amount_shown", "status", "decided_at", "decided_by", "note", "hold",
              "release")
    readonly_fields = ("id", "requested_at", "amount_shown")
    actions = ["settle", "reject"]

    @admin.display(description="amount", ordering="amount")
    def amount_shown(self, obj):
        return with_currency(obj.amount)

    def _decide(self, request, queryset, service, verb):
        if not roles.is_staff_role(request.user):
            raise PermissionDenied
        done, refused = [], []
        for pid in queryset.order_by("id").values_list("id", flat=True):
            try:
                done.append(service(payout_id=pid, by=request.user, note=f"{verb} in the admin"))
            except money.PayoutRefused as e:
                refused.append(str(e))
        if done:
            total = sum(p.amount for p in done)
            self.message_user(request, f"{verb.capitalize()} {len(done)} payout(s), {with_currency(total)}.",
                              messages.SUCCESS)
        for line in refused:
            self.message_user(request, line, messages.WARNING)

    @admin.action(description="Settle the selected payouts (paid to the owners)")
    def settle(self, request, queryset):
        self._decide(request, queryset, money.payout_settle, "settled")

    @admin.action(description="Reject the selected payouts (the amounts go back to the owners' earnings)")
    def reject(self, request, queryset):
        self._decide(request, queryset, money.payout_reject, "rejected")
