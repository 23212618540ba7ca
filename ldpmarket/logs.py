"""Logs for machines (docs/operations.md#logs): structlog over the standard library's logging.

Every log line of the service, the project's own, Django's, REST framework's, django-axes', Celery's and
gunicorn's, goes through one handler on stderr and one formatter (:func:`logging_config`), a structlog
``ProcessorFormatter``:

* ``json`` (the default without ``DJANGO_DEBUG``): one JSON object per line, with ``timestamp`` (UTC, ISO 8601),
  ``level``, ``logger``, ``event`` (the message) and the context bound where the line was written:
  ``request_id``, ``user_id`` and ``ip`` in a request (``ldpmarket.requestlog``), ``task_id``, ``task`` and the
  request id of the request that sent the task in a Celery worker (``ldpmarket.tasklog``), ``purchase_id`` while a
  purchase is claimed or run (``market.purchases.pipeline``);
* ``console`` (the default with ``DJANGO_DEBUG``, ``make run``): the same, one readable line each.

``LDP_LOG_FORMAT`` chooses (:func:`log_format`).  Both run :func:`redact` last, a second line of defence: the
code logs ids, never a raw value, a token, a password or a key, and this masks whatever would still look like
one (fields named like a secret, ``Token ...`` and ``Bearer ...`` credentials, ``password=...`` in a query, the
values of the key settings).  Tracebacks are plain text (no local variables, which could hold anything).

This module imports no Django at import time: ``settings.py`` and ``gunicorn.conf.py`` (before Django is set up)
build their configuration from it.
"""
from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

import structlog

#: The two formats of ``LDP_LOG_FORMAT``.
FORMATS = ("json", "console")
REDACTED = "[redacted]"

#: Fields whose value is a secret by their name (a structlog key, or a member of a logged mapping).
SECRET_FIELD = re.compile(r"(?i)(pass(word|wd|phrase)?|secret|token|authorization|cookie|csrf|session_?id|"
                          r"private|signing|sealed|credential|^keys?$|(api|value|pseudonym|blinding|encryption)_?keys?$|"
                          r"^raw(_value)?$)")
#: Credentials written in text: an Authorization header's value, a secret-named query or form parameter.
#: (A credential is at least 8 characters, one of them a digit: "Token authentication failed" is left as it is.)
CREDENTIAL = re.compile(r"(?i)\b(token|bearer|basic)(\s+)(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{8,}")
#: A secret-named item of a mapping written as text (a dict's repr, JSON, a QueryDict): ``'password': '...'``.
SECRET_ITEM = re.compile(r"""(?i)(?P<q>['"])(?P<name>[a-z_]*(?:password|passwd|secret|token|api_?key|authorization)"""
                         r"""\w*)(?P=q)(?P<sep>\s*:\s*\[?\s*)(?P<v>['"])(?:\\.|(?!(?P=v)).)*(?P=v)""")
SECRET_PARAMETER = re.compile(r"(?i)\b([a-z_]*(?:password|passwd|secret|token|api_?key|key|sessionid|signature)\d*=)"
                              r"[^&\s'\"]+")
#: Settings whose values are secrets (each item of a list counts); besides these, any setting whose name has the
#: word KEY, SECRET, PASSWORD or TOKEN (``LDP_VALUE_KEY``, a rotation's ``LDP_VALUE_KEYS``, ``LDP_METRICS_TOKEN``)
#: but those that only name or tune one (``AXES_PASSWORD_FORM_FIELD``), and the passwords of DATABASES and of the
#: broker's URL.
SECRET_SETTINGS = ("SECRET_KEY", "SECRET_KEY_FALLBACKS", "LDP_VALUE_KEY", "LDP_PSEUDONYM_KEY",
                   "LDP_LEDGER_SIGNING_KEYS", "LDP_LEDGER_BLINDING_KEY")
SECRET_SETTING_NAME = re.compile(r"(^|_)(KEYS?|SECRETS?|PASSWORDS?|TOKENS?)(_|$)")
NAMES_A_SECRET = re.compile(r"_(FIELD|PREFIX|HASHERS|VALIDATORS|TIMEOUT|NAME|HEADER|PARAMETERS)$")
#: Shorter values are not looked for in text (a short setting would mask innocent words).
MIN_SECRET_LENGTH = 8

_secrets_cache: tuple[str, ...] | None = None


def log_format(value: str | None, *, debug: bool) -> str:
    """``LDP_LOG_FORMAT`` (``json`` or ``console``; empty: console with DEBUG, JSON without); ValueError else."""
    value = (value or "").strip().lower() or ("console" if debug else "json")
    if value not in FORMATS:
        raise ValueError(f"LDP_LOG_FORMAT must be json or console, not {value!r} (docs/operations.md#logs).")
    return value


def format_from_environ(environ: Mapping[str, str]) -> str:
    """:func:`log_format` from the environment alone (gunicorn.conf.py, before Django's settings are read)."""
    debug = environ.get("DJANGO_DEBUG", "").strip().lower() in ("1", "true", "yes", "y", "on", "ok")
    return log_format(environ.get("LDP_LOG_FORMAT"), debug=debug)


# ------------------------------------------------------------------------------------------------- redaction


def _strings(value) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes):
        yield value.decode("utf-8", "replace")
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _strings(item)


def _url_password(url) -> str | None:
    try:
        return urlsplit(url).password if isinstance(url, str) and "@" in url else None
    except ValueError:
        return None


def known_secrets() -> tuple[str, ...]:
    """The secret values of the settings (longest first), read once per settings (``setting_changed`` forgets
    them); none before Django's settings are configured (gunicorn's master process)."""
    global _secrets_cache
    if _secrets_cache is not None:
        return _secrets_cache
    try:
        from django.conf import settings  # late: this module is imported by settings.py itself

        if not settings.configured:
            return ()
        names = set(SECRET_SETTINGS) | {n for n in dir(settings) if n.isupper() and SECRET_SETTING_NAME.search(n)}
        found = set()
        for name in (n for n in names if not NAMES_A_SECRET.search(n)):
            value = getattr(settings, name, None)
            if isinstance(value, (str, bytes, list, tuple)):
                found.update(_strings(value))
        for database in getattr(settings, "DATABASES", {}).values():
            found.update(_strings(database.get("PASSWORD")))
        for name in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "REDIS_URL"):
            found.update(_strings(_url_password(getattr(settings, name, None))))
    except Exception:  # logging must never fail: without the settings, the patterns still apply
        return ()
    _secrets_cache = tuple(sorted((s for s in found if len(s) >= MIN_SECRET_LENGTH), key=len, reverse=True))
    return _secrets_cache


def forget_secrets(**kwargs) -> None:
    """``setting_changed`` receiver (tests' ``override_settings``): read the key settings again."""
    global _secrets_cache
    _secrets_cache = None


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = CREDENTIAL.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = SECRET_ITEM.sub(lambda m: f"{m['q']}{m['name']}{m['q']}{m['sep']}{m['v']}{REDACTED}{m['v']}", text)
    return SECRET_PARAMETER.sub(lambda m: m.group(1) + REDACTED, text)


def _redact(value, secrets, depth=0):
    if isinstance(value, str):
        return redact_text(value, secrets)
    if depth > 8:
        return value
    if isinstance(value, Mapping):
        return {k: REDACTED if isinstance(k, str) and SECRET_FIELD.search(k) else _redact(v, secrets, depth + 1)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(v, secrets, depth + 1) for v in value]
    return value


def redact(logger, method_name, event_dict):
    """structlog processor: mask fields named like a secret, credentials and secret parameters written in text,
    and the key settings' values, in every field (the message and a formatted traceback included)."""
    secrets = known_secrets()
    for key, value in list(event_dict.items()):
        if key in ("timestamp", "level", "logger"):
            continue
        if SECRET_FIELD.search(key):
            event_dict[key] = REDACTED
        elif isinstance(value, (str, Mapping, list, tuple)):
            event_dict[key] = _redact(value, secrets)
        elif value is not None and not isinstance(value, (int, float, bool)):
            event_dict[key] = redact_text(repr(value), secrets)  # an object: what the JSON renderer would write
    return event_dict


# ------------------------------------------------------------------------------------------- configuration


def _add_request(logger, method_name, event_dict):
    """``ldpmarket.requestlog.add_request_context``, once that module is loaded (it imports Django's request
    machinery, which settings.py and gunicorn's master process must not; until then no request was served)."""
    requestlog = sys.modules.get("ldpmarket.requestlog")
    return requestlog.add_request_context(logger, method_name, event_dict) if requestlog else event_dict


#: What every line gets, whoever wrote it (structlog or the standard library): the context bound where it was
#: written, its level, logger and time.
SHARED_PROCESSORS = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.stdlib.ExtraAdder(allow=("status_code",)),  # django.request's; never its request object
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    _add_request,
]


def formatter_processors(fmt: str) -> list:
    renderer = (structlog.processors.JSONRenderer(sort_keys=False) if fmt == "json"
                else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), sort_keys=False))
    return [
        structlog.stdlib.ProcessorFormatter.remove_processors_meta,
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,  # plain text, never local variables; redacted next
        redact,
        renderer,
    ]


def logging_config(fmt: str, level: str = "INFO", loggers: dict | None = None) -> dict:
    """Django's ``LOGGING``: every line through the one ``console`` handler (stderr) in format ``fmt``."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"structured": {"()": structlog.stdlib.ProcessorFormatter,
                                      "processors": formatter_processors(fmt),
                                      "foreign_pre_chain": SHARED_PROCESSORS}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "structured"}},
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # Django's own console handler (DEBUG only) would write each of its lines a second time, unformatted
            "django": {"handlers": [], "level": level, "propagate": True},
            "django.server": {"handlers": [], "level": level, "propagate": True},
            **(loggers or {}),
        },
    }


def gunicorn_config(fmt: str) -> dict:
    """gunicorn's ``logconfig_dict``: its error and access logs through the same formatter, on stderr."""
    config = logging_config(fmt)  # the root too, in the master (a worker's Django applies LOGGING on loading)
    config["loggers"] = {name: {"level": "INFO", "handlers": ["console"], "propagate": False}
                         for name in ("gunicorn.error", "gunicorn.access")}
    return config


def configure_structlog() -> None:
    """structlog's loggers hand their events to the standard library, whose handler formats them (above); so do
    Python's warnings (logger ``py.warnings``), which would otherwise be written to stderr as they are."""
    logging.captureWarnings(True)
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *SHARED_PROCESSORS,
                    structlog.stdlib.PositionalArgumentsFormatter(),
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )

