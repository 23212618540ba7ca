"""The ledger's filters: one ``FilterSet`` for the audit API, the console's export page and ``export_ledger``.

Owner and buyer by id or username, attribute, value and purchase by id, kind, guarantee, and a time range
(``created_after`` inclusive, ``created_before`` exclusive) as ISO 8601 dates or date-times (naive means UTC,
compared in UTC).  Ids are ASCII digits in ``bigint`` range, and times ASCII ISO 8601 (``ldpmarket.fields``): anything
else is invalid.
"""
from __future__ import annotations

import django_filters
from django.db.models import Q

from accounts.models import LedgerEntry
from ldpmarket.fields import IdFilter, WhenField, WhenFilter, parse_when  # noqa: F401 (re-exported: the times' one parser)
from ldpmarket.numbers import as_id, is_ascii_int
from market.models import Value


class UserRefFilter(django_filters.CharFilter):
    """A user given by numeric id or by username."""

    def __init__(self, *args, path: str, **kwargs):
        self.path = path
        super().__init__(*args, **kwargs)

    def filter(self, qs, value):
        if value in (None, ""):
            return qs
        value = value.strip()
        if is_ascii_int(value):  # an id: ASCII digits ("١٠" and "²" are usernames), in range or no one's
            user_id = as_id(value)
            return qs.filter(Q(**{f"{self.path}_id": user_id})) if user_id is not None else qs.none()
        return qs.filter(**{f"{self.path}__username": value})


class LedgerEntryFilter(django_filters.FilterSet):
    owner = django_filters.CharFilter(method="of_owner", help_text="owner id or username")
    buyer = UserRefFilter(path="purchase__buyer", help_text="buyer id or username")
    attribute = IdFilter(field_name="value__attribute_id", help_text="attribute id")
    value = IdFilter(method="of_value", help_text="value id")
    purchase = IdFilter(field_name="purchase_id", help_text="purchase id")
    kind = django_filters.ChoiceFilter(choices=LedgerEntry.Kind.choices)
    guarantee = django_filters.ChoiceFilter(choices=[c for c in LedgerEntry.Guarantee.choices if c[0]],
                                            help_text="releases with this guarantee")
    created_after = WhenFilter(field_name="created_at", lookup_expr="gte",
                               help_text="ISO 8601 date or date-time, inclusive")
    created_before = WhenFilter(field_name="created_at", lookup_expr="lt",
                                help_text="ISO 8601 date or date-time, exclusive")

    def of_value(self, qs, name, value):
        """One value's entries (``LedgerEntry.objects.of_values``: only the compact rows holding it are read)."""
        if value in (None, ""):
            return qs
        return qs.of_values([value])  # an id in range (IdFilter)

    def of_owner(self, qs, name, value):
        """The entries of an owner's values, the owner given by id or username."""
        value = (value or "").strip()
        if not value:
            return qs
        if is_ascii_int(value) and as_id(value) is None:  # an id no one can have
            return qs.none()
        by_id = as_id(value)  # ASCII digits only: "١٠" and "²" are usernames
        values = Value.objects.filter(**({"owner_id": by_id} if by_id is not None else {"owner__username": value}))
        return qs.of_values(list(values.values_list("id", flat=True)))

    class Meta:
        model = LedgerEntry
        fields = ["owner", "buyer", "attribute", "value", "purchase", "kind", "guarantee", "created_after",
                  "created_before"]


def ledger_filterset(data, queryset=None) -> LedgerEntryFilter:
    return LedgerEntryFilter(data=data, queryset=queryset if queryset is not None else LedgerEntry.objects.all())
