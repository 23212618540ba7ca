"""E9: what ``GET /metrics`` costs under E4's load (docs/operations.md#metrics).

E4's machinery (``benchmarks/e4_api.py``): the same set-up (one categorical attribute of ``E4_VALUES`` values,
default 1000, chains stored at 0.1 .. 1.0, as E3 sets them up), the same gunicorn server (``--workers 4 --threads 4``
on loopback, throttles off, Celery eager), the same load generator (``E9_CLIENTS`` threads, default 8, each a
buyer with a keep-alive ``http.client`` connection and a token, sending E4's quotes or purchases as fast as they
are answered).  Only the server's environment differs from E4's, as production runs it (docs/operations.md#metrics):

* ``LDP_METRICS_TOKEN`` set, and the scraper sends ``Authorization: Bearer <token>`` as Prometheus does (it is also
  a loopback client, which the view checks first, so the token is not what admits it here);
* ``PROMETHEUS_MULTIPROC_DIR`` set to a new empty directory (gunicorn runs 4 workers; ``gunicorn.conf.py``):
  every scrape sums the workers' files;
* ``REDIS_URL`` set (``E9_REDIS_URL``, default database 13 of 127.0.0.1:6379) so that the two scans' figures
  (``budgets``, ``chains``) are cached in Redis and shared by the workers, as in docker compose; Celery is kept
  eager (``CELERY_TASK_ALWAYS_EAGER=1``) as in E4, so the broker is only read by the scrape's queue lengths.

(a) Cost: per endpoint (``E9_KINDS``, default quote and purchase), ``E9_ROUNDS`` rounds (default 3); each round
runs the load for ``E9_PHASE_SECONDS`` (default 20 s) without a scraper and the same time with a scraper fetching
``/metrics`` every ``E9_SCRAPE_INTERVAL`` seconds (default 1 s, on a fixed schedule), the order alternating from
round to round.  The figure is each round's requests/s with the scraper divided by without, and their median.  A
realistic Prometheus interval is 15 s: scraping every second exaggerates the cost about 15 times.

(b) ``/metrics`` latency under that load (the scraper's requests during the quote phases): median and p95 of the
warm scrapes (the scans' figures taken from the cache: ``ldpmarket_collector_age_seconds`` > 0 for both), and
``E9_COLD`` (default 5) cold scrapes under the same quote load, the scan cache emptied (the Redis keys deleted,
untimed) just before each, checked from the answer (age 0: computed for that scrape).  The same, once without
load, for reference.  Scrapes that happened to recompute the scans on their own (every
``LDP_METRICS_SCAN_INTERVAL_SECONDS``, 60 by default) are counted apart.

Uses a dedicated PostgreSQL database ``ldpbench_e9`` (created, migrated and dropped).
Run: ``python -m benchmarks e9``; figures go to ``benchmarks/results/<E9_RESULTS>.json`` (default ``e9_metrics``).
Quicker: ``E9_ROUNDS=1 E9_PHASE_SECONDS=3 E9_COLD=2 E4_VALUES=100 python -m benchmarks e9``.
"""
from __future__ import annotations

import os
import re
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from . import _common
from . import _postgres as postgres
from . import e4_api as e4

NAME = "e9_metrics"
RESULTS = os.environ.get("E9_RESULTS", NAME)
DB_NAME = "ldpbench_e9"
CLIENTS = int(os.environ.get("E9_CLIENTS", 8))
ROUNDS = int(os.environ.get("E9_ROUNDS", 3))
PHASE_SECONDS = float(os.environ.get("E9_PHASE_SECONDS", 20))
KINDS = tuple(os.environ.get("E9_KINDS", "quote,purchase").split(","))
SCRAPE_INTERVAL = float(os.environ.get("E9_SCRAPE_INTERVAL", 1.0))
COLD = int(os.environ.get("E9_COLD", 5))
REDIS_URL = os.environ.get("E9_REDIS_URL", "redis://127.0.0.1:6379/13")
TOKEN = "e9-bench-Q8wN3mZ7xK2pL5vB9cR4tY6uH1jD0sF-metrics"
SCANS = ("budgets", "chains")
UNBOUNDED = 10**9  # requests per phase: the phase is bounded by its time only

_AGE = re.compile(r'^ldpmarket_collector_age_seconds\{collector="(\w+)"\} (\S+)$', re.M)
_SECONDS = re.compile(r'^ldpmarket_collector_seconds\{collector="(\w+)"\} (\S+)$', re.M)
_UP = re.compile(r'^ldpmarket_collector_up\{collector="(\w+)"\} (\S+)$', re.M)
_WORKERS = re.compile(r'^ldpmarket_web_workers(?:\{[^}]*\})? (\S+)$', re.M)


def _setup(db_url: str, buyers: int) -> int:
    """E4's set-up (``e4_api._setup``) with each buyer's credit 10^9 instead of 1000 (phases bounded by time
    only buy more than E4's fixed counts); the attribute id."""
    from . import e3_purchase as e3

    postgres.setup_django(db_url, DB_NAME)
    from django.contrib.auth.hashers import make_password

    from accounts.models import MoneyAccount, MoneyEntry, User

    attribute_id = e3._setup(e4.VALUES)
    password = make_password(e4.BUYER_PASSWORD)
    credit = Decimal(10) ** 9
    for i in range(buyers):
        buyer = User.objects.create(username=f"e4-buyer-{i:02d}", role=User.Role.BUYER, password=password)
        account = MoneyAccount.objects.create(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT, balance=credit)
        MoneyEntry.objects.create(account=account, amount=credit, balance_after=credit, memo="benchmark credit")
    return attribute_id


def _flush_scans() -> int:
    """Delete the scans' cached figures from Redis (the cache is empty for them); the keys deleted."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match="*ldpmarket:metrics:*"))
        return client.delete(*keys) if keys else 0
    finally:
        client.close()


def _scrape(client: e4.Client, cold: bool) -> dict:
    """One ``GET /metrics`` with the token (the cache emptied first, untimed, when ``cold``): latency and figures."""
    if cold:
        _flush_scans()
    t = time.perf_counter()
    try:
        status, body = client.post("/metrics", None, {"Authorization": f"Bearer {TOKEN}", "Accept": "text/plain"})
        err = None
    except Exception as exc:  # a transport error is an error of this scrape
        status, body, err = None, b"", f"{type(exc).__name__}: {exc}"
    latency = time.perf_counter() - t
    text = body.decode("utf-8", "replace")
    ages = {k: float(v) for k, v in _AGE.findall(text)}
    seconds = {k: float(v) for k, v in _SECONDS.findall(text)}
    up = {k: float(v) for k, v in _UP.findall(text)}
    workers = [float(v) for v in _WORKERS.findall(text)]
    computed = [name for name in SCANS if ages.get(name, -1.0) == 0.0]
    return {"at": time.time(), "latency_ms": latency * 1e3, "status": status, "error": err, "bytes": len(body),
            "requested_cold": cold, "scans_computed": computed, "ages": ages, "collector_seconds": seconds,
            "collectors_down": sorted(k for k, v in up.items() if v != 1.0),
            "web_workers": sum(workers) if workers else None}


class Scraper:
    """A thread fetching ``/metrics`` every ``interval`` seconds on a fixed schedule (a slow scrape delays the next
    one, as Prometheus would not overlap them), over one keep-alive connection; ``count`` scrapes at most."""

    def __init__(self, port: int, interval: float, *, cold: bool = False, count: int | None = None,
                 delay: float = 0.0):
        self.client = e4.Client(port)
        self.interval, self.cold, self.count, self.delay = interval, cold, count, delay
        self.scrapes: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        if self.delay and self._stop.wait(self.delay):
            return
        start = time.perf_counter()
        k = 0
        while not self._stop.is_set() and (self.count is None or k < self.count):
            self.scrapes.append(_scrape(self.client, self.cold))
            k += 1
            delay = start + k * self.interval - time.perf_counter()
            if delay > 0 and self._stop.wait(delay):
                break

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.client.close()


def _stats(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    a = np.array(values)
    return {"n": len(values), "median_ms": float(np.median(a)), "p95_ms": float(np.percentile(a, 95)),
            "min_ms": float(a.min()), "max_ms": float(a.max())}


def _warm(scrapes: list[dict]) -> list[dict]:
    return [s for s in scrapes if s["status"] == 200 and not s["scans_computed"]]


def _phase(clients, kind, attribute_id, run_id, seconds, scraper: Scraper | None) -> dict:
    old = e4.PHASE_SECONDS
    e4.PHASE_SECONDS = seconds
    load = _common.load_text()
    try:
        if scraper is None:
            r = e4._phase(clients, kind, attribute_id, UNBOUNDED, run_id)
        else:
            with scraper:
                r = e4._phase(clients, kind, attribute_id, UNBOUNDED, run_id)
    finally:
        e4.PHASE_SECONDS = old
    keep = ("kind", "clients", "sent", "ok", "errors", "error_samples", "wall_seconds", "rps", "p50_ms", "p99_ms",
            "mean_ms", "max_ms", "reconnects")
    out = {k: r[k] for k in keep}
    out["load_at_start"] = load
    out["scraping"] = scraper is not None
    if scraper is not None:
        out["scrapes"] = scraper.scrapes
    return out


def main() -> dict:
    t0 = time.perf_counter()
    info = _common.machine_info()
    _common.print_machine(info)
    os.environ.setdefault("DJANGO_SECRET_KEY", "e4-bench-S9kQ2wE7rT4yU1iO8pA5sD3fG6hJ0lZxCvBnM-e4-bench-key")
    os.environ.setdefault("LDP_VALUE_KEY", "e4-bench-V7mN2bX9cZ4lK1jH8gF5dS3aQ0wE6rT-val")
    os.environ.setdefault("LDP_PSEUDONYM_KEY", "e4-bench-P3oI8uY2tR7eW1qA9sD5fG4hJ6kL0zX-psd")
    server_url = postgres.server_url("E3_POSTGRES_URL", "E2_POSTGRES_URL")
    db_url = postgres.with_db(server_url, DB_NAME)
    prom_dir = tempfile.mkdtemp(prefix="e9_prometheus_")
    extra_env = {"LDP_METRICS_TOKEN": TOKEN, "PROMETHEUS_MULTIPROC_DIR": prom_dir, "REDIS_URL": REDIS_URL,
                 "CELERY_TASK_ALWAYS_EAGER": "1"}
    print(f"E9 /metrics under E4's load: gunicorn --workers {e4.WORKERS} --threads {e4.THREADS} on 127.0.0.1, "
          f"database {DB_NAME} on {urlsplit(server_url).hostname}, attribute of {e4.VALUES} values; {CLIENTS} "
          f"clients; endpoints {', '.join(KINDS)}; {ROUNDS} rounds of {PHASE_SECONDS:g} s without and with a "
          f"scraper every {SCRAPE_INTERVAL:g} s (Prometheus: 15 s); {COLD} cold scrapes; cache {REDIS_URL}",
          flush=True)
    postgres.admin(server_url, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    postgres.admin(server_url, f"CREATE DATABASE {DB_NAME}")
    _flush_scans()
    original_env = e4._server_env

    def server_env(url: str) -> dict:
        env = original_env(url)
        env.update(extra_env)
        return env

    server = None
    server_alive = None
    idle: dict = {}
    cold_phase: dict = {}
    rounds: dict[str, list] = {k: [] for k in KINDS}
    log_path = Path(os.environ.get("E9_SERVER_LOG", "/tmp/e9_gunicorn.log"))
    try:
        attribute_id = _setup(db_url, CLIENTS)
        from django.db import connections

        connections.close_all()
        e4._server_env = server_env
        try:
            server = e4.Server(db_url, log_path)
        finally:
            e4._server_env = original_env
        server.wait_ready()
        print(f"  gunicorn up on port {server.port}; set-up {time.perf_counter() - t0:.0f} s", flush=True)
        tokens = [e4._token(server.port, f"e4-buyer-{i:02d}") for i in range(CLIENTS)]
        run_id = uuid.uuid4().hex[:12]

        # without load, for reference: cold (cache emptied before each) then warm, one a second
        for cold in (True, False):
            s = Scraper(server.port, SCRAPE_INTERVAL, cold=cold, count=COLD)
            with s:
                s._thread.join()
            idle["cold" if cold else "warm"] = s.scrapes
        clients = [e4.Client(server.port, tokens[i]) for i in range(CLIENTS)]
        e4._warm_up(clients, attribute_id, run_id)
        for kind in KINDS:
            for r in range(ROUNDS):
                order = (False, True) if r % 2 == 0 else (True, False)
                pair = {}
                for scraping in order:
                    scraper = Scraper(server.port, SCRAPE_INTERVAL) if scraping else None
                    res = _phase(clients, kind, attribute_id, f"{run_id}-{kind}-{r}-{int(scraping)}",
                                 PHASE_SECONDS, scraper)
                    pair["with_scraper" if scraping else "without"] = res
                pair["ratio"] = pair["with_scraper"]["rps"] / pair["without"]["rps"]
                rounds[kind].append(pair)
                w, s = pair["without"], pair["with_scraper"]
                warm = _stats([x["latency_ms"] for x in _warm(s["scrapes"])])
                print(f"  {kind:8} round {r + 1}: without {w['rps']:.1f} req/s ({w['errors']} errors), with "
                      f"scraper {s['rps']:.1f} req/s ({s['errors']} errors) = {pair['ratio']:.3f}; "
                      f"{len(s['scrapes'])} scrapes, warm median {warm.get('median_ms', float('nan')):.1f} ms; "
                      f"load {w['load_at_start']}", flush=True)
        # cold scrapes under the quote load
        # (the scraper starts 0.5 s after the load; the phase lasts until the last cold scrape should be done)
        cold_seconds = COLD * SCRAPE_INTERVAL + 2.0
        cold_phase = _phase(clients, "quote", attribute_id, f"{run_id}-cold", cold_seconds,
                            Scraper(server.port, SCRAPE_INTERVAL, cold=True, count=COLD, delay=0.5))
        for cl in clients:
            cl.close()
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
        shutil.rmtree(prom_dir, ignore_errors=True)
        try:
            _flush_scans()
        except Exception:  # pragma: no cover
            pass
    print(flush=True)

    # ---------------------------------------------------------------- summary
    cost = {}
    rows = []
    for kind, pairs in rounds.items():
        ratios = [p["ratio"] for p in pairs]
        tot_w = sum(p["without"]["sent"] for p in pairs) / sum(p["without"]["wall_seconds"] for p in pairs)
        tot_s = sum(p["with_scraper"]["sent"] for p in pairs) / sum(p["with_scraper"]["wall_seconds"] for p in pairs)
        cost[kind] = {"ratio_each_round": ratios, "ratio_median": statistics.median(ratios),
                      "rps_without_all_rounds": tot_w, "rps_with_scraper_all_rounds": tot_s,
                      "ratio_all_rounds": tot_s / tot_w,
                      "errors": sum(p[c]["errors"] for p in pairs for c in ("without", "with_scraper"))}
        rows.append([kind, CLIENTS, f"{tot_w:.1f}", f"{tot_s:.1f}", ", ".join(f"{x:.3f}" for x in ratios),
                     f"{cost[kind]['ratio_median']:.3f}", cost[kind]["errors"]])
    _common.print_table(["endpoint", "clients", "req/s without", "req/s with scraper", "ratio each round",
                         "median ratio", "errors"], rows,
                        title=f"E9 (a): E4's endpoints without and with /metrics scraped every "
                              f"{SCRAPE_INTERVAL:g} s ({PHASE_SECONDS:g} s phases)")

    under_load = [s for kind in KINDS if kind == "quote" for p in rounds[kind] for s in p["with_scraper"]["scrapes"]]
    all_scrapes = [s for kind in KINDS for p in rounds[kind] for s in p["with_scraper"]["scrapes"]]
    cold_scrapes = cold_phase.get("scrapes", [])
    latency = {
        "idle_cold": _stats([s["latency_ms"] for s in idle.get("cold", []) if s["status"] == 200]),
        "idle_warm": _stats([s["latency_ms"] for s in _warm(idle.get("warm", []))]),
        "quote_load_warm": _stats([s["latency_ms"] for s in _warm(under_load)]),
        "quote_load_cold": _stats([s["latency_ms"] for s in cold_scrapes if s["status"] == 200]),
        "quote_load_recomputed_on_expiry": _stats([s["latency_ms"] for s in under_load
                                                   if s["status"] == 200 and s["scans_computed"]]),
        "purchase_load_warm": _stats([s["latency_ms"] for p in rounds.get("purchase", [])
                                      for s in _warm(p["with_scraper"]["scrapes"])]),
    }
    checks = {
        "cold_scrapes_computed_both_scans": sum(set(s["scans_computed"]) == set(SCANS)
                                                for s in cold_scrapes + idle.get("cold", [])),
        "cold_scrapes": len(cold_scrapes) + len(idle.get("cold", [])),
        "scrape_errors": sum(s["status"] != 200 for s in all_scrapes + cold_scrapes + idle.get("cold", [])
                             + idle.get("warm", [])),
        "collectors_down": sorted({c for s in all_scrapes + cold_scrapes for c in s["collectors_down"]}),
        "web_workers_seen": sorted({s["web_workers"] for s in all_scrapes if s["web_workers"] is not None}),
    }
    cold_collectors = {name: statistics.median([s["collector_seconds"].get(name, float("nan")) * 1e3
                                                for s in cold_scrapes]) if cold_scrapes else None
                       for name in ("purchases", "budgets", "chains", "stranded", "checkpoints", "witnesses",
                                    "celery_queues")}
    lrows = [[k, v["n"], *(f"{v[x]:.1f}" for x in ("median_ms", "p95_ms", "min_ms", "max_ms"))] if v["n"] else
             [k, 0, "-", "-", "-", "-"] for k, v in latency.items()]
    _common.print_table(["scrapes", "n", "median ms", "p95 ms", "min ms", "max ms"], lrows,
                        title="E9 (b): GET /metrics latency (cold: scan cache emptied just before)")
    print("cold scrapes under quote load, per collector (median ms): "
          + ", ".join(f"{k} {v:.1f}" for k, v in cold_collectors.items() if v is not None))
    print(f"checks: {checks}")
    elapsed = time.perf_counter() - t0
    result = {
        "machine": info,
        "config": {
            "server": "gunicorn ldpmarket.wsgi:application " + " ".join(server.cmd[2:]) if server else None,
            "server_env_beyond_e4": {**{k: v for k, v in extra_env.items() if k != "LDP_METRICS_TOKEN"},
                                     "LDP_METRICS_TOKEN": "(set, 48 characters)"},
            "metrics_scan_interval_seconds": "60 (default LDP_METRICS_SCAN_INTERVAL_SECONDS)",
            "values": e4.VALUES, "clients": CLIENTS, "kinds": list(KINDS), "rounds": ROUNDS,
            "phase_seconds": PHASE_SECONDS, "scrape_interval_seconds": SCRAPE_INTERVAL,
            "note": "a realistic Prometheus scrape interval is 15 s; scraping every 1 s exaggerates the cost ~15x",
            "cold_scrapes": COLD, "epsilons": e4.EPSILONS, "buyer_credit": "10^9 each",
            "load": "E4's load generator (benchmarks/e4_api._phase): one keep-alive http.client connection per "
                    "client thread, token auth, requests sent back to back for the phase's time",
        },
        "cost": cost,
        "latency": latency,
        "cold_scrape_collector_ms_median": cold_collectors,
        "checks": checks,
        "rounds": rounds,
        "idle_scrapes": idle,
        "cold_phase": cold_phase,
        "server_alive_at_end": server_alive,
        "elapsed_seconds": elapsed,
    }
    path = _common.write_results(RESULTS, result)
    print(f"\nwrote {path} ({elapsed:.0f} s)")
    return result


if __name__ == "__main__":
    main()
