"""Health endpoints (docs/operations.md, "Health checks").

* ``/health/``: liveness. The process answers; nothing else is checked, so an outage of the database or of
  Redis never gets a healthy web process restarted.
* ``/health/ready/``: readiness. The database, the Celery broker and the cache are each checked (a short
  timeout each); JSON with each one's state, 200 when all are up, 503 (with ``Retry-After``) naming those that
  are down. Errors are reported by their class name only: the endpoint is public.
"""
from __future__ import annotations

import logging

from django.core.cache import caches
from django.db import connections
from django.http import JsonResponse
from django.views.decorators.cache import never_cache

from ldpmarket.celery import app

logger = logging.getLogger(__name__)

#: Seconds a readiness check may wait for the broker.
BROKER_TIMEOUT = 2.0
RETRY_AFTER = 10


@never_cache
def live(request):
    """Liveness for docker-compose and load balancers."""
    return JsonResponse({"status": "ok"})


def _check(name: str, probe) -> dict:
    try:
        detail = probe()
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
        logger.warning("readiness: the %s is unavailable: %r", name, exc)
        return {"ok": False, "error": type(exc).__name__}
    return {"ok": True, **({"detail": detail} if detail else {})}


def _database():
    with connections["default"].cursor() as cur:
        cur.execute("SELECT 1")
        cur.fetchone()


def _broker():

    if app.conf.task_always_eager:
        return "tasks run in-process (eager)"
    with app.connection_for_write(connect_timeout=BROKER_TIMEOUT) as conn:
        conn.ensure_connection(max_retries=0, timeout=BROKER_TIMEOUT)  # one try
    return None


def _cache():
    cache = caches["default"]
    if hasattr(cache, "ping"):
        cache.ping()
        return None
    cache.set("health:ready", 1, 5)
    if cache.get("health:ready") != 1:
        raise RuntimeError("the cache did not keep a value")
    return None


@never_cache
def ready(request):
    """Readiness: the database, the broker and the cache (module docstring)."""
    checks = {"database": _check("database", _database), "broker": _check("broker", _broker),
              "cache": _check("cache", _cache)}
    down = [name for name, c in checks.items() if not c["ok"]]
    body = {"status": "unavailable" if down else "ok", "checks": checks}
    if down:
        body["unavailable"] = down
        return JsonResponse(body, status=503, headers={"Retry-After": str(RETRY_AFTER)})
    return JsonResponse(body)
