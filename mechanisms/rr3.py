"""Three-element randomized response and weighted bipartite graphs, spec rr3.md (Ma and Wang).

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
``Generator`` when passed), compared with integer thresholds ``floor(p 2^64)``.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from ._validation import check_eps, check_m, check_values
from .numeric import discretize
from .random import TWO_64, uniform_below, words

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

def _row_tables(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per input row: the output order (most probable output last) and the ``c - 1`` integer
    boundaries ``b_1 <= ... <= b_{c-1} < 2^64`` of the cumulative widths ``floor(P 2^64)``.

    The most probable output absorbs the rounding remainder, so every probability is realised within
    ``c 2^-64`` and an output of probability 0 is never drawn (its width is 0).
    """
    rows, c = q.shape
    order = np.empty((rows, c), dtype=np.int64)
    bounds = np.empty((rows, c - 1), dtype=np.uint64)
    for i in range(rows):  # once per matrix row (a handful), never per value
        widths = [int(float(v) * TWO_64) for v in q[i]]
        top = int(np.argmax(q[i]))
        widths[top] += TWO_64 - sum(widths)
        rest = [j for j in range(c) if j != top]
        order[i] = rest + [top]
        acc = 0
        for col, j in enumerate(rest):
            acc += widths[j]
            bounds[i, col] = acc
    return order, bounds


def perturb(values, P, rng=None) -> np.ndarray:
    """Draw an output for every input value ``x`` (a row index of ``P``) with ``Pr(j) = P[x, j]``.

    Spec "Estimators" (the sampler behind every RR3 release and LPP‡).  One uniform word ``u`` per
    value; the output is the ``r``-th entry of the row's output order,
    ``r`` = the number of boundaries ``b <= u`` (see :func:`_row_tables`): exact integer comparisons.
    """
    q = _check_matrix(P)
    x = check_values(values, q.shape[0])
    order, bounds = _row_tables(q)
    out = np.empty(x.size, dtype=np.int64)
    block = max(1, _CELLS_PER_BLOCK // q.shape[1])
    for start in range(0, x.size, block):
        stop = min(start + block, x.size)
        xb = x[start:stop]
        u = words(rng, stop - start)
        rank = (u[:, None] >= bounds[xb]).sum(axis=1)
        out[start:stop] = order[xb, rank]
    return out


# ------------------------------------------------------------------------------------- graph protocol LPP‡

NO_EDGE, PLUS, MINUS = 0, 1, 2


def lpp_epsilon(eps1, eps2) -> float:
    """The exact LDP level of LPP‡ (spec "Privacy level"): ``max(eps2, ln(2 e^(eps1+eps2)/(e^eps2 + 1)))``
    ``= max(eps2, eps1 + ln 2 - ln(1 + e^-eps2))``, at most ``eps1 + eps2``.  The paper's Lemma 2
    keeps only the second term, which misses the ratio ``p1 q / (p1 (1-q)) = e^eps2`` between the
    two edge states: (1, 2) is 2.0, not 1.5662."""
    eps1, eps2 = check_eps(eps1, "eps1"), check_eps(eps2, "eps2")
    return max(eps2, eps1 + math.log(2.0) - math.log1p(math.exp(-eps2)))


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
    fair sign.  The release is ``lpp_epsilon(eps1, eps2)``-LDP.
    """
    m = _count(m, "m (the number of items)")
    eps1, eps2 = check_eps(eps1, "eps1"), check_eps(eps2, "eps2")
    n, lookup = _edge_weights(edges, m)
    if n == 0:
        return np.empty((0, 2), dtype=np.int64)
    j = uniform_below(rng, m, n)
    w = lookup(j)
    state = np.full(n, NO_EDGE, dtype=np.int64)
    has = ~np.isnan(w)
    state[has] = np.where(discretize(w[has], -1.0, 1.0, rng), PLUS, MINUS)
    y = perturb(state, rr3_ddagger(_keep(eps1), _keep(eps2)), rng)
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
    from .estimators import project_simplex

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
