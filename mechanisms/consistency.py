"""Consistent frequency estimates: Norm-Sub and the iterative Bayesian update (IBU),
docs/mechanisms-reference.md#consistent-estimates.

The unbiased estimates (``estimators``, ``oue``, ``olh``, ``uldp``, ``rr3``) can be negative and need not sum to
one.  Two post-processings give *consistent* frequencies (non-negative, summing to one), as compared by Wang,
Lopuhaä-Zwakenberg, Li, Škorić and Li, "Locally Differentially Private Frequency Estimation with Consistency"
(NDSS 2020).  Both are biased; they trade that bias for a smaller mean squared error where many true
frequencies are small.

**Norm-Sub** (:func:`norm_sub`): the estimates that would be negative become 0 and one common ``delta`` is
subtracted from the others so that they sum to 1: ``f_v = max(f_hat_v - delta, 0)``, ``sum_v f_v = 1``.  This
is the constrained least-squares estimate, the Euclidean projection of ``f_hat`` onto the simplex (Wang et al.
show the two coincide; ``estimators.project_simplex`` computes it by sorting, and the tests check that both
agree).

**IBU** (:func:`ibu`): the maximum-likelihood frequencies under the randomizer's exact law.  Report ``i`` has
likelihood ``Pr(y_i | v) = L_iv`` (a constant factor per report changes nothing); the log-likelihood
``sum_i w_i log(sum_v L_iv f_v)`` is concave in ``f`` on the simplex, and EM's update

    f_v <- f_v * (1/n) sum_i w_i L_iv / (sum_u L_iu f_u)

never decreases it and converges to its maximum (Agrawal and Aggarwal 2001; ElSalamouny and Palamidessi 2020).
Reports with the same likelihood row are grouped (``w_i`` counts them), so a k-RR output at one epsilon costs one
row per output value.  Every mechanism sold has a *two-level* law: ``L_iv`` is ``high_i`` for the values report
``i`` supports (k-RR: its output; OUE: its 1 bits; OLH: the values hashing to its bucket) and ``low_i`` for the
others, so ``L f = low + (high - low) S f`` with a sparse support matrix ``S`` (:class:`TwoLevelLikelihood`):
an iteration costs the support's size, not reports x values.  EM is slow near the simplex's boundary (thousands
of iterations for a long-tailed population), so the iterations are accelerated by SQUAREM (Varadhan and Roland,
Scand. J. Statist. 2008): two EM steps give a direction, a longer step along it is taken when it stays on the
simplex and does not lower the likelihood, and EM's own step otherwise; the fixed point is the same.  The
likelihoods are the *realised* ones: each mechanism's probabilities computed from its integer thresholds
(``oue.probabilities``, ``olh.probabilities``, ``exactness.krr_cells``).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
from scipy import sparse

#: Default stopping rule of :func:`ibu`: the log-likelihood (in nats, summed over the reports) is within this of
#: its maximum.  With ``g_v = (1/n) sum_i w_i L_iv / (L f)_i`` (EM's multiplier, ``sum_v f_v g_v = 1``), Jensen gives
#: ``l(f*) - l(f) <= n log max_v g_v`` for every ``f`` with no zero, so the rule is checked exactly at each step.
#: 1e-3 nats is far below what data can tell apart (a likelihood-ratio test needs about 2 nats at 95%).
IBU_TOLERANCE = 1e-3
IBU_MAX_ITERATIONS = 10_000
#: Likelihood cells (reports x values) :func:`ibu` multiplies per block, bounding its memory.
BLOCK_CELLS = 1 << 22


@dataclass(frozen=True)
class IbuResult:
    """The IBU estimate, the iterations it took, whether the tolerance was met, and its log-likelihood (per
    report, up to each report's constant factor)."""

    frequencies: np.ndarray
    iterations: int
    converged: bool
    log_likelihood: float


def _check_vector(values, name: str) -> np.ndarray:
    try:
        v = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numbers, got {values!r}") from None
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"{name} must be a non-empty one-dimensional array, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite numbers")
    return v


def norm_sub(estimate) -> np.ndarray:
    """Norm-Sub of an unbiased frequency estimate: ``f_v = max(f_hat_v - delta, 0)`` with the one ``delta`` that
    makes them sum to 1 (module docstring).  Found as the paper describes it: subtract a common ``delta`` from the
    values still in play so they sum to 1, drop those that went negative (they become 0) and repeat; at most ``m``
    rounds, since each round that does not finish drops at least one value (Michelot's algorithm)."""
    f_hat = _check_vector(estimate, "estimate")
    in_play = np.ones(f_hat.size, dtype=bool)
    for _ in range(f_hat.size):
        delta = (f_hat[in_play].sum() - 1.0) / in_play.sum()
        negative = in_play & (f_hat - delta < 0)
        if not negative.any():
            return np.where(in_play, f_hat - delta, 0.0)
        in_play &= ~negative
    raise AssertionError("Norm-Sub did not finish in m rounds")  # pragma: no cover - the largest never drops


@dataclass(frozen=True)
class TwoLevelLikelihood:
    """``L_iv = high_i`` where ``support[i, v]``, ``low_i`` elsewhere (module docstring); ``support`` is a SciPy
    CSR matrix (G, m) of booleans, ``high`` and ``low`` (G,) non-negative."""

    support: sparse.csr_matrix
    high: np.ndarray
    low: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return self.support.shape

    def dense(self) -> np.ndarray:
        """The (G, m) matrix (for tests and small cases)."""
        return np.where(self.support.toarray(), self.high[:, None], self.low[:, None])


class _Dense:
    def __init__(self, L: np.ndarray):
        self.L = L / L.max(axis=1, keepdims=True)  # a factor per report changes nothing; avoids underflow

    def matvec(self, f):
        return self.L @ f

    def rmatvec(self, u):
        return u @ self.L


class _TwoLevel:
    def __init__(self, t: TwoLevelLikelihood):
        scale = np.maximum(t.high, t.low)
        self.low, self.gap = t.low / scale, (t.high - t.low) / scale
        self.S = t.support.astype(np.float64).tocsr()
        self.ST = self.S.T.tocsr()

    def matvec(self, f):
        return self.low * f.sum() + self.gap * (self.S @ f)

    def rmatvec(self, u):
        return (u * self.low).sum() + self.ST @ (u * self.gap)


def _check_likelihood(likelihood):
    if isinstance(likelihood, TwoLevelLikelihood):
        G, m = likelihood.shape
        high = np.asarray(likelihood.high, dtype=np.float64)
        low = np.asarray(likelihood.low, dtype=np.float64)
        if G == 0 or m == 0 or high.shape != (G,) or low.shape != (G,):
            raise ValueError(f"a two-level likelihood needs one high and one low per report, got {G} reports")
        if not (np.all(np.isfinite(high)) and np.all(np.isfinite(low))) or (high < 0).any() or (low < 0).any():
            raise ValueError("likelihood must be finite and non-negative")
        if (np.maximum(high, low) <= 0).any():
            raise ValueError("every report must be possible under some value (a likelihood row is all zero)")
        return TwoLevelLikelihood(sparse.csr_matrix(likelihood.support, dtype=bool), high, low)
    L = np.asarray(likelihood)
    if L.ndim != 2 or L.shape[0] == 0 or L.shape[1] == 0:
        raise ValueError(f"likelihood must be a non-empty (reports, values) matrix, got shape {L.shape}")
    if L.dtype == bool:
        raise ValueError("likelihood must hold probabilities, not booleans")
    L = L.astype(np.float64, copy=False)
    if not np.all(np.isfinite(L)) or (L < 0).any():
        raise ValueError("likelihood must be finite and non-negative")
    if (L.max(axis=1) <= 0).any():
        raise ValueError("every report must be possible under some value (a likelihood row is all zero)")
    return L


def _check_stopping(max_iterations, tolerance) -> tuple[int, float]:
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, numbers.Integral) or max_iterations < 1:
        raise ValueError(f"max_iterations must be a positive integer, got {max_iterations!r}")
    if (isinstance(tolerance, bool) or not isinstance(tolerance, numbers.Real)
            or not (math.isfinite(tolerance) and tolerance > 0)):
        raise ValueError(f"tolerance must be a positive finite number, got {tolerance!r}")
    return int(max_iterations), float(tolerance)


def _rows(L, keep: np.ndarray):
    if isinstance(L, TwoLevelLikelihood):
        return _TwoLevel(TwoLevelLikelihood(L.support[keep], L.high[keep], L.low[keep]))
    return _Dense(L[keep])


def ibu(likelihood, weights=None, *, max_iterations: int = IBU_MAX_ITERATIONS,
        tolerance: float = IBU_TOLERANCE, accelerate: bool = True) -> IbuResult:
    """IBU (module docstring) from ``likelihood`` ((G, m): row g is ``Pr(report g | v)`` for every value ``v``,
    up to a positive factor per row; a dense array or a :class:`TwoLevelLikelihood`) and ``weights`` (G,: how
    many reports share row g; 1 each by default).

    Starts from the uniform distribution (every value possible, so none is stuck at 0) and stops once the
    log-likelihood is provably within ``tolerance`` nats of its maximum (``IBU_TOLERANCE``), or after
    ``max_iterations`` EM steps (an accelerated iteration takes three).  ``accelerate=False`` runs plain EM (the same
    fixed point).
    """
    L = _check_likelihood(likelihood)
    max_iterations, tolerance = _check_stopping(max_iterations, tolerance)
    w = np.ones(L.shape[0]) if weights is None else _check_vector(weights, "weights")
    if w.shape[0] != L.shape[0]:
        raise ValueError(f"weights must have one entry per likelihood row, got {w.shape[0]} for {L.shape[0]}")
    if (w < 0).any() or w.sum() <= 0:
        raise ValueError("weights must be non-negative counts, not all zero")
    keep = w > 0
    op, w = _rows(L, keep), w[keep]
    n = w.sum()
    m = L.shape[1]

    def em(f):
        """EM's step from ``f`` and the bound ``n log max_v g_v`` on how far ``f``'s log-likelihood is from the
        maximum (module docstring)."""
        g = op.rmatvec(w / op.matvec(f)) / n
        new = f * g
        return new / new.sum(), n * math.log(max(float(g.max()), 1.0))  # renormalised: no drift over many steps

    def loglik(f):
        return float((w * np.log(op.matvec(f))).sum() / n)

    f = np.full(m, 1.0 / m)
    steps, converged = 0, False
    while steps < max_iterations:
        f1, gap = em(f)
        steps += 1
        if gap <= tolerance:
            f, converged = f1, True  # f is within tolerance; its EM step, never worse, is returned
            break
        if not accelerate or steps + 2 > max_iterations:
            f = f1
            continue
        f2, gap = em(f1)
        steps += 1
        if gap <= tolerance:
            f, converged = f2, True
            break
        # SQUAREM's extrapolation f - 2 a r + a^2 v (a <= -1), kept positive (no value may fall below 1% of EM's
        # own step, so none is frozen at 0), then one EM step; taken only if it beats EM's two steps
        r, v = f1 - f, f2 - 2 * f1 + f
        norm_v = float(np.sqrt(v @ v))
        alpha = min(-float(np.sqrt(r @ r)) / norm_v, -1.0) if norm_v > 0 else -1.0
        candidate = np.maximum(f - 2 * alpha * r + alpha * alpha * v, 0.01 * f2)
        candidate, _ = em(candidate / candidate.sum())
        steps += 1
        f = candidate if loglik(candidate) >= loglik(f2) else f2
    return IbuResult(frequencies=f, iterations=steps, converged=converged, log_likelihood=loglik(f))


# ----------------------------------------------------------------------- the exact law of each mechanism

def krr_likelihood(groups: list[tuple[float, float, np.ndarray]]) -> tuple[TwoLevelLikelihood, np.ndarray]:
    """``(likelihood, weights)`` of k-RR outputs grouped by epsilon: for each group ``(p, q, counts)`` (keep
    probability, each other value's, and how many outputs equal each value) one row per output value ``y``,
    ``p`` at ``v = y`` and ``q`` elsewhere, weighted by ``counts[y]``."""
    supports, highs, lows, weights = [], [], [], []
    for p, q, counts in groups:
        counts = np.asarray(counts, dtype=np.float64)
        m = counts.shape[0]
        supports.append(sparse.identity(m, dtype=bool, format="csr"))
        highs.append(np.full(m, float(p)))
        lows.append(np.full(m, float(q)))
        weights.append(counts)
    return (TwoLevelLikelihood(sparse.vstack(supports, format="csr"), np.concatenate(highs), np.concatenate(lows)),
            np.concatenate(weights))


def _unique_rows(support) -> tuple[sparse.csr_matrix, np.ndarray]:
    s = np.asarray(support, dtype=bool)
    if s.ndim != 2 or s.shape[0] == 0:
        raise ValueError("reports must be an (n, m) bit matrix with n >= 1")
    patterns, counts = np.unique(np.packbits(s, axis=1), axis=0, return_counts=True)
    unique = np.unpackbits(patterns, axis=1, count=s.shape[1]).astype(bool)
    return sparse.csr_matrix(unique), counts.astype(np.float64)


def unary_likelihood(reports, p: float, q: float) -> tuple[TwoLevelLikelihood, np.ndarray]:
    """``(likelihood, weights)`` of unary-encoding reports ((n, m) bits; OUE: bit ``v`` is 1 w.p. ``p`` when the
    value is ``v``, every other bit w.p. ``q``).  ``Pr(y | v) = C(y) (p/q)^{y_v} ((1-p)/(1-q))^{1-y_v}``, so the
    row is ``p/q`` where the report's bit is 1 and ``(1-p)/(1-q)`` elsewhere; identical reports share a row."""
    S, counts = _unique_rows(reports)
    G = S.shape[0]
    return TwoLevelLikelihood(S, np.full(G, p / q), np.full(G, (1.0 - p) / (1.0 - q))), counts


def support_likelihood(support, p: float, q: float) -> tuple[TwoLevelLikelihood, np.ndarray]:
    """``(likelihood, weights)`` of reports whose law is ``p`` for the values they "support" and ``q`` for the
    others (OLH: a value is supported when the report's hash of it is the reported bucket, ``q = (1-p)/(g-1)``);
    ``support`` is (n, m) booleans; identical rows share one."""
    S, counts = _unique_rows(support)
    G = S.shape[0]
    return TwoLevelLikelihood(S, np.full(G, float(p)), np.full(G, float(q))), counts
