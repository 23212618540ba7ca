"""Amounts as text, one rule (docs/money.md#how-amounts-are-shown).

Amounts are exact Decimals with 4 places (``accounts.models.MONEY``) and nothing is ever rounded for display:

- for machines (API fields, exports, the CLI's JSON) :func:`machine_amount`: exactly 4 places, ``"0.0128"``,
  ``"-1.7600"``, ``"15.0400"`` (the API's fields are :class:`MoneyField`);
- for people (portal, admin, audit pages, commands, e-mails) :func:`format_money`: the amount with the market's
  currency (``LDP_CURRENCY``), 2 places when it is a whole number of cents, all 4 otherwise: ``"15.04 EUR"``,
  ``"0.0128 EUR"``, ``"0.0080 EUR"``, ``"-1.76 EUR"``.

An amount that would need rounding to fit 4 places is refused (``ValueError``), never shown as another number.
The client's ``ldpmarket_client.money.format_money_text`` applies the same rule without Django.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.conf import settings
from rest_framework import serializers

PLACES = Decimal("0.0001")
CENTS = Decimal("0.01")


def currency() -> str:
    """The currency of every amount in the market (setting ``LDP_CURRENCY``, an ISO 4217 code; docs/money.md)."""
    return settings.LDP_CURRENCY


def money_decimal(amount) -> Decimal:
    """``amount`` (a Decimal, an int or a decimal string) as the exact Decimal with 4 places: ``Decimal("0.008")``
    -> ``Decimal("0.0080")``, a SUM()'s ``Decimal("15.0400000000000")`` -> ``Decimal("15.0400")``, ``-0`` -> ``0``.
    ``ValueError`` when it is not a finite number or has a non-zero digit beyond the 4th place."""
    if isinstance(amount, (bool, float)):  # a float is not an exact amount
        raise ValueError(f"{amount!r} is not an exact amount")
    try:
        d = Decimal(amount.strip() if isinstance(amount, str) else amount)
        if not d.is_finite():
            raise ValueError
        exact = d == d.quantize(PLACES)
    except (InvalidOperation, TypeError, ValueError):
        raise ValueError(f"{amount!r} is not an amount") from None
    if not exact:
        raise ValueError(f"{amount!r} has more than 4 decimal places: it cannot be shown without rounding")
    d = d.quantize(PLACES)
    return d if d else abs(d)


def machine_amount(amount) -> str:
    """For machines: the exact amount with exactly 4 places, ``"0.0128"``, ``"-1.7600"``; no currency."""
    return f"{money_decimal(amount):f}"


def format_amount(amount) -> str:
    """For people, without the currency: ``"15.04"``, ``"0.0128"``, ``"0.0080"``, ``"-1.76"`` (2 places for whole
    cents, else 4); ``None`` -> ``"0.00"``; text that is no number is given back as it is."""
    if amount is None or amount == "":
        amount = 0
    try:
        d = money_decimal(amount)
    except ValueError:
        if isinstance(amount, float) or (isinstance(amount, (str, int, Decimal)) and _is_number(amount)):
            raise  # a number we would have to round (or a float, never exact): refuse
        return str(amount)
    return f"{d.quantize(CENTS):f}" if d == d.quantize(CENTS) else f"{d:f}"


def format_money(amount) -> str:
    """For people: the amount with its currency, ``"12.50 EUR"``, ``"0.0125 EUR"`` (:func:`format_amount`)."""
    return f"{format_amount(amount)} {currency()}"


def _is_number(amount) -> bool:
    try:
        Decimal(amount.strip() if isinstance(amount, str) else amount)
    except (InvalidOperation, TypeError, ValueError):
        return False
    return True


class MoneyField(serializers.DecimalField):
    """An amount in the API: a decimal string with exactly 4 places (:func:`machine_amount`; read-only)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("read_only", True)
        super().__init__(max_digits=16, decimal_places=4, coerce_to_string=True, **kwargs)

    def to_representation(self, value):
        return machine_amount(value)
