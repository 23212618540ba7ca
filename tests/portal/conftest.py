"""Fixtures for the owner-portal tests: owners with values, buyers with credit, purchases through the service."""
from __future__ import annotations

import uuid

import numpy as np
import pytest

from market.purchases import execution as purchases
from market.purchases import oneshot_specs
from market.purchases.pricing import DEFAULT_POLICY
from tests.factories import PASSWORD, BuyerFactory, CategoricalAttributeFactory, OwnerFactory, fund


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    """A private in-memory cache per test: sign-in throttling never leaks between tests."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"portal-tests-{uuid.uuid4()}"}}




def contribute_one(owner, attribute, raw, *, seed=0, **policy):
    from market.values.services import values_create_many

    policy = policy or {"ceiling": "2"}
    return values_create_many(attribute=attribute, owners=[owner], raws=[raw], rng=np.random.default_rng(seed),
                              **policy)[0]


def purchase(buyer, attribute, epsilon, *, seed=0):
    """A completed purchase through the purchase services (what POST /api/v1/purchases/ runs)."""
    from market.purchases.execution import purchase_claim, purchase_execute

    p, _ = purchase_claim(buyer=buyer, attribute=attribute, epsilon=epsilon, cohort=None,
                          idempotency_key=uuid.uuid4().hex)
    return purchase_execute(purchase_id=p.id, rng=np.random.default_rng(seed))


@pytest.fixture
def password():
    return PASSWORD


@pytest.fixture
def owner(db):
    return OwnerFactory(email="alice@example.org")


@pytest.fixture
def other_owner(db):
    return OwnerFactory(email="bob@example.org")


@pytest.fixture
def buyer(db):
    user = BuyerFactory(username="secret-buyer-name", email="buyer-secret@example.org",
                        organisation="Institute of Careful Statistics")
    fund(user, "100")
    return user


@pytest.fixture
def attribute(db):
    return CategoricalAttributeFactory(name="favourite colour", labels=["red", "green", "blue"],
                                       price_policy=DEFAULT_POLICY)


@pytest.fixture
def value(owner, attribute):
    return contribute_one(owner, attribute, "green", ceiling="2")


@pytest.fixture
def other_value(other_owner, attribute):
    return contribute_one(other_owner, attribute, "blue", ceiling="3", seed=1)


@pytest.fixture
def owner_client(client, owner):
    client.force_login(owner)
    return client


def oneshot_purchase(buyer, attribute, *, seed=0, **request):
    """A completed one-shot purchase or survey through the services the API runs (``market.purchases.oneshot``).

    ``request``: the API's body fields (``epsilon``, ``mechanism`` for a survey, ``family``, ``eps1``, ``eps2``,
    ``p2``, ...).
    """
    from market.purchases import oneshot

    spec = oneshot_specs.parse_spec(attribute, **request)
    p, _ = oneshot.oneshot_claim(buyer=buyer, attribute=attribute, spec=spec, cohort=None,
                                 idempotency_key=uuid.uuid4().hex)
    return purchases.purchase_execute(purchase_id=p.id, rng=np.random.default_rng(seed))


def oneshot_attribute(kind: str, **fields):
    """An attribute of a one-shot kind, with the platform's default price policy.

    ``urr``/``urap``: categorical "place" with a sensitive set and PUM tags; ``ternary`` (RR3);
    ``graph`` (LPP, three films); ``distribution`` (private sampling, three labels and a prior).
    """
    from market.models import Attribute
    from tests.factories import AttributeFactory

    presets = {
        "urr": dict(name="place", kind=Attribute.Kind.CATEGORICAL, mechanism=Attribute.Mechanism.URR,
                    labels=["home", "office", "clinic", "park"], sensitive=["clinic"],
                    pum_tags=["residence", "workplace"]),
        "urap": dict(name="place (bits)", kind=Attribute.Kind.CATEGORICAL, mechanism=Attribute.Mechanism.URAP,
                     labels=["home", "office", "clinic", "park"], sensitive=["clinic"], pum_tags=["residence"]),
        "ternary": dict(name="smoking", kind=Attribute.Kind.TERNARY, mechanism=Attribute.Mechanism.RR3,
                        labels=["never", "sometimes", "daily"]),
        "graph": dict(name="film ratings", kind=Attribute.Kind.GRAPH, mechanism=Attribute.Mechanism.LPP,
                      labels=["Alpha", "Beta", "Gamma"], num_items=3),
        "distribution": dict(name="commute mix", kind=Attribute.Kind.DISTRIBUTION,
                             mechanism=Attribute.Mechanism.PRIVATE_SAMPLE, labels=["walk", "bike", "car"],
                             prior=[0.3, 0.3, 0.4]),
    }
    return AttributeFactory(**{**presets[kind], "price_policy": DEFAULT_POLICY, **fields})
