"""The console's shared parts (docs/security.md#roles), for every app's admin (``accounts.admin``, ``market.admin``,
``audit.admin``): access by role (``AuditMixin``: auditors read, staff curate, a change list filters only by its
declared filters), id and username search, the read-only base of the ledger, budget, chain and money lists, and
small display helpers.  Below the interfaces, so that no admin module imports another.
"""
from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import get_fields_from_path
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.urls import reverse
from django.utils.html import format_html

from accounts.money.format import format_money
from ldpmarket.numbers import as_id

from . import roles
from .models import User
from .roles import can_audit


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


class ReadOnlyInline(admin.TabularInline):
    """A change page's rows of a related model, shown and never added, changed or deleted (``fields`` are all
    read-only)."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request, obj=None):
        return self.fields

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


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
    """An amount with its currency, for the admin's lists and pages (``accounts.money.format``)."""
    return format_money(amount)
