"""``ldpmarket-client verify --policy`` and ``proof export|verify`` (docs/receipts.md#witnesses,
#exporting-a-proof): an owner checks their receipts against the trust policy the service publishes, with a
witness of the client package cosigning the checkpoints (here in a thread of the test, its HTTP on loopback; the
service submits to it on commit).  A forged cosignature, a missing quorum and another log's key each fail."""
from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from accounts.ledger import signing
from accounts.models import LedgerCosignature
from accounts.services import budget_set_ceiling
from ldpmarket_client.tlog.note import COSIGNATURE_V1, Signer, parse_vkey
from ldpmarket_client.witness import Witness, serve_in_thread
from market.models import Value
from tests.client.test_receipts_live import owner_with_sales, run  # noqa: F401 (a fixture)


@pytest.fixture
def witnessed(live_server, client_for, owner_with_sales, tmp_path, capsys, monkeypatch, settings):  # noqa: F811
    """A witness on loopback in the service's policy, a checkpoint it cosigned, and the owner's client verbs."""
    signer = Signer.generate("owners.test/w1", COSIGNATURE_V1)
    server = serve_in_thread(Witness(signer, [parse_vkey(signing.vkey())], tmp_path / "witness.sqlite3"))
    policy = tmp_path / "service-policy.txt"
    policy.write_text(f"witness w1 {signer.verifier.vkey} {server.url}\nquorum w1\n")
    settings.LDP_WITNESS_POLICY = str(policy)
    value = Value.objects.filter(owner=owner_with_sales).first()
    budget_set_ceiling(value_id=value.id, ceiling="1.5")  # a new block, then its checkpoint: submitted on commit
    call_command("ledger_checkpoint", stdout=open("/dev/null", "w"))
    assert LedgerCosignature.objects.count() >= 1
    for name in ("LDPMARKET_URL", "LDPMARKET_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LDPMARKET_CONFIG", str(tmp_path / "config.json"))
    token = client_for(owner_with_sales).token

    def verb(*argv):
        return run(capsys, "--url", live_server.url, "--token", token, *argv)

    yield verb, signer
    server.shutdown()
    server.server_close()


def test_receipts_verify_against_the_published_policy(witnessed, tmp_path):
    verb, _ = witnessed
    assert verb("ledger", "policy", "--out", str(tmp_path / "policy.txt"))[0] == 0
    assert "quorum w1" in (tmp_path / "policy.txt").read_text()
    assert verb("owner", "receipts", "--out", str(tmp_path / "receipts.json"))[0] == 0
    code, out, err = verb("verify", str(tmp_path / "receipts.json"), "--policy", str(tmp_path / "policy.txt"))
    assert code == 0, out + err
    assert "witnessed by 1 of 1 (w1)" in out and "verified:" in out + err
    # a checkpoint kept earlier, in the JSON `ledger checkpoint` writes, is checked with the policy too
    assert verb("ledger", "checkpoint", "--out", str(tmp_path / "checkpoint.json"))[0] == 0
    code, out, err = verb("verify", str(tmp_path / "receipts.json"), "--policy", str(tmp_path / "policy.txt"),
                          "--checkpoint", str(tmp_path / "checkpoint.json"))
    assert code == 0 and out.count("PASS  policy:") == 2, out + err


def test_a_forged_cosignature_a_missing_quorum_and_another_log_fail(witnessed, tmp_path):
    verb, signer = witnessed
    verb("ledger", "policy", "--out", str(tmp_path / "policy.txt"))
    verb("owner", "receipts", "--out", str(tmp_path / "receipts.json"))
    bundle = json.loads((tmp_path / "receipts.json").read_text())
    note = bundle["checkpoint"]["note"]
    witness_line = next(line for line in note.splitlines() if line.startswith(f"— {signer.name} "))
    head, raw = witness_line.rsplit(" ", 1)
    forged = raw[:20] + ("A" if raw[20] != "A" else "B") + raw[21:]  # a byte of the time or the signature changed
    for name, changed in (("forged", note.replace(witness_line, f"{head} {forged}")),
                          ("dropped", note.replace(witness_line + "\n", ""))):
        bundle["checkpoint"]["note"] = changed
        (tmp_path / f"{name}.json").write_text(json.dumps(bundle))
        code, out, err = verb("verify", str(tmp_path / f"{name}.json"), "--policy", str(tmp_path / "policy.txt"))
        assert code == 1 and "FAIL  policy:" in out, (name, out + err)
        assert ("does not verify" if name == "forged" else "quorum") in out, (name, out)
    other = Signer.generate(signing.origin())  # a key of the same name that is not the log's
    (tmp_path / "other.txt").write_text(f"log {other.verifier.vkey}\nquorum none\n")
    code, out, _ = verb("verify", str(tmp_path / "receipts.json"), "--policy", str(tmp_path / "other.txt"))
    assert code == 1 and "no signature of the note is by a known key" in out


def test_a_receipts_block_proof_exports_as_a_tlog_proof(witnessed, tmp_path):
    verb, _ = witnessed
    verb("ledger", "policy", "--out", str(tmp_path / "policy.txt"))
    verb("owner", "receipts", "--out", str(tmp_path / "receipts.json"))
    assert verb("proof", "export", str(tmp_path / "receipts.json"), "--receipt", "1",
                "--out", str(tmp_path / "block.tlog-proof"))[0] == 0
    text = (tmp_path / "block.tlog-proof").read_text()
    assert text.startswith("c2sp.org/tlog-proof@v1\nextra ")
    code, out, _ = verb("proof", "verify", str(tmp_path / "block.tlog-proof"), "--policy", str(tmp_path / "policy.txt"))
    assert code == 0 and "witnessed by 1 of 1 (w1)" in out
    index_line = next(line for line in text.splitlines() if line.startswith("index "))
    moved = text.replace(index_line, f"index {int(index_line[6:]) + 1}")
    (tmp_path / "moved.tlog-proof").write_text(moved)
    code, out, _ = verb("proof", "verify", str(tmp_path / "moved.tlog-proof"), "--policy", str(tmp_path / "policy.txt"))
    assert code == 1 and "is not leaf" in out
