"""Metrics in the Prometheus text format, the plumbing half (docs/operations.md#metrics).

What this module holds, for ``GET /metrics`` (``audit.metrics_http``) and for the Celery workers' own endpoint:

* **the registry of one scrape** (:func:`exposition`): with ``PROMETHEUS_MULTIPROC_DIR`` set (gunicorn's workers,
  Celery's pool processes), the in-process metrics of every process of this host that writes into that directory,
  summed by prometheus-client's multiprocess mode; without it, this process's own.  Beside them, the metrics
  computed when scraped (:class:`Scrape`): the same whichever process answers.
* **in-process metrics**: django-prometheus's (requests, database, cache) and :data:`TASK_SECONDS`, the run time
  of every Celery task (``task_prerun`` / ``task_postrun``, connected by ``ldpmarket.celery``), and the gunicorn
  workers alive (:func:`count_web_worker`).
* **the Celery queues' lengths** (:func:`celery_queue_families`), read from Redis when scraped.
* **who may read them** (:func:`loopback_request`, :func:`bearer_matches`): a client on this host that no proxy
  forwarded, or whoever sends ``LDP_METRICS_TOKEN`` (the view adds signed-in staff).
* **the workers' endpoint** (:func:`serve_worker_metrics`): a Celery worker, which has no HTTP server of its own,
  serves its pool's metrics on ``LDP_WORKER_METRICS_PORT`` (started from ``worker_init``).

Plumbing: imports no app, and not ``ldpmarket.celery`` (which imports this module).
"""
from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import redis
from django.conf import settings
from django.core.cache import cache
from prometheus_client import REGISTRY, CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector

logger = logging.getLogger(__name__)

#: prometheus-client's switch to its multiprocess mode: the directory every process writes its metrics into.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: Headers a proxy adds to what it forwards: a request carrying one is never taken for a local client.
FORWARDING_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def multiproc_dir() -> str:
    """``PROMETHEUS_MULTIPROC_DIR``, or ``""`` when each process keeps its own metrics."""
    return os.environ.get(MULTIPROC_ENV, "")


# The directory must exist before the first metric is made (prometheus-client opens its file then).
if multiproc_dir():
    Path(multiproc_dir()).mkdir(parents=True, exist_ok=True)

#: Run time of each Celery task, by task name and final state (success, failure, retry, ...), in the process that
#: ran it: a worker's pool process (or the web process, when tasks run in-process).
TASK_SECONDS = Histogram(
    "ldpmarket_celery_task_seconds", "Run time of Celery tasks, by task and final state (seconds).",
    ["task", "state"], buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600))

_web_worker: Gauge | None = None


def count_web_worker() -> None:
    """``ldpmarket_web_workers``, the gunicorn workers alive (multiprocess mode): each worker sets 1 once it has loaded
    the application (``post_worker_init`` in ``gunicorn.conf.py``), and gunicorn's ``child_exit`` removes a dead
    worker's file (``mark_process_dead``), so the sum of the live ones is their number.  Made here, in the worker
    only: another process neither has nor shows it."""
    global _web_worker
    if _web_worker is None:
        _web_worker = Gauge("ldpmarket_web_workers", "gunicorn worker processes alive (multiprocess mode).",
                            multiprocess_mode="livesum")
    _web_worker.set(1)


# ------------------------------------------------------------------------------------------- Celery tasks

_started: dict[str, float] = {}
_started_lock = threading.Lock()


def task_started(task_id=None, task=None, **_kwargs) -> None:
    """``task_prerun``: note when the task began (by task id: an eager task may run inside another)."""
    if task_id:
        with _started_lock:
            _started[task_id] = time.perf_counter()


def task_finished(task_id=None, task=None, state=None, **_kwargs) -> None:
    """``task_postrun``: observe the task's run time, labelled with its name and final state."""
    with _started_lock:
        began = _started.pop(task_id, None) if task_id else None
    if began is None:
        return
    name = getattr(task, "name", None) or "unknown"
    TASK_SECONDS.labels(task=name, state=(state or "unknown").lower()).observe(time.perf_counter() - began)


# ------------------------------------------------------------------------------------------- one scrape

class _ThisProcess:
    """A collector: the metrics of this process's default registry (when each process keeps its own)."""

    def collect(self) -> Iterable[Metric]:
        yield from REGISTRY.collect()


class Scrape:
    """A collector of metrics computed when scraped: ``sources`` maps a name to a function returning metric
    families.  Each source is timed and guarded: one that raises is left out of this scrape, logged, and reported
    by ``ldpmarket_collector_up{collector=<name>} 0``, and the others still answer.

    ``max_age`` names the costly sources (a scan of every value) and how long their figures may be reused (seconds;
    0: computed at every scrape): they are kept in the cache, shared by the processes that share it (Redis), and
    computed again once older.  ``ldpmarket_collector_age_seconds`` says how old each source's figures are, and
    ``ldpmarket_collector_seconds`` how long they took to compute."""

    def __init__(self, sources: Mapping[str, Callable[[], Iterable[Metric]]], max_age: Mapping[str, float] = ()):
        self.sources = dict(sources)
        self.max_age = dict(max_age)

    def _families(self, name: str, source) -> tuple[list[Metric], float, float]:
        """The source's families, the seconds they took, and their age."""
        max_age = float(self.max_age.get(name, 0) or 0)
        key = f"ldpmarket:metrics:{name}"
        if max_age > 0:
            kept = cache.get(key)
            if kept is not None and 0 <= time.time() - kept[0] < max_age:
                return kept[2], kept[1], time.time() - kept[0]
        computed_at, began = time.time(), time.perf_counter()
        families = list(source())
        took = time.perf_counter() - began
        if max_age > 0:
            cache.set(key, (computed_at, took, families), timeout=max_age)
        return families, took, 0.0

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily("ldpmarket_collector_up",
                               "1 when the collector of these metrics answered this scrape, 0 when it failed.",
                               labels=["collector"])
        seconds = GaugeMetricFamily("ldpmarket_collector_seconds", "Time the collector took to compute its figures.",
                                    labels=["collector"])
        age = GaugeMetricFamily("ldpmarket_collector_age_seconds",
                                "Age of the collector's figures (0: computed for this scrape).", labels=["collector"])
        for name, source in self.sources.items():
            began = time.perf_counter()
            try:
                families, took, old = self._families(name, source)
            except Exception:  # noqa: BLE001 - one failing source must not take the others down
                logger.exception("metrics: the collector %s failed", name)
                families, took, old, ok = [], time.perf_counter() - began, 0.0, 0.0
            else:
                ok = 1.0
            yield from families
            up.add_metric([name], ok)
            seconds.add_metric([name], took)
            age.add_metric([name], old)
        yield up
        yield seconds
        yield age


def exposition(*collectors) -> tuple[bytes, str]:
    """The text format of one scrape, and its content type: the in-process metrics (every process of this host
    writing into ``PROMETHEUS_MULTIPROC_DIR``, summed; or this process's own) and ``collectors``."""
    registry = CollectorRegistry(auto_describe=False)
    if multiproc_dir():
        MultiProcessCollector(registry)
    else:
        registry.register(_ThisProcess())
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry), CONTENT_TYPE_PLAIN_0_0_4


# ------------------------------------------------------------------------------------------- Celery queues

#: kombu's Redis transport keeps a queue's messages of priority p > 0 in the list ``<queue>\x06\x16<p>``.
PRIORITY_SEPARATOR = "\x06\x16"
PRIORITY_STEPS = (0, 3, 6, 9)


def celery_queues() -> list[str]:
    """The queues tasks are sent to: the default queue and those of ``CELERY_TASK_ROUTES`` (``LDP_SETTLE_QUEUE``)."""
    queues = [getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", None) or "celery"]
    for route in (getattr(settings, "CELERY_TASK_ROUTES", None) or {}).values():
        queue = route.get("queue") if isinstance(route, Mapping) else None
        if queue and queue not in queues:
            queues.append(queue)
    return queues


def celery_queue_families(*, timeout: float = 1.0) -> Iterable[Metric]:
    """``ldpmarket_celery_queue_length{queue}``: the messages waiting in each queue (Redis ``LLEN`` of its lists,
    every priority), read when scraped.  Nothing when the broker is not Redis (the embedded set-up)."""
    url = getattr(settings, "CELERY_BROKER_URL", "") or ""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return []
    prefix = (getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}).get("global_keyprefix", "")
    queues = celery_queues()
    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        pipe = client.pipeline(transaction=False)
        for queue in queues:
            for step in PRIORITY_STEPS:
                pipe.llen(f"{prefix}{queue}{PRIORITY_SEPARATOR}{step}" if step else f"{prefix}{queue}")
        lengths = pipe.execute()
    finally:
        client.close()
    family = GaugeMetricFamily("ldpmarket_celery_queue_length", "Celery messages waiting in each queue (Redis).",
                               labels=["queue"])
    for i, queue in enumerate(queues):
        family.add_metric([queue], float(sum(lengths[i * len(PRIORITY_STEPS):(i + 1) * len(PRIORITY_STEPS)])))
    return [family]


# ------------------------------------------------------------------------------------------- who may read

def _loopback(address: str | None) -> bool:
    try:
        ip = ipaddress.ip_address((address or "").strip().strip("[]"))
    except ValueError:
        return False
    if getattr(ip, "ipv4_mapped", None):
        ip = ip.ipv4_mapped
    return ip.is_loopback


def loopback_request(meta: Mapping[str, str]) -> bool:
    """Whether the request came from this host itself, and not through a proxy: the peer
    (``LDP_PEER_ADDR``, set by ``ldpmarket.clientaddr``; else ``REMOTE_ADDR``) and the client address are both
    loopback addresses, and the request carries no ``X-Forwarded-For``, ``Forwarded`` or ``X-Real-IP`` header (a
    proxy on this host forwarding someone else's request adds one).  A unix-socket peer is not loopback."""
    peer = meta.get("LDP_PEER_ADDR", meta.get("REMOTE_ADDR"))
    if not (_loopback(peer) and _loopback(meta.get("REMOTE_ADDR"))):
        return False
    return not any(meta.get(header) for header in FORWARDING_HEADERS)


def bearer_matches(authorization: str | None, token: str) -> bool:
    """Whether ``Authorization: Bearer <token>`` names ``token`` (constant-time; never with an empty token)."""
    if not token or not authorization:
        return False
    scheme, _, given = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


# ------------------------------------------------------------------------------------------- workers' endpoint

FORBIDDEN = (b"403 Forbidden: the metrics are served to this host's own clients and to the metrics token "
             b"(docs/operations.md#metrics)\n")


def worker_metrics_app(token: str):
    """The WSGI application of a worker's metrics endpoint: ``GET /metrics`` for a loopback client that no proxy
    forwarded, or with the metrics token; 403 otherwise, 404 elsewhere."""

    def app(environ, start_response):
        if environ.get("PATH_INFO", "") not in ("/metrics", "/metrics/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"404 Not Found\n"]
        if not (loopback_request(environ) or bearer_matches(environ.get("HTTP_AUTHORIZATION"), token)):
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [FORBIDDEN]
        body, content_type = exposition()
        start_response("200 OK", [("Content-Type", content_type), ("Cache-Control", "no-store")])
        return [body]

    return app


def serve_worker_metrics(port: int, token: str, host: str = "0.0.0.0"):
    """Serve :func:`worker_metrics_app` on ``host:port`` from a daemon thread of this process; the server (its
    ``server_port`` is the port bound)."""
    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature; scrapes are not logged
            pass

    server = make_server(host, port, worker_metrics_app(token), handler_class=QuietHandler)
    threading.Thread(target=server.serve_forever, name="ldpmarket-worker-metrics", daemon=True).start()
    logger.info("serving the worker's metrics on %s:%s/metrics", host, server.server_port)
    return server


def worker_started(sender=None, **_kwargs) -> None:
    """``worker_init`` (a Celery worker's main process, before its pool starts): serve the pool's metrics on
    ``LDP_WORKER_METRICS_PORT`` when it is set.  The pool processes write them into ``PROMETHEUS_MULTIPROC_DIR``,
    without which this process would see none of them (a warning says so)."""
    port = int(getattr(settings, "LDP_WORKER_METRICS_PORT", 0) or 0)
    if not port:
        return
    if not multiproc_dir():
        logger.warning("LDP_WORKER_METRICS_PORT is set but %s is not: the worker's endpoint shows only its main "
                       "process, not the pool processes that run the tasks (docs/operations.md#metrics)",
                       MULTIPROC_ENV)
    try:
        serve_worker_metrics(port, getattr(settings, "LDP_METRICS_TOKEN", ""))
    except OSError as exc:
        logger.error("could not serve the worker's metrics on port %s: %s", port, exc)
