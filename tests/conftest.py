"""Fixtures shared by tests/accounts and tests/market."""
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
