"""The hash chains' and the checkpoints' checks (tamper evidence; docs/budget-rules.md#the-audit).

Per shard (docs/budget-rules.md#the-ledger): every block's hash recomputed with ``accounts.ledger.hashchain.block_hash``
from its entries as stored, the shard's blocks linked by ``prev_hash`` in id order from the genesis hash, entry
counts, the shard's head row pointing at its last block and counting its blocks, every entry of an attribute's
shard about a value of that attribute, every entry's ``created_at`` equal to its block's (the hash covers the
block's time, not each entry's), and optionally a block hash recorded earlier (``anchor``) still present --
which also catches a rewrite that recomputed every hash after it.  Edits, deletions, insertions and
reorderings of entries or blocks all change a recomputed hash or a link.

The checkpoints (docs/budget-rules.md#checkpoints): the log's leaves numbered without gaps, every checkpoint's
Merkle root recomputed from the leaves it covers, its Ed25519 signature valid under the service's key, and
every head a checkpoint saw still in its shard's chain (the block at that height has that hash) -- so a
shard's lost tail is caught even when its head row was moved back with it; and each block leaf
(docs/receipts.md#the-audit) naming a block still stored as it was, with the entries root and chunk roots it
holds recomputed from the block's entries, with leaves of the version the block leaf states (version 2: blinded
by each entry's key, ``accounts.ledger.leaves.entry_keys``) -- so every receipt handed out still proves what the
ledger holds.
"""
from __future__ import annotations

import numpy as np

from accounts.ledger import hashchain as ledger
from accounts.ledger import merkle, signing
from accounts.ledger.leaves import BLOCK_LEAF_MARKERS, blinding_key, block_leaf, entry_tree, head_leaf

from .report import Recorder, when_text
from .tables import entry_records, lookup
from .witnessing import check_cosignatures, check_tiles, log_keys, note_problem


def check_hash_chain(rec: Recorder, e, blocks, prev_hashes, hashes, heads, anchor, values=None) -> None:
    S = "Hash chain"
    n_blocks = blocks["id"].size
    ids, created, shards = blocks["id"], blocks["created_at"], blocks["shard"]
    # Entries grouped by block (entries are in (block, id) order).
    starts = np.searchsorted(e["block"], ids, side="left")
    ends = np.searchsorted(e["block"], ids, side="right")
    held = ends - starts
    _, in_block = lookup(ids, e["block"])
    rec.check(S, "every entry belongs to a block", ~in_block, e["id"].size,
              lambda i: f"entry {e['id'][i]} names block {e['block'][i]}, which does not exist")

    linked = np.ones(n_blocks, dtype=bool)
    rehash = np.ones(n_blocks, dtype=bool)
    prev: dict[int, str] = {}
    last: dict[int, int] = {}
    count: dict[int, int] = {}
    records = entry_records(e)
    for k in range(n_blocks):
        shard = int(shards[k])
        linked[k] = prev_hashes[k] == prev.get(shard, ledger.GENESIS)
        rehash[k] = ledger.block_hash(prev_hashes[k], ledger._dt(int(created[k])), records[starts[k]:ends[k]],
                                      shard) == hashes[k]
        prev[shard], last[shard], count[shard] = hashes[k], int(ids[k]), count.get(shard, 0) + 1
    rec.check(S, "blocks are linked: each prev_hash is the hash of the block before it in its shard (from genesis)",
              ~linked, n_blocks, lambda k: f"block {ids[k]} of shard {shards[k]}: prev_hash {prev_hashes[k][:16]}... "
                                           f"does not match the block before it")
    rec.check(S, "entry count of each block matches its entries", held != blocks["count"], n_blocks,
              lambda k: f"block {ids[k]} records {blocks['count'][k]} entries but holds {held[k]}")
    rec.check(S, "each block's hash recomputes from its stored entries", ~rehash, n_blocks,
              lambda k: f"block {ids[k]} (created {when_text(created[k])}, {held[k]} entries): recomputed hash differs "
                        f"from {hashes[k][:16]}...")
    all_shards = sorted(set(last) | {s for s, (b, _) in heads.items() if b is not None})
    rec.fail(S, "each shard's head points at its last block and counts its blocks", max(len(all_shards), 1),
             [f"shard {s}: head at block {heads.get(s, (None, 0))[0]} counting {heads.get(s, (None, 0))[1]} blocks, "
              f"the chain's last block is {last.get(s)} of {count.get(s, 0)}"
              for s in all_shards if heads.get(s, (None, 0)) != (last.get(s), count.get(s, 0))])
    pos, found = lookup(ids, e["block"])
    mismatch = found & (e["created_at"] != created[pos])
    rec.check(S, "each entry's created_at equals its block's (the time the hash covers)", mismatch, e["id"].size,
              lambda i: f"entry {e['id'][i]}: created_at {when_text(e['created_at'][i])} but its block {e['block'][i]} "
                        f"was written at {when_text(created[pos[i]])}")
    if values is not None:
        vpos, vfound = lookup(values["id"], e["value"])
        shard_of = np.where(found, shards[np.minimum(pos, max(n_blocks - 1, 0))] if n_blocks else -1, -1)
        attribute = np.where(vfound, values["attribute"][np.minimum(vpos, max(values["id"].size - 1, 0))], -1)
        wrong = found & vfound & (shard_of != ledger.LEGACY_SHARD) & (shard_of != attribute)
        rec.check(S, "each entry of an attribute's shard is about a value of that attribute", wrong, e["id"].size,
                  lambda i: f"entry {e['id'][i]} (value {e['value'][i]} of attribute {attribute[i]}) is in a block "
                            f"of shard {shard_of[i]}")
    if anchor:
        wanted = anchor.strip().lower()
        present = wanted in set(hashes)
        rec.check(S, "the anchored block hash is still in the chain", None if present else np.array([0]), 1,
                  lambda _: anchor_not_found(wanted, hashes))


def _leaf_data(leaf) -> bytes:
    _, _, shard, height, head, block_id, count, created_us, entries_root, _, version = leaf
    if block_id is None:
        return head_leaf(shard, height, head)
    if version not in BLOCK_LEAF_MARKERS:  # no leaf the log signed: the root check reports it
        return f"unknown leaf version {version}".encode()
    return block_leaf(shard, height, block_id, count, created_us, head, entries_root, version)


def check_checkpoints(rec: Recorder, blocks, hashes, checkpoints, leaves, e=None) -> None:
    """The checkpoint log and every checkpoint against the chains (module docstring)."""
    S = "Checkpoints"
    indexes = np.array([leaf[0] for leaf in leaves], dtype=np.int64)
    gaps = indexes != np.arange(indexes.size)
    rec.check(S, "the checkpoint log's leaves are numbered 0, 1, 2, ... without a gap", gaps, indexes.size,
              lambda i: f"leaf {indexes[i]} sits at position {i}")
    leaf_hashes = [merkle.leaf_hash(_leaf_data(leaf)) for leaf in leaves]
    keys = log_keys()
    bad_root, bad_sig, bad_note, bad_order = [], [], [], []
    previous = 0
    for k, (cid, created_at, size, root_hash, kid, signature, note) in enumerate(checkpoints):
        if size > len(leaf_hashes) or merkle.root(leaf_hashes[:size]).hex() != root_hash:
            bad_root.append(k)
        key = keys.get(kid)
        if key is None or not signing.verify(signing.statement(size, root_hash, created_at), signature, key):
            bad_sig.append(k)
        why = note and note_problem(note, size, root_hash, keys)
        if why:
            bad_note.append(f"checkpoint {cid} (tree size {size}): {why}")
        if size <= previous:
            bad_order.append(k)
        previous = size
    n = len(checkpoints)
    rec.fail(S, "each checkpoint's Merkle root recomputes from the leaves it covers (RFC 6962)", n,
             [f"checkpoint {checkpoints[k][0]} (tree size {checkpoints[k][2]}): root {checkpoints[k][3][:16]}... does "
              f"not recompute" for k in bad_root])
    rec.fail(S, "each checkpoint's statement is signed by a key of the log's key history (Ed25519)", n,
             [f"checkpoint {checkpoints[k][0]}: the signature does not verify under key {checkpoints[k][4][:16]}..."
              for k in bad_sig])
    rec.fail(S, "each checkpoint's signed note states its size and root under the log's origin, and every log "
                "signature on it verifies (docs/receipts.md#checkpoints-as-signed-notes)",
             sum(1 for c in checkpoints if c[6]), bad_note)
    check_cosignatures(rec)
    check_tiles(rec, leaf_hashes)
    rec.fail(S, "checkpoints only grow: each covers more leaves than the one before", n,
             [f"checkpoint {checkpoints[k][0]} covers {checkpoints[k][2]} leaves, no more than the one before it"
              for k in bad_order])
    # Each leaf's head must still be in its shard's chain: the shard's block number `n` (1-based) has that hash.
    by_shard: dict[int, list[str]] = {}
    for k in range(blocks["id"].size):
        by_shard.setdefault(int(blocks["shard"][k]), []).append(hashes[k])
    rec.fail(S, "every head a checkpoint saw is still in its shard's chain (no tail lost or rewritten)", len(leaves),
             [_lost_text(leaf, by_shard) for leaf in leaves
              if not (0 < leaf[3] <= len(by_shard.get(leaf[2], [])) and by_shard[leaf[2]][leaf[3] - 1] == leaf[4])])
    if e is not None:
        _check_block_leaves(rec, blocks, hashes, leaves, e)


def _check_block_leaves(rec: Recorder, blocks, hashes, leaves, e) -> None:
    """Each block leaf (docs/receipts.md) against its block as stored: the block it names (id, shard, hash, entry
    count, time), and its entries root and chunk roots recomputed from the block's entries, so a receipt handed
    out for an entry still proves what the ledger holds."""
    S = "Checkpoints"
    block_leaves = [leaf for leaf in leaves if leaf[5] is not None]
    ids = blocks["id"]
    pos, found = lookup(ids, np.array([leaf[5] for leaf in block_leaves], dtype=np.int64))
    starts = np.searchsorted(e["block"], ids, side="left")
    ends = np.searchsorted(e["block"], ids, side="right")
    named, rooted = [], []
    key = blinding_key() if any(leaf[10] == 2 for leaf in block_leaves) else None
    for j, leaf in enumerate(block_leaves):
        index, _, shard, height, head, block_id, count, created_us, entries_root, chunk_roots, version = leaf
        k = int(pos[j])
        if not found[j] or (int(blocks["shard"][k]), hashes[k], int(blocks["count"][k]),
                            int(blocks["created_at"][k])) != (shard, head, count, created_us):
            named.append(f"leaf {index} names block {block_id} of shard {shard} ({count} entries, "
                         f"hash {head[:16]}...), "
                         + ("which no longer exists" if not found[j] else "which the chain now holds otherwise"))
            continue
        if version not in BLOCK_LEAF_MARKERS:
            rooted.append(f"leaf {index}: version {version} is no leaf version (1, 2)")
            continue
        held = slice(int(starts[k]), int(ends[k]))
        root, chunks = entry_tree(entry_records(e, held), version, e["id"][held] if version == 2 else None, key)
        if root.hex() != entries_root or b"".join(chunks) != (chunk_roots or b""):
            rooted.append(f"leaf {index}: the entries of block {block_id} no longer give the entries root "
                          f"{entries_root[:16]}... it vouched for")
    rec.fail(S, "every block a checkpoint leaf names is still in the chain as it was (id, shard, hash, entries, time)",
             len(block_leaves), named)
    rec.fail(S, "every block leaf's entries root recomputes from the block's stored entries (receipts)",
             len(block_leaves), rooted)


def _lost_text(leaf, by_shard) -> str:
    _, cid, shard, height, head = leaf[:5]
    chain = by_shard.get(shard, [])
    if height > len(chain):
        return (f"shard {shard}: checkpoint {cid} saw {height} blocks ending in {head[:16]}..., the chain now holds "
                f"{len(chain)}: its tail was lost")
    return f"shard {shard}: checkpoint {cid} saw block {height} as {head[:16]}..., the chain has another block there"


def anchor_not_found(anchor: str, hashes) -> str:
    """Why an anchor is missing: "not found" first.  A hash within two characters of a block's is a typo of it
    (a rewrite cannot come that close); otherwise it was mistyped, is from another database, or the history up
    to it was rewritten -- the audit cannot tell these apart, so it says all three."""
    near = [h for h in hashes if len(h) == len(anchor) and sum(a != b for a, b in zip(h, anchor)) <= 2]
    if near:
        return (f"anchor {anchor} not found: block hash {near[0]} differs from it in at most two characters "
                f"(mistyped?)")
    return (f"anchor {anchor} not found in the chain: check that it was copied exactly from an earlier report of "
            f"this database; if it was, the history up to it was rewritten")
