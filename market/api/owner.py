"""The owner API under ``/api/v1/owner/`` (docs/custody.md#the-owner-api): an owner's own values, contributing,
and the chain uploads of owner-held values.

Token (or session) authentication; only owners, and each owner sees only their own values.  Every value shows
both guarantees: against buyers (the loss) and against the service (the upload level for an owner-held value;
none for a value the service holds).
"""
from __future__ import annotations

from decimal import Decimal

import numpy as np
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import roles
from accounts.epsilon import from_micro, parse, to_micro
from accounts.ledger.receipts_http import VALUES_PER_PAGE, ReceiptsQuery, ReceiptsSerializer, receipts_response
from accounts.models import User
from accounts.money.format import MoneyField, currency, machine_amount
from ldpmarket.api import AnonThrottle, UserThrottle
from ldpmarket.openapi import problems
from ldpmarket.problems import BudgetError, CustodyRefused, EpsilonError, InvalidValue, NoSuchCheckpoint
from market.chains import grow
from market.models import Attribute, Value
from market.values.owner_rows import ValueRow, owner_value_row, owner_values_of
from market.values.services import value_create, value_upload_chain

from .serializers import AttributeIdField, GridSerializer

#: Most chain points one upload may carry (a grid has at most this many points: 30 / 0.01 steps and more).
MAX_UPLOAD = 100_000


class IsOwner(permissions.IsAuthenticated):
    message = "Only owners have values: this API is for them."

    def has_permission(self, request, view):
        return super().has_permission(request, view) and roles.is_owner(request.user)


class GuaranteeSerializer(serializers.Serializer):
    buyers = serializers.CharField(help_text="Against buyers, all together: the loss (the highest epsilon released "
                                             "plus one-shot losses).")
    service = serializers.CharField(help_text="Against the service: the upload level of an owner-held value (what "
                                              "its device uploaded), or \"none\" when the service holds the value.")


class OwnerValueSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    attribute = serializers.IntegerField()
    attribute_name = serializers.CharField()
    dataset = serializers.CharField()
    custody = serializers.ChoiceField(choices=Value.Custody.choices)
    kind = serializers.CharField(help_text="The attribute's kind: categorical, binary, numeric or string (owner "
                                           "custody), or another kind (service custody only).")
    labels = serializers.ListField(child=serializers.CharField())
    m = serializers.IntegerField(help_text="The number of labels: outputs are label indices 0..m-1.")
    width = serializers.IntegerField(help_text="Outputs per chain point: 1, or num_bits for a string (one text of "
                                               "num_bits characters 0/1 per point, docs/custody.md#uploads).")
    draw_divisor = serializers.IntegerField(help_text="Each output is drawn at epsilon / draw_divisor: 2 num_hashes "
                                                      "for a string, else 1.")
    low = serializers.CharField(required=False, help_text="Numeric: the lower bound (discretized to output 0).")
    high = serializers.CharField(required=False, help_text="Numeric: the upper bound (discretized to output 1).")
    num_bits = serializers.IntegerField(required=False, help_text="String: the Bloom filter's bits.")
    num_hashes = serializers.IntegerField(required=False, help_text="String: the Bloom filter's hashes.")
    cohort = serializers.IntegerField(required=False, help_text="String: the value's RAPPOR cohort, which the "
                                                                "device hashes with (docs/custody.md).")
    grid = GridSerializer()
    ceiling = serializers.CharField()
    loss = serializers.CharField()
    upload_level = serializers.CharField(allow_null=True, help_text="Owner-held: the highest epsilon uploaded "
                                                                    "(null before the first upload).")
    head = serializers.CharField(allow_null=True, help_text="The chain's highest stored epsilon (null: no chain).")
    guarantee = GuaranteeSerializer()
    needs_upload = serializers.BooleanField(help_text="Owner-held: the ceiling has passed the upload level, so "
                                                      "sales wait for the device to extend the chain.")
    paused = serializers.BooleanField()
    releases = serializers.IntegerField()
    earned = MoneyField(help_text="What this value has earned: exactly 4 places (docs/money.md#how-amounts-are-shown).")
    currency = serializers.CharField(help_text="ISO 4217 code of ``earned`` (setting LDP_CURRENCY).")


class ContributeSerializer(serializers.Serializer):
    attribute = AttributeIdField(help_text="The attribute's id (see the catalog).")
    custody = serializers.ChoiceField(choices=Value.Custody.choices, default=Value.Custody.SERVICE)
    value = serializers.JSONField(required=False, help_text="The raw value: service custody only. An owner-held "
                                                            "value never leaves the owner's device.")
    ceiling = serializers.CharField(help_text="The fixed ceiling (the most epsilon sales may spend), e.g. \"1\".")

    def validate_ceiling(self, data):
        try:
            return parse(data.strip(), name="ceiling")
        except EpsilonError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def validate(self, attrs):
        if attrs["custody"] == Value.Custody.OWNER and "value" in attrs:
            raise serializers.ValidationError({"value": ["An owner-held value stays on your device: send no value."]})
        if attrs["custody"] == Value.Custody.SERVICE and attrs.get("value") in (None, ""):
            raise serializers.ValidationError({"value": ["The service holds this value: send it."]})
        return attrs


class ChainUploadSerializer(serializers.Serializer):
    epsilons = serializers.ListField(child=serializers.CharField(), min_length=1, max_length=MAX_UPLOAD,
                                     help_text="Strictly increasing decimal strings: the grid points from the grid "
                                               "start (first upload) or from the one after the stored head, the last "
                                               "one possibly between grid points (the upload level).")
    outputs = serializers.ListField(child=serializers.JSONField(), min_length=1, max_length=MAX_UPLOAD,
                                    help_text="One per epsilon: a label index 0..m-1 or a label; for a string "
                                              "attribute a text of num_bits characters 0/1 (docs/custody.md#uploads).")

    def validate_epsilons(self, data):
        out = []
        for k, text in enumerate(data):
            try:
                out.append(parse(text.strip(), name=f"epsilons[{k}]", allow_zero=False))
            except EpsilonError as exc:
                raise serializers.ValidationError(str(exc)) from None
        return out

    def outputs_for(self, attribute: Attribute) -> list:
        if attribute.kind == Attribute.Kind.STRING:  # texts of bits, checked by the service (CustodyRefused)
            return list(self.validated_data["outputs"])
        labels = attribute.domain_labels
        out = []
        for k, o in enumerate(self.validated_data["outputs"]):
            if isinstance(o, bool) or not isinstance(o, (int, str)):
                raise serializers.ValidationError({"outputs": [f"outputs[{k}] must be a label index or a label, "
                                                               f"got {o!r}."]})
            if isinstance(o, str):
                if o not in labels:
                    raise serializers.ValidationError({"outputs": [f"outputs[{k}]: {o!r} is not one of the labels "
                                                                   f"{labels}."]})
                o = labels.index(o)
            out.append(o)
        return out


def payload(row: ValueRow) -> dict:
    """The owner API's view of one value (``OwnerValueSerializer``)."""
    value, attribute, budget = row.value, row.value.attribute, row.budget
    held = value.custody == Value.Custody.OWNER
    head = row.head if row.length else None
    upload = head if held else None
    needs = False
    if held:
        grid = grow.Grid.of(attribute)
        target = int(grid.last_point_upto(np.array([to_micro(budget.ceiling)]))[0])
        needs = to_micro(head or 0) < target
    return {
        "id": value.id, "attribute": attribute.id, "attribute_name": attribute.name,
        "dataset": attribute.dataset.title, "custody": value.custody, "kind": attribute.kind,
        "labels": attribute.domain_labels, "m": attribute.domain_size, "width": attribute.width,
        "draw_divisor": attribute.draw_divisor, **_shape(attribute, value),
        "grid": {"start": _text(attribute.grid_start), "step": _text(attribute.grid_step),
                 "stop": _text(attribute.grid_stop)},
        "ceiling": _text(budget.ceiling), "loss": _text(budget.loss),
        "upload_level": None if upload is None else _text(upload), "head": None if head is None else _text(head),
        "guarantee": {"buyers": _text(budget.loss), "service": _text(upload or Decimal(0)) if held else "none"},
        "needs_upload": needs, "paused": budget.paused, "releases": row.releases,
        "earned": machine_amount(row.earned), "currency": currency(),
    }


def _shape(attribute: Attribute, value: Value) -> dict:
    """What a device needs besides the labels: a numeric attribute's bounds, a string's Bloom filter and cohort."""
    if attribute.kind == Attribute.Kind.NUMERIC:
        return {"low": format(attribute.low.normalize(), "f"), "high": format(attribute.high.normalize(), "f")}
    if attribute.kind == Attribute.Kind.STRING:
        return {"num_bits": attribute.num_bits, "num_hashes": attribute.num_hashes, "cohort": value.cohort}
    return {}


def _text(d) -> str:
    return format(from_micro(to_micro(d)).normalize(), "f")


class OwnerValueViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Your values (owners only), newest first, with both guarantees; contribute; upload an owner-held chain."""

    permission_classes = [IsOwner]
    throttle_classes = [AnonThrottle, UserThrottle]
    serializer_class = OwnerValueSerializer
    filter_backends: list = []
    lookup_value_converter = "ascii_id"  # an id in ASCII digits, in range, or no route: 404 (ldpmarket.fields)

    def get_queryset(self):
        user = self.request.user
        if not isinstance(user, User):  # the schema generator
            return Value.objects.none()
        return Value.objects.filter(owner=user).only("id")

    @extend_schema(summary="Your values", responses={200: OwnerValueSerializer(many=True),
                                                     **problems(400, 401, 403, 429)})
    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        rows = owner_values_of(request.user, [v.id for v in page])
        return self.get_paginated_response([payload(r) for r in rows])

    @extend_schema(summary="One of your values", responses={200: OwnerValueSerializer,
                                                            **problems(401, 403, 404, 429)})
    def retrieve(self, request, *args, **kwargs):
        return Response(payload(owner_value_row(request.user, self.kwargs["pk"])))  # an int: <ascii_id:pk>

    @extend_schema(summary="Contribute a value", request=ContributeSerializer,
                   responses={201: OwnerValueSerializer, **problems(400, 401, 403, 429, CustodyRefused, BudgetError)})
    def create(self, request, *args, **kwargs):
        form = ContributeSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        try:
            value = value_create(owner=request.user, attribute=data["attribute"], raw=data.get("value"),
                                 ceiling=data["ceiling"], custody=data["custody"])
        except InvalidValue as exc:
            raise serializers.ValidationError({"value": [str(exc)]}) from None
        return Response(payload(owner_value_row(request.user, value.id)), status=status.HTTP_201_CREATED)

    @extend_schema(summary="Upload chain points of your owner-held value", request=ChainUploadSerializer,
                   responses={200: OwnerValueSerializer, **problems(400, 401, 403, 404, 429, CustodyRefused)})
    @action(detail=True, methods=["post"], url_path="chain")
    def chain(self, request, pk=None):
        row = owner_value_row(request.user, pk)  # an int: <ascii_id:pk>
        form = ChainUploadSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        value_upload_chain(value_id=row.value.id, owner=request.user, epsilons=form.validated_data["epsilons"],
                           outputs=form.outputs_for(row.value.attribute))
        return Response(payload(owner_value_row(request.user, row.value.id)))


@extend_schema(summary="Your receipts", parameters=[ReceiptsQuery],
               responses={200: ReceiptsSerializer, **problems(400, 401, 403, 404, 429, NoSuchCheckpoint)})
class OwnerReceiptsView(APIView):
    """Receipts of the ledger entries about your values (docs/receipts.md): each entry with its proofs against a
    signed checkpoint, to check with `ldpmarket-client verify`. ``?value=`` for one value, ``?tree_size=`` for the
    checkpoint you hold; pages of up to 100 values (``next``)."""

    permission_classes = [IsOwner]
    throttle_classes = [AnonThrottle, UserThrottle]

    def get(self, request):
        query = ReceiptsQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        values = Value.objects.filter(owner=request.user).order_by("id")
        if "value" in query.validated_data:
            values = values.filter(id=query.validated_data["value"])
            if not values.exists():
                raise exceptions.NotFound("You have no value with this id.")
        if "after" in query.validated_data:
            values = values.filter(id__gt=query.validated_data["after"])
        ids = list(values.values_list("id", flat=True)[:VALUES_PER_PAGE + 1])
        return receipts_response(request, ids[:VALUES_PER_PAGE], tree_size=query.validated_data.get("tree_size"),
                                 more=len(ids) > VALUES_PER_PAGE)

