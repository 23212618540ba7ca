"""Receipts over HTTP (docs/receipts.md#the-receipts-file): ``GET /api/v1/owner/receipts/`` (an owner's own values),
``GET /api/v1/audit/receipts/`` (auditors, any value) and the portal's per-value download, each answer checked
as an outsider would (``tests.audit.test_receipts.verify_with_merkle``)."""
from __future__ import annotations

import numpy as np
import pytest
from django.test import Client

from accounts.ledger.checkpoints import checkpoint_make
from accounts.models import LedgerEntry
from accounts.services import budget_set_ceiling
from market.models import Value
from market.values.services import values_create_many
from tests.audit.test_receipts import receipts_chain, verify_with_merkle
from tests.factories import BuyerFactory, CategoricalAttributeFactory
from tests.market.api.conftest import assert_problem, client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def holder(market):
    """An owner with four values, each of another attribute (one of them sold in ``market``)."""
    owner = market.fixed[6].owner
    for k in range(3):
        attribute = CategoricalAttributeFactory()
        values_create_many(attribute=attribute, owners=[owner], raws=["red"], ceiling="1",
                           rng=np.random.default_rng(k))
    checkpoint_make()
    return owner


def test_an_owner_gets_receipts_for_every_entry_of_their_values(holder):
    body = client_for(holder).get("/api/v1/owner/receipts/").json()
    mine = list(Value.objects.filter(owner=holder).values_list("id", flat=True))
    assert len(mine) == 4 and body["next"] is None and not body["pending"]
    assert verify_with_merkle(body) == LedgerEntry.objects.filter(value_id__in=mine).count()
    assert {r["entry"]["value"] for r in body["receipts"]} == set(mine)
    receipts_chain(body)
    one = client_for(holder).get(f"/api/v1/owner/receipts/?value={mine[0]}").json()
    assert {r["entry"]["value"] for r in one["receipts"]} == {mine[0]}


def test_pages_of_values_share_one_checkpoint(holder, monkeypatch):
    monkeypatch.setattr("market.api.owner.VALUES_PER_PAGE", 3)
    client = client_for(holder)
    first = client.get("/api/v1/owner/receipts/").json()
    assert first["next"] and "after=" in first["next"]
    budget_set_ceiling(value_id=Value.objects.filter(owner=holder).order_by("id").last().id, ceiling="0.9")
    checkpoint_make()  # a newer checkpoint between the pages: the next page stays on the first one's
    second = client.get(first["next"]).json()
    assert second["checkpoint"] == first["checkpoint"] and second["next"] is None
    assert len(second["pending"]) == 1  # the new entry is after that checkpoint
    values = [r["entry"]["value"] for r in first["receipts"] + second["receipts"]]
    assert len(set(values)) == 4 and values == sorted(values)
    verify_with_merkle(second)


def test_only_the_owner_gets_a_values_receipts(holder, market):
    someone_else = market.fixed[7].owner
    value = Value.objects.filter(owner=holder).first()
    assert_problem(client_for(someone_else).get(f"/api/v1/owner/receipts/?value={value.id}"), 404)
    assert_problem(client_for(BuyerFactory()).get("/api/v1/owner/receipts/"), 403)
    assert_problem(client_for().get("/api/v1/owner/receipts/"), 401)


@pytest.mark.parametrize("query, status", [("value=abc", 400), ("tree_size=0", 400), ("tree_size=x", 400),
                                           ("after=-1", 400), ("tree_size=99999", 404)])
def test_bad_queries_are_clear_4xx(holder, query, status):
    body = assert_problem(client_for(holder).get(f"/api/v1/owner/receipts/?{query}"), status)
    if status == 404:
        assert "99999" in body["detail"] and body["type"].endswith("/no-such-checkpoint")


def test_auditors_fetch_any_values_receipts(holder, auditor):
    value = Value.objects.filter(owner=holder).first()
    body = client_for(auditor).get(f"/api/v1/audit/receipts/?value={value.id}").json()
    assert verify_with_merkle(body) == LedgerEntry.objects.filter(value=value).count() > 0
    assert body == client_for(holder).get(f"/api/v1/owner/receipts/?value={value.id}").json()
    assert_problem(client_for(auditor).get("/api/v1/audit/receipts/"), 400)
    assert_problem(client_for(auditor).get("/api/v1/audit/receipts/?value=987654"), 404)
    assert_problem(client_for(holder).get(f"/api/v1/audit/receipts/?value={value.id}"), 403)


def test_the_portal_downloads_a_values_receipts(holder, market):
    value = Value.objects.filter(owner=holder).first()
    browser = Client()
    browser.force_login(holder)
    response = browser.get(f"/portal/values/{value.id}/receipts/")
    assert response.status_code == 200 and "attachment" in response["Content-Disposition"]
    assert verify_with_merkle(response.json()) == LedgerEntry.objects.filter(value=value).count()
    assert browser.get(f"/portal/values/{market.fixed[7].id}/receipts/").status_code == 404
    assert browser.get(f"/portal/values/{value.id}/receipts/?tree_size=-3").status_code == 400
    assert browser.get(f"/portal/values/{value.id}/receipts/?tree_size=4242").status_code == 404


def test_an_owner_without_values_gets_an_empty_file(market):
    from tests.factories import OwnerFactory  # noqa: PLC0415 -- this test only

    checkpoint_make()
    body = client_for(OwnerFactory()).get("/api/v1/owner/receipts/").json()
    assert body["receipts"] == [] and body["pending"] == [] and body["next"] is None and body["checkpoint"]
