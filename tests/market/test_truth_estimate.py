"""Issue 31, item 4: ``GET /api/v1/purchases/{id}/estimate/`` reports the purchase's guarantee, as the purchase itself
does (a chain purchase releases epsilon-LDP outputs: ``ldp``; docs/receipts.md, market/api/serializers.py
``chain_release``)."""
from __future__ import annotations

import uuid

import numpy as np
import pytest
from knox.models import AuthToken
from rest_framework.test import APIClient

from market.purchases.pricing import DEFAULT_POLICY
from tests.factories import BuyerFactory, CategoricalAttributeFactory, contribute, fund


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"truth-estimate-{uuid.uuid4()}"}}


def test_a_chain_purchases_estimate_reports_its_guarantee(db):
    attribute = CategoricalAttributeFactory(labels=["walk", "bike", "car"], price_policy=DEFAULT_POLICY)
    contribute(attribute, ["walk", "bike", "car"] * 10, ceiling="1", rng=np.random.default_rng(1))
    buyer = BuyerFactory()
    fund(buyer, "100")
    api = APIClient()
    _, key = AuthToken.objects.create(user=buyer)
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    r = api.post("/api/v1/purchases/", {"attribute": attribute.id, "epsilon": "0.5"}, format="json",
                 HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
    assert r.status_code in (200, 201), r.content
    purchase = api.get(f"/api/v1/purchases/{r.json()['id']}/").json()
    assert purchase["status"] == "completed" and purchase["guarantee"] == "ldp"
    estimate = api.get(f"/api/v1/purchases/{purchase['id']}/estimate/")
    assert estimate.status_code == 200, estimate.content
    assert estimate.json()["guarantee"] == purchase["guarantee"]
    assert estimate.json()["mechanism"] == purchase["mechanism"] == "gradual_rr" and estimate.json()["n"] == 30
