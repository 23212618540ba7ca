"""The checkpoint log as a C2SP tiled log (c2sp.org/tlog-tiles; docs/receipts.md#the-tiled-log): its tiles and
entry bundles, computed from the stored leaves.

The log's leaves are ``D[i]``, the data of leaf ``i`` (``accounts.ledger.leaves.leaf_data``), hashed as RFC 6962
(``accounts.ledger.merkle``).  Tile ``n`` of level ``l`` is the sequence of Merkle tree hashes

    MTH(D[(256 n + i) 256^l : (256 n + i + 1) 256^l]),   i = 0 .. w - 1,

each 32 bytes, concatenated: at level 0 the leaf hashes, above it the roots of full tiles of the level below
(each such range is a complete, aligned subtree of 256^l leaves, so ``MTH`` of it is the root of the 256 hashes of
the full tile ``256 n + i`` of level ``l - 1``).  A tree of size ``s`` has ``floor(s / 256^l)`` hashes at level
``l``; a tile is full when ``w = 256`` and partial (``1 <= w <= 255``) when it is the rightmost of its level.

Full tiles never change (the log only grows): each is computed once, the first time it is asked for, from the
stored full tiles of the level below (level 0: from 256 leaf rows) and stored (``LedgerTile``); a concurrent
request computing the same tile inserts the same bytes and its insert is ignored.  Partial tiles are computed
on each request from at most 255 stored full tiles (or leaves) and not stored.  The entry bundle ``n`` holds the
data of leaves ``256 n .. 256 n + w - 1``, each prefixed with its length (big-endian uint16).
"""
from __future__ import annotations

import struct
from collections import namedtuple
from collections.abc import Iterator, Sequence

from accounts.ledger import merkle
from accounts.ledger.leaves import leaf_data
from accounts.models import LedgerCheckpointLeaf, LedgerTile

HEIGHT = 8
WIDTH = 1 << HEIGHT
HASH_SIZE = 32
FULL_TILE_BYTES = WIDTH * HASH_SIZE
MAX_LEVEL = 63
#: Full tiles of one level computed per query of the level below (level 0: 256 tiles, 65,536 leaf rows).
BATCH = 256


# -- pure -------------------------------------------------------------------------------------------------------


def hashes_at(level: int, size: int) -> int:
    """How many hashes level ``level`` of the tree of ``size`` leaves has: ``floor(size / 256^level)``."""
    return size >> (HEIGHT * level)


def tile_width(level: int, index: int, size: int) -> int:
    """The width of tile ``index`` of ``level`` in the tree of ``size`` leaves: 256 (full), 1..255 (the rightmost,
    partial) or 0 (the tree does not reach it)."""
    return max(0, min(WIDTH, hashes_at(level, size) - index * WIDTH))


def split_hashes(data: bytes) -> list[bytes]:
    return [data[i:i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]


def tile_root(data: bytes) -> bytes:
    """MTH over a full tile's 256 hashes: the tile's hash at the level above."""
    return merkle.root(split_hashes(data))


def level_hashes(leaf_hashes: Sequence[bytes], level: int) -> list[bytes]:
    """Every hash of level ``level`` of the tree over ``leaf_hashes``: ``MTH`` of each complete run of 256^level
    leaves (pure; the level below's full tiles' roots)."""
    hashes = list(leaf_hashes)
    for _ in range(level):
        hashes = [merkle.root(hashes[i:i + WIDTH]) for i in range(0, len(hashes) - WIDTH + 1, WIDTH)]
    return hashes


def entry_bundle(entries: Sequence[bytes]) -> bytes:
    """Entries, each prefixed with its length as a big-endian uint16 (c2sp.org/tlog-tiles, entry bundles)."""
    out = bytearray()
    for entry in entries:
        if len(entry) > 0xFFFF:
            raise ValueError(f"an entry of {len(entry)} bytes does not fit an entry bundle")
        out += struct.pack(">H", len(entry)) + entry
    return bytes(out)


def _runs(indexes: Sequence[int], longest: int) -> Iterator[tuple[int, int]]:
    """Sorted ``indexes`` as runs ``[a, b)`` of consecutive ones, each at most ``longest`` long."""
    start = prev = None
    for i in indexes:
        if start is not None and i == prev + 1 and i - start < longest:
            prev = i
            continue
        if start is not None:
            yield start, prev + 1
        start = prev = i
    if start is not None:
        yield start, prev + 1


# -- reads (and the stored full tiles) ---------------------------------------------------------------------------


def _leaves(start: int, stop: int) -> list[tuple]:
    """The leaf rows ``start .. stop - 1``, each with every column ``leaf_data`` may read, in one query: plain rows
    (``values_list``), not model instances, which cost 2/3 of a level-0 tile's time; the chunk roots (up to
    kilobytes a row) left unread."""
    columns = [f.attname for f in LedgerCheckpointLeaf._meta.concrete_fields if f.attname != "chunk_roots"]
    row = namedtuple("LeafRow", columns)
    rows = list(map(row._make, LedgerCheckpointLeaf.objects.filter(index__gte=start, index__lt=stop)
                    .order_by("index").values_list(*columns)))
    if len(rows) != stop - start or (rows and (rows[0].index, rows[-1].index) != (start, stop - 1)):
        raise LookupError(f"the checkpoint log lacks leaves in [{start}, {stop})")
    return rows


def leaf_hashes(start: int, stop: int) -> list[bytes]:
    """``SHA-256(0x00 || D[i])`` for ``i = start .. stop - 1``, from those rows only."""
    return [merkle.leaf_hash(leaf_data(leaf)) for leaf in _leaves(start, stop)]


def full_tiles(level: int, lo: int, hi: int) -> list[bytes]:
    """Full tiles ``lo .. hi - 1`` of ``level``: the stored ones, the others computed from the level below (level 0:
    the leaves) and stored.  The caller makes sure a signed checkpoint covers them."""
    stored = dict(LedgerTile.objects.filter(level=level, index__gte=lo, index__lt=hi).values_list("index", "hashes"))
    missing = [i for i in range(lo, hi) if i not in stored]
    for a, b in _runs(missing, BATCH if level == 0 else 1):
        if level == 0:
            hashes = leaf_hashes(a * WIDTH, b * WIDTH)
            made = {a + k: b"".join(hashes[k * WIDTH:(k + 1) * WIDTH]) for k in range(b - a)}
        else:  # one tile at a time: 256 tiles of the level below (2 MiB) in memory
            made = {a: b"".join(tile_root(t) for t in full_tiles(level - 1, a * WIDTH, (a + 1) * WIDTH))}
        LedgerTile.objects.bulk_create([LedgerTile(level=level, index=i, hashes=h) for i, h in made.items()],
                                       ignore_conflicts=True)
        stored.update(made)
    return [bytes(stored[i]) for i in range(lo, hi)]


def store_full_tiles(size: int) -> int:
    """Compute and store every full tile of the tree of ``size`` leaves not stored yet, level by level from the
    leaves up (each level from the stored level below); how many it stored.  Tiles are otherwise computed when
    first asked for; this bounds that first request (e.g. after a checkpoint, off its transaction)."""
    made, level = 0, 0
    while hashes_at(level, size) >= WIDTH:
        count = hashes_at(level, size) // WIDTH
        have = set(LedgerTile.objects.filter(level=level, index__lt=count).values_list("index", flat=True))
        for a, b in _runs([i for i in range(count) if i not in have], BATCH if level == 0 else 1):
            full_tiles(level, a, b)
            made += b - a
        level += 1
    return made


def tile(level: int, index: int, width: int) -> bytes:
    """Tile ``index`` of ``level`` at ``width`` (256: full), assuming the log has the hashes it spans."""
    if width == WIDTH:
        return full_tiles(level, index, index + 1)[0]
    start = index * WIDTH
    if level == 0:
        return b"".join(leaf_hashes(start, start + width))
    return b"".join(tile_root(t) for t in full_tiles(level - 1, start, start + width))


def served_tile(level: int, index: int, width: int, size: int) -> bytes | None:
    """Tile ``index`` of ``level`` at ``width`` if the tree of ``size`` leaves (the latest signed checkpoint's)
    covers it, else ``None``: a partial tile of any width up to the hashes the tree has there, a full tile once
    the tree fills it.  Nothing beyond the signed tree is ever read."""
    if not (0 <= level <= MAX_LEVEL and index >= 0 and 1 <= width <= tile_width(level, index, size)):
        return None
    return tile(level, index, width)


def served_entries(index: int, width: int, size: int) -> bytes | None:
    """The entry bundle of leaves ``256 index .. 256 index + width - 1`` if the tree of ``size`` leaves covers
    them, else ``None``."""
    if not (index >= 0 and 1 <= width <= tile_width(0, index, size)):
        return None
    return entry_bundle([leaf_data(leaf) for leaf in _leaves(index * WIDTH, index * WIDTH + width)])
