"""Chi-square helpers for the statistical tests of stored chains (not a test module).

The service draws with the secure default RNG, so these tests are not seeded: each uses ``ALPHA = 1e-7``
(a false alarm is a one-in-ten-million event) and states, by a non-central chi-square power computation on
the actual group sizes, which wrong laws its sample size detects.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from mechanisms import rr_matrix, step_matrix
from tests.mechanisms.test_exact import joint_law

ALPHA = 1e-7


def table(groups: np.ndarray, cells: np.ndarray, n_groups: int, n_cells: int) -> np.ndarray:
    """Counts of ``cells`` within each group: an (n_groups, n_cells) table."""
    return np.bincount(groups * n_cells + cells, minlength=n_groups * n_cells).reshape(n_groups, n_cells)


def chi_square(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int, float]:
    """Pooled chi-square of a (groups, cells) count table against exact cell probabilities per group.

    Returns ``(statistic, degrees of freedom, p-value)``; a count on a cell of probability zero fails outright.
    Groups with no observations are left out.
    """
    assert counts.shape == probs.shape
    seen = counts.sum(axis=1) > 0
    counts, probs = counts[seen], probs[seen]
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-9)
    zero = probs == 0
    assert counts[zero].sum() == 0, "an output fell on a cell of probability zero"
    expected = probs * counts.sum(axis=1, keepdims=True)
    assert expected[~zero].min() >= 5, "too few expected counts for the chi-square approximation"
    stat = float((((counts - expected) ** 2)[~zero] / expected[~zero]).sum())
    df = int((~zero).sum() - counts.shape[0])
    return stat, df, float(stats.chi2.sf(stat, df))


def power(sizes: np.ndarray, probs: np.ndarray, alternative: np.ndarray, alpha: float = ALPHA) -> float:
    """Probability that ``chi_square`` rejects at level ``alpha`` when the data follow ``alternative``.

    Non-central chi-square approximation: non-centrality ``sum_g n_g sum_c (q - p)^2 / p``.
    """
    sizes = np.asarray(sizes, dtype=float)[:, None]
    mask = probs > 0
    lam = float(((sizes * (alternative - probs) ** 2)[mask] / probs[mask]).sum())
    df = int(mask.sum() - probs.shape[0])
    return float(stats.ncx2.sf(stats.chi2.isf(alpha, df), df, lam))


def pair_law(epsilons, m: int, a: int, i: int, j: int) -> np.ndarray:
    """Exact law of (output i, output j), i < j, of a forward chain through ``epsilons`` for true value ``a``.

    The chain is Markov given ``a`` (that is how ``joint_law`` builds it): the law of output i is the first
    k-RR pushed through the step matrices, and the pair's law is that times the product of the steps from i
    to j — the same numbers as marginalizing ``joint_law`` (checked in test_stats_helpers), without its
    m**L table.
    """
    eps = [float(e) for e in epsilons]
    v = rr_matrix(eps[0], m)[a]
    for k in range(i):
        v = v @ step_matrix(eps[k], eps[k + 1], m, a)
    P = np.diag(v)
    for k in range(i, j):
        P = P @ step_matrix(eps[k], eps[k + 1], m, a)
    return P.reshape(-1)


def pair_law_by_enumeration(epsilons, m: int, a: int, i: int, j: int) -> np.ndarray:
    """The same law by marginalizing the full joint law (small chains only)."""
    J = joint_law(list(epsilons), m, a)
    axes = tuple(k for k in range(len(epsilons)) if k not in (i, j))
    return J.sum(axis=axes).reshape(-1)


def pair_laws(epsilons, m: int, i: int, j: int) -> np.ndarray:
    return np.array([pair_law(epsilons, m, a, i, j) for a in range(m)])


def independent_pair_laws(eps_i: float, eps_j: float, m: int) -> np.ndarray:
    """The wrong law of an extension that ignores the stored head: two independent k-RRs."""
    return np.array([np.outer(rr_matrix(eps_i, m)[a], rr_matrix(eps_j, m)[a]).reshape(-1) for a in range(m)])


def marginal_laws(eps: float, m: int) -> np.ndarray:
    return rr_matrix(eps, m)
