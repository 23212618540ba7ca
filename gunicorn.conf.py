"""gunicorn's settings for ldpmarket, read from the working directory (the image's /app, docker compose, E4).

Django's ``DJANGO_SECURE_PROXY_SSL_HEADER`` is the one switch that makes a proxy's ``X-Forwarded-Proto``
believed (docs/security.md#deployment-https-and-headers).  gunicorn's own defaults would also believe it, from
127.0.0.1 and ::1 (and from any peer on a unix socket), and mark the request https before Django sees it, so
a client on the same host could claim https.  Here gunicorn believes no forwarded header from anyone.
"""
forwarded_allow_ips = ""
secure_scheme_headers: dict[str, str] = {}

# Logs (docs/operations.md#logs): gunicorn's own lines (its error log, and one access line per request) go to stderr
# in the service's format, LDP_LOG_FORMAT (JSON by default without DJANGO_DEBUG), like Django's.  The access line
# names the request id (the X-Request-ID response header); no user agent or referrer.
import os  # noqa: E402

from ldpmarket.logs import format_from_environ, gunicorn_config  # noqa: E402

logconfig_dict = gunicorn_config(format_from_environ(os.environ))
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms request_id=%({x-request-id}o)s'



# Metrics (docs/operations.md#metrics).  With PROMETHEUS_MULTIPROC_DIR set, every worker writes its metrics into that
# directory and /metrics sums them (prometheus-client's multiprocess mode): the directory is emptied before the
# workers start (files left by an earlier run would be summed too), a worker counts itself in ldpmarket_web_workers
# once it has loaded the application, and a dead worker's live gauges are removed (mark_process_dead), so the
# gauge counts the workers alive.  Counters of a dead worker stay in the sum (a counter never goes down).
import os  # noqa: E402
from pathlib import Path  # noqa: E402


def on_starting(server):
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        for stale in Path(directory).glob("*.db"):
            stale.unlink(missing_ok=True)


def post_worker_init(worker):
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from ldpmarket.metrics import count_web_worker  # the worker has loaded the application by now

        count_web_worker()


def child_exit(server, worker):
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess  # the master imports no metrics module otherwise

        multiprocess.mark_process_dead(worker.pid)
