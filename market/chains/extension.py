"""Chain extension: growing every chain of an attribute whose ceiling passed its next grid point
(docs/architecture.md#the-path-of-a-chain-extension), a batch of whole blocks per transaction, under the attribute's
chain lock (``market.chains.store.lock``), reading the next batch ahead on PostgreSQL.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
from django.conf import settings
from django.db import connections, transaction

from accounts.epsilon import to_micro
from ldpmarket import storage
from market.chains import grow as chains
from market.chains import pgcopy
from market.chains import store as chainstore
from market.models import Attribute, ChainBlock, Value
from market.values import inputs as domain
from market.values import sealing


def chains_extend(*, attribute_id: int, value_ids=None, batch_size: int | None = None, rng=None) -> int:
    """Grow every chain of the attribute whose ceiling passed its next grid point; returns values extended.

    Batches of about ``batch_size`` values (whole blocks, in block order), each its own transaction under the
    attribute's chain lock (``chainstore.lock``, docs/architecture.md#chains-in-blocks): the values that hold
    their input are read with their ceilings, each slot's head point is opened, ``chains.grow`` advances them
    (one ``relax`` call per grid step) and ``chainstore.store`` writes one sealed row per block and grid step.
    Memory stays flat in the number of values.  Idempotent: a second run finds nothing to do.  A worker killed
    mid-batch leaves that batch untouched (rolled back), and the batches before it committed: the sweeper
    (``market.sweeper``) sends the extension again and it grows what is left.  While it runs it holds the
    attribute's extension lock (``_extension_running``), which tells the sweeper it is not stranded.
    ``value_ids`` limits it to those values (an owner who raised a ceiling).
    """
    attribute = Attribute.objects.get(id=attribute_id)
    with _extension_running(attribute.id):
        return _extend(attribute, value_ids, batch_size, rng)


#: First key of the advisory locks that mark a running extension (the second is the attribute id).
EXTENSION_LOCK = 0x4C445045  # "LDPE"


def extension_lock_key(attribute_id: int) -> tuple[int, int]:
    return EXTENSION_LOCK, int(attribute_id) % (2 ** 31)


@contextmanager
def _extension_running(attribute_id: int):
    """Mark an extension of the attribute as running, for the sweeper (``market.sweeper``), on PostgreSQL: a
    shared advisory lock (extensions still run side by side), held by the session, so a killed worker's lock
    ends with its session; inside a transaction, until it ends."""
    with storage.advisory_lock_shared(*extension_lock_key(attribute_id)):
        yield


def _extend(attribute: Attribute, value_ids, batch_size: int | None, rng) -> int:
    if attribute.is_oneshot:
        return 0
    batch_size = batch_size or settings.LDP_EXTENSION_BATCH
    grid = chains.Grid.of(attribute)
    if value_ids is None:
        blocks = list(ChainBlock.objects.filter(attribute=attribute).order_by("id").values_list("id", flat=True))
    else:
        blocks = sorted(set(Value.objects.filter(attribute=attribute, block__isnull=False, id__in=list(value_ids))
                            .values_list("block_id", flat=True)))
    per_batch = max(1, batch_size // max(1, int(settings.LDP_CHAIN_BLOCK)))
    batches = _batches(blocks, per_batch, _reads_ahead(len(blocks) > per_batch))
    extended = 0
    with _read_ahead(attribute, batches, value_ids) as rows_of:
        for k, batch in enumerate(batches):
            with transaction.atomic():
                extended += _extend_batch(attribute, grid, batch, rng, value_ids, rows=rows_of(k))
    return extended


#: Reading ahead, each batch is at most this many times the one before (up to ``per_batch`` blocks).
RAMP = 1.5


def _batches(blocks: list, per_batch: int, reads_ahead: bool) -> list[list]:
    """The blocks in batches of ``per_batch`` (at least one batch, maybe empty).  Reading ahead (``_read_ahead``),
    the first batch is a quarter of the others -- its read is the one nothing hides -- and each next one at most
    ``RAMP`` times the one before: batch k + 1 is read while batch k grows and stores its chains, and reading a
    block takes the database about as long as growing and storing it here (benchmarks/e2_extension, 2 cores: a
    batch twice as large as the one before was waited for)."""
    if not reads_ahead:
        return [blocks[k:k + per_batch] for k in range(0, len(blocks), per_batch)] or [[]]
    batches, start, size = [], 0, max(1, per_batch // 4)
    while start < len(blocks) or not batches:
        batches.append(blocks[start:start + size])
        start += size
        size = min(per_batch, max(size + 1, int(size * RAMP)))
    return batches


@contextmanager
def _read_ahead(attribute: Attribute, batches: list[list[int]], value_ids):
    """``rows_of(k)``: batch ``k``'s ``extension_rows``, read while batch ``k - 1`` grows and stores its chains.

    On PostgreSQL, outside a transaction (the Celery task), a thread with its own connection reads each next
    batch's values, ceilings and sealed inputs ahead: the database reads them on the other core while this one
    relaxes and seals, so reading no longer adds to the task's time (benchmarks/e2_extension).  What it reads is
    what the batch would read a moment later: the chains themselves (heads, points) are still read by the batch
    under the attribute's chain lock; a ceiling changed or a raw value deleted meanwhile is seen by the next
    extension, as when the change commits while a batch runs.  Elsewhere (SQLite, inside a caller's
    transaction, one batch) ``rows_of`` answers ``None`` and each batch reads its own rows."""
    if not _reads_ahead(len(batches) > 1):
        yield lambda k: None
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="extension-read-ahead")
    pending: dict[int, Future] = {}
    closing: list[Future] = []

    def close_after_reads() -> None:
        """Close the reading thread's own connection, in that thread, after the reads queued before (the last
        batch's: then it closes while the last batch grows, not after it)."""
        if not closing:
            closing.append(pool.submit(connections.close_all))

    def rows_of(k: int):
        if k + 1 < len(batches):
            pending[k + 1] = pool.submit(extension_rows, attribute, batches[k + 1], value_ids)
            if k + 2 == len(batches):
                close_after_reads()
        # The first batch reads its own rows: nothing runs before it to hide a read (or the thread's connecting).
        return _ready(pending.pop(k)) if k else None

    try:
        yield rows_of
    finally:
        for future in pending.values():
            future.cancel()
        close_after_reads()
        pool.shutdown(wait=True)
        closing[0].result()


def _reads_ahead(several_batches: bool) -> bool:
    """Whether extension reads ahead: several batches, on PostgreSQL, outside a caller's transaction."""
    return several_batches and pgcopy.enabled() and not transaction.get_connection().in_atomic_block


def _ready(future: Future):
    """A read-ahead's rows, once read (the wait, if any, is the time reading did not hide)."""
    return future.result()


def _extend_batch(attribute: Attribute, grid: chains.Grid, block_ids: list[int], rng, value_ids=None,
                  rows: dict[str, np.ndarray] | None = None) -> int:
    """Lock the attribute's chains, read (unless ``rows`` were read ahead), grow and store one batch of blocks (the
    caller's transaction)."""
    chainstore.lock(attribute.id)
    if rows is None:
        rows = extension_rows(attribute, block_ids, value_ids)
    if rows["value_id"].size == 0:
        return 0
    blocks = chainstore.read(block_ids)
    block_of, slot = rows["block_id"], rows["slot"]
    head = chainstore.heads_of(blocks, block_of, slot)
    target = grid.last_point_upto(rows["ceiling"])
    grow = np.flatnonzero((head > 0) & (head < target))
    if grow.size == 0:
        return 0
    block_of, slot, head, target = block_of[grow], slot[grow], head[grow], target[grow]
    payload = sealing.open_inputs(rows["sealed"][grow], rows["owner_id"][grow], np.full(grow.size, attribute.id),
                                  domain.payload_bytes(attribute), rows["key_id"][grow])
    inputs = domain.from_payload(attribute, payload)
    last = chainstore.points_at(attribute, blocks, block_of, slot, head)
    growth = chains.grow(inputs, head, last, target, grid, attribute.domain_size, rng, attribute.draw_divisor)
    # (no savepoint: the batch is its own transaction, which a refused write rolls back whole)
    chainstore.store(attribute, blocks, *_new_points(growth, block_of, slot), savepoint=False)
    return int((growth.count > 0).sum())


def _new_points(growth: chains.Growth, block_of: np.ndarray, slot: np.ndarray):
    """The new points of ``growth`` as ``chainstore.store`` takes them, in (block, slot, epsilon) order: blocks,
    slots, epsilons, outputs (n, width).  When every value grew by as many steps (the usual batch), views of the
    growth's arrays, not masked copies."""
    n, steps = growth.eps.shape
    if steps and (growth.count == steps).all():
        return (np.repeat(block_of, steps), np.repeat(slot, steps), growth.eps.reshape(-1),
                growth.out.reshape(n * steps, -1))
    new = np.arange(steps)[None, :] < growth.count[:, None]
    item = np.nonzero(new)[0]
    return block_of[item], slot[item], growth.eps[new], growth.out[new]


def extension_rows(attribute: Attribute, block_ids: list[int], value_ids=None) -> dict[str, np.ndarray]:
    """The values of ``block_ids`` that hold their input, in (block, slot) order: value id, owner id, block,
    slot, ceiling (micro-epsilons) and sealed input, as numpy columns (``pgcopy.extension_rows`` on
    PostgreSQL: one binary COPY)."""
    if pgcopy.enabled():
        return pgcopy.extension_rows(attribute, block_ids, value_ids)
    qs = Value.objects.filter(attribute=attribute, block_id__in=block_ids, input_sealed__isnull=False)
    if value_ids is not None:
        qs = qs.filter(id__in=list(value_ids))
    got = list(qs.order_by("block_id", "slot").values_list("id", "owner_id", "block_id", "slot", "budget__ceiling",
                                                            "input_sealed", "value_key_id"))
    n = len(got)
    col = lambda k: np.fromiter((r[k] for r in got), dtype=np.int64, count=n)  # noqa: E731
    return {"value_id": col(0), "owner_id": col(1), "block_id": col(2), "slot": col(3), "key_id": col(6),
            "ceiling": np.fromiter((to_micro(r[4]) for r in got), dtype=np.int64, count=n),
            "sealed": np.frombuffer(b"".join(bytes(r[5]) for r in got), dtype=np.uint8).reshape(
                n, sealing.blocks_for(domain.payload_bytes(attribute)) * 16)}
