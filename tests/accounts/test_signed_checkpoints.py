"""Checkpoints as C2SP signed notes (accounts/ledger/notes.py, docs/receipts.md#checkpoints-as-signed-notes) and the
log key's rotation (accounts/ledger/signing.py, docs/receipts.md#rotating-the-log-key), checked as an outsider
would: with the published verifier keys and the client's C2SP library only."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest
from django.core.serializers.json import DjangoJSONEncoder

from accounts.ledger import notes
from accounts.ledger.checkpoints import checkpoint_make
from accounts.ledger.receipts import receipts_bundle
from accounts.models import LedgerLogKey
from accounts.services import budget_set_paused
from audit.budget_audit import audit_budgets
from ldpmarket_client import cli
from ldpmarket_client.tlog.checkpoint import parse_checkpoint
from ldpmarket_client.tlog.note import InvalidNoteSignature, UnverifiedNote, open_note, parse_vkey
from ldpmarket_client.tlog.policy import parse_policy
from market.models import Value
from tests.factories import CategoricalAttributeFactory, contribute
from tests.market.api.conftest import client_for

KEY_A = "first-strong-ledger-signing-key-Hq3Wm8Lz2Pv7"
KEY_B = "second-strong-ledger-signing-key-Tn5Rc1Xk9Bd4"


def grow(attribute, _count=[0]):
    """One more ledger block (a value contributed), then a checkpoint over it."""
    _count[0] += 1
    values = contribute(attribute, ["red"], prefix=f"grow{_count[0]}-a{attribute.id}", ceiling="1")
    budget_set_paused(value_id=values[0].id, paused=True)
    return checkpoint_make()


def test_a_checkpoint_is_a_signed_note_that_verifies_with_the_published_vkey(db, settings):
    checkpoint = grow(CategoricalAttributeFactory())
    key = client_for().get("/api/v1/ledger/public-key/").json()
    assert key["origin"] == settings.LDP_LOG_ORIGIN == "ldpmarket.test/log"
    verifier = parse_vkey(key["vkey"])
    assert verifier.name == key["origin"] and verifier.public.hex() == key["public_key"]
    note = open_note(checkpoint.note.encode(), [verifier])
    parsed = parse_checkpoint(note.text)
    assert (parsed.origin, parsed.size, parsed.root.hex()) == (settings.LDP_LOG_ORIGIN, checkpoint.tree_size,
                                                               checkpoint.root_hash)
    assert parsed.extensions == ()
    assert note.text == f"{parsed.origin}\n{parsed.size}\n{base64.b64encode(parsed.root).decode()}\n".encode()
    # the same note, with one changed byte of the root, does not verify
    forged = checkpoint.note.replace(checkpoint.note.split("\n")[2], base64.b64encode(bytes(32)).decode())
    with pytest.raises(InvalidNoteSignature):
        open_note(forged.encode(), [verifier])


def test_the_published_policy_names_the_log_key_and_no_quorum_without_witnesses(db):
    grow(CategoricalAttributeFactory())
    response = client_for().get("/api/v1/ledger/policy/")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    policy = parse_policy(response.content)
    assert policy.quorum == "none" and not policy.witnesses
    checkpoint, _, witnessed = policy.verify_checkpoint(notes.served_note())
    assert checkpoint.size == notes.latest_size() and witnessed == []


def test_rotating_the_log_key_keeps_every_checkpoint_verifying_and_retires_the_old_key(db, settings, tmp_path, capsys):
    """The drill of docs/receipts.md#rotating-the-log-key: sign with A; add B in front (both sign); drop A (only B
    signs, A is retired and its checkpoints keep verifying under A); the audit passes at every step."""
    attribute = CategoricalAttributeFactory()
    settings.LDP_LEDGER_SIGNING_KEYS = [KEY_A]
    first = grow(attribute)
    vkey_a = client_for().get("/api/v1/ledger/public-key/").json()["vkey"]
    receipts_before = tmp_path / "receipts.json"
    value = Value.objects.filter(attribute=attribute).first()
    receipts_before.write_text(json.dumps(receipts_bundle(value_ids=[value.id]), cls=DjangoJSONEncoder))
    settings.LDP_LEDGER_SIGNING_KEYS = [KEY_B, KEY_A]
    both = grow(attribute)
    vkey_b = client_for().get("/api/v1/ledger/public-key/").json()["vkey"]
    assert vkey_a != vkey_b
    a, b = parse_vkey(vkey_a), parse_vkey(vkey_b)
    assert [v for v, _, _ in open_note(both.note.encode(), [a, b]).verified] == [b, a]
    report = audit_budgets()
    assert report.ok, report.as_text()
    settings.LDP_LEDGER_SIGNING_KEYS = [KEY_B]
    last = grow(attribute)
    assert [v for v, _, _ in open_note(last.note.encode(), [a, b]).verified] == [b]
    with pytest.raises(UnverifiedNote):
        open_note(last.note.encode(), [a])
    open_note(first.note.encode(), [a])  # the old key's checkpoints keep verifying under it
    history = {k["vkey"]: k for k in client_for().get("/api/v1/ledger/public-key/").json()["keys"]}
    assert (history[vkey_a]["first_size"], history[vkey_a]["last_size"]) == (first.tree_size, both.tree_size)
    assert history[vkey_a]["retired_at"] is not None
    assert (history[vkey_b]["first_size"], history[vkey_b]["last_size"]) == (both.tree_size, last.tree_size)
    assert history[vkey_b]["retired_at"] is None
    policy = parse_policy(client_for().get("/api/v1/ledger/policy/").content)
    assert [m.verifier.vkey for m in policy.logs] == [vkey_b]
    report = audit_budgets()
    assert report.ok, report.as_text()
    # receipts issued before the rotation keep verifying with the policy their owner kept (the old key), and with
    # one listing both keys; the policy published now names only the new key
    old_policy = tmp_path / "old-policy.txt"
    old_policy.write_text(f"log {vkey_a}\nquorum none\n")
    both_policy = tmp_path / "both-policy.txt"
    both_policy.write_text(f"log {vkey_b}\nlog {vkey_a}\nquorum none\n")
    for policy_file, code in ((old_policy, 0), (both_policy, 0), (tmp_path / "now.txt", 1)):
        if policy_file.name == "now.txt":
            policy_file.write_bytes(client_for().get("/api/v1/ledger/policy/").content)
        assert cli.main(["verify", str(receipts_before), "--policy", str(policy_file)]) == code, policy_file.name
    # a checkpoint signed by a key outside the history fails the audit
    LedgerLogKey.objects.filter(vkey=vkey_a).delete()
    settings.LDP_LEDGER_SIGNING_KEYS = [KEY_B]
    assert not audit_budgets().ok


@pytest.mark.parametrize("origin, starts", [("", False), ("has space/log", False), ("plus+sign/log", False),
                                            ("market.example.org/log", True)])
def test_without_debug_a_missing_or_malformed_origin_refuses_start_up(origin, starts):
    env = {**os.environ, "DJANGO_DEBUG": "0", "DJANGO_SETTINGS_MODULE": "ldpmarket.settings",
           "DJANGO_SECRET_KEY": "k7Pq2Wz9Lm4Xr8Tb1Nc6Vj3Hg5Df0SaQe7Yu2Io9Pl4Kj8Hg3F",
           "LDP_VALUE_KEY": "v9Lm2Qx7Wr4Tz8Kb1Nc6Pj3Hg5Df0SaYe",
           "LDP_PSEUDONYM_KEY": "p3Nd8Vc2Xz7Lq4Wr9Tb1Kj6Hg5Fs0MaUi",
           "LDP_LOG_ORIGIN": origin}
    done = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True,
                          text=True, timeout=60)
    if starts:
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode != 0 and "LDP_LOG_ORIGIN" in done.stderr.splitlines()[-1]
