"""Sign-in throttling: after ``LIMIT`` failed sign-ins for one username from one address, refuse for ``WINDOW``.

Counts live in the cache (Redis in production, shared by every web process),
keyed by a hash of the lower-cased username and the client address, so a
guesser is slowed down without locking the real owner out from elsewhere.
"""
from __future__ import annotations

import hashlib

from django.core.cache import cache

LIMIT = 5
WINDOW = 300  # seconds


def _key(username: str, ip: str) -> str:
    digest = hashlib.sha256(f"{(username or '').strip().lower()}\x00{ip or ''}".encode()).hexdigest()
    return f"portal-login-failures:{digest}"


def client_ip(request) -> str:
    return request.META.get("REMOTE_ADDR", "") if request is not None else ""


def blocked(username: str, ip: str) -> bool:
    return (cache.get(_key(username, ip)) or 0) >= LIMIT


def record_failure(username: str, ip: str) -> int:
    key = _key(username, ip)
    if cache.add(key, 1, WINDOW):
        return 1
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, WINDOW)
        return 1


def reset(username: str, ip: str) -> None:
    cache.delete(_key(username, ip))
