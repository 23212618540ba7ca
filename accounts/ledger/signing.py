"""The Ed25519 keys that sign the ledger's checkpoints (docs/receipts.md#the-log-key).

``LDP_LEDGER_SIGNING_KEYS`` is a ring, newest first; each key's 32-byte seed is HKDF-SHA256 of its setting with a
label of its own, or, when the ring is empty, of ``LDP_VALUE_KEY`` (independent of the keys derived from it for
sealing).  Every key of the ring signs each new checkpoint's signed note (C2SP signed-note, type 0x01, key name =
the log's origin ``LDP_LOG_ORIGIN``), so verifiers holding any of them keep verifying across a rotation
(docs/receipts.md#rotating-the-log-key).

Checkpoints also carry the statement signature of the first releases (``statement``: a fixed header line, the tree
size, the root hash and the time, signed by the newest key; ``key_id`` is the SHA-256 of its 32 raw bytes), kept
for one release beside the signed notes.
"""
from __future__ import annotations

import hashlib
from datetime import datetime

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ldpmarket_client.tlog.note import ED25519, Signer, Verifier

LABEL = b"ldpmarket ledger checkpoint signing key v1"
HEADER = "ldpmarket ledger checkpoint v1"


def _secrets() -> list[bytes]:
    if not settings.LDP_LEDGER_SIGNING_KEYS and len(settings.LDP_VALUE_KEYS) > 1:
        # the settings refuse this at start-up; a ring of value keys would otherwise change the derived key
        raise ImproperlyConfigured("LDP_VALUE_KEYS holds more than one key: set LDP_LEDGER_SIGNING_KEYS to the value "
                                   "key the ledger's key was derived from (docs/security.md#rotating-the-value-key).")
    return [s.encode() for s in (settings.LDP_LEDGER_SIGNING_KEYS or [settings.LDP_VALUE_KEY])]


def _derive(secret: bytes) -> Ed25519PrivateKey:
    seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=LABEL).derive(secret)
    return Ed25519PrivateKey.from_private_bytes(seed)


def private_keys() -> list[Ed25519PrivateKey]:
    """The ring's keys, newest first."""
    return [_derive(secret) for secret in _secrets()]


def private_key() -> Ed25519PrivateKey:
    """The newest key: it signs the statements."""
    return private_keys()[0]


def public_key() -> Ed25519PublicKey:
    return private_key().public_key()


def public_raw(key: Ed25519PublicKey | None = None) -> bytes:
    return (key or public_key()).public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_pem(key: Ed25519PublicKey | None = None) -> str:
    return (key or public_key()).public_bytes(serialization.Encoding.PEM,
                                              serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def key_id(key: Ed25519PublicKey | None = None) -> str:
    return hashlib.sha256(public_raw(key)).hexdigest()


def origin() -> str:
    """The log's origin: the first line of every checkpoint and the name of its keys."""
    return settings.LDP_LOG_ORIGIN


def note_signers() -> list[Signer]:
    """The ring as signed-note signers (type 0x01, named by the origin), newest first."""
    seeds = [k.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption()) for k in private_keys()]
    return [Signer.from_seed(origin(), seed, ED25519) for seed in seeds]


def note_verifier(public: bytes, name: str | None = None) -> Verifier:
    """The signed-note verifier of a raw public key (named by the origin unless ``name`` is given)."""
    return Verifier(name or origin(), ED25519, public)


def vkey() -> str:
    """The newest key's C2SP verifier key: ``<origin>+<key id>+<base64(0x01 || key)>``."""
    return note_signers()[0].verifier.vkey


def statement(tree_size: int, root_hash: str, created_at: datetime) -> bytes:
    """The bytes a checkpoint's statement signature covers: ``HEADER``, the tree size, the root (hex) and the time
    (ISO 8601, UTC, microseconds), one per line."""
    return f"{HEADER}\n{tree_size}\n{root_hash}\n{created_at.isoformat(timespec='microseconds')}\n".encode()


def sign(message: bytes) -> str:
    return private_key().sign(message).hex()


def verify(message: bytes, signature_hex: str, key: Ed25519PublicKey | None = None) -> bool:
    try:
        (key or public_key()).verify(bytes.fromhex(signature_hex), message)
        return True
    except (InvalidSignature, ValueError):
        return False
