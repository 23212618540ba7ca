from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

from . import health
from .favicon import favicon
from .landing import LandingView

urlpatterns = [
    path("", LandingView.as_view(), name="landing"),
    path("admin/", admin.site.urls),
    path("favicon.ico", favicon, name="favicon"),
    path("health/", health.live, name="health"),
    path("health/ready/", health.ready, name="health-ready"),
    path("api/v1/", include("market.api.urls", namespace="api")),
    # the browsable API's sign-in (session; the sign-in lockout applies): accounts/api_signin.py
    path("api/auth/", include("accounts.api_signin")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # the split view serves its start-up script as a file: no inline script for the CSP to block
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema", template_name="api_docs/swagger_ui.html"),
         name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema", template_name="api_docs/redoc.html"),
         name="api-redoc"),
    path("portal/", include("portal.urls")),
    path("buyer/", include("buyer_portal.urls")),
    path("api/v1/audit/", include("audit.api")),
    # the checkpoint log as a C2SP tiled log (public, static-like): accounts/ledger/log_http.py
    path("log/", include("accounts.ledger.log_http")),
    # GET /metrics, the Prometheus text format: loopback, the metrics token and staff only (audit/metrics_http.py)
    path("", include("audit.metrics_http")),
]

# Errors under /api/ are application/problem+json like the API's own (ldpmarket.api); elsewhere Django's pages.
handler400 = "ldpmarket.api.bad_request_view"
handler404 = "ldpmarket.api.not_found_view"
handler500 = "ldpmarket.api.server_error_view"
