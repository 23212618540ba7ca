"""``GET /api/v1/``: the API root, a map of the endpoints a client starts from (like DRF's router root view).

It lists every named route of the buyer API (``market.api.urls``) and of the audit API
(``audit.api``) that takes no argument and that the caller's role may use (the route's own permission classes
decide, asked as the view would ask them), so an endpoint added to either appears here without editing this module,
plus the schema and the documentation pages.  Anyone may read it.  An anonymous caller is shown what a buyer may use
(the API it signs in to: ``auth/token`` first), never the staff, audit or owner endpoints; owners see the owner API,
auditors the audit API, staff everything.
"""
from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.urls import NoReverseMatch, URLPattern, URLResolver, get_resolver, resolve, reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework.exceptions import APIException
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.reverse import reverse as absolute_reverse
from rest_framework.views import APIView

from accounts.models import User
from ldpmarket.problems import DomainError

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


class _AsUser:
    """``request`` as seen by ``user``: what a permission class reads (``user``, ``method``, ...) for the question
    "may this caller use that route?"."""

    def __init__(self, request, user):
        self._request, self.user = request, user

    def __getattr__(self, name):
        return getattr(self._request, name)


def _viewer(request):
    """Who the listing is for: the caller, or for an anonymous caller a buyer (the API it signs in to)."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return request
    return _AsUser(request, User(username="anonymous-as-buyer", role=User.Role.BUYER, is_active=True))


def may_use(request, path: str) -> bool:
    """Whether the caller of ``request`` passes the permission classes of the route at ``path`` for at least one of
    its actions (a viewset's ``list``/``create``, ...), as the view itself would check them."""
    try:
        callback = resolve(path).func
    except Http404:
        return False
    cls = getattr(callback, "cls", None)
    if cls is None:
        return True  # not a REST framework view
    actions = getattr(callback, "actions", None) or {None: None}
    for action in actions.values():
        view = cls(**getattr(callback, "initkwargs", {}))
        view.request, view.args, view.kwargs, view.format_kwarg = request, (), {}, None
        if action is not None:
            view.action = action
        try:
            if all(p.has_permission(request, view) for p in view.get_permissions()):
                return True
        except (APIException, DomainError, PermissionDenied, Http404):  # refused by raising
            continue
    return False


def endpoints(request) -> dict[str, str]:
    """``{path below /api/v1/: absolute URL}`` of every argument-free route of the listed namespaces that the caller
    may use (:func:`may_use`; an anonymous caller as a buyer), then the extras."""
    listed: dict[str, str] = {}
    base = reverse("api:root")
    viewer = _viewer(request)
    for namespace in LISTED_NAMESPACES:
        for name in _named_patterns(namespace):
            try:
                path = reverse(f"{namespace}:{name}")
            except NoReverseMatch:  # a detail route (needs an id) or a format-suffix variant
                continue
            key = path.removeprefix(base).strip("/")  # "datasets", "auth/token", "audit/ledger"
            if not key or key in listed or not may_use(viewer, path):
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
        description="Every endpoint of the buyer and audit APIs that takes no id and that the caller may use, with "
                    "the schema and the documentation pages, as `{name: absolute URL}`. No authentication needed: "
                    "an anonymous caller is shown what a buyer may use; staff and auditors see theirs.",
        responses={200: OpenApiTypes.OBJECT},
        examples=[OpenApiExample("root", value={"datasets": "http://127.0.0.1:8000/api/v1/datasets/",
                                                "quotes": "http://127.0.0.1:8000/api/v1/quotes/"})],
        tags=["root"],
    )
    def get(self, request, *args, **kwargs):
        return Response(endpoints(request))
