"""Optimized unary encoding (OUE), Wang et al. 2017, docs/mechanisms-reference.md#oue-and-olh.

A value ``v`` in 0..m-1 is released as m bits: bit ``v`` is 1 with probability ``p = 1/2``, every other bit
is 1 with probability ``q = 1 / (e^eps + 1)``, independently.  Two values differ in two bits, so the
release's largest likelihood ratio is ``p (1 - q) / ((1 - p) q) = (1 - q) / q = e^eps``.

**Exact sampling.**  A bit is 1 when a uniform 64-bit word is below its threshold: ``2^63`` for the true bit
(``p = 1/2`` exactly) and ``Q = ceil(2^64 / (1 + L))`` for the others, where ``L <= e^eps`` is an exact
rational lower bound (``mechanisms._exact.exp_lower``).  ``Q / 2^64 >= 1 / (1 + e^eps)``, so the realised
ratio ``(2^64 - Q) / Q <= L <= e^eps``: never above the charge; :func:`oue_level` computes it from ``Q``.

**Estimation.**  With ``C_v`` the reports whose bit ``v`` is 1 and ``q`` the realised ``Q / 2^64``,
``f_v = (C_v / n - q) / (p - q)`` is unbiased; for a fixed population with true share ``f`` its variance is
``(f p (1 - p) + (1 - f) q (1 - q)) / (n (p - q)^2)``, at ``f = 0`` the paper's ``4 e^eps / (n (e^eps - 1)^2)``
(with the ideal ``q``).
"""
from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import numpy as np

from ._exact import TWO_64, ceil_frac, exp_lower
from ._validation import check_m, check_values
from .exactness import Level, check_sampler_eps, exact_epsilon
from .random import words

#: Threshold of the true bit: ``p = 2^63 / 2^64 = 1/2`` exactly.
TRUE_THRESHOLD = 1 << 63
#: Bits drawn per block (bounded memory for wide domains).
BLOCK_BITS = 1 << 22


@lru_cache(maxsize=1 << 12)
def _other_threshold(eps) -> int:
    return ceil_frac(Fraction(TWO_64) / (1 + exp_lower(eps)))


def other_threshold(eps) -> int:
    """``Q = ceil(2^64 / (1 + L))``: an other bit is 1 for ``Q`` of the ``2^64`` words (module docstring)."""
    check_sampler_eps(eps)
    return _other_threshold(exact_epsilon(eps))


def probabilities(eps) -> tuple[float, float]:
    """``(p, q)`` as released: ``p = TRUE_THRESHOLD / 2^64 = 1/2`` and ``q = Q / 2^64``."""
    return TRUE_THRESHOLD / TWO_64, other_threshold(eps) / TWO_64


def oue_level(eps) -> Level:
    """Realised level of one OUE report from the two thresholds: ``p (1 - q) / ((1 - p) q)``, with ``p = 1/2``
    ``(2^64 - Q) / Q`` (exactly; at most ``e^eps``)."""
    p, q = Fraction(TRUE_THRESHOLD, TWO_64), Fraction(other_threshold(eps), TWO_64)
    return Level(p * (1 - q) / ((1 - p) * q))


def oue_perturb(values, eps, m, rng=None) -> np.ndarray:
    """One ``(n, m)`` uint8 bit matrix of OUE reports (module docstring), one word per bit, block by block."""
    m = check_m(m)
    x = check_values(values, m)
    q = np.uint64(other_threshold(eps))
    n = x.shape[0]
    out = np.empty((n, m), dtype=np.uint8)
    rows = max(1, BLOCK_BITS // m)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        u = words(rng, (stop - start) * m).reshape(stop - start, m)
        bits = u < q
        idx = np.arange(stop - start)
        bits[idx, x[start:stop]] = u[idx, x[start:stop]] < np.uint64(TRUE_THRESHOLD)
        out[start:stop] = bits
    return out


def oue_estimate(reports, eps) -> np.ndarray:
    """Unbiased frequency of each value from ``(n, m)`` OUE bit reports: ``(C_v / n - q) / (p - q)``."""
    bits = np.asarray(reports)
    if bits.ndim != 2 or bits.shape[0] < 1:
        raise ValueError("reports must be an (n, m) bit matrix with n >= 1")
    p, q = probabilities(eps)
    share = bits.sum(axis=0, dtype=np.int64) / bits.shape[0]
    return (share - q) / (p - q)


def oue_variance(eps, n: int, f=0.0) -> np.ndarray | float:
    """Variance of :func:`oue_estimate` for ``n`` reports of a fixed population with true share ``f``:
    ``(f p (1 - p) + (1 - f) q (1 - q)) / (n (p - q)^2)``."""
    p, q = probabilities(eps)
    f = np.asarray(f, dtype=np.float64)
    return (f * p * (1 - p) + (1 - f) * q * (1 - q)) / (n * (p - q) ** 2)
