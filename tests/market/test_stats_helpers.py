"""The chi-square helpers of tests/market/stats.py agree with exact enumeration and have the stated power."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from mechanisms import chain, rr_matrix
from tests.market.stats import (
    ALPHA,
    chi_square,
    independent_pair_laws,
    pair_law,
    pair_law_by_enumeration,
    pair_laws,
    power,
    table,
)


@pytest.mark.parametrize("m", [2, 3, 5])
@pytest.mark.parametrize("eps", [[0.5, 1.0, 1.5, 2.0, 2.5, 3.0], [0.0, 0.1, 0.7, 0.75, 4.0]])
def test_pair_law_is_the_marginal_of_the_joint_law(m, eps):
    for a in range(m):
        for i, j in itertools.combinations(range(len(eps)), 2):
            np.testing.assert_allclose(pair_law(eps, m, a, i, j), pair_law_by_enumeration(eps, m, a, i, j),
                                       rtol=1e-10, atol=1e-15)
            np.testing.assert_allclose(pair_law(eps, m, a, i, j).reshape(m, m).sum(axis=0), rr_matrix(eps[j], m)[a],
                                       rtol=1e-10)


def test_chi_square_accepts_the_right_law_and_rejects_a_wrong_one():
    """Seeded draws from mechanisms.chain: the right pair law passes, the independent one fails by far."""
    rng = np.random.default_rng(7)
    eps, m = [0.5, 1.0, 1.5, 2.0], 3
    a = np.repeat(np.arange(m), 3000)
    out = chain(a, eps, m, rng)  # (n, L)
    counts = table(a, out[:, 1] * m + out[:, 2], m, m * m)
    assert chi_square(counts, pair_laws(eps, m, 1, 2))[2] > 1e-4
    assert chi_square(counts, independent_pair_laws(eps[1], eps[2], m))[2] < ALPHA
    assert power(counts.sum(axis=1), pair_laws(eps, m, 1, 2), independent_pair_laws(eps[1], eps[2], m)) > 0.999999


def test_power_grows_with_the_sample_and_is_alpha_under_the_null():
    P = rr_matrix(2.0, 3)
    Q = rr_matrix(1.8, 3)
    assert power([10, 10, 10], P, P) == pytest.approx(ALPHA, rel=1e-3)
    assert power([100] * 3, P, Q) < power([1000] * 3, P, Q) < power([10000] * 3, P, Q)


def test_chi_square_fails_on_impossible_cells_and_tiny_samples():
    P = np.array([[0.5, 0.5, 0.0]])
    with pytest.raises(AssertionError, match="probability zero"):
        chi_square(np.array([[50, 49, 1]]), P)
    with pytest.raises(AssertionError, match="too few"):
        chi_square(np.array([[3, 2, 0]]), P)
