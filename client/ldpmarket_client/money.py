"""Money amounts for people, the service's rule without Django (docs/money.md#how-amounts-are-shown).

The API gives every amount as a decimal string with exactly 4 places (``"0.0128"``, ``"-1.7600"``) and names
its currency.  People read the amount with its currency code, with 2 places when it is a whole number of cents
and all 4 otherwise: ``"15.04 EUR"``, ``"0.0128 EUR"``, ``"0.0080 EUR"``, ``"-1.76 EUR"``.  Nothing is rounded: an
amount that needs more than 4 places is refused (``ValueError``), never shown as another number.  The service's
``accounts.money.format.format_money`` applies the same rule; tests/client/test_money_format.py checks both agree.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation

__all__ = ["amount_decimal", "format_amount_text", "format_money_text"]

_UNIT = Decimal("0.0001")
_CENT = Decimal("0.01")


def amount_decimal(amount) -> Decimal:
    """An amount (a decimal string as the API gives it, a ``Decimal`` or an ``int``) as an exact ``Decimal`` with
    4 places; ``ValueError`` for anything else (a float is never an exact amount: parse the API's strings, not
    floats) or an amount with a non-zero digit beyond the 4th place."""
    if isinstance(amount, (bool, float)):
        raise ValueError(f"{amount!r} is not an exact amount")
    try:
        d = Decimal(str(amount).strip())
    except (InvalidOperation, ValueError):
        raise ValueError(f"{amount!r} is not an amount") from None
    if not d.is_finite():
        raise ValueError(f"{amount!r} is not an amount")
    try:
        q = d.quantize(_UNIT)
    except InvalidOperation:  # more digits than the context holds
        raise ValueError(f"{amount!r} is not an amount") from None
    if q != d:
        raise ValueError(f"{amount!r} has more than 4 decimal places: it cannot be shown without rounding")
    return q if q else abs(q)  # never "-0.00"


def format_amount_text(amount) -> str:
    """The amount alone: ``"15.04"``, ``"0.0128"``, ``"0.0080"``, ``"-1.76"`` (2 places for whole cents, else 4)."""
    d = amount_decimal(amount)
    return f"{d.quantize(_CENT):f}" if d == d.quantize(_CENT) else f"{d:f}"


def format_money_text(amount, currency: str) -> str:
    """The amount with its currency code, as people read it: ``format_money_text("0.0128", "EUR")`` is
    ``"0.0128 EUR"``, ``format_money_text("15.0400", "EUR")`` is ``"15.04 EUR"``."""
    return f"{format_amount_text(amount)} {currency}"
