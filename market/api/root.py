"""``GET /api/v1/``: the API root, a map of the endpoints a client starts from (like DRF's router root view).

It lists every named route of the buyer API (``market.api.urls``) and of the audit API
(``audit.api``) that takes no argument, so an endpoint added to either appears here without
editing this module, plus the schema and the documentation pages.  Anyone may read it: it names URLs only.
"""
from __future__ import annotations

from django.urls import NoReverseMatch, URLPattern, URLResolver, get_resolver, reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.reverse import reverse as absolute_reverse
from rest_framework.views import APIView

#: URL namespaces whose argument-free routes the root lists, each under its path below ``/api/v1/``.
LISTED_NAMESPACES = ("api", "audit")
#: Pages outside the API that a client wants next.
EXTRA = {"schema": "schema", "docs": "api-docs", "redoc": "api-redoc", "sign-in": "rest_framework:login"}


def _named_patterns(namespace: str) -> list[str]:
    resolver = get_resolver()
    stack = list(resolver.url_patterns)
    while stack:
        entry = stack.pop(0)
        if isinstance(entry, URLResolver):
            if entry.namespace == namespace:
                return [p.name for p in _flatten(entry.url_patterns) if p.name]
            stack.extend(entry.url_patterns)
    return []


def _flatten(patterns) -> list[URLPattern]:
    flat = []
    for entry in patterns:
        if isinstance(entry, URLResolver):
            flat.extend(_flatten(entry.url_patterns))
        else:
            flat.append(entry)
    return flat


def endpoints(request) -> dict[str, str]:
    """``{path below /api/v1/: absolute URL}`` of every argument-free route of the listed namespaces, then the
    extras."""
    listed: dict[str, str] = {}
    base = reverse("api:root")
    for namespace in LISTED_NAMESPACES:
        for name in _named_patterns(namespace):
            try:
                path = reverse(f"{namespace}:{name}")
            except NoReverseMatch:  # a detail route (needs an id) or a format-suffix variant
                continue
            key = path.removeprefix(base).strip("/")  # "datasets", "auth/token", "audit/ledger"
            if not key or key in listed:
                continue
            listed[key] = absolute_reverse(f"{namespace}:{name}", request=request)
    for key, name in EXTRA.items():
        try:
            listed[key] = absolute_reverse(name, request=request)
        except NoReverseMatch:
            continue
    return listed


class ApiRootView(APIView):
    """The API root: the endpoints, by name, as absolute URLs."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="api_root",
        summary="The API root: the endpoints, by name",
        description="Every endpoint of the buyer and audit APIs that takes no id, with the schema and the "
                    "documentation pages, as `{name: absolute URL}`. No authentication needed.",
        responses={200: OpenApiTypes.OBJECT},
        examples=[OpenApiExample("root", value={"datasets": "http://127.0.0.1:8000/api/v1/datasets/",
                                                "quotes": "http://127.0.0.1:8000/api/v1/quotes/"})],
        tags=["root"],
    )
    def get(self, request, *args, **kwargs):
        return Response(endpoints(request))
