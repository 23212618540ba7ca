"""Utility-optimized local differential privacy (ULDP), docs/mechanisms-reference.md#utility-optimized-ldp-urr-urap-pum
(Murakami and Kawamoto).

Only some values are sensitive.  With a domain ``0..k-1``, a sensitive set ``S`` (size ``s``),
``N`` the rest, ``e = exp(eps)`` and ``h = exp(eps/2)``, a mechanism ``Q`` is (S, Y_P, eps)-ULDP
(spec "Definition") when

1. every output outside the protected set ``Y_P`` (an *invertible* output) is produced by exactly
   one input, a non-sensitive one (so it reveals that input, and sensitive inputs never reach it);
2. on every protected output ``y``, ``Q(y|x) <= e^eps Q(y|x')`` for all inputs ``x, x'``.

eps-LDP is ULDP with ``Y_P = Y``; sequential composition adds the epsilons (Prop. 1).

**uRR** (Def. 3), outputs = inputs, ``c1 = e/(s+e-1)``, ``c2 = 1/(s+e-1)``, ``c3 = (e-1)/(s+e-1)``:
a sensitive ``x`` is kept w.p. ``c1``, else uniform over ``S \\ {x}``; a non-sensitive ``x`` is kept
w.p. ``c3``, else uniform over ``S``.  ``s = k`` is k-RR, ``s = 0`` the identity, ``k = 2, s = 1``
Mangat's RR with ``p = e^-eps``.  Estimator (Eq. 35), ``v = (s+e-1)/(e-1)``:
``p_hat = v m_hat - 1/(e-1)`` on S, ``v m_hat`` on N.

**uRAP** (Def. 4), a bit vector of length k, ``theta`` (default ``h/(h+1)``),
``d1 = theta/((1-theta)e + theta)``, ``d2 = ((1-theta)e + theta)/e``: sensitive bits are set
w.p. ``theta`` (the input's own) or ``d1`` (all others); a non-sensitive input sets its own bit
w.p. ``1 - d2`` and no other non-sensitive bit.  A report with two or more non-sensitive bits is
malformed.  Estimator (Eq. 41, general theta): ``p_hat_j = (m_hat_j - d1)/(theta - d1)`` on S,
``m_hat_j/(1 - d2)`` on N, which for the default theta is
``((h+1) m_hat_j - 1)/(h-1)`` and ``h m_hat_j/(h-1)``.  ``s = k`` is RAPPOR with that theta.

**PUM** (Sec. 5): each user maps a value of her secret tagged set k to a bot ``⊥k`` (value
``k_domain + k``), then a common uRR/uRAP over the extended domain with ``S`` extended by the bots
runs; ``p_hat(x) = r_hat(x) + sum_k r_hat(⊥k) pi_hat_k(x)`` (Eq. 21).

Post-processing: ``threshold_estimate`` (emp+thr, Bonferroni) and ``em_estimate`` (EM, the
maximum-likelihood estimate on the simplex).  Losses: ``expected_l2`` (Props. 15/18, exact) and
``expected_l1`` (Props. 4/7, asymptotic).  ``eps`` must be > 0 everywhere (the estimators divide
by ``e - 1``); every formula is evaluated in forms that stay finite up to eps = 700.

Randomness comes only from :mod:`mechanisms.random` (secure by default, a numpy ``Generator``
when passed).  Every draw compares a uniform 64-bit word with **integer cells** built exactly from
``eps`` (:func:`urr_cells`, :func:`urap_cells`; docs/mechanisms.md, "Exact sampling: one-shot
mechanisms"): small cells rounded up, the large ones take the remainder, around a rational lower bound
``L < e^eps``, so that the realised ULDP level of what is sampled is at most ``eps`` (the exact eps the
caller passes: a ``Decimal`` or ``int`` at its decimal value, a float at its binary value).  The
``*_matrix`` and estimator functions use the ideal real probabilities, which differ from the cells by
less than ``2^-64`` each.  Parameters whose cells cannot be represented honestly (an ideal probability
below ``2^-64``, or too close to 1 to separate) raise ``ValueError`` naming the limit
(:func:`urr_max_epsilon`, :func:`urap_max_epsilon`).
"""
from __future__ import annotations

import math
import numbers
from decimal import ROUND_FLOOR, Decimal
from fractions import Fraction
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

from ._exact import (
    TWO_64,
    Unrepresentable,
    as_fraction,
    ceil_frac,
    exp_lower,
    exp_upper,
    largest_honest,
    ln_floor_places,
)
from ._validation import check_eps, check_m, check_values
from .random import words

#: Report classes returned by :func:`classify_report`.
PROTECTED, INVERTIBLE, MALFORMED = 0, 1, 2

#: uRAP rows drawn per pass: bounds the temporary words to about 2**21 (16 MiB).
_WORDS_PER_BLOCK = 1 << 21

_MECHANISMS = ("urr", "urap", "none")

#: uRAP EM tabulates all 2^s patterns of sensitive bits up to this many sensitive values.
_TABLE_BITS = 20


# ---------------------------------------------------------------------------------------------- validation

def _check_sensitive(sensitive, k: int, name: str = "sensitive") -> tuple[np.ndarray, np.ndarray]:
    """``(indices, mask)``: the sorted sensitive values and a length-k boolean mask.

    Accepts an iterable of distinct values in 0..k-1 (possibly empty) or a boolean mask of length k.
    """
    if sensitive is None:
        raise ValueError(f"{name} must be a collection of values in 0..{k - 1} (use [] for none)")
    if isinstance(sensitive, (set, frozenset)):
        sensitive = sorted(sensitive)
    arr = np.asarray(sensitive)
    if arr.dtype == bool:
        if arr.shape != (k,):
            raise ValueError(f"a boolean {name} mask must have shape ({k},), got {arr.shape}")
        return np.flatnonzero(arr).astype(np.int64), arr.copy()
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a one-dimensional collection of values, got shape {arr.shape}")
    idx = check_values(arr, k, name)
    uniq = np.unique(idx)
    if uniq.size != idx.size:
        dup = idx[np.flatnonzero(np.bincount(idx) > 1)[0]] if idx.size else None
        raise ValueError(f"{name} must not contain duplicates, found {dup} more than once")
    mask = np.zeros(k, dtype=bool)
    mask[uniq] = True
    return uniq, mask


def _check_theta(theta) -> float:
    """A caller's uRAP keep probability: a number strictly inside (0, 1)."""
    if isinstance(theta, bool) or not isinstance(theta, (numbers.Real, Decimal)):
        raise ValueError(f"theta must be a real number in (0, 1), got {theta!r}")
    theta = float(theta)
    if not 0.0 < theta < 1.0:
        raise ValueError(f"theta must lie strictly between 0 and 1, got {theta!r}")
    return theta


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"n (the number of users) must be a positive integer, got {n!r}")
    return int(n)


def _check_distribution(p, name: str = "p") -> np.ndarray:
    try:
        arr = np.asarray(p, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numbers, got {p!r}") from None
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"{name} must be a one-dimensional distribution over at least 2 values, "
                         f"got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or (arr < 0).any():
        raise ValueError(f"{name} must contain finite non-negative probabilities")
    if abs(arr.sum() - 1.0) > 1e-9:
        raise ValueError(f"{name} must sum to 1, got {arr.sum():.12g}")
    return arr


def _check_estimates(p_hat, name: str = "p_hat") -> np.ndarray:
    try:
        arr = np.asarray(p_hat, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numbers, got {p_hat!r}") from None
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"{name} must be a one-dimensional array of at least 2 estimates, "
                         f"got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite numbers")
    return arr


def _check_mechanism(mechanism) -> str:
    if mechanism not in _MECHANISMS:
        raise ValueError(f"mechanism must be one of {', '.join(_MECHANISMS)}, got {mechanism!r}")
    return mechanism


def _check_bit_reports(bits, name: str = "bits") -> np.ndarray:
    """uRAP reports: a 2-D (n, k) array of booleans or 0/1, n >= 1, k >= 2."""
    arr = np.asarray(bits)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a two-dimensional (reports, k) array, got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} must not be empty: there is nothing to estimate from")
    check_m(arr.shape[1])
    if arr.dtype != bool:
        if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
            raise ValueError(f"{name} must contain booleans or 0/1, got dtype {arr.dtype}")
        if not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{name} must contain only booleans or 0/1")
        arr = arr.astype(bool)
    return arr


# ---------------------------------------------------------------------------------------------- uRR

def _urr_probabilities(s: int, eps: float) -> tuple[float, float, float]:
    """``(c1, c2, c3)`` in overflow-free form: with ``z = e^-eps``, ``B = 1 + (s-1) z``,
    ``c1 = 1/B``, ``c2 = z/B``, ``c3 = (1-z)/B``.  For ``s = 0`` (the identity) they are ``(1, 0, 1)``."""
    if s == 0:
        return 1.0, 0.0, 1.0
    z = math.exp(-eps)
    b = 1.0 + (s - 1) * z
    return 1.0 / b, z / b, -math.expm1(-eps) / b


def urr_matrix(k, sensitive, eps) -> np.ndarray:
    """The (k, k) uRR matrix ``Q[x, y]`` of Def. 3 (spec "uRR"): rows of sensitive inputs are
    k-RR over S (``c1`` on the diagonal, ``c2`` elsewhere in S); rows of non-sensitive inputs put
    ``c2`` on each sensitive output and ``c3`` on themselves; every other entry is 0."""
    k = check_m(k)
    eps = check_eps(eps, positive=True)
    idx, mask = _check_sensitive(sensitive, k)
    c1, c2, c3 = _urr_probabilities(idx.size, eps)
    q = np.zeros((k, k))
    q[:, idx] = c2
    q[idx, idx] = c1
    non = np.flatnonzero(~mask)
    q[non, non] = c3
    return q


class URRCells(NamedTuple):
    """uRR's integer cells (probability times 2^64), shared by :func:`urr_perturb` and the exact level
    (``mechanisms.exactness_oneshot.urr_level``): a sensitive input is kept with ``c1`` and moved to each
    other sensitive value with ``c2``; a non-sensitive input moves to each sensitive value with ``c2`` and
    is kept with ``c3``.  ``c1 + (s-1) c2 = c3 + s c2 = 2^64``."""

    s: int
    c1: int
    c2: int
    c3: int


def urr_cells(s, eps) -> URRCells:
    """uRR's cells for ``s`` sensitive values at ``eps`` (exact value; > 0).

    ``c2 = ceil(2^64/(L + s - 1))`` with ``L < e^eps`` a rational lower bound (``mechanisms._exact``), the
    others take the remainders: ``c1 = 2^64 - (s-1) c2 <= L c2``, so every protected column's ratio
    ``c1/c2`` is below ``e^eps``.  ``s = 0`` is the identity (nothing drawn).  Raises ``ValueError`` when
    ``c2`` would be below 2^-64 (eps above :func:`urr_max_epsilon`) or when eps is too small to separate
    ``c1`` from ``c2``.
    """
    if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0:
        raise ValueError(f"s (the number of sensitive values) must be a non-negative integer, got {s!r}")
    s = int(s)
    eps_f = check_eps(eps, positive=True)
    if s == 0:
        return URRCells(0, TWO_64, 0, TWO_64)
    ideal = Fraction(TWO_64) / (exp_lower(eps) + s - 1)
    if ideal < 1:
        raise ValueError(f"eps = {eps_f:g} is above what uRR with {s} sensitive value(s) can sample honestly: "
                         f"c2 = 1/(s + e^eps - 1) would be below 2^-64; the largest epsilon is "
                         f"{urr_max_epsilon(s)} (docs/mechanisms.md)")
    c2 = ceil_frac(ideal)
    c1, c3 = TWO_64 - (s - 1) * c2, TWO_64 - s * c2
    if c3 < 1 or c1 < c2:
        raise ValueError(f"eps = {eps_f:g} is too small for uRR with {s} sensitive values to be realised with "
                         "64-bit thresholds (it cannot separate keeping from moving)")
    return URRCells(s, c1, c2, c3)


def urr_max_epsilon(s) -> Decimal:
    """The largest epsilon (6 decimals) at which :func:`urr_cells` can sample uRR with ``s >= 1``
    sensitive values: ``c2 = 1/(s + e^eps - 1) >= 2^-64``, i.e. ``eps <= ln(2^64 - s + 1)`` (about 44.36)."""
    return largest_honest(lambda e: urr_cells(s, e), ln_floor_places(TWO_64 - s + 1))


def urr_cell_matrix(k, sensitive, eps) -> list[list[int]]:
    """The (k, k) integer cells ``W[x][y]`` that :func:`urr_perturb` samples (probability ``W/2^64``),
    from :func:`urr_cells`: for the exact level."""
    k = check_m(k)
    idx, mask = _check_sensitive(sensitive, k)
    cells = urr_cells(int(idx.size), eps)
    sens = set(idx.tolist())
    out = []
    for x in range(k):  # analysis only: k rows of k Python integers
        if x in sens:
            out.append([cells.c1 if y == x else cells.c2 if y in sens else 0 for y in range(k)])
        else:
            out.append([cells.c2 if y in sens else cells.c3 if y == x else 0 for y in range(k)])
    return out


def urr_perturb(values, k, sensitive, eps, rng=None) -> np.ndarray:
    """uRR of every value (Def. 3, spec "uRR"), one uniform word ``u`` per value.

    With the cells of :func:`urr_cells` (``s`` sensitive values in increasing order): a sensitive ``x`` (at
    position ``a`` of S) moves for ``u < (s-1) c2`` to the ``j``-th other sensitive value, ``j = u // c2``
    (skipping ``a``), and is kept otherwise (``c1``); a non-sensitive ``x`` moves for ``u < s c2`` to the
    ``(u // c2)``-th sensitive value and is kept otherwise (``c3``).  Every protected column's ratio is
    ``c1/c2 < e^eps``; one numpy pass per block.
    """
    k = check_m(k)
    check_eps(eps, positive=True)
    idx, mask = _check_sensitive(sensitive, k)
    x = check_values(values, k)
    s = idx.size
    if s == 0:  # the identity: nothing is protected, nothing is drawn
        return x.copy()
    cells = urr_cells(s, eps)
    pos = np.full(k, -1, dtype=np.int64)  # position of each value in S; -1 for non-sensitive values
    pos[idx] = np.arange(s)
    width = np.uint64(cells.c2)
    moves = np.array([s * cells.c2, (s - 1) * cells.c2], dtype=np.uint64)  # [non-sensitive, sensitive]
    out = np.empty_like(x)
    for start in range(0, x.size, _URR_BLOCK):  # cache-sized blocks, each one vectorized pass
        xb = x[start:start + _URR_BLOCK]
        a = pos[xb]
        sens = a >= 0
        u = words(rng, xb.size)
        moved = u < moves[sens.astype(np.int64)]
        j = np.minimum(u // width, np.uint64(s - 1)).astype(np.int64)  # only read where moved: j < s
        j += sens & (j >= a)
        out[start:start + xb.size] = np.where(moved, idx[np.minimum(j, s - 1)], xb)
    return out


#: uRR values drawn per vectorized pass.
_URR_BLOCK = 1 << 16


def urr_estimate(outputs, k, sensitive, eps) -> np.ndarray:
    """Empirical estimate (spec "uRR", Eq. 35): ``v m_hat(x) - 1/(e-1)`` on S and ``v m_hat(x)`` on N with
    ``v = (s+e-1)/(e-1) = 1/c3``; unbiased, may leave [0, 1]."""
    k = check_m(k)
    eps = check_eps(eps, positive=True)
    idx, mask = _check_sensitive(sensitive, k)
    y = check_values(outputs, k, "outputs")
    if y.size == 0:
        raise ValueError("outputs must not be empty: there is nothing to estimate from")
    m_hat = np.bincount(y, minlength=k) / y.size
    _, c2, c3 = _urr_probabilities(idx.size, eps)
    p_hat = m_hat / c3
    p_hat[mask] -= c2 / c3  # c2/c3 = 1/(e-1)
    return p_hat


# ---------------------------------------------------------------------------------------------- uRAP

def _urap_terms(eps: float, theta) -> tuple[float, float, float, float, float]:
    """``(theta, d1, theta - d1, 1 - d2, d2)`` of Def. 4 in overflow-free form: with ``z = e^-eps``
    and ``t = 1 - theta`` (computed as ``1/(1 + h)`` for the default, never as ``1 - theta``),
    ``d1 = theta z/(t + theta z)``, ``theta - d1 = theta t (1 - z)/(t + theta z)``,
    ``d2 = t + theta z`` and ``1 - d2 = theta (1 - z)``."""
    if theta is None:
        theta, t = 1.0 / (1.0 + math.exp(-eps / 2.0)), 1.0 / (1.0 + math.exp(eps / 2.0))
    else:
        theta = _check_theta(theta)
        t = 1.0 - theta
    z = math.exp(-eps)
    one_minus_z = -math.expm1(-eps)
    denominator = t + theta * z
    return (theta, theta * z / denominator, theta * t * one_minus_z / denominator, theta * one_minus_z,
            denominator)


class URAPCells(NamedTuple):
    """uRAP's integer cells: a bit is set when its word is below the cell (probability ``cell/2^64``).
    ``theta``: the input's own sensitive bit; ``d1``: every other sensitive bit; ``keep_n``: the input's own
    non-sensitive bit (``1 - d2``).  Shared by :func:`urap_perturb` and the exact level."""

    theta: int
    d1: int
    keep_n: int

    @property
    def d2(self) -> int:
        return TWO_64 - self.keep_n


def urap_cells(eps, theta=None) -> URAPCells:
    """uRAP's cells at ``eps`` (exact value; > 0) and ``theta`` (default ``h/(h+1)``, ``h = e^(eps/2)``).

    ``theta`` is first fixed as an integer ``t`` (any rounding: the guarantee is built around it).  With
    ``L < e^eps`` (``mechanisms._exact``) and ``T = 2^64``: ``d1 = ceil(t T/(t + L (T - t)))`` (so the two
    sensitive bits' ratio ``t (T - d1)/(d1 (T - t)) <= L``), ``d2 = ceil(t T/(L d1))`` (so a sensitive
    input against a non-sensitive one gives at most ``t T/(d1 d2) <= L``) and ``keep_n = T - d2``.  All
    the likelihood ratios of the definition are then checked exactly.  Raises ``ValueError`` when a cell
    would be below 2^-64 (see :func:`urap_max_epsilon`) or eps is too small to separate them.
    """
    try:
        return _urap_cells(eps, theta)
    except Unrepresentable as exc:
        raise ValueError(f"{exc}; the largest epsilon for this theta is {urap_max_epsilon(theta)} "
                         "(docs/mechanisms.md)") from None



def _theta_cell(eps, theta) -> int:
    if theta is not None:
        return int(_check_theta(theta) * float(TWO_64))  # exact: scaling a double by 2^64
    z = exp_upper(-as_fraction(eps) / 2, 40)             # > e^(-eps/2): theta = 1/(1 + z) rounded down
    return (TWO_64 * z.denominator) // (z.denominator + z.numerator)


def _urap_cells(eps, theta) -> URAPCells:
    eps_f = check_eps(eps, positive=True)
    T = TWO_64
    t = _theta_cell(eps, theta)
    if not 1 <= t <= T - 1:
        raise Unrepresentable(f"eps = {eps_f:g}: theta or 1 - theta would be below 2^-64")
    L = exp_lower(eps)
    d1_ideal = Fraction(t * T) / (t + L * (T - t))
    if d1_ideal < 1:
        raise Unrepresentable(f"eps = {eps_f:g} is above what uRAP can sample honestly: d1 would be below 2^-64")
    d1 = ceil_frac(d1_ideal)
    d2 = ceil_frac(Fraction(t * T) / (L * d1))
    keep_n = T - d2
    ratios_ok = (
        d1 <= t and 1 <= keep_n and d2 >= 1
        and t * (T - d1) <= L * d1 * (T - t)            # own sensitive bit set, another's clear
        and t * T <= L * d1 * d2                         # sensitive input vs non-sensitive: own bit set
        and (T - t) * T <= L * (T - d1) * d2             # ... own bit clear
        and d1 * d2 <= L * t * T and (T - d1) * d2 <= L * (T - t) * T   # and the reverse directions
    )
    if not ratios_ok:
        raise Unrepresentable(f"eps = {eps_f:g} cannot be realised by uRAP with 64-bit thresholds "
                               "(too small to separate the cells, or too large)")
    return URAPCells(t, d1, keep_n)


def urap_max_epsilon(theta=None) -> Decimal:
    """The largest epsilon (6 decimals) :func:`urap_cells` samples honestly: every cell at least 2^-64.
    For the default theta this is about ``2 ln(2^64 - 1)`` = 88.72 (``1 - theta`` and ``d1`` are about
    ``e^(-eps/2)``); for a given ``theta`` (integer ``t``), ``d1 >= 2^-64`` gives about
    ``eps <= ln(t (2^64 - 1)/(2^64 - t))``."""
    if theta is None:
        guess = (2 * ln_floor_places(TWO_64 - 1, 8)).quantize(Decimal("0.000001"), rounding=ROUND_FLOOR)
    else:
        t = _theta_cell(None, theta)
        if not 1 <= t <= TWO_64 - 1:
            raise ValueError(f"theta = {theta!r} cannot be represented with 64-bit thresholds")
        guess = ln_floor_places(Fraction(t * (TWO_64 - 1), TWO_64 - t))
    return largest_honest(lambda e: _urap_cells(e, theta), guess)


def urap_perturb(values, k, sensitive, eps, rng=None, theta=None) -> np.ndarray:
    """uRAP reports (Def. 4, spec "uRAP"): an (n, k) boolean matrix, one row per value.

    Sensitive bit ``j``: set w.p. ``theta`` if ``j`` is the input, else ``d1``.  Non-sensitive bits:
    the input's own bit (non-sensitive input only) is set w.p. ``1 - d2``; all others stay 0.
    ``s + 1`` uniform words per value, each compared with its integer cell of :func:`urap_cells`.
    """
    k = check_m(k)
    check_eps(eps, positive=True)
    idx, mask = _check_sensitive(sensitive, k)
    if theta is not None:
        _check_theta(theta)
    x = check_values(values, k)
    cells = urap_cells(eps, theta)
    s, n = idx.size, x.size
    t_theta, t_d1, t_n = (np.uint64(c) for c in (cells.theta, cells.d1, cells.keep_n))
    pos = np.full(k, -1, dtype=np.int64)
    pos[idx] = np.arange(s)
    out = np.zeros((n, k), dtype=bool)
    # the sensitive columns as a slice when they are contiguous (RAPPOR: all of them): a cheaper write
    cols = slice(int(idx[0]), int(idx[-1]) + 1) if s and idx[-1] - idx[0] == s - 1 else idx
    block = max(1, _WORDS_PER_BLOCK // (s + 1))
    for start in range(0, n, block):  # row blocks bound the memory; each block is one vectorized pass
        stop = min(start + block, n)
        xb = x[start:stop]
        u = words(rng, (stop - start) * (s + 1)).reshape(stop - start, s + 1)
        bits_s = u[:, :s] < t_d1
        own = pos[xb]
        rows = np.flatnonzero(own >= 0)
        bits_s[rows, own[rows]] = u[rows, own[rows]] < t_theta
        out[start:stop, cols] = bits_s
        rows_n = np.flatnonzero(own < 0)
        out[start + rows_n, xb[rows_n]] = u[rows_n, s] < t_n
    return out


def _non_sensitive_bits(bits: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(count, value)`` per uRAP report: how many non-sensitive bits are set, and the last such
    bit (-1 if none).  Scans the set bits only, without copying the (n, k) matrix."""
    rows, cols = np.nonzero(bits)
    keep = ~mask[cols]
    rows, cols = rows[keep], cols[keep]
    count = np.bincount(rows, minlength=bits.shape[0])
    value = np.full(bits.shape[0], -1, dtype=np.int64)
    value[rows] = cols
    return count, value


class ReportClass(NamedTuple):
    kind: np.ndarray   # PROTECTED (0), INVERTIBLE (1) or MALFORMED (2) per report
    value: np.ndarray  # the input an invertible report reveals; -1 otherwise


def classify_report(reports, k, sensitive) -> ReportClass:
    """Protected, invertible or malformed (spec "Definition" and "uRAP"), for every report.

    ``reports`` is either a 1-D array of uRR outputs (values in 0..k-1: an output in S is protected,
    one in N invertible and decodes to itself) or a 2-D (n, k) array of uRAP bit reports (no
    non-sensitive bit set: protected; exactly one: invertible, decoding to that value; two or more:
    malformed, to be rejected).  Returns ``ReportClass(kind, value)`` with ``kind`` in
    ``PROTECTED, INVERTIBLE, MALFORMED`` and ``value`` the decoded input (-1 unless invertible).
    """
    k = check_m(k)
    _, mask = _check_sensitive(sensitive, k)
    arr = np.asarray(reports)
    if arr.ndim == 2:
        bits = _check_bit_reports(arr, "reports") if arr.shape[0] else arr.astype(bool)
        if bits.shape[1] != k:
            raise ValueError(f"uRAP reports must have k = {k} columns, got {bits.shape[1]}")
        count, value = _non_sensitive_bits(bits, mask)
        kind = np.where(count == 0, PROTECTED, np.where(count == 1, INVERTIBLE, MALFORMED))
        value[count != 1] = -1
        return ReportClass(kind.astype(np.int8), value)
    y = check_values(arr, k, "reports")
    inv = ~mask[y]
    return ReportClass(np.where(inv, INVERTIBLE, PROTECTED).astype(np.int8), np.where(inv, y, -1))


def urap_estimate(bits, sensitive, eps, theta=None) -> np.ndarray:
    """Empirical estimate (spec "uRAP", Eq. 41) from uRAP reports, ``m_hat_j`` = share of reports
    with bit j set:
    ``(m_hat_j - d1)/(theta - d1)`` on S and ``m_hat_j/(1 - d2)`` on N (with the default theta:
    ``((h+1) m_hat_j - 1)/(h-1)`` and ``h m_hat_j/(h-1)``).  Unbiased; ``k = bits.shape[1]``.

    Malformed reports (two or more non-sensitive bits) are refused with a ``ValueError``: reject them
    at collection time with :func:`classify_report`.  ``theta`` must be the one used to perturb.
    """
    arr = _check_bit_reports(bits)
    k = arr.shape[1]
    eps = check_eps(eps, positive=True)
    _, mask = _check_sensitive(sensitive, k)
    _, d1, gap, keep_n, _ = _urap_terms(eps, theta)
    bad = int((_non_sensitive_bits(arr, mask)[0] >= 2).sum())
    if bad:
        raise ValueError(f"{bad} uRAP report(s) have two or more non-sensitive bits set; such malformed "
                         "reports must be rejected (see classify_report)")
    m_hat = arr.mean(axis=0)
    return np.where(mask, (m_hat - d1) / gap, m_hat / keep_n)


# ---------------------------------------------------------------------------------------------- ULDP check

def check_uldp(P, sensitive, protected=None) -> float:
    """The exact ULDP level of a mechanism matrix ``P[x, y]`` (spec "Definition"): the smallest eps
    such that ``P`` is (S, Y_P, eps)-ULDP, i.e. ``max over protected columns y of
    ln(max_x P[x, y] / min_x P[x, y])`` (all-zero columns ignored), or ``inf`` when impossible.

    ``protected`` (a boolean mask or indices of output columns) fixes ``Y_P``; then every other
    column must satisfy condition (1): exactly one input with positive probability, and that input
    non-sensitive (else ``inf``).  By default ``Y_P`` is chosen optimally: a column is invertible
    exactly when it satisfies condition (1), and protected otherwise.  With every column protected
    the result is the LDP level ``max_j ln(max_i P_ij / min_i P_ij)``.
    """
    try:
        q = np.asarray(P, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("P must be a numeric matrix") from None
    if q.ndim != 2 or q.shape[0] < 2 or q.shape[1] < 1:
        raise ValueError(f"P must be a two-dimensional (inputs, outputs) matrix with >= 2 rows, "
                         f"got shape {q.shape}")
    if not np.all(np.isfinite(q)) or (q < 0).any():
        raise ValueError("P must contain finite non-negative probabilities")
    if not np.allclose(q.sum(axis=1), 1.0, rtol=0, atol=1e-9):
        raise ValueError("P must be row-stochastic: every row must sum to 1")
    _, s_mask = _check_sensitive(sensitive, q.shape[0])
    positive = q > 0
    support = positive.sum(axis=0)
    owner = np.argmax(positive, axis=0)
    invertible_ok = (support == 1) & ~s_mask[owner]
    if protected is None:
        prot = ~invertible_ok
    else:
        _, prot = _check_sensitive(protected, q.shape[1], "protected")
        if not invertible_ok[~prot & (support > 0)].all():
            return math.inf
    cols = q[:, prot & (support > 0)]
    if cols.size == 0:
        return 0.0
    if (cols == 0).any():
        return math.inf
    return float(np.max(np.log(cols.max(axis=0)) - np.log(cols.min(axis=0))))


# ---------------------------------------------------------------------------------------------- PUM

class PUMInput(NamedTuple):
    values: np.ndarray     # intermediate data over the extended domain 0..k+kappa-1
    k: int                 # the extended domain size k + kappa
    sensitive: np.ndarray  # S extended by the bots k..k+kappa-1


def pum_preprocess(values, k, sensitive, tags, kappa) -> PUMInput:
    """The PUM pre-processor ``f_pre`` (Sec. 5.1, Eq. 19): a value in the user's secret set with tag
    ``t`` becomes the bot ``⊥t`` = value ``k + t``; every other value is kept.  Values of the common
    sensitive set S are already protected and are kept even when tagged.

    ``tags`` gives the users' secret tagged sets, either as a 1-D int array aligned with ``values``
    (the tag, 0..kappa-1, that user i attached to her own value, or -1) or as a triple
    ``(users, items, tag_ids)`` of equal-length arrays listing every (user, value, tag) of every
    user's secret sets (a value carries at most one tag per user).  The result is the input of a
    common uRR/uRAP over ``PUMInput.k`` values with sensitive set ``PUMInput.sensitive``.
    """
    k = check_m(k)
    idx, mask = _check_sensitive(sensitive, k)
    if isinstance(kappa, bool) or not isinstance(kappa, numbers.Integral) or kappa < 0:
        raise ValueError(f"kappa (the number of tags) must be a non-negative integer, got {kappa!r}")
    kappa = int(kappa)
    x = check_values(values, k)
    if isinstance(tags, tuple):
        if len(tags) != 3:
            raise ValueError("tags given as a tuple must be (users, items, tag_ids)")
        users = check_values(np.asarray(tags[0]), max(x.size, 1), "tags users")
        items = check_values(np.asarray(tags[1]), k, "tags items")
        tag_ids = _check_tags(np.asarray(tags[2]), kappa, allow_untagged=False)
        if not users.size == items.size == tag_ids.size:
            raise ValueError("tags users, items and tag_ids must have the same length")
        keys = users * k + items
        order = np.argsort(keys, kind="stable")
        keys, tag_sorted = keys[order], tag_ids[order]
        if keys.size > 1 and (np.diff(keys) == 0).any():
            raise ValueError("a value may carry at most one tag per user, found a (user, value) pair twice")
        want = np.arange(x.size) * k + x
        at = np.searchsorted(keys, want)
        hit = at < keys.size
        hit[hit] = keys[at[hit]] == want[hit]
        own = np.full(x.size, -1, dtype=np.int64)
        own[hit] = tag_sorted[at[hit]]
    else:
        own = _check_tags(np.asarray(tags), kappa, allow_untagged=True)
        if own.shape != x.shape:
            raise ValueError(f"tags must have one entry per value, got shape {own.shape} for {x.size} values")
    z = np.where((own >= 0) & ~mask[x], k + own, x)
    return PUMInput(z, k + kappa, np.concatenate([idx, np.arange(k, k + kappa, dtype=np.int64)]))


def _check_tags(arr: np.ndarray, kappa: int, allow_untagged: bool) -> np.ndarray:
    if arr.ndim != 1:
        raise ValueError(f"tags must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"tags must be integers, got dtype {arr.dtype}")
    lo = -1 if allow_untagged else 0
    if arr.min() < lo or arr.max() >= kappa:
        raise ValueError(f"tags must lie in {lo}..{kappa - 1} (kappa = {kappa}), found "
                         f"{arr.min() if arr.min() < lo else arr.max()}")
    return arr.astype(np.int64)


def pum_estimate(r_hat, k, sensitive, pi_hat=None) -> np.ndarray:
    """``p_hat(x) = r_hat(x) + sum_t r_hat(⊥t) pi_hat_t(x)`` (Eq. 21, spec "PUM").

    ``r_hat`` is an estimate over the extended domain (length ``k + kappa``, bots last).  ``pi_hat``
    is the background knowledge: a (kappa, k) array whose row t is a distribution of the values
    behind tag t, a length-kappa sequence with ``None`` for unknown tags, or ``None`` (nothing
    known).  An unknown ``pi_hat_t`` spreads ``r_hat(⊥t)`` over N in proportion to ``r_hat``
    (negative estimates count as 0; uniformly over N if none is positive).
    Theorem 1: ``l1(p_hat, p) <= l1(r_hat, r) + sum_t |r_hat(⊥t)| l1(pi_hat_t, pi_t)``.
    """
    k = check_m(k)
    _, mask = _check_sensitive(sensitive, k)
    r = _check_estimates(r_hat, "r_hat")
    kappa = r.size - k
    if kappa < 0:
        raise ValueError(f"r_hat must have k + kappa >= k = {k} entries, got {r.size}")
    rows = [None] * kappa if pi_hat is None else list(pi_hat)
    if len(rows) != kappa:
        raise ValueError(f"pi_hat must have one row per tag (kappa = {kappa}), got {len(rows)}")
    non = ~mask if (~mask).any() else np.ones(k, dtype=bool)
    weights = np.where(non, np.maximum(r[:k], 0.0), 0.0)
    spread = weights / weights.sum() if weights.sum() > 0 else non / non.sum()
    p_hat = r[:k].copy()
    for t, row in enumerate(rows):  # kappa tags: a handful, never one iteration per value
        pi_t = spread if row is None else _check_distribution(row, f"pi_hat[{t}]")
        if pi_t.size != k:
            raise ValueError(f"pi_hat[{t}] must have k = {k} entries, got {pi_t.size}")
        p_hat += r[k + t] * pi_t
    return p_hat


# ---------------------------------------------------------------------------------------------- losses

def _coordinate_terms(k: int, mask: np.ndarray, eps: float, mechanism: str, theta):
    """Per coordinate ``(a, b)`` with ``m = a + b p`` (the output share) and ``p_hat = (m_hat - a)/b``."""
    if mechanism == "urr":
        _, c2, c3 = _urr_probabilities(int(mask.sum()), eps)
        return np.where(mask, c2, 0.0), np.full(k, c3)
    if mechanism == "urap":
        _, d1, gap, keep_n, _ = _urap_terms(eps, theta)
        return np.where(mask, d1, 0.0), np.where(mask, gap, keep_n)
    return np.zeros(k), np.ones(k)


def _coordinate_variances(p: np.ndarray, mask: np.ndarray, eps: float, n: int, mechanism: str, theta):
    """``Var[p_hat(x)] = m(1-m)/(n b^2)`` for users drawn iid from p (binomial output counts)."""
    a, b = _coordinate_terms(p.size, mask, eps, mechanism, theta)
    m = a + b * p
    return m * (1.0 - m) / (n * b * b)


def _loss_inputs(p, sensitive, eps, n, mechanism, theta):
    p = _check_distribution(p)
    mechanism = _check_mechanism(mechanism)
    eps = check_eps(eps, positive=True)
    n = _check_n(n)
    _, mask = _check_sensitive(sensitive, p.size)
    if theta is not None and mechanism != "urap":
        raise ValueError("theta applies to mechanism='urap' only")
    return p, mask, eps, n, mechanism


def expected_l2(p, sensitive, eps, n, mechanism="urr", theta=None) -> float:
    """Exact ``E[l2^2(p_hat, p)]`` of the empirical estimate for n users drawn iid from ``p``
    (spec "uRR" and "uRAP").

    * ``"urr"`` (Prop. 15): ``[2(e-1)(s - p(S)) + s(s-1)]/(n (e-1)^2) + (1 - sum p^2)/n``;
    * ``"urap"`` (Prop. 18, default theta):
      ``(1/n)(1 + ((s+1)h - 1)/(h-1)^2 - p(S)/(h-1) - sum p^2)``; for another theta,
      ``sum_x m(1-m)/(n b^2)`` with the terms of Eq. 41;
    * ``"none"`` (no privacy): ``(1 - sum p^2)/n``.

    With ``sensitive`` = every value, uRR is k-RR and uRAP is RAPPOR.
    """
    p, mask, eps, n, mechanism = _loss_inputs(p, sensitive, eps, n, mechanism, theta)
    s, p_s, sum_sq = int(mask.sum()), float(p[mask].sum()), float(np.dot(p, p))
    if mechanism == "urr":
        g = 1.0 / math.expm1(eps)  # 1/(e-1)
        return (2.0 * (s - p_s) * g + s * (s - 1) * g * g + 1.0 - sum_sq) / n
    if mechanism == "urap" and theta is None:
        g = 1.0 / math.expm1(eps / 2.0)  # 1/(h-1); ((s+1)h - 1)/(h-1)^2 = (s+1) g + s g^2
        return (1.0 + (s + 1) * g + s * g * g - p_s * g - sum_sq) / n
    if mechanism == "none":
        return (1.0 - sum_sq) / n
    return float(_coordinate_variances(p, mask, eps, n, mechanism, theta).sum())


def expected_l1(p, sensitive, eps, n, mechanism="urr", theta=None) -> float:
    """Asymptotic ``E[l1(p_hat, p)] ~ sqrt(2/(n pi)) sum_x sqrt(n Var[p_hat(x)])`` (Props. 4 and 7;
    spec "Reference settings" for the worst cases;
    normal approximation of each binomial count; ``"none"`` is the non-private empirical
    distribution).  Half of it is the expected total variation."""
    p, mask, eps, n, mechanism = _loss_inputs(p, sensitive, eps, n, mechanism, theta)
    var = _coordinate_variances(p, mask, eps, n, mechanism, theta)
    return float(np.sqrt(2.0 * np.maximum(var, 0.0) / math.pi).sum())


# ------------------------------------------------------------------------------------------- post-processing

def threshold_estimate(p_hat, n, sensitive, eps, *, mechanism="urr", alpha=0.05, theta=None) -> np.ndarray:
    """emp+thr (spec "Estimation post-processing"): keep the estimates above
    ``T(x) = z_{1 - alpha/k} sqrt(Var0[p_hat(x)])`` (Bonferroni over the k values) and spread the
    remaining mass ``1 - sum(kept)`` uniformly over the others.

    ``Var0`` is the variance under the null hypothesis ``p(x) = 0`` (the significance test):
    ``v^2 c2 (1 - c2)/n`` (uRR) or ``d1 (1 - d1)/(n (theta - d1)^2)`` (uRAP) on S, and 0 on N (an
    invertible output is proof of presence, so any positive estimate there is kept).  If the kept
    estimates already exceed 1 they are rescaled to sum to 1 and the others get 0.  The result
    lies on the probability simplex.
    """
    p_hat = _check_estimates(p_hat)
    k = p_hat.size
    n = _check_n(n)
    eps = check_eps(eps, positive=True)
    mechanism = _check_mechanism(mechanism)
    if mechanism == "none":
        raise ValueError("threshold_estimate applies to mechanism 'urr' or 'urap'")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    if theta is not None and mechanism != "urap":
        raise ValueError("theta applies to mechanism='urap' only")
    _, mask = _check_sensitive(sensitive, k)
    a, b = _coordinate_terms(k, mask, eps, mechanism, theta)
    sd0 = np.sqrt(a * (1.0 - a) / n) / b  # a = m under p(x) = 0
    t = NormalDist().inv_cdf(1.0 - float(alpha) / k) * sd0
    kept = p_hat > t
    out = np.zeros(k)
    mass = 1.0 - p_hat[kept].sum()
    if mass > 0 and not kept.all():
        out[kept] = p_hat[kept]
        out[~kept] = mass / (~kept).sum()
    elif kept.any():
        out[kept] = p_hat[kept] / p_hat[kept].sum()
    else:  # unreachable: nothing kept means mass = 1 > 0
        out[:] = 1.0 / k
    return out


class EMResult(NamedTuple):
    p: np.ndarray               # the estimate, on the simplex
    log_likelihood: np.ndarray  # log-likelihood of the reports at every iterate (initial one first)
    iterations: int
    converged: bool


def em_estimate(reports, k, sensitive, eps, *, theta=None, init=None, tol=1e-9, max_iter=10_000) -> EMResult:
    """Maximum likelihood on the simplex by EM (spec "Estimation post-processing"):
    ``p_{t+1}(x) = (1/n) sum_i p_t(x) Q(y_i|x) / sum_x' p_t(x') Q(y_i|x')``, until the largest
    change is below ``tol``.  The log-likelihood never decreases; invertible reports are point masses.

    ``reports`` are uRR outputs (1-D) or uRAP bit reports (2-D; malformed ones refused).  Both are
    reduced to sufficient statistics first: uRR output counts (O(k) per iteration), and for uRAP
    the distinct patterns of sensitive bits (for every theta the posterior of a protected report is
    ``p(x) e^[x in S and bit x set]`` up to a constant) plus the invertible counts.
    ``init`` defaults to emp+thr (:func:`threshold_estimate`) mixed with 1e-6 of the uniform
    distribution so that no value starts at 0 (EM never revives a zero).
    """
    k = check_m(k)
    eps = check_eps(eps, positive=True)
    idx, mask = _check_sensitive(sensitive, k)
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not tol > 0:
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    arr = np.asarray(reports)
    if arr.ndim == 2:
        bits = _check_bit_reports(arr, "reports")
        if bits.shape[1] != k:
            raise ValueError(f"uRAP reports must have k = {k} columns, got {bits.shape[1]}")
        emp = urap_estimate(bits, idx, eps, theta)
        mechanism = "urap"
    else:
        if theta is not None:
            raise ValueError("theta applies to uRAP (two-dimensional) reports only")
        y = check_values(arr, k, "reports")
        if y.size == 0:
            raise ValueError("reports must not be empty: there is nothing to estimate from")
        emp = urr_estimate(y, k, idx, eps)
        mechanism = "urr"
    n = int(arr.shape[0])
    if init is None:
        p = threshold_estimate(emp, n, idx, eps, mechanism=mechanism, theta=theta)
        p = (1.0 - 1e-6) * p + 1e-6 / k
    else:
        p = _check_distribution(init, "init")
        if p.size != k:
            raise ValueError(f"init must have k = {k} entries, got {p.size}")
    step = _urr_em(y, k, mask, eps) if mechanism == "urr" else _urap_em(bits, mask, eps, theta)
    ll, new = step(p)  # the log-likelihood at p and the next iterate, from one pass
    lls = [ll]
    converged = False
    it = 0
    while it < max_iter:
        it += 1
        change = float(np.max(np.abs(new - p)))
        p = new
        ll, new = step(p)
        lls.append(ll)
        if change <= tol:
            converged = True
            break
    return EMResult(p / p.sum(), np.array(lls), it, converged)


def _urr_em(y: np.ndarray, k: int, mask: np.ndarray, eps: float):
    """``step(p) -> (log-likelihood at p, next EM iterate)`` for uRR outputs.  With ``P = sum p``:
    ``(pQ)(y) = c2 P + (c1-c2) p(y)``
    on S and ``c3 p(y)`` on N; the update is ``p(a) [c2 A + (c1-c2) m(a)/(pQ)(a)]`` on S and
    ``p(b) c2 A + m(b)`` on N with ``A = sum_{y in S} m(y)/(pQ)(y)``."""
    c1, c2, c3 = _urr_probabilities(int(mask.sum()), eps)
    counts = np.bincount(y, minlength=k).astype(np.float64)
    m = counts / y.size
    m_s, m_n = m[mask], m[~mask]
    cnt_s, cnt_n = counts[mask], counts[~mask]
    seen_s, seen_n = cnt_s > 0, cnt_n > 0

    def step(p):
        q_s = c2 * p.sum() + (c1 - c2) * p[mask]
        ll = float((cnt_s[seen_s] * np.log(q_s[seen_s])).sum())
        with np.errstate(divide="ignore"):  # a zero initial value under an observed output: -inf
            ll += float((cnt_n[seen_n] * np.log(c3 * p[~mask][seen_n])).sum())
        ratio = m_s / q_s
        a = ratio.sum()
        new = np.empty_like(p)
        new[mask] = p[mask] * (c2 * a + (c1 - c2) * ratio)
        new[~mask] = p[~mask] * c2 * a + m_n
        return ll, new

    return step


def _urap_em(bits: np.ndarray, mask: np.ndarray, eps: float, theta):
    """``step(p) -> (log-likelihood at p, next EM iterate)`` for uRAP reports.  A protected report ``y`` has
    ``Q(y|p) = B(y) d2 [P + (e-1) p(S ∩ y)]`` and an invertible one (bit b of N)
    ``B(y) (1 - d2) p(b)``, with ``B(y) = prod_{j in S} d1^y_j (1-d1)^(1-y_j)`` and ``P = sum p``."""
    _, d1, _, keep_n, d2 = _urap_terms(eps, theta)
    n = bits.shape[0]
    s = int(mask.sum())
    count, value = _non_sensitive_bits(bits, mask)  # malformed reports were refused before
    inv_row = count == 1
    sens = bits[:, mask]
    ones = sens.sum(axis=1)
    const = float(ones.sum() * math.log(d1) + (s * n - ones.sum()) * math.log1p(-d1)) if s else 0.0
    inv_counts = np.bincount(value[inv_row], minlength=mask.size).astype(np.float64)
    n_inv = int(inv_row.sum())
    const += (n - n_inv) * math.log(d2) + (n_inv * math.log(keep_n) if n_inv else 0.0)
    prot = sens[~inv_row]
    em1 = math.expm1(eps)
    seen = inv_counts > 0
    if s <= _TABLE_BITS:
        # Each protected report is an s-bit code; p(S ∩ y) for all 2^s codes is one table (built by
        # doubling) and the per-bit sums of the weights are s contiguous reductions: O(2^s) per step.
        codes = np.zeros(prot.shape[0], dtype=np.int64)
        for j in range(s):  # s <= 20 passes, one per sensitive bit
            codes |= prot[:, j].astype(np.int64) << j
        full = np.bincount(codes, minlength=1 << s).astype(np.float64)
        observed = np.flatnonzero(full)
        counts = full[observed]

        def subset_sums(p_s):
            table = np.zeros(1)
            for j in range(s):
                table = np.concatenate([table, table + p_s[j]])
            return table[observed]

        def bit_sums(w):  # sum of w over the codes with bit j set, for every j: fold the top bit away
            spread = np.zeros(1 << s)
            spread[observed] = w
            out = np.empty(s)
            for j in range(s - 1, -1, -1):
                upper = spread[1 << j:]
                out[j] = upper.sum()
                spread = spread[:1 << j] + upper
            return out
    else:  # many sensitive values: distinct patterns as a dense 0/1 matrix
        packed, counts = np.unique(np.packbits(prot, axis=1), axis=0, return_counts=True)
        patterns = np.unpackbits(packed, axis=1, count=s).astype(np.float64)
        counts = counts.astype(np.float64)

        def subset_sums(p_s):
            return patterns @ p_s

        def bit_sums(w):
            return patterns.T @ w

    def step(p):
        d = p.sum() + em1 * subset_sums(p[mask])
        with np.errstate(divide="ignore"):  # a zero initial value under an invertible report: -inf
            ll = const + float((counts * np.log(d)).sum()) + float((inv_counts[seen] * np.log(p[seen])).sum())
        w = counts / d
        total = w.sum()
        new = np.empty_like(p)
        new[mask] = p[mask] * (total + em1 * bit_sums(w)) / n
        new[~mask] = (p[~mask] * total + inv_counts[~mask]) / n
        return ll, new

    return step
