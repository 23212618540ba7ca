"""Logs for machines (issue 30, docs/operations.md#logs): JSON lines with a request id, the user, the purchase;
the request id in the response header and in every problem body; no raw value, token, password or key in any
line.

The lines are the real ones: the root logger's handler as ``LOGGING`` configured it (the test settings run
without DEBUG, so its formatter writes JSON), its stream pointed at a buffer for the test.  The subprocess tests
check the same from outside: Django's stderr in each format, and gunicorn's.
"""
from __future__ import annotations

import http.client
import io
import json
import logging
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import include, path
from rest_framework.test import APIClient

from accounts.roles import grant_role
from ldpmarket.logs import REDACTED, redact_text
from ldpmarket.requestlog import SAFE_REQUEST_ID, accepted_request_id
from market.purchases.pricing import DEFAULT_POLICY
from mechanisms.relaxation import chain as draw_chain
from tests.factories import CategoricalAttributeFactory, fund
from tests.ldpmarket.test_deploy import NO_DOTENV, production_env

ROOT = Path(__file__).resolve().parents[2]
#: The raw values sold: labels no log line has any reason to contain.
LABELS = ["diagnosis-Qv7Kx2", "diagnosis-Lm4Pz9", "diagnosis-Hs8Wt3"]
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def _boom(request):
    raise RuntimeError("a fault of the service")


#: For the 500 test (``pytest.mark.urls``): the project's routes and one that fails.
urlpatterns = [path("api/v1/boom/", _boom), path("", include("ldpmarket.urls"))]
handler404 = "ldpmarket.api.not_found_view"
handler500 = "ldpmarket.api.server_error_view"


class Lines:
    """Every line the configured root handler writes while the test runs (its stream swapped for a buffer)."""

    def __init__(self, buffer: io.StringIO):
        self.buffer = buffer

    def text(self) -> str:
        return self.buffer.getvalue()

    def parsed(self, text: str | None = None) -> list[dict]:
        out = []
        for line in (self.text() if text is None else text).splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                raise AssertionError(f"a log line that is not JSON: {line!r}") from None
        return out

    def during(self, call, *args, **kwargs):
        """``call(*args, **kwargs)`` (a test client's request) and the lines written meanwhile."""
        start = len(self.text())
        response = call(*args, **kwargs)
        return response, self.parsed(self.text()[start:])


@pytest.fixture
def lines():
    [handler] = [h for h in logging.getLogger().handlers if h.get_name() == "console"]
    assert type(handler.formatter).__name__ == "ProcessorFormatter"  # the formatter LOGGING configures
    buffer = io.StringIO()
    previous = handler.setStream(buffer)
    try:
        yield Lines(buffer)
    finally:
        handler.setStream(previous)


def assert_one_request(response, logged: list[dict], *, problem: bool = False) -> str:
    """The response's X-Request-ID is on every line its request wrote (one of them ``request_finished``), and in
    its problem body; the id."""
    request_id = response["X-Request-ID"]
    assert request_id and SAFE_REQUEST_ID.fullmatch(request_id), request_id
    assert logged, "the request wrote no log line"
    assert {line.get("request_id") for line in logged} == {request_id}, logged
    finished = [line for line in logged if line["event"] in ("request_finished", "request_failed")]
    assert len(finished) == 1 and finished[0]["code"] == response.status_code, logged
    if problem:
        assert response["Content-Type"] == "application/problem+json"
        assert response.json()["request_id"] == request_id, response.json()
    return request_id


def assert_user(logged: list[dict], user) -> None:
    """The request's lines name its user (once it is known: authenticating it is part of the request)."""
    assert {line.get("user_id") for line in logged} - {None} == {user.id}, logged
    assert [line["user_id"] for line in logged if line["event"] == "request_finished"] == [user.id], logged


def make_user(role: str, password: str):
    user = get_user_model().objects.create_user(username=f"{role}-{uuid.uuid4().hex[:8]}", password=password)
    grant_role(user, role)
    return user


def sign_in(lines, user, password) -> str:
    response, logged = lines.during(APIClient().post, "/api/v1/auth/token/",
                                    {"username": user.username, "password": password}, format="json")
    assert response.status_code == 200, response.content
    assert_one_request(response, logged)
    return response.json()["token"]


def token_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_a_purchase_an_upload_and_a_failed_sign_in_log_json_with_ids_and_no_secret(lines, db, settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"logging-{uuid.uuid4()}"}}
    buyer_password, owner_password = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    wrong_password = "Wr0ng-" + secrets.token_urlsafe(12)
    attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=DEFAULT_POLICY)
    buyer = make_user("buyer", buyer_password)
    owners = [make_user("owner", owner_password) for _ in range(len(LABELS) + 1)]
    fund(buyer, "100")
    buyer_token = sign_in(lines, buyer, buyer_password)
    owner_tokens = [sign_in(lines, owner, owner_password) for owner in owners]
    buyer_api = token_client(buyer_token)

    # owners contribute service-held raw values (one value each); another an owner-held value, and uploads its chain
    for owner, token, label in zip(owners, owner_tokens, LABELS):
        r, logged = lines.during(token_client(token).post, "/api/v1/owner/values/",
                                 {"attribute": attribute.id, "value": label, "ceiling": "2"}, format="json")
        assert r.status_code == 201, r.content
        assert_one_request(r, logged)
        assert_user(logged, owner)
    owner, owner_api = owners[-1], token_client(owner_tokens[-1])
    r = owner_api.post("/api/v1/owner/values/", {"attribute": attribute.id, "custody": "owner", "ceiling": "1"},
                       format="json")
    assert r.status_code == 201, r.content
    held = r.json()["id"]
    epsilons = ["0.1", "0.2", "0.3", "0.4", "0.5"]
    outputs = draw_chain(np.array([1]), [float(e) for e in epsilons], len(LABELS), np.random.default_rng(3))[0]
    r, logged = lines.during(owner_api.post, f"/api/v1/owner/values/{held}/chain/",
                             {"epsilons": epsilons, "outputs": outputs.tolist()}, format="json")
    assert r.status_code == 200, r.content
    assert_one_request(r, logged)

    # a buyer buys with a token (the purchase runs in the request) and reads the outputs
    r, logged = lines.during(buyer_api.post, "/api/v1/purchases/", {"attribute": attribute.id, "epsilon": "1"},
                             format="json", HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()))
    assert r.status_code == 201, r.content
    purchase = r.json()["id"]
    request_id = assert_one_request(r, logged)
    assert_user(logged, buyer)
    completed = [line for line in logged if line["event"] == f"purchase {purchase} completed"]
    assert len(completed) == 1 and completed[0]["purchase_id"] == purchase, logged
    assert completed[0]["request_id"] == request_id and completed[0]["logger"] == "market.purchases.pipeline"
    r, logged = lines.during(buyer_api.get, f"/api/v1/purchases/{purchase}/outputs/")
    assert r.status_code == 200 and any(label in r.content.decode() for label in LABELS)  # the outputs are labels
    assert_one_request(r, logged)

    # a problem: the same id in the header, the body and the lines
    r, logged = lines.during(buyer_api.post, "/api/v1/purchases/", {"attribute": attribute.id, "epsilon": "1"},
                             format="json")
    assert r.status_code == 400
    assert_one_request(r, logged, problem=True)
    assert [line["level"] for line in logged if line["logger"] == "django.request"] == ["warning"], logged

    # failed sign-ins: the token endpoint (a problem) and the browsable API's form; a token that is not one
    r, logged = lines.during(APIClient().post, "/api/v1/auth/token/",
                             {"username": buyer.username, "password": wrong_password}, format="json")
    assert r.status_code == 400
    assert_one_request(r, logged, problem=True)
    assert any(line["logger"] == "axes.handlers.database" for line in logged), logged  # the failure is logged
    r, logged = lines.during(Client().post, "/api/auth/login/",
                             {"username": owner.username, "password": wrong_password})
    assert r.status_code == 200 and b"correct username and password" in r.content
    assert_one_request(r, logged)
    forged = secrets.token_hex(32)
    r, logged = lines.during(token_client(forged).get, "/api/v1/purchases/")
    assert r.status_code == 401
    assert_one_request(r, logged, problem=True)

    logged = lines.parsed()  # every line of the test, JSON each
    assert all({"event", "level", "logger", "timestamp"} <= set(line) for line in logged)
    text = lines.text()
    forbidden = {
        "a raw value": LABELS,
        "a password": [buyer_password, owner_password, wrong_password],
        "a token": [buyer_token, *owner_tokens, forged, f"Token {buyer_token}", f"Token {forged}"],
        "a key": [settings.SECRET_KEY, settings.LDP_VALUE_KEY, settings.LDP_PSEUDONYM_KEY],
    }
    found = {what: [v for v in values if v in text] for what, values in forbidden.items()}
    assert found == {what: [] for what in forbidden}, text[-3000:]


@pytest.mark.parametrize("incoming", ["x" * 10_000, "abc\r\nX-Injected: 1", "<script>alert(1)</script>",
                                      "id with spaces", "-leading-dash", "é" * 8, ""])
def test_an_unsafe_incoming_request_id_is_replaced(lines, db, incoming):
    r, logged = lines.during(Client().get, "/api/v1/nonexistent/", HTTP_X_REQUEST_ID=incoming)
    request_id = assert_one_request(r, logged, problem=True)
    assert UUID.fullmatch(request_id), request_id
    assert (incoming or "\0") not in lines.text() and "X-Injected" not in lines.text()


def test_a_safe_incoming_request_id_is_kept(lines, db):
    for incoming in ("f81d4fae-7dec-11d0-a765-00a0c91e6bf6", "trace.42:abc_DEF-1", "a" * 64):
        r, logged = lines.during(Client().get, "/api/v1/nonexistent/", HTTP_X_REQUEST_ID=incoming)
        assert assert_one_request(r, logged, problem=True) == incoming
    r, _ = lines.during(Client().get, "/health/", HTTP_X_REQUEST_ID="a" * 65)
    assert r["X-Request-ID"] != "a" * 65


def test_every_response_has_a_request_id_and_pages_too(lines, db):
    ids = set()
    for url in ("/health/", "/portal/login/", "/api/v1/", "/api/schema/", "/nowhere/"):
        r, logged = lines.during(Client().get, url)
        ids.add(assert_one_request(r, logged))
    assert len(ids) == 5  # one each


@pytest.mark.urls("tests.ldpmarket.test_logging")
def test_a_500_under_the_api_is_a_problem_with_its_request_id_and_its_traceback_logged(lines, db):
    client = Client(raise_request_exception=False)
    r, logged = lines.during(client.get, "/api/v1/boom/", HTTP_X_REQUEST_ID="boom-1")
    assert r.status_code == 500 and r.json()["request_id"] == "boom-1" == r["X-Request-ID"]
    assert "a fault of the service" not in r.content.decode()
    assert {line.get("request_id") for line in logged} == {"boom-1"}
    [failed] = [line for line in logged if line["event"] == "request_failed"]
    assert failed["level"] == "error" and "RuntimeError: a fault of the service" in failed["exception"]


def test_redaction_masks_credentials_secret_fields_and_keys(lines, settings):
    token = secrets.token_hex(32)
    logging.getLogger("tests.redaction").warning(
        "Authorization: Token %s; GET /x?password=hunter2&page=2; the value key is %s; Token authentication failed",
        token, settings.LDP_VALUE_KEY)
    import structlog

    structlog.get_logger("tests.redaction").warning("sign-in", password="hunter2", headers={"Authorization": token},
                                                    api_key="k" * 20, purchase_id=7)
    logged = lines.parsed()
    assert logged[0]["event"] == (f"Authorization: Token {REDACTED}; GET /x?password={REDACTED}&page=2; the value key "
                                  f"is {REDACTED}; Token authentication failed")
    assert (logged[1]["password"], logged[1]["headers"], logged[1]["api_key"], logged[1]["purchase_id"]) == (
        REDACTED, {"Authorization": REDACTED}, REDACTED, 7)
    assert token not in lines.text() and "hunter2" not in lines.text()
    assert redact_text("Bearer abc.def-123") == f"Bearer {REDACTED}"
    text = "<QueryDict: {'username': ['bob'], 'password': ['pw-1']}> {\"token\": \"a\\\"b\", \"n\": 1}"
    assert redact_text(text) == (
        f"<QueryDict: {{'username': ['bob'], 'password': ['{REDACTED}']}}> {{\"token\": \"{REDACTED}\", \"n\": 1}}")


def test_accepted_request_id():
    assert accepted_request_id("req-1") == "req-1"
    assert UUID.fullmatch(accepted_request_id(None)) and UUID.fullmatch(accepted_request_id("a b"))


# ------------------------------------------------------------------------------------- outside the process


LOG_ONE_LINE = NO_DOTENV + ("import django, logging; django.setup()\n"
                            "logging.getLogger('ldpmarket.test').warning('one line, key %s', "
                            "__import__('django.conf').conf.settings.LDP_VALUE_KEY)\n")


def _run(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "ignore", "-c", LOG_ONE_LINE], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_production_writes_json_lines_on_stderr_and_development_readable_ones():
    env = production_env()
    out = _run(env)
    assert out.returncode == 0, out.stderr[-3000:]
    [line] = [json.loads(x) for x in out.stderr.splitlines()]
    assert line["event"] == f"one line, key {REDACTED}" and line["level"] == "warning", line
    assert env["LDP_VALUE_KEY"] not in out.stderr and out.stdout == ""
    for fmt_env in ({"LDP_LOG_FORMAT": "console"}, {"DJANGO_DEBUG": "1"}):
        out = _run(production_env(**fmt_env))
        assert out.returncode == 0, out.stderr[-3000:]
        [text] = out.stderr.splitlines()
        assert "one line, key [redacted]" in text and not text.startswith("{"), text
    out = _run(production_env(DJANGO_DEBUG="1", LDP_LOG_FORMAT="json"))
    assert json.loads(out.stderr)["logger"] == "ldpmarket.test"
    out = _run(production_env(LDP_LOG_FORMAT="xml"))
    assert out.returncode != 0 and "LDP_LOG_FORMAT must be json or console" in out.stderr


def test_gunicorn_writes_only_json_lines_with_the_request_id(tmp_path):
    """The image's command (gunicorn, reading gunicorn.conf.py, with --access-logfile -): its own lines, the
    access lines and Django's, on stderr, each a JSON object; stdout stays empty."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = production_env(PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin", ALLOWED_HOSTS="127.0.0.1",
                         DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}", DJANGO_SECURE_SSL_REDIRECT="0")
    stderr, stdout = tmp_path / "stderr", tmp_path / "stdout"
    with stderr.open("wb") as err, stdout.open("wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).with_name("gunicorn")), "ldpmarket.wsgi:application",
                                 "--bind", f"127.0.0.1:{port}", "--workers", "1", "--access-logfile", "-"],
                                cwd=ROOT, env=env, stdout=out, stderr=err)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                    conn.request("GET", "/api/v1/nonexistent/?page=2", headers={"X-Request-ID": "gunicorn-1"})
                    response = conn.getresponse()
                    body = json.loads(response.read())
                    break
                except (ConnectionRefusedError, http.client.RemoteDisconnected):
                    assert proc.poll() is None, stderr.read_text()[-3000:]
                    assert time.monotonic() < deadline, "gunicorn did not start"
                    time.sleep(0.3)
            assert response.status == 404 and response.getheader("X-Request-ID") == "gunicorn-1"
            assert body["request_id"] == "gunicorn-1"
            deadline = time.monotonic() + 10
            while "request_id=gunicorn-1" not in stderr.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            proc.terminate()
            proc.wait(30)
    logged = [json.loads(line) for line in stderr.read_text().splitlines()]
    assert stdout.read_text() == ""
    loggers = {line["logger"] for line in logged}
    assert {"gunicorn.error", "gunicorn.access", "django_structlog.middlewares.request", "django.request"} <= loggers
    [access] = [line for line in logged if line["logger"] == "gunicorn.access"]
    assert '"GET /api/v1/nonexistent/?page=2 HTTP/1.1" 404' in access["event"], access
    assert access["event"].endswith("request_id=gunicorn-1")
    assert all(line["request_id"] == "gunicorn-1" for line in logged if line["logger"].startswith("django")), logged


# ------------------------------------------------------------------------------------------ a Celery worker


@pytest.mark.worker
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis: set REDIS_URL (CI runs these)")
def test_a_task_a_request_sent_logs_json_with_its_id_the_request_id_the_user_and_the_purchase(
        tmp_path, settings, monkeypatch):
    """A purchase large enough to run on a REAL worker (``tests.workerproc``: the production settings, so JSON):
    the worker's lines about it carry the task's id and name, the request id of the request that sent it (its
    X-Request-ID), the buyer and the purchase."""
    from market.models import Purchase
    from tests.factories import BuyerFactory, contribute
    from tests.market.api.conftest import client_for
    from tests.workerproc import Broker, wait_until

    broker = Broker(tmp_path)
    broker.route_project_tasks(monkeypatch)
    settings.CACHES = broker.cache_settings()
    settings.LDP_ASYNC_PURCHASE_THRESHOLD = 1
    try:
        worker = broker.start()
        attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=DEFAULT_POLICY)
        contribute(attribute, LABELS * 3, ceiling="2")
        buyer = BuyerFactory()
        fund(buyer, "100")
        r = client_for(buyer).post("/api/v1/purchases/", {"attribute": attribute.id, "epsilon": "1"}, format="json",
                                   HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()), HTTP_X_REQUEST_ID="purchase-req-1")
        assert r.status_code == 202 and r["X-Request-ID"] == "purchase-req-1", r.content
        purchase = r.json()["id"]
        # the purchase, then the owners' settlement it sends
        wait_until(lambda: worker.text().count('"task_succeeded"') >= 2, 60, message=worker.log)
        assert Purchase.objects.get(id=purchase).status == Purchase.Status.COMPLETED
    finally:
        broker.close()
        wait_until(lambda: not any(w.sessions() for w in broker.workers), 30, interval=0.1)
    text = worker.text()
    logged = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert any(line["event"].endswith(" ready.") for line in logged), text[-3000:]  # Celery's own lines: JSON too
    # what is not JSON is what Celery prints, not logs: its start-up banner and its shutdown notice
    printed = [x for x in text.splitlines() if not x.startswith("{")]
    assert not [x for x in printed if re.search(r"Traceback|Error|INFO|WARNING|ERROR|succeeded|received", x)], printed
    task = [line for line in logged if line.get("task") == "market.tasks.run_purchase"]
    events = [re.sub(r"\[[0-9a-f-]{36}\] succeeded in [0-9.e-]+s", "[id] succeeded", line["event"]) for line in task]
    # the task's own start and end (django-structlog), the settlement it sends, the service's line, Celery's own
    assert events == ["task_started", "task_enqueued", f"purchase {purchase} completed", "task_succeeded",
                      "Task market.tasks.run_purchase[id] succeeded: 'completed'"], events
    assert {(line["request_id"], line["user_id"], line["task_id"]) for line in task} == {
        ("purchase-req-1", buyer.id, task[0]["task_id"])}, task
    assert task[2]["purchase_id"] == purchase and task[2]["logger"] == "market.purchases.pipeline"
    assert task[1]["child_task_name"] == "market.tasks.settle_earnings"
    settle = [line for line in logged if line.get("task") == "market.tasks.settle_earnings"]
    assert settle and {(line["request_id"], line["parent_task_id"], line["task_id"]) for line in settle} == {
        ("purchase-req-1", task[0]["task_id"], task[1]["child_task_id"])}, settle
    assert not any(label in text for label in LABELS) and settings.LDP_VALUE_KEY not in text
