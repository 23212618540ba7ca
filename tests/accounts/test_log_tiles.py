"""The checkpoint log as a C2SP tiled log (accounts/ledger/tiles.py, accounts/ledger/log_http.py;
c2sp.org/tlog-tiles, docs/receipts.md#the-tiled-log).

The tiles are checked three ways: the pure definition (``tiles_of`` over a list of leaf hashes) against
``accounts.ledger.merkle.root`` and the client's independent tiling; the stored and computed tiles read from leaf
rows against the pure ones; and through the views, by the client's ``TileReader`` that knows only the log's URL
prefix, its origin and its key, at tree sizes on both sides of every tile boundary up to 600."""
from __future__ import annotations

import gzip
import hashlib
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts.ledger import merkle, signing, tiles
from accounts.ledger.checkpoints import checkpoint_make
from accounts.ledger.leaves import leaf_data, log_leaf_hashes
from accounts.models import LedgerCheckpoint, LedgerCheckpointLeaf, LedgerTile
from accounts.services import budget_set_paused
from ldpmarket import storage
from ldpmarket_client.tlog import tiles as client_tiles
from ldpmarket_client.tlog.tiles import TileError, TileReader, TileTree, tiles_for_size
from tests.factories import CategoricalAttributeFactory, contribute

IMMUTABLE = "public, max-age=31536000, immutable"
PREFIX = "http://testserver/log/"


def tiles_of(leaf_hashes: list[bytes]) -> dict[tuple[int, int], bytes]:
    """Every tile of the tree over ``leaf_hashes`` (full and partial), by ``(level, index)``: the pure
    definition the stored and served tiles are checked against (written here, apart from the client's
    ``tiles_from_leaves``, so that the two implementations check each other)."""
    out: dict[tuple[int, int], bytes] = {}
    hashes, level = list(leaf_hashes), 0
    while hashes:
        for n in range(0, len(hashes), tiles.WIDTH):
            out[level, n // tiles.WIDTH] = b"".join(hashes[n:n + tiles.WIDTH])
        hashes = [merkle.root(hashes[i:i + tiles.WIDTH])
                  for i in range(0, len(hashes) - tiles.WIDTH + 1, tiles.WIDTH)]
        level += 1
    return out


def synthetic(n: int) -> list[bytes]:
    return [hashlib.sha256(b"leaf %d" % i).digest() for i in range(n)]


# -- pure --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 255, 256, 257, 511, 512, 65_536 + 3])
def test_the_pure_tiles_rebuild_the_merkle_root(size):
    leaves = synthetic(size)
    made = tiles_of(leaves)
    assert made == client_tiles.tiles_from_leaves(leaves)  # two implementations
    assert {k: len(v) // 32 for k, v in made.items()} == {(t.level, t.index): t.width for t in tiles_for_size(size)}
    tree = TileTree(size, lambda level, index, width: made[level, index], merkle.root(leaves))
    assert tree.root == merkle.root(leaves)
    top = max(level for level, _ in made)
    assert tiles.level_hashes(leaves, top) == tiles.split_hashes(made[top, 0])


def test_widths_follow_the_specification():
    # a tree of 70,000: 273 full level-0 tiles and one of 112, a full level-1 tile and one of 17, level 2 of 1
    assert [tiles.tile_width(0, n, 70_000) for n in (0, 272, 273, 274)] == [256, 256, 112, 0]
    assert [tiles.tile_width(1, n, 70_000) for n in (0, 1, 2)] == [256, 17, 0]
    assert [tiles.tile_width(2, n, 70_000) for n in (0, 1)] == [1, 0]
    assert tiles.tile_width(3, 0, 70_000) == 0
    assert [tiles.tile_width(0, 0, 256), tiles.tile_width(1, 0, 256), tiles.tile_width(0, 1, 256)] == [256, 1, 0]


def test_an_entry_bundle_is_length_prefixed():
    assert tiles.entry_bundle([b"ab", b"", b"c" * 300]) == b"\x00\x02ab\x00\x00\x01\x2c" + b"c" * 300
    with pytest.raises(ValueError):
        tiles.entry_bundle([bytes(70_000)])


# -- leaf rows ---------------------------------------------------------------------------------------------------


def append_leaves(n: int, *, missing: int | None = None) -> LedgerCheckpoint:
    """``n`` leaves more in the checkpoint log (shard-head leaves, the simplest kind) and a checkpoint of the new
    size, whose signed note the service signs when it is served (``accounts.ledger.notes``).  Checkpoints and
    leaves are append-only (PostgreSQL refuses an update): the root is computed before they are written.
    ``missing``: an index left out (a lost row)."""
    start = LedgerCheckpoint.objects.order_by("-tree_size").values_list("tree_size", flat=True).first() or 0
    size, now = start + n, datetime(2026, 1, 1, tzinfo=UTC)
    leaves = [LedgerCheckpointLeaf(index=i, shard=1 + i % 7, blocks=1 + i // 7,
                                   head_hash=hashlib.sha256(b"head %d" % i).hexdigest()) for i in range(start, size)]
    root = merkle.root(log_leaf_hashes() + [merkle.leaf_hash(leaf_data(leaf)) for leaf in leaves]).hex()
    checkpoint = LedgerCheckpoint.objects.create(created_at=now, tree_size=size, root_hash=root,
                                                 key_id=signing.key_id(),
                                                 signature=signing.sign(signing.statement(size, root, now)))
    for leaf in leaves:
        leaf.checkpoint = checkpoint
    fields = LedgerCheckpointLeaf._meta.concrete_fields  # one COPY on PostgreSQL (bulk_create: 10 s for 65,539)
    storage.insert_rows(LedgerCheckpointLeaf._meta.db_table, [connection.ops.quote_name(f.column) for f in fields],
                        [tuple(getattr(leaf, f.attname) for f in fields) for leaf in leaves if leaf.index != missing])
    return checkpoint


class TestClientSession:
    """Django's test client behind the face of a ``requests.Session`` (what ``TileReader`` calls), gzip undone."""

    __test__ = False

    def __init__(self):
        self.client = Client()

    def get(self, url, headers=None, **kwargs):
        assert url.startswith(PREFIX)
        response = self.client.get(url.removeprefix("http://testserver"),
                                   HTTP_ACCEPT_ENCODING=(headers or {}).get("Accept-Encoding", ""))
        body = response.content
        if response.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return SimpleNamespace(status_code=response.status_code, content=body, headers=response)


def reader() -> TileReader:
    """A reader that knows the log's URL prefix, origin and verifier key, and nothing else of the service."""
    return TileReader(PREFIX, settings.LDP_LOG_ORIGIN, [signing.vkey()], session=TestClientSession())


def test_tiles_from_leaf_rows_are_the_pure_tiles_at_every_size(db):
    """At each size on either side of a tile boundary: every tile (full or partial) computed from the rows is the
    pure one; full tiles are stored once, partial ones never."""
    for size in (1, 2, 255, 256, 257, 511, 512, 513, 600):
        append_leaves(size - LedgerCheckpointLeaf.objects.count())
        want = tiles_of(log_leaf_hashes())
        for t in tiles_for_size(size):
            assert tiles.served_tile(t.level, t.index, t.width, size) == want[t.level, t.index]
            # a partial tile of any smaller width is served too (a prefix); a wider one is not
            assert tiles.served_tile(t.level, t.index, 1, size) == want[t.level, t.index][:32]
            if t.width < 256:
                assert tiles.served_tile(t.level, t.index, t.width + 1, size) is None
        stored = set(LedgerTile.objects.values_list("level", "index"))
        assert stored == {(t.level, t.index) for t in tiles_for_size(size) if t.width == 256}
        last = (size - 1) // 256
        # shard-head leaves are 72 bytes
        assert len(tiles.served_entries(last, size - 256 * last, size)) == (2 + 72) * (size - 256 * last)
        assert tiles.served_tile(0, size // 256 + 1, 1, size) is None


def test_a_stored_full_tile_is_read_not_recomputed(db):
    append_leaves(300)
    first = tiles.served_tile(0, 0, 256, 300)
    row = LedgerTile.objects.get(level=0, index=0)
    assert bytes(row.hashes) == first
    with CaptureQueriesContext(connection) as queries:
        assert tiles.served_tile(0, 0, 256, 300) == first
    assert len(queries) == 1 and "ledger_checkpoint_leaf" not in queries[0]["sql"].lower()
    # a concurrent request that computed the same tile inserts nothing and fails nothing
    LedgerTile.objects.all().delete()
    LedgerTile.objects.create(level=0, index=0, hashes=first)
    assert tiles.full_tiles(0, 0, 1) == [first]
    LedgerTile.objects.bulk_create([LedgerTile(level=0, index=0, hashes=first)], ignore_conflicts=True)
    assert LedgerTile.objects.count() == 1


def test_full_tiles_can_be_stored_ahead_of_requests(db):
    append_leaves(600)
    tiles.served_tile(0, 1, 256, 600)
    assert tiles.store_full_tiles(600) == 1 and tiles.store_full_tiles(600) == 0
    assert sorted(LedgerTile.objects.values_list("level", "index")) == [(0, 0), (0, 1)]
    want = tiles_of(log_leaf_hashes())
    assert all(bytes(t.hashes) == want[t.level, t.index] for t in LedgerTile.objects.all())


def test_a_missing_leaf_is_an_error_not_a_wrong_tile(db):
    append_leaves(300, missing=17)
    with pytest.raises(LookupError, match=r"lacks leaves in \[0, 256\)"):
        tiles.served_tile(0, 0, 256, 300)
    assert not LedgerTile.objects.exists()


def test_a_level_one_tile_from_65539_leaf_rows(db):
    """A full level-1 tile (65,536 leaves) computed from the rows, stored with its 256 level-0 tiles; the
    partial level-2 tile of width 1 is its root: the root of the first 65,536 leaves."""
    size = 65_536 + 3
    append_leaves(size)
    leaves = log_leaf_hashes()
    started = time.perf_counter()
    level1 = tiles.served_tile(1, 0, 256, size)
    cold = time.perf_counter() - started
    assert level1 == tiles_of(leaves)[1, 0]
    assert LedgerTile.objects.filter(level=0).count() == 256
    assert tiles.store_full_tiles(size) == 0  # everything full is stored already
    started = time.perf_counter()
    level2 = tiles.served_tile(2, 0, 1, size)
    warm = time.perf_counter() - started
    assert level2 == merkle.root(leaves[:65_536])
    print(f"\nlevel-1 tile from {size} leaf rows: {cold:.2f} s; the level-2 partial tile after it: {warm * 1e3:.1f} ms")
    tree = TileTree(size, lambda level, index, width: tiles.served_tile(level, index, width, size),
                    merkle.root(leaves))
    assert tree.leaf_hashes(65_530, size) == leaves[65_530:]


# -- through the views -----------------------------------------------------------------------------------------


def test_the_reader_rebuilds_every_size_through_the_views(db):
    """Sizes 1 .. 600 crossing the tile boundaries: the reader verifies the served checkpoint, rebuilds its root
    from the tiles, reads every entry and checks the previous checkpoint is a prefix of the new one; the tiles
    past the checkpoint are 404."""
    log = reader()
    http = Client()
    assert http.get("/log/checkpoint").status_code == 404
    assert http.get("/log/tile/0/000.p/1").status_code == 404
    previous = None
    for size in (1, 2, 255, 256, 257, 300, 511, 512, 513, 600):
        append_leaves(size - LedgerCheckpointLeaf.objects.count())
        checkpoint, note = log.checkpoint()
        assert checkpoint.size == size and checkpoint.root == merkle.root(log_leaf_hashes())
        log.fetched.clear()
        tree = log.tree(checkpoint)
        assert sorted(log.fetched) == sorted(t.path for t in tiles_for_size(size) if t.width != 256)
        rows = LedgerCheckpointLeaf.objects.order_by("index")
        assert log.entries(tree, 0, size) == [leaf_data(leaf) for leaf in rows]
        if previous:
            log.verify_consistency(tree, previous.size, previous.root)
            with pytest.raises(TileError):
                log.verify_consistency(tree, previous.size, bytes(32))
        for i in {0, size // 2, size - 1}:
            assert merkle.verify_inclusion(i, size, merkle.leaf_hash(leaf_data(rows[i])), tree.inclusion_proof(i),
                                           checkpoint.root)
        previous = checkpoint
        # beyond the checkpoint: nothing
        last = size // 256
        for path in (f"tile/0/{last + 1:03d}.p/1", f"tile/entries/{last + 1:03d}.p/1", "tile/2/000.p/1",
                     f"tile/1/000.p/{size // 256 + 1}", f"tile/0/{last:03d}.p/{size % 256 + 1}"):
            assert http.get("/log/" + path).status_code == 404, path
    assert http.get("/log/tile/0/001").status_code == 200 and http.get("/log/tile/0/002").status_code == 404


def test_full_and_partial_tiles_carry_their_headers(db):
    append_leaves(300)
    http = Client()
    for path, length in (("tile/0/000", 8192), ("tile/0/001.p/44", 44 * 32), ("tile/0/001.p/3", 96),
                         ("tile/1/000.p/1", 32)):
        response = http.get("/log/" + path)
        assert response.status_code == 200, path
        assert response["Content-Type"] == "application/octet-stream"
        assert response["Cache-Control"] == IMMUTABLE
        assert len(response.content) == length
        assert "Set-Cookie" not in response and not response.cookies
    full = http.get("/log/tile/entries/000", HTTP_ACCEPT_ENCODING="gzip, identity")
    assert full["Content-Encoding"] == "gzip" and full["Cache-Control"] == IMMUTABLE
    assert client_tiles.parse_entry_bundle(gzip.decompress(full.content), 256)[5] == leaf_data(
        LedgerCheckpointLeaf.objects.get(index=5))
    plain = http.get("/log/tile/entries/001.p/44")
    assert "Content-Encoding" not in plain and len(client_tiles.parse_entry_bundle(plain.content, 44)) == 44
    head = http.head("/log/tile/0/000")
    assert head.status_code == 200 and head["Cache-Control"] == IMMUTABLE
    checkpoint = http.get("/log/checkpoint")
    assert checkpoint["Content-Type"] == "text/plain; charset=utf-8"
    assert checkpoint["Cache-Control"] == "no-cache"
    assert checkpoint.content.startswith(f"{settings.LDP_LOG_ORIGIN}\n300\n".encode())
    assert http.post("/log/tile/0/000").status_code == 405


@pytest.mark.parametrize("path", [
    "tile/00/000", "tile/01/000", "tile/64/000", "tile/0/0", "tile/0/0000", "tile/0/x000/001", "tile/0/x001",
    "tile/0/000.p/0", "tile/0/000.p/256", "tile/0/000.p/01", "tile/0/000.p/", "tile/0/000.p/1/", "tile/0/000/",
    "tile/-1/000", "tile/0/-01", "tile/0/٠٠٠", "tile/٠/000", "tile/0/000.p/١", "tile/entries/000.p/300",
    "tile/entries/x000/000", "tile/entries", "tile/0", "tile/", "tile/x/000",
    "tile/0/x999/x999/x999/x999/x999/x999/x999/999",
    "tile/0/x009/x223/x372/x036/x854/x775/808", "tile/63/x009/x223/x372/x036/x854/x775/807", "tile/0/000.p/1.p/1",
    "checkpoint/", "tile/0/000%00", "tile/0/000.P/1", "tile/0/000.p/1%2F",
])
def test_a_malformed_path_is_a_404(db, path):
    append_leaves(300)
    response = Client().get("/log/" + path)
    assert response.status_code == 404, path


def test_the_views_over_a_real_ledger(db):
    """Blocks written through the services, checkpoints by ``checkpoint_make``: the tiles and bundles served are
    the checkpoint log's, and the reader rebuilds each checkpoint's root."""
    values = contribute(CategoricalAttributeFactory(), ["red", "blue", "green"], ceiling="1")
    log, previous = reader(), None
    for step in range(4):
        made = checkpoint_make()
        checkpoint, _ = log.checkpoint()
        assert (checkpoint.size, checkpoint.root.hex()) == (made.tree_size, made.root_hash)
        tree = log.tree(checkpoint)
        assert log.entries(tree, 0, tree.size) == [leaf_data(leaf) for leaf in
                                                    LedgerCheckpointLeaf.objects.order_by("index")]
        if previous:
            log.verify_consistency(tree, previous.size, previous.root)
        previous = checkpoint
        for value in values:
            budget_set_paused(value_id=value.id, paused=step % 2 == 0)
    assert previous.size > 4


def test_the_audit_recomputes_every_stored_tile(db):
    """A stored full tile changed after it was computed (served to every reader from then on) fails the audit."""
    from audit.report import Recorder
    from audit.witnessing import check_tiles

    append_leaves(300)
    assert tiles.store_full_tiles(300) == 1
    hashes = tiles.leaf_hashes(0, 300)
    rec = Recorder(5)
    check_tiles(rec, hashes)
    assert [(c.checked, c.failures) for c in rec.checks] == [(1, 0)]
    stored = bytes(LedgerTile.objects.get(level=0, index=0).hashes)
    LedgerTile.objects.filter(level=0, index=0).update(hashes=stored[:-1] + bytes([stored[-1] ^ 1]))
    rec = Recorder(5)
    check_tiles(rec, hashes)
    assert rec.checks[0].failures == 1 and "tile 0 of level 0" in rec.checks[0].examples[0]
