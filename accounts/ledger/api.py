"""The ledger's public transparency API (docs/budget-rules.md#checkpoints): anyone may read it, no token needed.

* ``GET /api/v1/ledger/public-key/``: the Ed25519 key that signs checkpoints (PEM, raw hex, key id, and its C2SP
  verifier key ``vkey`` with the log's ``origin``), and the history of every key that signed a checkpoint
  (docs/receipts.md#rotating-the-log-key).
* ``GET /api/v1/ledger/policy/``: the C2SP trust policy verifiers should use (docs/receipts.md#witnesses): the log's
  keys, its witnesses and their quorum, as text.
* ``GET /api/v1/ledger/checkpoints/``: the signed checkpoints, newest first (cursor pagination): tree size, root
  hash, time, key id, signature, and the exact statement signed.
* ``GET /api/v1/ledger/consistency/?first=N&second=M``: an RFC 6962 consistency proof between the checkpoints of
  tree sizes N <= M, so whoever holds the older one can check that the log only grew.
"""
from __future__ import annotations

from django.http import HttpResponse
from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import exceptions, generics, serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.ledger import merkle, signing
from accounts.ledger.leaves import log_leaf_hashes
from accounts.ledger.notes import note_of
from accounts.ledger.witnesses import published_policy
from accounts.models import LedgerCheckpoint, LedgerLogKey
from ldpmarket.api import AnonThrottle, CursorPagination
from ldpmarket.fields import ID_SCHEMA, StrictIntegerField
from ldpmarket.openapi import problems


class LogKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = LedgerLogKey
        fields = ["vkey", "public_key", "key_id", "first_size", "last_size", "added_at", "retired_at"]
        read_only_fields = fields


class PublicKeySerializer(serializers.Serializer):
    algorithm = serializers.CharField(help_text="Always Ed25519.")
    key_id = serializers.CharField(help_text="SHA-256 (hex) of the raw 32-byte public key; each checkpoint names "
                                             "the key that signed it.")
    public_key = serializers.CharField(help_text="The raw 32-byte public key, hex.")
    origin = serializers.CharField(help_text="The log's origin: the first line of every checkpoint and the name of its "
                                             "keys (docs/receipts.md#checkpoints-as-signed-notes).")
    vkey = serializers.CharField(help_text="The key as a C2SP verifier key (<origin>+<key id>+<base64>): give it to "
                                           "`ldpmarket-client verify --log-key`, a witness's --log, or a policy's "
                                           "log line.")
    keys = LogKeySerializer(many=True, help_text="Every key that has signed a checkpoint, newest first.")
    public_key_pem = serializers.CharField(help_text="The same key as a PEM SubjectPublicKeyInfo block: save it as "
                                                     "key.pem for `ldpmarket-client verify --public-key key.pem`.")


@extend_schema_view(get=extend_schema(responses={200: PublicKeySerializer, **problems(429)}, auth=[]))
class LedgerPublicKeyView(APIView):
    """The key that signs the ledger's checkpoints (docs/budget-rules.md#checkpoints)."""

    permission_classes = [AllowAny]
    authentication_classes: list = []
    throttle_classes = [AnonThrottle]

    def get(self, request):
        keys = LogKeySerializer(LedgerLogKey.objects.order_by("-first_size", "-id"), many=True).data
        return Response({"algorithm": "Ed25519", "key_id": signing.key_id(), "public_key": signing.public_raw().hex(),
                         "origin": signing.origin(), "vkey": signing.vkey(), "keys": keys,
                         "public_key_pem": signing.public_pem()})


@extend_schema_view(get=extend_schema(responses={(200, "text/plain"): str, **problems(429)}, auth=[]))
class LedgerPolicyView(APIView):
    """The trust policy verifiers should use (C2SP tlog-policy, docs/receipts.md#witnesses): a ``log`` line per key
    that signs new checkpoints, the witnesses and the quorum of ``LDP_WITNESS_POLICY`` (``quorum none`` without
    one)."""

    permission_classes = [AllowAny]
    authentication_classes: list = []
    throttle_classes = [AnonThrottle]

    def get(self, request):
        return HttpResponse(published_policy(), content_type="text/plain; charset=utf-8")


class CheckpointSerializer(serializers.ModelSerializer):
    statement = serializers.SerializerMethodField(help_text=(
        "The exact bytes the signature covers (UTF-8 text, one field per line: a header, the tree size, the root "
        "hash, the time). Verify the signature over these bytes with the public key."))

    class Meta:
        model = LedgerCheckpoint
        fields = ["tree_size", "root_hash", "created_at", "key_id", "signature", "statement", "note"]
        read_only_fields = fields
        extra_kwargs = {"tree_size": {"help_text": "How many leaves of the checkpoint log the root covers."},
                        "root_hash": {"help_text": "RFC 6962 Merkle root over those leaves (hex)."}}

    note = serializers.SerializerMethodField(help_text=(
        "The checkpoint as a C2SP signed note with every witness cosignature "
        "(docs/receipts.md#checkpoints-as-signed-notes): `ldpmarket-client verify --policy` checks it. key_id, "
        "signature and statement are the signature of earlier releases, kept for one release."))

    def get_statement(self, obj) -> str:
        return signing.statement(obj.tree_size, obj.root_hash, obj.created_at).decode()

    def get_note(self, obj) -> str:
        lines = sorted(obj.cosignatures.all(), key=lambda c: c.witness.name)  # prefetched by the view
        return note_of(obj) + "".join(f"{c.line}\n" for c in lines)


class CheckpointPagination(CursorPagination):
    """Newest first, by tree size (the log only grows)."""

    ordering = "-tree_size"


@extend_schema_view(get=extend_schema(responses={200: CheckpointSerializer(many=True), **problems(400, 429)}, auth=[]))
class LedgerCheckpointList(generics.ListAPIView):
    """The ledger's signed checkpoints, newest first."""

    serializer_class = CheckpointSerializer
    permission_classes = [AllowAny]
    authentication_classes: list = []
    throttle_classes = [AnonThrottle]
    pagination_class = CheckpointPagination
    queryset = LedgerCheckpoint.objects.prefetch_related("cosignatures__witness")


class ConsistencySerializer(serializers.Serializer):
    first = serializers.IntegerField(help_text="The older checkpoint's tree size.")
    second = serializers.IntegerField(help_text="The newer checkpoint's tree size.")
    first_root = serializers.CharField(help_text="The older checkpoint's root hash (hex).")
    second_root = serializers.CharField(help_text="The newer checkpoint's root hash (hex).")
    proof = serializers.ListField(child=serializers.CharField(), help_text=(
        "RFC 6962 (section 2.1.2) consistency proof, hex node hashes: with the two roots it shows the first "
        "tree is a prefix of the second."))


class ConsistencyQuery(serializers.Serializer):
    first = StrictIntegerField(min_value=1)
    second = StrictIntegerField(min_value=1)

    def validate(self, attrs):
        if attrs["first"] > attrs["second"]:
            raise serializers.ValidationError({"first": ["must not exceed second"]})
        return attrs


@extend_schema_view(get=extend_schema(
    parameters=[OpenApiParameter("first", ID_SCHEMA, required=True, description="Tree size of a checkpoint."),
                OpenApiParameter("second", ID_SCHEMA, required=True,
                                 description="Tree size of a later (or the same) checkpoint.")],
    responses={200: ConsistencySerializer, **problems(400, 404, 429)}, auth=[]))
class LedgerConsistencyView(APIView):
    """A consistency proof between two checkpoints (RFC 6962): the log between them only grew."""

    permission_classes = [AllowAny]
    authentication_classes: list = []
    throttle_classes = [AnonThrottle]

    def get(self, request):
        query = ConsistencyQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        first, second = query.validated_data["first"], query.validated_data["second"]
        roots = dict(LedgerCheckpoint.objects.filter(tree_size__in=[first, second]).values_list("tree_size",
                                                                                                "root_hash"))
        for name, size in (("first", first), ("second", second)):
            if size not in roots:
                raise exceptions.NotFound(f"No checkpoint has tree size {size} ({name}).")
        leaves = log_leaf_hashes(second)
        proof = merkle.consistency_proof(first, leaves) if first < second else []
        return Response({"first": first, "second": second, "first_root": roots[first], "second_root": roots[second],
                         "proof": [p.hex() for p in proof]})


#: Routes, mounted under /api/v1/ by ``market.api.urls`` (an include by name: no interface imports another).
urlpatterns = [
    path("ledger/public-key/", LedgerPublicKeyView.as_view(), name="ledger-public-key"),
    path("ledger/checkpoints/", LedgerCheckpointList.as_view(), name="ledger-checkpoints"),
    path("ledger/consistency/", LedgerConsistencyView.as_view(), name="ledger-consistency"),
    path("ledger/policy/", LedgerPolicyView.as_view(), name="ledger-policy"),
]
