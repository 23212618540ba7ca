"""Buyer-specific pseudonyms of values (docs/architecture.md#the-path-of-a-purchase).

``pseudonym(buyer, value) = hex(HMAC-SHA256(LDP_PSEUDONYM_KEY, DOMAIN || buyer || value))[:32]``
(128 bits).  Without the key a buyer cannot invert a pseudonym to a value id,
and two buyers' pseudonyms of the same value are unrelated, so buyers cannot
link each other's data; a buyer's own pseudonyms are stable across purchases,
so the outputs of an upgrade (the same value bought again at a higher epsilon)
line up with the earlier ones.

The key is fixed for the life of the database (``make run`` writes it once).
"""
from __future__ import annotations

import hashlib

import numpy as np
from django.conf import settings

DOMAIN = b"ldpmarket/pseudonym/v1\x00"
HEX_CHARS = 32
BLOCK = 64  # SHA-256 block size


def _states(buyer_id: int):
    """HMAC-SHA256's inner and outer hash states with the key and the message prefix already absorbed.

    ``HMAC(K, m) = H((K' ^ opad) || H((K' ^ ipad) || m))`` (RFC 2104, K' the key padded to the block,
    or hashed first when longer); copying a precomputed state per value does exactly that, faster
    than re-keying ``hmac`` for every value.
    """
    key = settings.LDP_PSEUDONYM_KEY.encode()
    if len(key) > BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(BLOCK, b"\0")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
    inner.update(DOMAIN + int(buyer_id).to_bytes(8, "little", signed=True))
    return inner, hashlib.sha256(bytes(b ^ 0x5C for b in key))


def pseudonyms(buyer_id: int, value_ids) -> list[str]:
    """Pseudonyms of many values for one buyer (a chunk): ids packed by numpy, two hash-state copies each."""
    raw = np.ascontiguousarray(np.asarray(value_ids, dtype="<i8").reshape(-1)).tobytes()
    inner0, outer0 = _states(buyer_id)
    out = []
    for i in range(0, len(raw), 8):
        inner = inner0.copy()
        inner.update(raw[i:i + 8])
        outer = outer0.copy()
        outer.update(inner.digest())
        out.append(outer.digest()[:HEX_CHARS // 2].hex())
    return out


def pseudonym(buyer_id: int, value_id: int) -> str:
    return pseudonyms(buyer_id, [value_id])[0]
