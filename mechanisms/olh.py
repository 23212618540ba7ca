"""Optimal local hashing (OLH), Wang et al. 2017, docs/mechanisms-reference.md#oue-and-olh.

Each report hashes the value ``v`` (0..m-1) with a hash function of its own into ``g`` buckets and releases
the bucket by k-ary randomized response over the ``g`` buckets: ``(seed, y)``.  ``g = round(e^eps) + 1``,
the paper's optimum (``e^eps`` rounded half-up, exactly; ``g >= 2``).  Two values give two buckets, so the
report's largest likelihood ratio is k-RR's over ``g``: ``e^eps``.

**Hash family.**  ``h_(a,b)(v) = ((a v + b) mod P) mod g`` with ``P = 2^31 - 1`` (a prime above every
domain size allowed here), ``a`` uniform in 1..P-1 and ``b`` in 0..P-1, drawn for each report; its seed
``a 2^32 + b`` is stored with the bucket, so every report can be re-hashed.  For ``v != v'`` the collision
probability of this (Carter-Wegman) family differs from ``1/g`` by less than ``g / P`` (below ``3 10^-8``
for ``g <= 64``), the estimator's only bias, far below one standard error of any realistic ``n``.  The
arithmetic fits in 64 bits (``a v + b < 2^62 + 2^31``), so hashing is one vectorized numpy expression.

**Exact sampling.**  The bucket is drawn by ``mechanisms.rr.perturb`` (k-RR's integer cells of
``mechanisms.exactness.krr_cells``): the realised level :func:`olh_level` is ``krr_level(eps, g)``, at most
``eps``.

**Estimation.**  ``C_v = #{reports with h(v) = y}``; with ``p`` the realised keep probability and ``q' = 1/g``,
``f_v = (C_v / n - q') / (p - q')`` is unbiased (up to the hash bias above); for a fixed population with true
share ``f`` its variance is ``(f p (1 - p) + (1 - f) q' (1 - q')) / (n (p - q')^2)``, at ``f = 0`` the paper's
``q' (1 - q') / (n (p - q')^2)``, about ``4 e^eps / (n (e^eps - 1)^2)``.
"""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Context, Decimal

import numpy as np

from . import rr
from ._validation import check_m, check_values
from .exactness import Level, check_sampler_eps, exact_epsilon, krr_cells, krr_level
from .random import uniform_below

#: The hash family's prime modulus ``2^31 - 1``; domains are at most this size.
P = (1 << 31) - 1
#: Values scored per block when estimating (bounded memory: reports x values).
BLOCK_CELLS = 1 << 22


def olh_g(eps) -> int:
    """``g = round(e^eps) + 1`` buckets, ``e^eps`` rounded half-up from its 40-digit value (``g >= 2``)."""
    check_sampler_eps(eps)
    e = Context(prec=40).exp(exact_epsilon(eps))
    return int(e.quantize(Decimal(1), rounding=ROUND_HALF_UP)) + 1


def olh_level(eps) -> Level:
    """Realised level of one OLH report: k-RR's over the ``g`` buckets (``krr_level(eps, olh_g(eps))``)."""
    return krr_level(eps, olh_g(eps))


def probabilities(eps) -> tuple[float, float]:
    """``(p, q')``: the realised probability of keeping the true bucket and ``1/g``."""
    g = olh_g(eps)
    cells = krr_cells(eps, g)
    return cells.keep / cells.total, 1.0 / g


def _check_domain(m) -> int:
    m = check_m(m)
    if m > P:
        raise ValueError(f"OLH hashes domains of at most {P} values, got m = {m}")
    return m


def split_seed(seeds) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)`` of each report's seed ``a 2^32 + b``."""
    s = np.asarray(seeds, dtype=np.uint64)
    return s >> np.uint64(32), s & np.uint64(0xFFFFFFFF)


def hash_values(seeds, values, g: int) -> np.ndarray:
    """``((a v + b) mod P) mod g`` for each report's seed and value (broadcasting: reports x values)."""
    a, b = split_seed(seeds)
    v = np.asarray(values, dtype=np.uint64)
    return (((a * v + b) % np.uint64(P)) % np.uint64(g)).astype(np.int64)


def olh_perturb(values, eps, m, rng=None) -> tuple[np.ndarray, np.ndarray]:
    """``(seeds, buckets)`` of one OLH report per value: a fresh hash each, then k-RR over ``g`` buckets."""
    _check_domain(m)
    x = check_values(values, m)
    g = olh_g(eps)
    n = x.shape[0]
    a = uniform_below(rng, P - 1, n).astype(np.uint64) + np.uint64(1)
    b = uniform_below(rng, P, n).astype(np.uint64)
    seeds = (a << np.uint64(32)) | b
    buckets = rr.perturb(hash_values(seeds, x, g), eps, g, rng)
    return seeds, buckets


def support_counts(seeds, buckets, m: int, g: int) -> np.ndarray:
    """``C_v``: how many reports' bucket is their hash of ``v``, for every ``v`` (blocks of reports)."""
    m = _check_domain(m)
    seeds = np.asarray(seeds, dtype=np.uint64)
    y = np.asarray(buckets, dtype=np.int64)
    counts = np.zeros(m, dtype=np.int64)
    domain = np.arange(m, dtype=np.uint64)
    rows = max(1, BLOCK_CELLS // m)
    for start in range(0, seeds.shape[0], rows):
        sl = slice(start, start + rows)
        counts += (hash_values(seeds[sl, None], domain[None, :], g) == y[sl, None]).sum(axis=0)
    return counts


def support_matrix(seeds, buckets, m: int, g: int) -> np.ndarray:
    """(n, m) booleans: report ``i`` supports ``v`` when its hash of ``v`` is its bucket (blocks of reports)."""
    m = _check_domain(m)
    seeds = np.asarray(seeds, dtype=np.uint64)
    y = np.asarray(buckets, dtype=np.int64)
    out = np.empty((seeds.shape[0], m), dtype=bool)
    domain = np.arange(m, dtype=np.uint64)
    rows = max(1, BLOCK_CELLS // m)
    for start in range(0, seeds.shape[0], rows):
        sl = slice(start, start + rows)
        out[sl] = hash_values(seeds[sl, None], domain[None, :], g) == y[sl, None]
    return out


def olh_estimate(seeds, buckets, eps, m) -> np.ndarray:
    """Unbiased frequency of each of the ``m`` values from OLH reports: ``(C_v / n - q') / (p - q')``."""
    n = np.asarray(buckets).shape[0]
    if n < 1:
        raise ValueError("OLH estimation needs at least one report")
    p, q = probabilities(eps)
    share = support_counts(seeds, buckets, m, olh_g(eps)) / n
    return (share - q) / (p - q)


def olh_variance(eps, n: int, f=0.0) -> np.ndarray | float:
    """Variance of :func:`olh_estimate` for ``n`` reports of a fixed population with true share ``f``:
    ``(f p (1 - p) + (1 - f) q' (1 - q')) / (n (p - q')^2)``."""
    p, q = probabilities(eps)
    f = np.asarray(f, dtype=np.float64)
    return (f * p * (1 - p) + (1 - f) * q * (1 - q)) / (n * (p - q) ** 2)
