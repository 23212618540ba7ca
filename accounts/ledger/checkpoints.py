"""Signed checkpoints of the ledger (docs/budget-rules.md#checkpoints, docs/receipts.md): ``checkpoint_make``.

The checkpoint log is an append-only list of leaves.  A checkpoint appends one leaf per block no leaf names yet
(``accounts.ledger.leaves.block_leaf``: the block's shard, height, id, entry count, time, hash and **entries root**,
the RFC 6962 root over its entries), in block id order, then records and signs the RFC 6962 Merkle root over all the
leaves so far (``accounts.ledger.merkle``): as a C2SP signed note by every key of the ring
(``accounts.ledger.notes``, docs/receipts.md#checkpoints-as-signed-notes), and with the statement signature of
earlier releases (``accounts.ledger.signing``).  The keys that signed are recorded in the published key history
(``LedgerLogKey``), and on commit the checkpoint is submitted to the policy's witnesses
(``accounts.ledger.witnesses``).  Leaves written before receipts existed name shard heads
(``accounts.ledger.leaves.head_leaf``); the first checkpoint after them appends a block leaf for every block, the old
ones included.  The log only grows, so any two checkpoints are consistent (a consistency proof shows it), and the
audit checks that every block a leaf names is still in its chain, with the same entries: a lost tail or an edited
entry is caught.

Before it appends a block's leaf the checkpoint recomputes the block's hash from the entries it read (the ones the
entries root covers, ``accounts.ledger.leaves.block_tree``: a window of entries at a time, so memory does not grow
with the block): a block whose stored entries no longer match its hash gets no leaf, and neither do the later blocks
of its shard (the audit reports it).  Entry trees cost about 2 microseconds per entry (blinded leaves), off the
purchase path; one checkpoint takes at most ``LDP_CHECKPOINT_MAX_ENTRIES`` entries' worth of blocks (always at least
one block) and the next one continues.

Checkpoints are made one at a time: each locks the latest checkpoint's row first.  Two made at once before any exists
cannot both take the same leaf indexes (primary key), blocks (``UNIQUE``) or tree size (``UNIQUE``): the second is
refused and ``checkpoint_make`` answers with the first.
"""
from __future__ import annotations

import hashlib
import logging
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef
from django.utils import timezone

from accounts.ledger import merkle, notes, signing, witnesses
from accounts.ledger.leaves import LEAF_VERSION, block_tree, leaf_data, log_leaf_hashes
from accounts.locks import Lock
from accounts.locks import take as take_lock
from accounts.models import LedgerBlock, LedgerCheckpoint, LedgerCheckpointLeaf, LedgerLogKey

log = logging.getLogger(__name__)


def checkpoint_make(*, now: datetime | None = None, max_entries: int | None = None) -> LedgerCheckpoint | None:
    """Append a leaf for each block no checkpoint covers yet (at most ``max_entries`` entries' worth, default
    ``LDP_CHECKPOINT_MAX_ENTRIES``) and sign the log's new root; the latest checkpoint as it is when there is no
    such block (``None`` when there is no ledger yet).  ``appended`` on the answer: how many leaves this call
    appended (0 when it made none)."""
    limit = int(max_entries if max_entries is not None else settings.LDP_CHECKPOINT_MAX_ENTRIES)
    try:
        with transaction.atomic():
            checkpoint, appended = _make(now or timezone.now(), limit)
    except IntegrityError:  # a concurrent checkpoint took these leaves: it covers what this one would
        checkpoint, appended = LedgerCheckpoint.objects.order_by("-tree_size").first(), 0
    if checkpoint is not None:
        checkpoint.appended = appended
    return checkpoint


def blocks_awaiting_checkpoint() -> int:
    """How many blocks no checkpoint leaf names yet."""
    return _uncovered().count()


def _uncovered():
    return LedgerBlock.objects.filter(~Exists(LedgerCheckpointLeaf.objects.filter(block_id=OuterRef("id"))))


def _make(now: datetime, max_entries: int) -> tuple[LedgerCheckpoint | None, int]:
    take_lock(Lock.CHECKPOINT_LOG)
    last = LedgerCheckpoint.objects.select_for_update().order_by("-tree_size").first()
    todo = list(_uncovered().order_by("id").values_list("id", "shard", "prev_hash", "hash", "entry_count",
                                                        "created_at"))
    taken, total = [], 0
    for row in todo:
        if taken and total + row[4] > max_entries:
            break
        taken.append(row)
        total += row[4]
    if not taken:
        return last, 0
    shards = {row[1] for row in taken}
    first = {}
    for row in taken:
        first.setdefault(row[1], row[0])
    # Each shard's height below its first new block: the blocks of the chain before it.
    height = {s: LedgerBlock.objects.filter(shard=s, id__lt=first[s]).aggregate(n=Count("id"))["n"] for s in shards}
    new, broken = [], set()
    for block_id, shard, prev_hash, block_hash, count, created_at in taken:
        if shard in broken:
            continue
        rehashed, root, chunks = block_tree(block_id, shard, prev_hash, created_at, count, version=LEAF_VERSION)
        if rehashed != block_hash:
            log.error("ledger block %s of shard %s: its stored entries do not match its hash; it gets no checkpoint "
                      "leaf (run audit_budgets)", block_id, shard)
            broken.add(shard)
            continue
        height[shard] += 1
        new.append(dict(shard=shard, blocks=height[shard], head_hash=block_hash, block_id=block_id, entry_count=count,
                        block_created_at=created_at, entries_root=root.hex(), chunk_roots=b"".join(chunks),
                        version=LEAF_VERSION))
    if not new:
        return last, 0
    leaf_hashes = log_leaf_hashes()
    start = len(leaf_hashes)
    leaves = [LedgerCheckpointLeaf(index=start + i, **fields) for i, fields in enumerate(new)]
    leaf_hashes += [merkle.leaf_hash(leaf_data(leaf)) for leaf in leaves]
    root_hex = merkle.root(leaf_hashes).hex()
    size = len(leaf_hashes)
    checkpoint = LedgerCheckpoint.objects.create(
        created_at=now, tree_size=size, root_hash=root_hex, key_id=signing.key_id(),
        signature=signing.sign(signing.statement(size, root_hex, now)), note=notes.sign_checkpoint(size, root_hex))
    for leaf in leaves:
        leaf.checkpoint = checkpoint
    LedgerCheckpointLeaf.objects.bulk_create(leaves)
    _record_keys(size, now)
    witnesses.submit_on_commit()
    return checkpoint, len(leaves)


def _record_keys(size: int, now: datetime) -> None:
    """The published key history (``LedgerLogKey``, docs/receipts.md#rotating-the-log-key): each key of the ring
    signed this checkpoint of tree size ``size``; a key no longer in the ring is retired."""
    ring = {signer.verifier.vkey: signer for signer in signing.note_signers()}
    known = {k.vkey: k for k in LedgerLogKey.objects.select_for_update()}
    for vkey, signer in ring.items():
        key = known.get(vkey)
        if key is None:
            public = signer.verifier.public
            LedgerLogKey.objects.create(vkey=vkey, public_key=public.hex(), key_id=hashlib.sha256(public).hexdigest(),
                                        first_size=size, last_size=size, added_at=now)
        else:
            LedgerLogKey.objects.filter(pk=key.pk).update(last_size=size, retired_at=None)
    LedgerLogKey.objects.exclude(vkey__in=list(ring)).filter(retired_at__isnull=True).update(retired_at=now)
