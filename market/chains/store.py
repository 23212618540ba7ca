"""Chains stored in blocks, sealed at rest (docs/architecture.md#chains-in-blocks).

The values of a gradual-release attribute are grouped, in the order they arrive, into blocks of up to
``settings.LDP_CHAIN_BLOCK`` slots (``ChainBlock``); a value's ``(block, slot)`` never changes.  A chain point is
one row per ``(block, epsilon)`` (``ChainPoint``): the outputs of every slot of the block at that epsilon, sealed
with one AES-GCM call (``sealing.seal_points``), with a plaintext bitmap of the slots that have a point there.
A value's chain is its slot across its block's rows; its head (its highest point) is in the block's ``heads``.

* A purchase at e (``neighbours`` then ``store``) reads, per block, the bitmaps, opens only the rows that hold
  some slot's nearest point below or above e, and bridges, tightens or extends in numpy
  (``market.chains.sets.at``); it writes at most one row per block, at e.
* Extension (``market.chains.extension.chains_extend``) reads each slot's head point, relaxes in numpy and writes one
  row per block and grid step.

Every writer of an attribute's chains first takes its chain lock (``lock``).  Even without it a chain cannot
fork: a row is inserted once (``UNIQUE (block, epsilon)``), and a row or block is updated only at the revision
its writer read; a second writer working from the same state is refused with ``ChainConflict``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from django.conf import settings
from django.db import IntegrityError, connection, transaction

from accounts.locks import Lock
from accounts.locks import take as take_lock
from ldpmarket import pgbinary, storage
from ldpmarket.problems import ChainConflict
from market.chains import sets
from market.models import Attribute, ChainBlock, ChainPoint
from market.values import sealing

HEAD = np.dtype("<i8")


def lock(attribute_id: int) -> None:
    """The attribute's chain lock: a ``FOR NO KEY UPDATE`` lock of its row, held to the end of the transaction
    (values may still be added: their foreign key check takes a weaker lock).  Its place in the lock order:
    ``accounts.locks.Lock.CHAIN`` (docs/architecture.md#the-lock-order); SQLite locks the whole database."""
    take_lock(Lock.CHAIN)
    Attribute.objects.select_for_update(no_key=True).filter(id=attribute_id).values_list("id", flat=True).get()


def bitmap(present: np.ndarray) -> bytes:
    return np.packbits(np.asarray(present, dtype=bool), bitorder="little").tobytes()


def unbitmap(data: bytes, capacity: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(bytes(data), dtype=np.uint8), bitorder="little", count=capacity).astype(bool)


@dataclass
class Block:
    """A block as read: its heads, and its rows' epsilons (ascending), bitmaps, ids and revisions."""

    id: int
    capacity: int
    heads: np.ndarray  # (capacity,) int64 micro-epsilons, 0 for an empty slot
    revision: int
    eps: np.ndarray  # (R,) int64
    present: np.ndarray  # (R, capacity) bool
    point_ids: np.ndarray  # (R,) int64
    point_revisions: np.ndarray  # (R,) int64
    heads_changed: bool = False

    def row(self, epsilon: int) -> int:
        """The index of the row at ``epsilon``, or -1."""
        i = int(np.searchsorted(self.eps, epsilon))
        return i if i < self.eps.size and int(self.eps[i]) == epsilon else -1


def read(block_ids) -> dict[int, Block]:
    """The blocks ``block_ids`` with their rows' bitmaps (no sealed outputs)."""
    ids = sorted({int(b) for b in np.asarray(block_ids).reshape(-1).tolist() if b >= 0})
    if not ids:
        return {}
    blocks = {}
    rows: dict[int, list] = {}
    for bid, eps, present, pid, rev in (ChainPoint.objects.filter(block_id__in=ids).order_by("block_id", "epsilon")
                                        .values_list("block_id", "epsilon", "present", "id", "revision")):
        rows.setdefault(bid, []).append((eps, bytes(present), pid, rev))
    for bid, capacity, heads, revision in (ChainBlock.objects.filter(id__in=ids)
                                           .values_list("id", "capacity", "heads", "revision")):
        got = rows.get(bid, [])
        present = (np.unpackbits(np.frombuffer(b"".join(r[1] for r in got), dtype=np.uint8).reshape(len(got), -1),
                                 axis=1, bitorder="little", count=capacity).astype(bool)
                   if got else np.zeros((0, capacity), dtype=bool))
        blocks[bid] = Block(id=bid, capacity=capacity, heads=np.frombuffer(bytes(heads), dtype=HEAD).astype(np.int64),
                            revision=revision, eps=np.array([r[0] for r in got], dtype=np.int64), present=present,
                            point_ids=np.array([r[2] for r in got], dtype=np.int64),
                            point_revisions=np.array([r[3] for r in got], dtype=np.int64))
    return blocks


def heads_of(blocks: dict[int, Block], block_ids: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Each (block, slot)'s head in micro-epsilons (0: no chain)."""
    heads = np.zeros(len(block_ids), dtype=np.int64)
    for bid, sel in _by_block(block_ids):
        heads[sel] = blocks[bid].heads[slots[sel]]
    return heads


def open_rows(attribute: Attribute, block: Block, rows) -> dict[int, np.ndarray]:
    """The outputs of ``block``'s rows ``rows`` (indices into ``block.eps``): ``{row: (capacity, width)}``."""
    return {r: out for (_, r), out in open_many(attribute, [(block, rows)]).items()}


def open_many(attribute: Attribute, wanted) -> dict[tuple[int, int], np.ndarray]:
    """The outputs of several blocks' rows, ``wanted`` = ``[(block, rows), ...]``: ``{(block id, row): (capacity,
    width)}``, read in one query and opened with one AEAD call per row; ``ChainConflict`` if a row changed since
    its block was read (its revision moved on)."""
    # (the distinct rows by numpy: callers pass a row per item, ``points_at`` one per value of the batch)
    keys = [(block, r) for block, rows in wanted
            for r in np.unique(np.asarray(rows, dtype=np.int64).reshape(-1)).tolist()]
    if not keys:
        return {}
    got = {pid: (sealed, rev, key_id) for pid, sealed, rev, key_id in ChainPoint.objects.filter(
        id__in=[int(b.point_ids[r]) for b, r in keys]).values_list("id", "sealed", "revision", "value_key_id")}
    out = {}
    for block, r in keys:
        sealed, revision, key_id = got.get(int(block.point_ids[r]), (None, -1, None))
        if revision != int(block.point_revisions[r]):
            raise ChainConflict(f"A chain point of block #{block.id} changed since it was read; retry.")
        out[(block.id, r)] = sealing.open_points(sealed, attribute_id=attribute.id, block_id=block.id,
                                                 epsilon=int(block.eps[r]), present=bitmap(block.present[r]),
                                                 width=attribute.width, key_id=key_id).astype(np.int64)
    return out


def _by_block(block_ids: np.ndarray, *, slices: bool = False):
    """``(block id, item indices)`` for each distinct block among ``block_ids`` (one sort, no loop per item).
    With ``slices``, items already grouped by block (extension's rows) come as a ``slice`` of them: indexing an
    array with it is a view, not a copy."""
    block_ids = np.asarray(block_ids, dtype=np.int64)
    if block_ids.size == 0:
        return
    step = np.diff(block_ids)
    if (step >= 0).all():  # already grouped (extension's rows): no sort
        starts = np.concatenate([[0], np.flatnonzero(step) + 1])
        bounds = np.append(starts, block_ids.size).tolist()
        for k in range(starts.size):
            a, b = bounds[k], bounds[k + 1]
            yield int(block_ids[a]), (slice(a, b) if slices else np.arange(a, b))
        return
    order = np.argsort(block_ids, kind="stable")
    starts = np.concatenate([[0], np.flatnonzero(np.diff(block_ids[order])) + 1])
    bounds = np.append(starts, order.size)
    for k in range(starts.size):
        yield int(block_ids[order[starts[k]]]), order[bounds[k]:bounds[k + 1]]


def _as_grid(slots: np.ndarray, eps: np.ndarray):
    """When a block's items are k distinct slots (ascending) each with the same S ascending epsilons, item
    ``j * S + s`` being slot j at epsilon s (extension's new points when every chain grew alike): the slots, as a
    ``slice`` when they are consecutive, and the S epsilons; otherwise ``None``.  A few comparisons per item, no
    search."""
    steps = int(np.searchsorted(slots, slots[0], side="right"))  # S if sorted; the checks below tell
    if steps == 0 or slots.size % steps or (steps > 1 and (np.diff(eps[:steps]) <= 0).any()):
        return None
    by_slot, by_eps = slots.reshape(-1, steps), eps.reshape(-1, steps)
    at_slots = by_slot[:, 0]
    if (by_slot != at_slots[:, None]).any() or (np.diff(at_slots) <= 0).any() or (by_eps != eps[:steps]).any():
        return None
    if int(at_slots[-1]) - int(at_slots[0]) + 1 == at_slots.size:
        at_slots = slice(int(at_slots[0]), int(at_slots[-1]) + 1)
    return at_slots, eps[:steps].copy()


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``values`` (ascending) and each one's index among them.  A block's new points are at a few
    epsilons: they are guessed from its first items and checked, a binary search per item (``numpy.unique``
    would hash every item), and found by ``numpy.unique`` when the guess misses one."""
    guess = np.unique(values[:64])
    which = np.searchsorted(guess, values)
    if (guess[np.minimum(which, guess.size - 1)] == values).all():
        return guess, which
    distinct = np.unique(values)
    return distinct, np.searchsorted(distinct, values)


def neighbours(attribute: Attribute, blocks: dict[int, Block], block_ids: np.ndarray, slots: np.ndarray,
               e: int) -> sets.ChainSet:
    """Per item ``(block, slot)``, the points of its chain that decide its output at e, as a ``ChainSet`` of at
    most two points each: its point at e if stored; otherwise its nearest point below e and its nearest above
    (one of them when e is below its first point or above its head; none for a slot without a chain).
    ``sets.at`` on these gives the same output as on the whole chain: bridging reads the two neighbours,
    tightening the first point and relaxing the head."""
    n, width = len(block_ids), attribute.width
    lo_eps, hi_eps = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    lo_out, hi_out = np.zeros((n, width), dtype=np.int64), np.zeros((n, width), dtype=np.int64)
    found = []
    for bid, sel in _by_block(block_ids):
        block = blocks[bid]
        present = block.present[:, slots[sel]]  # (R, k)
        at_or_below = block.eps <= e
        lo_rows, hi_rows = np.flatnonzero(at_or_below), np.flatnonzero(~at_or_below)
        lo = np.full(sel.size, -1, dtype=np.int64)
        hi = np.full(sel.size, -1, dtype=np.int64)
        if lo_rows.size:
            p = present[lo_rows]
            has = p.any(axis=0)
            lo[has] = lo_rows[lo_rows.size - 1 - np.argmax(p[::-1], axis=0)][has]
        if hi_rows.size:
            p = present[hi_rows]
            has = p.any(axis=0)
            hi[has] = hi_rows[np.argmax(p, axis=0)][has]
        stored = (lo >= 0) & (block.eps[np.maximum(lo, 0)] == e)
        hi[stored] = -1
        found.append((block, sel, lo, hi))
    opened = open_many(attribute, [(block, np.concatenate([lo[lo >= 0], hi[hi >= 0]])) for block, _, lo, hi in found])
    for block, sel, lo, hi in found:
        for rows, eps, out in ((lo, lo_eps, lo_out), (hi, hi_eps, hi_out)):
            for r in np.unique(rows[rows >= 0]).tolist():
                items = np.flatnonzero(rows == r)
                eps[sel[items]] = block.eps[r]
                out[sel[items]] = opened[(block.id, r)][slots[sel[items]]]
    eps = np.stack([lo_eps, hi_eps], axis=1)
    keep = eps >= 0
    lengths = keep.sum(axis=1)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return sets.ChainSet(eps=eps[keep], out=np.stack([lo_out, hi_out], axis=1)[keep], offsets=offsets)


def store(attribute: Attribute, blocks: dict[int, Block], block_ids: np.ndarray, slots: np.ndarray,
          eps: np.ndarray, outputs: np.ndarray, *, savepoint: bool = True) -> int:
    """Store new points: item i is ``outputs[i]`` (width,) at micro-epsilon ``eps[i]`` of slot ``slots[i]`` of
    block ``block_ids[i]``; raise each slot's head to its highest new point.  Per (block, epsilon): a new row is
    inserted, or the existing row is opened, given the new slots and sealed again, updated at the revision read.
    The caller holds the chain lock; ``ChainConflict`` if a row or block changed since ``blocks`` was read, or
    if a slot already has a point at that epsilon (a fork).  Returns the rows written.

    The writes run in a savepoint, so that a refused write leaves the caller's transaction usable; a caller whose
    transaction is only this write (a batch of extension) passes ``savepoint=False``: its ``ChainConflict`` rolls
    the whole transaction back anyway, and the savepoint would cost two more round trips."""
    block_ids, slots, eps = (np.asarray(a, dtype=np.int64) for a in (block_ids, slots, eps))
    if eps.size == 0:
        return 0
    outputs = np.asarray(outputs, dtype=np.int64).reshape(eps.size, -1)
    width = attribute.width
    inserts, updates = [], []
    for bid, sel in _by_block(block_ids, slices=True):
        block = blocks[bid]
        block_slots, block_eps = slots[sel], eps[sel]
        grid = _as_grid(block_slots, block_eps)
        if grid is None:  # the block's new rows, all at once: item i goes to out[which[i], block_slots[i]]
            distinct, which = _distinct(block_eps)
            at = (which, block_slots)
            new_outputs = outputs[sel]
        else:  # k slots x the same S epsilons (extension): out[:, slots] takes them as they are, (S, k, width)
            at_slots, distinct = grid
            at = (slice(None), at_slots)
            new_outputs = outputs[sel].reshape(-1, distinct.size, width).swapaxes(0, 1)
        rows = np.array([block.row(int(e)) for e in distinct.tolist()], dtype=np.int64)
        existing = np.flatnonzero(rows >= 0)
        if existing.size:
            if grid is None:
                at_row = rows[which]
                old = at_row >= 0
                stored_again = block.present[at_row[old], block_slots[old]].any()
            else:
                stored_again = block.present[rows[existing]][:, at_slots].any()
            if stored_again:
                raise ChainConflict(f"A chain of block #{bid} already has a point where it is stored again.")
        out = np.full((distinct.size, block.capacity, width), -1, dtype=np.int16)
        present = np.zeros((distinct.size, block.capacity), dtype=bool)
        if existing.size:
            opened = open_rows(attribute, block, rows[existing])
            for k in existing.tolist():
                out[k], present[k] = opened[int(rows[k])], block.present[rows[k]]
        out[at] = new_outputs
        added = np.zeros((distinct.size, block.capacity), dtype=bool)
        added[at] = True
        present |= added
        bits = np.packbits(present, axis=1, bitorder="little")
        for k, e in enumerate(distinct.tolist()):
            row_bits = bits[k].tobytes()
            sealed = sealing.seal_points(out[k], attribute_id=attribute.id, block_id=bid, epsilon=e, present=row_bits)
            if rows[k] >= 0:
                updates.append((row_bits, sealed, int(block.point_ids[rows[k]]), int(block.point_revisions[rows[k]])))
            else:
                inserts.append((bid, e, row_bits, sealed))
        # each slot's highest new point: the last row (ascending epsilons) where it was added
        top = np.where(added.any(axis=0), distinct[distinct.size - 1 - np.argmax(added[::-1], axis=0)], 0)
        if (top > block.heads).any():
            block.heads = np.maximum(block.heads, top)
            block.heads_changed = True
    _write(attribute, inserts, updates, [b for b in blocks.values() if b.heads_changed], savepoint=savepoint)
    return len(inserts) + len(updates)


def _write(attribute: Attribute, inserts: list, updates: list, changed: list[Block], *, savepoint: bool = True) -> None:
    """New rows by ``storage.write_columns`` (one binary COPY per row width on PostgreSQL), then the updated rows
    and heads, each only at the revision read."""
    point, block = ChainPoint._meta.db_table, ChainBlock._meta.db_table
    key_id = sealing.newest_key_id()  # the key ``seal_points`` sealed the rows with (docs/security.md#keys)
    try:
        # a savepoint: a refused write becomes ChainConflict, not a broken transaction (see ``store``)
        with transaction.atomic(savepoint=savepoint):
            widths = sorted({(len(bits), len(sealed)) for _, _, bits, sealed in inserts})
            for width in widths:
                group = [r for r in inserts if (len(r[2]), len(r[3])) == width]
                Col = pgbinary.Column
                storage.write_columns(point, {
                    "block_id": Col.int8([r[0] for r in group]),
                    "attribute_id": Col.int8(np.full(len(group), attribute.id)),
                    "epsilon": Col.int8([r[1] for r in group]),
                    "present": Col(np.frombuffer(b"".join(r[2] for r in group), dtype=np.uint8)
                                   .reshape(len(group), -1)),
                    "sealed": Col(np.frombuffer(b"".join(r[3] for r in group), dtype=np.uint8).reshape(len(group), -1)),
                    "revision": Col.int4(np.zeros(len(group))),
                    "value_key_id": Col.int4(np.full(len(group), key_id))}, len(group))
            with connection.cursor() as cur:
                for bits, sealed, pid, rev in updates:
                    cur.execute(f"UPDATE {point} SET present = %s, sealed = %s, value_key_id = %s, "
                                f"revision = revision + 1 WHERE id = %s AND revision = %s",
                                [bits, sealed, key_id, pid, rev])
                    if cur.rowcount != 1:
                        raise ChainConflict("A chain point changed since it was read; retry.")
                if changed:  # one executemany (pipelined on PostgreSQL); its row count sums every statement's
                    cur.executemany(f"UPDATE {block} SET heads = %s, revision = revision + 1 WHERE id = %s AND "
                                    f"revision = %s", [[b.heads.astype(HEAD).tobytes(), b.id, b.revision]
                                                       for b in changed])
                    if cur.rowcount != len(changed):
                        raise ChainConflict("A chain block changed since it was read; retry.")
                for b in changed:
                    b.revision += 1
                    b.heads_changed = False
    except IntegrityError:
        raise ChainConflict("A chain point was stored by another writer since it was read; retry.") from None


def place(attribute: Attribute, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Slots for ``count`` new values of ``attribute``, in arrival order: the free slots of its last block, then
    new blocks of ``settings.LDP_CHAIN_BLOCK``.  Returns ``(block ids, slots)``; the caller holds the chain lock
    and gives the values these slots in the same transaction."""
    last = ChainBlock.objects.filter(attribute=attribute).order_by("-index").values_list(
        "id", "index", "capacity", "size").first()
    block_ids, slots = [], []
    index = -1
    if last is not None:
        bid, index, capacity, size = last
        take = min(count, capacity - size)
        if take > 0:
            block_ids += [bid] * take
            slots += list(range(size, size + take))
            ChainBlock.objects.filter(id=bid).update(size=size + take)
            count -= take
    capacity = int(settings.LDP_CHAIN_BLOCK)
    new = []
    while count > 0:
        index += 1
        take = min(count, capacity)
        new.append((ChainBlock(attribute=attribute, index=index, capacity=capacity, size=take,
                               heads=np.zeros(capacity, dtype=HEAD).tobytes()), take))
        count -= take
    created = ChainBlock.objects.bulk_create([b for b, _ in new])
    for block, (_, take) in zip(created, new):
        block_ids += [block.id] * take
        slots += list(range(take))
    return np.array(block_ids, dtype=np.int64), np.array(slots, dtype=np.int64)


def chain_of(attribute: Attribute, block_id: int, slot: int) -> tuple[np.ndarray, np.ndarray]:
    """A value's whole chain: its slot across its block's rows, ``(eps (L,) micro, outputs (L, width))``."""
    blocks = read([block_id])
    if block_id not in blocks:
        return np.zeros(0, dtype=np.int64), np.zeros((0, attribute.width), dtype=np.int64)
    block = blocks[block_id]
    rows = np.flatnonzero(block.present[:, slot])
    opened = open_rows(attribute, block, rows)
    out = np.array([opened[r][slot] for r in rows.tolist()], dtype=np.int64).reshape(rows.size, attribute.width)
    return block.eps[rows], out


def lengths_and_heads(block_slots: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[int, int]]:
    """``{(block, slot): (points, head micro-epsilon)}`` for a few values (an owner's dashboard)."""
    blocks = read([b for b, _ in block_slots])
    return {(b, s): (int(blocks[b].present[:, s].sum()), int(blocks[b].heads[s]))
            for b, s in block_slots if b in blocks}


def points_at(attribute: Attribute, blocks: dict[int, Block], block_ids: np.ndarray, slots: np.ndarray,
              eps: np.ndarray) -> np.ndarray:
    """The stored outputs ``(n, width)`` of item i's slot at micro-epsilon ``eps[i]`` (which must be stored: a
    head, say); one AEAD call per distinct (block, epsilon)."""
    eps = np.asarray(eps, dtype=np.int64)
    out = np.zeros((eps.size, attribute.width), dtype=np.int64)
    found = []
    for bid, sel in _by_block(block_ids):
        block = blocks[bid]
        rows = np.searchsorted(block.eps, eps[sel])
        if (rows >= block.eps.size).any() or (block.eps[np.minimum(rows, block.eps.size - 1)] != eps[sel]).any() \
                or not block.present[rows, slots[sel]].all():
            raise ChainConflict(f"A chain of block #{bid} has no point where its head says.")
        found.append((block, sel, rows))
    opened = open_many(attribute, [(block, rows) for block, _, rows in found])
    for block, sel, rows in found:
        for r in np.unique(rows).tolist():
            items = sel[rows == r]
            out[items] = opened[(block.id, r)][slots[items]]
    return out


def epsilons_of(blocks: dict[int, Block], block_ids: np.ndarray, slots: np.ndarray) -> list[np.ndarray]:
    """Each item's stored epsilons (ascending), from the bitmaps alone (nothing opened)."""
    out: list = [None] * len(block_ids)
    for bid, sel in _by_block(block_ids):
        block = blocks[bid]
        for i in sel.tolist():
            out[i] = block.eps[block.present[:, slots[i]]]
    return out


def grid_of_points(attribute: Attribute, blocks: dict[int, Block], block_ids: np.ndarray, slots: np.ndarray,
                   eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each item's outputs at each of ``eps``: ``(present (n, L) bool, outputs (n, L, width), -1 where absent)``;
    opens only the rows at those epsilons."""
    eps = np.asarray(eps, dtype=np.int64)
    n, L = len(block_ids), eps.size
    present = np.zeros((n, L), dtype=bool)
    outputs = np.full((n, L, attribute.width), -1, dtype=np.int64)
    for bid, sel in _by_block(block_ids):
        block = blocks[bid]
        rows = np.array([block.row(int(e)) for e in eps.tolist()], dtype=np.int64)
        opened = open_rows(attribute, block, rows[rows >= 0])
        for j in np.flatnonzero(rows >= 0).tolist():
            hit = block.present[rows[j], slots[sel]]
            present[sel[hit], j] = True
            outputs[sel[hit], j] = opened[int(rows[j])][slots[sel[hit]]]
    return present, outputs
