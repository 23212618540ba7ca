"""Fixtures shared by the whole suite (a package's own conftest may override them)."""
from __future__ import annotations

import pytest


@pytest.fixture
def categorical(db):
    """A categorical attribute over red/green/blue, grid 0.1, 0.2, ..., 10."""
    from tests.factories import CategoricalAttributeFactory

    return CategoricalAttributeFactory()


@pytest.fixture
def owner(db):
    from tests.factories import OwnerFactory

    return OwnerFactory()


@pytest.fixture
def auditor(db):
    """The suite's auditor, made as a deployment makes one (README, "For auditors"; docs/security.md, "Roles"): an
    account with a password (``create_user``), then ``accounts.roles.grant_role(user, "auditor")``, which sets
    ``is_staff`` (the admin's sign-in) and nothing else.  Signs in with ``tests.factories.PASSWORD``."""
    from accounts.models import User
    from accounts.roles import grant_role
    from tests.factories import PASSWORD

    user = User.objects.create_user("auditor", "auditor@example.org", PASSWORD)
    return grant_role(user, User.Role.AUDITOR)


@pytest.fixture
def staff(db):
    from tests.factories import StaffFactory

    return StaffFactory()
