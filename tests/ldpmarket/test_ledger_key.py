"""The Ed25519 key that signs the ledger's checkpoints (accounts.ledger.signing, docs/budget-rules.md#checkpoints)."""
from __future__ import annotations

import hashlib

from django.utils import timezone

from accounts.ledger import signing as ledger_key


def test_the_signature_covers_the_statement_and_the_key_is_the_configured_one(settings):
    now = timezone.now()
    signature = ledger_key.sign(ledger_key.statement(3, "ab" * 32, now))
    assert ledger_key.verify(ledger_key.statement(3, "ab" * 32, now), signature)
    assert not ledger_key.verify(ledger_key.statement(4, "ab" * 32, now), signature)
    assert not ledger_key.verify(ledger_key.statement(3, "ac" * 32, now), signature)
    derived = ledger_key.key_id()
    settings.LDP_LEDGER_SIGNING_KEYS = ["another-strong-ledger-signing-key-7Qz2XwLp9Rt"]
    assert ledger_key.key_id() != derived
    assert not ledger_key.verify(ledger_key.statement(3, "ab" * 32, now), signature)


def test_the_public_key_is_published_as_pem_and_its_id_is_the_hash_of_its_raw_bytes():
    pem = ledger_key.public_pem()
    assert pem.startswith("-----BEGIN PUBLIC KEY-----") and len(ledger_key.public_raw()) == 32
    assert ledger_key.key_id() == hashlib.sha256(ledger_key.public_raw()).hexdigest()
