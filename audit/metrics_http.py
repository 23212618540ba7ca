"""``GET /metrics``: the service's metrics in the Prometheus text format (docs/operations.md#metrics).

Served to three kinds of client, and to nobody else (403, plain text):

* a client on the web process's own host that no proxy forwarded (``ldpmarket.metrics.loopback_request``: peer and
  client address loopback, no forwarding header), e.g. ``curl http://127.0.0.1:8000/metrics`` on the host;
* whoever sends ``Authorization: Bearer <LDP_METRICS_TOKEN>`` (Prometheus; off while the setting is empty);
* a signed-in staff member or superuser (``accounts.roles.is_staff_role``): not auditors, not buyers or owners.

The answer holds the in-process metrics (requests, database, cache: django-prometheus; Celery task run times),
summed over every web process of this host in multiprocess mode, the Celery queues' lengths and the figures
computed from the database (``audit.metrics``).
"""
from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from accounts import roles
from ldpmarket import metrics as plumbing

from . import metrics

FORBIDDEN = ("Forbidden: /metrics is served to this host's own clients, to the metrics token and to staff "
             "(docs/operations.md#metrics).\n")


def may_read(request) -> bool:
    """Whether ``request`` may read the metrics (the module's docstring)."""
    return (plumbing.loopback_request(request.META)
            or plumbing.bearer_matches(request.META.get("HTTP_AUTHORIZATION"), settings.LDP_METRICS_TOKEN)
            or roles.is_staff_role(request.user))


@never_cache
@require_safe
def metrics_view(request):
    if not may_read(request):
        return HttpResponse(FORBIDDEN, status=403, content_type="text/plain; charset=utf-8")
    scrape = plumbing.Scrape({"celery_queues": plumbing.celery_queue_families, **metrics.SOURCES},
                             max_age={name: settings.LDP_METRICS_SCAN_INTERVAL_SECONDS for name in metrics.SCANS})
    body, content_type = plumbing.exposition(scrape)
    return HttpResponse(body, content_type=content_type)


urlpatterns = [path("metrics", metrics_view, name="metrics")]
