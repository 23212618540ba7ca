"""The Content-Security-Policy header (django-csp; the policy is ``CONTENT_SECURITY_POLICY`` in the settings).

Every page may load scripts, styles, fonts and images only from this origin (images also as ``data:``
URLs, which the audit charts are) and runs no inline script.  Exceptions, for styles only: the HTML
pages of REST framework's browsable API, whose templates (not ours) use ``style`` attributes, and Redoc
(``/api/redoc/``), which writes its styles into ``<style>`` elements as it renders, also allow inline
styles; Redoc also runs its search index in a ``blob:`` worker.  Scripts stay ``'self'`` everywhere.  See
docs/security.md, "Deployment".
"""
from __future__ import annotations

from csp.constants import SELF, UNSAFE_INLINE
from csp.middleware import CSPMiddleware as BaseCSPMiddleware
from rest_framework.renderers import BrowsableAPIRenderer


class CSPMiddleware(BaseCSPMiddleware):
    def get_policy_parts(self, request, response, report_only=False):
        parts = super().get_policy_parts(request, response, report_only=report_only)
        if isinstance(getattr(response, "accepted_renderer", None), BrowsableAPIRenderer):
            parts.update = {**(parts.update or {}), "style-src": [UNSAFE_INLINE]}
        elif getattr(request, "resolver_match", None) is not None and request.resolver_match.url_name == "api-redoc":
            parts.update = {**(parts.update or {}), "style-src": [UNSAFE_INLINE], "worker-src": [SELF, "blob:"]}
        return parts
