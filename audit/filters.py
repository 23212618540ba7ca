"""The ledger's filters: one ``FilterSet`` for the audit API, the console's export page and ``export_ledger``.

Owner and buyer by id or username, attribute, value and purchase by id, kind, guarantee, and a time range
(``created_after`` inclusive, ``created_before`` exclusive) as ISO 8601 dates or date-times (naive means UTC).
"""
from __future__ import annotations

from datetime import datetime, time, timezone as dt_timezone

import django_filters
from django import forms
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from accounts.models import LedgerEntry
from market.models import Value


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
    owner = django_filters.CharFilter(method="of_owner", help_text="owner id or username")
    buyer = UserRefFilter(path="purchase__buyer", help_text="buyer id or username")
    attribute = django_filters.NumberFilter(field_name="value__attribute_id", help_text="attribute id")
    value = django_filters.NumberFilter(method="of_value", help_text="value id")
    purchase = django_filters.NumberFilter(field_name="purchase_id", help_text="purchase id")
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
        if value != int(value) or not 0 < value < 2 ** 63:
            return qs.none()
        return qs.of_values([int(value)])

    def of_owner(self, qs, name, value):
        """The entries of an owner's values, the owner given by id or username."""
        value = (value or "").strip()
        if not value:
            return qs
        by_id = value.isdigit() and int(value) < 2 ** 63
        values = Value.objects.filter(**({"owner_id": int(value)} if by_id else {"owner__username": value}))
        return qs.of_values(list(values.values_list("id", flat=True)))

    class Meta:
        model = LedgerEntry
        fields = ["owner", "buyer", "attribute", "value", "purchase", "kind", "guarantee", "created_after",
                  "created_before"]


def ledger_filterset(data, queryset=None) -> LedgerEntryFilter:
    return LedgerEntryFilter(data=data, queryset=queryset if queryset is not None else LedgerEntry.objects.all())
