"""Fixtures for the buyer-portal tests: approved and waiting buyers, an attribute with values for sale."""
from __future__ import annotations

import uuid

import numpy as np
import pytest

from market.purchases.pricing import DEFAULT_POLICY
from tests.factories import PASSWORD, BuyerFactory, CategoricalAttributeFactory, DatasetFactory, OwnerFactory, fund


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    """A private in-memory cache per test: sign-in throttling and progress never leak between tests."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"buyer-portal-tests-{uuid.uuid4()}"}}


@pytest.fixture
def password():
    return PASSWORD


@pytest.fixture
def buyer(db):
    """An approved buyer with 100 of credit."""
    user = BuyerFactory(username="ada", email="ada@example.org", organisation="Institute of Careful Statistics")
    fund(user, "100")
    return user


@pytest.fixture
def waiting_buyer(db):
    """A buyer who signed up and awaits approval, with credit (so only the approval stops a purchase)."""
    user = BuyerFactory(username="bea", email="bea@example.org", organisation="Startup Analytics",
                        buyer_approved_at=None)
    fund(user, "100")
    return user


@pytest.fixture
def other_buyer(db):
    user = BuyerFactory(username="cyd", email="cyd@example.org")
    fund(user, "100")
    return user


@pytest.fixture
def attribute(db):
    dataset = DatasetFactory(title="Health survey 2031", description="How people feel this spring.")
    return CategoricalAttributeFactory(dataset=dataset, name="mood", labels=["good", "fair", "poor"],
                                       price_policy=DEFAULT_POLICY, description="How do you feel today?")


@pytest.fixture
def values(attribute):
    """Six owners' values of ``attribute``, each with ceiling 2."""
    from market.values.services import values_create_many

    owners = [OwnerFactory() for _ in range(6)]
    raws = ["good", "good", "fair", "poor", "good", "fair"]
    return values_create_many(attribute=attribute, owners=owners, raws=raws, rng=np.random.default_rng(0),
                              ceiling="2")


def signed_in(client, user):
    client.force_login(user)
    return client
