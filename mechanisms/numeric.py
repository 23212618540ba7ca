"""Numeric values with known bounds, docs/mechanisms-reference.md#numeric-values-mean-estimation (paper Sec. 5.2).

A value ``x`` in [l, h] is **discretized once** to ``z = h`` with probability
``(x - l)/(h - l)``, else ``z = l``, so ``E[z] = x``.  The stored ``z`` (never
redrawn: redrawing would leak more about ``x``) is then released by a binary
chain; :func:`mechanisms.estimators.mean` undoes both steps (Eq. 70).

The draw compares a uniform word ``u`` with the integer threshold
``T = floor(p 2^64)``: ``z = h`` iff ``u < T`` (probability ``T / 2^64``,
within 2^-64 of ``p``), except that ``p = 1`` (``x = h``) is always ``h``
and ``p = 0`` (``x = l``) never is.
"""
from __future__ import annotations

import math
import numbers
from decimal import Decimal

import numpy as np

from .random import words

_TWO_64 = float(2**64)


def check_bounds(low, high) -> tuple[float, float]:
    """Return ``(low, high)`` as floats after checking ``low < high``, both and ``high - low`` finite."""
    out = []
    for name, b in (("low", low), ("high", high)):
        if isinstance(b, bool) or not isinstance(b, (numbers.Real, Decimal)):
            raise ValueError(f"{name} must be a real number, got {b!r}")
        b = float(b)
        if not math.isfinite(b):
            raise ValueError(f"{name} must be finite, got {b}")
        out.append(b)
    lo, hi = out
    if not lo < hi:
        raise ValueError(f"low must be less than high, got low = {lo:g}, high = {hi:g}")
    if not math.isfinite(hi - lo):
        raise ValueError(f"the range high - low must be finite, got low = {lo:g}, high = {hi:g}")
    return lo, hi


def check_numeric_values(values, low: float, high: float, name: str = "values") -> np.ndarray:
    """Return ``values`` as a 1-D float64 array after checking each is finite and inside [low, high]."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a one-dimensional array, got shape {arr.shape}")
    real = np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    if arr.dtype == bool or not real:
        raise ValueError(f"{name} must be real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.size == 0:
        return arr
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite numbers, found {arr[~np.isfinite(arr)][0]}")
    lo, hi = arr.min(), arr.max()
    if lo < low or hi > high:
        bad = lo if lo < low else hi
        raise ValueError(f"{name} must lie in [low, high] = [{low:g}, {high:g}], found {bad:g}")
    return arr


def high_probability(values, low, high) -> np.ndarray:
    """``Pr(z = h) = (x - l)/(h - l)`` for every value, exactly 0 at ``l`` and 1 at ``h``."""
    low, high = check_bounds(low, high)
    x = check_numeric_values(values, low, high)
    return np.clip((x - low) / (high - low), 0.0, 1.0)


def discretize(values, low, high, rng=None) -> np.ndarray:
    """Draw ``z`` for every value: ``True`` (= high) w.p. ``(x - l)/(h - l)``, else ``False`` (= low).

    One uniform word per value from ``rng`` (secure default when ``None``).
    """
    p = high_probability(values, low, high)
    u = words(rng, p.shape[0])
    # floor(p 2^64) is exact (scaling by a power of two) and < 2^64 for every p < 1.
    below_one = p < 1.0
    t = np.floor(np.where(below_one, p, 0.0) * _TWO_64).astype(np.uint64)
    return np.where(below_one, u < t, True)
