"""Signed checkpoints of the ledger (docs/budget-rules.md#checkpoints): ``checkpoint_make``.

The checkpoint log is an append-only list of leaves, one per shard head a checkpoint saw move
(``accounts.ledger.head_leaf``: the shard, its block count and its head hash).  A checkpoint appends a leaf for
every shard whose block count changed since that shard's last leaf, then records and signs (Ed25519,
``ldpmarket.ledger_key``) the RFC 6962 Merkle root over all the leaves so far (``ldpmarket.merkle``).  The log
only grows, so any two checkpoints are consistent (a consistency proof shows it), and the audit checks that
every shard chain still holds every head a checkpoint saw: a lost tail is caught.

Heads are read without locks (a committed head only ever moves forward), so making a checkpoint never waits for
a purchase; two checkpoints made at once cannot both take the same leaf indexes (primary key) or tree size
(``UNIQUE``): the second is refused and ``checkpoint_make`` answers with the first.
"""
from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from ldpmarket import ledger_key, merkle

from . import ledger
from .models import LedgerCheckpoint, LedgerCheckpointLeaf, LedgerHead


def checkpoint_make(*, now: datetime | None = None) -> LedgerCheckpoint | None:
    """Append the moved shard heads to the checkpoint log and sign its new root; the latest checkpoint as it
    is when no head moved (``None`` when there is no ledger yet)."""
    try:
        with transaction.atomic():
            return _make(now or timezone.now())
    except IntegrityError:  # a concurrent checkpoint took these leaves: it covers what this one would
        return LedgerCheckpoint.objects.order_by("-tree_size").first()


def _make(now: datetime) -> LedgerCheckpoint | None:
    leaves = list(LedgerCheckpointLeaf.objects.order_by("index").values_list("shard", "blocks", "head_hash"))
    seen = {shard: blocks for shard, blocks, _ in leaves}  # in index order: the last leaf of each shard wins
    heads = (LedgerHead.objects.filter(last_block__isnull=False).order_by("shard")
             .values_list("shard", "blocks", "last_block__hash"))
    moved = [(shard, blocks, head) for shard, blocks, head in heads if seen.get(shard) != blocks]
    last = LedgerCheckpoint.objects.order_by("-tree_size").first()
    if not moved:
        return last
    all_leaves = leaves + moved
    root = merkle.root([merkle.leaf_hash(ledger.head_leaf(*leaf)) for leaf in all_leaves]).hex()
    size = len(all_leaves)
    checkpoint = LedgerCheckpoint.objects.create(
        created_at=now, tree_size=size, root_hash=root, key_id=ledger_key.key_id(),
        signature=ledger_key.sign(ledger_key.statement(size, root, now)))
    LedgerCheckpointLeaf.objects.bulk_create(
        [LedgerCheckpointLeaf(index=len(leaves) + i, checkpoint=checkpoint, shard=shard, blocks=blocks,
                              head_hash=head) for i, (shard, blocks, head) in enumerate(moved)])
    return checkpoint
