"""Settings, all from the environment (12-factor, django-environ); docs/operations.md.

A ``.env`` file beside manage.py is read when present (``make run`` writes one
with fresh keys on first use).  Defaults give the embedded set-up: SQLite and
Celery running tasks in-process.
"""
import logging
from datetime import timedelta
from pathlib import Path

import environ

from .clientaddr import parse_networks
from .keys import require_strong_keys, value_key_id
from .logs import configure_structlog, log_format, logging_config

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()
if (BASE_DIR / ".env").is_file():
    env.read_env(str(BASE_DIR / ".env"))

DEBUG = env.bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env("DJANGO_SECRET_KEY", default="insecure-development-key-set-DJANGO_SECRET_KEY" if DEBUG else None)
if not SECRET_KEY:
    raise environ.ImproperlyConfigured("Set DJANGO_SECRET_KEY (or DJANGO_DEBUG=1 for a development key).")
# Earlier secret keys, comma-separated: sessions, password-reset links and other signatures made with them stay
# valid while they are listed (Django's SECRET_KEY_FALLBACKS; rotating: docs/security.md#rotating-the-secret-key).
SECRET_KEY_FALLBACKS = env.list("DJANGO_SECRET_KEY_FALLBACKS", default=[])
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# Keys for values at rest and buyer pseudonyms. Development defaults only under DEBUG.
# LDP_VALUE_KEYS: the value-key ring, comma-separated, newest first: the first seals, every one opens the rows
# sealed with it (rotating: docs/security.md#rotating-the-value-key); LDP_VALUE_KEY is a ring of one, and stays
# the first key of the ring.
LDP_VALUE_KEYS = [k.strip() for k in env.list("LDP_VALUE_KEYS", default=[]) if k.strip()] or [
    k for k in [env("LDP_VALUE_KEY", default="development-value-key-not-for-production" if DEBUG else "")] if k]
LDP_VALUE_KEY = LDP_VALUE_KEYS[0] if LDP_VALUE_KEYS else None
LDP_PSEUDONYM_KEY = env("LDP_PSEUDONYM_KEY", default="development-pseudonym-key" if DEBUG else None)
if not LDP_VALUE_KEY or not LDP_PSEUDONYM_KEY:
    raise environ.ImproperlyConfigured("Set LDP_VALUE_KEY (or LDP_VALUE_KEYS) and LDP_PSEUDONYM_KEY "
                                       "(or DJANGO_DEBUG=1).")
if len({value_key_id(k) for k in LDP_VALUE_KEYS}) != len(LDP_VALUE_KEYS):
    raise environ.ImproperlyConfigured("LDP_VALUE_KEYS lists a key twice (or two keys with one id: generate "
                                       "another; docs/security.md#keys).")
# The Ed25519 keys that sign the ledger's checkpoints (accounts.ledger.signing, docs/receipts.md#the-log-key):
# LDP_LEDGER_SIGNING_KEYS, comma-separated, newest first (every key in it signs each new checkpoint; rotating:
# docs/receipts.md#rotating-the-log-key); LDP_LEDGER_SIGNING_KEY is a ring of one.  Each seed is HKDF of the
# setting; with neither set, of LDP_VALUE_KEY (its own label).
LDP_LEDGER_SIGNING_KEYS = env.list("LDP_LEDGER_SIGNING_KEYS", default=[]) or (
    [env("LDP_LEDGER_SIGNING_KEY")] if env("LDP_LEDGER_SIGNING_KEY", default="") else [])
if len(set(LDP_LEDGER_SIGNING_KEYS)) != len(LDP_LEDGER_SIGNING_KEYS):
    raise environ.ImproperlyConfigured("LDP_LEDGER_SIGNING_KEYS lists a key twice.")
# The key that blinds each ledger entry's leaf in the receipts' Merkle trees (accounts.ledger.leaves.blinding_key,
# docs/receipts.md#entry-data): HKDF of this setting or, when it is empty, of LDP_VALUE_KEY (its own label).  It
# must never change once receipts were issued (docs/security.md, Keys).
LDP_LEDGER_BLINDING_KEY = env("LDP_LEDGER_BLINDING_KEY", default="")
# With a ring of value keys the ledger's keys must be set: unset, they are derived from LDP_VALUE_KEY, which a
# rotation changes, and every checkpoint signed and entries root computed before would stop verifying.  Set both to
# the value key they were derived from, the ring's oldest (docs/security.md#rotating-the-value-key, step 1).
if len(LDP_VALUE_KEYS) > 1 and not (LDP_LEDGER_SIGNING_KEYS and LDP_LEDGER_BLINDING_KEY):
    raise environ.ImproperlyConfigured(
        "LDP_VALUE_KEYS holds more than one key but LDP_LEDGER_SIGNING_KEYS or LDP_LEDGER_BLINDING_KEY is not set: "
        "set both to the value key the ledger's keys were derived from (the LDP_VALUE_KEY used before the "
        "rotation, the last of LDP_VALUE_KEYS), or its checkpoints and entries roots stop verifying "
        "(docs/security.md#rotating-the-value-key).")
if not DEBUG:  # weak, placeholder or repeated keys refuse start-up (docs/security.md, Keys)
    _ledger_keys = {**({"LDP_LEDGER_BLINDING_KEY": LDP_LEDGER_BLINDING_KEY} if LDP_LEDGER_BLINDING_KEY else {}),
                    **{f"LDP_LEDGER_SIGNING_KEYS[{i}]": key for i, key in enumerate(LDP_LEDGER_SIGNING_KEYS)}}
    # the ledger's keys may repeat each other and, during a rotation, a key of the ring (the one they were derived
    # from: docs/security.md#rotating-the-value-key)
    _ring = {("LDP_VALUE_KEY" if i == 0 else f"LDP_VALUE_KEYS[{i}]"): key for i, key in enumerate(LDP_VALUE_KEYS)}
    require_strong_keys({"DJANGO_SECRET_KEY": SECRET_KEY,
                         **{f"DJANGO_SECRET_KEY_FALLBACKS[{i}]": key for i, key in enumerate(SECRET_KEY_FALLBACKS)},
                         **_ring, "LDP_PSEUDONYM_KEY": LDP_PSEUDONYM_KEY, **_ledger_keys},
                        may_share=frozenset(_ledger_keys) | (frozenset(_ring) if len(_ring) > 1 else frozenset()))
# The log's origin (docs/receipts.md#checkpoints-as-signed-notes): the first line of every checkpoint and the name of
# the log's key, e.g. market.example.org/log (the scheme-less URL of /log/).  Required without DEBUG.
LDP_LOG_ORIGIN = env("LDP_LOG_ORIGIN", default="ldpmarket.localhost/log" if DEBUG else "")
if not LDP_LOG_ORIGIN or any(c.isspace() or c == "+" for c in LDP_LOG_ORIGIN):
    raise environ.ImproperlyConfigured(
        "Set LDP_LOG_ORIGIN to the log's origin, e.g. market.example.org/log: no spaces, no '+' "
        "(docs/receipts.md#checkpoints-as-signed-notes).")
# The witnesses the log submits its checkpoints to and their quorum: a C2SP tlog-policy file
# (docs/receipts.md#witnesses).  Empty: no witness.
LDP_WITNESS_POLICY = env("LDP_WITNESS_POLICY", default="")
# A witness's answer is awaited this long; a failed submission is retried after 2^failures times the base, at
# most the cap (seconds).
LDP_WITNESS_TIMEOUT_SECONDS = env.float("LDP_WITNESS_TIMEOUT_SECONDS", default=10.0)
LDP_WITNESS_RETRY_BASE_SECONDS = env.float("LDP_WITNESS_RETRY_BASE_SECONDS", default=5.0)
LDP_WITNESS_RETRY_MAX_SECONDS = env.float("LDP_WITNESS_RETRY_MAX_SECONDS", default=900.0)

# HTTPS (docs/security.md, Deployment). Without DEBUG: redirect to https, HSTS, cookies only over https.
# Behind a proxy that terminates TLS, DJANGO_SECURE_PROXY_SSL_HEADER names the header it sets, e.g.
# "HTTP_X_FORWARDED_PROTO,https"; set it only when the proxy always sets (or strips) that header.
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^health/"]  # probes inside the network speak plain http
_proxy_ssl_header = [part.strip() for part in env.list("DJANGO_SECURE_PROXY_SSL_HEADER", default=[]) if part.strip()]
if _proxy_ssl_header and (len(_proxy_ssl_header) != 2 or not _proxy_ssl_header[0].startswith("HTTP_")):
    raise environ.ImproperlyConfigured(
        "DJANGO_SECURE_PROXY_SSL_HEADER must be the META name of the header and the value meaning https, "
        "e.g. HTTP_X_FORWARDED_PROTO,https (docs/security.md, Deployment).")
SECURE_PROXY_SSL_HEADER = tuple(_proxy_ssl_header) or None
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=0 if DEBUG else 365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=True)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = not DEBUG
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# Client addresses: X-Forwarded-For counts only from these proxies (addresses or networks, comma-separated).
LDP_TRUSTED_PROXIES = env.list("LDP_TRUSTED_PROXIES", default=[])
try:
    parse_networks(tuple(LDP_TRUSTED_PROXIES))
except ValueError as exc:
    raise environ.ImproperlyConfigured(f"{exc} (docs/security.md, Client addresses).") from None

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "axes",
    "csp",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "accounts",
    "market",
    "portal",
    "buyer_portal",
    "audit",
]

MIDDLEWARE = [
    "ldpmarket.clientaddr.ClientAddressMiddleware",
    # the request id (X-Request-ID, problem bodies) and the request's log lines; after the client's address is settled
    "ldpmarket.requestlog.RequestLogMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "ldpmarket.csp.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "ldpmarket.middleware.CommonMiddleware",  # Django's, but a POST without its trailing slash is a clear 404
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
]

# Content-Security-Policy (django-csp): every page loads only from this origin, and runs no inline code.
CONTENT_SECURITY_POLICY = {"DIRECTIVES": {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "font-src": ["'self'"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'none'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}}

ROOT_URLCONF = "ldpmarket.urls"
WSGI_APPLICATION = "ldpmarket.wsgi.application"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [BASE_DIR / "templates"],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
# Persistent connections (seconds; 0 closes after each request), checked before reuse.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DATABASES["default"].setdefault("TEST", {})
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("timeout", 20)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_USER_MODEL = "accounts.User"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "accounts.passwords.NotOnlyWhitespaceValidator"},
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Dates as the portal shows them, with their zone: "27 Nov 2026, 22:47 (UTC)" (ldpmarket/formats/en/formats.py)
FORMAT_MODULE_PATH = ["ldpmarket.formats"]
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
LOGIN_URL = "/portal/login/"

# One sign-in lockout policy for the token endpoint, the portal and /admin/ (django-axes; docs/security.md).
AUTHENTICATION_BACKENDS = ["accounts.lockout.LockoutBackend", "django.contrib.auth.backends.ModelBackend"]
LDP_SIGNIN_FAILURES_PER_ACCOUNT = env.int("LDP_SIGNIN_FAILURES_PER_ACCOUNT", default=5)
LDP_SIGNIN_FAILURES_PER_ADDRESS = env.int("LDP_SIGNIN_FAILURES_PER_ADDRESS", default=20)
LDP_SIGNIN_COOLOFF_MINUTES = env.int("LDP_SIGNIN_COOLOFF_MINUTES", default=15)
if min(LDP_SIGNIN_FAILURES_PER_ACCOUNT, LDP_SIGNIN_FAILURES_PER_ADDRESS, LDP_SIGNIN_COOLOFF_MINUTES) < 1:
    raise environ.ImproperlyConfigured("LDP_SIGNIN_FAILURES_PER_ACCOUNT, LDP_SIGNIN_FAILURES_PER_ADDRESS and "
                                       "LDP_SIGNIN_COOLOFF_MINUTES must be at least 1 (docs/security.md).")
AXES_HANDLER = "accounts.lockout.LockoutHandler"
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]  # the rules of accounts.lockout.rules
AXES_FAILURE_LIMIT = LDP_SIGNIN_FAILURES_PER_ACCOUNT
AXES_COOLOFF_TIME = timedelta(minutes=LDP_SIGNIN_COOLOFF_MINUTES)
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False  # a lockout ends one cool-off after it began
AXES_RESET_ON_SUCCESS = True  # forgets that account's failures from that address only (LockoutHandler)
AXES_USERNAME_CALLABLE = "accounts.lockout.lockout_username"
AXES_CLIENT_IP_CALLABLE = "ldpmarket.clientaddr.request_address"
AXES_LOCKOUT_CALLABLE = "accounts.lockout.lockout_response"
AXES_HTTP_RESPONSE_CODE = 429
AXES_DISABLE_ACCESS_LOG = True  # no row (and no session) per successful sign-in; failures are still recorded
AXES_SENSITIVE_PARAMETERS = ["username", "password"]
AXES_VERBOSE = False

# API tokens (django-rest-knox): a digest at rest, an expiry, revocable; sent as "Authorization: Token <token>".
# Money (docs/money.md): every amount is in this currency, an ISO 4217 code, shown wherever money is.
LDP_CURRENCY = env("LDP_CURRENCY", default="EUR").strip().upper()
if not (len(LDP_CURRENCY) == 3 and LDP_CURRENCY.isascii() and LDP_CURRENCY.isalpha()):
    raise environ.ImproperlyConfigured("LDP_CURRENCY must be an ISO 4217 code such as EUR or USD (docs/money.md).")
LDP_TOKEN_TTL_HOURS = env.int("LDP_TOKEN_TTL_HOURS", default=24)
# Named tokens (the buyer's token page, accounts.tokens.token_create): the longest expiry a user may choose, in hours
# (default 90 days); never shorter than LDP_TOKEN_TTL_HOURS.
LDP_TOKEN_MAX_HOURS = max(env.int("LDP_TOKEN_MAX_HOURS", default=90 * 24), LDP_TOKEN_TTL_HOURS)
REST_KNOX = {
    "TOKEN_TTL": timedelta(hours=LDP_TOKEN_TTL_HOURS),
    "AUTH_HEADER_PREFIX": "Token",
    "AUTO_REFRESH": False,
}

# E-mail (docs/operations.md#e-mail): buyer sign-ups and approvals are told by e-mail.  EMAIL_URL (django-environ:
# smtp://user:password@host:587, smtp+tls://..., smtps://..., consolemail://) or EMAIL_BACKEND, EMAIL_HOST, EMAIL_PORT,
# EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS, EMAIL_USE_SSL.  Under DEBUG (make run) the default prints each
# e-mail on the console; otherwise SMTP to localhost:25.  LDP_OPERATOR_EMAILS: where new buyer accounts are announced.
if env("EMAIL_URL", default=""):
    globals().update(env.email_url("EMAIL_URL"))
else:
    EMAIL_BACKEND = env("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend" if DEBUG
                        else "django.core.mail.backends.smtp.EmailBackend")
    EMAIL_HOST = env("EMAIL_HOST", default="localhost")
    EMAIL_PORT = env.int("EMAIL_PORT", default=25)
    EMAIL_HOST_USER = env("EMAIL_HOST_USER", default="")
    EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD", default="")
    EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)
    EMAIL_USE_SSL = env.bool("EMAIL_USE_SSL", default=False)
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", default="ldpmarket <noreply@localhost>")
SERVER_EMAIL = env("SERVER_EMAIL", default=DEFAULT_FROM_EMAIL)
LDP_OPERATOR_EMAILS = env.list("LDP_OPERATOR_EMAILS", default=[])

# Redis: Celery broker and the cache. Without it, tasks run in-process (eager) and the cache is local memory.
REDIS_URL = env("REDIS_URL", default="")
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=REDIS_URL or "memory://")
CELERY_RESULT_BACKEND = env("CELERY_RESULT_BACKEND", default=REDIS_URL or None)
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER",
                                    default=not (REDIS_URL or env("CELERY_BROKER_URL", default="")))
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 30 * 60
CELERY_TASK_SOFT_TIME_LIMIT = 25 * 60
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# With acks_late, Redis hands an unacknowledged task to another worker after this long: longer than the
# longest task's time limit (60 minutes), so a task still running is never delivered twice.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=65 * 60)}
CELERY_BEAT_SCHEDULE = {
    "advance-schedules": {
        "task": "market.tasks.advance_schedules",
        "schedule": env.float("LDP_SCHEDULE_INTERVAL_SECONDS", default=60.0),
    },
}
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Recovery and outages (docs/operations.md).  Beat runs the sweeper every LDP_SWEEP_INTERVAL_SECONDS: a purchase
# pending or running that nobody holds, with a heartbeat older than LDP_STALE_AFTER_SECONDS, is sent again (failed
# once workers have started it LDP_PURCHASE_MAX_ATTEMPTS times), and so is an attribute's chain extension when a
# chain could grow since that long and no extension of it runs.  Workers retry a lost broker for ever (Celery's
# default gives up after 100 tries and exits).  The cache falls back to process memory while Redis is down
# (ldpmarket.cache), trying Redis again after LDP_CACHE_RETRY_SECONDS.
LDP_SWEEP_INTERVAL_SECONDS = env.float("LDP_SWEEP_INTERVAL_SECONDS", default=15.0)
LDP_STALE_AFTER_SECONDS = env.int("LDP_STALE_AFTER_SECONDS", default=60)
# Check the global lock order (accounts/locks.py) at every lock a transaction takes: on in tests and development.
LDP_CHECK_LOCK_ORDER = env.bool("LDP_CHECK_LOCK_ORDER", default=DEBUG)
LDP_PURCHASE_MAX_ATTEMPTS = env.int("LDP_PURCHASE_MAX_ATTEMPTS", default=3)
CELERY_BEAT_SCHEDULE["sweep-stranded"] = {
    "task": "market.tasks.sweep_stranded",
    "schedule": LDP_SWEEP_INTERVAL_SECONDS,
    "options": {"expires": LDP_SWEEP_INTERVAL_SECONDS},  # a sweep that waited longer than that is dropped
}
# Signed checkpoints of the ledger (accounts.ledger.checkpoints, docs/budget-rules.md#checkpoints): beat makes one every
# LDP_CHECKPOINT_INTERVAL_SECONDS (none when no block was written); `manage.py ledger_checkpoint` makes one now.
LDP_CHECKPOINT_INTERVAL_SECONDS = env.float("LDP_CHECKPOINT_INTERVAL_SECONDS", default=600.0)
# At most this many ledger entries' blocks get their entry trees (docs/receipts.md) in one checkpoint (always at
# least one block); the checkpoint task enqueues the next one while blocks remain.
LDP_CHECKPOINT_MAX_ENTRIES = env.int("LDP_CHECKPOINT_MAX_ENTRIES", default=2_000_000)
# The embedded set-up (Celery eager, no beat: make run) makes a checkpoint once each transaction that wrote ledger
# entries commits (accounts.ledger.hashchain.append; docs/operations.md#checkpoints-in-the-embedded-set-up), so a
# purchase is in a checkpoint at once; with a broker, beat makes them (the default is off there).
LDP_CHECKPOINT_ON_COMMIT = env.bool("LDP_CHECKPOINT_ON_COMMIT", default=CELERY_TASK_ALWAYS_EAGER)
CELERY_BEAT_SCHEDULE["ledger-checkpoint"] = {
    "task": "market.tasks.make_ledger_checkpoint",
    "schedule": LDP_CHECKPOINT_INTERVAL_SECONDS,
    "options": {"expires": LDP_CHECKPOINT_INTERVAL_SECONDS},
}
# Witnesses (accounts.ledger.witnesses, docs/receipts.md#witnesses): each checkpoint is submitted on commit; beat
# submits again to each witness that has not cosigned the latest checkpoint once its retry time has come.
CELERY_BEAT_SCHEDULE["witness-submissions"] = {
    "task": "market.tasks.submit_due_checkpoints",
    "schedule": env.float("LDP_WITNESS_INTERVAL_SECONDS", default=30.0),
    "options": {"expires": 30.0},
}
# Owners' earnings settlement (accounts.money.services.earnings_settle, docs/money.md#settlement): each purchase that
# pays owners enqueues its attribute's settlement on commit; beat settles every attribute every
# LDP_SETTLE_INTERVAL_SECONDS as well (in case such a task was lost).
LDP_SETTLE_INTERVAL_SECONDS = env.float("LDP_SETTLE_INTERVAL_SECONDS", default=300.0)
# The Celery queue settlements go to (default, empty: the queue every task goes to); a deployment may give them
# their own workers (`celery worker -Q settlements`) so that they never wait behind purchases.
LDP_SETTLE_QUEUE = env.str("LDP_SETTLE_QUEUE", default="")
if LDP_SETTLE_QUEUE:
    CELERY_TASK_ROUTES = {"market.tasks.settle_earnings": {"queue": LDP_SETTLE_QUEUE},
                          "market.tasks.settle_all_earnings": {"queue": LDP_SETTLE_QUEUE}}
CELERY_BEAT_SCHEDULE["settle-earnings"] = {
    "task": "market.tasks.settle_all_earnings",
    "schedule": LDP_SETTLE_INTERVAL_SECONDS,
    "options": {"expires": LDP_SETTLE_INTERVAL_SECONDS},
}
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# A purchase running when the broker goes away needs only the database: let it finish (Celery 6 would cancel it).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
if REDIS_URL:
    CACHES["default"] = {"BACKEND": "ldpmarket.cache.FallbackRedisCache", "LOCATION": REDIS_URL,
                         "OPTIONS": {"retry_after": env.float("LDP_CACHE_RETRY_SECONDS", default=5.0),
                                     "timeout": env.float("LDP_CACHE_TIMEOUT_SECONDS", default=0.5)}}

# Metrics (docs/operations.md#metrics): GET /metrics in the Prometheus text format, served to loopback clients no
# proxy forwarded, to signed-in staff and to LDP_METRICS_TOKEN (Prometheus's bearer token; empty: no token works).
# django-prometheus counts requests (its two middlewares, around all the others), database queries (its wrapper of
# the database backend) and cache gets (ldpmarket.cache).  A Celery worker serves its pool's metrics on
# LDP_WORKER_METRICS_PORT (0: not at all).  With PROMETHEUS_MULTIPROC_DIR set (prometheus-client reads it), the
# processes of a host write their metrics there and each scrape sums them (gunicorn.conf.py).
LDP_METRICS_TOKEN = env("LDP_METRICS_TOKEN", default="")
if LDP_METRICS_TOKEN and not DEBUG:
    require_strong_keys({"LDP_METRICS_TOKEN": LDP_METRICS_TOKEN})
LDP_WORKER_METRICS_PORT = env.int("LDP_WORKER_METRICS_PORT", default=0)
# The figures that scan every value (budget violations, chains behind their ceiling: 2 s at 10^6 values) are computed
# at most once per this many seconds and shared through the cache; 0: at every scrape.
LDP_METRICS_SCAN_INTERVAL_SECONDS = env.float("LDP_METRICS_SCAN_INTERVAL_SECONDS", default=60.0)
INSTALLED_APPS.append("django_prometheus")
MIDDLEWARE = ["django_prometheus.middleware.PrometheusBeforeMiddleware", *MIDDLEWARE,
              "django_prometheus.middleware.PrometheusAfterMiddleware"]
_db_vendor = DATABASES["default"]["ENGINE"].rpartition(".")[2]
if DATABASES["default"]["ENGINE"].startswith("django.db.backends.") and _db_vendor in ("postgresql", "sqlite3"):
    DATABASES["default"]["ENGINE"] = f"django_prometheus.db.backends.{_db_vendor}"  # the same backend, counted
if CACHES["default"]["BACKEND"] == "django.core.cache.backends.locmem.LocMemCache":
    CACHES["default"]["BACKEND"] = "ldpmarket.cache.CountedLocMemCache"
SECURE_REDIRECT_EXEMPT.append(r"^metrics$")  # Prometheus scrapes plain http inside the network, as probes do

# Chain extension: values per transaction (memory stays flat in the number of values).
LDP_EXTENSION_BATCH = env.int("LDP_EXTENSION_BATCH", default=65536)
# Chains in blocks (docs/architecture.md#chains-in-blocks): values per chain block, for blocks created from now on.
LDP_CHAIN_BLOCK = env.int("LDP_CHAIN_BLOCK", default=2048)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.tokens.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Client addresses come from REMOTE_ADDR, which ldpmarket.clientaddr settles (trusted proxies only).
    "NUM_PROXIES": 0,
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    # Buyer API (ldpmarket.api): problem+json errors, exact-decimal JSON, cursor pages, throttles.
    "EXCEPTION_HANDLER": "ldpmarket.api.problem_exception_handler",
    "DEFAULT_PARSER_CLASSES": ["ldpmarket.api.DecimalJSONParser", "rest_framework.parsers.FormParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer",
                                 "rest_framework.renderers.BrowsableAPIRenderer"],
    "DEFAULT_PAGINATION_CLASS": "ldpmarket.api.CursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_CLASSES": ["ldpmarket.api.AnonThrottle", "ldpmarket.api.UserThrottle"],
    # "<n>/<second|minute|hour|day>"; an empty value switches a throttle off.
    "DEFAULT_THROTTLE_RATES": {
        "anon": env("LDP_THROTTLE_ANON", default="120/minute") or None,
        "user": env("LDP_THROTTLE_USER", default="20000/minute") or None,
        "quote": env("LDP_THROTTLE_QUOTE", default="6000/minute") or None,
        "purchase": env("LDP_THROTTLE_PURCHASE", default="600/minute") or None,
    },
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
# Purchases over more candidate values than this run in Celery (202 + progress); smaller ones in the request.
LDP_ASYNC_PURCHASE_THRESHOLD = env.int("LDP_ASYNC_PURCHASE_THRESHOLD", default=50000)
# How long a quote (a signed token) can be turned into a purchase.
LDP_QUOTE_TTL_SECONDS = env.int("LDP_QUOTE_TTL_SECONDS", default=900)
SPECTACULAR_SETTINGS = {
    "TITLE": "ldpmarket API",
    "DESCRIPTION": "Buy randomized data under local differential privacy with gradual release.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and Redoc from this origin's static files (drf-spectacular-sidecar): they work offline and
    # under the Content-Security-Policy.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Two models have a field named "kind": give each enum its own schema name.
    "ENUM_NAME_OVERRIDES": {
        "AttributeKindEnum": "market.models.Attribute.Kind",
        "LedgerEntryKindEnum": "accounts.models.LedgerEntry.Kind",
        "AttributeMechanismEnum": "market.models.Attribute.Mechanism",
        "PurchaseMechanismEnum": "market.models.Purchase.Mechanism",
        "SurveyMechanismEnum": "market.models.SURVEY_MECHANISMS",
        "GuaranteeEnum": "accounts.models.LedgerEntry.Guarantee",
    },
    # <ascii_id:pk> (ldpmarket.fields.IdConverter): an id, 1 to 2^63-1 (ldpmarket.numbers.BIGINT_MAX)
    "PATH_CONVERTER_OVERRIDES": {"ascii_id": {"type": "integer", "minimum": 1, "maximum": 2 ** 63 - 1}},
    # path() routes show their format-suffix twins (/purchases/1.json) as operations of their own: left out
    "PREPROCESSING_HOOKS": ["drf_spectacular.hooks.preprocess_exclude_path_format"],
}

# Logs (ldpmarket.logs, docs/operations.md#logs): every line on stderr, JSON (one object a line, with the request id,
# the user, the task or purchase) or console (readable); LDP_LOG_FORMAT chooses, JSON by default without DEBUG.
try:
    LDP_LOG_FORMAT = log_format(env("LDP_LOG_FORMAT", default=""), debug=DEBUG)
except ValueError as exc:
    raise environ.ImproperlyConfigured(str(exc)) from None
LOGGING = logging_config(LDP_LOG_FORMAT, env("LOG_LEVEL", default="INFO"), loggers={
    # django-axes logs every sign-in at INFO; failures and lockouts are WARNING (the username masked:
    # AXES_SENSITIVE_PARAMETERS)
    "axes": {"level": "WARNING"},
})
configure_structlog()
# django-structlog (ldpmarket.requestlog): one line per request at INFO (request_finished); request_started at DEBUG
DJANGO_STRUCTLOG_STATUS_START_LOG_LEVEL = logging.DEBUG
