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
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import get_fields_from_path
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import F, Q
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from ldpmarket.fields import StrictDecimalFormField
from ldpmarket.money import format_money
from ldpmarket.numbers import as_id

from . import money, roles
from .lockout import AdminSignInForm
from .models import BudgetAccount, LedgerEntry, MoneyAccount, MoneyEntry, PayoutRequest, TopUp, User
from .roles import can_audit, sync_staff_flag

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

class AuditMixin:
    """Read access for auditors and staff; writes only for staff, and only where ``editable``."""

    editable = False  # curation models: staff (and superusers) may add, change and delete

    def has_module_permission(self, request):
        return can_audit(request.user)

    def has_view_permission(self, request, obj=None):
        return can_audit(request.user)

    def has_add_permission(self, request, obj=None):
        return self.editable and roles.can_curate(request.user)

    def has_change_permission(self, request, obj=None):
        return self.editable and roles.can_curate(request.user)

    def has_delete_permission(self, request, obj=None):
        return self.editable and roles.can_curate(request.user)

    def get_actions(self, request):
        if not self.has_delete_permission(request):
            return {}
        return super().get_actions(request)

    def changelist_view(self, request, extra_context=None):
        if request.method == "POST" and not self.has_change_permission(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)

    def lookup_allowed(self, lookup, value, request=None):
        """Filter only by the declared filters: each ``list_filter``'s ``expected_parameters()`` (and the
        ``date_hierarchy``'s year, month and day).  Django asks this of every query-string parameter of a change
        list but its own (``q``, ``o``, ``p``, ``all``, ``e``, ``_popup``, ``_facets``, ``_to_field``, which it
        checks itself) and refuses a lookup it denies with ``DisallowedModelAdminLookup``: a 400.

        Django's default allows a lookup on any local column, declared or not: ``?id=8&result__estimate__
        startswith=0.3`` read a survey's estimate, digit by digit, from the row count (a red-team finding;
        docs/security.md, "Roles").  Here nothing but the declared filters reaches the query, for every role."""
        hierarchy = self.date_hierarchy
        if hierarchy and lookup in (f"{hierarchy}__year", f"{hierarchy}__month", f"{hierarchy}__day"):
            return True
        list_filter = self.get_list_filter(request) if request is not None else self.list_filter
        return any(lookup in filter_parameters(self, request, item, lookup) for item in list_filter)


def filter_parameters(model_admin, request, list_filter, lookup: str | None = None) -> list[str]:
    """The query-string parameters an item of ``list_filter`` reads: its filter's ``expected_parameters()``.

    A field's filter is built as ``ChangeList.get_filters`` builds it (which may query its choices), and only
    when ``lookup`` (if given) is on its field: Django's field filters name every parameter ``<field path>`` or
    ``<field path>__...``.  A filter class of ours names its one parameter itself."""
    if isinstance(list_filter, type) and issubclass(list_filter, admin.SimpleListFilter):
        return [list_filter.parameter_name]
    model = model_admin.model
    if callable(list_filter):  # a ListFilter class of another kind
        return list(list_filter(request, {}, model, model_admin).expected_parameters())
    field, filter_class = list_filter if isinstance(list_filter, (tuple, list)) else (list_filter,
                                                                                    admin.FieldListFilter.create)
    field_path = None
    if isinstance(field, str):
        field_path = field
        if lookup is not None and lookup != field_path and not lookup.startswith(f"{field_path}__"):
            return []
        field = get_fields_from_path(model, field_path)[-1]
    spec = filter_class(field, request, {}, model, model_admin, field_path=field_path)
    return list(spec.expected_parameters())


class IdFilter(admin.SimpleListFilter):
    """A declared filter ``?<parameter_name>=<id>`` on a foreign key: what the console's own links use (a budget's
    ledger entries, a purchase's releases, an account's movements).  In the sidebar only while set (with "All" to
    clear it); anything but digits is an invalid lookup (the change list says so)."""

    def lookups(self, request, model_admin):
        value = self.value()
        return [] if value is None else [(value, f"#{value}")]

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        pk = as_id(value)
        if pk is None:
            raise IncorrectLookupParameters(f"{self.parameter_name} must be an id")
        return self.of(queryset, pk)

    def of(self, queryset, pk: int):
        return queryset.filter(**{f"{self.parameter_name}_id": pk})


def id_filter(field: str, title: str | None = None) -> type[IdFilter]:
    """An :class:`IdFilter` on the local foreign key ``field``."""
    return type(f"{field.title()}IdFilter", (IdFilter,), {"parameter_name": field, "title": title or field})


class IdSearchMixin:
    """Search by exact ids (digits) and by username, on indexed local columns (no casts of ids to text).

    ``search_users`` are paths to a user: ``"owner"`` (a local foreign key) or
    ``"value__owner"`` (a local foreign key, then a path from its model); each
    becomes ``<local>_id IN (subquery)``, which an index on the local column
    serves, instead of an OR across joins that would scan the whole table.
    """

    search_fields = ("pk",)  # shows the search box; the lookups are below
    search_ids: tuple[str, ...] = ("pk",)
    search_users: tuple[str, ...] = ()

    def _user_lookup(self, path: str, term: str) -> Q:
        users = User.objects.filter(username__iexact=term).values("pk")
        local, _, rest = path.partition("__")
        if not rest:
            return Q(**{f"{local}_id__in": users})
        related = self.model._meta.get_field(local).related_model
        return Q(**{f"{local}_id__in": related.objects.filter(**{f"{rest}_id__in": users}).values("pk")})

    def get_search_results(self, request, queryset, search_term):
        term = (search_term or "").strip()
        if not term:
            return queryset, False
        q = Q(pk__in=[])
        pk = as_id(term)
        if pk is not None:
            for name in self.search_ids:
                q |= Q(**{name: pk})
        for user_path in self.search_users:
            q |= self._user_lookup(user_path, term)
        return queryset.filter(q), False


class ReadOnlyAdmin(AuditMixin, IdSearchMixin, admin.ModelAdmin):
    actions = None
    show_full_result_count = False


def admin_link(model: str, pk, text=None):
    if pk is None:
        return "-"
    return format_html('<a href="{}">{}</a>', reverse(f"admin:{model}_change", args=[pk]), text or pk)


def usage_bar(loss, ceiling):
    """Loss against ceiling as a <meter> (styled in ldp/admin.css: no style attribute, for the CSP)."""
    share = float(loss / ceiling) if ceiling else (1.0 if loss else 0.0)
    pct = max(0, min(100, round(share * 100)))
    return format_html('<meter class="ldp-usage" min="0" max="100" low="80" high="99" optimum="0" value="{}" '
                       'title="{}%">{}%</meter> {}%', pct, pct, pct, pct)


def plain_epsilon(eps) -> str:
    """``Decimal("1.500000")`` -> ``"1.5"`` (list columns stay narrow)."""
    return "-" if eps is None else ("0" if eps == 0 else f"{eps.normalize():f}")


def money_text(amount) -> str:
    """An amount with its currency, for the admin's lists and pages (``ldpmarket.money``)."""
    return format_money(amount)


# =============================================================================================
# Users
# =============================================================================================

@admin.register(User)
class UserAdmin(AuditMixin, DjangoUserAdmin):
    editable = True
    list_display = ("username", "role", "organisation", "is_staff", "is_active", "is_superuser", "date_joined")
    list_filter = ("role", "is_staff", "is_active", "is_superuser")
    search_fields = ("username", "email", "organisation")
    fieldsets = DjangoUserAdmin.fieldsets[:1] + (
        ("Role", {"fields": ("role", "organisation"),
                  "description": "The role decides what the account may do (see the help under the field). "
                                 "Auditors and staff enter this console: “staff status” follows the role and is "
                                 "not set by hand."}),
    ) + DjangoUserAdmin.fieldsets[1:]
    add_fieldsets = DjangoUserAdmin.add_fieldsets + (("Role", {"fields": ("role", "organisation")}),)

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        fields.append("is_staff")  # follows the role (accounts.roles.grant_role)
        if not roles.is_superuser(request.user):
            fields += ["is_superuser", "groups", "user_permissions"]
        return fields

    def save_model(self, request, obj, form, change):
        sync_staff_flag(obj)
        super().save_model(request, obj, form, change)

    actions = ["top_up_credit"]

    def get_actions(self, request):
        actions = super().get_actions(request)
        if not roles.is_staff_role(request.user):
            actions.pop("top_up_credit", None)
        return actions

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
# Money: read-only, changed only by the money services (accounts/money.py): top-ups and payouts
# =============================================================================================

with_currency = format_money  # an amount with its currency (ldpmarket.money)


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
