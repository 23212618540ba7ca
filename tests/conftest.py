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
    from tests.factories import AuditorFactory

    return AuditorFactory()


@pytest.fixture
def staff(db):
    from tests.factories import StaffFactory

    return StaffFactory()
