"""``GET /favicon.ico``: what browsers and other clients ask for by that name, redirected to the site's icon.

The icon is an SVG static file (``portal/static/portal/favicon.svg``), which every base template also names in
``<link rel="icon">``; a static file, so the Content-Security-Policy (``img-src 'self'``) allows it.
"""
from __future__ import annotations

from django.http import HttpResponseRedirect
from django.templatetags.static import static
from django.utils.cache import patch_cache_control
from django.views.decorators.http import require_safe

ICON = "portal/favicon.svg"


@require_safe
def favicon(request):
    """A temporary redirect (cached for a day): the icon's static URL may change, ``/favicon.ico`` does not."""
    response = HttpResponseRedirect(static(ICON))
    patch_cache_control(response, public=True, max_age=86400)
    return response
