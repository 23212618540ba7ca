"""The OpenAPI pieces every API module shares (docs/errors.md): the problem document's schema and the
responses an operation documents for its statuses and error classes."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiResponse
from rest_framework import serializers

from .api import problem_attributes
from .problems import problem_type


class ProblemSerializer(serializers.Serializer):
    """An error, RFC 9457 ``application/problem+json``."""

    type = serializers.CharField(help_text="A URI identifying the kind of problem (about:blank: see the status).")
    title = serializers.CharField(help_text="A short summary of the kind of problem.")
    status = serializers.IntegerField(help_text="The HTTP status code.")
    detail = serializers.CharField(help_text="What went wrong with this request, in plain words.")
    instance = serializers.CharField(required=False, help_text="The request path.")
    request_id = serializers.CharField(
        required=False, help_text="The request's id, also sent as the X-Request-ID response header and written in "
                                  "every log line of the request: quote it when reporting a problem.")
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), required=False,
        help_text="For invalid input: the messages for each field (non_field_errors: for the request as a whole).")


PROBLEM = "application/problem+json"
DESCRIPTIONS = {
    400: f"Invalid input (type `{problem_type('invalid-input')}`: the problem's `errors` say which field and why), "
         f"or a malformed body (`{problem_type('malformed-request')}`).",
    401: "Not authenticated: send `Authorization: Token <token>` (POST /api/v1/auth/token/) or sign in.",
    402: "Insufficient credit.",
    403: "Your role may not do this.",
    404: "No such object (or not yours).",
    406: "The requested format is not available.",
    409: "Conflict with the current state: the Idempotency-Key was used for a different body or is still in flight; "
         "the price went up since the quote; or the attribute is not for sale.",
    429: "Too many requests: see Retry-After.",
    503: "Temporarily unavailable (a concurrent change): retry after the seconds in Retry-After.",
}


def problems(*items, **descriptions: str) -> dict:
    """Schema responses (``application/problem+json``) for the given statuses and error classes.

    An ``int`` documents a status with its generic description (``d409="..."`` overrides it); an error class
    (``market.purchases.PriceChanged``, an ``ldpmarket.api.Problem``) adds its status, and its type is listed in
    that status's description with an example, so that clients can see every type an operation may return.
    """
    kinds: dict[int, list[tuple[str, str]]] = {}
    for item in items:
        if isinstance(item, int):
            kinds.setdefault(item, [])
        else:
            status, slug, title = problem_attributes(item)
            kinds.setdefault(status, []).append((slug, title))
    responses = {}
    for code, types in sorted(kinds.items()):
        description = descriptions.get(f"d{code}", DESCRIPTIONS[code])
        if types:
            description += " Problem types: " + "; ".join(f"`{problem_type(slug)}` ({title})" for slug, title in types)
        examples = [OpenApiExample(slug, summary=title, value={"type": problem_type(slug), "title": title,
                                                               "status": code, "detail": f"{title}: ..."})
                    for slug, title in types]
        responses[(code, PROBLEM)] = OpenApiResponse(ProblemSerializer, description=description, examples=examples)
    return responses


# ------------------------------------------------------------------------------------------------- roles
