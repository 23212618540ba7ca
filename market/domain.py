"""From an owner's raw value to the mechanism's input, per attribute kind (spec gradual-release.md 5-6).

* categorical: the label's index in ``labels`` (m = number of labels);
* binary: 0 or 1 (``labels`` name them, default "0"/"1");
* numeric in [low, high]: discretized once to the bit z = 1 ("high") with
  probability (x - low)/(high - low) (section 5) — z is stored sealed and never
  redrawn, and the chain runs on z;
* string: the Bloom filter bits of (cohort, string), RAPPOR (section 6), with
  the cohort drawn uniformly; the chain runs on every bit.

Inputs are returned as an (n, width) int64 array and as the sealed payload bytes.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation

import numpy as np

from mechanisms.random import uniform_below

from .models import Attribute

MAX_STRING = 200


class InvalidValue(ValueError):
    pass


def labels_of(attribute: Attribute) -> list[str]:
    if attribute.kind == Attribute.Kind.BINARY:
        return list(attribute.labels) if len(attribute.labels) == 2 else ["0", "1"]
    return list(attribute.labels)


def payload_bytes(attribute: Attribute) -> int:
    return -(-attribute.num_bits // 8) if attribute.kind == Attribute.Kind.STRING else 2


def to_inputs(attribute: Attribute, raws: list, rng=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate raw values and compute ``(inputs (n, width), payload (n, P) uint8, cohorts (n,))``."""
    n = len(raws)
    cohorts = np.zeros(n, dtype=np.int64)
    kind = attribute.kind
    if kind in (Attribute.Kind.CATEGORICAL, Attribute.Kind.BINARY):
        labels = labels_of(attribute)
        index = {label: i for i, label in enumerate(labels)}
        if kind == Attribute.Kind.BINARY:
            index.update({"0": 0, "1": 1, "false": 0, "true": 1, False: 0, True: 1, 0: 0, 1: 1})
        inputs = np.fromiter((index.get(r, -1) if not isinstance(r, str) else index.get(r, index.get(r.lower(), -1))
                              for r in raws), dtype=np.int64, count=n)
        if n and inputs.min() < 0:
            bad = raws[int(np.argmin(inputs))]
            raise InvalidValue(f"{bad!r} is not one of the choices: {', '.join(labels)}")
    elif kind == Attribute.Kind.NUMERIC:
        from mechanisms.numeric import discretize

        try:
            x = np.array([float(Decimal(str(r))) for r in raws], dtype=np.float64)
        except (InvalidOperation, ValueError, TypeError):
            raise InvalidValue("the value must be a number") from None
        low, high = float(attribute.low), float(attribute.high)
        if n and (not np.isfinite(x).all() or x.min() < low or x.max() > high):
            raise InvalidValue(f"the value must be a number between {attribute.low} and {attribute.high}")
        inputs = discretize(x, low, high, rng).astype(np.int64)
    elif kind == Attribute.Kind.STRING:
        from mechanisms.rappor import bloom_bits

        if any(not isinstance(r, str) or not r or len(r) > MAX_STRING for r in raws):
            raise InvalidValue(f"the value must be a non-empty text of at most {MAX_STRING} characters")
        cohorts = uniform_below(rng, attribute.num_cohorts, n) if n else cohorts
        bits = bloom_bits(list(raws), cohorts, attribute.num_bits, attribute.num_hashes)
        inputs = np.asarray(bits, dtype=np.int64)
        payload = np.packbits(np.asarray(bits, dtype=np.uint8), axis=1, bitorder="little")
        return inputs, payload, cohorts
    else:  # pragma: no cover - the database constrains kind
        raise InvalidValue(f"unknown attribute kind {kind!r}")
    inputs = inputs.reshape(n, 1)
    payload = inputs.astype("<i2").view(np.uint8).reshape(n, 2)
    return inputs, payload, cohorts


def from_payload(attribute: Attribute, payload: np.ndarray) -> np.ndarray:
    """Inverse of the payload encoding: (n, width) int64 inputs."""
    if attribute.kind == Attribute.Kind.STRING:
        return np.unpackbits(payload, axis=1, count=attribute.num_bits, bitorder="little").astype(np.int64)
    return np.ascontiguousarray(payload[:, :2]).view("<i2").astype(np.int64).reshape(-1, 1)
