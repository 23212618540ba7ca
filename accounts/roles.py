"""Roles and what they may do in the admin console and the audit API (spec service.md section 6).

Roles are ``accounts.User.role``: owner, buyer, auditor, staff.  Entering the
Django admin needs ``is_staff``; :func:`grant_role` is the one place that sets
a role and keeps ``is_staff`` in step with it (True for auditors and staff,
False for owners and buyers).  What a staff-flagged user may then *do* is
decided by the role, not by Django model permissions:

* **auditor** -- reads everything the console shows (budgets, values without
  their raw data, chains up to their released epsilon, purchases, the ledger,
  money, the audit pages) and changes nothing: every add, change and delete is
  refused by ``accounts.admin.AuditMixin``, whatever Django permissions the
  account might have been given by hand;
* **staff** (or a superuser) -- reads the same plus the opened raw values and
  unreleased chain steps, and curates datasets, attributes and users.  Nobody,
  superusers included, can add, change or delete ledger, budget, chain,
  purchase or money rows through the admin: those change only through the
  services that write the ledger.

Usage::

    from accounts.roles import grant_role
    grant_role(user, "auditor")   # saves role and is_staff=True
"""
from __future__ import annotations

from .models import User

#: Roles that enter the admin console (``is_staff`` is kept True for them).
CONSOLE_ROLES = frozenset({User.Role.AUDITOR, User.Role.STAFF})


class RoleError(ValueError):
    pass


def grant_role(user: User, role: str, *, save: bool = True) -> User:
    """Give ``user`` the role ``role`` and set ``is_staff`` to match (True exactly for auditors and staff).

    ``is_superuser`` is never touched: making or unmaking a superuser stays a
    deliberate act (``createsuperuser``).  A superuser keeps ``is_staff``.
    """
    if role not in User.Role.values:
        raise RoleError(f"unknown role {role!r}; choose one of {', '.join(User.Role.values)}")
    user.role = role
    user.is_staff = role in CONSOLE_ROLES or user.is_superuser
    if save:
        if user.pk is None:
            user.save()
        else:
            user.save(update_fields=["role", "is_staff"])
    return user


def sync_staff_flag(user: User) -> None:
    """Set ``is_staff`` from the role (used when users are edited in the admin); does not save."""
    user.is_staff = user.role in CONSOLE_ROLES or user.is_superuser


def is_staff_role(user) -> bool:
    """Platform staff: role staff, or a superuser (may see raw values and curate)."""
    return bool(user and user.is_authenticated and user.is_active
                and (user.is_superuser or getattr(user, "role", None) == User.Role.STAFF))


def is_auditor(user) -> bool:
    return bool(user and user.is_authenticated and user.is_active and getattr(user, "role", None) == User.Role.AUDITOR)


def can_audit(user) -> bool:
    """May read the admin console, the audit pages and the audit API: auditors, staff and superusers."""
    return is_auditor(user) or is_staff_role(user)
