"""The cache: Redis, degrading to a process-local cache while Redis is unreachable (docs/operations.md).

Everything the service keeps in the cache can be lost or recomputed: API throttle counts, the portal's
sign-in failure counts, purchase progress, cached estimates.  So a Redis outage must not turn requests into
errors.  :class:`FallbackRedisCache` is Django's ``RedisCache`` with

* short socket timeouts (``socket_connect_timeout``, ``socket_timeout``: OPTIONS ``timeout``, default 0.5 s,
  ``LDP_CACHE_TIMEOUT_SECONDS``), so an unreachable or hung Redis costs a request at most that once;
* a fallback: an operation that fails with a connection error (or a timeout, or a read-only replica) is done
  on a local-memory cache of this process instead, and for ``retry_after`` seconds (OPTIONS, default 5) every
  operation goes there directly, without trying Redis; then **one** operation of the process tries Redis
  again (the probe) while the others keep to the local cache, so a Redis that stays down stalls one request
  per window, not every request in flight.  A warning is logged when Redis is lost and when it is back.

The bound (issue 27): with Redis hung (connections accepted, nothing answered), a request waits at most one
``timeout`` for the cache, measured in ``tests/ldpmarket/test_outages.py`` (docs/operations.md#redis-down).

While Redis is down each process counts throttles and sign-in failures on its own (limits hold per process);
progress written by a worker is not seen by the web processes; cached estimates are recomputed.

:meth:`FallbackRedisCache.ping` asks Redis itself (no fallback), for ``/health/ready/``.
"""
from __future__ import annotations

import logging
import threading
import time

from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache
from django_prometheus.cache import metrics as cache_metrics
from redis import exceptions as redis_errors

logger = logging.getLogger(__name__)

#: Operations of Django's cache API that reach Redis (the others are built on these).
OPERATIONS = ("add", "get", "set", "touch", "delete", "get_many", "has_key", "incr", "set_many", "delete_many",
              "clear")
#: Per Redis location: until when (``time.monotonic()``) to use the local cache without trying Redis.
_down_until: dict[str, float] = {}
_lock = threading.Lock()


def unreachable() -> tuple[type[Exception], ...]:
    """The exceptions that mean Redis cannot be reached (as opposed to a wrong use of it)."""

    return redis_errors.ConnectionError, redis_errors.TimeoutError, redis_errors.ReadOnlyError, OSError


class FallbackRedisCache(RedisCache):
    """``RedisCache`` that falls back to a process-local cache while Redis is unreachable (module docstring)."""

    def __init__(self, server, params):
        params = dict(params)
        options = dict(params.get("OPTIONS") or {})
        self.retry_after = float(options.pop("retry_after", 5))
        timeout = float(options.pop("timeout", 0.5))
        options.setdefault("socket_connect_timeout", timeout)
        options.setdefault("socket_timeout", timeout)
        params["OPTIONS"] = options
        super().__init__(server, params)
        self.location = server if isinstance(server, str) else ",".join(server)
        local = {k: v for k, v in params.items() if k in ("TIMEOUT", "KEY_PREFIX", "VERSION", "KEY_FUNCTION")}
        self.local = LocMemCache(f"ldpmarket-fallback:{self.location}", {**local, "OPTIONS": {"MAX_ENTRIES": 10000}})

    def ping(self) -> None:
        """Raise unless Redis answers (no fallback)."""
        self._cache.get_client(write=True).ping()

    def redis_down(self) -> bool:
        return time.monotonic() < _down_until.get(self.location, 0.0)

    def _may_try_redis(self) -> bool:
        """Up: every operation uses Redis.  Down: none until ``retry_after`` has passed; then the first operation
        to ask is the probe, and the window is moved on at once so that the others keep to the local cache
        while it waits for Redis."""
        with _lock:
            until = _down_until.get(self.location, 0.0)
            if until == 0.0:
                return True
            now = time.monotonic()
            if now < until:
                return False
            _down_until[self.location] = now + self.retry_after  # this caller probes; the others wait
            return True

    def _call(self, name: str, *args, **kwargs):
        if self._may_try_redis():
            try:
                result = getattr(super(), name)(*args, **kwargs)
            except unreachable() as exc:
                with _lock:
                    first = _down_until.get(self.location, 0.0) == 0.0
                    _down_until[self.location] = time.monotonic() + self.retry_after
                if first:
                    logger.warning("the cache (Redis) is unreachable (%s): using this process's memory until it "
                                   "is back", exc)
            else:
                if _down_until.get(self.location):
                    with _lock:
                        _down_until.pop(self.location, None)
                    logger.warning("the cache (Redis) is back")
                return result
        if name == "get":  # a get Redis did not answer (django-prometheus's failures)
            cache_metrics.django_cache_get_fail_total.labels(backend="redis").inc()
        return getattr(self.local, name)(*args, **kwargs)


def _operation(name: str):
    def method(self, *args, **kwargs):
        return self._call(name, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``{name}`` on Redis, or on the local fallback while Redis is unreachable."
    return method


for _name in OPERATIONS:
    setattr(FallbackRedisCache, _name, _operation(_name))


# Metrics (docs/operations.md#metrics): django-prometheus's cache counters, ``django_cache_get_total`` and its hits,
# misses and failures (a get Redis did not answer, served by the fallback), by backend.
_MISSING = object()


def _counted(backend: str, get):
    def method(self, key, default=None, version=None):
        cache_metrics.django_cache_get_total.labels(backend=backend).inc()
        value = get(self, key, _MISSING, version=version)
        if value is _MISSING:
            cache_metrics.django_cache_misses_total.labels(backend=backend).inc()
            return default
        cache_metrics.django_cache_hits_total.labels(backend=backend).inc()
        return value

    method.__name__ = "get"
    method.__doc__ = get.__doc__
    return method


FallbackRedisCache.get = _counted("redis", FallbackRedisCache.get)


class CountedLocMemCache(LocMemCache):
    """Django's ``LocMemCache`` (the embedded set-up's cache), its gets counted as above (django-prometheus's own
    ``LocMemCache`` returns the default for a cached 0 or empty value)."""


CountedLocMemCache.get = _counted("locmem", LocMemCache.get)
