"""Helpers for the one-shot and survey tests (not a test module)."""
from __future__ import annotations

import uuid

import numpy as np

from market.models import Purchase
from market.purchases import execution, oneshot, oneshot_specs
from market.purchases.pricing import DEFAULT_POLICY
from tests.factories import BuyerFactory, contribute, fund

POLICY = DEFAULT_POLICY


def funded_buyer(amount: str = "1000"):
    buyer = BuyerFactory()
    fund(buyer, amount)
    return buyer


def values(attribute, raws, *, ceiling="5", seed=0, prefix=None):
    return contribute(attribute, list(raws), ceiling=ceiling, rng=np.random.default_rng(seed),
                      prefix=prefix or f"os{attribute.id}-{uuid.uuid4().hex[:6]}")


def run(buyer, attribute, *, rng=None, key=None, cohort=None, max_price=None, **request) -> Purchase:
    """Claim and execute a one-shot purchase or survey through the services."""
    spec = oneshot_specs.parse_spec(attribute, **request)
    purchase, _ = oneshot.oneshot_claim(buyer=buyer, attribute=attribute, spec=spec, cohort=cohort,
                                        idempotency_key=key or uuid.uuid4().hex)
    return execution.purchase_execute(purchase_id=purchase.id, rng=rng, max_price=max_price)
