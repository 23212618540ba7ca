"""Receipts: each ledger entry about a value, with the proofs that put it in the signed checkpoint log
(docs/receipts.md).  Reads only.

A receipt is the entry's data (``entry_leaf_data``, of its block leaf's version: for version 2 it holds the entry's
blinding key ``k_e``, so a receipt goes only to the entry's owner and to auditors), its RFC 6962 inclusion proof in
its block's entry tree, the block's leaf in the checkpoint log (``block_leaf``) and that leaf's inclusion proof at a
signed checkpoint.  The entry proof needs only the entry's chunk of ``TREE_CHUNK`` entries (read from the stored
rows) and the block's stored chunk roots; the log proof, the log's leaf hashes up to the checkpoint, whose tree is
built once per checkpoint and kept (``_log_tree``).  Entries of blocks no checkpoint covers yet are ``pending``.
"""
from __future__ import annotations

import functools
from collections import defaultdict
from decimal import Decimal

from accounts.ledger import hashchain as ledger
from accounts.ledger import merkle, signing
from accounts.ledger.leaves import (
    TREE_CHUNK,
    blinding_key,
    entry_keys,
    entry_leaf_data,
    entry_leaf_hashes,
    leaf_data,
    log_leaf_hashes,
    position_ids,
    records_at,
)
from accounts.ledger.notes import cosigned_note
from accounts.models import LedgerCheckpoint, LedgerCheckpointLeaf, LedgerEntry
from ldpmarket.problems import NoSuchCheckpoint

FORMAT = "ldpmarket-receipts-v1"
_ENTRY_FIELDS = ("id", "block_id", "value_id", "kind", "epsilon", "purchase_id", "chain_loss_before",
                 "chain_loss_after", "oneshot_loss_before", "oneshot_loss_after", "ceiling", "guarantee",
                 "created_at")


def checkpoint_for(tree_size: int | None = None) -> LedgerCheckpoint | None:
    """The checkpoint of ``tree_size`` (``NoSuchCheckpoint`` when there is none), or the latest (``None`` when no
    checkpoint exists yet)."""
    if tree_size is None:
        return LedgerCheckpoint.objects.order_by("-tree_size").first()
    checkpoint = LedgerCheckpoint.objects.filter(tree_size=tree_size).first()
    if checkpoint is None:
        raise NoSuchCheckpoint(f"No checkpoint has tree size {tree_size}.")
    return checkpoint


def checkpoint_json(checkpoint: LedgerCheckpoint) -> dict:
    """A checkpoint as ``GET /api/v1/ledger/checkpoints/`` shows it, with the exact statement signed and its C2SP
    signed note with every cosignature (docs/receipts.md#checkpoints-as-signed-notes)."""
    return {"tree_size": checkpoint.tree_size, "root_hash": checkpoint.root_hash,
            "created_at": checkpoint.created_at.isoformat(timespec="microseconds"), "key_id": checkpoint.key_id,
            "signature": checkpoint.signature,
            "statement": signing.statement(checkpoint.tree_size, checkpoint.root_hash,
                                              checkpoint.created_at).decode(),
            "note": cosigned_note(checkpoint).decode()}


def receipts_bundle(*, value_ids, tree_size: int | None = None) -> dict:
    """The receipts of every ledger entry of ``value_ids`` against the checkpoint of ``tree_size`` (default: the
    latest), grouped by value in ledger order: the receipts file of docs/receipts.md#the-receipts-file (without
    ``next``, which the caller paginating adds)."""
    checkpoint = checkpoint_for(tree_size)
    entries = list(LedgerEntry.objects.of_values(value_ids).order_by("value_id", "id").values_list(*_ENTRY_FIELDS))
    size = checkpoint.tree_size if checkpoint else 0
    leaves = {leaf.block_id: leaf for leaf in LedgerCheckpointLeaf.objects.filter(
        block_id__in={e[1] for e in entries}, index__lt=size)}
    covered = [e for e in entries if e[1] in leaves]
    proofs = _entry_proofs(covered, leaves)
    log = _log_tree(size, checkpoint.root_hash) if covered else None
    receipts = []
    for e in covered:
        leaf = leaves[e[1]]
        position = e[0] - e[1] * ledger.ID_SHIFT
        data, entry_proof = proofs[e[0]]
        receipts.append({
            "entry": _shown(e), "entry_data": data.hex(), "entry_index": position, "block_size": leaf.entry_count,
            "entry_proof": [p.hex() for p in entry_proof], "block_data": leaf_data(leaf).hex(),
            "block_index": leaf.index, "block_proof": [p.hex() for p in log.inclusion_proof(leaf.index)]})
    return {"format": FORMAT, "checkpoint": checkpoint_json(checkpoint) if checkpoint else None,
            "receipts": receipts,
            "pending": [{"id": e[0], "value": e[2], "kind": e[3]} for e in entries if e[1] not in leaves]}


def _shown(e) -> dict:
    """An entry as the portal and the API show it (what the receipt's ``entry_data`` must prove)."""
    text = lambda d: None if d is None else f"{Decimal(d):.6f}"  # noqa: E731
    return {"id": e[0], "value": e[2], "kind": e[3], "epsilon": text(e[4]), "purchase": e[5],
            "chain_loss_before": text(e[6]), "chain_loss_after": text(e[7]), "oneshot_loss_before": text(e[8]),
            "oneshot_loss_after": text(e[9]), "ceiling": text(e[10]), "guarantee": e[11] or "",
            "created_at": e[12].isoformat(timespec="microseconds")}


def _entry_proofs(entries, leaves) -> dict[int, tuple[bytes, list[bytes]]]:
    """``{entry id: (entry data, inclusion proof in its block's entry tree)}``: per block, each chunk holding one of
    the entries is read and hashed once, and the tree over the block's stored chunk roots built once.  Entries of
    version-2 blocks carry their own blinding key in their data (``entry_leaf_data``)."""
    wanted: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for e in entries:
        position = e[0] - e[1] * ledger.ID_SHIFT
        wanted[e[1]][position // TREE_CHUNK].append(position)
    out = {}
    key = blinding_key() if any(leaves[b].version == 2 for b in wanted) else None
    for block_id, chunks in wanted.items():
        leaf = leaves[block_id]
        raw = bytes(leaf.chunk_roots)
        outer = merkle.Tree([raw[i:i + 32] for i in range(0, len(raw), 32)])
        for chunk, positions in chunks.items():
            start = chunk * TREE_CHUNK
            stop = min(start + TREE_CHUNK, leaf.entry_count)
            records = records_at(block_id, start, stop)
            ids = position_ids(block_id, start, stop) if leaf.version == 2 else None
            inner = merkle.Tree(entry_leaf_hashes(records, leaf.version, ids, key))
            for position in positions:
                entry_id = block_id * ledger.ID_SHIFT + position
                entry_key = entry_keys([entry_id], key)[0] if leaf.version == 2 else None
                out[entry_id] = (entry_leaf_data(records[position - start], leaf.version, entry_key),
                                 inner.inclusion_proof(position - start) + outer.inclusion_proof(chunk))
    return out


@functools.lru_cache(maxsize=4)
def _log_tree_cached(size: int, root_hash: str) -> merkle.Tree:
    return merkle.Tree(log_leaf_hashes(size))


def _log_tree(size: int, root_hash: str) -> merkle.Tree:
    """The checkpoint log's tree at ``size`` leaves.  The log is append-only, so the tree of a checkpoint never
    changes: it is kept per (size, root), and a tree whose root is not the checkpoint's (a database restored or
    changed under the process) is built again rather than kept."""
    tree = _log_tree_cached(size, root_hash)
    if tree.root.hex() != root_hash:
        _log_tree_cached.cache_clear()
        tree = merkle.Tree(log_leaf_hashes(size))
    return tree
