"""Fields that read numbers and times from requests by :mod:`ldpmarket.numbers`' one rule (plain ASCII
decimals; docs/errors.md#numbers-in-requests), for every interface: the ``<ascii_id:...>`` path converter, REST
framework fields, Django form fields and django-filter filters, and ISO 8601 times compared in UTC.

Importing this module registers the path converter ``ascii_id``; the URL modules that use it import it.
"""
from __future__ import annotations

from datetime import UTC, datetime, time

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.urls import register_converter
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.drainage import set_override
from rest_framework import serializers

from .numbers import BIGINT_MAX, NumberError, is_ascii_int, parse_ascii_decimal

#: The OpenAPI schema of an id (a path parameter, a query parameter, a body field).
ID_SCHEMA = {"type": "integer", "minimum": 1, "maximum": BIGINT_MAX}
#: Longest text read as an integer (REST framework's own limit for numbers as text).
MAX_INT_TEXT = 1000


# ------------------------------------------------------------------------------------------- paths

class IdConverter:
    """``<ascii_id:pk>``: an id in a path, 1 to 2^63-1 in ASCII digits.  Anything else (``abc``, ``1e3``, ``+5``,
    ``١٠``, a 20-digit number) matches no route: a 404, ``application/problem+json`` under ``/api/``."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        n = int(value)
        if not 1 <= n <= BIGINT_MAX:
            raise ValueError(f"{value} is not an id")  # Django: this route does not match
        return n

    def to_url(self, value) -> str:
        n = int(value)
        if not 1 <= n <= BIGINT_MAX:
            raise ValueError(f"{value} is not an id")
        return str(n)


register_converter(IdConverter, "ascii_id")


# ----------------------------------------------------------------------------------- REST framework

class StrictIntegerField(serializers.IntegerField):
    """A REST framework integer: a JSON integer, or text of ASCII digits only (``"12"``; not ``"1_2"``, ``"+12"``,
    ``" 12"``, ``"12.0"`` nor ``"١٢"``).  At most ``max_value`` (default: an id's 2^63-1), so that no query ever
    sends the database a number its ``bigint`` cannot hold."""

    def __init__(self, **kwargs):
        kwargs.setdefault("max_value", BIGINT_MAX)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool):
            self.fail("invalid")
        if isinstance(data, int):
            return data
        if isinstance(data, str):
            if len(data) > MAX_INT_TEXT:
                self.fail("max_string_length")
            if is_ascii_int(data):
                return int(data)
        self.fail("invalid")


# ---------------------------------------------------------------------------------------- Django forms

class StrictIntegerFormField(forms.IntegerField):
    """A form's (or a filter's) integer in ASCII digits only (``-`` first when ``signed``, for the range's own
    message).  ``strip``: surrounding whitespace is dropped first (a person typed it in a form); a query parameter
    is taken as it is."""

    def __init__(self, *, strip: bool = True, signed: bool = False, **kwargs):
        self.strip, self.signed = strip, signed
        super().__init__(**kwargs)

    def to_python(self, value):
        if value in self.empty_values:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        text = str(value).strip() if self.strip else str(value)
        negative = self.signed and text.startswith("-")
        digits = text[1:] if negative else text
        if len(digits) > MAX_INT_TEXT or not is_ascii_int(digits):
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        return -int(digits) if negative else int(digits)


class StrictDecimalFormField(forms.DecimalField):
    """A form's decimal in plain ASCII (``12``, ``0.5``; ``-0.5`` when ``signed``): no ``+``, ``_``, exponent or
    other digits.  Surrounding whitespace is dropped first."""

    def __init__(self, *, signed: bool = False, **kwargs):
        self.signed = signed
        super().__init__(**kwargs)

    def to_python(self, value):
        if value in self.empty_values:
            return None
        if not isinstance(value, str):
            return super().to_python(value)
        try:
            return parse_ascii_decimal(value.strip(), signed=self.signed)
        except NumberError:
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None


# -------------------------------------------------------------------------------------- django-filter

class IdFormField(StrictIntegerFormField):
    def __init__(self, **kwargs):
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", BIGINT_MAX)
        super().__init__(strip=False, **kwargs)


def _documented(filter_, schema: dict) -> None:
    """Document ``filter_`` with ``schema`` and its own help text (a class-wide ``extend_schema_field`` would lose
    the help text)."""
    help_text = filter_.extra.get("help_text")
    set_override(filter_, "field", {**schema, **({"description": help_text} if help_text else {})})


class IdFilter(django_filters.NumberFilter):
    """A query parameter naming a row by id: ASCII digits, 1 to 2^63-1 (checked before any query), documented as
    such.  Anything else is a 400 ``invalid-input`` naming the parameter."""

    field_class = IdFormField

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _documented(self, ID_SCHEMA)


def parse_when(value: str) -> datetime:
    """An ISO 8601 date-time (naive means UTC) or date (midnight UTC), in ASCII, as an aware datetime in UTC.

    ``ValueError`` for anything else, and for a time whose offset takes it out of the years 1 to 9999 once in UTC
    (``9999-12-31T23:59:59-10:00``).  Comparing in UTC also keeps offsets PostgreSQL refuses (beyond +-15:59; Python
    reads up to +-23:59) away from the database."""
    text = (value or "").strip()
    when = parse_datetime(text) if text.isascii() else None
    if when is None:
        day = parse_date(text) if text.isascii() else None
        if day is None:
            raise ValueError(f"{value!r} is not an ISO 8601 date or date-time")
        when = datetime.combine(day, time.min)
    if timezone.is_naive(when):
        return timezone.make_aware(when, UTC)
    try:
        return when.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{value!r} is out of range: in UTC it falls outside the years 1 to 9999") from None


class WhenField(forms.Field):
    """:func:`parse_when` as a form field."""

    def to_python(self, value):
        if value in (None, ""):
            return None
        try:
            return parse_when(str(value))
        except ValueError as exc:
            # the message quotes the input, which may hold "%": passed as a parameter, never as the format
            # (django-filter formats each message with its params)
            raise ValidationError("%(reason)s", params={"reason": str(exc)}) from None


class WhenFilter(django_filters.Filter):
    """A time (:func:`parse_when`) to compare ``field_name`` with, in UTC."""

    field_class = WhenField

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _documented(self, {"type": "string", "format": "date-time"})
