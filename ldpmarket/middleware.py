"""Django's ``CommonMiddleware``, refusing clearly what it would otherwise redirect and lose (docs/errors.md).

With ``APPEND_SLASH``, Django answers a request for a path that exists only
with a trailing slash with a redirect.  That is right for GET and HEAD, but a
request with a body would be lost: clients follow a 301 with a GET, and with
``DEBUG`` Django raises a RuntimeError instead (a 500 page).  Here any other
method gets a 404 that says where to send it: ``application/problem+json``
(type ``trailing-slash-required``) under ``/api/``, plain text elsewhere.
"""
from __future__ import annotations

from django.middleware.common import CommonMiddleware as DjangoCommonMiddleware

from .api import trailing_slash_response

#: Methods that are redirected to the path with its slash, as Django does; every other one is refused.
REDIRECTED = frozenset({"GET", "HEAD", "OPTIONS"})


class CommonMiddleware(DjangoCommonMiddleware):
    def process_response(self, request, response):
        if (response.status_code == 404 and request.method not in REDIRECTED
                and self.should_redirect_with_slash(request)):

            return trailing_slash_response(request)
        return super().process_response(request, response)
