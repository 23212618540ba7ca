"""Settings for the test suite: the real settings with test keys, and Celery eager unless a test opts out.

``DATABASE_URL`` and ``REDIS_URL`` are honoured, so ``make test`` with them set
runs on PostgreSQL and Redis (as CI does); the worker-integration tests start a
real Celery worker against that broker.
"""
import os

os.environ.setdefault("DJANGO_SECRET_KEY", "test-secret-key")
os.environ.setdefault("LDP_VALUE_KEY", "test-value-key")
os.environ.setdefault("LDP_PSEUDONYM_KEY", "test-pseudonym-key")

from .settings import *  # noqa: E402,F401,F403

CELERY_TASK_ALWAYS_EAGER = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
