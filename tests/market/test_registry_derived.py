"""What derives from the mechanism registry (docs/mechanisms.md#the-mechanism-registry): the models' choices and
CHECK constraints (no migration missing), the API's choices, the audit's mechanism table and the portal's wording."""
from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from audit import codes
from market.models import SURVEY_MECHANISMS, Attribute, Purchase
from market.values import owner_rows as portal_selectors
from mechanisms import registry


def test_model_choices_are_the_records():
    assert Attribute.Mechanism.choices == [(r.code, r.title) for r in registry.RECORDS if not r.is_survey]
    assert Purchase.Mechanism.choices == [(r.code, r.short) for r in registry.RECORDS]
    assert SURVEY_MECHANISMS == tuple(r.code for r in registry.RECORDS if r.is_survey)


@pytest.mark.django_db
def test_the_migrations_hold_the_derived_choices_and_constraints():
    out = StringIO()
    call_command("makemigrations", "market", "--check", "--dry-run", stdout=out)  # exits 1 on a missing migration
    assert "No changes detected" in out.getvalue()


def test_the_audit_and_the_portal_read_the_records():
    assert codes.MECHANISMS == [r.code for r in registry.RECORDS]
    assert [codes.GUARANTEES[g] for g in codes.MECHANISM_GUARANTEE] == [r.guarantee for r in registry.RECORDS]
    assert codes.SURVEYS == [r.number for r in registry.RECORDS if r.is_survey]
    assert portal_selectors.MECHANISM_NAMES == {r.code: r.owner_name for r in registry.RECORDS}
    assert portal_selectors.mechanism_name("urr") == registry.URR.owner_name
