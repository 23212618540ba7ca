"""POST/GET /api/v1/purchases/: idempotency, credit, quotes, the Celery path, listing, progress, throttling."""
from __future__ import annotations

import uuid
from decimal import Decimal

import numpy as np
import pytest
from django.db import connection

from accounts.models import MoneyAccount, MoneyEntry, Settlement
from market import selectors
from market.models import Purchase, Value
from market.purchases import progress
from market.purchases.eligibility import held_epsilons
from market.purchases.execution import fingerprint
from market.purchases.pricing import PricePolicy
from tests.factories import BuyerFactory, CategoricalAttributeFactory
from tests.market.api.conftest import POLICY, assert_problem, buy, client_for, contribute, credit, fund

pytestmark = pytest.mark.django_db


def price(n: int, epsilon: str) -> Decimal:
    return PricePolicy.parse(POLICY).price(Decimal(epsilon)) * n


def test_purchase_completes_in_the_request_and_charges_the_price(api, buyer, categorical):
    before = credit(buyer)
    r = buy(api, categorical.id, "1.5")
    assert r.status_code == 201, r.content
    body = r.json()
    assert r["Location"] == f"/api/v1/purchases/{body['id']}/"
    assert body["status"] == "completed" and body["progress"] is None
    assert body["included"] == body["candidates"] == 60
    assert body["epsilon"] == "1.500000" and body["attribute"] == categorical.id
    assert Decimal(body["price"]) == price(60, "1.5")
    assert credit(buyer) == before - price(60, "1.5")
    ids = np.array(sorted(Value.objects.filter(attribute=categorical).values_list("id", flat=True)))
    assert (held_epsilons(buyer.id, categorical, ids) == 1_500_000).all()  # upgrade credit from now on


def test_purchase_at_a_grid_point_stores_nothing_new_and_a_second_buyer_gets_the_same_outputs(
        api, buyer_b, categorical):
    first = buy(api, categorical.id, "1").json()
    assert first["new_points"] == 0  # 1.0 is a grid point below every ceiling (2): stored steps
    second = buy(client_for(buyer_b), categorical.id, "1").json()
    a = sorted(o for _, o in _outputs_by_value(first["id"]))
    b = sorted(o for _, o in _outputs_by_value(second["id"]))
    assert a == b  # one chain per value: every buyer at the same epsilon sees the same outputs


def _outputs_by_value(purchase_id):
    ids, out = selectors.all_outputs(Purchase.objects.get(id=purchase_id))
    return list(zip(ids.tolist(), out[:, 0].tolist()))


def test_idempotency_key_replay_returns_the_same_purchase_and_charges_once(api, buyer, categorical):
    key = str(uuid.uuid4())
    first = buy(api, categorical.id, "1.25", key=key)
    assert first.status_code == 201
    balance = credit(buyer)
    entries = MoneyEntry.objects.count()
    for _ in range(3):
        again = buy(api, categorical.id, "1.25", key=key)
        assert again.status_code == 200
        assert again.json() == first.json()
    # the same request written differently (number vs string, trailing zeros) is the same request
    assert buy(api, categorical.id, 1.25, key=key).json() == first.json()
    assert buy(api, categorical.id, "1.250000", key=key).json() == first.json()
    assert credit(buyer) == balance
    assert MoneyEntry.objects.count() == entries
    assert Purchase.objects.filter(buyer=buyer).count() == 1


def test_same_key_with_a_different_body_is_409(api, categorical, binary):
    key = "order-42"
    assert buy(api, categorical.id, "1", key=key).status_code == 201
    for other in ({"epsilon": "1.1"}, {"attribute": binary.id}, {"cohort": 0}):
        body = {"attribute": categorical.id, "epsilon": "1", **other}
        r = api.post("/api/v1/purchases/", body, format="json", HTTP_IDEMPOTENCY_KEY=key)
        problem = assert_problem(r, 409)
        assert "different" in problem["detail"]


def test_keys_are_per_buyer(api, buyer_b, categorical):
    assert buy(api, categorical.id, "1", key="same").status_code == 201
    assert buy(client_for(buyer_b), categorical.id, "1.5", key="same").status_code == 201


def test_missing_or_malformed_idempotency_key_is_400(api, categorical):
    r = api.post("/api/v1/purchases/", {"attribute": categorical.id, "epsilon": "1"}, format="json")
    problem = assert_problem(r, 400)
    assert "Idempotency-Key" in problem["detail"]
    for bad in ["", "x" * 256, "has space", "caf\u00e9"]:
        r = api.post("/api/v1/purchases/", {"attribute": categorical.id, "epsilon": "1"}, format="json",
                     HTTP_IDEMPOTENCY_KEY=bad)
        assert_problem(r, 400)
    assert not Purchase.objects.exists()


def test_insufficient_credit_is_402_charges_nothing_and_a_retry_after_topping_up_completes(categorical):
    poor = BuyerFactory()
    fund(poor, "0.01")
    api = client_for(poor)
    r = buy(api, categorical.id, "2", key="k1")
    problem = assert_problem(r, 402)
    assert "credit" in problem["detail"]
    purchase = Purchase.objects.get(buyer=poor)
    assert purchase.status == "failed" and purchase.error
    ids = np.array(sorted(Value.objects.filter(attribute=categorical).values_list("id", flat=True)))
    assert credit(poor) == Decimal("0.01") and not held_epsilons(poor.id, categorical, ids).any()
    assert_problem(buy(api, categorical.id, "2", key="k1"), 402)  # replayed: tried again, still short
    fund(poor, "10")
    r = buy(api, categorical.id, "2", key="k1")
    assert r.status_code == 200 and r.json()["status"] == "completed" and r.json()["id"] == purchase.id
    assert credit(poor) == Decimal("10.01") - price(60, "2")


def test_upgrade_pays_only_the_difference(api, buyer, categorical):
    buy(api, categorical.id, "1")
    before = credit(buyer)
    quote = api.post("/api/v1/quotes/", {"attribute": categorical.id, "epsilon": "1.8"}, format="json").json()
    assert Decimal(quote["price"]) == price(60, "1.8") - price(60, "1")
    assert Decimal(quote["upgrade_credit"]) == price(60, "1")
    r = buy(api, categorical.id, "1.8")
    assert Decimal(r.json()["price"]) == Decimal(quote["price"])
    assert credit(buyer) == before - Decimal(quote["price"])
    # buying again at or below what is held is free
    assert Decimal(buy(api, categorical.id, "0.5").json()["price"]) == 0


def test_purchase_from_a_quote(api, buyer, categorical):
    quote = api.post("/api/v1/quotes/", {"attribute": categorical.id, "epsilon": "0.7"}, format="json").json()
    r = api.post("/api/v1/purchases/", {"quote": quote["quote"]}, format="json", HTTP_IDEMPOTENCY_KEY="q1")
    assert r.status_code == 201
    body = r.json()
    assert body["epsilon"] == "0.700000" and body["included"] == quote["included"]
    assert body["price"] == quote["price"]
    # a quote and the explicit body it stands for are the same request for idempotency
    again = api.post("/api/v1/purchases/", {"attribute": categorical.id, "epsilon": "0.7"}, format="json",
                     HTTP_IDEMPOTENCY_KEY="q1")
    assert again.status_code == 200 and again.json() == body


def test_quotes_are_checked(api, buyer_b, categorical, settings):
    quote = api.post("/api/v1/quotes/", {"attribute": categorical.id, "epsilon": "0.7"}, format="json").json()
    token = quote["quote"]
    cases = {
        "tampered": {"quote": token[:-2] + ("AA" if not token.endswith("AA") else "BB")},
        "not a quote": {"quote": "hello"},
        "both": {"quote": token, "attribute": categorical.id, "epsilon": "1"},
    }
    for name, body in cases.items():
        r = api.post("/api/v1/purchases/", body, format="json", HTTP_IDEMPOTENCY_KEY=f"bad-{name}")
        assert_problem(r, 400)
    other = client_for(buyer_b).post("/api/v1/purchases/", {"quote": token}, format="json",
                                     HTTP_IDEMPOTENCY_KEY="stolen")
    assert "another buyer" in assert_problem(other, 400)["errors"]["quote"][0]
    made = api.post("/api/v1/purchases/", {"quote": token}, format="json", HTTP_IDEMPOTENCY_KEY="made")
    assert made.status_code == 201
    settings.LDP_QUOTE_TTL_SECONDS = -1
    expired = api.post("/api/v1/purchases/", {"quote": token}, format="json", HTTP_IDEMPOTENCY_KEY="late")
    assert "expired" in assert_problem(expired, 400)["errors"]["quote"][0]
    # a replay of the purchase made from it is still recognised after the quote expired
    replay = api.post("/api/v1/purchases/", {"quote": token}, format="json", HTTP_IDEMPOTENCY_KEY="made")
    assert replay.status_code == 200 and replay.json() == made.json()
    assert Purchase.objects.count() == 1


def test_a_quote_whose_price_went_up_is_refused(api, categorical):
    quote = api.post("/api/v1/quotes/", {"attribute": categorical.id, "epsilon": "1"}, format="json").json()
    contribute(categorical, ["red"] * 5, ceiling="2", seed=9)  # more values now: a higher total
    r = api.post("/api/v1/purchases/", {"quote": quote["quote"]}, format="json", HTTP_IDEMPOTENCY_KEY="q")
    assert_problem(r, 409)
    assert not Purchase.objects.exists()


def test_epsilon_above_every_ceiling_is_a_clear_400_and_claims_nothing(api, categorical):
    r = buy(api, categorical.id, "5")
    problem = assert_problem(r, 400)
    assert problem["excluded"]["ceiling"] == 60 and problem["excluded"]["budget"] == 0 and problem["candidates"] == 60
    assert "ceiling" in problem["detail"]
    assert not Purchase.objects.exists()


def test_attribute_with_an_invalid_price_policy_is_not_for_sale(api):
    attribute = CategoricalAttributeFactory(price_policy={"per_value": "0.01"})
    contribute(attribute, ["red", "green"], ceiling="1")
    assert_problem(buy(api, attribute.id, "0.5"), 409)
    assert_problem(api.post("/api/v1/quotes/", {"attribute": attribute.id, "epsilon": "0.5"}, format="json"), 409)
    catalog = api.get(f"/api/v1/datasets/{attribute.dataset_id}/").json()
    assert catalog["attributes"][0]["price_policy"] is None


def test_large_purchases_return_202_and_complete_in_celery(api, buyer, categorical, settings,
                                                           django_capture_on_commit_callbacks):
    settings.LDP_ASYNC_PURCHASE_THRESHOLD = 10
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        r = buy(api, categorical.id, "1.5", key="big")
    assert r.status_code == 202, r.content
    # run_purchase was enqueued on the claim's commit, and settle_earnings on the purchase's (both ran: Celery is
    # eager in tests): the owners are paid
    assert len(callbacks) == 2
    assert Settlement.objects.filter(shard=categorical.id).exists()
    assert MoneyAccount.objects.get(kind="owners_pending", shard=categorical.id).balance == 0
    assert r.json()["status"] in ("pending", "running", "completed")
    detail = api.get(r["Location"]).json()
    assert detail["status"] == "completed" and detail["included"] == 60 and detail["progress"] is None
    assert Decimal(detail["price"]) == price(60, "1.5")
    replay = buy(api, categorical.id, "1.5", key="big")
    assert replay.status_code == 200 and replay.json() == detail


def test_a_queued_purchase_shows_progress_and_a_replay_is_202(api, categorical, settings,
                                                              django_capture_on_commit_callbacks):
    settings.LDP_ASYNC_PURCHASE_THRESHOLD = 10
    with django_capture_on_commit_callbacks(execute=False) as callbacks:  # the worker has not started yet
        r = buy(api, categorical.id, "1.5", key="queued")
        assert r.status_code == 202
        body = r.json()
        assert body["status"] == "pending" and body["progress"] == {"processed": 0, "total": 60}
        progress.progress_set(body["id"], 25, 60)
        Purchase.objects.filter(id=body["id"]).update(status="running")
        detail = api.get(f"/api/v1/purchases/{body['id']}/").json()
        assert detail["status"] == "running" and detail["progress"] == {"processed": 25, "total": 60}
        assert_problem(api.get(f"/api/v1/purchases/{body['id']}/outputs/"), 409)
        assert_problem(api.get(f"/api/v1/purchases/{body['id']}/estimate/"), 409)
        # "running" but nobody holds its row (its worker was killed): a replay is 202 and sends it again.
        assert buy(api, categorical.id, "1.5", key="queued").status_code == 202
    assert len(callbacks) == 2
    for run in callbacks:  # the first copy completes it; the second finds it completed
        run()
    detail = api.get(f"/api/v1/purchases/{body['id']}/").json()
    assert detail["status"] == "completed" and Decimal(detail["price"]) == price(60, "1.5")
    assert MoneyEntry.objects.filter(purchase_id=body["id"], amount__lt=0).count() == 1  # charged once


def test_sync_purchase_reports_progress_through_the_callback(api, categorical, monkeypatch):
    seen = []
    real = progress.progress_set

    def spy(pid, processed, total):
        seen.append((processed, total))
        real(pid, processed, total)

    monkeypatch.setattr(progress, "progress_set", spy)
    buy(api, categorical.id, "1.5")
    assert seen and seen[-1] == (60, 60)


def test_list_is_the_buyers_own_with_cursor_pagination_and_filters(api, buyer, buyer_b, categorical, binary):
    mine = [buy(api, categorical.id, e).json()["id"] for e in ("0.5", "0.6", "0.7")]
    mine += [buy(api, binary.id, e).json()["id"] for e in ("0.5", "0.6")]
    theirs = buy(client_for(buyer_b), categorical.id, "0.5").json()["id"]
    seen, url = [], "/api/v1/purchases/?page_size=2"
    while url:
        page = api.get(url).json()
        assert len(page["results"]) <= 2
        seen += [p["id"] for p in page["results"]]
        url = page["next"]
    assert seen == sorted(mine, reverse=True) and theirs not in seen
    by_attribute = api.get(f"/api/v1/purchases/?attribute={binary.id}").json()["results"]
    assert sorted(p["id"] for p in by_attribute) == sorted(mine[3:])
    by_dataset = api.get(f"/api/v1/purchases/?dataset={categorical.dataset_id}").json()["results"]
    assert sorted(p["id"] for p in by_dataset) == sorted(mine[:3])
    assert len(api.get("/api/v1/purchases/?status=completed").json()["results"]) == 5
    assert api.get("/api/v1/purchases/?status=failed").json()["results"] == []
    for bad in ("status=bogus", "attribute=abc", "attribute=1.5", "attribute=99999999999999999999999", "page_size=x"):
        r = api.get(f"/api/v1/purchases/?{bad}")
        if "page_size" in bad:
            assert r.status_code == 200  # DRF ignores an unreadable page size
        else:
            assert_problem(r, 400)
    assert "cursor" in assert_problem(api.get("/api/v1/purchases/?cursor=garbage"), 400)["errors"]


def test_throttled_purchases_and_quotes_are_429_problems(api, categorical, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {
        **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "quote": "2/minute", "purchase": "1/minute"}}
    body = {"attribute": categorical.id, "epsilon": "1"}
    assert api.post("/api/v1/quotes/", body, format="json").status_code == 200
    assert api.post("/api/v1/quotes/", body, format="json").status_code == 200
    r = api.post("/api/v1/quotes/", body, format="json")
    assert_problem(r, 429)
    assert int(r["Retry-After"]) >= 1
    assert buy(api, categorical.id, "1").status_code == 201
    assert_problem(buy(api, categorical.id, "1"), 429)
    assert api.get("/api/v1/purchases/").status_code == 200  # reads are not in the purchase scope


def test_anonymous_and_user_rates_apply(categorical, buyer, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {
        **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "anon": "1/minute", "user": "2/minute"}}
    anon = client_for(None)  # permissions come before throttles: anonymous calls meet the rate at the token endpoint
    wrong = {"username": buyer.username, "password": "wrong"}
    assert_problem(anon.post("/api/v1/auth/token/", wrong, format="json"), 400)
    assert_problem(anon.post("/api/v1/auth/token/", wrong, format="json"), 429)
    api = client_for(buyer)
    assert api.get("/api/v1/datasets/").status_code == 200
    assert api.get("/api/v1/datasets/").status_code == 200
    assert_problem(api.get("/api/v1/datasets/"), 429)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_replay_while_the_purchase_runs_is_409_in_flight(categorical):
    """Another connection holds the purchase row (as purchase_execute does while running): the replay says so."""
    import threading

    from django.db import connections, transaction

    buyer = BuyerFactory()
    fund(buyer, "100")
    api = client_for(buyer)
    claimed = Purchase.objects.create(buyer=buyer, attribute=categorical, epsilon=Decimal("1"), cohort=None,
                                      idempotency_key="busy", status="running",
                                      request_hash=fingerprint(attribute_id=categorical.id,
                                                               epsilon=Decimal("1.000000"), cohort=None))
    locked, release = threading.Event(), threading.Event()

    def hold():
        try:
            with transaction.atomic():
                list(Purchase.objects.select_for_update().filter(id=claimed.id))
                locked.set()
                release.wait(30)
        finally:
            connections.close_all()

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert locked.wait(30)
        problem = assert_problem(buy(api, categorical.id, "1", key="busy"), 409)
        assert "in flight" in problem["detail"]
    finally:
        release.set()
        t.join()
    assert connection.vendor == "postgresql"
    r = buy(api, categorical.id, "1", key="busy")  # no longer held: the stalled claim is run now
    assert r.status_code == 200 and r.json()["status"] == "completed"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_replays_charge_once_and_agree():
    """Eight clients send the same purchase with the same key at once: one purchase, one charge, no 5xx."""
    import threading

    from django.db import connections

    from tests.factories import CategoricalAttributeFactory

    attribute = CategoricalAttributeFactory(labels=["red", "green", "blue"], price_policy=POLICY)
    contribute(attribute, ["red", "green", "blue"] * 100, ceiling="2")
    buyer = BuyerFactory()
    fund(buyer, "100")
    start, results = threading.Barrier(8), []

    def send():
        try:
            client = client_for(buyer)
            start.wait(10)
            r = buy(client, attribute.id, "1.5", key="together")
            results.append((r.status_code, r.json()))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    codes = sorted(code for code, _ in results)
    assert len(results) == 8 and set(codes) <= {200, 201, 409}, codes
    assert codes.count(201) == 1
    completed = [body for code, body in results if code in (200, 201)]
    assert all(body == completed[0] for body in completed[1:])
    assert all(body["detail"].startswith("A purchase with this Idempotency-Key is still in flight")
               for code, body in results if code == 409)
    assert Purchase.objects.filter(buyer=buyer).count() == 1
    assert credit(buyer) == Decimal("100") - price(300, "1.5")
    final = buy(client_for(buyer), attribute.id, "1.5", key="together")
    assert final.status_code == 200 and final.json() == completed[0]


def test_chain_purchases_report_their_guarantee_and_charged_epsilon_like_one_shot_ones(api, categorical):
    """Issue 13: a chain purchase said ``guarantee: ""`` and ``charged_epsilon: null`` where a one-shot purchase
    says what it guarantees and charges; both now report them (a chain releases epsilon-LDP outputs at its epsilon)."""
    quoted = api.post("/api/v1/quotes/", {"attribute": categorical.id, "epsilon": "1.5"}, format="json").json()
    assert (quoted["guarantee"], quoted["charged_epsilon"], quoted["guarantee_label"]) == (
        "ldp", "1.500000", "epsilon-LDP")
    bought = buy(api, categorical.id, "1.5")
    assert bought.status_code == 201, bought.content
    body = bought.json()
    assert (body["mechanism"], body["guarantee"], body["charged_epsilon"], body["guarantee_label"]) == (
        "gradual_rr", "ldp", "1.500000", "epsilon-LDP")
    assert api.get(f"/api/v1/purchases/{body['id']}/").json()["charged_epsilon"] == "1.500000"
    listed = api.get("/api/v1/purchases/").json()["results"][0]
    assert (listed["guarantee"], listed["charged_epsilon"]) == ("ldp", "1.500000")
    stored = Purchase.objects.get(id=body["id"])  # the stored row is unchanged: the database's rules hold
    assert (stored.guarantee, stored.charged_epsilon) == ("", None)
