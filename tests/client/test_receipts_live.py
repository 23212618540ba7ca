"""Receipts end to end (docs/receipts.md, docs/client.md#verifying-receipts): an owner made as a deployment makes
one, values sold through the service, checkpoints made by the command; then, against the live server, the
client's own verbs fetch the key, a checkpoint and the owner's receipts, and ``ldpmarket-client verify`` checks
them -- the verifier knows nothing of the service's code.  An operator who edits an entry after its checkpoint,
or forks the log, is caught by the same command."""
from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from accounts.ledger import signing
from accounts.models import LedgerCheckpoint, LedgerEntry
from accounts.roles import grant_role
from accounts.services import budget_set_ceiling
from ldpmarket_client import cli
from market.models import Value
from market.purchases.pricing import DEFAULT_POLICY
from market.values.services import values_create_many
from tests.audit.conftest import buy, sql, tampering
from tests.client.conftest import PASSWORD
from tests.factories import BuyerFactory, CategoricalAttributeFactory, fund


@pytest.fixture
def owner_with_sales(transactional_db):
    owner = get_user_model().objects.create_user(username=f"ro-{uuid.uuid4().hex[:8]}", password=PASSWORD)
    grant_role(owner, "owner")
    buyer = BuyerFactory()
    fund(buyer, "100")
    rng = np.random.default_rng(11)
    for k in range(2):
        attribute = CategoricalAttributeFactory(price_policy=DEFAULT_POLICY)
        others = [get_user_model().objects.create_user(username=f"rx{k}-{i}-{uuid.uuid4().hex[:6]}") for i in range(5)]
        for user in others:
            grant_role(user, "owner")
        values_create_many(attribute=attribute, owners=[owner, *others], raws=["red", "green", "blue"] * 2,
                           ceiling="2", rng=rng)
        buy(buyer, attribute, "0.5", rng)
        buy(buyer, attribute, "0.8", rng)
    call_command("ledger_checkpoint", stdout=open("/dev/null", "w"))
    return owner


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.fixture
def fetch(live_server, client_for, owner_with_sales, tmp_path, capsys, monkeypatch):
    """Run the client's verbs against the live server as the owner; the files land in ``tmp_path``."""
    for name in ("LDPMARKET_URL", "LDPMARKET_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LDPMARKET_CONFIG", str(tmp_path / "config.json"))
    token = client_for(owner_with_sales).token

    def verb(*argv):
        return run(capsys, "--url", live_server.url, "--token", token, *argv)

    return verb


def test_an_owner_fetches_and_verifies_their_receipts_with_the_client_alone(fetch, owner_with_sales, tmp_path):
    assert fetch("ledger", "public-key", "--out", str(tmp_path / "key.pem"))[0] == 0
    assert fetch("ledger", "checkpoint", "--out", str(tmp_path / "checkpoint.json"))[0] == 0
    checkpoint = json.loads((tmp_path / "checkpoint.json").read_text())
    assert checkpoint["tree_size"] == LedgerCheckpoint.objects.order_by("-tree_size").first().tree_size
    code, _, err = fetch("owner", "receipts", "--tree-size", str(checkpoint["tree_size"]),
                         "--out", str(tmp_path / "receipts.json"))
    assert code == 0, err
    bundle = json.loads((tmp_path / "receipts.json").read_text())
    mine = list(Value.objects.filter(owner=owner_with_sales).values_list("id", flat=True))
    entries = LedgerEntry.objects.filter(value_id__in=mine).count()
    assert len(bundle["receipts"]) == entries and len(mine) == 2
    assert sum(r["entry"]["kind"] == "chain_release" for r in bundle["receipts"]) == 4
    code, out, err = fetch("verify", str(tmp_path / "receipts.json"), "--checkpoint", str(tmp_path / "checkpoint.json"),
                           "--public-key", str(tmp_path / "key.pem"))
    assert code == 0, out + err
    assert f"verified: {entries} receipts of 2 values against the checkpoint of tree size {checkpoint['tree_size']}" \
        in out + err


def test_a_checkpoint_kept_earlier_is_linked_by_a_consistency_proof(fetch, owner_with_sales, tmp_path):
    fetch("ledger", "public-key", "--out", str(tmp_path / "key.pem"))
    fetch("ledger", "checkpoint", "--out", str(tmp_path / "old.json"))
    old = json.loads((tmp_path / "old.json").read_text())["tree_size"]
    value = Value.objects.filter(owner=owner_with_sales).first()
    budget_set_ceiling(value_id=value.id, ceiling="1.5")
    call_command("ledger_checkpoint", stdout=open("/dev/null", "w"))
    code, _, err = fetch("owner", "receipts", "--out", str(tmp_path / "receipts.json"))
    new = json.loads((tmp_path / "receipts.json").read_text())["checkpoint"]["tree_size"]
    assert code == 0 and new > old
    args = ["verify", str(tmp_path / "receipts.json"), "--checkpoint", str(tmp_path / "old.json"),
            "--public-key", str(tmp_path / "key.pem")]
    code, out, err = fetch(*args)
    assert code == 1 and "consistency" in out + err  # says which proof to get
    assert fetch("ledger", "consistency", "--first", str(old), "--second", str(new),
                 "--out", str(tmp_path / "proof.json"))[0] == 0
    code, out, err = fetch(*args, "--consistency", str(tmp_path / "proof.json"))
    assert code == 0, out + err


def test_an_entry_edited_after_its_checkpoint_fails_verification(fetch, owner_with_sales, tmp_path):
    """The operator lowers a release's recorded loss after the checkpoint: the receipt the service now hands out
    carries the edited entry, which is not in the signed log."""
    fetch("ledger", "public-key", "--out", str(tmp_path / "key.pem"))
    fetch("ledger", "checkpoint", "--out", str(tmp_path / "checkpoint.json"))
    value = Value.objects.filter(owner=owner_with_sales).order_by("id").first()
    event = LedgerEntry.objects.filter(value=value, kind="ceiling").order_by("id").first()
    block, position = divmod(event.id, 2 ** 24)
    with tampering():
        sql("UPDATE accounts_ledgerevent SET ceiling = ceiling + 1 WHERE block_id = %s AND position = %s",
            [block, position])
    fetch("owner", "receipts", "--value", str(value.id), "--out", str(tmp_path / "receipts.json"))
    code, out, err = fetch("verify", str(tmp_path / "receipts.json"), "--checkpoint", str(tmp_path / "checkpoint.json"),
                           "--public-key", str(tmp_path / "key.pem"))
    assert code == 1 and f"entry {event.id}" in out + err


def test_a_forked_log_is_caught(fetch, owner_with_sales, tmp_path):
    """The operator re-signs a different root for a tree size an owner already holds (a second history): the
    owner's checkpoint and the new file's are of one size and differ."""
    fetch("ledger", "public-key", "--out", str(tmp_path / "key.pem"))
    fetch("ledger", "checkpoint", "--out", str(tmp_path / "checkpoint.json"))
    latest = LedgerCheckpoint.objects.order_by("-tree_size").first()
    forged = "ab" * 32
    with tampering():
        sql("UPDATE accounts_ledgercheckpoint SET root_hash = %s, signature = %s WHERE id = %s",
            [forged, signing.sign(signing.statement(latest.tree_size, forged, latest.created_at)), latest.id])
    code, _, err = fetch("owner", "receipts", "--out", str(tmp_path / "receipts.json"))
    assert code == 0, err
    code, out, err = fetch("verify", str(tmp_path / "receipts.json"), "--checkpoint", str(tmp_path / "checkpoint.json"),
                           "--public-key", str(tmp_path / "key.pem"))
    assert code == 1 and "fork" in (out + err).lower()
