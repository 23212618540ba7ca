"""/metrics under gunicorn with two workers, and a Celery worker's endpoint (docs/operations.md#metrics):
prometheus-client's multiprocess mode sums the workers' request counters, gunicorn.conf.py empties the directory at
start and removes a dead worker's live gauges, a dead worker's counters stay in the sum, and a task run in a Celery
pool process shows on its worker's endpoint."""
from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests.workerproc import wait_until

ROOT = Path(__file__).resolve().parents[2]
HEALTH = "django_http_requests_total_by_view_transport_method_total"
HEALTH_LABELS = {"method": "GET", "transport": "http", "view": "health"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request("GET", path, headers={"Host": "127.0.0.1", "Connection": "close"})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def _scrape(port: int) -> dict[str, float]:
    status, body = _get(port, "/metrics")
    assert status == 200, body[:500]
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            if s.name == HEALTH and s.labels == HEALTH_LABELS:
                out["health"] = s.value
            elif s.name == "ldpmarket_web_workers":
                out["workers"] = s.value
    return out


def _health_by_worker(directory: Path) -> dict[int, float]:
    """Each process's own count of GET /health/, read from its file of the multiprocess directory."""
    out = {}
    for f in directory.glob("counter_*.db"):
        for metric in MultiProcessCollector.merge([str(f)]):
            for s in metric.samples:
                if s.name == HEALTH and s.labels == HEALTH_LABELS:
                    out[int(f.stem.split("_")[1])] = s.value
    return out


def _live_workers(directory: Path) -> set[int]:
    return {int(f.stem.rsplit("_", 1)[1]) for f in directory.glob("gauge_livesum_*.db")}


def _one_round(port: int, others: int) -> None:
    """One request held open half-sent (the worker that took it waits for the rest), ``others`` requests meanwhile
    (so the other worker serves them), then the first one finished: both workers serve requests."""
    held = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:
        held.sendall(b"GET /health/ HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        time.sleep(0.3)  # taken by a worker, which now waits for the end of the headers
        for _ in range(others):
            assert _get(port, "/health/")[0] == 200
        held.sendall(b"Connection: close\r\n\r\n")
        answer = b""
        while chunk := held.recv(65536):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    finally:
        held.close()


@pytest.mark.timeout(240)
def test_request_counters_sum_over_gunicorn_workers(tmp_path):
    directory = tmp_path / "multiproc"
    directory.mkdir()
    stale = directory / "counter_999999.db"
    stale.write_bytes(b"\0" * 16)  # a file an earlier run left behind
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONPATH": str(ROOT),
           "DJANGO_SETTINGS_MODULE": "ldpmarket.settings_test", "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
           "PROMETHEUS_MULTIPROC_DIR": str(directory), "LOG_LEVEL": "WARNING"}
    migrate = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=180)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    port = _free_port()
    gunicorn = Path(sys.executable).with_name("gunicorn")
    proc = subprocess.Popen([str(gunicorn), "ldpmarket.wsgi:application", "--bind", f"127.0.0.1:{port}",
                             "--workers", "2"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        workers = wait_until(lambda: len(_live_workers(directory)) == 2 and _live_workers(directory), 90,
                             message=lambda: f"gunicorn's workers did not start: {proc.poll()}")
        assert not stale.exists(), "gunicorn.conf.py empties the directory before the workers start"
        before = _scrape(port)
        assert before["workers"] == 2
        per_worker_before = _health_by_worker(directory)
        for _ in range(2):
            _one_round(port, 3)
        after = _scrape(port)
        per_worker = _health_by_worker(directory)
        served = {pid: per_worker.get(pid, 0) - per_worker_before.get(pid, 0) for pid in workers}
        assert all(n >= 1 for n in served.values()), f"both workers served requests: {served}"
        assert sum(served.values()) == 8
        assert after["health"] == before.get("health", 0) + 8 == sum(per_worker.values()), (after, per_worker)

        # a worker dies: gunicorn starts another, child_exit removes the dead one's live gauge, its counts stay
        dead = min(workers)
        os.kill(dead, signal.SIGKILL)
        wait_until(lambda: dead not in _live_workers(directory) and len(_live_workers(directory)) == 2, 90,
                   message=lambda: f"live workers: {_live_workers(directory)}")
        again = _scrape(port)
        assert again["workers"] == 2
        assert again["health"] == after["health"], "a dead worker's counters stay in the sum"
        assert _get(port, "/health/")[0] == 200
        assert _scrape(port)["health"] == after["health"] + 1
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        err = proc.stderr.read().decode(errors="replace")
        if proc.returncode not in (0, -signal.SIGTERM):
            print(err[-3000:])


TOKEN = "metrics-token-Zq8vX2mLk9wR4tYbN7cJd1FgH5uE0aQs"


@pytest.mark.worker
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis: set REDIS_URL (CI runs these)")
@pytest.mark.timeout(240)
def test_a_celery_worker_serves_its_pools_task_run_times(tmp_path):
    """A real worker (prefork): the task runs in a pool process, and the main process's endpoint shows it, summed
    through PROMETHEUS_MULTIPROC_DIR; loopback and the token may read it, another address may not."""
    import urllib.error
    import urllib.request

    from tests.workerproc import Broker

    directory = tmp_path / "worker-multiproc"
    directory.mkdir()
    port = _free_port()
    broker = Broker(tmp_path)
    try:
        worker = broker.start(LDP_WORKER_METRICS_PORT=port, PROMETHEUS_MULTIPROC_DIR=str(directory),
                              LDP_METRICS_TOKEN=TOKEN)
        url = f"http://127.0.0.1:{port}/metrics"
        labels = {"task": "market.tasks.sweep_stranded", "state": "success"}

        def runs() -> float:
            with urllib.request.urlopen(url, timeout=10) as response:
                assert response.status == 200
                text = response.read().decode()
            return next((s.value for f in text_string_to_metric_families(text) for s in f.samples
                         if s.name == "ldpmarket_celery_task_seconds_count" and s.labels == labels), 0.0)

        assert runs() == 0
        broker.send("market.tasks.sweep_stranded")
        broker.send("market.tasks.sweep_stranded")
        wait_until(lambda: runs() == 2, 60, message=lambda: f"{runs()} runs seen; worker log:\n{worker.log()}")
        assert worker.children() and all(pid != worker.proc.pid for pid in worker.children())
        files = {f.name for f in directory.glob("histogram_*.db")}
        assert any(str(pid) in name for pid in worker.children() for name in files), files
        with_token = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}",
                                                           "X-Forwarded-For": "203.0.113.7"})
        with urllib.request.urlopen(with_token, timeout=10) as response:
            assert response.status == 200
        forwarded = urllib.request.Request(url, headers={"X-Forwarded-For": "203.0.113.7"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(forwarded, timeout=10)
        assert refused.value.code == 403
    finally:
        broker.close()
