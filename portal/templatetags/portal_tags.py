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


@register.simple_tag
def currency() -> str:
    """The currency every amount is in (setting LDP_CURRENCY; docs/money.md)."""
    from accounts.money import currency as setting

    return setting()


@register.filter
def with_currency(value) -> str:
    """An amount with its currency: ``12.3400 EUR`` (four places, as balances are kept)."""
    from accounts.money import currency as setting

    return f"{money(value)} {setting()}"


@register.filter
def uses_portal(user) -> bool:
    """Whether ``user`` may use the owner portal (``accounts.roles.can_use_portal``)."""
    from accounts import roles

    return roles.can_use_portal(user)


@register.filter
def role_name(user) -> str:
    """The role ``user`` acts with, in words with its article: "an auditor", "a staff" (superusers: staff)."""
    from accounts import roles
    from accounts.models import User

    role = roles.role_of(user)
    label = User.Role(role).label.lower() if role else "inactive"
    return f"{'an' if label[0] in 'aeiou' else 'a'} {label}"
