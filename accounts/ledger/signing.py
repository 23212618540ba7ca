"""The Ed25519 key that signs the ledger's checkpoints (docs/budget-rules.md#checkpoints).

The 32-byte seed is HKDF-SHA256 of ``LDP_LEDGER_SIGNING_KEY`` or, when that setting is empty, of
``LDP_VALUE_KEY``, with a label of its own (so it is independent of the keys derived from the value key for
sealing).  The public key is published; ``key_id`` is the SHA-256 of its 32 raw bytes.  What is signed is a
checkpoint's statement (``statement``): a fixed header line, the tree size, the root hash and the time.
"""
from __future__ import annotations

import hashlib
from datetime import datetime

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

LABEL = b"ldpmarket ledger checkpoint signing key v1"
HEADER = "ldpmarket ledger checkpoint v1"


def _secret() -> bytes:
    return (settings.LDP_LEDGER_SIGNING_KEY or settings.LDP_VALUE_KEY).encode()


def private_key() -> Ed25519PrivateKey:
    seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=LABEL).derive(_secret())
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_key() -> Ed25519PublicKey:
    return private_key().public_key()


def public_raw(key: Ed25519PublicKey | None = None) -> bytes:
    return (key or public_key()).public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_pem() -> str:
    return public_key().public_bytes(serialization.Encoding.PEM,
                                     serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def key_id(key: Ed25519PublicKey | None = None) -> str:
    return hashlib.sha256(public_raw(key)).hexdigest()


def statement(tree_size: int, root_hash: str, created_at: datetime) -> bytes:
    """The bytes a checkpoint's signature covers: ``HEADER``, the tree size, the root (hex) and the time (ISO
    8601, UTC, microseconds), one per line."""
    return f"{HEADER}\n{tree_size}\n{root_hash}\n{created_at.isoformat(timespec='microseconds')}\n".encode()


def sign(message: bytes) -> str:
    return private_key().sign(message).hex()


def verify(message: bytes, signature_hex: str, key: Ed25519PublicKey | None = None) -> bool:
    try:
        (key or public_key()).verify(bytes.fromhex(signature_hex), message)
        return True
    except (InvalidSignature, ValueError):
        return False
