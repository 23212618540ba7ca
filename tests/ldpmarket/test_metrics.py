"""GET /metrics (issue 30 item 2; docs/operations.md#metrics): the service's figures, exact after real purchases;
the invariant gauges when a row is broken; who may read them; the Celery workers' endpoint and task run times.
The gunicorn multiprocess test is in test_metrics_gunicorn.py, the alert rules' tests in test_metrics_rules.py."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from decimal import Decimal

import numpy as np
import pytest
import time_machine
from django.db import connection, transaction
from django.test import Client
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from accounts.ledger.checkpoints import blocks_awaiting_checkpoint, checkpoint_make
from accounts.models import BudgetAccount, LedgerWitness, User
from accounts.roles import grant_role
from accounts.services import budget_set_ceiling
from audit import metrics as figures
from audit.overview import overview
from ldpmarket import metrics as plumbing
from market.chains.extension import chains_extend
from market.models import Purchase
from market.purchases.execution import purchase_claim, purchase_execute, purchase_fail
from market.values.services import value_delete_raw
from tests.audit.conftest import buy
from tests.factories import (
    PASSWORD,
    BinaryAttributeFactory,
    BuyerFactory,
    CategoricalAttributeFactory,
    GraphAttributeFactory,
    StaffFactory,
    UrrAttributeFactory,
    contribute,
)
from tests.market.oneshot_helpers import POLICY, funded_buyer, run, values

REMOTE = "203.0.113.7"
TOKEN = "metrics-token-Zq8vX2mLk9wR4tYbN7cJd1FgH5uE0aQs"


@pytest.fixture(autouse=True)
def every_scrape_computes(settings):
    """The figures that scan every value are computed at each scrape here (their reuse has its own test)."""
    settings.LDP_METRICS_SCAN_INTERVAL_SECONDS = 0


def scrape(client: Client | None = None, **extra) -> dict[tuple[str, tuple], float]:
    """GET /metrics (from loopback unless told), parsed: ``(sample name, sorted labels) -> value``."""
    response = (client or Client()).get("/metrics", **extra)
    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples, name: str, **labels) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def collectors_up(samples) -> dict[str, float]:
    return {dict(k[1])["collector"]: v for k, v in samples.items() if k[0] == "ldpmarket_collector_up"}


# ------------------------------------------------------------------------------------------- the figures

@pytest.fixture
def market(db):
    """Real purchases through the services: a chain purchase, two one-shot purchases, two surveys, a pending
    purchase and a failed one."""
    rng = np.random.default_rng(30)
    buyer = funded_buyer()
    urr = UrrAttributeFactory(price_policy=POLICY)
    values(urr, ["a", "b", "c", "d", "e"] * 4, ceiling="3")
    graph = GraphAttributeFactory(price_policy=POLICY)
    values(graph, [{"0": 0.5}, {"1": -1}, {}] * 3, ceiling="3")
    binary = BinaryAttributeFactory(price_policy=POLICY)
    values(binary, ["yes"] * 20 + ["no"] * 30, ceiling="3")
    done = [buy(buyer, binary, "0.5", rng),
            run(buyer, urr, epsilon="1", rng=rng),
            run(buyer, graph, eps1="1", eps2="1", rng=rng),
            run(buyer, binary, mechanism="warner", epsilon="0.5", rng=rng),
            run(buyer, binary, mechanism="improved_christofides", epsilon="1", p2="0.1", rng=rng)]
    pending, _ = purchase_claim(buyer=buyer, attribute=binary, epsilon=Decimal("1.5"), cohort=None,
                                idempotency_key=uuid.uuid4().hex)
    failed, _ = purchase_claim(buyer=buyer, attribute=binary, epsilon=Decimal("2"), cohort=None,
                               idempotency_key=uuid.uuid4().hex)
    purchase_fail(purchase_id=failed.id, error="refused for the test")
    return {"done": done, "pending": pending, "failed": failed, "binary": binary}


def test_business_figures_are_exact_after_real_purchases(market):
    done = market["done"]
    assert all(p.status == Purchase.Status.COMPLETED for p in done)
    samples = scrape()
    assert set(collectors_up(samples).values()) == {1.0}, collectors_up(samples)
    by = {(s, m): value(samples, "ldpmarket_purchases_total", status=s, mechanism=m)
          for s in Purchase.Status.values for m in Purchase.Mechanism.values}
    expected = {(s, m): 0 for s in Purchase.Status.values for m in Purchase.Mechanism.values}
    for p in Purchase.objects.all():
        expected[(p.status, p.mechanism)] += 1
    assert by == expected
    assert by[("completed", "gradual_rr")] == 1 and by[("completed", "urr")] == 1 and by[("completed", "lpp")] == 1
    assert by[("completed", "warner")] == 1 and by[("completed", "improved_christofides")] == 1
    assert by[("pending", "gradual_rr")] == 1 and by[("failed", "gradual_rr")] == 1
    # values released: 50 by the chain purchase, 20 uRR, 9 LPP, 50 and 50 by the two surveys
    assert [p.included for p in done] == [50, 20, 9, 50, 50]
    assert value(samples, "ldpmarket_values_released_total") == 179
    revenue = sum((p.price for p in done), Decimal(0))
    assert revenue > 0
    assert value(samples, "ldpmarket_revenue_total", currency="EUR") == float(revenue)
    # the console's overview shows the same figures
    stats = overview().stats
    assert stats["completed purchases"] == sum(v for (s, _), v in by.items() if s == "completed") == 5
    assert stats["values released"] == 179
    assert Decimal(str(stats["revenue"])) == revenue
    assert value(samples, "ldpmarket_budget_violations") == 0


def test_a_completed_purchase_moves_the_counters(market):
    before = scrape()
    purchase_execute(purchase_id=market["pending"].id, rng=np.random.default_rng(1))
    after = scrape()
    done = Purchase.objects.get(id=market["pending"].id)
    assert done.status == Purchase.Status.COMPLETED and done.included == 50
    key = {"mechanism": "gradual_rr"}
    assert value(after, "ldpmarket_purchases_total", status="completed", **key) == \
        value(before, "ldpmarket_purchases_total", status="completed", **key) + 1
    assert value(after, "ldpmarket_purchases_total", status="pending", **key) == 0
    assert value(after, "ldpmarket_values_released_total") == value(before, "ldpmarket_values_released_total") + 50
    assert value(after, "ldpmarket_revenue_total", currency="EUR") == pytest.approx(
        value(before, "ldpmarket_revenue_total", currency="EUR") + float(done.price), abs=1e-9)


def _break_budget(value_id: int, loss: str) -> None:
    """Write a loss above the ceiling past the CHECK constraint that forbids it (PostgreSQL: drop it, in the
    test's transaction; SQLite: ignore CHECK constraints for the statement)."""
    table = BudgetAccount._meta.db_table
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cur.execute(f"ALTER TABLE {table} DROP CONSTRAINT budget_loss_within_ceiling")
            cur.execute(f"UPDATE {table} SET oneshot_loss = %s WHERE value_id = %s", [loss, value_id])
        else:
            cur.execute("PRAGMA ignore_check_constraints = ON")
            try:
                cur.execute(f"UPDATE {table} SET oneshot_loss = %s WHERE value_id = %s", [loss, value_id])
            finally:
                cur.execute("PRAGMA ignore_check_constraints = OFF")


def test_budget_violations_count_the_invariant_broken(db):
    attribute = CategoricalAttributeFactory()
    vs = contribute(attribute, ["red", "green", "blue"], ceiling="0.3")
    # a loss equal to the ceiling is no violation, also where doubles would say 0.1 + 0.2 > 0.3 (SQLite)
    BudgetAccount.objects.filter(value=vs[0]).update(chain_loss=Decimal("0.1"), oneshot_loss=Decimal("0.2"))
    assert figures.budget_violations() == 0
    assert value(scrape(), "ldpmarket_budget_violations") == 0
    _break_budget(vs[1].id, "0.300001")
    assert figures.budget_violations() == 1
    samples = scrape()
    assert value(samples, "ldpmarket_budget_violations") == 1
    assert collectors_up(samples)["budgets"] == 1


def test_the_scans_are_reused_for_the_interval_and_shared_through_the_cache(db, settings):
    from django.core.cache import cache

    settings.LDP_METRICS_SCAN_INTERVAL_SECONDS = 60
    cache.clear()
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=dt_timezone.utc)
    attribute = CategoricalAttributeFactory()
    vs = contribute(attribute, ["red", "green"], ceiling="0.3")
    with time_machine.travel(t0, tick=False):
        samples = scrape()
        assert value(samples, "ldpmarket_budget_violations") == 0
        assert value(samples, "ldpmarket_collector_age_seconds", collector="budgets") == 0
    _break_budget(vs[0].id, "0.5")
    with time_machine.travel(t0 + timedelta(seconds=59), tick=False):
        samples = scrape()
        assert value(samples, "ldpmarket_budget_violations") == 0, "the figure of 59 s ago"
        assert value(samples, "ldpmarket_collector_age_seconds", collector="budgets") == 59
        assert value(samples, "ldpmarket_collector_age_seconds", collector="purchases") == 0, "not a scan: fresh"
    with time_machine.travel(t0 + timedelta(seconds=61), tick=False):
        samples = scrape()
        assert value(samples, "ldpmarket_budget_violations") == 1
        assert value(samples, "ldpmarket_collector_age_seconds", collector="budgets") == 0
    cache.clear()


def test_chains_behind_ceiling_are_what_the_extension_grows(db):
    attribute = CategoricalAttributeFactory()  # grid 0.1 .. 10 by 0.1
    vs = contribute(attribute, ["red", "green", "blue", "red"], ceiling="0.5")
    assert figures.chains_behind_ceiling() == 0, "contributed values' chains reach their ceiling"
    # ceilings raised behind the extension's back (no task sent): 0.75 -> the chain should reach 0.7
    BudgetAccount.objects.filter(value__in=vs[:3]).update(ceiling=Decimal("0.75"))
    # one of them cannot grow: its raw value is gone (the service holds no input)
    value_delete_raw(value_id=vs[2].id)
    assert figures.chains_behind_ceiling() == 2
    assert value(scrape(), "ldpmarket_chains_behind_ceiling") == 2
    assert chains_extend(attribute_id=attribute.id) == 2
    assert figures.chains_behind_ceiling() == 0
    # a ceiling between two grid points above the head: nothing to grow (0.79: the last grid point is 0.7, reached)
    BudgetAccount.objects.filter(value=vs[0]).update(ceiling=Decimal("0.79"))
    assert figures.chains_behind_ceiling() == 0
    BudgetAccount.objects.filter(value=vs[0]).update(ceiling=Decimal("0.8"))
    assert figures.chains_behind_ceiling() == 1


def test_stranded_purchases_are_what_the_sweeper_takes(db, settings):
    from market.sweeper import sweep_purchases

    settings.LDP_STALE_AFTER_SECONDS = 60
    attribute = BinaryAttributeFactory(price_policy=POLICY)
    values(attribute, ["yes", "no"] * 3, ceiling="3")
    buyer = funded_buyer()
    claims = [purchase_claim(buyer=buyer, attribute=attribute, epsilon=Decimal("0.5"), cohort=None,
                             idempotency_key=uuid.uuid4().hex)[0] for _ in range(4)]
    assert figures.stranded_purchases() == 0, "fresh heartbeats"
    old = datetime.now(dt_timezone.utc) - timedelta(seconds=61)
    Purchase.objects.filter(id__in=[claims[0].id, claims[1].id]).update(heartbeat_at=old)
    Purchase.objects.filter(id=claims[1].id).update(status=Purchase.Status.RUNNING)
    Purchase.objects.filter(id=claims[2].id).update(heartbeat_at=old, status=Purchase.Status.FAILED)
    assert figures.stranded_purchases() == 2
    assert value(scrape(), "ldpmarket_stranded_purchases") == 2
    now = datetime.now(dt_timezone.utc)
    resumed, failed = sweep_purchases(cutoff=now - timedelta(seconds=60), now=now)
    assert sorted(resumed + failed) == sorted([claims[0].id, claims[1].id])
    assert figures.stranded_purchases() == 0, "the sweeper gave them a fresh heartbeat"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_purchase_an_open_transaction_holds_is_not_stranded_and_the_read_takes_no_lock(settings):
    import psycopg

    settings.LDP_STALE_AFTER_SECONDS = 60
    attribute = BinaryAttributeFactory(price_policy=POLICY)
    values(attribute, ["yes", "no"], ceiling="3")
    purchase, _ = purchase_claim(buyer=funded_buyer(), attribute=attribute, epsilon=Decimal("0.5"), cohort=None,
                                 idempotency_key=uuid.uuid4().hex)
    Purchase.objects.filter(id=purchase.id).update(heartbeat_at=datetime.now(dt_timezone.utc) - timedelta(hours=1),
                                                   status=Purchase.Status.RUNNING)
    assert figures.stranded_purchases() == 1
    s = connection.settings_dict

    def session():
        return psycopg.connect(host=s.get("HOST") or "127.0.0.1", port=s.get("PORT") or 5432,
                               user=s.get("USER") or "postgres", password=s.get("PASSWORD") or None,
                               dbname=s["NAME"], autocommit=False)

    table = Purchase._meta.db_table
    holds = {"locked FOR UPDATE (a worker executing it)": [f"SELECT id FROM {table} WHERE id = %s FOR UPDATE"],
             "locked in a savepoint": ["SAVEPOINT s", f"SELECT id FROM {table} WHERE id = %s FOR UPDATE"],
             "updated, not committed": [f"UPDATE {table} SET attempts = attempts WHERE id = %s"]}
    for what, statements in holds.items():
        with session() as other:
            for statement in statements:
                other.execute(statement, [purchase.id] if "%s" in statement else [])
            assert figures.stranded_purchases() == 0, what
            assert value(scrape(), "ldpmarket_stranded_purchases") == 0, what
            other.rollback()
        assert figures.stranded_purchases() == 1, f"{what}: released"
    # reading the gauge inside a transaction holds no lock: a worker's NOWAIT check still gets the row
    with transaction.atomic():
        assert figures.stranded_purchases() == 1
        with session() as other:
            other.execute(f"SELECT id FROM {table} WHERE id = %s FOR UPDATE NOWAIT", [purchase.id])
            other.rollback()


def test_checkpoint_lag_is_the_age_of_the_oldest_unsigned_block(db):
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=dt_timezone.utc)
    attribute = CategoricalAttributeFactory()
    with time_machine.travel(t0, tick=False):
        vs = contribute(attribute, ["red", "green"], ceiling="1")
    with time_machine.travel(t0 + timedelta(seconds=250), tick=False):
        blocks = blocks_awaiting_checkpoint()
        assert blocks >= 1
        samples = scrape()
        assert value(samples, "ldpmarket_checkpoint_lag_seconds") == 250.0
        assert value(samples, "ldpmarket_blocks_awaiting_checkpoint") == blocks
        assert checkpoint_make() is not None
        samples = scrape()
        assert value(samples, "ldpmarket_checkpoint_lag_seconds") == 0.0
        assert value(samples, "ldpmarket_blocks_awaiting_checkpoint") == 0
    with time_machine.travel(t0 + timedelta(seconds=300), tick=False):
        budget_set_ceiling(value_id=vs[0].id, ceiling="2")
    with time_machine.travel(t0 + timedelta(seconds=400), tick=False):
        assert figures.awaiting_checkpoint() == (blocks_awaiting_checkpoint(), 100.0)
        assert value(scrape(), "ldpmarket_checkpoint_lag_seconds") == 100.0


def test_witness_failures_per_witness(db):
    LedgerWitness.objects.create(vkey="w1.test+0badc0de+AQ==", name="w1.test", failures=3, last_status=503)
    LedgerWitness.objects.create(vkey="w2.test+0badc0df+AQ==", name="w2.test", failures=0, last_status=200)
    LedgerWitness.objects.create(vkey="w3.test+0badc0e0+AQ==", name="w3.test", failures=1, last_status=None)
    samples = scrape()
    assert value(samples, "ldpmarket_witness_failures_total", witness="w1.test") == 3
    assert value(samples, "ldpmarket_witness_failures_total", witness="w2.test") == 0
    assert value(samples, "ldpmarket_witness_failures_total", witness="w3.test") == 1
    assert value(samples, "ldpmarket_witness_last_status", witness="w1.test") == 503
    assert value(samples, "ldpmarket_witness_last_status", witness="w3.test") == 0


def test_a_failing_collector_is_reported_and_the_others_still_answer(db, monkeypatch):
    def broken():
        raise RuntimeError("the query failed")

    monkeypatch.setitem(figures.SOURCES, "chains", broken)
    samples = scrape()
    up = collectors_up(samples)
    assert up.pop("chains") == 0 and set(up.values()) == {1.0}
    assert not any(k[0] == "ldpmarket_chains_behind_ceiling" for k in samples)
    assert value(samples, "ldpmarket_budget_violations") == 0


# ------------------------------------------------------------------------------------------- Celery

def test_task_run_times_are_observed(db):
    from market.tasks import sweep_stranded

    labels = {"task": "market.tasks.sweep_stranded", "state": "success"}
    before = REGISTRY.get_sample_value("ldpmarket_celery_task_seconds_count", labels) or 0
    sweep_stranded.apply()
    sweep_stranded.delay()  # eager in the tests: runs here too
    assert REGISTRY.get_sample_value("ldpmarket_celery_task_seconds_count", labels) == before + 2
    samples = scrape()
    assert value(samples, "ldpmarket_celery_task_seconds_count", **labels) == before + 2
    assert value(samples, "ldpmarket_celery_task_seconds_bucket", le="+Inf", **labels) == before + 2


@pytest.mark.skipif(not __import__("os").environ.get("REDIS_URL"), reason="needs Redis: set REDIS_URL")
def test_celery_queue_lengths_are_read_from_redis(db, settings):
    import redis

    prefix = f"test-metrics-{uuid.uuid4().hex[:8]}:"
    settings.CELERY_BROKER_URL = __import__("os").environ["REDIS_URL"]
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": prefix}
    settings.CELERY_TASK_ROUTES = {"market.tasks.settle_earnings": {"queue": "settlements"}}
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    keys = [f"{prefix}celery", f"{prefix}celery\x06\x169", f"{prefix}settlements"]
    try:
        client.rpush(keys[0], "m1", "m2")
        client.rpush(keys[1], "m3")
        client.rpush(keys[2], "m4", "m5", "m6", "m7")
        samples = scrape()
        assert value(samples, "ldpmarket_celery_queue_length", queue="celery") == 3
        assert value(samples, "ldpmarket_celery_queue_length", queue="settlements") == 4
        assert collectors_up(samples)["celery_queues"] == 1
    finally:
        client.delete(*keys)
        client.close()


def test_no_queue_lengths_without_a_redis_broker(db, settings):
    settings.CELERY_BROKER_URL = "memory://"
    samples = scrape()
    assert not any(k[0] == "ldpmarket_celery_queue_length" for k in samples)
    assert collectors_up(samples)["celery_queues"] == 1


def test_an_unreachable_broker_fails_only_the_queue_collector(db, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"  # nothing listens on the discard port
    up = collectors_up(scrape())
    assert up.pop("celery_queues") == 0 and set(up.values()) == {1.0}


# ------------------------------------------------------------------------------------------- who may read

@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "::ffff:127.0.0.1", "127.0.0.2"])
def test_loopback_clients_may_read(db, address):
    assert Client(REMOTE_ADDR=address).get("/metrics").status_code == 200


@pytest.mark.parametrize("address", [REMOTE, "10.0.0.5", "", "unix-socket"])
def test_anyone_else_is_refused(db, address):
    response = Client(REMOTE_ADDR=address).get("/metrics")
    assert response.status_code == 403
    assert "docs/operations.md#metrics" in response.content.decode()
    assert "ldpmarket_" not in response.content.decode()


def test_a_request_a_proxy_forwarded_is_not_loopback(db, settings):
    # an untrusted proxy on this host passing on someone else's request
    assert Client().get("/metrics", HTTP_X_FORWARDED_FOR=REMOTE).status_code == 403
    assert Client().get("/metrics", HTTP_X_REAL_IP=REMOTE).status_code == 403
    assert Client().get("/metrics", HTTP_FORWARDED=f"for={REMOTE}").status_code == 403
    # a trusted proxy on this host: the client is the forwarded address
    settings.LDP_TRUSTED_PROXIES = ["127.0.0.1"]
    assert Client().get("/metrics", HTTP_X_FORWARDED_FOR=REMOTE).status_code == 403
    # a remote client claiming to be local
    assert Client(REMOTE_ADDR=REMOTE).get("/metrics", HTTP_X_FORWARDED_FOR="127.0.0.1").status_code == 403
    settings.LDP_TRUSTED_PROXIES = [REMOTE]
    assert Client(REMOTE_ADDR=REMOTE).get("/metrics", HTTP_X_FORWARDED_FOR="127.0.0.1").status_code == 403


def test_staff_may_read_from_anywhere_and_other_roles_may_not(db, auditor):
    staff = grant_role(StaffFactory(), User.Role.STAFF)
    superuser = User.objects.create_superuser("root", "root@example.org", PASSWORD)  # role: owner, acts as staff
    for user, status in [(staff, 200), (superuser, 200), (auditor, 403), (BuyerFactory(), 403)]:
        client = Client(REMOTE_ADDR=REMOTE)
        client.force_login(user)
        assert client.get("/metrics").status_code == status, user.role
    assert auditor.is_staff, "an auditor has is_staff (the admin's sign-in), and still may not read the metrics"
    inactive = grant_role(StaffFactory(is_active=False), User.Role.STAFF)
    client = Client(REMOTE_ADDR=REMOTE)
    client.force_login(inactive)
    assert client.get("/metrics").status_code == 403


def test_the_metrics_token(db, settings):
    remote = Client(REMOTE_ADDR=REMOTE)
    settings.LDP_METRICS_TOKEN = ""
    assert remote.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 403, "no token while it is empty"
    settings.LDP_METRICS_TOKEN = TOKEN
    assert remote.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    assert remote.get("/metrics", HTTP_AUTHORIZATION=f"bearer {TOKEN}").status_code == 200
    for wrong in (f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", f"Token {TOKEN}", TOKEN, "Bearer"):
        assert remote.get("/metrics", HTTP_AUTHORIZATION=wrong).status_code == 403, wrong


def test_only_safe_methods_and_no_cache(db):
    assert Client().post("/metrics").status_code == 405
    response = Client().get("/metrics")
    assert "no-cache" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]
    assert Client().head("/metrics").status_code == 200


def test_metrics_are_exempt_from_the_https_redirect(db, settings):
    """Prometheus scrapes plain http inside the network, as the health probes do."""
    settings.SECURE_SSL_REDIRECT = True
    assert Client().get("/metrics").status_code == 200
    assert Client().get("/portal/login/").status_code == 301


def test_the_token_must_be_strong_in_production():
    from tests.ldpmarket.test_deploy import production_env, run_python

    weak = run_python("import django; django.setup()\n", production_env(LDP_METRICS_TOKEN="short"))
    assert weak.returncode != 0 and "LDP_METRICS_TOKEN" in weak.stderr.strip().splitlines()[-1]
    strong = run_python("import django; django.setup()\nfrom django.conf import settings\n"
                        f"print(settings.LDP_METRICS_TOKEN == {TOKEN!r})\n", production_env(LDP_METRICS_TOKEN=TOKEN))
    assert strong.returncode == 0 and strong.stdout.strip() == "True", strong.stderr[-2000:]


# ------------------------------------------------------------------------------------------- workers' endpoint

def _call(app, path="/metrics", **environ):
    got = {}

    def start_response(status, headers):
        got["status"], got["headers"] = status, dict(headers)

    body = b"".join(app({"PATH_INFO": path, "REQUEST_METHOD": "GET", **environ}, start_response))
    return got["status"], body


def test_the_worker_endpoint_answers_loopback_and_the_token(db):
    app = plumbing.worker_metrics_app(TOKEN)
    status, body = _call(app, REMOTE_ADDR="127.0.0.1")
    assert status == "200 OK" and b"ldpmarket_celery_task_seconds" in body
    assert _call(app, REMOTE_ADDR=REMOTE)[0] == "403 Forbidden"
    assert _call(app, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=REMOTE)[0] == "403 Forbidden"
    assert _call(app, REMOTE_ADDR=REMOTE, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")[0] == "200 OK"
    assert _call(app, REMOTE_ADDR=REMOTE, HTTP_AUTHORIZATION="Bearer wrong")[0] == "403 Forbidden"
    assert _call(app, "/other", REMOTE_ADDR="127.0.0.1")[0] == "404 Not Found"
    assert _call(plumbing.worker_metrics_app(""), REMOTE_ADDR=REMOTE, HTTP_AUTHORIZATION="Bearer ")[0] == \
        "403 Forbidden"


def test_worker_init_serves_the_metrics_on_the_port(db, settings):
    import urllib.error
    import urllib.request

    settings.LDP_WORKER_METRICS_PORT = 0
    assert plumbing.worker_started() is None  # off: nothing served
    server = plumbing.serve_worker_metrics(0, TOKEN, host="127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200 and b"ldpmarket_celery_task_seconds" in response.read()
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        request = urllib.request.Request(url, headers={"X-Forwarded-For": REMOTE})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 403
    finally:
        server.shutdown()
        server.server_close()


def test_loopback_rules():
    assert plumbing.loopback_request({"REMOTE_ADDR": "127.0.0.1"})
    assert plumbing.loopback_request({"REMOTE_ADDR": "::1", "LDP_PEER_ADDR": "::1"})
    assert not plumbing.loopback_request({"REMOTE_ADDR": "127.0.0.1", "LDP_PEER_ADDR": REMOTE})
    assert not plumbing.loopback_request({"REMOTE_ADDR": REMOTE, "LDP_PEER_ADDR": "127.0.0.1"})
    assert not plumbing.loopback_request({"REMOTE_ADDR": ""})
    assert not plumbing.loopback_request({"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "127.0.0.1"})
    assert plumbing.bearer_matches(f"Bearer  {TOKEN} ", TOKEN)
    assert not plumbing.bearer_matches(f"Bearer {TOKEN}", "")
