"""Settings for the test suite: the real settings with test keys, and Celery eager unless a test opts out.

The keys are fixed but pass the production rules (``ldpmarket.keys``), since worker subprocesses load
``ldpmarket.settings`` without DEBUG.  The test client speaks plain http, so the https redirect is off;
everything else (HSTS on secure requests, secure cookies, CSP) is as in production.

``DATABASE_URL`` and ``REDIS_URL`` are honoured, so ``make test`` with them set
runs on PostgreSQL and Redis (as CI does); the worker-integration tests start a
real Celery worker against that broker.
"""
import os

os.environ.setdefault("DJANGO_SECRET_KEY", "tst-s3cr3t-Kq8vZp2LmW9xRt4YbN7cJd1FgH5uE0aQsVw6iOyTzXk-tst")
os.environ.setdefault("LDP_VALUE_KEY", "tst-vAlu3-P7mQ2xZ9wL4kR8tB1nC6vJ3hG5dF0-tst")
os.environ.setdefault("LDP_PSEUDONYM_KEY", "tst-psEud0-N4bV7cX1zL9kJ2hG6fD3sA8qW5eR0-tst")
os.environ.setdefault("LDP_LOG_ORIGIN", "ldpmarket.test/log")
os.environ.setdefault("DJANGO_SECURE_SSL_REDIRECT", "0")

from .settings import *  # noqa: E402,F401,F403

CELERY_TASK_ALWAYS_EAGER = True
# Checkpoints are made where a test makes them (the embedded set-up's checkpoint on commit is tested on its own:
# tests/market/api/test_checkpoint_on_commit.py).
LDP_CHECKPOINT_ON_COMMIT = False
# SQLite tests run in memory, one database per xdist worker.  Said explicitly: the engine is django-prometheus's
# counting wrapper of sqlite3, which pytest-django does not recognise as SQLite, so it would otherwise name a file
# "test_<path>_gw0" for each worker and fail to open it.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["TEST"].setdefault("NAME", ":memory:")  # noqa: F405
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Every lock taken in the suite is checked against the global lock order (accounts/locks.py).
LDP_CHECK_LOCK_ORDER = True
