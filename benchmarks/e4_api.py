"""E4: the buyer API under load (docs/quality-targets.md#performance).

Requests per second and p50/p99 latency of ``POST /api/v1/quotes/`` and
``POST /api/v1/purchases/`` with 1, 8 and 32 concurrent clients against
gunicorn on loopback (``--workers 4 --threads 4``, a subprocess in its own
process group on a free port of 127.0.0.1, throttles switched off with empty
``LDP_THROTTLE_*``, Celery eager, no Redis), on a dedicated PostgreSQL database
``ldpbench_e4`` (created, migrated and dropped at the end).

Data: one categorical attribute (m = 5) of 1000 values whose chains store the
grid points 0.1 .. 1.0 (set up as in E3), and one buyer per client with
plenty of credit; each client gets its token from ``POST /api/v1/auth/token/``
and sends ``Authorization: Token ...`` over a keep-alive ``http.client``
connection (clients are threads of this process).  Quotes and purchases ask
for epsilons 0.15, 0.25, ..., 0.85 in turn (between grid points: the first
purchase at each bridges every value, later ones read the stored point); each
purchase carries a unique ``Idempotency-Key``.

Per concurrency level: first ``GET /health/`` (``E4_QUOTES`` requests: the server's floor, no
authentication and no database, for reference), then the quotes (``E4_QUOTES`` requests, default 400),
then the purchases (``E4_PURCHASES``, default 200), each phase stopped after
``E4_PHASE_SECONDS`` (default 180 s; requests not sent then are reported).  A
request is an error unless it answers 200 (quote) or 201 (purchase); a
keep-alive connection that the server closed while idle is reopened and the
request sent again once (counted as a reconnect, not an error; a purchase is
safe to resend: same Idempotency-Key).

Targets: no errors; p99 of quote under 10x its p50 (at each level).

Run: ``python -m benchmarks e4``; figures go to ``benchmarks/results/e4_api.json``.
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from . import _common
from . import _postgres as postgres

NAME = "e4_api"
DB_NAME = "ldpbench_e4"
VALUES = int(os.environ.get("E4_VALUES", 1000))
CONCURRENCY = tuple(int(x) for x in os.environ.get("E4_CONCURRENCY", "1,8,32").split(","))
QUOTES = int(os.environ.get("E4_QUOTES", 400))
PURCHASES = int(os.environ.get("E4_PURCHASES", 200))
PHASE_SECONDS = float(os.environ.get("E4_PHASE_SECONDS", 180))
WORKERS, THREADS = int(os.environ.get("E4_WORKERS", 4)), int(os.environ.get("E4_THREADS", 4))
EPSILONS = [f"{0.05 + 0.1 * k:.2f}" for k in range(1, 9)]  # 0.15 .. 0.85
WARMUP = 2  # untimed requests per client (and endpoint) before each level: connections, workers' imports
P99_FACTOR = 10.0
REQUEST_TIMEOUT = 300.0
BUYER_PASSWORD = "e4-benchmark-buyer-password"
ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- set-up

def _setup(db_url: str, buyers: int) -> int:
    """Migrate the database, make the attribute (chains at 0.1 .. 1.0) and the buyers; the attribute id."""
    from decimal import Decimal

    from . import e3_purchase as e3

    postgres.setup_django(db_url, DB_NAME)
    from django.contrib.auth.hashers import make_password

    from accounts.models import MoneyAccount, MoneyEntry, User

    attribute_id = e3._setup(VALUES)
    password = make_password(BUYER_PASSWORD)  # hashed once, shared by the benchmark's buyers
    credit = Decimal(1000)
    for i in range(buyers):
        buyer = User.objects.create(username=f"e4-buyer-{i:02d}", role=User.Role.BUYER, password=password)
        account = MoneyAccount.objects.create(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT, balance=credit)
        MoneyEntry.objects.create(account=account, amount=credit, balance_after=credit, memo="benchmark credit")
    return attribute_id


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_env(db_url: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "CELERY_TASK_ALWAYS_EAGER")}
    env.update({
        "DATABASE_URL": db_url, "DJANGO_SETTINGS_MODULE": "ldpmarket.settings", "DJANGO_DEBUG": "0",
        "LOG_LEVEL": "WARNING", "LDP_THROTTLE_ANON": "", "LDP_THROTTLE_USER": "", "LDP_THROTTLE_QUOTE": "",
        "LDP_THROTTLE_PURCHASE": "", "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DJANGO_SECURE_SSL_REDIRECT": "0",  # plain http on the loopback (docs/security.md)
    })
    # the same keys as the set-up in this process (sealed inputs, pseudonyms)
    for key in ("DJANGO_SECRET_KEY", "LDP_VALUE_KEY", "LDP_PSEUDONYM_KEY"):
        env[key] = os.environ[key]
    return env


class Server:
    """gunicorn as a subprocess in its own process group; stopped with the whole group."""

    def __init__(self, db_url: str, log_path: Path):
        self.port = _free_port()
        self.log_path = log_path
        gunicorn = Path(sys.executable).with_name("gunicorn")
        cmd = [str(gunicorn) if gunicorn.exists() else sys.executable, *([] if gunicorn.exists() else
                                                                          ["-m", "gunicorn"]),
               "ldpmarket.wsgi:application", "--bind", f"127.0.0.1:{self.port}", "--workers", str(WORKERS),
               "--threads", str(THREADS), "--timeout", str(int(REQUEST_TIMEOUT)), "--graceful-timeout", "10",
               "--log-level", "warning"]
        self.cmd = cmd
        self._log = open(log_path, "w", encoding="utf-8")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=_server_env(db_url), stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/health/")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("gunicorn did not become ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        self._log.close()


# --------------------------------------------------------------------------- clients

class Client:
    """One keep-alive connection with a buyer's token."""

    def __init__(self, port: int, token: str | None = None):
        self.port, self.token = port, token
        self.conn = None
        self.reconnects = 0

    def _connect(self):
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT)

    def post(self, path: str, body: dict | None, headers: dict | None = None) -> tuple[int, bytes]:
        """POST ``body`` as JSON (``None``: a GET without a body)."""
        method = "GET" if body is None else "POST"
        data = None if body is None else json.dumps(body).encode()
        h = {"Accept": "application/json"}
        if data is not None:
            h["Content-Type"] = "application/json"
        if self.token:
            h["Authorization"] = f"Token {self.token}"
        h.update(headers or {})
        for attempt in (0, 1):
            reused = self.conn is not None
            if self.conn is None:
                self._connect()
            try:
                self.conn.request(method, path, body=data, headers=h)
                resp = self.conn.getresponse()
                payload = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return resp.status, payload
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.conn.close()
                self.conn = None
                if not reused or attempt:  # a fresh connection failed: a real error
                    raise
                self.reconnects += 1  # the server closed an idle keep-alive connection: send again once
        raise AssertionError("unreachable")

    def close(self):
        if self.conn is not None:
            self.conn.close()


def _token(port: int, username: str) -> str:
    status, body = Client(port).post("/api/v1/auth/token/", {"username": username, "password": BUYER_PASSWORD})
    if status != 200:
        raise RuntimeError(f"token for {username}: HTTP {status} {body[:300]!r}")
    return json.loads(body)["token"]


def _request_factory(kind: str, attribute_id: int, run_id: str):
    if kind == "health":  # the floor: the same server, no authentication, no database
        return lambda seq: ("/health/", None, {}, 200)
    path = "/api/v1/quotes/" if kind == "quote" else "/api/v1/purchases/"
    expected = 200 if kind == "quote" else 201

    def make(seq: int) -> tuple[str, dict, dict, int]:
        body = {"attribute": attribute_id, "epsilon": EPSILONS[seq % len(EPSILONS)]}
        headers = {"Idempotency-Key": f"e4-{run_id}-{seq}"} if kind == "purchase" else {}
        return path, body, headers, expected

    return make


def _phase(clients: list[Client], kind: str, attribute_id: int, total: int, run_id: str) -> dict:
    """``total`` requests of one kind from ``len(clients)`` threads at once, stopped after PHASE_SECONDS."""
    make = _request_factory(kind, attribute_id, run_id)
    lock = threading.Lock()
    counter = iter(range(total))
    latencies: list[float] = []
    errors: list[str] = []
    start_gate = threading.Barrier(len(clients) + 1)
    deadline = [0.0]

    def worker(client: Client):
        start_gate.wait()
        while True:
            with lock:
                seq = next(counter, None)
            if seq is None or time.perf_counter() > deadline[0]:
                return
            path, body, headers, expected = make(seq)
            t = time.perf_counter()
            try:
                status, payload = client.post(path, body, headers)
                ok = status == expected
                err = None if ok else f"HTTP {status}: {payload[:200]!r}"
            except Exception as exc:  # a transport error is an error of this request
                err = f"{type(exc).__name__}: {exc}"
            elapsed = time.perf_counter() - t
            with lock:
                if err is None:
                    latencies.append(elapsed)
                else:
                    errors.append(err)

    reconnects_before = sum(c.reconnects for c in clients)
    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in clients]
    for th in threads:
        th.start()
    deadline[0] = time.perf_counter() + PHASE_SECONDS
    t0 = time.perf_counter()
    start_gate.wait()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    done = len(latencies) + len(errors)
    lat = np.array(latencies) if latencies else np.array([np.nan])
    return {
        "kind": kind, "clients": len(clients), "requested": total, "sent": done, "not_sent": total - done,
        "ok": len(latencies), "errors": len(errors), "error_samples": sorted(set(errors))[:5],
        "wall_seconds": wall, "rps": done / wall if wall > 0 else float("nan"),
        "p50_ms": float(np.percentile(lat, 50) * 1e3), "p99_ms": float(np.percentile(lat, 99) * 1e3),
        "mean_ms": float(lat.mean() * 1e3), "max_ms": float(lat.max() * 1e3),
        "reconnects": sum(c.reconnects for c in clients) - reconnects_before,
        "timed_out": done < total,
    }


def _warm_up(clients: list[Client], attribute_id: int, run_id: str) -> None:
    """A few untimed quotes and purchases per client, in parallel (opens the connections, loads the workers)."""
    def go(i: int, client: Client):
        for k in range(WARMUP):
            client.post("/api/v1/quotes/", {"attribute": attribute_id, "epsilon": EPSILONS[k % len(EPSILONS)]})
            client.post("/api/v1/purchases/", {"attribute": attribute_id, "epsilon": EPSILONS[k % len(EPSILONS)]},
                        {"Idempotency-Key": f"e4-warm-{run_id}-{i}-{k}"})

    threads = [threading.Thread(target=go, args=(i, c), daemon=True) for i, c in enumerate(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


# --------------------------------------------------------------------------- main

def main() -> dict:
    t0 = time.perf_counter()
    info = _common.machine_info()
    _common.print_machine(info)

    # fixed keys that pass the production rules (ldpmarket.keys): the server runs without DEBUG
    os.environ.setdefault("DJANGO_SECRET_KEY", "e4-bench-S9kQ2wE7rT4yU1iO8pA5sD3fG6hJ0lZxCvBnM-e4-bench-key")
    os.environ.setdefault("LDP_VALUE_KEY", "e4-bench-V7mN2bX9cZ4lK1jH8gF5dS3aQ0wE6rT-val")
    os.environ.setdefault("LDP_PSEUDONYM_KEY", "e4-bench-P3oI8uY2tR7eW1qA9sD5fG4hJ6kL0zX-psd")
    server_url = postgres.server_url("E3_POSTGRES_URL", "E2_POSTGRES_URL")
    db_url = postgres.with_db(server_url, DB_NAME)
    print(f"E4 API under load: gunicorn --workers {WORKERS} --threads {THREADS} on 127.0.0.1 (loopback), "
          f"database {DB_NAME} on {urlsplit(server_url).hostname}, throttles off; attribute of {VALUES} values "
          f"(chains at 0.1 .. 1.0), epsilons {EPSILONS[0]} .. {EPSILONS[-1]} in turn; per level {QUOTES} quotes "
          f"then {PURCHASES} purchases (unique Idempotency-Key each), each phase bounded by {PHASE_SECONDS:.0f} s; "
          f"clients are threads with keep-alive http.client connections", flush=True)
    postgres.admin(server_url, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    postgres.admin(server_url, f"CREATE DATABASE {DB_NAME}")
    server = None
    levels = []
    server_alive = None
    log_path = Path(os.environ.get("E4_SERVER_LOG", "/tmp/e4_gunicorn.log"))
    try:
        attribute_id = _setup(db_url, max(CONCURRENCY))
        from django.db import connections

        connections.close_all()  # the server's workers use the database from here on
        server = Server(db_url, log_path)
        server.wait_ready()
        print(f"  gunicorn up on port {server.port} (pid {server.proc.pid}); set-up "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
        tokens = [_token(server.port, f"e4-buyer-{i:02d}") for i in range(max(CONCURRENCY))]
        run_id = uuid.uuid4().hex[:12]
        for c in CONCURRENCY:
            clients = [Client(server.port, tokens[i]) for i in range(c)]
            _warm_up(clients, attribute_id, f"{run_id}-{c}")
            health = _phase(clients, "health", attribute_id, QUOTES, f"{run_id}-{c}")
            quote = _phase(clients, "quote", attribute_id, QUOTES, f"{run_id}-{c}")
            purchase = _phase(clients, "purchase", attribute_id, PURCHASES, f"{run_id}-{c}")
            for cl in clients:
                cl.close()
            levels.append({"clients": c, "health": health, "quote": quote, "purchase": purchase})
            for r in (health, quote, purchase):
                print(f"  {c:>2} clients, {r['kind']:8}: {r['ok']}/{r['requested']} ok, {r['errors']} errors, "
                      f"{r['rps']:.1f} req/s, p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms"
                      + (f", {r['not_sent']} not sent (time bound)" if r["timed_out"] else ""), flush=True)
        server_alive = server.proc.poll() is None
    finally:
        if server is not None:
            server.stop()
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # pragma: no cover
            pass
        postgres.admin(server_url, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    print(flush=True)

    rows = []
    for lv in levels:
        for r in (lv["health"], lv["quote"], lv["purchase"]):
            rows.append([r["kind"], lv["clients"], f"{r['ok']}/{r['requested']}", r["errors"],
                         f"{r['rps']:.1f}", f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}",
                         f"{r['p99_ms'] / r['p50_ms']:.1f}", f"{r['max_ms']:.0f}", r["reconnects"],
                         "yes" if r["timed_out"] else "no"])
    _common.print_table(
        ["endpoint", "clients", "ok/requested", "errors", "req/s", "p50 ms", "p99 ms", "p99/p50", "max ms",
         "reconnects", "time bound hit"], rows,
        title=f"E4 API under load: POST /api/v1/quotes/ and /api/v1/purchases/ ({VALUES} values per purchase), "
              f"gunicorn {WORKERS}x{THREADS} on loopback; 'health' = GET /health/ (no auth, no database: the "
              f"server's floor, for reference)")
    total_errors = sum(lv[k]["errors"] for lv in levels for k in ("health", "quote", "purchase"))
    not_sent = sum(lv[k]["not_sent"] for lv in levels for k in ("health", "quote", "purchase"))
    no_errors = total_errors == 0 and not_sent == 0
    print("Targets (docs/quality-targets.md#performance E4):")
    print(f"{'PASS' if no_errors else 'FAIL':4}  no errors                    {total_errors} errors"
          + (f", {not_sent} requests not sent within the time bound" if not_sent else "")
          + f" over {sum(lv[k]['requested'] for lv in levels for k in ('health', 'quote', 'purchase'))} requests")
    tail_ok = True
    for lv in levels:
        q = lv["quote"]
        ok = q["p99_ms"] < P99_FACTOR * q["p50_ms"]
        tail_ok &= ok
        print(f"{'PASS' if ok else 'FAIL':4}  quote p99 < {P99_FACTOR:g}x p50          {lv['clients']:>2} clients: "
              f"p99 {q['p99_ms']:.1f} ms = {q['p99_ms'] / q['p50_ms']:.1f}x p50 {q['p50_ms']:.1f} ms")
    for lv in levels:
        for r in (lv["health"], lv["quote"], lv["purchase"]):
            for sample in r["error_samples"]:
                print(f"      error sample ({r['kind']}, {lv['clients']} clients): {sample}")
    elapsed = time.perf_counter() - t0
    result = {
        "machine": info,
        "config": {
            "server": "gunicorn ldpmarket.wsgi:application " + " ".join(server.cmd[2:]) if server else None,
            "workers": WORKERS, "threads": THREADS, "database": f"PostgreSQL, database {DB_NAME}",
            "throttles": "off (LDP_THROTTLE_* empty)", "celery": "eager (no Redis)",
            "values_per_purchase": VALUES, "epsilons": EPSILONS, "concurrency": list(CONCURRENCY),
            "quotes_per_level": QUOTES, "purchases_per_level": PURCHASES, "phase_time_bound_seconds": PHASE_SECONDS,
            "warmup_per_client": WARMUP, "clients": "threads of the benchmark process, keep-alive http.client, "
                                                    "token auth; one buyer per client",
            "p99_factor": P99_FACTOR,
        },
        "levels": levels,
        "server_alive_at_end": server_alive if levels else None,
        "pass": {"no_errors": no_errors, "quote_p99_under_10x_p50": tail_ok},
        "elapsed_seconds": elapsed,
    }
    path = _common.write_results(NAME, result)
    print(f"\nwrote {path} ({elapsed:.0f} s)")
    return result


if __name__ == "__main__":
    main()
