"""The receipts file over HTTP (docs/receipts.md#the-receipts-file): its schema, its query and one response builder,
shared by ``GET /api/v1/owner/receipts/`` (``market.api.owner``, an owner's values) and
``GET /api/v1/audit/receipts/`` (``audit.api``, any value, for auditors)."""
from __future__ import annotations

from urllib.parse import urlencode

from rest_framework import serializers
from rest_framework.response import Response

from accounts.ledger import receipts
from ldpmarket.fields import StrictIntegerField

#: Most values one page of receipts covers; ``next`` continues after the last one.
VALUES_PER_PAGE = 100


class CheckpointJSONSerializer(serializers.Serializer):
    tree_size = serializers.IntegerField()
    root_hash = serializers.CharField(help_text="RFC 6962 Merkle root of the checkpoint log's first tree_size leaves.")
    created_at = serializers.DateTimeField()
    key_id = serializers.CharField()
    signature = serializers.CharField(help_text="Ed25519 signature (hex) of the statement.")
    statement = serializers.CharField(help_text="The exact text signed: header, tree size, root, time.")
    note = serializers.CharField(help_text="The checkpoint as a C2SP signed note with every witness cosignature "
                                           "(docs/receipts.md#checkpoints-as-signed-notes): verify it with the "
                                           "policy of GET /api/v1/ledger/policy/.")


class ShownEntrySerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="The ledger entry's id (block id * 2^24 + position).")
    value = serializers.IntegerField()
    kind = serializers.CharField()
    epsilon = serializers.CharField(allow_null=True)
    purchase = serializers.IntegerField(allow_null=True)
    chain_loss_before = serializers.CharField()
    chain_loss_after = serializers.CharField()
    oneshot_loss_before = serializers.CharField()
    oneshot_loss_after = serializers.CharField()
    ceiling = serializers.CharField()
    guarantee = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()


class ReceiptSerializer(serializers.Serializer):
    entry = ShownEntrySerializer(help_text="The entry as shown; entry_data is what is proven.")
    entry_data = serializers.CharField(help_text="Hex: what is proven, docs/receipts.md#entry-data: 159 bytes "
                                                 "(version 1), or 191 bytes holding the entry's own blinding key "
                                                 "(version 2, as block_data's marker says).")
    entry_index = serializers.IntegerField(help_text="The entry's leaf index in its block's entry tree.")
    block_size = serializers.IntegerField(help_text="How many entries (leaves) the block's entry tree has.")
    entry_proof = serializers.ListField(child=serializers.CharField(), help_text="RFC 6962 inclusion proof (hex).")
    block_data = serializers.CharField(help_text="Hex: the block's leaf in the checkpoint log (135 bytes); its "
                                                 "marker states the version of its entries.")
    block_index = serializers.IntegerField(help_text="The block leaf's index in the checkpoint log.")
    block_proof = serializers.ListField(child=serializers.CharField(),
                                        help_text="RFC 6962 inclusion proof of the block leaf at the checkpoint.")


class PendingSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    value = serializers.IntegerField()
    kind = serializers.CharField()


class ReceiptsSerializer(serializers.Serializer):
    format = serializers.CharField()
    checkpoint = CheckpointJSONSerializer(allow_null=True, help_text="The signed checkpoint every proof is against "
                                                                     "(null before the first checkpoint).")
    receipts = ReceiptSerializer(many=True)
    pending = PendingSerializer(many=True, help_text="Entries written after the checkpoint: receipts come with the "
                                                     "next one.")
    next = serializers.URLField(allow_null=True, help_text="The next page (the following values), or null.")


class ReceiptsQuery(serializers.Serializer):
    """The query: integers in ASCII digits and in ``bigint`` range (``ldpmarket.fields.StrictIntegerField``)."""

    value = StrictIntegerField(required=False, min_value=1, help_text="Only this value's receipts.")
    tree_size = StrictIntegerField(required=False, min_value=1,
                                   help_text="Prove against the checkpoint of this tree size (default: the latest).")
    after = StrictIntegerField(required=False, min_value=0, help_text="Continue after this value id (the `next` "
                                                                      "link sets it).")


def receipts_response(request, value_ids: list[int], *, tree_size: int | None, more: bool) -> Response:
    """The receipts file of ``value_ids`` (in id order); when ``more``, ``next`` continues after the last one, at the
    same checkpoint so that every page proves against one root."""
    bundle = receipts.receipts_bundle(value_ids=value_ids, tree_size=tree_size)  # NoSuchCheckpoint: its own 404
    bundle["next"] = None
    if more and value_ids:
        query = {k: v for k, v in request.query_params.items() if k not in ("after", "tree_size")}
        query["after"] = value_ids[-1]
        if bundle["checkpoint"]:
            query["tree_size"] = bundle["checkpoint"]["tree_size"]
        bundle["next"] = request.build_absolute_uri(f"{request.path}?{urlencode(query)}")
    return Response(bundle)
