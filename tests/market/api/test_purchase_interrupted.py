"""A synchronous purchase hit by a database failure (issue 27, docs/errors.md `purchase-interrupted`).

The red team killed PostgreSQL backends while purchases ran in the request: the buyer got a 500 with no id, and
the sweeper later completed and charged the purchase the buyer did not know about.  Now the buyer gets a 503
with ``Retry-After``, the purchase's ``Location`` and id, nothing is charged by the failed attempt, and a retry
with the same Idempotency-Key completes it once.  The failure here is real: the purchase's own backend is
terminated by ``pg_terminate_backend`` in the middle of its transaction.
"""
from __future__ import annotations

import uuid

import pytest
from django.db import connection

from accounts.models import MoneyEntry
from market.models import Purchase
from market.purchases import execution as purchases
from tests.market.api.conftest import PROBLEM, buy, credit

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_a_database_failure_mid_purchase_is_a_503_with_the_purchase_and_a_retry_charges_once(
        api, buyer, categorical, monkeypatch):
    real_execute = purchases.purchase_execute
    kills = []

    def execute_then_lose_the_database(**kwargs):
        if not kills:
            kills.append(kwargs["purchase_id"])
            with connection.cursor() as cursor:  # the purchase's own connection dies, as in a backend-kill storm
                cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return real_execute(**kwargs)

    monkeypatch.setattr(purchases, "purchase_execute", execute_then_lose_the_database)
    before = credit(buyer)
    key = uuid.uuid4().hex

    response = buy(api, categorical.id, "0.5", key=key)
    assert response.status_code == 503, response.content[:500]
    assert response["Content-Type"] == PROBLEM
    body = response.json()
    assert body["type"].endswith("/purchase-interrupted")
    assert int(response["Retry-After"]) > 0
    assert body["purchase"] == kills[0]
    assert response["Location"] == f"/api/v1/purchases/{kills[0]}/"
    connection.close()  # the test's own view of the (killed) connection; the next request reconnects
    purchase = Purchase.objects.get(id=kills[0])
    assert purchase.status != Purchase.Status.COMPLETED
    assert credit(buyer) == before  # nothing charged by the interrupted attempt
    assert api.get(response["Location"]).status_code == 200  # the buyer can follow it

    retry = buy(api, categorical.id, "0.5", key=key)
    assert retry.status_code in (200, 201), retry.content[:500]
    assert retry.json()["id"] == kills[0] and retry.json()["status"] == "completed"
    again = buy(api, categorical.id, "0.5", key=key)
    assert again.status_code == 200 and again.json()["id"] == kills[0]
    charges = MoneyEntry.objects.filter(account__user=buyer, amount__lt=0)
    assert charges.count() == 1
    assert credit(buyer) == before + charges.get().amount
