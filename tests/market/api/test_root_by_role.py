"""The API root (``GET /api/v1/``, ``market.api.root``) lists to each caller only the endpoints its role may use: no
staff or audit endpoint for an anonymous caller or a buyer; the audit API for auditors; everything for staff
(docs/architecture.md#the-path-of-a-purchase)."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.factories import AuditorFactory, BuyerFactory, OwnerFactory, StaffFactory

pytestmark = pytest.mark.django_db


def keys(user=None) -> set[str]:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    response = client.get("/api/v1/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return set(response.json())


def staff_or_audit(listed: set[str]) -> set[str]:
    return {k for k in listed if k.startswith(("staff/", "audit/"))}


def test_an_anonymous_caller_sees_no_staff_or_audit_endpoint():
    listed = keys()
    assert not staff_or_audit(listed), staff_or_audit(listed)
    assert {"auth/token", "datasets", "quotes", "purchases", "surveys", "schema", "docs", "sign-in"} <= listed


def test_a_buyer_sees_the_buyer_api_and_no_staff_audit_or_owner_endpoint():
    listed = keys(BuyerFactory())
    assert not staff_or_audit(listed), staff_or_audit(listed)
    assert not {k for k in listed if k.startswith("owner/")}
    assert {"datasets", "quotes", "purchases", "surveys", "account", "account/statement", "auth/token"} <= listed


def test_an_owner_sees_the_owner_api_and_no_staff_or_audit_endpoint():
    listed = keys(OwnerFactory())
    assert not staff_or_audit(listed), staff_or_audit(listed)
    assert {"owner/values", "datasets"} <= listed


def test_an_auditor_sees_the_audit_api_but_not_the_staff_only_endpoints():
    listed = keys(AuditorFactory())
    assert "audit/ledger" in listed and "staff/fees" in listed
    assert "staff/topups" not in listed and "staff/buyers" not in listed


def test_staff_see_the_staff_and_audit_endpoints():
    listed = keys(StaffFactory())
    assert {"audit/ledger", "staff/fees", "staff/topups", "staff/buyers"} <= listed
