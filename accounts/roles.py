"""Roles and what each may read or do: the one set of role predicates (see docs/security.md, "Roles").

Every interface asks these functions, never ``user.role`` or ``user.is_staff``
directly: the buyer API's permission classes and querysets, the audit API, the
owner portal, the admin console and the services that refuse the wrong role.

Roles are ``accounts.User.role``: owner, buyer, auditor, staff.  A superuser
is staff whatever its ``role`` field says (``createsuperuser`` leaves it at
the default, owner).  Inactive and anonymous users have no role at all.

``is_staff`` is *not* a role: it only lets Django's admin login form in.
:func:`grant_role` (and the admin's user form, through :func:`sync_staff_flag`)
keeps it True exactly for auditors, staff and superusers.  An auditor
therefore has ``is_staff`` set, and must never be mistaken for staff.

What each role may read and do:

* **owner** -- the owner portal, for their own values only;
* **buyer** -- quotes, purchases and surveys; the bookkeeping *and the data*
  (outputs, estimates, survey results) of their own purchases only;
* **auditor** -- reads bookkeeping: every purchase's and survey's metadata,
  the privacy ledger, money, budgets, the audit pages and the audit API.  Never
  the purchased data (outputs, estimates, survey results, the outputs stored in
  chains) nor raw values.  Changes nothing (the admin refuses every add, change
  and delete: ``accounts.admin.AuditMixin``);
* **staff** (and superusers) -- reads everything, including purchased data,
  raw values and unreleased chain steps; curates datasets, attributes and
  users.  Nobody, superusers included, changes ledger, budget, chain, purchase
  or money rows through the admin: only the services that write the ledger do.

Usage::

    from accounts import roles
    roles.grant_role(user, "auditor")          # saves role and is_staff=True
    roles.can_read_purchased_data(request.user, purchase)
"""
from __future__ import annotations

from django.utils import timezone

from ldpmarket.problems import RoleError

from .models import User

#: Roles that enter the admin console (``is_staff`` is kept True for them).
CONSOLE_ROLES = frozenset({User.Role.AUDITOR, User.Role.STAFF})


# ------------------------------------------------------------------------------------------- granting

def grant_role(user: User, role: str, *, save: bool = True) -> User:
    """Give ``user`` the role ``role`` and set ``is_staff`` to match (True exactly for auditors and staff).

    ``is_superuser`` is never touched: making or unmaking a superuser stays a
    deliberate act (``createsuperuser``).  A superuser keeps ``is_staff``.
    """
    if role not in User.Role.values:
        raise RoleError(f"unknown role {role!r}; choose one of {', '.join(User.Role.values)}")
    user.role = role
    sync_staff_flag(user)
    sync_buyer_approval(user)
    if save:
        if user.pk is None:
            user.save()
        else:
            user.save(update_fields=["role", "is_staff", "buyer_approved_at", "buyer_approved_by"])
    return user


def sync_buyer_approval(user: User, *, approved_by: User | None = None, approve: bool = True) -> None:
    """Keep the buyer approval in step with the role (docs/security.md#buyer-accounts); does not save.

    An account the operator makes a buyer (``grant_role``, ``create_buyer``, the admin) is approved by that act
    (now, by ``approved_by``) unless it already is or ``approve`` is false (the admin editing a buyer's other
    fields); any other role has no approval (the CHECK ``user_approval_only_buyers``).  A buyer who signed up alone
    is made by ``accounts.services.buyer_signup`` without this, and waits for ``buyer_approve``."""
    if is_buyer_account(user):
        if approve and user.buyer_approved_at is None:
            user.buyer_approved_at = timezone.now()
            user.buyer_approved_by = approved_by
    else:
        user.buyer_approved_at = None
        user.buyer_approved_by = None


def sync_staff_flag(user: User) -> None:
    """Set ``is_staff`` from the role (used when users are edited in the admin); does not save."""
    user.is_staff = user.role in CONSOLE_ROLES or user.is_superuser


# ------------------------------------------------------------------------------------------- who is what

def role_of(user) -> str | None:
    """The role ``user`` acts with: ``None`` when anonymous or inactive; ``staff`` for superusers."""
    if user is None or not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", False):
        return None
    if getattr(user, "is_superuser", False):
        return User.Role.STAFF
    role = getattr(user, "role", None)
    return role if role in User.Role.values else None


def is_owner(user) -> bool:
    return role_of(user) == User.Role.OWNER


def is_buyer(user) -> bool:
    return role_of(user) == User.Role.BUYER


def is_buyer_account(user) -> bool:
    """The account's role is buyer, active or not (what an approval is about; :func:`is_buyer` asks what a signed-in
    user may do now)."""
    return getattr(user, "role", None) == User.Role.BUYER


def is_auditor(user) -> bool:
    return role_of(user) == User.Role.AUDITOR


def is_staff_role(user) -> bool:
    """Platform staff: role staff, or a superuser (may see raw values and purchased data, and curate)."""
    return role_of(user) == User.Role.STAFF


def is_superuser(user) -> bool:
    """An active superuser: the only one who may make or unmake superusers and edit permissions by hand."""
    return role_of(user) is not None and bool(getattr(user, "is_superuser", False))


# ---------------------------------------------------------------------------------------- what they may do

def can_audit(user) -> bool:
    """May read the admin console, the audit pages, the audit API and every purchase's bookkeeping:
    auditors, staff and superusers."""
    return role_of(user) in CONSOLE_ROLES


def can_curate(user) -> bool:
    """May add, change and delete datasets, attributes and users in the admin: staff and superusers."""
    return is_staff_role(user)


def can_read_raw_values(user) -> bool:
    """May see an opened raw value, and chain steps never released: staff and superusers."""
    return is_staff_role(user)


def can_buy(user) -> bool:
    """May ask for quotes and make purchases and surveys: buyers (a purchase or survey also needs
    :func:`buyer_is_approved`)."""
    return is_buyer(user)


def buyer_is_approved(user) -> bool:
    """An active buyer whose account the operator approved (docs/security.md#buyer-accounts): only such a buyer's
    purchases and surveys run.  A buyer awaiting approval may still read the catalog, ask for quotes and read its
    account; everybody else is not a buyer at all (False)."""
    return is_buyer(user) and getattr(user, "buyer_approved_at", None) is not None


def can_list_purchases(user) -> bool:
    """May list purchases and surveys at all (buyers see their own: :func:`visible_purchases`)."""
    return is_buyer(user) or can_audit(user)


def can_read_purchase(user, purchase) -> bool:
    """May read ``purchase``'s bookkeeping (status, epsilon, counts, price): its buyer, auditors and staff."""
    return can_audit(user) or (is_buyer(user) and purchase.buyer_id == user.id)


def can_read_purchased_data(user, purchase=None) -> bool:
    """May read what was bought (outputs, estimates, a survey's result, the outputs stored in chains): the buyer
    of ``purchase``, and staff.  Never auditors.  Without ``purchase``: whether the role may read any at all."""
    if is_staff_role(user):
        return True
    return is_buyer(user) and (purchase is None or purchase.buyer_id == user.id)


def visible_purchases(user, queryset):
    """``queryset`` (of purchases) narrowed to what ``user`` may see the bookkeeping of."""
    if can_audit(user):
        return queryset
    if is_buyer(user):
        return queryset.filter(buyer_id=user.id)
    return queryset.none()


def can_use_portal(user) -> bool:
    """May use the owner portal (their own values only): owners."""
    return is_owner(user)


def can_contribute(user) -> bool:
    """May own values: owners."""
    return is_owner(user)
