"""The sweeper (market.sweeper) and best-effort progress, in-process (Celery eager).

What is stranded and what is not: a purchase pending or running that nobody holds, with an old heartbeat, is
sent again (failed after ``LDP_PURCHASE_MAX_ATTEMPTS`` starts); one with a fresh heartbeat, one a worker holds
(its row locked), a completed or failed one are left alone.  An attribute with a chain that could grow since
long and no extension running gets its extension sent again, at most once per staleness window.  The real-
worker versions (a SIGKILLed worker, beat) are in ``test_stranded.py``.
"""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from decimal import Decimal

import numpy as np
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from accounts.models import BudgetAccount, LedgerEntry, MoneyAccount, MoneyEntry
from market import selectors, sweeper
from market.chains.extension import chains_extend, extension_lock_key
from market.models import Purchase, Value
from market.purchases import progress
from market.purchases.execution import purchase_claim
from market.purchases.pricing import DEFAULT_POLICY
from market.tasks import run_purchase
from tests.factories import (
    BuyerFactory,
    CategoricalAttributeFactory,
    chain_head,
    chain_heads,
    contribute,
    fund,
    replace_chain,
    stored_chains,
)
from tests.workerproc import RowLock, wait_until

LABELS = ["red", "green", "blue"]


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"recovery-tests-{uuid.uuid4()}"}}


def market(n: int = 30):
    attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=DEFAULT_POLICY)
    values = contribute(attribute, (LABELS * n)[:n], ceiling="2")
    buyer = BuyerFactory()
    fund(buyer, "100")
    return attribute, values, buyer


def claim(buyer, attribute, epsilon="1.5") -> Purchase:
    return purchase_claim(buyer=buyer, attribute=attribute, epsilon=epsilon, cohort=None,
                          idempotency_key=uuid.uuid4().hex)[0]


def later(seconds: float = 0) -> datetime:
    """A cutoff past the staleness window of everything made now."""
    return timezone.now() + timedelta(seconds=1 + seconds)


def stale() -> datetime:
    """A heartbeat (or budget change) older than the staleness window."""
    return timezone.now() - timedelta(seconds=settings.LDP_STALE_AFTER_SECONDS + 5)


def charged(purchase) -> list[Decimal]:
    return list(MoneyEntry.objects.filter(purchase=purchase, amount__lt=0).values_list("amount", flat=True))


# ---------------------------------------------------------------------------------------------- purchases

@pytest.mark.django_db
def test_a_stranded_purchase_is_sent_again_and_completes_once(django_capture_on_commit_callbacks):
    attribute, _, buyer = market()
    purchase = claim(buyer, attribute)
    Purchase.objects.filter(id=purchase.id).update(status=Purchase.Status.RUNNING, attempts=1,
                                                   heartbeat_at=stale())  # its worker died
    lost = claim(buyer, attribute, "1.7")
    Purchase.objects.filter(id=lost.id).update(heartbeat_at=stale())  # pending: its message was lost
    fresh = claim(buyer, attribute, "1.6")  # claimed just now: its task may still be on its way
    other = BuyerFactory()
    fund(other, "100")
    done = claim(other, attribute, "1.8")
    run_purchase.delay(done.id)
    Purchase.objects.filter(id=done.id).update(heartbeat_at=stale())
    failed = claim(buyer, attribute, "1.9")
    Purchase.objects.filter(id=failed.id).update(status=Purchase.Status.FAILED, heartbeat_at=stale())
    with django_capture_on_commit_callbacks(execute=True) as sent:
        report = sweeper.sweep()
    # the two purchases sent again, and (run eagerly here) the settlement of its owners' earnings each one starts
    assert report.resumed == [purchase.id, lost.id] and report.failed == [] and len(sent) == 4
    purchase.refresh_from_db()
    assert purchase.status == Purchase.Status.COMPLETED and purchase.attempts == 2
    assert len(charged(purchase)) == 1 and LedgerEntry.objects.filter(purchase=purchase).count() == 30
    assert Purchase.objects.get(id=lost.id).status == Purchase.Status.COMPLETED
    assert Purchase.objects.get(id=fresh.id).status == Purchase.Status.PENDING
    assert Purchase.objects.get(id=failed.id).status == Purchase.Status.FAILED
    assert len(charged(done)) == 1
    # sent again, its heartbeat was renewed: a second sweep finds nothing, even if the copy never ran
    Purchase.objects.filter(id=purchase.id).update(status=Purchase.Status.RUNNING)
    with django_capture_on_commit_callbacks(execute=True) as sent:
        assert sweeper.sweep().resumed == []
    assert sent == [] and len(charged(purchase)) == 1


@pytest.mark.django_db
def test_a_purchase_started_too_often_is_failed_and_nothing_is_charged(django_capture_on_commit_callbacks):
    attribute, _, buyer = market()
    purchase = claim(buyer, attribute)
    Purchase.objects.filter(id=purchase.id).update(status=Purchase.Status.RUNNING, heartbeat_at=stale(),
                                                   attempts=settings.LDP_PURCHASE_MAX_ATTEMPTS)
    balance = MoneyAccount.objects.get(user=buyer).balance
    with django_capture_on_commit_callbacks(execute=True) as sent:
        report = sweeper.sweep()
    assert report.failed == [purchase.id] and report.resumed == [] and sent == []
    purchase.refresh_from_db()
    assert purchase.status == Purchase.Status.FAILED
    assert f"started {settings.LDP_PURCHASE_MAX_ATTEMPTS} times" in purchase.error
    assert "Idempotency-Key" in purchase.error
    assert charged(purchase) == [] and MoneyAccount.objects.get(user=buyer).balance == balance
    assert not LedgerEntry.objects.filter(purchase=purchase).exists()
    # the client's retry with the same key runs it again (a replay of a failed purchase)
    client = Client()
    client.force_login(buyer)
    r = client.post("/api/v1/purchases/", {"attribute": attribute.id, "epsilon": "1.5"},
                    content_type="application/json", HTTP_IDEMPOTENCY_KEY=purchase.idempotency_key)
    assert r.status_code == 200 and r.json()["status"] == "completed"
    assert len(charged(purchase)) == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_purchase_a_worker_holds_is_not_stranded_however_old(django_capture_on_commit_callbacks):
    attribute, _, buyer = market()
    purchase = claim(buyer, attribute)
    Purchase.objects.filter(id=purchase.id).update(status=Purchase.Status.RUNNING, attempts=1,
                                                   heartbeat_at=timezone.now() - timedelta(days=1))
    with RowLock(f"SELECT id FROM {Purchase._meta.db_table} WHERE id = %s FOR UPDATE", [purchase.id]):
        with django_capture_on_commit_callbacks(execute=True) as sent:
            report = sweeper.sweep()
        assert report.resumed == report.failed == [] and sent == []
    assert Purchase.objects.get(id=purchase.id).status == Purchase.Status.RUNNING


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_copy_of_a_purchase_another_worker_executes_returns_at_once():
    """Issue 27 (recovery time): the short staleness window is safe because a copy of a purchase that another
    transaction is executing neither waits for it nor counts an attempt; the old task blocked on the row for as
    long as the first copy ran (here: until the lock is released, 5 s later)."""
    import threading
    import time

    attribute, _, buyer = market()
    purchase = claim(buyer, attribute)
    lock = RowLock(f"SELECT id FROM {Purchase._meta.db_table} WHERE id = %s FOR UPDATE", [purchase.id])
    threading.Timer(5.0, lock.release).start()
    t0 = time.perf_counter()
    status = run_purchase.apply(args=[purchase.id]).result  # the task's body, in this process
    took = time.perf_counter() - t0
    lock.release()
    assert took < 2.0 and status == "pending", (took, status)
    assert Purchase.objects.get(id=purchase.id).attempts == 0
    assert run_purchase.apply(args=[purchase.id]).result == "completed"  # once nobody holds it, a copy runs it


@pytest.mark.django_db
def test_a_worker_start_counts_the_attempt_and_renews_the_heartbeat():
    attribute, _, buyer = market()
    purchase = claim(buyer, attribute)
    Purchase.objects.filter(id=purchase.id).update(heartbeat_at=timezone.now() - timedelta(days=1))
    assert run_purchase.delay(purchase.id).get() == "completed"
    purchase.refresh_from_db()
    assert purchase.attempts == 1 and timezone.now() - purchase.heartbeat_at < timedelta(minutes=1)


@pytest.mark.django_db
def test_the_command_sweeps_and_says_what_it_did(capsys, django_capture_on_commit_callbacks):
    attribute, _, buyer = market()
    purchase = claim(buyer, attribute)
    Purchase.objects.filter(id=purchase.id).update(heartbeat_at=stale())
    with django_capture_on_commit_callbacks(execute=True):
        call_command("sweep_stranded")
    out = capsys.readouterr().out
    assert f"purchases sent again: [{purchase.id}]" in out and "extensions sent again: none" in out
    assert Purchase.objects.get(id=purchase.id).status == Purchase.Status.COMPLETED


# ---------------------------------------------------------------------------------------------- extension

@pytest.mark.django_db
def test_a_stranded_extension_is_sent_again_once_per_window(django_capture_on_commit_callbacks):
    attribute, values, _ = market(12)
    grown, stuck, early = values[:4], values[4:8], values[8:]
    BudgetAccount.objects.filter(value__in=grown).update(ceiling=Decimal("2.5"), updated_at=stale())  # 2 -> 2.5
    # no grid point in (2, 2.05]: nothing to grow
    BudgetAccount.objects.filter(value__in=stuck).update(ceiling=Decimal("2.05"), updated_at=stale())
    BudgetAccount.objects.filter(value__in=early).update(ceiling=Decimal("2.5"))  # raised just now
    assert sweeper.stranded_extensions(cutoff=stale() - timedelta(minutes=1)) == []  # not for that long
    with django_capture_on_commit_callbacks(execute=False) as sent:
        assert sweeper.sweep().extensions == [attribute.id]
        assert sweeper.sweep().extensions == []  # sent less than a window ago: not again
    assert len(sent) == 1
    sent[0]()  # the extension runs
    heads = {v: h for v, (h, _) in chain_heads(Value.objects.filter(attribute=attribute)).items()}
    assert {heads[v.id] for v in grown + early} == {Decimal("2.5")}
    assert {heads[v.id] for v in stuck} == {Decimal("2")}
    # nothing is left that could grow: no extension sent, whatever the window
    assert sweeper.stranded_extensions(cutoff=later(3600)) == []


@pytest.mark.django_db
def test_chains_that_cannot_grow_are_not_stranded():
    attribute, values, _ = market(6)
    BudgetAccount.objects.filter(value__in=values[:3]).update(ceiling=Decimal("2.09"))  # below the next point
    stored = stored_chains(attribute)
    for v in values[3:]:  # a point at the grid's end (its stop): the head is there
        eps, out = stored[v.id]
        replace_chain(v, np.append(eps, 10_000_000), np.vstack([out, out[-1:]]))
        assert chain_head(v) == (Decimal("10"), eps.size + 1)
    BudgetAccount.objects.filter(value__in=values[3:]).update(ceiling=Decimal("20"))
    assert sweeper.stranded_extensions(cutoff=later(3600)) == []
    BudgetAccount.objects.filter(value__in=values[:1]).update(ceiling=Decimal("2.1"))
    assert sweeper.stranded_extensions(cutoff=later(3600)) == [attribute.id]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_attribute_being_extended_is_not_stranded(django_capture_on_commit_callbacks):
    attribute, values, _ = market(6)
    BudgetAccount.objects.filter(value__attribute=attribute).update(ceiling=Decimal("3"))
    key = extension_lock_key(attribute.id)
    with RowLock("SELECT pg_advisory_lock_shared(%s, %s)", key):  # another session is extending it
        assert sweeper.extensions_running() >= {key[1]}
        with django_capture_on_commit_callbacks(execute=True) as sent:
            assert sweeper.sweep(now=later()).extensions == []
        assert sent == []
    # the other session has closed; the server drops its session lock as it ends that session (not at once)
    wait_until(lambda: key[1] not in sweeper.extensions_running(), timeout=10,
               message=lambda: "the closed session's lock is still held")
    assert sweeper.stranded_extensions(cutoff=later()) == [attribute.id]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_extension_holds_its_lock_while_it_runs_and_releases_it():
    from market.chains import extension  # noqa: I001 (patched below)

    attribute, values, _ = market(6)
    BudgetAccount.objects.filter(value__attribute=attribute).update(ceiling=Decimal("3"))
    seen = []
    real = extension._extend_batch

    def spy(*args, **kwargs):
        seen.append(sweeper.extensions_running())
        return real(*args, **kwargs)

    extension._extend_batch = spy
    try:
        assert chains_extend(attribute_id=attribute.id) == 6
    finally:
        extension._extend_batch = real
    assert seen and all(extension_lock_key(attribute.id)[1] in s for s in seen)
    assert extension_lock_key(attribute.id)[1] not in sweeper.extensions_running()
    with connection.cursor() as cur:  # no lock left in this session either
        cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
        assert cur.fetchone()[0] == 0


# ------------------------------------------------------------------------------------ best-effort progress

class Unreachable:
    """A cache whose every call fails as an unreachable Redis does."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            from redis.exceptions import ConnectionError

            raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

        return fail


@pytest.mark.django_db
def test_progress_errors_never_fail_a_purchase(monkeypatch):
    attribute, _, buyer = market()
    monkeypatch.setattr(selectors, "cache", Unreachable())  # progress reads
    monkeypatch.setattr(progress, "cache", Unreachable())  # progress writes
    purchase = claim(buyer, attribute)
    assert run_purchase.delay(purchase.id).get() == "completed"  # the task reports progress at every phase
    assert selectors.progress_get(purchase.id) is None
    client = Client(raise_request_exception=False)
    client.force_login(buyer)
    r = client.post("/api/v1/purchases/", {"attribute": attribute.id, "epsilon": "1.6"},
                    content_type="application/json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
    assert r.status_code == 201 and r.json()["status"] == "completed", r.content[:300]
    assert client.get(f"/api/v1/purchases/{purchase.id}/").status_code == 200
