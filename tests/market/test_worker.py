"""Chain extension on a REAL Celery worker (prefork, Redis broker, the test PostgreSQL database).

The worker runs the production settings module (``ldpmarket.settings``: not eager, acks_late,
reject_on_worker_lost) with the test keys, the test database and a queue of its own, so no stale task from
elsewhere can reach it and it takes nothing from anyone else.  The tests commit their data
(``transaction=True``) so the worker sees it, and always stop their workers and clean their queue.

Fault tests (spec quality.md, "Worker faults"): the worker is SIGKILLed in the middle of an extension that
runs in many small batches (``LDP_EXTENSION_BATCH``), after some batches have committed.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from django.conf import settings
from django.db import connection

from accounts.models import BudgetAccount
from accounts.services import budget_set_ceiling
from ldpmarket.celery import app
from market import tasks
from market.models import Chain
from market.services import chains_extend
from tests.factories import CategoricalAttributeFactory, chain_rows, contribute
from tests.market.stats import ALPHA, chi_square, pair_laws, table

pytestmark = [
    pytest.mark.worker, pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis: set REDIS_URL (CI runs these)"),
]

ROOT = Path(__file__).resolve().parents[2]
D = Decimal


def _database_url(application_name: str) -> str:
    s = connection.settings_dict
    auth = quote(s.get("USER") or "postgres")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"])
    return (f"postgres://{auth}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"
            f"?application_name={application_name}")


class Worker:
    """One ``celery worker`` process group (main process + one prefork child)."""

    def __init__(self, queue: str, log: Path, batch: int):
        self.queue, self.log_path = queue, log
        self.node = f"ldptest-{uuid.uuid4().hex[:8]}@localhost"
        self.db_name = f"ldp-worker-{uuid.uuid4().hex[:8]}"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "ldpmarket.settings",
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,
            "LDP_VALUE_KEY": settings.LDP_VALUE_KEY,
            "LDP_PSEUDONYM_KEY": settings.LDP_PSEUDONYM_KEY,
            "DATABASE_URL": _database_url(self.db_name),
            "REDIS_URL": os.environ["REDIS_URL"],
            "LDP_EXTENSION_BATCH": str(batch),
            "PYTHONPATH": str(ROOT),
        }
        for name in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "CELERY_TASK_ALWAYS_EAGER", "DJANGO_DEBUG"):
            env.pop(name, None)
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ldpmarket", "worker", "--pool=prefork", "--concurrency=1",
             "-Q", queue, "-n", self.node, "--loglevel=INFO", "--without-gossip", "--without-mingle",
             "--without-heartbeat", "--prefetch-multiplier=1"],
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log(self) -> str:
        """The end of the worker's log, for failure messages."""
        return self.text()[-4000:]

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the worker exited with {self.proc.returncode}:\n{self.log()}")
            if "ready." in self.text():
                if app.control.ping(destination=[self.node], timeout=1.0):
                    return
            time.sleep(0.2)
        raise AssertionError(f"the worker did not become ready in {timeout}s:\n{self.log()}")

    def children(self) -> list[int]:
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return [int(p) for p in path.read_text().split()] if path.exists() else []

    def kill_group(self) -> None:
        """SIGKILL the main process and its pool children at once: nothing gets to clean up."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                self.kill_group()
        else:  # the main process is gone; make sure no orphaned child lingers in its group
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._log.close()

    def connections(self) -> int:
        """Open database sessions of this worker (the server notices killed clients by itself)."""
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [self.db_name])
            return cur.fetchone()[0]


def _purge(queue: str) -> None:
    """Drop the queue's messages, and any unacknowledged message of it a killed worker left in Redis."""
    import redis

    r = redis.Redis.from_url(os.environ["REDIS_URL"])
    r.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
    for tag, raw in r.hgetall("unacked").items():
        try:
            routed = json.loads(raw)[2]
        except (ValueError, IndexError, TypeError):
            continue
        if routed == queue:
            r.hdel("unacked", tag)
            r.zrem("unacked_index", tag)


@pytest.fixture
def workers(transactional_db, tmp_path, monkeypatch):
    """Start real workers on a queue of this test's own; tasks are sent (not run eagerly) while it lasts."""
    queue = f"ldptest-{uuid.uuid4().hex}"
    started: list[Worker] = []
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = False
    for task in (tasks.extend_chains, tasks.advance_schedules):  # the service path sends to this queue too
        real = app.tasks[task.name]
        monkeypatch.setattr(real, "queue", queue, raising=False)
        monkeypatch.setattr(real, "_exec_options", None)

    def start(batch: int = 20000) -> Worker:
        worker = Worker(queue, tmp_path / f"worker{len(started)}.log", batch)
        started.append(worker)
        worker.wait_ready()
        return worker

    start.queue = queue
    try:
        yield start
    finally:
        for worker in started:
            worker.stop()
        _purge(queue)
        deadline = time.monotonic() + 15
        while any(w.connections() for w in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        app.conf.task_always_eager = eager


def send_extension(start, attribute_id: int) -> None:
    tasks.extend_chains.apply_async((attribute_id,), queue=start.queue, ignore_result=True)


def wait_until(predicate, timeout: float, interval: float = 0.05, message=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s: {message()}")


def extended_count(attribute, head) -> int:
    return Chain.objects.filter(value__attribute=attribute, head=head).count()


def test_a_real_worker_extends_chains_enqueued_on_commit(workers):
    worker = workers()
    attribute = CategoricalAttributeFactory()
    values = contribute(attribute, ["red", "green", "blue"] * 100, ceiling="0.2")
    # the service path: raising one ceiling enqueues its extension on commit, the worker runs it
    budget_set_ceiling(value_id=values[0].id, ceiling="0.9")
    wait_until(lambda: extended_count(attribute, D("0.9")) == 1, 60, message=worker.log)
    # and a task sent for the whole attribute extends every chain whose ceiling passed its head
    BudgetAccount.objects.filter(value__in=values).update(ceiling=D("1.25"))
    send_extension(workers, attribute.id)
    wait_until(lambda: extended_count(attribute, D("1.2")) == 300, 60, message=worker.log)
    before = chain_rows(attribute)
    assert {np.frombuffer(r[0], "<i8").tolist() == list(range(100_000, 1_200_001, 100_000))
            for r in before.values()} == {True}
    # idempotent on the worker too: a second task changes nothing
    send_extension(workers, attribute.id)
    pattern = re.compile(r"extend_chains\[[0-9a-f-]+\] succeeded in [0-9.e-]+s: (\d+)")

    def results():
        return pattern.findall(worker.text())

    wait_until(lambda: len(results()) >= 3, 60, message=worker.log)
    assert results() == ["1", "300", "0"]
    assert chain_rows(attribute) == before


# ---------------------------------------------------------------------------------------------
# Worker faults
# ---------------------------------------------------------------------------------------------

N_VALUES = 9000
BATCH = 100
OLD_HEAD, TARGET = D("0.2"), D("4.0")
OLD_EPS = [100_000, 200_000]
TARGET_EPS = list(range(100_000, 4_000_001, 100_000))


@pytest.fixture
def big(transactional_db):
    attribute = CategoricalAttributeFactory()
    raws = ["red", "green", "blue"] * (N_VALUES // 3)
    values = contribute(attribute, raws, ceiling=str(OLD_HEAD))
    truth = {v.id: attribute.labels.index(r) for v, r in zip(values, raws)}
    snapshot = chain_rows(attribute)
    BudgetAccount.objects.filter(value__attribute=attribute).update(ceiling=TARGET)
    return attribute, truth, snapshot


def kill_when_some_batches_committed(worker, attribute, kill) -> int:
    """Wait until at least two batches are in (but not all), then ``kill``; returns the chains done before it."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = extended_count(attribute, TARGET)
        if done >= 2 * BATCH:
            kill()
            return done
        time.sleep(0.02)
    raise AssertionError(f"the extension did not start: {worker.log()}")


def assert_each_chain_old_or_complete(attribute, snapshot) -> dict[str, int]:
    """Every chain is either byte-identical to before the extension or fully extended on top of it."""
    kinds = {"old": 0, "complete": 0}
    for vid, (eps_b, out_b, length, head, head_out, _) in chain_rows(attribute).items():
        old = snapshot[vid]
        if (eps_b, out_b, length, head, head_out) == old[:5]:
            kinds["old"] += 1
            continue
        eps = np.frombuffer(eps_b, "<i8").tolist()
        out = np.frombuffer(out_b, "<i2")
        assert eps == TARGET_EPS and length == len(TARGET_EPS) and head == TARGET, f"chain {vid} is partial"
        assert out.size == length and out_b[:len(old[1])] == old[1], f"chain {vid} lost its stored prefix"
        assert head_out == out[-1:].tobytes(), f"chain {vid}: head output is not the last output"
        kinds["complete"] += 1
    return kinds


def assert_law_unchanged(attribute, truth) -> None:
    """The completed chains still have the forward chain's law (made, killed, resumed: one law)."""
    rows = chain_rows(attribute)
    ids = sorted(rows)
    out = np.stack([np.frombuffer(rows[i][1], "<i2").astype(np.int64) for i in ids])
    a = np.array([truth[i] for i in ids])
    eps = [e / 1e6 for e in TARGET_EPS]
    for i, j in [(1, 2), (0, len(eps) - 1), (1, 9)]:
        stat, df, p = chi_square(table(a, out[:, i] * 3 + out[:, j], 3, 9), pair_laws(eps[:j + 1], 3, i, j))
        assert p > ALPHA, f"pair ({eps[i]}, {eps[j]}) after the kill: chi2={stat:.1f}, df={df}, p={p:.2e}"


def test_a_killed_worker_leaves_no_partial_chain_and_a_new_worker_completes(workers, big):
    attribute, truth, snapshot = big
    first = workers(batch=BATCH)
    send_extension(workers, attribute.id)
    done = kill_when_some_batches_committed(first, attribute, first.kill_group)
    wait_until(lambda: first.connections() == 0, 30, message=lambda: "the killed worker's sessions linger")
    kinds = assert_each_chain_old_or_complete(attribute, snapshot)
    assert kinds["complete"] >= done and kinds["complete"] % BATCH == 0, kinds  # whole batches only
    assert 0 < kinds["complete"] < N_VALUES, f"the kill was not in the middle of the extension: {kinds}"
    # a new worker; the killed one never acknowledged its task, so it is sent again (Redis would redeliver it
    # only after the broker's visibility timeout)
    second = workers(batch=BATCH)
    send_extension(workers, attribute.id)
    wait_until(lambda: extended_count(attribute, TARGET) == N_VALUES, 120, interval=0.2, message=second.log)
    assert assert_each_chain_old_or_complete(attribute, snapshot) == {"old": 0, "complete": N_VALUES}
    after = chain_rows(attribute)
    assert chains_extend(attribute_id=attribute.id) == 0
    assert chain_rows(attribute) == after
    assert_law_unchanged(attribute, truth)


def test_a_pool_process_killed_mid_task_is_redelivered_and_completes(workers, big):
    """acks_late + reject_on_worker_lost: the main process sees its child die and puts the task back."""
    attribute, truth, snapshot = big
    worker = workers(batch=BATCH)
    send_extension(workers, attribute.id)
    [child] = worker.children()

    def kill_child():
        os.kill(child, signal.SIGKILL)

    done = kill_when_some_batches_committed(worker, attribute, kill_child)
    assert done < N_VALUES, "the extension finished before the kill"
    # no re-send: the same task comes back by itself and finishes the job
    wait_until(lambda: extended_count(attribute, TARGET) == N_VALUES, 120, interval=0.2, message=worker.log)
    log = worker.text()
    assert "WorkerLostError" in log or "signal 9" in log, worker.log()
    assert child not in worker.children()
    assert assert_each_chain_old_or_complete(attribute, snapshot) == {"old": 0, "complete": N_VALUES}
    after = chain_rows(attribute)
    assert chains_extend(attribute_id=attribute.id) == 0
    assert chain_rows(attribute) == after
    assert_law_unchanged(attribute, truth)
