"""Receipts reveal nothing about neighbours (docs/receipts.md#threat-model, "What receipts reveal"; issue 29, item 7).

A receipt's entry proof holds the hashes of other entries of its block.  With version-1 leaves such a hash is
``SHA-256(0x00 || marker || 16 int64)`` of another owner's entry: a record of low entropy, so a red team recovered
the neighbour's entry (value, ceiling, losses) from the first hash of an owner's proof by trying the plausible
records.  Version-2 leaves (``accounts.ledger.leaves``) put the entry's own key ``k_e`` (HMAC-SHA256 of its id
under the blinding key) before the fields, and only the entry's owner and auditors get it.

Here two owners' values share each block (a contribution, then a purchase of both), through the real services;
owner A takes their receipts from the owner API and searches B's plausible entries for one whose leaf hash is the
first sibling of A's entry proof, as the red team did: on blocks checkpointed with version-1 leaves the search
finds B's entry, on version-2 leaves it finds nothing -- though the same search finds B's entry again when given
B's key (which B's own receipt holds), so the search space does include it.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from accounts.ledger import hashchain as ledger
from accounts.ledger import merkle
from accounts.ledger.checkpoints import checkpoint_make
from accounts.ledger.leaves import (
    BLINDING_LABEL,
    ENTRY_LEAF_MARKER,
    ENTRY_LEAF_MARKER_V2,
    LEAF_VERSION,
    blinding_key,
    entry_keys,
    entry_leaf_hashes,
    entry_tree,
    position_ids,
)
from accounts.models import LedgerBlock, LedgerCheckpointLeaf, LedgerEntry
from audit.budget_audit import audit_budgets
from ldpmarket_client.receipts import verify_bundle
from market.purchases.pricing import DEFAULT_POLICY
from market.values.services import values_create_many
from tests.audit.conftest import buy, sql, tampering
from tests.factories import BuyerFactory, CategoricalAttributeFactory, OwnerFactory, fund
from tests.market.api.conftest import client_for

pytestmark = pytest.mark.django_db

MICRO = 10 ** 6
ROOTED = "every block leaf's entries root recomputes from the block's stored entries (receipts)"
MERKLE = "each checkpoint's Merkle root recomputes from the leaves it covers (RFC 6962)"


# ------------------------------------------------------------------ the ledger and the owners' receipts

@pytest.fixture
def two_owners():
    """Owners A and B, one value each of one attribute: one block of their two contributions (ceiling 2), one of
    a purchase of both at 0.5.  Returns ``(a, b, value of a, value of b)``; no checkpoint yet."""
    rng = np.random.default_rng(29)
    attribute = CategoricalAttributeFactory(price_policy=DEFAULT_POLICY)
    a, b = OwnerFactory(), OwnerFactory()
    va, vb = values_create_many(attribute=attribute, owners=[a, b], raws=["red", "green"], ceiling="2", rng=rng)
    buyer = BuyerFactory()
    fund(buyer, "100")
    buy(buyer, attribute, "0.5", rng)
    blocks = set(LedgerEntry.objects.filter(value__in=[va, vb]).values_list("block_id", flat=True))
    assert len(blocks) == 2 and all(LedgerBlock.objects.get(id=k).entry_count == 2 for k in blocks)
    return a, b, va, vb


def receipts_of(owner) -> dict:
    """The owner's receipts file, from ``GET /api/v1/owner/receipts/`` as the owner."""
    response = client_for(owner).get("/api/v1/owner/receipts/")
    assert response.status_code == 200
    return response.json()


def public_key() -> str:
    return client_for().get("/api/v1/ledger/public-key/").json()["public_key_pem"]


def verified(bundle) -> None:
    """The receipts file checks out with the client's verifier (``ldpmarket-client verify``)."""
    report = verify_bundle(bundle, bundle["checkpoint"], public_key())
    assert report.ok, report.problems


def record_of(entry_id: int) -> np.void:
    block, position = divmod(entry_id, ledger.ID_SHIFT)
    return ledger.stored_records(LedgerBlock.objects.get(id=block))[position]


# ------------------------------------------------------------------ the red team's search

def plausible_entries(receipt: dict) -> np.ndarray:
    """The neighbour records an owner can guess from their own receipt: values within 20 ids of theirs, every
    kind, ceilings 0.5 .. 3 by 0.5, epsilons none or 0.1 .. 1 by 0.1, chain losses before 0 .. 1 by 0.1 (after:
    the larger of before and epsilon for a chain release), the receipt's purchase for releases, no one-shot loss,
    no schedule, no guarantee: 268,686 records."""
    mine = receipt["entry"]
    value = np.arange(mine["value"] - 20, mine["value"] + 21)
    kind = np.arange(len(ledger.KINDS))
    ceiling = np.arange(1, 7) * 500_000
    epsilon = np.array([-1, *range(100_000, 1_000_001, 100_000)])
    before = np.arange(0, 11) * 100_000
    v, k, c, e, b = (x.ravel() for x in np.meshgrid(value, kind, ceiling, epsilon, before, indexing="ij"))
    rec = np.full(v.size, -1, dtype=ledger.ENTRY)
    rec["value"], rec["kind"], rec["ceiling"], rec["epsilon"] = v, k, c, e
    release = k == ledger.KINDS.index("chain_release")
    rec["reference"] = np.where(release, mine["purchase"] if mine["purchase"] is not None else -1, -1)
    rec["chain_before"] = b
    rec["chain_after"] = np.where(release, np.maximum(b, e), b)
    rec["oneshot_before"] = rec["oneshot_after"] = rec["guarantee"] = 0
    rec["sched_shape"] = 0
    return rec


def v2_hashes_under(records: np.ndarray, key: bytes) -> list[bytes]:
    """Version-2 leaf hashes of every record as if its key were ``key`` (``b""``: the version-2 marker, no key)."""
    prefix = hashlib.sha256(merkle.LEAF_PREFIX + ENTRY_LEAF_MARKER_V2 + key)
    raw = np.ascontiguousarray(records, dtype=ledger.ENTRY).tobytes()
    out = []
    for i in range(0, len(raw), ledger.ENTRY.itemsize):
        h = prefix.copy()
        h.update(raw[i:i + ledger.ENTRY.itemsize])
        out.append(h.digest())
    return out


def search(records: np.ndarray, target: bytes, hashes: list[bytes]) -> list[dict]:
    """The records whose leaf hash is ``target``, as dicts of their fields."""
    return [dict(zip(ledger.ENTRY.names, (int(x) for x in records[i]))) for i, h in enumerate(hashes) if h == target]


def as_dict(record) -> dict:
    return dict(zip(ledger.ENTRY.names, (int(x) for x in record)))


def sibling_of(receipt: dict) -> bytes:
    """The first hash of the receipt's entry proof: in a block of two, the other entry's leaf hash."""
    assert receipt["block_size"] == 2 and len(receipt["entry_proof"]) == 1
    return bytes.fromhex(receipt["entry_proof"][0])


# ------------------------------------------------------------------ version 1: the neighbour's entry recovered

def test_a_version_1_sibling_hash_gives_the_neighbours_entry_away(two_owners, monkeypatch):
    """The blocks checkpointed with version-1 leaves (as before blinding): A's receipts verify, and the search
    finds B's entries, fields and all, from the first hash of A's entry proofs."""
    a, b, va, vb = two_owners
    monkeypatch.setattr("accounts.ledger.checkpoints.LEAF_VERSION", 1)
    checkpoint_make()
    assert set(LedgerCheckpointLeaf.objects.values_list("version", flat=True)) == {1}
    bundle = receipts_of(a)
    verified(bundle)
    assert [r["entry"]["kind"] for r in bundle["receipts"]] == ["ceiling", "chain_release"]
    theirs = list(LedgerEntry.objects.filter(value=vb).order_by("id").values_list("id", flat=True))
    for receipt, their_id in zip(bundle["receipts"], theirs):
        assert bytes.fromhex(receipt["entry_data"]).startswith(ENTRY_LEAF_MARKER)
        candidates = plausible_entries(receipt)
        found = search(candidates, sibling_of(receipt), entry_leaf_hashes(candidates, 1))
        assert found == [as_dict(record_of(their_id))]
        assert found[0]["value"] == vb.id and found[0]["ceiling"] == 2 * MICRO
    release = found[0]
    assert (release["kind"], release["epsilon"], release["chain_before"], release["chain_after"]) == (
        ledger.KINDS.index("chain_release"), MICRO // 2, 0, MICRO // 2)
    report = audit_budgets()
    assert report.ok, report.as_text()


# ------------------------------------------------------------------ version 2: nothing

def test_a_version_2_sibling_hash_reveals_nothing(two_owners):
    """New blocks get version-2 leaves: A's receipts verify and carry A's keys, and no plausible record of B's,
    hashed unblinded, under A's key or under no key, gives the sibling hash.  B's own receipt holds B's key: with
    it the same search finds B's entry, so it is the key that hides it, not the search that misses it."""
    a, b, va, vb = two_owners
    checkpoint_make()
    assert set(LedgerCheckpointLeaf.objects.values_list("version", flat=True)) == {LEAF_VERSION} == {2}
    bundle, theirs = receipts_of(a), receipts_of(b)
    verified(bundle)
    verified(theirs)
    assert [r["entry"]["kind"] for r in bundle["receipts"]] == ["ceiling", "chain_release"]
    for mine, their in zip(bundle["receipts"], theirs["receipts"]):
        data, their_data = bytes.fromhex(mine["entry_data"]), bytes.fromhex(their["entry_data"])
        assert data.startswith(ENTRY_LEAF_MARKER_V2) and len(data) == 191
        my_key, their_key = data[31:63], their_data[31:63]
        assert [my_key, their_key] == entry_keys([mine["entry"]["id"], their["entry"]["id"]])
        candidates = plausible_entries(mine)
        target = sibling_of(mine)
        assert search(candidates, target, entry_leaf_hashes(candidates, 1)) == []
        for guess in (my_key, bytes(32), b""):   # A's own key, a zero key, no key at all
            assert search(candidates, target, v2_hashes_under(candidates, guess)) == []
        # the control: B's key, from B's own receipt, finds B's entry in the same space
        found = search(candidates, target, v2_hashes_under(candidates, their_key))
        assert found == [as_dict(record_of(their["entry"]["id"]))] and found[0]["value"] == vb.id
    report = audit_budgets()
    assert report.ok, report.as_text()


def test_a_file_holds_its_owners_keys_only(two_owners, auditor):
    """A's receipts file holds A's entries' keys and nothing of B's entries (data or key); an auditor's file for B's
    value is B's own, keys included."""
    a, b, va, vb = two_owners
    checkpoint_make()
    text = json.dumps(receipts_of(a))
    theirs = receipts_of(b)
    for r in theirs["receipts"]:
        key = bytes.fromhex(r["entry_data"])[31:63].hex()
        assert key == entry_keys([r["entry"]["id"]])[0].hex()
        assert key not in text and r["entry_data"] not in text
    audited = client_for(auditor).get(f"/api/v1/audit/receipts/?value={vb.id}").json()
    assert audited["receipts"] == theirs["receipts"]


# ------------------------------------------------------------------ old blocks keep verifying

def test_version_1_blocks_keep_verifying_beside_version_2_ones(two_owners, monkeypatch):
    """A log checkpointed before blinding (version-1 leaves) then after it (version 2): each owner's file holds
    receipts of both versions, and each verifies; the audit recomputes both kinds of entries roots."""
    a, b, va, vb = two_owners
    contribution = min(LedgerEntry.objects.filter(value=va).values_list("block_id", flat=True))
    with monkeypatch.context() as m:
        m.setattr("accounts.ledger.checkpoints.LEAF_VERSION", 1)
        checkpoint_make(max_entries=1)   # the contribution's block only
    checkpoint_make()
    versions = dict(LedgerCheckpointLeaf.objects.values_list("block_id", "version"))
    assert versions[contribution] == 1 and sorted(versions.values()) == [1, 2]
    for owner in (a, b):
        bundle = receipts_of(owner)
        verified(bundle)
        lengths = [len(bytes.fromhex(r["entry_data"])) for r in bundle["receipts"]]
        assert lengths == [159, 191]
    report = audit_budgets()
    assert report.ok, report.as_text()


# ------------------------------------------------------------------ the keys

def test_entry_keys_are_the_hmac_of_the_entry_id_under_the_blinding_key(settings):
    settings.LDP_LEDGER_BLINDING_KEY = ""
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=BLINDING_LABEL).derive(
        settings.LDP_VALUE_KEY.encode())
    assert blinding_key() == derived
    ids = [0, 1, 5 * ledger.ID_SHIFT, 5 * ledger.ID_SHIFT + 2 ** 24 - 1, 2 ** 62]
    assert entry_keys(ids) == [hmac.new(derived, i.to_bytes(8, "big"), hashlib.sha256).digest() for i in ids]
    assert len(set(entry_keys(ids))) == len(ids)
    settings.LDP_LEDGER_BLINDING_KEY = "tst-bl1nd-Q8wE3rT6yU9iO2pA5sD7fG0hJ4kL-tst"
    own = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=BLINDING_LABEL).derive(
        settings.LDP_LEDGER_BLINDING_KEY.encode())
    assert blinding_key() == own != derived
    assert entry_keys(ids[:1]) == [hmac.new(own, bytes(8), hashlib.sha256).digest()]
    with pytest.raises(ValueError):
        entry_keys([-1])


def test_version_2_leaves_need_every_entrys_id():
    records = np.zeros(3, dtype=ledger.ENTRY)
    with pytest.raises(ValueError):
        entry_leaf_hashes(records, 2)
    with pytest.raises(ValueError):
        entry_leaf_hashes(records, 2, position_ids(4, 0, 2))
    with pytest.raises(ValueError):
        entry_tree(records, 3)
    one, other = entry_tree(records, 2, position_ids(4, 0, 3))[0], entry_tree(records, 2, position_ids(5, 0, 3))[0]
    assert one != other != entry_tree(records, 1)[0]   # equal records, other ids: other leaves


def test_a_changed_blinding_key_fails_the_audit(two_owners, settings):
    """The blinding key must never change (docs/security.md#keys): with another, no version-2 entries root
    recomputes."""
    checkpoint_make()
    assert audit_budgets().ok
    settings.LDP_LEDGER_BLINDING_KEY = "tst-0ther-Z1xC4vB7nM0qW3eR6tY9uI2oP5aS-tst"
    report = audit_budgets()
    assert ROOTED in {c.name for c in report.failed}, report.as_text()


def test_a_leaf_version_rewritten_is_caught(two_owners):
    """The version column is not signed, the leaf data (its marker) is: a version-2 leaf set to 1 no longer gives
    the checkpoint's root, nor its entries root."""
    checkpoint_make()
    leaf = LedgerCheckpointLeaf.objects.order_by("index").last()
    with tampering():
        sql('UPDATE accounts_ledgercheckpointleaf SET version = 1 WHERE "index" = %s', [leaf.index])
    names = {c.name for c in audit_budgets().failed}
    assert {MERKLE, ROOTED} <= names



@pytest.mark.parametrize("blinding, refused", [("short-key", "it has 9 characters"), ("same", "the same as"),
                                                ("strong", None)])
def test_a_weak_or_repeated_blinding_key_refuses_start_up_without_debug(blinding, refused):
    """``LDP_LEDGER_BLINDING_KEY``, when set, is held to the rules of the other keys (docs/security.md#keys)."""
    from tests.ldpmarket.test_deploy import production_env, run_python  # noqa: PLC0415 -- its subprocess set-up

    env = production_env(LDP_LOG_ORIGIN="market.example.org/log")
    env["LDP_LEDGER_BLINDING_KEY"] = {"short-key": "short-key", "same": env["LDP_VALUE_KEY"],
                                      "strong": secrets.token_urlsafe(32)}[blinding]
    out = run_python("import django; django.setup()\nfrom django.conf import settings\n"
                     "print(len(settings.LDP_LEDGER_BLINDING_KEY))\n", env)
    if refused is None:
        assert out.returncode == 0 and out.stdout.strip() == str(len(env["LDP_LEDGER_BLINDING_KEY"])), out.stderr
    else:
        last = out.stderr.strip().splitlines()[-1]
        assert out.returncode != 0 and "LDP_LEDGER_BLINDING_KEY" in last and refused in last, last
        assert env["LDP_LEDGER_BLINDING_KEY"] not in out.stderr
