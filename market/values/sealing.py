"""Values at rest: a database dump alone reveals no raw value and no chain output (docs/quality-targets.md#reliability).

Three keys are derived (HKDF-SHA256) from each key of ``settings.LDP_VALUE_KEYS`` (the ring, below):

* the **raw value** an owner entered is a Fernet token (AES-128-CBC + HMAC),
  opened only to show or export it to its owner;
* the **mechanism input** (category index, discretized bit or Bloom bits) is
  sealed so chain extension can open a whole batch in one call: each 16-byte
  block ``owner_id (u32) | attribute_id (u32) | block index (u16) | 6 payload
  bytes`` is encrypted with AES-256 as a single-block permutation.  Blocks are
  unique (one value per owner and attribute), so equal plaintexts never occur
  across values, and the 10 bytes of known redundancy authenticate each block:
  a modified, swapped or forged block decrypts to a random block whose header
  matches with probability 2**-80, and opening it fails;
* the **chain points** (``ChainPoint``: a block's outputs at one epsilon) are sealed with AES-256-GCM, one
  call per row, bound to the row's identity (``seal_points``); so are the outputs a purchase released, one
  call per chunk, bound to the purchase and the chunk (``seal_released``).

**The key ring** (docs/security.md#rotating-the-value-key): ``settings.LDP_VALUE_KEYS``, newest first.  Every
sealed row records the public id of the key that sealed it (``value_key_id``: ``ldpmarket.keys.value_key_id``);
new seals always use the newest key (``newest_key_id``), opening uses the row's key, which must still be in the
ring (``SealBroken`` naming the id otherwise).  ``open_inputs`` over a batch under several keys (a rotation in
progress) opens each key's rows with one call; under one key, the whole batch with one call.
"""
from __future__ import annotations

import base64
import hashlib
import os
import struct
from functools import lru_cache

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from ldpmarket.keys import value_key_id
from ldpmarket.problems import SealBroken

PAYLOAD = 6
HEADER = np.dtype([("owner", "<u4"), ("attribute", "<u4"), ("index", "<u2"), ("payload", "u1", (PAYLOAD,))])
assert HEADER.itemsize == 16


@lru_cache(maxsize=4)
def _keys(secret: str) -> tuple[Fernet, bytes]:
    material = HKDF(algorithm=hashes.SHA256(), length=64, salt=b"ldpmarket-values", info=b"v1").derive(
        secret.encode())
    return Fernet(base64.urlsafe_b64encode(material[:32])), material[32:]


@lru_cache(maxsize=8)
def _ring(secrets: tuple[str, ...]) -> tuple[tuple[int, str], ...]:
    return tuple((value_key_id(secret), secret) for secret in secrets)


def ring() -> tuple[tuple[int, str], ...]:
    """The value keys as ``(id, secret)``, newest first (``settings.LDP_VALUE_KEYS``)."""
    return _ring(tuple(settings.LDP_VALUE_KEYS))


def ring_ids() -> list[int]:
    """The ids of the ring's keys, newest first."""
    return [key_id for key_id, _ in ring()]


def newest_key_id() -> int:
    """The id of the key every new seal uses: record it in the row's ``value_key_id``."""
    return ring()[0][0]


def _secret(key_id: int | None) -> str:
    """The ring's key with this id (``None``: the newest, for what was just sealed), or ``SealBroken``."""
    keys = ring()
    if key_id is None:
        return keys[0][1]
    for kid, secret in keys:
        if kid == key_id:
            return secret
    raise SealBroken(f"sealed under the value key {int(key_id)}, which is not in LDP_VALUE_KEYS (a retired key: put it "
                     f"back in the ring and run rotate_value_key; docs/security.md#rotating-the-value-key)")


def key_groups(key_ids, n: int) -> list[tuple[int | None, np.ndarray | None]]:
    """``[(key id, row indices or None for all rows)]`` of a batch of ``n`` rows whose keys are ``key_ids`` (None or
    one id: every row; else one id per row): one group when all rows share a key (checked by one comparison)."""
    if key_ids is None or np.ndim(key_ids) == 0:
        return [(None if key_ids is None else int(key_ids), None)]
    ids = np.asarray(key_ids, dtype=np.int64).reshape(-1)
    if ids.size != n:
        raise ValueError(f"{ids.size} key ids for {n} sealed rows")
    if n == 0 or (ids == ids[0]).all():
        return [(int(ids[0]) if n else None, None)]
    distinct, which = np.unique(ids, return_inverse=True)
    return [(int(k), np.flatnonzero(which == j)) for j, k in enumerate(distinct.tolist())]


def _binding(owner_id: int, attribute_id: int) -> bytes:
    return f"{int(owner_id)}:{int(attribute_id)}:".encode()


def seal_raw(raw: str, *, owner_id: int, attribute_id: int) -> bytes:
    """A Fernet token of the raw value, bound to its row: the plaintext starts with ``owner:attribute:``; sealed with
    the newest key (``newest_key_id``)."""
    return _keys(_secret(None))[0].encrypt(_binding(owner_id, attribute_id) + raw.encode())


def open_raw(token: bytes, *, owner_id: int, attribute_id: int, key_id: int | None = None) -> str:
    """Open a raw value sealed for this owner and attribute under the key ``key_id`` (the row's ``value_key_id``;
    None: the newest); a token moved from another row does not open."""
    try:
        plain = _keys(_secret(key_id))[0].decrypt(bytes(token))
    except InvalidToken:
        raise SealBroken("the raw value does not open with this key") from None
    prefix = _binding(owner_id, attribute_id)
    if not plain.startswith(prefix):
        raise SealBroken("the raw value was sealed for another value")
    return plain[len(prefix):].decode()


def raw_of(value) -> str | None:
    """The raw value of a ``market.Value`` (None once deleted)."""
    if value.raw_sealed is None:
        return None
    return open_raw(value.raw_sealed, owner_id=value.owner_id, attribute_id=value.attribute_id,
                    key_id=value.value_key_id)


def _aes(key_id: int | None = None):
    return Cipher(algorithms.AES(_keys(_secret(key_id))[1]), modes.ECB())


def blocks_for(payload_bytes: int) -> int:
    return -(-payload_bytes // PAYLOAD)


def seal_inputs(owner_ids, attribute_ids, payload: np.ndarray) -> list[bytes]:
    """Seal a (n, P) uint8 payload per value with the newest key; returns one bytes object per value."""
    payload = np.asarray(payload, dtype=np.uint8)
    n, p = payload.shape
    nb = blocks_for(p)
    blocks = np.zeros((n, nb), dtype=HEADER)
    blocks["owner"] = np.asarray(owner_ids, dtype=np.uint32)[:, None]
    blocks["attribute"] = np.asarray(attribute_ids, dtype=np.uint32)[:, None]
    blocks["index"] = np.arange(nb, dtype=np.uint16)[None, :]
    padded = np.zeros((n, nb * PAYLOAD), dtype=np.uint8)
    padded[:, :p] = payload
    blocks["payload"] = padded.reshape(n, nb, PAYLOAD)
    sealed = _aes().encryptor().update(blocks.tobytes())
    row = nb * 16
    return [sealed[i * row:(i + 1) * row] for i in range(n)]


def open_inputs(sealed: list[bytes] | np.ndarray, owner_ids, attribute_ids, payload_bytes: int,
                key_ids=None) -> np.ndarray:
    """Open sealed inputs, each under its row's key (``key_ids``: one per row, or one for all; None: the newest),
    in one AES call per key; returns (n, payload_bytes) uint8 or raises SealBroken."""
    n, nb = len(sealed), blocks_for(payload_bytes)
    if n == 0:
        return np.zeros((0, payload_bytes), dtype=np.uint8)
    joined = sealed.tobytes() if isinstance(sealed, np.ndarray) else b"".join(sealed)
    if len(joined) != n * nb * 16:
        raise SealBroken("a sealed input has the wrong length")
    groups = key_groups(key_ids, n)
    if len(groups) == 1:
        plain = _aes(groups[0][0]).decryptor().update(joined)
    else:  # a rotation in progress: each key's rows in one call
        rows = np.frombuffer(joined, dtype=np.uint8).reshape(n, nb * 16)
        out = np.empty_like(rows)
        for key_id, at in groups:
            out[at] = np.frombuffer(_aes(key_id).decryptor().update(rows[at].tobytes()),
                                    dtype=np.uint8).reshape(-1, nb * 16)
        plain = out.tobytes()
    blocks = np.frombuffer(plain, dtype=HEADER).reshape(n, nb)
    ok = ((blocks["owner"] == np.asarray(owner_ids, dtype=np.uint32)[:, None])
          & (blocks["attribute"] == np.asarray(attribute_ids, dtype=np.uint32)[:, None])
          & (blocks["index"] == np.arange(nb, dtype=np.uint16)[None, :])).all(axis=1)
    if not ok.all():
        raise SealBroken(f"{int((~ok).sum())} sealed input(s) do not open (first at position {int(np.argmin(ok))})")
    return blocks["payload"].reshape(n, nb * PAYLOAD)[:, :payload_bytes].copy()


# ----------------------------------------------------------------------------------------------- chain points

POINT_NONCE = 12
_POINT_CONTEXT = b"ldpmarket-chain-point-v1"


@lru_cache(maxsize=4)
def _point_key(secret: str) -> AESGCM:
    return AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=b"ldpmarket-chains", info=b"v1").derive(
        secret.encode()))


def _point_binding(attribute_id: int, block_id: int, epsilon: int, present: bytes) -> bytes:
    return _POINT_CONTEXT + struct.pack("<QQQ", int(attribute_id), int(block_id), int(epsilon)) + bytes(present)


def seal_points(outputs: np.ndarray, *, attribute_id: int, block_id: int, epsilon: int, present: bytes) -> bytes:
    """One chain point row's outputs, ``(capacity, width)`` int16, sealed with AES-256-GCM (a random 96-bit nonce,
    then the ciphertext and tag), bound to the row: its attribute, block, micro-epsilon and ``present`` bitmap
    are the associated data, so a row copied to another block or epsilon, or with its bitmap changed, does not
    open (docs/architecture.md#chains-in-blocks)."""
    nonce = os.urandom(POINT_NONCE)
    data = np.ascontiguousarray(outputs, dtype="<i2").tobytes()
    return nonce + _point_key(_secret(None)).encrypt(
        nonce, data, _point_binding(attribute_id, block_id, epsilon, present))


def open_points(sealed: bytes, *, attribute_id: int, block_id: int, epsilon: int, present: bytes,
                width: int, key_id: int | None = None) -> np.ndarray:
    """Open a row sealed by ``seal_points`` under the key ``key_id`` (the row's ``value_key_id``; None: the
    newest): ``(capacity, width)`` int16, or raise ``SealBroken``."""
    sealed = bytes(sealed)
    try:
        key = _point_key(_secret(key_id))
    except SealBroken as exc:
        raise SealBroken(f"the chain point at micro-epsilon {epsilon} of block #{block_id} is {exc}") from None
    try:
        data = key.decrypt(
            sealed[:POINT_NONCE], sealed[POINT_NONCE:], _point_binding(attribute_id, block_id, epsilon, present))
    except (InvalidTag, ValueError):  # (ValueError: too short to hold a nonce)
        raise SealBroken(f"the chain point at micro-epsilon {epsilon} of block #{block_id} does not open "
                         f"(tampered with, moved, or sealed with another key)") from None
    return np.frombuffer(data, dtype="<i2").reshape(-1, width)


_RELEASED_CONTEXT = b"ldpmarket-released-outputs-v1"


def _released_binding(purchase_id: int, seq: int, value_ids: bytes) -> bytes:
    return _RELEASED_CONTEXT + struct.pack("<QQ", int(purchase_id), int(seq)) + hashlib.sha256(value_ids).digest()


def seal_released(outputs: bytes, *, purchase_id: int, seq: int, value_ids: bytes) -> bytes:
    """The outputs of one chunk of a purchase (int16 bytes), sealed with AES-256-GCM (the chain points' key),
    bound to the purchase, the chunk and its value ids: a dump shows no released output either, and a chunk's
    outputs cannot be moved to another purchase or chunk or paired with other values
    (docs/architecture.md#chains-in-blocks)."""
    nonce = os.urandom(POINT_NONCE)
    return nonce + _point_key(_secret(None)).encrypt(
        nonce, bytes(outputs), _released_binding(purchase_id, seq, bytes(value_ids)))


def open_released(sealed: bytes, *, purchase_id: int, seq: int, value_ids: bytes, key_id: int | None = None) -> bytes:
    """The int16 output bytes of a chunk sealed by ``seal_released`` under the key ``key_id`` (the row's
    ``value_key_id``; None: the newest), or ``SealBroken``."""
    sealed = bytes(sealed)
    try:
        key = _point_key(_secret(key_id))
    except SealBroken as exc:
        raise SealBroken(f"the released outputs of chunk {seq} of purchase #{purchase_id} are {exc}") from None
    try:
        return key.decrypt(sealed[:POINT_NONCE], sealed[POINT_NONCE:],
                           _released_binding(purchase_id, seq, bytes(value_ids)))
    except (InvalidTag, ValueError):  # (ValueError: too short to hold a nonce)
        raise SealBroken(f"the released outputs of chunk {seq} of purchase #{purchase_id} do not open") from None


# ----------------------------------------------------------------------------------------------- re-sealing

def reseal_inputs(sealed: list[bytes], owner_ids, attribute_ids, key_ids) -> list[bytes]:
    """The inputs ``sealed`` (each under its row's key, of any attribute) sealed again with the newest key: opened
    and sealed block by block (the padded payload), so the plaintext is the same; ``SealBroken`` if one does not
    open."""
    out: list = [None] * len(sealed)
    owner_ids, attribute_ids = np.asarray(owner_ids, dtype=np.int64), np.asarray(attribute_ids, dtype=np.int64)
    key_ids = np.asarray(key_ids, dtype=np.int64)
    lengths = np.fromiter((len(s) for s in sealed), dtype=np.int64, count=len(sealed))
    for length in np.unique(lengths).tolist():
        at = np.flatnonzero(lengths == length)
        if length % 16:
            raise SealBroken("a sealed input has the wrong length")
        payload = open_inputs([bytes(sealed[i]) for i in at.tolist()], owner_ids[at], attribute_ids[at],
                              length // 16 * PAYLOAD, key_ids[at])
        for i, token in zip(at.tolist(), seal_inputs(owner_ids[at], attribute_ids[at], payload)):
            out[i] = token
    return out
