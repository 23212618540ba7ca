"""Template filters of the buyer portal (money and epsilons: the owner portal's ``portal_tags``)."""
from __future__ import annotations

from django import template

from accounts import roles

register = template.Library()


@register.filter
def uses_buyer_portal(user) -> bool:
    """Whether ``user`` may use the buyer portal (``accounts.roles.is_buyer``)."""

    return roles.is_buyer(user)
