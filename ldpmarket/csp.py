"""The Content-Security-Policy header (django-csp; the policy is ``CONTENT_SECURITY_POLICY`` in the settings).

Every page may load scripts, styles, fonts and images only from this origin (images also as ``data:``
URLs, which the audit charts are) and runs no inline script.  One exception, for styles only: the HTML
pages of REST framework's browsable API, whose templates (not ours) use ``style`` attributes, also allow
inline styles.  Scripts stay ``'self'`` everywhere.  See docs/security.md, "Deployment".
"""
from __future__ import annotations

from csp.constants import UNSAFE_INLINE
from csp.middleware import CSPMiddleware as BaseCSPMiddleware
from rest_framework.renderers import BrowsableAPIRenderer


class CSPMiddleware(BaseCSPMiddleware):
    def get_policy_parts(self, request, response, report_only=False):
        parts = super().get_policy_parts(request, response, report_only=report_only)
        if isinstance(getattr(response, "accepted_renderer", None), BrowsableAPIRenderer):
            parts.update = {**(parts.update or {}), "style-src": [UNSAFE_INLINE]}
        return parts
