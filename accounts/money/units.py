"""The money unit, one definition (docs/money.md#amounts).

Every amount is held exactly as an integer number of units of 1/10000 (``UNITS`` per 1.0; balances and entries
are ``NUMERIC(16, 4)``); ``UNIT`` is one of them as a Decimal.  A ``CENT`` (0.01) is the smallest amount a top-up
or a payout moves: buyers and owners deal in whole cents, prices and owners' shares in units.
"""
from __future__ import annotations

from decimal import Decimal

from django.db.models import BigIntegerField, F
from django.db.models.functions import Cast, Round

#: Money units per 1.0 of the currency.
UNITS = 10_000
#: One money unit (0.0001): the precision of every balance, price and share.
UNIT = Decimal(1) / UNITS
#: A cent (0.01): top-ups and payouts move whole cents.
CENT = Decimal("0.01")
#: The largest amount one movement may carry (balances are NUMERIC(16, 4)).
MAX_AMOUNT = Decimal("1000000000.00")


def units_to_decimal(units: int) -> Decimal:
    """An integer number of units as the exact Decimal amount (4 places)."""
    return (Decimal(int(units)) / UNITS).quantize(UNIT)


def micro_units(field: str):
    """A money column in integer units, computed in SQL."""
    return Cast(Round(F(field) * UNITS), BigIntegerField())


def money_total(total) -> Decimal:
    """A ``Sum()`` of amounts as the exact Decimal with 4 places (``None``, the sum of nothing, is 0).

    PostgreSQL sums ``NUMERIC(16, 4)`` exactly; SQLite stores and sums them as floats, so its sum comes back with
    13 places (``15.0400000000000``) or a float's last-digit noise, which quantizing to the unit removes
    (docs/money.md#how-amounts-are-shown).  Every aggregate of money goes through here."""
    d = Decimal(0) if total is None else Decimal(str(total))
    d = d.quantize(UNIT)
    return d if d else abs(d)
