"""C2SP tiled logs (c2sp.org/tlog-tiles), the client side: tile paths, and a tree rebuilt from tiles
(docs/receipts.md#the-tiled-log).

Tile ``n`` of level ``l`` holds the hashes ``MTH(D[(256 n + i) 256^l : (256 n + i + 1) 256^l])``, ``i < w``
(RFC 6962 ``MTH``; level 0: the leaf hashes).  A subtree of ``2^k`` leaves at an aligned position, with
``k = 8 l + j`` (``0 <= j < 8``), is the root of ``2^j`` consecutive hashes of one tile of level ``l``; every
node of the RFC 6962 tree of size ``s`` is such a subtree or splits into them, so the root, inclusion proofs and
consistency proofs of any size up to ``s`` come from the tiles of size ``s`` alone.  The root needs only the
rightmost (partial) tile of each level; a full tile is checked by its root, which is a hash of its parent tile.

``TileTree`` is pure: it takes a function returning a tile's bytes.  ``TileReader`` fetches them over HTTP
(``requests``), with the checkpoint, verified by the log's key.  Nothing here imports the service.
"""
from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import merkle
from .checkpoint import Checkpoint, parse_checkpoint
from .note import Note, NoteError, Verifier, open_note, parse_vkey

HEIGHT = 8
WIDTH = 1 << HEIGHT
HASH_SIZE = 32
MAX_LEVEL = 63
#: The largest tile index a path may name (indexes are int64 in the reference implementation).
MAX_INDEX = 2 ** 63 - 1


class TileError(ValueError):
    """A malformed tile path, tile or entry bundle, or tiles that do not hash to the checkpoint's root."""


class FetchError(TileError):
    """A resource the log did not serve (an HTTP status other than 200, or no answer): the log may be down or
    throttling, which is not by itself evidence of misbehaviour."""


# -- paths ------------------------------------------------------------------------------------------------------


def encode_index(n: int) -> str:
    """A tile index as zero-padded 3-digit path elements, all but the last prefixed with ``x``: 1234067 ->
    ``x001/x234/067``."""
    if not 0 <= n <= MAX_INDEX:
        raise TileError(f"tile index {n} out of range")
    parts = [f"{n % 1000:03d}"]
    n //= 1000
    while n:
        parts.append(f"x{n % 1000:03d}")
        n //= 1000
    return "/".join(reversed(parts))


_INDEX = re.compile(r"(?:x[0-9]{3}/)*[0-9]{3}")


def decode_index(text: str) -> int:
    """The index a path's ``<N>`` encodes; only the canonical encoding (no leading ``x000``) is accepted."""
    if not _INDEX.fullmatch(text):
        raise TileError(f"{text!r} is not a tile index")
    n = int(text.replace("x", "").replace("/", ""))
    if n > MAX_INDEX or encode_index(n) != text:
        raise TileError(f"{text!r} is not the canonical encoding of a tile index")
    return n


def _decimal(text: str, lo: int, hi: int, what: str) -> int:
    if not re.fullmatch(r"0|[1-9][0-9]*", text) or not lo <= int(text) <= hi:
        raise TileError(f"{what} {text!r} is not a decimal from {lo} to {hi} without leading zeroes")
    return int(text)


@dataclass(frozen=True)
class Tile:
    """A tile (``level`` 0..63) or, with ``level = None``, an entry bundle; ``width`` 256 when full."""

    level: int | None
    index: int
    width: int = WIDTH

    @property
    def path(self) -> str:
        """Its path below the log's prefix: ``tile/<L>/<N>[.p/<W>]`` or ``tile/entries/<N>[.p/<W>]``."""
        head = "entries" if self.level is None else str(self.level)
        tail = "" if self.width == WIDTH else f".p/{self.width}"
        return f"tile/{head}/{encode_index(self.index)}{tail}"


def tile_path(level: int, index: int, width: int = WIDTH) -> str:
    if not 0 <= level <= MAX_LEVEL or not 1 <= width <= WIDTH:
        raise TileError(f"no tile of level {level} and width {width}")
    return Tile(level, index, width).path


def entries_path(index: int, width: int = WIDTH) -> str:
    if not 1 <= width <= WIDTH:
        raise TileError(f"no entry bundle of width {width}")
    return Tile(None, index, width).path


def parse_tile_path(path: str) -> Tile:
    """The tile a path (below the prefix) names; ``TileError`` for anything but a canonical tile path."""
    m = re.fullmatch(r"tile/(entries|[0-9]+)/((?:x[0-9]{3}/)*[0-9]{3})(?:\.p/([0-9]+))?", path)
    if not m:
        raise TileError(f"{path!r} is not a tile path")
    level = None if m[1] == "entries" else _decimal(m[1], 0, MAX_LEVEL, "the level")
    width = WIDTH if m[3] is None else _decimal(m[3], 1, WIDTH - 1, "the width")
    return Tile(level, decode_index(m[2]), width)


# -- sizes ------------------------------------------------------------------------------------------------------


def hashes_at(level: int, size: int) -> int:
    """How many hashes level ``level`` of a tree of ``size`` leaves has: ``floor(size / 256^level)``."""
    return size >> (HEIGHT * level)


def tile_width(level: int, index: int, size: int) -> int:
    """Tile ``index`` of ``level`` in a tree of ``size``: 256 full, 1..255 partial, 0 absent."""
    return max(0, min(WIDTH, hashes_at(level, size) - index * WIDTH))


def tiles_for_size(size: int) -> list[Tile]:
    """Every tile of a tree of ``size`` leaves, level by level: the full ones, then the partial one if any."""
    out, level = [], 0
    while hashes_at(level, size):
        count = hashes_at(level, size)
        out += [Tile(level, n) for n in range(count // WIDTH)]
        if count % WIDTH:
            out.append(Tile(level, count // WIDTH, count % WIDTH))
        level += 1
    return out


def split_hashes(data: bytes, width: int) -> list[bytes]:
    if len(data) != width * HASH_SIZE:
        raise TileError(f"a tile of width {width} is {width * HASH_SIZE} bytes, not {len(data)}")
    return [data[i:i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]


def parse_entry_bundle(data: bytes, width: int) -> list[bytes]:
    """The ``width`` entries of a bundle (each a big-endian uint16 length, then that many bytes)."""
    entries, at = [], 0
    while at < len(data):
        if at + 2 > len(data):
            raise TileError("an entry bundle ends inside a length")
        (n,) = struct.unpack(">H", data[at:at + 2])
        if at + 2 + n > len(data):
            raise TileError("an entry bundle ends inside an entry")
        entries.append(data[at + 2:at + 2 + n])
        at += 2 + n
    if len(entries) != width:
        raise TileError(f"the entry bundle holds {len(entries)} entries, not {width}")
    return entries


def tiles_from_leaves(leaf_hashes: Sequence[bytes]) -> dict[tuple[int, int], bytes]:
    """Every tile of the tree over ``leaf_hashes`` by ``(level, index)`` (what a log serves; for tests and logs
    kept in memory)."""
    out: dict[tuple[int, int], bytes] = {}
    hashes, level = list(leaf_hashes), 0
    while hashes:
        for n in range(0, len(hashes), WIDTH):
            out[level, n // WIDTH] = b"".join(hashes[n:n + WIDTH])
        hashes = [merkle.root(hashes[i:i + WIDTH]) for i in range(0, len(hashes) - WIDTH + 1, WIDTH)]
        level += 1
    return out


# -- the tree rebuilt from tiles ------------------------------------------------------------------------------


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


#: ``get_tile(level, index, width) -> bytes``: the tile's bytes as served (checked here).
GetTile = Callable[[int, int, int], bytes]


class TileTree:
    """The RFC 6962 tree of ``size`` leaves read from its tiles: the root is rebuilt (and compared with ``root``,
    the checkpoint's, when given) as soon as it is made, from the rightmost tile of each level; every other tile
    read later is checked against its parent tile before any hash of it is used.

    Only the tiles of this size are asked for (a partial tile only at the width ``size`` gives it), as the
    specification requires of clients."""

    def __init__(self, size: int, get_tile: GetTile, root: bytes | None = None):
        if size < 0:
            raise TileError("a tree size is not negative")
        self.size, self._get = size, get_tile
        self._tiles: dict[tuple[int, int], list[bytes]] = {}
        self._trusted: set[tuple[int, int]] = set()
        self._nodes: dict[tuple[int, int], bytes] = {}
        self.root = self._rebuild_root()
        if root is not None and root != self.root:
            raise TileError(f"the tiles hash to {self.root.hex()}, not to the checkpoint's root {root.hex()}")
        self._trusted.update(self._tiles)  # every tile read so far went into the root

    # tiles

    def _read(self, level: int, index: int) -> list[bytes]:
        key = (level, index)
        if key not in self._tiles:
            width = tile_width(level, index, self.size)
            if not width:
                raise TileError(f"the tree of size {self.size} has no tile {level}/{index}")
            self._tiles[key] = split_hashes(self._get(level, index, width), width)
        return self._tiles[key]

    def tile_hashes(self, level: int, index: int) -> list[bytes]:
        """The hashes of tile ``index`` of ``level`` at this size, checked: a full tile's root is its hash in
        the tile above (itself checked); the rightmost tiles went into the root."""
        key = (level, index)
        hashes = self._read(level, index)
        if key not in self._trusted:
            if len(hashes) != WIDTH:  # only the rightmost tiles are partial, and the root read them all
                raise TileError(f"tile {level}/{index} is partial but not the rightmost")
            parent = self.tile_hashes(level + 1, index // WIDTH)
            if merkle.root(hashes) != parent[index % WIDTH]:
                raise TileError(f"tile {level}/{index} does not hash to its entry in tile {level + 1}/"
                                f"{index // WIDTH}")
            self._trusted.add(key)
        return hashes

    # nodes

    def node(self, k: int, i: int, *, trusted: bool = True) -> bytes:
        """The hash of the complete subtree of ``2^k`` leaves starting at leaf ``i * 2^k`` (within the tree):
        the root of ``2^j`` hashes, ``k = 8 l + j``, of one tile of level ``l``."""
        if (i + 1) << k > self.size:
            raise TileError(f"the subtree {k}/{i} reaches beyond the tree of size {self.size}")
        key = (k, i)
        if key not in self._nodes:
            level, j = divmod(k, HEIGHT)
            first = i << j
            hashes = (self.tile_hashes if trusted else self._read)(level, first // WIDTH)
            self._nodes[key] = merkle.root(hashes[first % WIDTH:first % WIDTH + (1 << j)])
        return self._nodes[key]

    def mth(self, lo: int, hi: int, *, trusted: bool = True) -> bytes:
        """``MTH(D[lo:hi])`` for a node of an RFC 6962 tree within the tree: an aligned complete subtree, or one
        whose start is aligned to the largest power of two below its length (the right edges of smaller trees)."""
        n = hi - lo
        if n <= 0 or hi > self.size:
            raise TileError(f"no tree over [{lo}, {hi}) in a tree of size {self.size}")
        if n & (n - 1) == 0 and lo % n == 0:
            return self.node(n.bit_length() - 1, lo // n, trusted=trusted)
        k = _split(n)
        if lo % k:
            raise TileError(f"[{lo}, {hi}) is not a node of an RFC 6962 tree")
        return merkle.node_hash(self.mth(lo, lo + k, trusted=trusted), self.mth(lo + k, hi, trusted=trusted))

    def _rebuild_root(self) -> bytes:
        return merkle.EMPTY_ROOT if self.size == 0 else self.mth(0, self.size, trusted=False)

    def root_at(self, size: int) -> bytes:
        """The root of the tree of the first ``size`` leaves (``size <= self.size``)."""
        if not 0 <= size <= self.size:
            raise TileError(f"size {size} is outside 0..{self.size}")
        return merkle.EMPTY_ROOT if size == 0 else self.mth(0, size)

    # leaves and proofs

    def leaf_hashes(self, start: int, stop: int) -> list[bytes]:
        """The leaf hashes of ``[start, stop)``, from checked level-0 tiles."""
        if not 0 <= start <= stop <= self.size:
            raise TileError(f"[{start}, {stop}) is outside the tree of size {self.size}")
        out = []
        for t in range(start // WIDTH, (stop + WIDTH - 1) // WIDTH):
            hashes = self.tile_hashes(0, t)
            out += hashes[max(start - t * WIDTH, 0):min(stop - t * WIDTH, len(hashes))]
        return out

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 6962 ``PATH(index, D[0:size])`` (default: this tree's size)."""
        size = self.size if size is None else size
        if not 0 <= index < size <= self.size:
            raise TileError(f"leaf {index} is not in a tree of size {size} (at most {self.size})")
        return self._path(index, 0, size)

    def _path(self, m: int, lo: int, hi: int) -> list[bytes]:
        if hi - lo == 1:
            return []
        k = _split(hi - lo)
        if m < lo + k:
            return self._path(m, lo, lo + k) + [self.mth(lo + k, hi)]
        return self._path(m, lo + k, hi) + [self.mth(lo, lo + k)]

    def consistency_proof(self, m: int, n: int | None = None) -> list[bytes]:
        """RFC 6962 ``PROOF(m, D[0:n])``: the tree of size ``m`` is a prefix of the one of size ``n`` (default:
        this tree's size)."""
        n = self.size if n is None else n
        if not 0 < m <= n <= self.size:
            raise TileError(f"a consistency proof needs 0 < m <= n <= {self.size}, got m = {m}, n = {n}")
        return self._subproof(m, 0, n, True)

    def _subproof(self, m: int, lo: int, hi: int, complete: bool) -> list[bytes]:
        if m == hi - lo:
            return [] if complete else [self.mth(lo, hi)]
        k = _split(hi - lo)
        if m <= k:
            return self._subproof(m, lo, lo + k, complete) + [self.mth(lo + k, hi)]
        return self._subproof(m - k, lo + k, hi, False) + [self.mth(lo, lo + k)]


def verify_entries(tree: TileTree, index: int, entries: Sequence[bytes]) -> None:
    """Check that ``entries`` are the leaves ``index ..`` of ``tree`` (each hashes to its level-0 tile hash)."""
    for i, (entry, expected) in enumerate(zip(entries, tree.leaf_hashes(index, index + len(entries)))):
        if merkle.leaf_hash(entry) != expected:
            raise TileError(f"entry {index + i} does not hash to its leaf hash in the tiles")


# -- over HTTP --------------------------------------------------------------------------------------------------


class TileReader:
    """A tiled log at ``prefix`` (its URL, e.g. ``https://market.example.org/log/``) whose checkpoints have the
    origin ``origin`` and are signed by ``vkeys`` (verifier keys; witnesses' cosignatures are ignored here: use
    ``policy.Policy.verify_checkpoint`` for a quorum).

    ``checkpoint()`` fetches and verifies ``<prefix>/checkpoint``; ``tree()`` rebuilds its root from the tiles;
    ``entries(a, b)`` the entries ``[a, b)`` checked against the tiles; ``verify_consistency(m, old_root)`` that an
    older checkpoint is a prefix of the latest.  ``session`` is a ``requests.Session`` (or anything with its
    ``get``)."""

    def __init__(self, prefix: str, origin: str, vkeys: Sequence[str | Verifier], *, session=None,
                 timeout: float = 30):
        if session is None:
            import requests  # the pure parts of this module need no HTTP library

            session = requests.Session()
        self.prefix = prefix if prefix.endswith("/") else prefix + "/"
        self.origin = origin
        self.verifiers = [parse_vkey(k) if isinstance(k, str) else k for k in vkeys]
        self.session, self.timeout = session, timeout
        self.fetched: list[str] = []  # the paths fetched, in order

    def get(self, path: str) -> bytes:
        self.fetched.append(path)
        try:
            response = self.session.get(self.prefix + path, timeout=self.timeout,
                                        headers={"Accept-Encoding": "gzip, identity"})
        except OSError as exc:  # requests' ConnectionError and Timeout are OSErrors
            raise FetchError(f"{self.prefix}{path}: no answer ({exc})") from None
        if response.status_code != 200:
            raise FetchError(f"{self.prefix}{path}: HTTP {response.status_code}")
        return response.content

    def checkpoint(self) -> tuple[Checkpoint, Note]:
        """The latest checkpoint, verified: signed by one of the keys, of this origin."""
        note = open_note(self.get("checkpoint"), self.verifiers)
        checkpoint = parse_checkpoint(note.text)
        if checkpoint.origin != self.origin:
            raise NoteError(f"the checkpoint is of {checkpoint.origin!r}, not of {self.origin!r}")
        return checkpoint, note

    def _tile(self, level: int, index: int, width: int) -> bytes:
        return self.get(tile_path(level, index, width))

    def tree(self, checkpoint: Checkpoint | None = None) -> TileTree:
        """The tree of ``checkpoint`` (default: the latest, fetched and verified) from the tiles; its root is
        checked."""
        checkpoint = checkpoint or self.checkpoint()[0]
        return TileTree(checkpoint.size, self._tile, checkpoint.root)

    def entries(self, tree: TileTree, start: int, stop: int) -> list[bytes]:
        """The entries ``[start, stop)`` of ``tree`` from the entry bundles, each checked against its leaf hash."""
        if not 0 <= start <= stop <= tree.size:
            raise TileError(f"[{start}, {stop}) is outside the tree of size {tree.size}")
        out = []
        for t in range(start // WIDTH, (stop + WIDTH - 1) // WIDTH):
            width = tile_width(0, t, tree.size)
            bundle = parse_entry_bundle(self.get(entries_path(t, width)), width)
            lo, hi = max(start - t * WIDTH, 0), min(stop - t * WIDTH, width)
            verify_entries(tree, t * WIDTH + lo, bundle[lo:hi])
            out += bundle[lo:hi]
        return out

    def verify_consistency(self, tree: TileTree, old_size: int, old_root: bytes) -> list[bytes]:
        """Check that the tree of ``old_size`` leaves with ``old_root`` is a prefix of ``tree``: the consistency
        proof built from the tiles, verified as RFC 9162 does.  Returns the proof; ``TileError`` if it fails."""
        if old_size == 0:
            return []
        proof = tree.consistency_proof(old_size)
        if not merkle.verify_consistency(old_size, tree.size, old_root, tree.root, proof):
            raise TileError(f"the tree of size {old_size} with root {old_root.hex()} is not a prefix of the tree "
                            f"of size {tree.size}")
        return proof
