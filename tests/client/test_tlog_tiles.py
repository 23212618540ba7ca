"""The client's tiled-log reader (client/ldpmarket_client/tlog/tiles.py; c2sp.org/tlog-tiles,
docs/receipts.md#the-tiled-log): tile paths as the specification writes them, the tree rebuilt from tiles (root,
leaves, inclusion and consistency proofs) against ``accounts.ledger.merkle`` computed from the leaves, tampered
tiles refused, and, against a live server, a reader that knows only the log's URL, origin and key."""
from __future__ import annotations

import hashlib

import pytest

from accounts.ledger import merkle as service_merkle
from ldpmarket_client.tlog import merkle
from ldpmarket_client.tlog.checkpoint import format_checkpoint
from ldpmarket_client.tlog.note import NoteError, Signer, sign_note
from ldpmarket_client.tlog.tiles import (
    Tile,
    TileError,
    TileReader,
    TileTree,
    decode_index,
    encode_index,
    entries_path,
    parse_entry_bundle,
    parse_tile_path,
    tile_path,
    tiles_for_size,
    tiles_from_leaves,
)

SIZES = [1, 2, 3, 255, 256, 257, 511, 512, 513, 65_536, 65_536 + 3]


def synthetic_leaves(n: int) -> list[bytes]:
    return [hashlib.sha256(b"leaf %d" % i).digest() for i in range(n)]


@pytest.fixture(scope="module")
def big():
    return synthetic_leaves(65_536 + 300)


def tree_of(leaves, size=None, *, tiles=None, seen=None):
    size = len(leaves) if size is None else size
    tiles = tiles or tiles_from_leaves(leaves[:size])

    def get(level, index, width):
        if seen is not None:
            seen.append(tile_path(level, index, width))
        return tiles[level, index][:32 * width]

    return TileTree(size, get)


# -- paths --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, text", [(0, "000"), (5, "005"), (999, "999"), (1000, "x001/000"), (1234067,
                                     "x001/x234/067"), (2 ** 63 - 1, "x009/x223/x372/x036/x854/x775/807")])
def test_tile_indexes_are_encoded_as_the_specification_writes_them(n, text):
    assert encode_index(n) == text and decode_index(text) == n


@pytest.mark.parametrize("text", ["0", "0000", "x000/001", "x001", "001/x002", "x001/02", "x1/000", "٠٠٠", "",
                                  "x009/x223/x372/x036/x854/x775/808"])
def test_only_canonical_indexes_decode(text):
    with pytest.raises(TileError):
        decode_index(text)


def test_tile_paths_round_trip():
    assert tile_path(0, 1234067) == "tile/0/x001/x234/067"
    assert tile_path(2, 0, 1) == "tile/2/000.p/1"
    assert entries_path(273, 112) == "tile/entries/273.p/112"
    for path in ("tile/0/x001/x234/067", "tile/63/000.p/255", "tile/entries/001", "tile/entries/001.p/7"):
        assert parse_tile_path(path).path == path
    assert parse_tile_path("tile/entries/001.p/7") == Tile(None, 1, 7)
    for bad in ("tile/00/000", "tile/64/000", "tile/0/000.p/0", "tile/0/000.p/256", "tile/0/000.p/01",
                "tile/0/x000/001", "tile/x/000", "tile/0/000/", "tiles/0/000"):
        with pytest.raises(TileError):
            parse_tile_path(bad)


def test_the_tiles_of_a_tree_of_70000_and_of_256_are_the_specifications():
    tiles = tiles_for_size(70_000)
    assert [t for t in tiles if t.level == 0 and t.width == 256] == [Tile(0, n) for n in range(273)]
    assert [t for t in tiles if t.width != 256] == [Tile(0, 273, 112), Tile(1, 1, 17), Tile(2, 0, 1)]
    assert [t for t in tiles if t.level == 1 and t.width == 256] == [Tile(1, 0)]
    assert len(tiles) == 273 + 1 + 1 + 1 + 1
    assert tiles_for_size(256) == [Tile(0, 0), Tile(1, 0, 1)]
    assert tiles_for_size(0) == []


# -- the tree from tiles (pure) ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_the_root_rebuilt_from_tiles_is_the_merkle_root(big, size):
    leaves = big[:size]
    tiles = tiles_from_leaves(leaves)
    assert {k: len(v) // 32 for k, v in tiles.items()} == {(t.level, t.index): t.width for t in tiles_for_size(size)}
    seen = []
    tree = tree_of(leaves, tiles=tiles, seen=seen)
    assert tree.root == service_merkle.root(leaves) == merkle.root(leaves)
    # the root needs the rightmost (partial) tile of each level and nothing else
    assert sorted(seen) == sorted(t.path for t in tiles_for_size(size) if t.width != 256)


@pytest.mark.parametrize("size", [1, 255, 256, 257, 511, 512, 65_536 + 3])
def test_each_tile_hash_is_the_mth_of_its_range(big, size):
    """``MTH(D[(256 n + i) 256^l : (256 n + i + 1) 256^l])`` (the specification's definition), checked on every
    tile of the small trees and on the level-1 and level-2 tiles of the large one."""
    leaves = big[:size]
    for (level, n), data in tiles_from_leaves(leaves).items():
        if size > 600 and level == 0 and n not in (0, 255, 256):
            continue
        span = 256 ** level
        for i in range(len(data) // 32):
            lo = (n * 256 + i) * span
            assert data[32 * i:32 * i + 32] == service_merkle.root(leaves[lo:lo + span])


def test_leaves_and_proofs_from_tiles_are_the_services(big):
    leaves = big[:65_536 + 300]
    tree = tree_of(leaves)
    assert tree.leaf_hashes(65_530, 65_540) == leaves[65_530:65_540]
    assert tree.leaf_hashes(0, 3) == leaves[:3]
    for m in (1, 2, 255, 256, 257, 1000, 65_535, 65_536, 65_537, 65_836):
        assert tree.root_at(m) == service_merkle.root(leaves[:m])
    small = leaves[:1000]
    for m in (1, 3, 255, 256, 257, 511, 512, 999, 1000):
        assert tree.consistency_proof(m, 1000) == service_merkle.consistency_proof(m, small)
        assert merkle.verify_consistency(m, 1000, service_merkle.root(small[:m]), service_merkle.root(small),
                                         tree.consistency_proof(m, 1000))
    for i in (0, 1, 255, 256, 500, 999):
        proof = tree.inclusion_proof(i, 1000)
        assert proof == service_merkle.inclusion_proof(i, small)
        assert merkle.verify_inclusion(i, 1000, leaves[i], proof, service_merkle.root(small))
    proof = tree.inclusion_proof(65_600)
    assert merkle.verify_inclusion(65_600, tree.size, leaves[65_600], proof, tree.root)
    proof = tree.consistency_proof(70)
    assert merkle.verify_consistency(70, tree.size, service_merkle.root(leaves[:70]), tree.root, proof)


def test_a_tampered_tile_is_refused(big):
    leaves = big  # 65,836: level 0 ends with a partial tile, level 1 with tile 1 of width 1
    tiles = tiles_from_leaves(leaves)
    size = len(leaves)
    root = service_merkle.root(leaves)
    assert tree_of(leaves, tiles=tiles).root == root
    # a partial tile goes into the root: the tree does not match the checkpoint's
    bad = dict(tiles)
    bad[1, 1] = bytes(32)
    with pytest.raises(TileError, match="not to the checkpoint's root"):
        TileTree(size, lambda lv, i, w: bad[lv, i], root)
    # a full tile is checked against its parent before it is used
    bad = dict(tiles)
    bad[0, 3] = tiles[0, 3][:-1] + bytes([tiles[0, 3][-1] ^ 1])
    tree = TileTree(size, lambda lv, i, w: bad[lv, i], root)
    with pytest.raises(TileError, match="does not hash to its entry"):
        tree.leaf_hashes(3 * 256, 3 * 256 + 1)
    bad = dict(tiles)
    bad[1, 0] = tiles[1, 0][32:] + tiles[1, 0][:32]
    tree = TileTree(size, lambda lv, i, w: bad[lv, i], root)
    with pytest.raises(TileError, match="tile 1/0 does not hash"):
        tree.leaf_hashes(0, 1)
    # a tile of the wrong length
    with pytest.raises(TileError, match=r"a tile of width \d+ is \d+ bytes, not"):
        TileTree(size, lambda lv, i, w: tiles[lv, i] + bytes(32), root)


def test_entry_bundles_parse():
    assert parse_entry_bundle(b"\x00\x01a\x00\x00\x00\x02bc", 3) == [b"a", b"", b"bc"]
    for data, width in ((b"\x00\x01a", 2), (b"\x00\x02a", 1), (b"\x00", 1), (b"\x00\x01ab", 1)):
        with pytest.raises(TileError):
            parse_entry_bundle(data, width)


# -- over HTTP ----------------------------------------------------------------------------------------------------


class FakeLog:
    """A log served from memory by a requests-like session: its tiles, bundles and signed checkpoint."""

    def __init__(self, entries, signer, origin="example.test/log"):
        self.tiles = tiles_from_leaves([merkle.leaf_hash(e) for e in entries])
        self.entries, self.size = entries, len(entries)
        root = merkle.root([merkle.leaf_hash(e) for e in entries])
        self.note = sign_note(format_checkpoint(origin, self.size, root), [signer])

    def get(self, url, **kwargs):
        from types import SimpleNamespace

        path = url.removeprefix("https://example.test/log/")
        if path == "checkpoint":
            return SimpleNamespace(status_code=200, content=self.note)
        tile = parse_tile_path(path)
        if tile.level is None:
            chunk = self.entries[tile.index * 256:tile.index * 256 + tile.width]
            body = b"".join(len(e).to_bytes(2, "big") + e for e in chunk)
        else:
            body = self.tiles[tile.level, tile.index][:32 * tile.width]
        return SimpleNamespace(status_code=200, content=body)


def test_a_reader_verifies_the_checkpoint_and_reads_entries():
    signer = Signer.generate("example.test/log")
    entries = [b"entry %d" % i for i in range(600)]
    log = FakeLog(entries, signer)
    reader = TileReader("https://example.test/log", "example.test/log", [signer.verifier.vkey], session=log)
    checkpoint, _ = reader.checkpoint()
    tree = reader.tree(checkpoint)
    assert tree.root == checkpoint.root and checkpoint.size == 600
    assert reader.entries(tree, 250, 520) == entries[250:520]
    assert reader.entries(tree, 0, 600) == entries
    old = merkle.root([merkle.leaf_hash(e) for e in entries[:300]])
    assert reader.verify_consistency(tree, 300, old)
    with pytest.raises(TileError, match="not a prefix"):
        reader.verify_consistency(tree, 300, bytes(32))
    # another key, another origin
    with pytest.raises(NoteError):
        TileReader("https://example.test/log/", "example.test/log",
                   [Signer.generate("example.test/log").verifier.vkey], session=log).checkpoint()
    with pytest.raises(NoteError, match="not of 'other.test/log'"):
        TileReader("https://example.test/log/", "other.test/log", [signer.verifier.vkey], session=log).checkpoint()
    # an entry that is not the leaf's
    log.entries = entries[:255] + [b"forged"] + entries[256:]
    with pytest.raises(TileError, match="entry 255 does not hash"):
        reader.entries(tree, 250, 260)


# -- against the service ---------------------------------------------------------------------------------------


def test_a_reader_that_knows_only_the_logs_url_origin_and_key_follows_the_live_log(live_server, transactional_db):
    """The service's /log/ over a live server: blocks written through the services, checkpoints made by
    ``checkpoint_make``; at each checkpoint the reader rebuilds the root from the tiles, reads every entry (each a
    block leaf of docs/receipts.md) and checks the previous checkpoint is a prefix of the new one."""
    import requests
    from django.conf import settings

    from accounts.ledger import signing
    from accounts.ledger.checkpoints import checkpoint_make
    from accounts.ledger.leaves import leaf_data
    from accounts.models import LedgerCheckpointLeaf
    from accounts.services import budget_set_paused
    from tests.factories import CategoricalAttributeFactory, contribute

    origin, vkey = settings.LDP_LOG_ORIGIN, signing.vkey()
    session = requests.Session()
    try:
        reader = TileReader(live_server.url + "/log/", origin, [vkey], session=session)
        assert session.get(live_server.url + "/log/checkpoint").status_code == 404
        values = contribute(CategoricalAttributeFactory(), ["red", "blue", "green"], ceiling="1")
        previous = None
        for step in range(3):
            checkpoint_make()
            checkpoint, _ = reader.checkpoint()
            tree = reader.tree(checkpoint)
            assert tree.root == checkpoint.root
            entries = reader.entries(tree, 0, tree.size)
            rows = LedgerCheckpointLeaf.objects.order_by("index")[:tree.size]
            assert entries == [leaf_data(leaf) for leaf in rows]
            assert all(e.startswith(b"ldpmarket-ledger-block-leaf-v") for e in entries)
            if previous:
                reader.verify_consistency(tree, previous.size, previous.root)
            previous = checkpoint
            for value in values:
                budget_set_paused(value_id=value.id, paused=step % 2 == 0)
        response = session.get(live_server.url + "/log/tile/entries/000.p/%d" % previous.size,
                               headers={"Accept-Encoding": "gzip"})
        assert response.headers["Content-Encoding"] == "gzip"
        assert response.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    finally:
        session.close()
