"""Fixtures for the buyer API tests: users of every role with token clients, attributes with values, credit."""
from __future__ import annotations

import uuid
from decimal import Decimal

import numpy as np
import pytest
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.models import MoneyAccount
from market.purchases.pricing import DEFAULT_POLICY
from tests.factories import (
    BinaryAttributeFactory,
    BuyerFactory,
    CategoricalAttributeFactory,
    NumericAttributeFactory,
    OwnerFactory,
    StringAttributeFactory,
    fund,
    make_owners,
)

#: 0.01 per value at epsilon 1, 0.05 at 10 (linear between), owners get 80%.
POLICY = DEFAULT_POLICY
LABELS = ["red", "green", "blue"]
PROBLEM = "application/problem+json"


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    """A private in-memory cache per test: throttles, progress and estimates never leak between tests (or runs)."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"api-tests-{uuid.uuid4()}"}}


def client_for(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        _, key = AuthToken.objects.create(user=user)  # as POST /api/v1/auth/token/ makes it
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client




def credit(user) -> Decimal:
    account = MoneyAccount.objects.filter(user=user, kind=MoneyAccount.Kind.BUYER_CREDIT).first()
    return account.balance if account else Decimal(0)


def contribute(attribute, raws, *, ceiling="2", seed=0, prefix=None):
    """One new owner per raw value, through the service path, with a seeded generator."""
    from market.values.services import values_create_many

    owners = make_owners(len(raws), prefix or f"api-{attribute.id}-{uuid.uuid4().hex[:6]}")
    return values_create_many(attribute=attribute, owners=owners, raws=list(raws), ceiling=ceiling,
                              rng=np.random.default_rng(seed))


def buy(client, attribute_id, epsilon, key=None, **extra):
    body = {"attribute": attribute_id, "epsilon": epsilon, **extra}
    return client.post("/api/v1/purchases/", body, format="json", HTTP_IDEMPOTENCY_KEY=key or uuid.uuid4().hex)


def assert_problem(response, status: int):
    assert response.status_code == status, (response.status_code, getattr(response, "content", b"")[:500])
    assert response["Content-Type"] == PROBLEM
    body = response.json()
    assert body["status"] == status
    assert body["title"] and body["detail"] and body["type"]
    return body


@pytest.fixture
def buyer(db):
    user = BuyerFactory()
    fund(user, "100")
    return user


@pytest.fixture
def buyer_b(db):
    user = BuyerFactory()
    fund(user, "100")
    return user


@pytest.fixture
def owner(db):
    return OwnerFactory()


@pytest.fixture
def api(buyer):
    return client_for(buyer)


@pytest.fixture
def categorical(db):
    """A categorical attribute with 60 values (20 of each label), ceilings 2, grid 0.1..10."""
    attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=POLICY)
    contribute(attribute, LABELS * 20, ceiling="2", seed=1)
    return attribute


@pytest.fixture
def binary(db):
    attribute = BinaryAttributeFactory(price_policy=POLICY)
    contribute(attribute, ["yes"] * 30 + ["no"] * 20, ceiling="3", seed=2)
    return attribute


@pytest.fixture
def numeric(db):
    attribute = NumericAttributeFactory(price_policy=POLICY)
    contribute(attribute, [str(x) for x in range(0, 100, 2)], ceiling="3", seed=3)
    return attribute


@pytest.fixture
def string(db):
    attribute = StringAttributeFactory(price_policy=POLICY, num_bits=16, num_hashes=2, num_cohorts=2)
    contribute(attribute, ["apple", "pear", "plum", "fig"] * 10, ceiling="2", seed=4)
    return attribute
