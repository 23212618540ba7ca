"""The buyer REST API, ``/api/v1/`` (docs/architecture.md#the-path-of-a-purchase).

Who may do what is decided by ``accounts.roles`` alone (docs/security.md, "Roles"; tested for every way a role
is given in tests/market/api/test_authorization.py and tests/market/api/test_role_paths.py):

=================================  =======  =====  =======  =====  =========
endpoint                            buyer    owner  auditor  staff  anonymous
=================================  =======  =====  =======  =====  =========
GET datasets, dataset               yes      yes    yes      yes    401
POST quotes, purchases, surveys     yes      403    403      403    401
GET purchases, purchase             own      403    all      all    401
GET purchase outputs, estimate      own      403    403      all    401
GET surveys, survey                 own      403    all*     all    401
=================================  =======  =====  =======  =====  =========

Staff includes superusers.  A buyer asking for another buyer's purchase or
survey gets 404 (its existence is not revealed).  Auditors read purchases' and
surveys' bookkeeping, never the data bought (*: a survey's aggregate result is
hidden from them).  Surveys are not purchases here: ``/purchases/`` never lists
or serves them, and no endpoint returns a survey's individual answers (none are
stored).
"""
from __future__ import annotations

import base64
import binascii
import csv
import io

import numpy as np
from django.http import StreamingHttpResponse
from django.urls import reverse
from django_filters import rest_framework as filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, permissions, renderers, viewsets
from rest_framework import serializers as drf_serializers
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param
from rest_framework.views import APIView

from accounts import roles
from ldpmarket.api import (
    KEY_RE,
    AnonThrottle,
    IdempotencyKeyInvalid,
    IdempotencyKeyRequired,
    PurchaseThrottle,
    QuoteThrottle,
    UserThrottle,
    idempotency_key,
)
from ldpmarket.fields import IdFilter, StrictIntegerField
from ldpmarket.numbers import parse_ascii_int
from ldpmarket.openapi import problems
from ldpmarket.problems import (
    BuyerNotApproved,
    ChainConflict,
    EstimateMethodUnavailable,
    IdempotencyConflict,
    InFlight,
    InsufficientCredit,
    NotForSale,
    NothingToSell,
    ParameterError,
    PriceChanged,
    PurchaseConflict,
    PurchaseError,
    PurchaseInterrupted,
    QuoteInvalid,
    TooFewRespondents,
)
from market import selectors
from market.models import SURVEY_MECHANISMS, Attribute, Dataset, Purchase
from market.purchases import estimates, oneshot_specs, pipeline, quotes
from market.purchases.pseudonyms import pseudonyms
from market.values import inputs as domain

from . import serializers as s
from .problems import NoOutputs, PurchaseNotCompleted


class IsBuyer(permissions.IsAuthenticated):
    message = "Only buyers can ask for quotes and make purchases."

    def has_permission(self, request, view):
        return super().has_permission(request, view) and roles.can_buy(request.user)


class PurchaseAccess(permissions.IsAuthenticated):
    """Create: buyers.  Read bookkeeping: buyers (their own), auditors and staff.  Read data (outputs, estimates,
    a survey's result): the buyer who made it, and staff; never auditors (``accounts.roles``).

    The same rules serve surveys (their data, the aggregate, is left out of what auditors see).
    """

    DATA_ACTIONS = ("outputs", "estimate")

    def has_permission(self, request, view):
        if not super().has_permission(request, view):
            return False
        user, act = request.user, getattr(view, "action", None)
        if act == "create":
            self.message = IsBuyer.message
            return roles.can_buy(user)
        if act in self.DATA_ACTIONS:
            self.message = "Only the buyer who made a purchase (or staff) can read its data."
            return roles.can_read_purchased_data(user)
        self.message = "Only buyers, auditors and staff can read purchases."
        return roles.can_list_purchases(user)

    def has_object_permission(self, request, view, obj):
        if getattr(view, "action", None) in self.DATA_ACTIONS:
            self.message = "Only the buyer who made a purchase (or staff) can read its data."
            return roles.can_read_purchased_data(request.user, obj)
        return roles.can_read_purchase(request.user, obj)


# ----------------------------------------------------------------------------------------------- catalog

def _attribute_payload(attribute: Attribute, histogram, full_histogram: bool = False) -> dict:
    policy = selectors.price_policy_or_none(attribute)
    kind = attribute.kind
    return {
        "id": attribute.id, "name": attribute.name, "description": attribute.description, "kind": kind,
        "labels": domain.labels_of(attribute) if kind not in (Attribute.Kind.NUMERIC, Attribute.Kind.STRING) else [],
        "bounds": {"low": attribute.low, "high": attribute.high} if kind == Attribute.Kind.NUMERIC else None,
        "bloom": ({"num_bits": attribute.num_bits, "num_hashes": attribute.num_hashes,
                   "num_cohorts": attribute.num_cohorts} if kind == Attribute.Kind.STRING else None),
        "mechanism": attribute.mechanism,
        "sensitive": list(attribute.sensitive), "pum_tags": list(attribute.pum_tags), "num_items": attribute.num_items,
        "prior": [float(x) for x in attribute.prior],
        "grid": {"start": attribute.grid_start, "step": attribute.grid_step, "stop": attribute.grid_stop},
        "price_policy": None if policy is None else {
            "points": [{"epsilon": e, "price": p} for e, p in policy.points], "owner_share": policy.owner_share},
        "availability": selectors.availability(histogram),
        "histogram": [{"epsilon": e, "available": n}
                      for e, n in (histogram if full_histogram else selectors.histogram_summary(histogram))],
    }


#: ``?histogram=``: the catalog's histograms as a summary (the default) or in full.
HISTOGRAM_PARAMETER = OpenApiParameter(
    "histogram", str, enum=["summary", "full"], required=False,
    description="summary (the default): at most 5 buckets per attribute; full: every grid point (at most 100).")


def _full_histogram(request) -> bool:
    value = request.query_params.get("histogram", "summary")
    if value not in ("summary", "full"):
        raise drf_serializers.ValidationError({"histogram": ['Give "summary" (the default) or "full".']})
    return value == "full"


#: ``?method=`` of a purchase's estimate (docs/mechanisms-reference.md#consistent-estimates).
METHOD_PARAMETER = OpenApiParameter(
    "method", str, enum=["unbiased", "norm_sub", "ibu"], required=False,
    description="unbiased (the default): each frequency's unbiased estimate with its standard error and 95% "
                "interval; norm_sub or ibu: consistent frequencies (non-negative, summing to 1; biased, so "
                "without intervals): Norm-Sub of the unbiased estimates, or the maximum-likelihood estimate by the "
                "iterative Bayesian update under the mechanism's exact law.")


def _estimate_method(request) -> str:
    value = request.query_params.get("method", "unbiased")
    if value not in ("unbiased", "norm_sub", "ibu"):
        raise drf_serializers.ValidationError({"method": ['Give "unbiased" (the default), "norm_sub" or "ibu".']})
    return value


def _dataset_payloads(datasets, full_histogram: bool = False) -> list[dict]:
    datasets = list(datasets)
    attributes = [a for d in datasets for a in d.attributes.all()]
    histograms = selectors.ceiling_histograms(attributes)
    return [{"id": d.id, "title": d.title, "description": d.description, "created_at": d.created_at,
             "attributes": [_attribute_payload(a, histograms[a.id], full_histogram)
                            for a in sorted(d.attributes.all(), key=lambda a: a.id)]}
            for d in datasets]


@extend_schema_view(
    list=extend_schema(summary="The catalog", parameters=[HISTOGRAM_PARAMETER],
                       responses={200: s.DatasetSerializer(many=True), **problems(400, 401, 429)}),
    retrieve=extend_schema(summary="One dataset", parameters=[HISTOGRAM_PARAMETER],
                           responses={200: s.DatasetSerializer, **problems(400, 401, 404, 429)}),
)
class DatasetViewSet(viewsets.ReadOnlyModelViewSet):
    """Datasets and their attributes: kind, domain, mechanism, grid, price policy, availability by epsilon."""

    queryset = Dataset.objects.prefetch_related("attributes").order_by("id")
    serializer_class = s.DatasetSerializer
    filter_backends: list = []
    lookup_value_converter = "ascii_id"  # an id in ASCII digits, in range, or no route: 404 (ldpmarket.fields)

    def list(self, request, *args, **kwargs):
        full = _full_histogram(request)
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.DatasetSerializer(_dataset_payloads(page, full), many=True).data)

    def retrieve(self, request, *args, **kwargs):
        full = _full_histogram(request)
        return Response(s.DatasetSerializer(_dataset_payloads([self.get_object()], full)[0]).data)


# ------------------------------------------------------------------------------------------------ quotes

def _quote_payload(q: selectors.Quote) -> dict:
    p = q.predicted
    guarantee, charged = s.chain_release(q.mechanism, q.guarantee, q.charged_epsilon, q.epsilon)
    return {
        "mechanism": q.mechanism, "charged_epsilon": charged, "guarantee": guarantee,
        "guarantee_label": oneshot_specs.guarantee_label(guarantee), "parameters": q.parameters,
        "quote": q.token, "attribute": q.attribute.id, "epsilon": q.epsilon, "cohort": q.cohort,
        "candidates": q.candidates, "included": q.included,
        "excluded": selectors.excluded_counts(q),
        "price": q.price, "list_price": q.list_price, "upgrade_credit": q.upgrade_credit,
        "price_per_value": q.price_per_value,
        "predicted_error": None if p is None else {
            "target": p.target, "standard_error": p.standard_error,
            "worst_case_standard_error": p.worst_case_standard_error, "per_category": p.per_category,
            "expected_l2": p.expected_l2, "variance": p.variance, "covariance": p.covariance},
        "expires_at": q.expires_at,
    }


def _quote(buyer_id: int, attribute: Attribute, epsilon, cohort, spec) -> selectors.Quote:
    """A chain purchase's quote, or a one-shot purchase's or survey's (``spec``)."""
    policy = pipeline.policy_or_refuse(attribute)
    if spec is None:
        return quotes.quote_issue(buyer_id=buyer_id, attribute=attribute, epsilon=epsilon, cohort=cohort,
                                  policy=policy)
    return quotes.oneshot_quote_issue(buyer_id=buyer_id, attribute=attribute, spec=spec, cohort=cohort, policy=policy)


class QuoteView(APIView):
    """What a purchase or survey would include, cost and charge, and the standard error it would give."""

    permission_classes = [IsBuyer]
    throttle_classes = [AnonThrottle, UserThrottle, QuoteThrottle]

    @extend_schema(summary="Get a quote (a purchase, or a survey with `mechanism`)", request=s.QUOTE_REQUEST,
                   responses={200: s.QuoteSerializer,
                              **problems(400, 401, 403, 409, 429, NothingToSell, NotForSale,
                                         d409="The attribute is not for sale.")})
    def post(self, request):
        data = s.QuoteRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        q = _quote(request.user.id, v["attribute"], v.get("epsilon"), v["cohort"], v["spec"])
        if q.included == 0:
            raise pipeline.nothing_to_sell(q)
        return Response(s.QuoteSerializer(_quote_payload(q)).data)


# --------------------------------------------------------------------------------------------- purchases

class PurchaseFilter(filters.FilterSet):
    # ids in ASCII digits and in range, checked before any query (ldpmarket.fields.IdFilter)
    attribute = IdFilter(field_name="attribute_id")
    dataset = IdFilter(field_name="attribute__dataset_id")
    status = filters.ChoiceFilter(choices=Purchase.Status.choices)
    mechanism = filters.ChoiceFilter(choices=Purchase.Mechanism.choices)

    class Meta:
        model = Purchase
        fields = ["attribute", "dataset", "status", "mechanism"]


class CSVRenderer(renderers.BaseRenderer):
    """``text/csv`` for the outputs endpoint (the view streams the body itself)."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):  # pragma: no cover - never reached
        return b""


IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key", OpenApiTypes.STR, OpenApiParameter.HEADER, required=True, pattern=KEY_RE.pattern,
    description="A unique key per intended purchase (1-255 visible ASCII characters, e.g. a UUID). Sending the "
                "same request again with the same key returns the same purchase and charges once.")
OUTPUT_PAGE_SIZE, OUTPUT_MAX_PAGE_SIZE = 1000, 10000
#: What creating a purchase or a survey may answer besides 401, 403 and 429.
CREATE_PROBLEMS = (400, BuyerNotApproved, IdempotencyKeyRequired, IdempotencyKeyInvalid, NothingToSell, PurchaseError,
                   ParameterError, TooFewRespondents, InsufficientCredit, IdempotencyConflict,
                   PriceChanged, InFlight, NotForSale, PurchaseConflict, ChainConflict, PurchaseInterrupted)


@extend_schema_view(
    list=extend_schema(summary="Your purchases", responses={200: s.PurchaseSerializer(many=True),
                                                            **problems(400, 401, 403, 429)}),
    retrieve=extend_schema(summary="One purchase: status and progress",
                           responses={200: s.PurchaseSerializer, **problems(401, 403, 404, 429)}),
)
class PurchaseViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Purchases: create (idempotent), list and read, and the outputs and estimates of a completed one."""

    serializer_class = s.PurchaseSerializer
    permission_classes = [PurchaseAccess]
    filterset_class = PurchaseFilter
    lookup_value_converter = "ascii_id"  # an id in ASCII digits, in range, or no route: 404 (ldpmarket.fields)

    survey = False
    create_serializer = s.PurchaseCreateSerializer
    detail_route = "api:purchase-detail"

    def get_queryset(self):
        qs = Purchase.objects.select_related("attribute").order_by("-id")
        qs = qs.filter(mechanism__in=SURVEY_MECHANISMS) if self.survey else qs.exclude(mechanism__in=SURVEY_MECHANISMS)
        return roles.visible_purchases(self.request.user, qs)

    def get_throttles(self):
        throttles = super().get_throttles()
        if self.action == "create":
            throttles.append(PurchaseThrottle())
        return throttles

    def get_serializer_class(self):
        """The request's serializer for a POST (the browsable API's form of a purchase or survey shows its fields:
        REST framework asks this with the request's method set to POST), the purchase's otherwise."""
        request = getattr(self, "request", None)
        if request is not None and request.method == "POST":
            return self.create_serializer
        return self.serializer_class

    # ------------------------------------------------------------------------------------------ create

    @extend_schema(
        summary="Buy an attribute at an epsilon",
        parameters=[IDEMPOTENCY_HEADER], request=s.PURCHASE_CREATE_REQUEST,
        responses={200: OpenApiResponse(s.PurchaseSerializer, description="A replay of a completed purchase."),
                   201: OpenApiResponse(s.PurchaseSerializer, description="Completed in this request."),
                   202: OpenApiResponse(s.PurchaseSerializer, description="Large: running in the background; poll "
                                                                          "the Location for status and progress."),
                   **problems(401, 403, 429, *CREATE_PROBLEMS)})
    def create(self, request, *args, **kwargs):
        pipeline.refuse_unapproved(request.user)  # before anything else: an unapproved buyer buys nothing
        key = idempotency_key(request, what="purchase")
        body = self.create_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        attribute, epsilon, cohort, quoted, spec = self._request(body.validated_data)
        try:
            outcome = pipeline.purchase_request(
                buyer=request.user, idempotency_key=key,
                request=pipeline.PurchaseRequest(attribute=attribute, epsilon=epsilon, cohort=cohort, spec=spec,
                                                 quoted_price=quoted))
        except PurchaseInterrupted as exc:
            exc.location = reverse(self.detail_route, kwargs={"pk": exc.purchase_id})
            raise
        return self._respond(outcome.purchase, outcome.status_code)

    def _request(self, data):
        """``(attribute, epsilon, cohort, quoted price or None, spec or None)`` from the body or its quote."""
        if "quote" not in data:
            return data["attribute"], data.get("epsilon"), data["cohort"], None, data["spec"]
        buyer_id = self.request.user.id
        try:
            q = quotes.quote_open(data["quote"], buyer_id=buyer_id)
        except QuoteInvalid as exc:
            key = self.request.headers.get("Idempotency-Key")
            try:  # an expired quote still identifies a purchase already made from it (a replay)
                q = quotes.quote_open(data["quote"], buyer_id=buyer_id, check_expiry=False)
                if not Purchase.objects.filter(buyer_id=buyer_id, idempotency_key=key).exists():
                    raise QuoteInvalid(str(exc))
            except QuoteInvalid:
                raise drf_serializers.ValidationError({"quote": [str(exc)]}) from None
        attribute = Attribute.objects.select_related("dataset").filter(id=q["attribute"]).first()
        if attribute is None:
            raise drf_serializers.ValidationError({"quote": ["The quoted attribute no longer exists."]})
        survey = q["mechanism"] in SURVEY_MECHANISMS
        if survey != self.survey:
            what, where = ("a survey", "/api/v1/surveys/") if survey else ("a purchase", "/api/v1/purchases/")
            raise drf_serializers.ValidationError({"quote": [f"This quote is for {what}: send it to POST {where}."]})
        try:
            spec = oneshot_specs.parse_spec(attribute, epsilon=q["epsilon"],
                                            mechanism=q["mechanism"] if survey else None,
                                            **{k: q["parameters"].get(k) for k in oneshot_specs.PARAMETERS})
        except ParameterError as exc:
            message = f"The quoted request is no longer valid: {exc}"
            raise drf_serializers.ValidationError({"quote": [message]}) from None
        if spec is None and q["epsilon"] is None:
            raise drf_serializers.ValidationError({"quote": ["The quoted attribute is no longer sold this way."]})
        return attribute, q["epsilon"], q["cohort"], q["price"], spec

    def _respond(self, purchase: Purchase, status: int):
        purchase = Purchase.objects.select_related("attribute").get(id=purchase.id)
        headers = {"Location": reverse(self.detail_route, kwargs={"pk": purchase.id})}
        body = self.serializer_class(purchase, context=self.get_serializer_context()).data
        return Response(body, status=status, headers=headers)

    # ------------------------------------------------------------------------------------------- outputs

    def _completed(self) -> Purchase:
        purchase = self.get_object()
        if purchase.status != Purchase.Status.COMPLETED:
            raise PurchaseNotCompleted(f"The purchase is {purchase.status}: outputs and estimates exist once it has "
                                       f"completed.")
        return purchase

    @extend_schema(
        summary="The purchased outputs (JSON pages, or CSV streamed with ?format=csv or Accept: text/csv)",
        parameters=[
            OpenApiParameter("cursor", OpenApiTypes.STR, description="From the previous page's next/previous."),
            OpenApiParameter("page_size", {"type": "integer", "minimum": 1, "maximum": OUTPUT_MAX_PAGE_SIZE},
                             description=f"Rows per page, 1 to {OUTPUT_MAX_PAGE_SIZE} (default {OUTPUT_PAGE_SIZE})."),
            OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "csv"]),
        ],
        responses={200: s.OutputPageSerializer, (200, "text/csv"): OpenApiTypes.STR,
                   **problems(400, 401, 403, 404, 406, 429, PurchaseNotCompleted,
                              d409="The purchase has not completed.")})
    @action(detail=True, methods=["get"], renderer_classes=[renderers.JSONRenderer, renderers.BrowsableAPIRenderer,
                                                            CSVRenderer], filter_backends=[], pagination_class=None)
    def outputs(self, request, pk=None):
        purchase = self._completed()
        if request.accepted_renderer.format == "csv":
            response = StreamingHttpResponse(_csv_rows(purchase), content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="purchase-{purchase.id}-outputs.csv"'
            return response
        start, size = _cursor(request.query_params.get("cursor")), _page_size(request.query_params.get("page_size"))
        ids, out = selectors.output_rows(purchase, start, start + size)
        total = purchase.included
        rows = _rows(purchase, ids, out)
        link = lambda offset: _page_link(request, offset, size)  # noqa: E731
        return Response({
            "count": total,
            "next": link(start + size) if start + size < total else None,
            "previous": link(max(0, start - size)) if start > 0 else None,
            "results": s.OutputRowSerializer(rows, many=True).data,
        })

    @extend_schema(summary="Estimates from the purchased outputs", parameters=[METHOD_PARAMETER],
                   responses={200: s.EstimateSerializer,
                              **problems(400, 401, 403, 404, 429, PurchaseNotCompleted, NoOutputs,
                                         EstimateMethodUnavailable,
                                         d409="The purchase has not completed, or released no values.")})
    @action(detail=True, methods=["get"], filter_backends=[], pagination_class=None)
    def estimate(self, request, pk=None):
        method = _estimate_method(request)
        purchase = self._completed()
        if purchase.included == 0:
            raise NoOutputs("This purchase released no values: there is nothing to estimate from.")
        result = estimates.purchase_estimate(purchase, method=method)
        # the guarantee as the purchase reports it: a chain purchase (stored without one) released ldp outputs
        guarantee, _ = s.chain_release(purchase.mechanism, purchase.guarantee, purchase.charged_epsilon,
                                       purchase.epsilon)
        return Response(s.EstimateSerializer({"purchase": purchase.id, "attribute": purchase.attribute_id,
                                              "kind": purchase.attribute.kind, "mechanism": purchase.mechanism,
                                              "graph": None, **result, "guarantee": guarantee}).data)


@extend_schema_view(
    list=extend_schema(summary="Your surveys", responses={200: s.SurveySerializer(many=True),
                                                          **problems(400, 401, 403, 429)}),
    retrieve=extend_schema(summary="One survey: status and the aggregate estimate",
                           responses={200: s.SurveySerializer, **problems(401, 403, 404, 429)}),
)
class SurveyViewSet(PurchaseViewSet):
    """Surveys: one yes/no question to every eligible owner of a binary attribute; the buyer gets only the aggregate.

    Warner, Simmons and Christofides answers are epsilon-LDP; improved Christofides (cards dealt without
    replacement) guarantees epsilon per report only if respondents cannot see each other's cards or answers, and is
    recorded and shown with that distinct guarantee.  Individual answers are never stored nor returned.
    """

    serializer_class = s.SurveySerializer
    survey = True
    create_serializer = s.SurveyCreateSerializer
    detail_route = "api:survey-detail"

    @classmethod
    def get_extra_actions(cls):
        return []  # no outputs and no separate estimate: a survey releases only its aggregate, shown in the survey

    @extend_schema(
        summary="Commission a survey",
        parameters=[IDEMPOTENCY_HEADER], request=s.SURVEY_CREATE_REQUEST,
        responses={200: OpenApiResponse(s.SurveySerializer, description="A replay of a completed survey."),
                   201: OpenApiResponse(s.SurveySerializer, description="Completed in this request."),
                   202: OpenApiResponse(s.SurveySerializer, description="Large: running in the background; poll "
                                                                        "the Location for status and progress."),
                   **problems(401, 403, 429, *CREATE_PROBLEMS)})
    def create(self, request, *args, **kwargs):
        return super().create(request, *args, **kwargs)


# ------------------------------------------------------------------------------------------ output rows

def _cursor(raw) -> int:
    if not raw:
        return 0
    try:
        text = base64.urlsafe_b64decode(raw.encode("ascii") + b"=" * (-len(raw) % 4)).decode("ascii")
        if not text.startswith("o:"):
            raise ValueError
        return parse_ascii_int(text[2:], max=2 ** 62)  # ASCII digits only (ldpmarket.numbers)
    except (ValueError, UnicodeError, binascii.Error):  # NumberError is a ValueError
        raise drf_serializers.ValidationError({"cursor": ["This cursor is not valid: use the next or previous "
                                                          "link of a page."]}) from None


def _page_size(raw) -> int:
    if raw is None:
        return OUTPUT_PAGE_SIZE
    field = StrictIntegerField(min_value=1, max_value=OUTPUT_MAX_PAGE_SIZE)
    try:
        return field.run_validation(raw)
    except drf_serializers.ValidationError as exc:
        raise drf_serializers.ValidationError({"page_size": exc.detail}) from None


def _page_link(request, offset: int, size: int) -> str:

    url = request.build_absolute_uri()
    url = replace_query_param(url, "page_size", size)
    if offset == 0:
        return remove_query_param(url, "cursor")
    token = base64.urlsafe_b64encode(f"o:{offset}".encode()).decode().rstrip("=")
    return replace_query_param(url, "cursor", token)


def _outputs_as(attribute: Attribute, out: np.ndarray) -> list:
    if not attribute.record.is_chain and attribute.record.format_outputs is not None:  # e.g. LPP's "item:state"
        return attribute.record.format_outputs(attribute.shape, out)
    labels = selectors.output_labels(attribute)
    if labels is None:
        return out.tolist()
    return np.asarray(labels, dtype=object)[out[:, 0]].tolist()


def _released_epsilon(purchase: Purchase):
    """The epsilon each output was released at: the charged one for one-shot purchases."""
    return purchase.charged_epsilon if purchase.charged_epsilon is not None else purchase.epsilon


def _rows(purchase: Purchase, ids: np.ndarray, out: np.ndarray) -> list[dict]:
    eps = s.EpsilonField().to_representation(_released_epsilon(purchase))
    names = pseudonyms(purchase.buyer_id, ids)
    return [{"pseudonym": p, "epsilon": eps, "output": o}
            for p, o in zip(names, _outputs_as(purchase.attribute, out))]


def _csv_rows(purchase: Purchase):
    """The CSV body, one chunk of the purchase at a time."""
    eps = s.EpsilonField().to_representation(_released_epsilon(purchase))
    attribute = purchase.attribute
    string = attribute.kind == Attribute.Kind.STRING or attribute.record.bit_vector  # bit strings
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["pseudonym", "epsilon", "output"])
    yield buffer.getvalue()
    for ids, out in selectors.iter_chunks(purchase):
        buffer.seek(0)
        buffer.truncate()
        outputs = (["".join(map(str, bits)) for bits in out.tolist()] if string
                   else _outputs_as(purchase.attribute, out))
        writer.writerows(zip(pseudonyms(purchase.buyer_id, ids), [eps] * ids.size, outputs))
        yield buffer.getvalue()

