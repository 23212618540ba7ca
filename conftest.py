"""Shared pytest fixtures and markers for the whole suite."""
import pytest
from django.db import connection


def pytest_collection_modifyitems(config, items):
    """Tests marked ``postgres`` need PostgreSQL (row locks, triggers); on SQLite they are skipped, saying why."""
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL (CI runs these)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)
