"""ldpmarket_client.Client against a live server: sign-in, catalog, quotes, idempotent purchases, 429 retries
after Retry-After, waiting for 202 purchases, outputs as a DataFrame, estimates, typed problems, money."""
from __future__ import annotations

import threading
import uuid
from decimal import Decimal

import pytest
from django.db import connections

from accounts.models import MoneyAccount
from ldpmarket_client import ProblemError, errors
from market.models import Purchase
from tests.client.conftest import make_buyer, statuses


def credit(user) -> Decimal:
    return MoneyAccount.objects.get(user=user, kind=MoneyAccount.Kind.BUYER_CREDIT).balance


def test_password_and_token_sign_in_and_the_catalog(live_server, buyer, categorical, client_for):
    client = client_for(buyer)
    assert client.token and client.token_expiry
    names = [a["id"] for d in client.datasets() for a in d["attributes"]]
    assert categorical.id in names
    # The token alone signs in, from a new client (as LDPMARKET_TOKEN does).
    again = client_for(token=client.token, url=live_server.url + "/api/v1")
    assert again.dataset(categorical.dataset_id)["id"] == categorical.dataset_id
    client.logout()
    with pytest.raises(errors.Unauthorized) as caught:
        again.datasets()
    assert caught.value.status == 401


def test_wrong_password_is_a_typed_problem(live_server, buyer, client_for):
    with pytest.raises(ProblemError) as caught:
        client_for(buyer, password="wrong")
    exc = caught.value
    assert exc.status == 400 and exc.detail
    assert type(exc) is errors.problem_class(exc.type, exc.status) and type(exc) is not ProblemError
    assert exc.request_id and exc.request_id == exc.body["request_id"]  # the service's id of the request


def test_quote_then_buy_with_the_quote_and_the_key_is_sent_once_per_purchase(buyer, categorical, client_for):
    client = client_for(buyer)
    quote = client.quote(categorical.id, 0.5)
    assert quote["included"] == 30
    seen = statuses(client)
    purchase = client.buy(quote=quote["quote"])
    assert purchase["status"] == "completed" and purchase["included"] == 30
    assert uuid.UUID(purchase["idempotency_key"]).version == 4  # the client made the key
    assert Decimal(purchase["price"]) == Decimal(quote["price"])
    assert seen == [("POST", "/api/v1/purchases/", 201)]
    # The same key again is the same purchase, charged once.
    before = credit(buyer)
    replay = client.buy(quote=quote["quote"], idempotency_key=purchase["idempotency_key"])
    assert replay["id"] == purchase["id"] and credit(buyer) == before
    assert Purchase.objects.filter(buyer=buyer).count() == 1


def test_outputs_as_a_dataframe_and_the_estimate(buyer, categorical, client_for):
    client = client_for(buyer)
    purchase = client.buy(categorical.id, "0.5")
    frame = client.outputs(purchase["id"])
    assert list(frame.columns) == ["pseudonym", "epsilon", "output"]
    assert len(frame) == 30 and set(frame["output"]) <= {"red", "green", "blue"}
    assert str(frame["output"].dtype) == "string"
    estimate = client.estimate(purchase["id"])
    assert estimate["n"] == 30 and {f["label"] for f in estimate["frequencies"]} == {"red", "green", "blue"}


def test_error_answers_are_typed_problems(live_server, buyer, categorical, client_for):
    client = client_for(buyer)
    with pytest.raises(errors.InvalidInput) as caught:
        client.quote(categorical.id, "not-a-number")
    assert "epsilon" in caught.value.errors and caught.value.status == 400
    with pytest.raises(errors.NothingToSell) as caught:
        client.buy(categorical.id, "5")  # above every value's ceiling of 2
    assert caught.value.body["excluded"]
    with pytest.raises(errors.NotFound):
        client.purchase(999999)
    key = str(uuid.uuid4())
    client.buy(categorical.id, "0.5", idempotency_key=key)
    with pytest.raises(errors.IdempotencyConflict) as caught:
        client.buy(categorical.id, "0.6", idempotency_key=key)
    assert caught.value.status == 409 and caught.value.type.endswith("/idempotency-conflict")
    poor = client_for(make_buyer(credit="0.01"))
    with pytest.raises(errors.InsufficientCredit) as caught:
        poor.buy(categorical.id, "1")
    assert caught.value.status == 402 and "credit" in caught.value.detail.lower()
    with pytest.raises(errors.Unauthorized):
        client_for(token="not-a-token").datasets()


def test_429_is_retried_after_retry_after(settings, buyer, categorical, client_for, sleeps):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {
        **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "purchase": "1/second"}}
    # Bounded: without retries left the 429 is raised, with its Retry-After.
    impatient = client_for(buyer, max_retries=0)
    impatient.buy(categorical.id, "0.7")
    with pytest.raises(errors.TooManyRequests) as caught:
        impatient.buy(categorical.id, "0.8")
    assert caught.value.status == 429 and caught.value.retry_after >= 1
    assert not sleeps[0]
    # With retries: each purchase within the second gets a 429 and is sent again after Retry-After.
    client = client_for(buyer)
    seen = statuses(client)
    first = client.buy(categorical.id, "0.3")
    second = client.buy(categorical.id, "0.6")
    assert first["status"] == second["status"] == "completed" and first["id"] != second["id"]
    assert ("POST", "/api/v1/purchases/", 429) in seen and seen[-1] == ("POST", "/api/v1/purchases/", 201)
    assert sleeps[0] and all(1 <= s <= 2 for s in sleeps[0])  # Retry-After: 1
    assert Purchase.objects.filter(buyer=buyer).count() == 3  # one each, retries included
    # A Retry-After longer than max_retry_wait is not waited for.
    with pytest.raises(errors.TooManyRequests):
        client_for(buyer, max_retry_wait=0.5).buy(categorical.id, "0.9")


@pytest.fixture
def slow_worker(monkeypatch):
    """Background purchases start ``delay`` seconds after the 202 answer, in another thread (as a worker would),
    instead of at once (Celery is eager in the tests)."""
    from celery import signature

    from ldpmarket import jobs

    timers = []
    state = {"delay": 2.0}  # well beyond a first poll on a busy machine (0.6 s once lost the race in CI load)

    def enqueue(task_name, *args):
        def run():
            try:
                signature(task_name, args=args).delay()
            finally:
                connections.close_all()

        timer = threading.Timer(state["delay"], run)
        timers.append(timer)
        timer.start()

    monkeypatch.setattr(jobs, "enqueue", enqueue)
    yield state
    for timer in timers:
        timer.join()


def test_a_202_purchase_is_waited_for_with_progress(settings, buyer, categorical, client_for, slow_worker,
                                                    sleeps, capsys):
    settings.LDP_ASYNC_PURCHASE_THRESHOLD = 5
    client = client_for(buyer, poll_interval=0.1, progress=True)
    seen = statuses(client)
    purchase = client.buy(categorical.id, "0.5")
    assert purchase["status"] == "completed" and purchase["included"] == 30
    assert seen[0] == ("POST", "/api/v1/purchases/", 202)
    polls = [s for s in seen[1:] if s == ("GET", f"/api/v1/purchases/{purchase['id']}/", 200)]
    assert len(polls) == len(seen) - 1 >= 2 and sleeps[0]
    assert f"purchase {purchase['id']}" in capsys.readouterr().err  # the progress bar
    assert len(client.outputs(purchase["id"])) == 30


def test_waiting_has_a_timeout_and_can_be_resumed(settings, buyer, categorical, client_for, slow_worker):
    settings.LDP_ASYNC_PURCHASE_THRESHOLD = 5
    slow_worker["delay"] = 1.5
    client = client_for(buyer, poll_interval=0.1)
    with pytest.raises(errors.WaitTimeout) as caught:
        client.buy(categorical.id, "0.5", timeout=0.2)
    running = caught.value.purchase
    assert running["status"] in ("pending", "running")
    assert client.wait(running["id"])["status"] == "completed"


def test_the_plain_progress_line_without_tqdm(monkeypatch, settings, buyer, categorical, client_for, slow_worker,
                                             capsys):
    import builtins

    real_import = builtins.__import__

    def no_tqdm(name, *args, **kwargs):
        if name.startswith("tqdm"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    settings.LDP_ASYNC_PURCHASE_THRESHOLD = 5
    purchase = client_for(buyer, poll_interval=0.1, progress=True).buy(categorical.id, "0.5")
    err = capsys.readouterr().err
    assert f"purchase {purchase['id']}: 0/30 values (0%)" in err and f"purchase {purchase['id']}: completed" in err


def test_account_and_statement(buyer, categorical, client_for):
    client = client_for(buyer)
    account = client.account()
    assert account["kind"] == "buyer_credit" and len(account["currency"]) == 3
    assert Decimal(account["balance"]) == Decimal("100")
    purchase = client.buy(categorical.id, "0.5")
    after = client.account()
    assert Decimal(after["balance"]) == Decimal("100") - Decimal(purchase["price"])
    statement = client.statement()
    newest = statement[0]
    assert newest["kind"] == "purchase" and newest["purchase"] == purchase["id"]
    assert Decimal(newest["amount"]) == -Decimal(purchase["price"])
    assert newest["balance_after"] == after["balance"]
    assert [e["id"] for e in statement] == sorted((e["id"] for e in statement), reverse=True)
    assert client.statement(until="2000-01-01T00:00:00Z") == []
