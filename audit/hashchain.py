"""The hash chain's checks (tamper evidence; docs/budget-rules.md#the-audit).

Every block's hash recomputed with ``accounts.ledger.block_hash`` from its entries as stored, the blocks linked by
``prev_hash`` in id order from the genesis hash, entry counts, the head row pointing at the last block, every
entry's ``created_at`` equal to its block's (the hash covers the block's time, not each entry's), and optionally a
block hash recorded earlier (``anchor``) still present -- which also catches a rewrite that recomputed every hash
after it.  Edits, deletions, insertions and reorderings of entries or blocks all change a recomputed hash or a link.
"""
from __future__ import annotations

import numpy as np

from accounts import ledger

from .report import Recorder, when_text
from .tables import entry_records, lookup


def check_hash_chain(rec: Recorder, e, blocks, prev_hashes, hashes, head_id, anchor) -> None:
    S = "Hash chain"
    n_blocks = blocks["id"].size
    ids, created = blocks["id"], blocks["created_at"]
    # Entries grouped by block (entries are in (block, id) order).
    starts = np.searchsorted(e["block"], ids, side="left")
    ends = np.searchsorted(e["block"], ids, side="right")
    held = ends - starts
    _, in_block = lookup(ids, e["block"])
    rec.check(S, "every entry belongs to a block", ~in_block, e["id"].size,
              lambda i: f"entry {e['id'][i]} names block {e['block'][i]}, which does not exist")

    linked = np.ones(n_blocks, dtype=bool)
    rehash = np.ones(n_blocks, dtype=bool)
    prev = ledger.GENESIS
    records = entry_records(e)
    for k in range(n_blocks):
        linked[k] = prev_hashes[k] == prev
        rehash[k] = ledger.block_hash(prev_hashes[k], ledger._dt(int(created[k])),
                                      records[starts[k]:ends[k]]) == hashes[k]
        prev = hashes[k]
    rec.check(S, "blocks are linked: each prev_hash is the hash of the block before it (from genesis)", ~linked,
              n_blocks, lambda k: f"block {ids[k]}: prev_hash {prev_hashes[k][:16]}... does not match the block "
                                  f"before it")
    rec.check(S, "entry count of each block matches its entries", held != blocks["count"], n_blocks,
              lambda k: f"block {ids[k]} records {blocks['count'][k]} entries but holds {held[k]}")
    rec.check(S, "each block's hash recomputes from its stored entries", ~rehash, n_blocks,
              lambda k: f"block {ids[k]} (created {when_text(created[k])}, {held[k]} entries): recomputed hash differs "
                        f"from {hashes[k][:16]}...")
    head_ok = (head_id is None and n_blocks == 0) or (n_blocks > 0 and head_id == int(ids[-1]))
    rec.check(S, "the ledger head points at the last block", None if head_ok else np.array([0]), 1,
              lambda _: f"head points at block {head_id}, the last block is "
                        f"{int(ids[-1]) if n_blocks else 'none'}")
    pos, found = lookup(ids, e["block"])
    mismatch = found & (e["created_at"] != created[pos])
    rec.check(S, "each entry's created_at equals its block's (the time the hash covers)", mismatch, e["id"].size,
              lambda i: f"entry {e['id'][i]}: created_at {when_text(e['created_at'][i])} but its block {e['block'][i]} "
                        f"was written at {when_text(created[pos[i]])}")
    if anchor:
        wanted = anchor.strip().lower()
        present = wanted in set(hashes)
        rec.check(S, "the anchored block hash is still in the chain", None if present else np.array([0]), 1,
                  lambda _: anchor_not_found(wanted, hashes))


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
