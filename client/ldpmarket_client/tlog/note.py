"""C2SP signed notes (c2sp.org/signed-note) with Ed25519 signatures (type 0x01) and timestamped Ed25519
cosignatures (type 0x04, c2sp.org/tlog-cosignature); docs/receipts.md#checkpoints-as-signed-notes.

A note is a text ending in a newline, a blank line, and signature lines ``— <key name> base64(key id || sig)``.
The key id is ``SHA-256(key name || 0x0A || type || public key)[:4]``.  A verifier key (vkey) is
``<name>+<hex key id>+base64(type || public key)``; a signer key (skey, Go's ``note.NewSigner`` format) is
``PRIVATE+KEY+<name>+<hex key id>+base64(type || seed)``.

Type 0x01 signs the note text itself.  Type 0x04 signs ``cosignature/v1\\ntime <t>\\n`` followed by the text,
and its signature is ``t`` (8 bytes, big-endian) followed by the Ed25519 signature.

``open_note`` follows the specification: signatures of unknown keys (name and id not both known) are ignored; a
known key's signature that fails to verify rejects the whole note; a note with no verified signature is
rejected.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ED25519 = 0x01
COSIGNATURE_V1 = 0x04
TYPES = (ED25519, COSIGNATURE_V1)
SIGNATURE_DASH = "\u2014 "
COSIGNATURE_HEADER = b"cosignature/v1\n"
#: The most signature lines a note may carry here (the specification asks verifiers to accept at least 16).
MAX_SIGNATURES = 100
MAX_TIMESTAMP = 2 ** 63 - 1


class NoteError(ValueError):
    """A malformed note, key or signature line (the text says which)."""


class InvalidNoteSignature(NoteError):
    """A signature by a known key (its name and id) does not verify: the note must be rejected."""


class UnverifiedNote(NoteError):
    """No signature of the note is by a known key."""


def key_id(name: str, sig_type: int, public: bytes) -> int:
    """``SHA-256(name || 0x0A || type || public key)[:4]`` as a big-endian unsigned integer."""
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([sig_type]) + public).digest()
    return struct.unpack(">I", digest[:4])[0]


def check_key_name(name: str) -> str:
    """A key name: non-empty, no Unicode space, no ``+``, no control character, valid UTF-8 (no lone surrogate,
    which a name decoded with ``surrogateescape`` may hold)."""
    if not name or any(c.isspace() or c == "+" or ord(c) < 0x20 or 0xD800 <= ord(c) <= 0xDFFF for c in name):
        raise NoteError(f"invalid key name {name!r}: it must be non-empty, without spaces or '+'")
    return name


def _b64decode(text: str, what: str) -> bytes:
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise NoteError(f"{what} is not valid base64") from None
    if len(text) != 4 * -(-len(data) // 3):  # Python accepts padding past the last quantum ("AAAA="); RFC 4648 not
        raise NoteError(f"{what} is not valid base64")
    return data


def _public_raw(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def cosigned_message(text: bytes, timestamp: int) -> bytes:
    """What a type 0x04 cosignature signs: ``cosignature/v1``, ``time <timestamp>`` and the note text."""
    return COSIGNATURE_HEADER + b"time %d\n" % timestamp + text


@dataclass(frozen=True)
class Verifier:
    """A public key that can check note signatures: its name, type (0x01 or 0x04) and 32-byte Ed25519 key."""

    name: str
    sig_type: int
    public: bytes

    def __post_init__(self):
        check_key_name(self.name)
        if self.sig_type not in TYPES:
            raise NoteError(f"unsupported signature type 0x{self.sig_type:02x} (0x01 and 0x04 are supported)")
        if len(self.public) != 32:
            raise NoteError("an Ed25519 public key is 32 bytes")

    @property
    def key_id(self) -> int:
        return key_id(self.name, self.sig_type, self.public)

    @property
    def vkey(self) -> str:
        raw = base64.b64encode(bytes([self.sig_type]) + self.public).decode()
        return f"{self.name}+{self.key_id:08x}+{raw}"

    def verify(self, text: bytes, signature: bytes) -> int | None:
        """Check ``signature`` (without its 4-byte key id) over the note ``text``: ``None`` if it fails; for a
        cosignature its timestamp, for an Ed25519 signature 0."""
        key = Ed25519PublicKey.from_public_bytes(self.public)
        if self.sig_type == COSIGNATURE_V1:
            if len(signature) != 8 + 64:
                return None
            timestamp = struct.unpack(">Q", signature[:8])[0]
            if timestamp > MAX_TIMESTAMP:
                return None
            message, signature = cosigned_message(text, timestamp), signature[8:]
        else:
            if len(signature) != 64:
                return None
            timestamp, message = 0, text
        try:
            key.verify(signature, message)
        except InvalidSignature:
            return None
        return timestamp


def parse_vkey(vkey: str) -> Verifier:
    """A verifier key ``<name>+<hex id>+<base64(type || key)>``; the id must be the one the name and key give."""
    parts = vkey.strip().split("+", 2)  # the base64 part may hold '+'
    if len(parts) != 3:
        raise NoteError("a verifier key is <name>+<key id>+<base64 key>")
    name, hex_id, raw = parts
    if len(hex_id) != 8 or any(c not in "0123456789abcdef" for c in hex_id):
        raise NoteError("a verifier key's id is 8 lowercase hex digits")
    data = _b64decode(raw, "the verifier key")
    if len(data) < 2:
        raise NoteError("the verifier key holds no key")
    verifier = Verifier(name, data[0], data[1:])
    if verifier.key_id != int(hex_id, 16):
        raise NoteError(f"the verifier key's id {hex_id} is not the id of its name and key ({verifier.key_id:08x})")
    return verifier


@dataclass(frozen=True)
class Signer:
    """A private key that signs notes: type 0x01 signs the text, type 0x04 cosigns a checkpoint with a time."""

    name: str
    sig_type: int
    private: Ed25519PrivateKey = field(repr=False)

    @classmethod
    def from_seed(cls, name: str, seed: bytes, sig_type: int = ED25519) -> Signer:
        if len(seed) != 32:
            raise NoteError("an Ed25519 seed is 32 bytes")
        return cls(check_key_name(name), sig_type, Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def generate(cls, name: str, sig_type: int = ED25519) -> Signer:
        return cls(check_key_name(name), sig_type, Ed25519PrivateKey.generate())

    @property
    def verifier(self) -> Verifier:
        return Verifier(self.name, self.sig_type, _public_raw(self.private.public_key()))

    @property
    def key_id(self) -> int:
        return self.verifier.key_id

    @property
    def skey(self) -> str:
        seed = self.private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                          serialization.NoEncryption())
        raw = base64.b64encode(bytes([self.sig_type]) + seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.key_id:08x}+{raw}"

    def signature(self, text: bytes, timestamp: int | None = None) -> bytes:
        """``key id || signature`` over ``text`` (for a cosignature, at ``timestamp``, POSIX seconds)."""
        if self.sig_type == COSIGNATURE_V1:
            if timestamp is None or not 0 < timestamp <= MAX_TIMESTAMP:
                raise NoteError("a cosignature needs a positive timestamp")
            body = struct.pack(">Q", timestamp) + self.private.sign(cosigned_message(text, timestamp))
        else:
            body = self.private.sign(text)
        return struct.pack(">I", self.key_id) + body

    def signature_line(self, text: bytes, timestamp: int | None = None) -> str:
        """The note signature line (with its newline) of this key over ``text``."""
        return f"{SIGNATURE_DASH}{self.name} {base64.b64encode(self.signature(text, timestamp)).decode()}\n"


def parse_skey(skey: str) -> Signer:
    """A signer key ``PRIVATE+KEY+<name>+<hex id>+<base64(type || seed)>`` (Go's note format)."""
    parts = skey.strip().split("+", 4)
    if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
        raise NoteError("a signer key is PRIVATE+KEY+<name>+<key id>+<base64 key>")
    name, hex_id, raw = parts[2:]
    data = _b64decode(raw, "the signer key")
    if len(data) != 33:
        raise NoteError("a signer key holds a type byte and a 32-byte seed")
    signer = Signer.from_seed(name, data[1:], data[0])
    if signer.sig_type not in TYPES:
        raise NoteError(f"unsupported signature type 0x{signer.sig_type:02x}")
    if f"{signer.key_id:08x}" != hex_id:
        raise NoteError("the signer key's id is not the id of its name and key")
    return signer


@dataclass(frozen=True)
class Signature:
    """One signature line of a note: the key's name and id and the signature bytes after the id."""

    name: str
    key_id: int
    signature: bytes

    @property
    def line(self) -> str:
        raw = base64.b64encode(struct.pack(">I", self.key_id) + self.signature).decode()
        return f"{SIGNATURE_DASH}{self.name} {raw}\n"


@dataclass
class Note:
    """A parsed note: its ``text`` (bytes, with its final newline) and its signature lines; after ``open_note``,
    ``verified`` holds ``(verifier, timestamp)`` of each signature that verified, ``unverified`` the others."""

    text: bytes
    signatures: list[Signature]
    verified: list[tuple[Verifier, int, Signature]] = field(default_factory=list)
    unverified: list[Signature] = field(default_factory=list)

    def serialize(self) -> bytes:
        return self.text + b"\n" + "".join(s.line for s in self.signatures).encode()


def _check_characters(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise NoteError("a note must be valid UTF-8") from None
    if any(ord(c) < 0x20 and c != "\n" for c in text):
        raise NoteError("a note must not hold control characters other than newline")
    return text


def parse_signature_line(line: str) -> Signature:
    """One ``— <name> <base64>`` line, without its newline."""
    if not line.startswith(SIGNATURE_DASH):
        raise NoteError("a signature line starts with an em dash and a space")
    name, sep, raw = line[len(SIGNATURE_DASH):].partition(" ")
    if not sep:
        raise NoteError("a signature line is '— <key name> <base64 signature>'")
    check_key_name(name)
    data = _b64decode(raw, "a signature")
    if len(data) < 5:
        raise NoteError("a signature holds a 4-byte key id and a signature")
    return Signature(name, struct.unpack(">I", data[:4])[0], data[4:])


def parse_signature_lines(data: bytes) -> list[Signature]:
    """Signature lines, each ending in a newline (a witness's answer, or a note's signature block)."""
    text = _check_characters(data)
    if not text.endswith("\n"):
        raise NoteError("signature lines end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError(f"more than {MAX_SIGNATURES} signatures")
    return [parse_signature_line(line) for line in lines]


def parse_note(data: bytes) -> Note:
    """Split a signed note into its text and signature lines (no signature is checked)."""
    _check_characters(data)
    split = data.rfind(b"\n\n")
    if split < 0:
        raise NoteError("a signed note is a text, a blank line and signature lines")
    text, block = data[:split + 1], data[split + 2:]
    if not block:
        raise NoteError("the note has no signature")
    return Note(text, parse_signature_lines(block))


def open_note(data: bytes | Note, verifiers: list[Verifier]) -> Note:
    """Parse ``data`` and check its signatures against ``verifiers`` (by name and key id; others are ignored).
    ``InvalidNoteSignature`` if a known key's signature fails, ``UnverifiedNote`` if none is by a known key."""
    note = data if isinstance(data, Note) else parse_note(data)
    known = {(v.name, v.key_id): v for v in verifiers}
    note.verified, note.unverified = [], []
    for sig in note.signatures:
        verifier = known.get((sig.name, sig.key_id))
        if verifier is None:
            if sig not in note.unverified:  # a repeated line counts once (as Go's note.Open)
                note.unverified.append(sig)
            continue
        timestamp = verifier.verify(note.text, sig.signature)  # every line of a known key is checked
        if timestamp is None:
            raise InvalidNoteSignature(f"the signature of {sig.name} (key {sig.key_id:08x}) does not verify")
        if all(v != verifier for v, _, _ in note.verified):  # one entry per key
            note.verified.append((verifier, timestamp, sig))
    if not note.verified:
        raise UnverifiedNote("no signature of the note is by a known key")
    return note


def sign_note(text: bytes, signers: list[Signer], timestamp: int | None = None) -> bytes:
    """The signed note of ``text`` (which must end in a newline) by each of ``signers``."""
    _check_characters(text)
    if not text.endswith(b"\n"):
        raise NoteError("a note's text ends with a newline")
    if not signers:
        raise NoteError("a signed note needs at least one signature")
    return text + b"\n" + "".join(s.signature_line(text, timestamp) for s in signers).encode()
