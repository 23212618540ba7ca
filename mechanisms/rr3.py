"""Three-element randomized response and weighted bipartite graphs,
docs/mechanisms-reference.md#rr3-and-the-graph-protocol-lpp (Ma and Wang).

Matrices (rows = true input 0, 1, 2; columns = output), spec "Matrices":

* EWRRn(p): diagonal ``p``, off-diagonal ``(1-p)/(n-1)``; best ``p* = e^eps/(e^eps + n - 1)``
  (Theorem 2), the low branch ``p = 1/((n-1) e^eps + 1)`` is always worse;
* RR3†(p1, p2): row0 ``(p1, (1-p1)/2, (1-p1)/2)``, rows 1, 2 ``p2`` on the diagonal, ``(1-p2)/2`` off it;
* RR3‡(p1, p2): row0 as above; row1 ``(1-p1, p1 p2, p1(1-p2))``; row2 ``(1-p1, p1(1-p2), p1 p2)``;
  ``det = p1 (2p1 - 1)(2p2 - 1)``: invertible iff ``p1 ∉ {0, 1/2}`` and ``p2 != 1/2``;
* RR3♣(p1, p2, q): row0 as above; row1 ``(1-p2, p2 q, p2(1-q))``; row2 ``(1-p2, p2(1-q), p2 q)``.

The LDP level of a matrix is always computed exactly, ``max_j ln(max_i P_ij / min_i P_ij)``
(:func:`ldp_epsilon`), never taken from the paper's feasibility lists.

Estimators (spec "Estimators"): ``pi_hat = (counts/N) @ inv(P)`` (unbiased) with covariance
``(C.T diag(t) C - outer(pi, pi))/N``, ``C = inv(P)``, ``t = pi @ P``, for N inputs drawn iid from
``pi``.  Corrected closed forms (the paper's Eqs. 27, 28 and 30 are wrong):
EWRRn ``pi_hat_i = ((n-1) c_i/N - (1-p))/(np - 1)`` with
``Var = [(1-p) + (np-1) pi_i][(n-2+p) - (np-1) pi_i]/((np-1)^2 N)``; RR3‡
``pi_hat_0 = (c0/N - (1-p1))/(2p1 - 1)`` and ``pi_hat_1 - pi_hat_2 = (c1 - c2)/(N p1 (2p2 - 1))``.

Graph protocol LPP‡ (spec "Graph protocol"): a user picks an item j uniformly; an edge of weight
``w`` is discretized to +1 w.p. ``(1+w)/2`` (else -1), then the state (0 = no edge, 1 = +1,
2 = -1) goes through RR3‡ with ``p1 = e^eps1/(e^eps1 + 1)``, ``p2 = q = e^eps2/(e^eps2 + 1)``.
Exact privacy level ``max(eps2, ln(2 e^(eps1+eps2)/(e^eps2 + 1)))`` (the paper's Lemma 2 omits
``eps2``).  Randomness comes only from :mod:`mechanisms.random` (secure default, a numpy
``Generator`` when passed), compared with integer cells (docs/mechanisms.md, "Exact sampling: one-shot
mechanisms"): :func:`ewrr_cells` and :func:`rr3_ddagger_cells` build them exactly from the epsilons
(small cells rounded up around rational lower bounds of ``e^eps``, the largest cell of a row takes the
remainder), so the realised LDP level of EWRRn is at most ``eps`` and that of RR3‡ / LPP‡ at most
``lpp_epsilon(eps1, eps2)`` -- exactly, for the epsilons as given (a ``Decimal`` at its decimal value).
:func:`perturb` also takes a float matrix, rounded safely by :func:`matrix_cells` (no charged level to
honour there).  Epsilons whose cells would need a probability below ``2^-64`` raise ``ValueError``
naming the limit (:func:`ewrr_max_epsilon`, :func:`rr3_ddagger_max_epsilons`).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from decimal import Context, Decimal
from fractions import Fraction

import numpy as np

from ._exact import TWO_64, Unrepresentable, ceil_frac, exp_lower, largest_honest, ln_floor_places
from ._sampling import CellTable, safe_cells
from ._validation import check_eps, check_m, check_values
from .estimators import project_simplex
from .exactness import exact_epsilon
from .numeric import discretize
from .random import uniform_below

#: Rows of ``perturb`` drawn per pass (bounds the temporaries to about 2**20 comparisons).
_CELLS_PER_BLOCK = 1 << 20


# ---------------------------------------------------------------------------------------------- validation

def _check_probability(p, name: str) -> float:
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise ValueError(f"{name} must be a real number in [0, 1], got {p!r}")
    p = float(p)
    if not 0.0 <= p <= 1.0:  # also rejects NaN
        raise ValueError(f"{name} must lie in [0, 1], got {p!r}")
    return p


def _check_matrix(P, *, square: bool = False) -> np.ndarray:
    try:
        q = np.asarray(P, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("P must be a numeric matrix") from None
    if q.ndim != 2 or q.shape[0] < 1 or q.shape[1] < 2:
        raise ValueError(f"P must be a two-dimensional (inputs, outputs) matrix with >= 2 outputs, "
                         f"got shape {q.shape}")
    if square and q.shape[0] != q.shape[1]:
        raise ValueError(f"P must be square to be inverted, got shape {q.shape}")
    if not np.all(np.isfinite(q)) or (q < 0).any():
        raise ValueError("P must contain finite non-negative probabilities")
    if not np.allclose(q.sum(axis=1), 1.0, rtol=0, atol=1e-9):
        raise ValueError("P must be row-stochastic: every row must sum to 1")
    return q


def _inverse(P) -> np.ndarray:
    q = _check_matrix(P, square=True)
    if np.linalg.cond(q) > 1e12:
        raise ValueError("P is singular (not invertible): its inputs cannot be told apart, so no unbiased "
                         "estimator exists")
    return np.linalg.inv(q)


def _check_counts(counts, n_out: int) -> np.ndarray:
    try:
        c = np.asarray(counts, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"counts must be numbers, got {counts!r}") from None
    if c.ndim not in (1, 2) or c.shape[-1] != n_out:
        raise ValueError(f"counts must have shape ({n_out},) or (groups, {n_out}), got {c.shape}")
    if not np.all(np.isfinite(c)) or (c < 0).any():
        raise ValueError("counts must be finite non-negative numbers")
    return c


def _check_distribution(pi, size: int) -> np.ndarray:
    try:
        p = np.asarray(pi, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"pi must be numbers, got {pi!r}") from None
    if p.shape != (size,):
        raise ValueError(f"pi must have shape ({size},), got {p.shape}")
    if not np.all(np.isfinite(p)) or (p < 0).any() or abs(p.sum() - 1.0) > 1e-9:
        raise ValueError("pi must be a probability distribution (non-negative, summing to 1)")
    return p


def _check_total(N) -> float:
    if isinstance(N, bool) or not isinstance(N, numbers.Real) or not math.isfinite(N) or N <= 0:
        raise ValueError(f"N (the number of reports) must be a positive number, got {N!r}")
    return float(N)


def _keep(eps: float) -> float:
    """``e^eps/(e^eps + 1)`` without overflow."""
    return 1.0 / (1.0 + math.exp(-eps))


def _count(value, what: str) -> int:
    """A positive integer count (users, items), or ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


# ---------------------------------------------------------------------------------------------- matrices

def ewrr_matrix(n, p) -> np.ndarray:
    """EWRRn (spec "Matrices"): an (n, n) matrix with ``p`` on the diagonal and ``(1-p)/(n-1)``
    elsewhere (EWRR3 for n = 3).
    At ``p = e^eps/(e^eps + n - 1)`` it is k-RR, exactly eps-LDP."""
    n = check_m(n)
    p = _check_probability(p, "p")
    mat = np.full((n, n), (1.0 - p) / (n - 1))
    np.fill_diagonal(mat, p)
    return mat


def rr3_dagger(p1, p2) -> np.ndarray:
    """RR3† (spec "Matrices"): row0 ``(p1, (1-p1)/2, (1-p1)/2)``; rows 1, 2 keep w.p. ``p2``, else
    each other ``(1-p2)/2``."""
    p1, p2 = _check_probability(p1, "p1"), _check_probability(p2, "p2")
    a, b = (1.0 - p1) / 2.0, (1.0 - p2) / 2.0
    return np.array([[p1, a, a], [b, p2, b], [b, b, p2]])


def rr3_ddagger(p1, p2) -> np.ndarray:
    """RR3‡ (spec "Matrices"): row0 ``(p1, (1-p1)/2, (1-p1)/2)``; row1 ``(1-p1, p1 p2, p1(1-p2))``;
    row2 ``(1-p1, p1(1-p2), p1 p2)``.  ``det = p1(2p1-1)(2p2-1)``: invertible iff
    ``p1 ∉ {0, 1/2}`` and ``p2 != 1/2`` (the paper's Corollary 4 states ``p1 p2 != 1/2``)."""
    p1, p2 = _check_probability(p1, "p1"), _check_probability(p2, "p2")
    a = (1.0 - p1) / 2.0
    return np.array([[p1, a, a], [1.0 - p1, p1 * p2, p1 * (1.0 - p2)], [1.0 - p1, p1 * (1.0 - p2), p1 * p2]])


def rr3_club(p1, p2, q) -> np.ndarray:
    """RR3♣ (spec "Matrices"): row0 ``(p1, (1-p1)/2, (1-p1)/2)``; row1 ``(1-p2, p2 q, p2(1-q))``;
    row2 ``(1-p2, p2(1-q), p2 q)``."""
    p1, p2, q = (_check_probability(v, name) for v, name in ((p1, "p1"), (p2, "p2"), (q, "q")))
    a = (1.0 - p1) / 2.0
    return np.array([[p1, a, a], [1.0 - p2, p2 * q, p2 * (1.0 - q)], [1.0 - p2, p2 * (1.0 - q), p2 * q]])


def ldp_epsilon(P) -> float:
    """The exact LDP level ``max_j ln(max_i P[i, j] / min_i P[i, j])`` (spec "Matrices") of a row-stochastic
    (inputs, outputs) matrix: every ordered pair of inputs on every output (``inf`` when some output
    is possible for one input and impossible for another; never-produced outputs are ignored)."""
    q = _check_matrix(P)
    cols = q[:, q.max(axis=0) > 0]
    if (cols == 0).any():
        return math.inf
    return float(np.max(np.log(cols.max(axis=0)) - np.log(cols.min(axis=0))))


# ---------------------------------------------------------------------------------------------- estimators

def estimate(counts, P) -> np.ndarray:
    """``pi_hat = (counts / N) @ inv(P)``, unbiased (spec "Estimators"); may leave [0, 1].

    ``counts`` is a vector of output counts (N = its sum) or a (groups, outputs) array estimated
    row by row (a row with no reports gives NaN).  ``P`` must be square and invertible.
    """
    inv = _inverse(P)
    c = _check_counts(counts, inv.shape[0])
    total = c.sum(axis=-1, keepdims=True)
    if c.ndim == 1 and total[0] == 0:
        raise ValueError("counts must not all be zero: there is nothing to estimate from")
    share = np.divide(c, total, out=np.full_like(c, np.nan), where=total > 0)
    return share @ inv


def estimator_covariance(pi, P, N) -> np.ndarray:
    """``Cov(pi_hat) = (C.T diag(t) C - outer(pi, pi))/N`` with ``C = inv(P)``, ``t = pi @ P``, for N
    reports of inputs drawn iid from ``pi`` (the output counts are multinomial(N, t))."""
    inv = _inverse(P)
    pi = _check_distribution(pi, inv.shape[0])
    N = _check_total(N)
    t = pi @ np.asarray(P, dtype=np.float64)
    return (inv.T @ (t[:, None] * inv) - np.outer(pi, pi)) / N


def ewrr_closed_form(counts, p) -> np.ndarray:
    """Corrected EWRRn estimator (spec, replaces Eq. 26/27's family):
    ``pi_hat_i = ((n-1) c_i/N - (1-p))/(np - 1)``, ``n = len(counts)``, ``p != 1/n``."""
    p = _check_probability(p, "p")
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 1 or c.size < 2:
        raise ValueError(f"counts must be a one-dimensional vector of at least 2 counts, got shape {c.shape}")
    c = _check_counts(c, c.size)
    n = c.size
    if n * p == 1.0:
        raise ValueError(f"p = 1/n = {p!r} makes EWRR{n} uninformative (singular)")
    if c.sum() == 0:
        raise ValueError("counts must not all be zero: there is nothing to estimate from")
    return ((n - 1) * c / c.sum() - (1.0 - p)) / (n * p - 1.0)


def ewrr_variance(pi, p, N) -> np.ndarray:
    """Corrected Eq. 27: ``Var(pi_hat_i) = [(1-p) + (np-1) pi_i][(n-2+p) - (np-1) pi_i]/((np-1)^2 N)``
    for every ``i`` of a distribution ``pi`` of length n (the paper's second factor
    ``p - (np-1) pi_i`` holds only for n = 2)."""
    p = _check_probability(p, "p")
    shape = np.shape(pi)
    if len(shape) != 1 or shape[0] < 2:
        raise ValueError(f"pi must be a one-dimensional distribution over n >= 2 values, got shape {shape}")
    pi = _check_distribution(pi, shape[0])
    N = _check_total(N)
    n = pi.size
    d = n * p - 1.0
    if d == 0:
        raise ValueError(f"p = 1/n = {p!r} makes EWRR{n} uninformative (singular)")
    return ((1.0 - p) + d * pi) * ((n - 2 + p) - d * pi) / (d * d * N)


def ddagger_closed_form(counts, p1, p2) -> tuple[float, float]:
    """Corrected RR3‡ estimators (replace Eq. 30): ``pi_hat_0 = (c0/N - (1-p1))/(2p1 - 1)`` and
    ``pi_hat_1 - pi_hat_2 = (c1 - c2)/(N p1 (2p2 - 1))``; returns ``(pi_hat_0, pi_hat_1 - pi_hat_2)``."""
    p1, p2 = _check_probability(p1, "p1"), _check_probability(p2, "p2")
    c = _check_counts(counts, 3)
    if c.ndim != 1:
        raise ValueError("counts must be a vector of 3 counts")
    if p1 in (0.0, 0.5) or p2 == 0.5:
        raise ValueError("RR3‡ is singular for p1 in {0, 1/2} or p2 = 1/2")
    N = c.sum()
    if N == 0:
        raise ValueError("counts must not all be zero: there is nothing to estimate from")
    return (c[0] / N - (1.0 - p1)) / (2.0 * p1 - 1.0), (c[1] - c[2]) / (N * p1 * (2.0 * p2 - 1.0))


# ---------------------------------------------------------------------------------------------- sampling

def matrix_cells(P) -> CellTable:
    """A float matrix's integer cells, row by row (``mechanisms._sampling.safe_cells``): every positive
    entry but the row's largest rounded up to a multiple of 2^-64, the largest takes the remainder, zeros
    stay zero.  For matrices given as floats; the mechanisms the service charges for use
    :func:`ewrr_cells` / :func:`rr3_ddagger_cells`, which honour their epsilon exactly."""
    q = _check_matrix(P)
    return CellTable.from_rows([safe_cells(row) for row in q])


def ewrr_cells(n, eps) -> CellTable:
    """EWRRn at ``p* = e^eps/(e^eps + n - 1)`` (k-RR) as exact integer cells: each off-diagonal cell
    ``ceil(2^64/(L + n - 1))`` with ``L < e^eps`` (``mechanisms._exact``), the diagonal takes the remainder,
    so every column's ratio is at most ``L < e^eps``.  Raises ``ValueError`` above :func:`ewrr_max_epsilon`
    (an off-diagonal probability below 2^-64) or when eps is too small to separate the cells (eps = 0 for
    n not a power of two)."""
    n = check_m(n)
    eps_f = check_eps(eps)
    ideal = Fraction(TWO_64) / (exp_lower(eps) + n - 1)
    if ideal < 1:
        raise ValueError(f"eps = {eps_f:g} is above what EWRR{n} can sample honestly: (1-p)/{n - 1} would be "
                         f"below 2^-64; the largest epsilon is {ewrr_max_epsilon(n)} (docs/mechanisms.md)")
    off = ceil_frac(ideal)
    diag = TWO_64 - (n - 1) * off
    if diag < off:
        raise ValueError(f"eps = {eps_f:g} is too small for EWRR{n} to be realised with 64-bit thresholds")
    return CellTable.from_rows([[diag if i == j else off for j in range(n)] for i in range(n)])


def ewrr_max_epsilon(n) -> Decimal:
    """The largest epsilon (6 decimals) :func:`ewrr_cells` samples: ``eps <= ln(2^64 - n + 1)`` (44.361419
    for n = 3)."""
    n = check_m(n)
    return largest_honest(lambda e: ewrr_cells(n, e), ln_floor_places(TWO_64 - n + 1))


def rr3_ddagger_cells(eps1, eps2) -> CellTable:
    """RR3‡ at ``p1 = e^eps1/(e^eps1 + 1)``, ``p2 = e^eps2/(e^eps2 + 1)`` (LPP‡) as exact integer cells.

    With ``E1 <= e^eps1``, ``E2 <= e^eps2`` rational lower bounds and ``T = 2^64``: row 0 is
    ``(P1, A, A)`` with ``A = ceil(T/(2(1 + E1)))`` and ``P1 = T - 2A``; rows 1 and 2 are
    ``(2A, X, Y)`` and ``(2A, Y, X)`` with ``Y = ceil(P1/(1 + E2))`` and ``X = P1 - Y``.  Then
    ``P1/(2A) <= E1``, ``X/Y <= E2`` and ``X/A <= 2 E1 E2/(1 + E2)``, so every column ratio is at most
    ``max(E2, 2 E1 E2/(1 + E2)) <= e^lpp_epsilon(eps1, eps2)``; that bound is checked exactly on every
    column.  Raises ``ValueError`` when a cell would be below 2^-64 (see :func:`rr3_ddagger_max_epsilons`)
    or the check fails (eps2 = 0)."""
    try:
        return CellTable.from_rows(_rr3_ddagger_rows(eps1, eps2))
    except Unrepresentable as exc:
        e1_max, e2_max = rr3_ddagger_max_epsilons()
        raise ValueError(f"{exc}; the largest epsilons RR3‡ samples for every pair are eps1 <= {e1_max} and "
                         f"0 < eps2 <= {e2_max} (docs/mechanisms.md)") from None



def _rr3_ddagger_rows(eps1, eps2) -> list[list[int]]:
    e1, e2 = check_eps(eps1, "eps1"), check_eps(eps2, "eps2")
    E1, E2 = exp_lower(eps1), exp_lower(eps2)
    T = TWO_64
    a_ideal = Fraction(T) / (2 * (1 + E1))
    if a_ideal < 1:
        raise Unrepresentable(f"eps1 = {e1:g} is above what RR3‡ can sample honestly: (1 - p1)/2 would be "
                               "below 2^-64")
    A = ceil_frac(a_ideal)
    P1 = T - 2 * A
    y_ideal = Fraction(P1) / (1 + E2)
    if y_ideal < 1:
        raise Unrepresentable(f"eps2 = {e2:g} is above what RR3‡ can sample honestly: p1 (1 - p2) would be "
                               "below 2^-64")
    Y = ceil_frac(y_ideal)
    X = P1 - Y
    rows = [[P1, A, A], [2 * A, X, Y], [2 * A, Y, X]]
    bound = max(E2, 2 * E1 * E2 / (1 + E2))
    for j in range(3):
        col = [r[j] for r in rows]
        if min(col) < 1 or max(col) > bound * min(col):
            raise Unrepresentable(f"(eps1, eps2) = ({e1:g}, {e2:g}) cannot be realised by RR3‡ with 64-bit "
                                   "thresholds within its exact level")
    return rows


def rr3_ddagger_max_epsilons() -> tuple[Decimal, Decimal]:
    """``(eps1_max, eps2_max)`` (6 decimals) such that :func:`rr3_ddagger_cells` samples every
    ``eps1 <= eps1_max`` with ``0 < eps2 <= eps2_max``: ``(1 - p1)/2 >= 2^-64`` gives
    ``eps1 <= ln(2^63 - 1)`` and ``p1 (1 - p2) >= 2^-64`` with ``p1 >= 1/2`` gives ``eps2 <= ln(2^63 - 1)``
    whatever eps1 (both 43.668272; eps2 may go up to about 44.36 when eps1 is large)."""
    guess = ln_floor_places(TWO_64 // 2 - 1)
    return (largest_honest(lambda e: _rr3_ddagger_rows(e, 1), guess),
            largest_honest(lambda e: _rr3_ddagger_rows(0, e), guess))


def perturb(values, P, rng=None) -> np.ndarray:
    """Draw an output for every input value ``x`` (a row index of ``P``) with ``Pr(j) = P[x, j]``.

    Estimators (docs/mechanisms-reference.md#rr3-and-the-graph-protocol-lpp) (the sampler behind every RR3 release and
    LPP‡).  ``P`` is a ``mechanisms._sampling.CellTable`` of exact integer cells (:func:`ewrr_cells`,
    :func:`rr3_ddagger_cells`: what the service sells) or a float row-stochastic matrix, rounded by
    :func:`matrix_cells`.  One uniform word ``u`` per value; the output is the ``r``-th entry of the row's
    output order (the largest cell last), ``r`` = the number of cumulative cells ``<= u``: exact integer
    comparisons, one numpy pass per block.
    """
    table = P if isinstance(P, CellTable) else matrix_cells(P)
    x = check_values(values, table.shape[0])
    return table.draw(rng, x)


# ------------------------------------------------------------------------------------- graph protocol LPP‡

NO_EDGE, PLUS, MINUS = 0, 1, 2
_CTX = Context(prec=40)


def lpp_level(eps1, eps2) -> Decimal:
    """The exact LDP level of RR3‡ / LPP‡ at ``p_i = e^eps_i/(e^eps_i + 1)``, to 40 digits (the one implementation:
    the market charges it rounded up, docs/mechanisms-reference.md#rr3-and-the-graph-protocol-lpp):
    ``max(eps2, ln(2 e^(eps1+eps2)/(e^eps2 + 1))) = max(eps2, eps1 + ln 2 - ln(1 + e^-eps2))``, at most
    ``eps1 + eps2``.  The paper's Lemma 2 keeps only the second term, which misses the ratio
    ``p1 q / (p1 (1-q)) = e^eps2`` between the two edge states: (1, 2) is 2.0, not 1.5662.  The epsilons are
    taken at their exact values (``exactness.exact_epsilon``)."""
    check_eps(eps1, "eps1"), check_eps(eps2, "eps2")
    e1, e2 = exact_epsilon(eps1), exact_epsilon(eps2)
    second = _CTX.add(_CTX.subtract(e1, _CTX.ln(_CTX.add(Decimal(1), _CTX.exp(-e2)))), _CTX.ln(Decimal(2)))
    return max(Decimal(e2), second)


def lpp_epsilon(eps1, eps2) -> float:
    """:func:`lpp_level` as a float."""
    return float(lpp_level(eps1, eps2))


def _edge_weights(edges, m: int) -> tuple[int, object]:
    """``(n, lookup)``: ``lookup(j)`` gives, for every user i, the weight of edge (i, j[i]) or NaN."""
    if hasattr(edges, "tocsr") and hasattr(edges, "nnz"):  # a scipy.sparse matrix: stored entries are edges
        csr = edges.tocsr()
        if csr.ndim != 2 or csr.shape[1] != m:
            raise ValueError(f"edges must have m = {m} columns, got shape {csr.shape}")
        csr.sum_duplicates()
        csr.sort_indices()
        data = np.asarray(csr.data, dtype=np.float64)
        if data.size and (not np.all(np.isfinite(data)) or data.min() < -1 or data.max() > 1):
            raise ValueError("edge weights must be finite numbers in [-1, 1]")
        n = csr.shape[0]
        keys = np.repeat(np.arange(n, dtype=np.int64), np.diff(csr.indptr)) * m + csr.indices

        def lookup(j):
            want = np.arange(n, dtype=np.int64) * m + j
            at = np.searchsorted(keys, want)
            hit = at < keys.size
            hit[hit] = keys[at[hit]] == want[hit]
            w = np.full(n, np.nan)
            w[hit] = data[at[hit]]
            return w

        return n, lookup
    try:
        dense = np.asarray(edges, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("edges must be an (n, m) array of weights (NaN = no edge) "
                         "or a scipy.sparse matrix") from None
    if dense.ndim != 2 or dense.shape[1] != m:
        raise ValueError(f"edges must be an (n, m = {m}) array of weights, NaN for no edge, "
                         f"got shape {dense.shape}")
    present = dense[~np.isnan(dense)]
    if present.size and (not np.all(np.isfinite(present)) or present.min() < -1 or present.max() > 1):
        raise ValueError("edge weights must be finite numbers in [-1, 1] (NaN = no edge)")
    return dense.shape[0], lambda j: dense[np.arange(dense.shape[0]), j]


def lpp_report(edges, m, eps1, eps2, rng=None) -> np.ndarray:
    """One LPP‡ report per user (spec "Graph protocol"): an (n, 2) int array ``[item, state]`` with
    state ``NO_EDGE`` (0), ``PLUS`` (1) or ``MINUS`` (2).

    ``edges`` is an (n, m) array of weights in [-1, 1] with NaN for "no edge", or a scipy.sparse
    (n, m) matrix whose stored entries are the edges.  Each user picks an item ``j`` uniformly; an
    edge's weight is discretized to +1 w.p. ``(1+w)/2``; the state then goes through
    ``rr3_ddagger(p1, q)`` (``p1 = e^eps1/(e^eps1+1)``, ``q = e^eps2/(e^eps2+1)``): an edge is reported
    w.p. ``p1`` with its sign kept w.p. ``q``, no edge is reported as an edge w.p. ``1 - p1`` with a
    fair sign.  Sampled with :func:`rr3_ddagger_cells`, so the release is exactly at most
    ``lpp_epsilon(eps1, eps2)``-LDP (the item is uniform, exactly; the sign discretization only mixes the
    rows of the two edge states, so it adds nothing).
    """
    m = _count(m, "m (the number of items)")
    check_eps(eps1, "eps1"), check_eps(eps2, "eps2")
    n, lookup = _edge_weights(edges, m)
    cells = rr3_ddagger_cells(eps1, eps2)
    if n == 0:
        return np.empty((0, 2), dtype=np.int64)
    j = uniform_below(rng, m, n)
    w = lookup(j)
    state = np.full(n, NO_EDGE, dtype=np.int64)
    has = ~np.isnan(w)
    state[has] = np.where(discretize(w[has], -1.0, 1.0, rng), PLUS, MINUS)
    y = perturb(state, cells, rng)
    return np.column_stack([j, y])


@dataclass(frozen=True)
class GraphEstimates:
    """LPP‡ estimates for a bipartite graph of n users and m items (spec "Graph protocol").

    ``degree[j]`` and ``weight[j]`` are unbiased (given that item j was sampled at least once; NaN
    if no user sampled it); ``mean_weight[j] = weight[j]/degree[j]`` is consistent only.  The graph
    averages follow the paper's Eq. 6: totals divided by the number of vertex pairs
    ``(n+m)(n+m-1)/2`` (``vertex_pairs``), not by n or m.
    """

    degree: np.ndarray
    weight: np.ndarray
    mean_weight: np.ndarray
    samples: np.ndarray
    epsilon: float
    total_degree: float
    total_weight: float
    vertex_pairs: int
    average_degree_over_vertex_pairs: float
    average_weight_over_vertex_pairs: float


def graph_estimates(reports, n, m, eps1, eps2) -> GraphEstimates:
    """Per item j, with RR3‡ (``p2 = q``) on the reports of the ``N_j`` users who sampled j:
    ``degree_j = n (1 - pi_hat_0)`` and ``weight_j = n (pi_hat_1 - pi_hat_2)`` (the corrected closed
    forms), ``mean_weight_j = weight_j/degree_j``.  ``n`` is the number of users (one report each).
    """
    n, m = _count(n, "n (the number of users)"), _count(m, "m (the number of items)")
    eps1, eps2 = check_eps(eps1, "eps1", positive=True), check_eps(eps2, "eps2", positive=True)
    r = np.asarray(reports)
    if r.ndim != 2 or r.shape[1] != 2:
        raise ValueError(f"reports must be an (n, 2) array of [item, state], got shape {r.shape}")
    if r.shape[0] != n:
        raise ValueError(f"reports must hold one report per user: n = {n} but {r.shape[0]} reports")
    item = check_values(r[:, 0], m, "report items")
    state = check_values(r[:, 1], 3, "report states")
    counts = np.bincount(item * 3 + state, minlength=3 * m).reshape(m, 3).astype(np.float64)
    samples = counts.sum(axis=1)
    p1, q = _keep(eps1), _keep(eps2)
    seen = samples > 0
    share = np.divide(counts, samples[:, None], out=np.full_like(counts, np.nan), where=seen[:, None])
    pi0 = (share[:, 0] - (1.0 - p1)) / (2.0 * p1 - 1.0)
    diff = (share[:, 1] - share[:, 2]) / (p1 * (2.0 * q - 1.0))
    degree, weight = n * (1.0 - pi0), n * diff
    mean_weight = np.divide(weight, degree, out=np.full(m, np.nan), where=seen & (degree != 0))
    pairs = (n + m) * (n + m - 1) // 2
    total_degree, total_weight = float(degree.sum()), float(weight.sum())
    return GraphEstimates(degree, weight, mean_weight, samples.astype(np.int64), lpp_epsilon(eps1, eps2),
                          total_degree, total_weight, pairs, total_degree / pairs, total_weight / pairs)


def inverse_sample_size(n, m) -> float:
    """``E[1/N | N >= 1]`` for ``N ~ Binomial(n, 1/m)``: the users who sample one item under LPP‡.

    Summed exactly over the binomial's mass within 40 standard deviations of its mean (the rest is below
    double precision), renormalised by ``P(N >= 1)``.
    """
    # scipy.stats takes about a second to load and only this exact-variance helper needs it
    from scipy.stats import binom

    n, m = _count(n, "n (the number of users)"), _count(m, "m (the number of items)")
    if m == 1:
        return 1.0 / n
    mean, sd = n / m, math.sqrt(n * (m - 1)) / m
    k = np.arange(max(1, math.floor(mean - 40 * sd)), min(n, math.ceil(mean + 40 * sd)) + 1)
    pmf = binom.pmf(k, n, 1.0 / m)
    return float((pmf / k).sum() / -math.expm1(n * math.log1p(-1.0 / m)))


def lpp_item_covariance(pi, n, m, eps1, eps2, samples=None, any_weights=False) -> np.ndarray:
    """Covariance of one item's LPP‡ estimates ``(degree_j, weight_j)`` of ``graph_estimates`` (spec
    "Graph protocol"), when a share ``pi = (no edge, +1, -1)`` of the n users has each state towards
    the item (weights +-1, so the states are not random).

    Given the ``N >= 1`` users who sampled the item (a simple random sample of the n users),
    ``pi_hat`` is the RR3‡ estimator (``P = rr3_ddagger(p1, q)``, ``C = inv(P)``) of their states.  With
    ``A = C.T diag(t) C - outer(pi, pi)`` (N iid reports: ``estimator_covariance``) and
    ``B = diag(pi) - outer(pi, pi)`` (the states' own covariance in the population), sampling without
    replacement gives ``Cov(pi_hat | N) = A/N - B (N-1)/(N(n-1))``: when N = n only the randomization
    noise ``(A - B)/n`` is left.  Over N: ``Cov(pi_hat) = E[1/N] A - B (1 - E[1/N])/(n-1)`` with
    ``E[1/N]`` from ``inverse_sample_size``; given ``samples = N`` (an estimate's own count), ``1/N``.
    With ``any_weights``, the weights may lie anywhere in [-1, 1] (each edge's sign is then drawn): ``B``
    is the least spread consistent with ``pi``, every edge with the same mean sign, ``B = pi_0 (1 - pi_0)
    d d.T`` with ``d = e_0 - (0, pi_1, pi_2)/(1 - pi_0)``, which gives the largest covariance of all such
    populations (the finite-population term only subtracts).  ``degree = n (1 - pi_hat_0)`` and
    ``weight = n (pi_hat_1 - pi_hat_2)`` are ``L pi_hat`` plus constants, ``L = n [[-1, 0, 0], [0, 1, -1]]``,
    so their covariance is ``L Cov(pi_hat) L.T``.
    """
    P = rr3_ddagger(_keep(check_eps(eps1, "eps1", positive=True)), _keep(check_eps(eps2, "eps2", positive=True)))
    pi = _check_distribution(pi, 3)
    inv_n = inverse_sample_size(n, m) if samples is None else 1.0 / _count(samples, "samples")
    A = estimator_covariance(pi, P, 1)
    if any_weights and pi[0] < 1.0:
        d = np.array([1.0, -pi[1] / (1.0 - pi[0]), -pi[2] / (1.0 - pi[0])])
        B = pi[0] * (1.0 - pi[0]) * np.outer(d, d)
    else:
        B = np.diag(pi) - np.outer(pi, pi)
    cov = inv_n * A - B * ((1.0 - inv_n) / (n - 1) if n > 1 else 0.0)
    L = n * np.array([[-1.0, 0.0, 0.0], [0.0, 1.0, -1.0]])
    return L @ cov @ L.T


def lpp_standard_errors(reports, n, m, eps1, eps2) -> tuple[np.ndarray, np.ndarray]:
    """Plug-in standard errors of ``graph_estimates``' degree and weight per item: ``lpp_item_covariance``
    given the item's own number of samples, at its estimated states projected onto the simplex, for any
    weights (the reports cannot tell fractional weights from signs, so the larger covariance is used).
    NaN for an item nobody sampled."""

    est = graph_estimates(reports, n, m, eps1, eps2)  # validates every argument
    r = np.asarray(reports)
    counts = np.bincount(r[:, 0] * 3 + r[:, 1], minlength=3 * est.samples.size).reshape(-1, 3)
    P = rr3_ddagger(_keep(eps1), _keep(eps2))
    se = np.full((est.samples.size, 2), np.nan)
    for j in np.flatnonzero(est.samples):  # one 3x3 computation per item (items, not users)
        pi = project_simplex(estimate(counts[j], P))
        cov = lpp_item_covariance(pi, n, m, eps1, eps2, samples=int(est.samples[j]), any_weights=True)
        se[j] = np.sqrt(np.maximum(np.diag(cov), 0.0))
    return se[:, 0], se[:, 1]
