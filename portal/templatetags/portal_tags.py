"""Template filters of the owner portal: epsilons without trailing zeros, money with its currency."""
from __future__ import annotations

from decimal import Decimal

from django import template

from accounts import roles
from accounts.models import User
from accounts.money.format import currency as currency_setting
from accounts.money.format import format_money

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
    """``Decimal("0.0040")`` -> ``0.0040 EUR``, ``Decimal("12.5000")`` -> ``12.50 EUR``: 2 places for whole cents,
    else 4, never rounded, and the currency (``accounts.money.format``, docs/money.md#how-amounts-are-shown)."""

    return format_money(value)


@register.simple_tag
def currency() -> str:
    """The currency every amount is in (setting LDP_CURRENCY; docs/money.md)."""

    return currency_setting()


#: The money engineer's name for the same filter: an amount with its currency (``accounts.money.format``).
with_currency = register.filter("with_currency", money)


@register.filter
def uses_portal(user) -> bool:
    """Whether ``user`` may use the owner portal (``accounts.roles.can_use_portal``)."""

    return roles.can_use_portal(user)


@register.filter
def role_name(user) -> str:
    """The role ``user`` acts with, in words with its article: "an auditor", "a staff" (superusers: staff)."""

    role = roles.role_of(user)
    label = User.Role(role).label.lower() if role else "inactive"
    return f"{'an' if label[0] in 'aeiou' else 'a'} {label}"
