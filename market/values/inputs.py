"""From an owner's raw value to the mechanism's input, per attribute kind
(docs/mechanisms-reference.md#numeric-values-mean-estimation).

* categorical: the label's index in ``labels`` (m = number of labels);
* binary: 0 or 1 (``labels`` name them, default "0"/"1");
* numeric in [low, high]: discretized once to the bit z = 1 ("high") with
  probability (x - low)/(high - low) (section 5) — z is stored sealed and never
  redrawn, and the chain runs on z;
* string: the Bloom filter bits of (cohort, string), RAPPOR (section 6), with
  the cohort drawn uniformly; the chain runs on every bit.

One-shot kinds (docs/budget-rules.md#one-shot-losses-add-up; no chain, the sealed input is read at
each release):

* categorical under uRR/uRAP: the label's index, followed by the owner's PUM
  tag (index into ``pum_tags``, -1 for none), both int16: the tag is sealed with
  the input, bound to the owner and attribute, and read only at release;
* ternary: the state's index 0, 1, 2 (``labels`` name them, default "0"/"1"/"2");
* graph: the owner's edge weights to the ``num_items`` items, in [-1, 1], as
  float32 (NaN: no edge).  The raw value is ``{item: weight}`` (item label or
  index) or a list of ``num_items`` weights (null: no edge), possibly as JSON text;
* distribution: the owner's probability vector over the labels, as float64.
  The raw value is ``{label: probability}`` or a list, possibly as JSON text;
  non-negative, summing to 1 (within 1e-6; then renormalised).

Chain kinds' inputs are returned as an (n, width) int64 array and as the sealed payload bytes;
``oneshot_inputs`` decodes a one-shot attribute's payload.
"""
from __future__ import annotations

import json
import math
import numbers
from decimal import Decimal, InvalidOperation

import numpy as np

from ldpmarket.numbers import is_ascii_int, parse_ascii_decimal
from ldpmarket.problems import InvalidAttribute, InvalidValue
from market.models import MAX_ITEMS, Attribute
from mechanisms import registry
from mechanisms.numeric import discretize
from mechanisms.random import uniform_below
from mechanisms.rappor import bloom_bits
from mechanisms.release_stats import PredictedError  # noqa: F401 - re-exported: selectors and quotes build it

MAX_STRING = 200
MAX_TAGS = 16
#: How far a distribution's sum may stray from 1 (it is then renormalised).
SUM_TOLERANCE = 1e-6
GRAPH_STATES = registry.GRAPH_STATES  # LPP report states 0, 1, 2


def labels_of(attribute: Attribute) -> list[str]:
    return attribute.domain_labels


def _distinct_texts(items, what: str, *, minimum: int = 0, maximum: int = MAX_ITEMS) -> list[str]:
    if not isinstance(items, list) or not all(isinstance(x, str) and x.strip() for x in items):
        raise InvalidAttribute(f"{what} must be a list of non-empty texts")
    if len(set(items)) != len(items):
        raise InvalidAttribute(f"{what} must not repeat a name")
    if not minimum <= len(items) <= maximum:
        raise InvalidAttribute(f"{what} must have between {minimum} and {maximum} entries")
    return items


def check_attribute(attribute: Attribute) -> None:
    """Raise ``InvalidAttribute`` (plain words) unless the attribute's one-shot fields are usable.

    The database CHECKs fix which kind goes with which mechanism and that the
    sensitive set, item count and prior are present; this checks their contents.
    """
    mech, kind = attribute.mechanism, attribute.kind
    record = registry.REGISTRY.get(mech)
    if record is None or record.is_survey:
        raise InvalidAttribute(f"{mech!r} is not an attribute mechanism")
    if record.uses_sensitive:
        labels = _distinct_texts(attribute.labels, "labels", minimum=2)
        sensitive = _distinct_texts(attribute.sensitive, "the sensitive set", minimum=1)
        missing = [x for x in sensitive if x not in labels]
        if missing:
            raise InvalidAttribute(f"the sensitive set names {missing[0]!r}, which is not one of the labels")
        tags = _distinct_texts(attribute.pum_tags, "pum_tags", maximum=MAX_TAGS)
        if len(labels) + len(tags) > 32767:
            raise InvalidAttribute("too many labels")
    elif record.is_oneshot and kind == Attribute.Kind.CATEGORICAL:  # OUE, OLH
        _distinct_texts(attribute.labels, "labels", minimum=2)
    elif kind == Attribute.Kind.TERNARY:
        if attribute.labels:
            _distinct_texts(attribute.labels, "labels", minimum=3, maximum=3)
    elif kind == Attribute.Kind.GRAPH:
        if not isinstance(attribute.num_items, int) or not 1 <= attribute.num_items <= MAX_ITEMS:
            raise InvalidAttribute(f"a graph attribute needs num_items between 1 and {MAX_ITEMS}")
        if attribute.labels:
            _distinct_texts(attribute.labels, "labels (item names)", minimum=attribute.num_items,
                            maximum=attribute.num_items)
    elif kind == Attribute.Kind.DISTRIBUTION:
        labels = _distinct_texts(attribute.labels, "labels", minimum=2)
        prior = attribute.prior
        if (not isinstance(prior, list) or len(prior) != len(labels)
                or not all(isinstance(x, (int, float, str)) and not isinstance(x, bool) for x in prior)):
            raise InvalidAttribute("the prior must be a list of one probability per label")
        try:
            q = np.array([float(x) for x in prior], dtype=np.float64)
        except ValueError:
            raise InvalidAttribute("the prior must be a list of numbers") from None
        if not np.isfinite(q).all() or (q <= 0).any() or abs(q.sum() - 1.0) > 1e-9:
            raise InvalidAttribute("the prior must be positive and sum to 1")
    if kind not in record.kinds:
        raise InvalidAttribute(f"the mechanism {mech!r} does not apply to {kind!r} attributes")


def sensitive_indices(attribute: Attribute) -> np.ndarray:
    """The sorted label indices of a uRR/uRAP attribute's sensitive set."""
    labels = list(attribute.labels)
    return np.array(sorted(labels.index(x) for x in attribute.sensitive), dtype=np.int64)


def prior_of(attribute: Attribute) -> np.ndarray:
    q = np.array([float(x) for x in attribute.prior], dtype=np.float64)
    return q / q.sum()


def payload_bytes(attribute: Attribute) -> int:
    if attribute.kind == Attribute.Kind.STRING:
        return -(-attribute.num_bits // 8)
    if attribute.record.uses_sensitive:  # the label's index and a PUM tag
        return 4
    if attribute.kind == Attribute.Kind.GRAPH:
        return 4 * attribute.num_items
    if attribute.kind == Attribute.Kind.DISTRIBUTION:
        return 8 * len(attribute.labels)
    return 2


def raw_text(attribute: Attribute, raw) -> str:
    """The text sealed as the owner's raw value: canonical JSON for graph and distribution values."""
    if attribute.kind in (Attribute.Kind.GRAPH, Attribute.Kind.DISTRIBUTION) and not isinstance(raw, str):
        return json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str)
    return str(raw)


def to_inputs(attribute: Attribute, raws: list, rng=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate raw values and compute ``(inputs (n, width), payload (n, P) uint8, cohorts (n,))``."""
    n = len(raws)
    cohorts = np.zeros(n, dtype=np.int64)
    kind = attribute.kind
    if kind in (Attribute.Kind.GRAPH, Attribute.Kind.DISTRIBUTION):
        floats = _graph_weights(attribute, raws) if kind == Attribute.Kind.GRAPH else _distributions(attribute, raws)
        dtype = "<f4" if kind == Attribute.Kind.GRAPH else "<f8"
        payload = np.ascontiguousarray(floats.astype(dtype)).view(np.uint8).reshape(n, payload_bytes(attribute))
        return floats, payload, cohorts
    if kind == Attribute.Kind.TERNARY:
        labels = labels_of(attribute)
        index = {label: i for i, label in enumerate(labels)}
        out = []
        for r in raws:
            if isinstance(r, numbers.Integral) and not isinstance(r, bool) and 0 <= r <= 2:
                out.append(int(r))
            elif isinstance(r, str) and r in index:
                out.append(index[r])
            else:
                raise InvalidValue(f"{r!r} is not one of the three states: {', '.join(labels)}")
        inputs = np.array(out, dtype=np.int64).reshape(n, 1)
        return inputs, inputs.astype("<i2").view(np.uint8).reshape(n, 2), cohorts
    if kind in (Attribute.Kind.CATEGORICAL, Attribute.Kind.BINARY):
        labels = labels_of(attribute)
        index = {label: i for i, label in enumerate(labels)}
        if kind == Attribute.Kind.BINARY:
            index.update({"0": 0, "1": 1, "false": 0, "true": 1, False: 0, True: 1})  # 0 and 1 equal False and True
        inputs = np.fromiter((index.get(r, -1) if not isinstance(r, str) else index.get(r, index.get(r.lower(), -1))
                              for r in raws), dtype=np.int64, count=n)
        if n and inputs.min() < 0:
            bad = raws[int(np.argmin(inputs))]
            raise InvalidValue(f"{bad!r} is not one of the choices: {', '.join(labels)}")
    elif kind == Attribute.Kind.NUMERIC:

        try:
            x = np.array([float(_decimal(r)) for r in raws], dtype=np.float64)
        except (InvalidOperation, ValueError, TypeError):
            raise InvalidValue(f"the value must be a number between {attribute.low} and {attribute.high}, written "
                               f"with the digits 0-9 and a point") from None
        low, high = float(attribute.low), float(attribute.high)
        if n and (not np.isfinite(x).all() or x.min() < low or x.max() > high):
            raise InvalidValue(f"the value must be a number between {attribute.low} and {attribute.high}")
        inputs = discretize(x, low, high, rng).astype(np.int64)
    elif kind == Attribute.Kind.STRING:

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
    if attribute.record.uses_sensitive:  # no PUM tag yet
        payload = np.concatenate([payload, np.full((n, 1), -1, dtype="<i2").view(np.uint8)], axis=1)
    return inputs, payload, cohorts


def from_payload(attribute: Attribute, payload: np.ndarray) -> np.ndarray:
    """Inverse of the payload encoding: (n, width) int64 inputs (chain kinds, uRR/uRAP and ternary)."""
    if attribute.kind == Attribute.Kind.STRING:
        return np.unpackbits(payload, axis=1, count=attribute.num_bits, bitorder="little").astype(np.int64)
    return np.ascontiguousarray(payload[:, :2]).view("<i2").astype(np.int64).reshape(-1, 1)


def pum_tags_of(payload: np.ndarray) -> np.ndarray:
    """The PUM tag (index into ``pum_tags``, -1 for none) of each uRR/uRAP payload."""
    return np.ascontiguousarray(payload[:, 2:4]).view("<i2").astype(np.int64).reshape(-1)


def with_pum_tag(payload: np.ndarray, tag: int) -> np.ndarray:
    """A uRR/uRAP payload with its PUM tag replaced."""
    out = np.array(payload, dtype=np.uint8, copy=True)
    out[:, 2:4] = np.full((out.shape[0], 1), tag, dtype="<i2").view(np.uint8)
    return out


def oneshot_inputs(attribute: Attribute, payload: np.ndarray) -> np.ndarray:
    """A one-shot attribute's inputs from their payloads: (n,) int64 indices (uRR/uRAP, ternary), (n, m)
    float64 weights with NaN for no edge (graph), or (n, L) float64 distributions (renormalised)."""
    n = payload.shape[0]
    if attribute.kind == Attribute.Kind.GRAPH:
        return np.ascontiguousarray(payload).view("<f4").astype(np.float64).reshape(n, attribute.num_items)
    if attribute.kind == Attribute.Kind.DISTRIBUTION:
        p = np.ascontiguousarray(payload).view("<f8").astype(np.float64).reshape(n, len(attribute.labels))
        return p / p.sum(axis=1, keepdims=True)
    return from_payload(attribute, payload).reshape(-1)


def _decimal(x) -> Decimal:
    """A number of a raw value: text must be a plain ASCII decimal, "-" allowed (``ldpmarket.numbers``; not
    "1_000", "+5", "1e3" nor "١٠"); JSON numbers are numbers already."""
    if isinstance(x, str):
        return parse_ascii_decimal(x.strip(), signed=True)
    return Decimal(str(x))


def _json_or(raw):
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            raise InvalidValue("the value must be JSON: an object {name: number} or a list of numbers") from None
    return raw


def _number(x, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (numbers.Real, str, Decimal)):
        raise InvalidValue(f"{what} must be a number")
    try:
        v = float(_decimal(x))
    except (InvalidOperation, ValueError):
        raise InvalidValue(f"{what} must be a number, got {x!r}") from None
    if not math.isfinite(v):
        raise InvalidValue(f"{what} must be a finite number")
    return v


def _by_name(raw, names: list[str], what: str, *, allow_null: bool) -> list:
    """A value given as ``{name or index: entry}`` or as a list of one entry per name."""
    raw = _json_or(raw)
    index = {name: i for i, name in enumerate(names)}
    out: list = [None] * len(names)
    if isinstance(raw, dict):
        for key, entry in raw.items():
            if isinstance(key, str) and key in index:
                i = index[key]
            elif isinstance(key, (str, int)) and not isinstance(key, bool) and is_ascii_int(str(key)) \
                    and len(str(key)) < 10 and int(key) < len(names):  # "²" and "١" are no index
                i = int(key)
            else:
                raise InvalidValue(f"{key!r} is not one of the {what}: {', '.join(names[:10])}"
                                   + (", ..." if len(names) > 10 else ""))
            out[i] = entry
    elif isinstance(raw, list):
        if len(raw) != len(names):
            raise InvalidValue(f"the value must list one entry for each of the {len(names)} {what}")
        out = list(raw)
    else:
        raise InvalidValue(f"the value must be an object {{name: number}} or a list of {len(names)} numbers")
    if not allow_null and any(e is None for e in out):
        out = [0 if e is None else e for e in out]
    return out


def _graph_weights(attribute: Attribute, raws: list) -> np.ndarray:
    names = labels_of(attribute)
    w = np.full((len(raws), len(names)), np.nan, dtype=np.float64)
    for i, raw in enumerate(raws):
        for j, entry in enumerate(_by_name(raw, names, "items", allow_null=True)):
            if entry is None:
                continue
            v = _number(entry, "an edge weight")
            if not -1.0 <= v <= 1.0:
                raise InvalidValue(f"edge weights must lie in [-1, 1], got {v:g}")
            w[i, j] = v
    return w


def _distributions(attribute: Attribute, raws: list) -> np.ndarray:
    names = labels_of(attribute)
    p = np.zeros((len(raws), len(names)), dtype=np.float64)
    for i, raw in enumerate(raws):
        row = np.array([_number(e, "a probability") for e in _by_name(raw, names, "labels", allow_null=False)])
        if (row < 0).any():
            raise InvalidValue("probabilities must not be negative")
        total = row.sum()
        if abs(total - 1.0) > SUM_TOLERANCE:
            raise InvalidValue(f"the probabilities must sum to 1 (they sum to {total:g})")
        p[i] = row / total
    return p
