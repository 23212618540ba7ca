"""Money as people read it: the amount with the market's currency (``LDP_CURRENCY``, default "EUR").

Amounts are exact Decimals with 4 places (``accounts.models.MONEY``); they are shown with at least 2 places and
the trailing zeros beyond them dropped, so ``Decimal("12.5000")`` reads "12.50 EUR" and ``Decimal("0.0125")``
reads "0.0125 EUR" (nothing earned is rounded away).  Every page that shows money uses :func:`format_money`.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.conf import settings

PLACES = Decimal("0.0001")


def currency() -> str:
    """The currency of every amount in the market (setting ``LDP_CURRENCY``, an ISO 4217 code; docs/money.md)."""
    return settings.LDP_CURRENCY


def format_amount(amount) -> str:
    """``12.5`` -> ``"12.50"``, ``0.0125`` -> ``"0.0125"``, ``None`` -> ``"0.00"``; no currency."""
    if amount is None or amount == "":
        amount = 0
    try:
        d = Decimal(str(amount)).quantize(PLACES)
    except (InvalidOperation, ValueError):
        return str(amount)
    text = f"{d:f}"
    whole, _, frac = text.partition(".")
    frac = frac.rstrip("0").ljust(2, "0")
    return f"{whole}.{frac}"


def format_money(amount) -> str:
    """The amount with its currency: ``"12.50 EUR"``."""
    return f"{format_amount(amount)} {currency()}"
