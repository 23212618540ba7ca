"""The one purchase pipeline (``market.purchases.pipeline``, docs/architecture.md#the-path-of-a-purchase), called as the
API calls it: replay, the quote guard, the claim, run or enqueue, and the status changes of ``purchase_run``; chain
purchases, one-shot purchases and surveys alike."""
from __future__ import annotations

import uuid
from decimal import Decimal

import pytest

from ldpmarket.problems import (
    IdempotencyConflict,
    InsufficientCredit,
    NotForSale,
    NothingToSell,
    PriceChanged,
    PurchaseConflict,
)
from market.models import Purchase
from market.purchases import execution as purchases
from market.purchases import pipeline
from market.purchases.oneshot_specs import parse_spec
from tests.factories import BinaryAttributeFactory, BuyerFactory, CategoricalAttributeFactory, UrrAttributeFactory, fund
from tests.market.api.conftest import LABELS, POLICY, contribute

pytestmark = pytest.mark.django_db


@pytest.fixture
def buyer(db):
    user = BuyerFactory()
    fund(user, "100")
    return user


@pytest.fixture
def categorical(db):
    attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=POLICY)
    contribute(attribute, LABELS * 10, ceiling="2", seed=1)
    return attribute


def chain_request(attribute, epsilon="1", **kw) -> pipeline.PurchaseRequest:
    return pipeline.PurchaseRequest(attribute=attribute, epsilon=Decimal(epsilon), cohort=None, **kw)


def test_a_chain_purchase_is_claimed_run_and_replayed(buyer, categorical):
    key = uuid.uuid4().hex
    first = pipeline.purchase_request(buyer=buyer, request=chain_request(categorical), idempotency_key=key)
    assert (first.status_code, first.purchase.status, first.purchase.included) == (201, "completed", 30)
    assert first.purchase.attempts == 1  # purchase_run marked it running once
    again = pipeline.purchase_request(buyer=buyer, request=chain_request(categorical), idempotency_key=key)
    assert (again.status_code, again.purchase.id) == (200, first.purchase.id)
    with pytest.raises(IdempotencyConflict):
        pipeline.purchase_request(buyer=buyer, request=chain_request(categorical, "0.5"), idempotency_key=key)


def test_one_shot_purchases_and_surveys_take_the_same_path(buyer):
    urr = UrrAttributeFactory(price_policy=POLICY)
    contribute(urr, ["a", "b", "c", "d", "e"] * 4, ceiling="5", seed=2)
    binary = BinaryAttributeFactory(price_policy=POLICY)
    contribute(binary, ["yes"] * 20 + ["no"] * 30, ceiling="5", seed=3)
    for attribute, spec in ((urr, parse_spec(urr, epsilon="1")),
                            (binary, parse_spec(binary, epsilon="1", mechanism="warner"))):
        outcome = pipeline.purchase_request(
            buyer=buyer, idempotency_key=uuid.uuid4().hex,
            request=pipeline.PurchaseRequest(attribute=attribute, epsilon=spec.epsilon, cohort=None, spec=spec))
        assert (outcome.status_code, outcome.purchase.status, outcome.purchase.mechanism) == (
            201, "completed", spec.mechanism)
        assert outcome.purchase.charged_epsilon == Decimal("1")
    assert Purchase.objects.get(mechanism="warner").result["n"] == 50


def test_the_quote_guard_refuses_before_anything_is_claimed(buyer, categorical):
    with pytest.raises(NothingToSell) as caught:
        pipeline.purchase_request(buyer=buyer, request=chain_request(categorical, "3"), idempotency_key="k1")
    assert caught.value.extra["candidates"] == 30 and caught.value.extra["excluded"]["ceiling"] == 30
    with pytest.raises(PriceChanged):
        pipeline.purchase_request(buyer=buyer, request=chain_request(categorical, quoted_price=Decimal("0.0001")),
                                  idempotency_key="k2")
    categorical.price_policy = {"nonsense": True}
    categorical.save()
    with pytest.raises(NotForSale):
        pipeline.purchase_request(buyer=buyer, request=chain_request(categorical), idempotency_key="k3")
    assert not Purchase.objects.exists()


def test_a_refused_run_is_recorded_as_failed_and_a_replay_runs_it_again(buyer, categorical):
    poor = BuyerFactory()
    fund(poor, "0.0001")
    with pytest.raises(InsufficientCredit):
        pipeline.purchase_request(buyer=poor, request=chain_request(categorical), idempotency_key="k")
    failed = Purchase.objects.get(buyer=poor)
    assert failed.status == "failed" and "costs" in failed.error
    fund(poor, "100")
    again = pipeline.purchase_request(buyer=poor, request=chain_request(categorical), idempotency_key="k")
    assert (again.status_code, again.purchase.id, again.purchase.status) == (200, failed.id, "completed")


def test_large_purchases_go_to_a_worker_and_a_worker_retries_conflicts_without_failing(buyer, categorical,
                                                                                       settings, monkeypatch):
    settings.LDP_ASYNC_PURCHASE_THRESHOLD = 10
    sent = []
    monkeypatch.setattr(pipeline.jobs, "enqueue", lambda name, *args: sent.append((name, args)))
    outcome = pipeline.purchase_request(buyer=buyer, request=chain_request(categorical), idempotency_key="big")
    assert outcome.status_code == 202 and sent == [(pipeline.jobs.RUN_PURCHASE, (outcome.purchase.id,))]
    assert outcome.purchase.status == "pending"

    def conflict(**kwargs):
        raise PurchaseConflict("A value was added while this purchase read its values; retry.")

    monkeypatch.setattr(purchases, "purchase_execute", conflict)
    with pytest.raises(PurchaseConflict):
        pipeline.purchase_run(purchase_id=outcome.purchase.id, conflicts_retried=True)
    assert Purchase.objects.get(id=outcome.purchase.id).status == "running"  # left for the worker's retry
    with pytest.raises(PurchaseConflict):
        pipeline.purchase_run(purchase_id=outcome.purchase.id)
    assert Purchase.objects.get(id=outcome.purchase.id).status == "failed"  # in a request: recorded
