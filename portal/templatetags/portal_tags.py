"""Template filters of the owner portal: epsilons without trailing zeros, money to 4 places."""
from __future__ import annotations

from decimal import Decimal

from django import template

register = template.Library()


@register.filter
def eps(value) -> str:
    """``Decimal('2.500000')`` -> ``2.5``; ``None`` -> an em dash."""
    if value is None or value == "":
        return "—"
    d = Decimal(str(value))
    return "0" if d == 0 else format(d.normalize(), "f")


@register.filter
def money(value) -> str:
    if value is None or value == "":
        return "0.0000"
    return f"{Decimal(str(value)).quantize(Decimal('0.0001')):f}"
