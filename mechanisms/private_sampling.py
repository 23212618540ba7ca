"""Minimax-optimal locally private sampling with a public prior
(docs/mechanisms-reference.md#private-sampling-with-a-public-prior, seed 002).

An owner summarised by a distribution ``p`` over ``n`` symbols releases **one sample** drawn from
``p @ K``, where ``K`` is an eps-LDP Markov kernel shaped by a public prior ``q``.  Privacy is with
respect to the whole distribution (user-level): for every output ``j`` and all ``p, p'``,
``(pK)_j <= e^eps (p'K)_j`` because every column of ``K`` has ``max <= e^eps min``.  Only the sample
is released (:func:`sample` is the only releasing function); ``p @ K`` itself never is (``K`` is
usually invertible).  Each sample costs eps; k samples cost k * eps.

**The optimal kernel** (Algorithm 1, closed form, spec "The optimal mechanism").  With ``q`` sorted
ascending (``q_1 <= ... <= q_n``, all > 0) and ``E = e^eps``::

    R_t = sum_{k >= t} q_k,  r_t = q_t / R_t,  d_t = E r_t + 1 - r_t,  s_1 = 1,  s_{t+1} = s_t (1 - r_t / d_t)
    K[t, t] = s_t E r_t / d_t,  K[i, t] = s_t r_t / d_t (i > t),  K[t, j] = s_t q_j / (R_t d_t) (j > t)

(``K[n, n] = s_n`` is the ``t = n`` case, ``r_n = 1``), then rows and columns are permuted back to
``q``'s order.  ``K`` is row-stochastic, ``q @ K = q``, every column has ``max <= E min`` (the
``q_min`` column is tight) and the diagonal is non-decreasing in sorted order.  Uniform ``q`` gives
n-ary randomized response (Corollary 2).  The structure gives ``p @ K`` in O(n) per distribution::

    (pK)_t = (s_t r_t / d_t) sum_{i > t} p_i  +  p_t K[t, t]  +  q_t sum_{i < t} p_i s_i / (R_i d_i)

which is what :func:`output_distribution` uses (no n x n matrix).

**Sampling exactly** (docs/mechanisms.md, "Exact sampling: one-shot mechanisms").  :func:`sample` draws
in two stages, one 64-bit word each: a symbol ``i`` from the owner's ``p`` (safely rounded cells; this
rounding is not privacy-relevant), then the output from row ``i`` of :func:`kernel_cells`, an n x n table
of integer cells built from ``eps`` so that every column's max/min ratio is at most a rational lower
bound of ``e^eps``, checked exactly.  The released sample's law is ``p' K'`` for a distribution ``p'``, so
its level is that of the integer kernel ``K'``: at most ``eps`` for every ``p`` (point masses are the
worst case).  Epsilons needing a kernel probability below ``2^-64`` raise ``ValueError`` naming
:func:`max_epsilon`.

**Minimax risk** (Theorem 1, Lemma 1).  For any Markov kernel ``K`` and f-divergence,
``sup_p D_f(p || pK) = max_i g(K_ii)`` with ``g(x) = (1 - x) f(0) + x f(1/x)`` (the worst ``p`` is a
point mass).  For the optimal kernel this is ``Gamma_f = g(K*)``, ``K* = E q_min / (E q_min + 1 - q_min)``.
With ``c = e^-eps (1/q_min - 1)``, so ``K* = 1/(1 + c)``: TV ``c/(1 + c)``, KL ``ln(1 + c)``,
chi-square ``c``, squared Hellinger ``2(1 - 1/sqrt(1 + c))`` -- the forms used here (no overflow).

**Baseline: the relative mollifier** (Husain et al. 2020; spec "Baseline").  Project ``p`` onto
``{r : q e^(-eps/2) <= r <= q e^(eps/2), sum r = 1}`` -- in KL, ``r = clip(p / C, lo, hi)`` with ``C``
solved exactly on the piecewise-linear ``sum r(1/C)`` (plus the edge case the paper misses, see
:func:`mollifier_kl`); in TV, by the small linear program of the paper's Appendix A.8 (scipy HiGHS).

**Divergences.**  ``D_f(p || r) = sum_x r(x) f(p(x) / r(x))`` with ``0 f(0/0) = 0``.  Named ones:
``"tv"`` (``f = |t - 1|/2``), ``"kl"`` (``t ln t``), ``"chi2"`` (``(t - 1)^2``, Pearson) and
``"hellinger"`` (squared Hellinger, ``(sqrt t - 1)^2``, i.e. ``sum (sqrt p - sqrt r)^2`` without 1/2).
A callable ``f`` (convex, ``f(1) = 0``, vectorised, finite at 0) is accepted too.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

import numpy as np

from ._exact import TWO_64, Unrepresentable, as_fraction, exp_lower, largest_honest
from ._sampling import CellTable, draw_categorical, safe_cells
from ._validation import check_eps, check_m
from .rr import rr_matrix

#: How far a probability vector's sum may stray from 1 before it is rejected (it is then renormalised).
SUM_TOLERANCE = 1e-9
#: Cells per vectorised pass when drawing for many distributions at once.

_ALIASES = {
    "tv": "tv", "total_variation": "tv",
    "kl": "kl",
    "chi2": "chi2", "chi-square": "chi2", "chi_square": "chi2", "chisquare": "chi2",
    "hellinger": "hellinger", "squared_hellinger": "hellinger", "hellinger2": "hellinger",
}


# ---------------------------------------------------------------------------------------------- validation

def _check_probabilities(p, name: str, *, n: int | None = None, positive: bool = False,
                         batch: bool = False) -> np.ndarray:
    """A probability vector (or, with ``batch``, a 2-D array of them, one per row), renormalised to sum 1."""
    try:
        arr = np.asarray(p, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of probabilities, got {p!r}") from None
    allowed = (1, 2) if batch else (1,)
    if arr.ndim not in allowed:
        shape = "a one-dimensional array" + (" or a two-dimensional array (one distribution per row)"
                                             if batch else "")
        raise ValueError(f"{name} must be {shape}, got shape {arr.shape}")
    size = arr.shape[-1]
    if size < 2:
        raise ValueError(f"{name} must have at least 2 entries (the alphabet size n >= 2), got {size}")
    if n is not None and size != n:
        raise ValueError(f"{name} must have {n} entries (the size of q's alphabet), got {size}")
    if arr.size and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite probabilities, found {arr[~np.isfinite(arr)].flat[0]}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be non-negative, found {arr.min():g}")
    if positive and arr.size and arr.min() == 0:
        raise ValueError(f"{name} must be strictly positive (q_i > 0): restrict the alphabet to q's support, "
                         f"found a zero at index {int(np.flatnonzero(arr == 0)[0])}")
    sums = arr.sum(axis=-1, keepdims=True)
    bad = np.abs(sums - 1.0) > SUM_TOLERANCE
    if np.any(bad):
        raise ValueError(f"{name} must sum to 1, got a sum of {float(sums[bad].flat[0])!r}")
    return arr / sums


def _check_kernel(K, name: str = "K") -> np.ndarray:
    """A square row-stochastic matrix with non-negative finite entries."""
    try:
        arr = np.asarray(K, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a square matrix of probabilities, got {K!r}") from None
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] < 2:
        raise ValueError(f"{name} must be a square n x n matrix with n >= 2, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or arr.min() < 0:
        raise ValueError(f"{name} must have finite non-negative entries")
    rows = arr.sum(axis=1)
    if np.any(np.abs(rows - 1.0) > SUM_TOLERANCE):
        i = int(np.argmax(np.abs(rows - 1.0)))
        raise ValueError(f"{name} must be row-stochastic, but row {i} sums to {rows[i]!r}")
    return arr


def _divergence_name(divergence) -> str | Callable:
    if callable(divergence):
        return divergence
    if isinstance(divergence, str) and divergence.lower() in _ALIASES:
        return _ALIASES[divergence.lower()]
    raise ValueError(f"divergence must be one of 'tv', 'kl', 'chi2', 'hellinger' or a callable f(t), "
                     f"got {divergence!r}")


# ---------------------------------------------------------------------------------------------- kernel

@dataclass(frozen=True)
class _Parts:
    """The optimal kernel in sorted order, by its three vectors (module docstring)."""

    order: np.ndarray   # sorted position t -> original symbol
    qs: np.ndarray      # q sorted ascending
    below: np.ndarray   # K[i, t] for i > t:  s_t r_t / d_t
    diag: np.ndarray    # K[t, t]:            s_t E r_t / d_t
    right: np.ndarray   # K[t, j] = right[t] * qs[j] for j > t:  s_t / (R_t d_t)


def _parts(q: np.ndarray, eps: float) -> _Parts:
    order = np.argsort(q, kind="stable")
    qs = q[order]
    tail = np.cumsum(qs[::-1])[::-1]                # R_t, summed from the largest entry
    r = qs / tail
    r[-1] = 1.0
    x = math.exp(-eps)
    em1 = math.expm1(eps)
    d = 1.0 + em1 * r                                # d_t = E r_t + 1 - r_t
    keep = r / (x + (1.0 - x) * r)                   # E r_t / d_t without forming E r_t
    shrink = (1.0 + (em1 - 1.0) * r) / d            # 1 - r_t / d_t
    s = np.empty_like(qs)
    s[0] = 1.0
    np.cumprod(shrink[:-1], out=s[1:])
    return _Parts(order=order, qs=qs, below=s * r / d, diag=s * keep, right=s / (tail * d))


def optimal_kernel(q, eps) -> np.ndarray:
    """The minimax-optimal eps-LDP kernel with ``q @ K = q``
    (docs/mechanisms-reference.md#private-sampling-with-a-public-prior): closed form in q's ascending order, permuted
    back, O(n^2).

    ``q`` must be strictly positive (restrict the alphabet to q's support).  ``K[i, j] = Pr(output j | i)``.
    """
    eps = check_eps(eps)
    q = _check_probabilities(q, "q", positive=True)
    pt = _parts(q, eps)
    n = q.size
    i, j = np.indices((n, n))
    Ks = np.where(i > j, pt.below[j], np.where(i < j, pt.right[i] * pt.qs[j], pt.diag[i]))
    K = np.empty_like(Ks)
    K[np.ix_(pt.order, pt.order)] = Ks
    return K


def randomized_response_kernel(n, eps) -> np.ndarray:
    """n-ary randomized response, ``E/(E + n - 1)`` on the diagonal and ``1/(E + n - 1)`` elsewhere: the
    optimal kernel for uniform q (docs/mechanisms-reference.md#private-sampling-with-a-public-prior; paper
    Corollary 2)."""
    return rr_matrix(check_eps(eps), check_m(n))


def output_distribution(p, q, eps) -> np.ndarray:
    """``p @ K`` for the optimal kernel in O(n) per distribution (module docstring); ``p`` 1-D or one
    distribution per row.  Analysis only: the service releases samples, never this vector."""
    eps = check_eps(eps)
    q = _check_probabilities(q, "q", positive=True)
    p = _check_probabilities(p, "p", n=q.size, batch=True)
    return _output_distribution(p, _parts(q, eps))


def _output_distribution(p: np.ndarray, pt: _Parts) -> np.ndarray:
    ps = p[..., pt.order]
    later = np.cumsum(ps[..., ::-1], axis=-1)[..., ::-1]          # sum_{i >= t} p_i
    later = np.concatenate([later[..., 1:], np.zeros_like(later[..., :1])], axis=-1)   # sum_{i > t}
    earlier = np.cumsum(ps * pt.right, axis=-1)                    # sum_{i <= t} p_i right_i
    earlier = np.concatenate([np.zeros_like(earlier[..., :1]), earlier[..., :-1]], axis=-1)
    out_sorted = pt.below * later + pt.diag * ps + pt.qs * earlier
    out = np.empty_like(out_sorted)
    out[..., pt.order] = out_sorted
    return out


def sample(p, q, eps, rng=None):
    """Release one eps-LDP sample from ``p @ K`` with ``K = optimal_kernel(q, eps)`` (spec
    docs/mechanisms-reference.md#private-sampling-with-a-public-prior; the only releasing function; each sample costs
    eps of the owner's budget).

    ``p`` is the owner's distribution over q's alphabet (zeros allowed); a 2-D ``p`` holds one
    distribution per row (one owner each) and gives one sample per row.  Returns an ``int`` for 1-D
    ``p``, else an int64 array.  Randomness: the secure default unless a ``numpy.random.Generator`` is
    passed as ``rng``.
    """
    check_eps(eps)
    q = _check_probabilities(q, "q", positive=True)
    p = _check_probabilities(p, "p", n=q.size, batch=True)
    table = kernel_cells(q, eps)
    symbol = draw_categorical(rng, p)          # stage 1: the owner's own distribution (not privacy-relevant)
    out = table.draw(rng, symbol)              # stage 2: the eps-LDP integer kernel
    return int(out[0]) if p.ndim == 1 else out


# ------------------------------------------------------------------------------------------ integer kernel

def _pad(n: int) -> float:
    """Relative padding of the kernel's off-diagonal cells over their float values: well above the float
    error of :func:`_parts` (a product of n factors: about n 2^-53), so every padded cell is at least its
    exact value."""
    return 8.0 * (n + 16) * 2.0 ** -53


def kernel_cells(q, eps) -> CellTable:
    """The optimal kernel ``K = optimal_kernel(q, eps)`` as exact integer cells (rows sum to 2^64), in q's
    order: what :func:`sample` draws from.

    In q's ascending order, with ``L < e^eps`` a rational lower bound (``mechanisms._exact``) and a relative
    padding ``k = 8 (n + 16) 2^-53`` (well above the float error of the closed form): the kernel is designed
    in floats at a target a hair below, ``ln E_t = ln L - 4k - 2/(2^64 q_min)``; every off-diagonal cell is
    rounded UP from its value padded by ``k`` (so it is at least the exact kernel's at ``E_t``), and the
    diagonal -- every column's maximum -- takes the remainder (so it is at most the exact diagonal).  Every
    column therefore has ``max <= L min``, which is then checked exactly on the integers, with the row sums.
    Cached per (q, eps).  When eps is too small for double precision to resolve the kernel
    (``eps <= 4k/q_min``, e.g. below 1.2e-7 for q_min = 1e-6 and n = 4), every row is q's cells: the sample
    is then independent of p (level 0; the exact kernel is within total variation ``e^eps - 1`` of it).
    Raises ``ValueError`` when a kernel probability would be below 2^-64 (eps above :func:`max_epsilon`).
    """
    eps_f = check_eps(eps)
    q = _check_probabilities(q, "q", positive=True)
    try:
        return _kernel_cells(q.tobytes(), str(as_fraction(eps)), eps_f)
    except Unrepresentable as exc:
        raise ValueError(f"{exc}; the largest epsilon for this prior is {max_epsilon(q)} "
                         "(docs/mechanisms.md)") from None



@lru_cache(maxsize=8)
def _kernel_cells(q_bytes: bytes, eps_key: str, eps_f: float) -> CellTable:
    q = np.frombuffer(q_bytes, dtype=np.float64)
    n = q.size
    pad = _pad(n)
    order = np.argsort(q, kind="stable")
    qs = q[order]
    if eps_f <= 4.0 * pad / float(qs[0]):  # too small for floats to resolve: every row q (level 0)
        return CellTable.from_rows([safe_cells(q)] * n)
    L = exp_lower(Fraction(eps_key))
    # the target: E_t (1 + pad) plus one unit per cell stays below L
    target = math.log(float(L)) - 4.0 * pad - 2.0 / (float(qs[0]) * TWO_64)
    pt = _parts(qs, max(target, 0.0))
    cells_f = np.empty((n, n))
    i, j = np.indices((n, n))
    cells_f[:] = np.where(i > j, pt.below[j], pt.right[i] * pt.qs[j])
    np.fill_diagonal(cells_f, 0.0)
    scaled = cells_f * float(TWO_64)
    smallest = scaled[~np.eye(n, dtype=bool)].min()
    if smallest < 1.0 or pt.diag.min() * float(TWO_64) < 1.0:
        raise Unrepresentable(f"eps = {eps_f:g} is above what the private sampler can sample honestly for this "
                               "prior: a kernel probability would be below 2^-64")
    padded = np.ceil(scaled * (1.0 + pad))
    if padded.max() >= float(TWO_64):  # pragma: no cover - off-diagonal cells are below 1 - K_ii
        raise ValueError("the kernel's off-diagonal cells do not fit 64 bits")
    cells = padded.astype(np.uint64)
    hi = (cells >> np.uint64(32)).sum(axis=1, dtype=np.uint64).tolist()
    lo = (cells & np.uint64(0xFFFFFFFF)).sum(axis=1, dtype=np.uint64).tolist()
    diag = [TWO_64 - ((h << 32) + low) for h, low in zip(hi, lo)]
    if min(diag) < 1:
        raise Unrepresentable(f"eps = {eps_f:g}: the private sampler's kernel cannot be realised with 64-bit "
                               "thresholds for this prior")
    cells[np.arange(n), np.arange(n)] = np.array(diag, dtype=np.uint64)
    col_max, col_min = cells.max(axis=0).tolist(), cells.min(axis=0).tolist()
    a, b = L.numerator, L.denominator
    if any(mx * b > a * mn for mx, mn in zip(col_max, col_min)):
        raise Unrepresentable(f"eps = {eps_f:g}: the private sampler's kernel cannot be realised within eps "
                               "with 64-bit thresholds for this prior")
    out = np.empty_like(cells)
    out[np.ix_(order, order)] = cells                # back to q's order (rows and columns)
    return CellTable.from_array(out)


def max_epsilon(q) -> Decimal:
    """The largest epsilon (6 decimals) at which :func:`kernel_cells` can realise the optimal kernel for the
    prior ``q``: every kernel probability at least 2^-64 (about ``ln(2^64 q_min)`` for a small q_min...
    found by bisection on the cells themselves)."""
    q = _check_probabilities(q, "q", positive=True)
    guess = Decimal(math.floor(math.log(float(TWO_64)) * 2 * 1e6)) / 1000000
    return largest_honest(lambda e: _kernel_cells(q.tobytes(), str(as_fraction(e)), float(e)), guess)


# ---------------------------------------------------------------------------------------------- risk

def _g_named(name: str, x: np.ndarray, off: np.ndarray | None = None) -> np.ndarray:
    """``g(x) = (1 - x) f(0) + x f(1/x)`` for the named divergences, x in (0, 1]; ``off = 1 - x`` when
    known more accurately (a kernel row's off-diagonal mass: no cancellation when x is near 1)."""
    off = 1.0 - x if off is None else off
    if name == "tv":
        return off
    if name == "kl":
        out = -np.log(x)
        near = off < 0.5
        out[near] = -np.log1p(-off[near])
        return out
    if name == "chi2":
        return off / x
    return 2.0 * off / (1.0 + np.sqrt(x))  # squared Hellinger 2(1 - sqrt x)


def _g_callable(f: Callable, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return (1.0 - x) * np.asarray(f(np.zeros_like(x)), dtype=np.float64) + x * np.asarray(f(1.0 / x),
                                                                                             dtype=np.float64)


def minimax_risk(q, eps, divergence) -> float:
    """``Gamma_f(q, eps) = g(K*)``, ``K* = E q_min / (E q_min + 1 - q_min)``
    (docs/mechanisms-reference.md#private-sampling-with-a-public-prior, "Minimax risk (Theorem 1)"): the smallest
    worst-case ``D_f(p || pK)`` over eps-LDP kernels keeping q invariant.  Named divergences use
    ``c = e^-eps (1/q_min - 1)``: TV ``c/(1+c)``, KL ``ln(1+c)``, chi-square ``c``, squared Hellinger
    ``2(1 - 1/sqrt(1+c))``."""
    eps = check_eps(eps)
    q = _check_probabilities(q, "q", positive=True)
    kind = _divergence_name(divergence)
    qmin = float(q.min())
    c = math.exp(-eps) * (1.0 / qmin - 1.0)
    if kind == "tv":
        return c / (1.0 + c)
    if kind == "kl":
        return math.log1p(c)
    if kind == "chi2":
        return c
    if kind == "hellinger":
        root = math.sqrt(1.0 + c)
        return 2.0 * c / (root * (root + 1.0))               # 2(1 - 1/sqrt(1+c)) without cancellation
    return float(_g_callable(kind, np.array([1.0 / (1.0 + c)]))[0])


def worst_case_divergence(K, divergence) -> float:
    """``sup_p D_f(p || pK) = max_i g(K_ii)``, attained at a point mass
    (docs/mechanisms-reference.md#private-sampling-with-a-public-prior, "Minimax risk"; paper Lemma 1), for any
    row-stochastic ``K``."""
    K = _check_kernel(K)
    kind = _divergence_name(divergence)
    diag = np.diag(K).copy()
    if diag.min() == 0 and kind in ("kl", "chi2"):
        return math.inf
    if isinstance(kind, str):
        off = np.sum(K, axis=1, where=~np.eye(K.shape[0], dtype=bool))   # 1 - K_ii without cancellation
        return float(_g_named(kind, diag, off).max())
    with np.errstate(divide="ignore"):
        return float(_g_callable(kind, diag).max())


def kernel_epsilon(K) -> float:
    """The exact LDP level of a kernel: ``max_j ln(max_i K[i, j] / min_i K[i, j])`` over columns with
    positive mass; ``inf`` if a column mixes zero and positive entries (spec README, notation)."""
    K = _check_kernel(K)
    hi, lo = K.max(axis=0), K.min(axis=0)
    used = hi > 0
    if np.any(lo[used] == 0):
        return math.inf
    return float(np.max(np.log(hi[used]) - np.log(lo[used]))) if np.any(used) else 0.0


# ---------------------------------------------------------------------------------------------- mollifier

def _mollifier_bounds(p, q, eps):
    eps = check_eps(eps)
    q = _check_probabilities(q, "q", positive=True)
    p = _check_probabilities(p, "p", n=q.size)
    return p, q, eps, q * math.exp(-eps / 2.0), q * math.exp(eps / 2.0)


def mollifier_kl(p, q, eps) -> np.ndarray:
    """The relative eps-mollifier's KL projection ``argmin_r KL(p || r)`` over
    ``{q e^(-eps/2) <= r <= q e^(eps/2), sum r = 1}``
    (docs/mechanisms-reference.md#private-sampling-with-a-public-prior).

    ``r = min(max(q e^(-eps/2), p / C), q e^(eps/2))`` with ``u = 1/C`` solved exactly: ``sum r`` is
    piecewise linear and non-decreasing in ``u``, so the crossing segment is found by bisection over the
    breakpoints ``lo/p``, ``hi/p`` and ``u`` solved exactly on it (no iteration tolerance).

    Edge case the paper misses: if ``p`` has zeros and even ``u -> inf`` gives ``sum r < 1``
    (``e^(eps/2) q(S) + e^(-eps/2) q(Z) < 1`` for ``S = supp p``, ``Z`` its complement), no ``C`` exists;
    then ``r = q e^(eps/2)`` on ``S`` (KL depends only on ``r`` there, and this is its upper bound) and
    the rest ``1 - e^(eps/2) q(S)`` is spread over ``Z``
    proportionally to ``q``, which stays within the bounds.
    """
    p, q, eps, lo, hi = _mollifier_bounds(p, q, eps)
    if eps == 0:
        return q.copy()
    S = p > 0
    if hi[S].sum() + lo[~S].sum() < 1.0:                       # no normalising constant exists
        r = np.where(S, hi, 0.0)
        rest = 1.0 - hi[S].sum()
        r[~S] = q[~S] * (rest / q[~S].sum())
        return r
    ps, los, his = p[S], lo[S], hi[S]
    base = lo[~S].sum()
    a, b = los / ps, his / ps                                  # u below a: at lo; above b: at hi

    def total(u: float) -> float:
        return base + float(np.clip(ps * u, los, his).sum())

    knots = np.unique(np.concatenate([a, b]))
    lo_k, hi_k = -1, knots.size - 1                            # total(knots[hi_k]) >= 1 (checked above)
    while hi_k - lo_k > 1:                                     # first knot with total >= 1
        mid_k = (lo_k + hi_k) // 2
        if total(knots[mid_k]) >= 1.0:
            hi_k = mid_k
        else:
            lo_k = mid_k
    left = knots[lo_k] if lo_k >= 0 else 0.0
    mid = 0.5 * (left + knots[hi_k])                           # the sets are fixed inside the segment
    free = (a <= mid) & (mid <= b)
    rest = 1.0 - base - los[a > mid].sum() - his[b < mid].sum()
    slope = ps[free].sum()
    u = (rest / slope) if slope > 0 else knots[hi_k]
    u = min(max(u, left), knots[hi_k])
    return np.clip(p * u, lo, hi)


def mollifier_tv(p, q, eps) -> np.ndarray:
    """The relative eps-mollifier's TV projection ``argmin_r TV(p, r)`` over
    ``{q e^(-eps/2) <= r <= q e^(eps/2), sum r = 1}``
    (docs/mechanisms-reference.md#private-sampling-with-a-public-prior), by the paper's Appendix A.8 linear program:
    minimise ``sum z`` with ``z >= p - r``, ``z >= 0``, ``sum r = 1`` and the bounds on ``r`` (scipy HiGHS).  The
    optimum equals ``max(sum (p - hi)_+, sum (lo - p)_+)``."""
    # SciPy's optimizer takes a noticeable time to load and only the optimal-sampler design needs it
    from scipy.optimize import linprog

    p, q, eps, lo, hi = _mollifier_bounds(p, q, eps)
    if eps == 0:
        return q.copy()
    n = p.size
    c = np.concatenate([np.zeros(n), np.ones(n)])
    A_ub = np.hstack([-np.eye(n), -np.eye(n)])                 # -r - z <= -p
    A_eq = np.concatenate([np.ones(n), np.zeros(n)])[None, :]
    bounds = [(float(a), float(min(b, 1.0))) for a, b in zip(lo, hi)] + [(0.0, None)] * n
    res = linprog(c, A_ub=A_ub, b_ub=-p, A_eq=A_eq, b_eq=[1.0], bounds=bounds, method="highs")
    if res.status != 0:  # pragma: no cover - the set is never empty: sum lo <= 1 <= sum hi
        raise ValueError(f"the TV projection's linear program failed: {res.message}")
    r = np.clip(res.x[:n], lo, hi)
    return r / r.sum()


# ---------------------------------------------------------------------------------------------- divergences

def tv(p, r) -> float:
    """Total variation distance ``(1/2) sum |p - r|``."""
    p = _check_probabilities(p, "p")
    r = _check_probabilities(r, "r", n=p.size)
    return float(0.5 * np.abs(p - r).sum())


def kl(p, r) -> float:
    """``KL(p || r) = sum_{p > 0} p ln(p / r)`` (natural log); ``inf`` unless ``p << r``."""
    p = _check_probabilities(p, "p")
    r = _check_probabilities(r, "r", n=p.size)
    S = p > 0
    if np.any(r[S] == 0):
        return math.inf
    return float(np.sum(p[S] * (np.log(p[S]) - np.log(r[S]))))


def f_divergence(p, r, f) -> float:
    """``D_f(p || r) = sum_x r(x) f(p(x) / r(x))`` with ``0 f(0/0) = 0``
    (docs/mechanisms-reference.md#private-sampling-with-a-public-prior).

    ``f`` is a name (``"tv"``, ``"kl"``, ``"chi2"``, ``"hellinger"``; see module docstring) or a callable
    convex ``f`` with ``f(1) = 0``, applied to arrays and finite at 0; a callable needs ``r > 0`` wherever
    ``p > 0`` (otherwise the value depends on ``lim f(t)/t``, which a callable cannot tell).
    """
    kind = _divergence_name(f)
    p = _check_probabilities(p, "p")
    r = _check_probabilities(r, "r", n=p.size)
    if kind == "tv":
        return tv(p, r)
    if kind == "kl":
        return kl(p, r)
    S, R = p > 0, r > 0
    if kind == "chi2":
        if np.any(S & ~R):
            return math.inf
        return float(np.sum((p[R] - r[R]) ** 2 / r[R]))
    if kind == "hellinger":
        return float(np.sum((np.sqrt(p) - np.sqrt(r)) ** 2))
    if np.any(S & ~R):
        raise ValueError("a callable f needs r > 0 wherever p > 0 (p must be absolutely continuous w.r.t. r)")
    vals = np.asarray(kind(p[R] / r[R]), dtype=np.float64)
    return float(np.sum(r[R] * vals))
