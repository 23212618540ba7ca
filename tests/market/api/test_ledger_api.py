"""The ledger's public transparency API (accounts/ledger/api.py, docs/budget-rules.md#checkpoints): the signing
key, the signed checkpoints and consistency proofs, checked the way an outsider would, with the public key and
``accounts.ledger.merkle`` only."""
from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from accounts.ledger import merkle
from accounts.ledger import signing as ledger_key
from accounts.ledger.checkpoints import checkpoint_make
from accounts.services import budget_set_paused
from tests.factories import CategoricalAttributeFactory, contribute
from tests.market.api.conftest import assert_problem, client_for


@pytest.fixture
def three_checkpoints(db):
    """Three checkpoints over a growing ledger: two attributes' shards, then one of them moves again."""
    a, b = CategoricalAttributeFactory(), CategoricalAttributeFactory()
    values = contribute(a, ["red", "blue"], ceiling="1")
    first = checkpoint_make()
    contribute(b, ["green"], ceiling="1")
    second = checkpoint_make()
    budget_set_paused(value_id=values[0].id, paused=True)
    third = checkpoint_make()
    return [first, second, third]


def test_the_public_key_is_published_and_verifies_the_checkpoints(three_checkpoints):
    anonymous = client_for()
    key = anonymous.get("/api/v1/ledger/public-key/").json()
    assert key["algorithm"] == "Ed25519" and key["key_id"] == ledger_key.key_id()
    public = load_pem_public_key(key["public_key_pem"].encode())
    assert ledger_key.public_raw(public).hex() == key["public_key"]
    page = anonymous.get("/api/v1/ledger/checkpoints/").json()
    assert [c["tree_size"] for c in page["results"]] == [c.tree_size for c in reversed(three_checkpoints)]
    for c in page["results"]:
        assert c["key_id"] == key["key_id"]
        public.verify(bytes.fromhex(c["signature"]), c["statement"].encode())  # raises if it does not verify
        assert f"\n{c['tree_size']}\n{c['root_hash']}\n" in c["statement"]


def test_checkpoints_are_cursor_paginated(three_checkpoints):
    anonymous = client_for()
    first = anonymous.get("/api/v1/ledger/checkpoints/?page_size=2").json()
    assert len(first["results"]) == 2 and first["next"]
    rest = anonymous.get(first["next"]).json()
    sizes = [c["tree_size"] for c in first["results"] + rest["results"]]
    assert sizes == sorted({c.tree_size for c in three_checkpoints}, reverse=True)


def test_a_consistency_proof_shows_the_older_checkpoint_is_a_prefix_of_the_newer(three_checkpoints):
    anonymous = client_for()
    sizes = [c.tree_size for c in three_checkpoints]
    assert sizes[0] < sizes[1] < sizes[2]
    for m, n in ((sizes[0], sizes[2]), (sizes[1], sizes[2]), (sizes[0], sizes[1]), (sizes[2], sizes[2])):
        body = anonymous.get(f"/api/v1/ledger/consistency/?first={m}&second={n}").json()
        assert (body["first"], body["second"]) == (m, n)
        proof = [bytes.fromhex(p) for p in body["proof"]]
        assert merkle.verify_consistency(m, n, bytes.fromhex(body["first_root"]), bytes.fromhex(body["second_root"]),
                                         proof)
        # a forked history: another root for the older size does not verify against the same proof
        if m < n:
            assert not merkle.verify_consistency(m, n, bytes(32), bytes.fromhex(body["second_root"]), proof)


@pytest.mark.parametrize("query, status, field", [
    ("", 400, "first"), ("first=2", 400, "second"), ("first=x&second=2", 400, "first"),
    ("first=0&second=2", 400, "first"), ("first=3&second=2", 400, "first"),
])
def test_bad_consistency_queries_get_a_400_naming_the_field(three_checkpoints, query, status, field):
    response = client_for().get(f"/api/v1/ledger/consistency/?{query}")
    assert_problem(response, status)
    assert field in response.json()["errors"]


def test_a_tree_size_no_checkpoint_has_is_a_404(three_checkpoints):
    top = three_checkpoints[-1].tree_size
    response = client_for().get(f"/api/v1/ledger/consistency/?first=1&second={top + 5}")
    assert_problem(response, 404)
    assert f"tree size {top + 5}" in response.json()["detail"]
