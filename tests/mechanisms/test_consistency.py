"""Consistent estimates (mechanisms/consistency.py, docs/mechanisms-reference.md#consistent-estimates):
Norm-Sub and IBU, by their defining properties and against exact small-case computations."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from mechanisms import consistency, estimators, olh, oue
from mechanisms.exactness import krr_cells

finite = st.floats(min_value=-3, max_value=3, allow_nan=False, allow_infinity=False)


# ------------------------------------------------------------------------------------------------- Norm-Sub

@given(st.lists(finite, min_size=1, max_size=30))
@settings(max_examples=300, deadline=None)
def test_norm_sub_is_consistent_and_equals_the_euclidean_projection(values):
    """Defining properties (non-negative, sums to 1) and the fixed point: the projection, computed by sorting
    in ``estimators.project_simplex`` (an independent algorithm)."""
    f = consistency.norm_sub(values)
    assert (f >= 0).all()
    assert f.sum() == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(f, estimators.project_simplex(values), atol=1e-9)
    delta = max(v - fv for v, fv in zip(values, f) if fv > 0)
    np.testing.assert_allclose(f, np.maximum(np.asarray(values) - delta, 0), atol=1e-9)


def test_norm_sub_small_case_by_hand():
    """Worked by hand.  (0.7, 0.5, -0.1, -0.1): delta = 0 then the two negatives drop, the others' excess 0.2 is
    taken half each -> (0.6, 0.4, 0, 0).  (1.5, 0.1, -0.2): delta = 0.4/3 drops -0.2; then delta = 0.3 drops 0.1;
    then delta = 0.5 -> (1, 0, 0).  (0.3, -0.01), summing to less than one: delta = -0.355 -> (0.655, 0.345)."""
    np.testing.assert_allclose(consistency.norm_sub([0.7, 0.5, -0.1, -0.1]), [0.6, 0.4, 0, 0], atol=1e-12)
    np.testing.assert_allclose(consistency.norm_sub([1.5, 0.1, -0.2]), [1.0, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(consistency.norm_sub([0.3, -0.01]), [0.655, 0.345], atol=1e-12)


def test_norm_sub_of_a_consistent_estimate_is_itself():
    f = np.array([0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(consistency.norm_sub(f), f, atol=1e-15)


@pytest.mark.parametrize("bad", [[], [[0.1, 0.2]], [np.nan, 0.5], ["a"]])
def test_norm_sub_refuses_bad_input(bad):
    with pytest.raises(ValueError):
        consistency.norm_sub(bad)


# ------------------------------------------------------------------------------------------------------ IBU

def _log_likelihood(L, w, f):
    return float((w * np.log(L @ f)).sum())


def _brute_force_ml(L, w):
    """The maximum of the log-likelihood on the simplex by SLSQP from many starts (an independent method)."""
    m = L.shape[1]
    best = None
    rng = np.random.default_rng(7)
    for start in [np.full(m, 1 / m), *rng.dirichlet(np.ones(m), size=6)]:
        res = minimize(lambda f: -_log_likelihood(L, w, np.maximum(f, 1e-300)), start, method="SLSQP",
                       bounds=[(0, 1)] * m, constraints=[{"type": "eq", "fun": lambda f: f.sum() - 1}],
                       options={"ftol": 1e-15, "maxiter": 1000})
        if best is None or -res.fun > -best.fun:
            best = res
    return np.maximum(best.x, 0) / np.maximum(best.x, 0).sum()


def test_ibu_is_the_maximum_likelihood_of_k_rr_at_mixed_epsilons():
    """k-RR outputs at two epsilons (a chain sold at 0.5 and at 2): IBU equals the KKT-exact ML of
    ``estimators.em_frequencies`` and beats every point of a grid of the simplex."""
    rng = np.random.default_rng(3)
    m = 3
    truth = np.array([0.7, 0.3, 0.0])
    x = rng.choice(m, size=400, p=truth)
    eps = np.where(np.arange(400) < 200, 0.5, 2.0)
    y = np.concatenate([estimators_sample(x[:200], 0.5, m, rng), estimators_sample(x[200:], 2.0, m, rng)])
    groups = []
    for e, ys in ((0.5, y[:200]), (2.0, y[200:])):
        cells = krr_cells(e, m)
        groups.append((cells.keep / cells.total, cells.flip / cells.total, np.bincount(ys, minlength=m)))
    L, w = consistency.krr_likelihood(groups)
    result = consistency.ibu(L, w, max_iterations=200_000, tolerance=1e-14)
    f = result.frequencies
    assert (f >= 0).all() and f.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(f, estimators.em_frequencies(y, eps, m), atol=2e-5)
    L = L.dense()
    best_grid = max(_log_likelihood(L, w, np.array(g)) for g in _simplex_grid(m, 100))
    assert _log_likelihood(L, w, f) >= best_grid - 1e-9


def estimators_sample(x, eps, m, rng):
    from mechanisms import rr
    return rr.perturb(x, eps, m, np.random.default_rng(rng.integers(2**32)))


def _simplex_grid(m, steps):
    for c in itertools.product(range(steps + 1), repeat=m - 1):
        if sum(c) <= steps:
            yield [*(ci / steps for ci in c), (steps - sum(c)) / steps]


def test_ibu_of_oue_reports_matches_an_exact_small_case():
    """Six OUE reports over 3 values at eps = 1: the per-report likelihoods are written out by hand
    (``prod_j p_or_q``), their ML found by SLSQP and by a fine grid; IBU agrees with both."""
    eps = 1.0
    p, q = oue.probabilities(eps)
    reports = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0], [1, 0, 1], [0, 1, 0], [1, 0, 0]], dtype=np.uint8)
    # exact: Pr(y | v) = prod_j Pr(y_j | bit_j(v)), computed without the common-factor shortcut
    exact = np.array([[np.prod([(p if j == v else q) if yj else (1 - p if j == v else 1 - q)
                                for j, yj in enumerate(r)]) for v in range(3)] for r in reports])
    L, w = consistency.unary_likelihood(reports, p, q)
    assert w.sum() == len(reports) and L.shape[0] == 5  # two identical reports share a row
    result = consistency.ibu(L, w, max_iterations=500_000, tolerance=1e-15)
    ones = np.ones(len(reports))
    reference = _brute_force_ml(exact, ones)
    np.testing.assert_allclose(result.frequencies, reference, atol=1e-4)
    grid_best = max(_log_likelihood(exact, ones, np.array(g)) for g in _simplex_grid(3, 200))
    assert _log_likelihood(exact, ones, result.frequencies) >= grid_best - 1e-9


def test_ibu_of_olh_reports_uses_the_per_report_law():
    """OLH: a report supports the values that hash to its bucket; ``Pr = p`` for them and ``(1 - p)/(g - 1)`` for
    the others.  A small population's IBU equals SLSQP's maximum of the same likelihood, and is consistent."""
    rng = np.random.default_rng(11)
    m, eps = 4, 1.5
    x = rng.choice(m, size=60, p=[0.5, 0.3, 0.2, 0.0])
    seeds, buckets = olh.olh_perturb(x, eps, m, rng)
    g = olh.olh_g(eps)
    p, _ = olh.probabilities(eps)
    support = olh.hash_values(seeds[:, None], np.arange(m)[None, :], g) == buckets[:, None]
    L, w = consistency.support_likelihood(support, p, (1 - p) / (g - 1))
    result = consistency.ibu(L, w, max_iterations=500_000, tolerance=1e-15)
    assert (result.frequencies >= 0).all() and result.frequencies.sum() == pytest.approx(1.0)
    exact = np.where(support, p, (1 - p) / (g - 1))
    np.testing.assert_allclose(result.frequencies, _brute_force_ml(exact, np.ones(len(x))), atol=1e-4)


def test_ibu_log_likelihood_never_decreases_and_stops_at_the_tolerance():
    rng = np.random.default_rng(5)
    L = rng.uniform(0.1, 1.0, size=(40, 5))
    previous = -np.inf
    for k in (1, 2, 5, 20, 100):
        r = consistency.ibu(L, max_iterations=k, tolerance=1e-300)
        assert r.iterations == k and not r.converged
        assert r.log_likelihood >= previous - 1e-12
        previous = r.log_likelihood
    for tol in (1e-2, 1e-3, 1e-6):
        done = consistency.ibu(L, tolerance=tol)
        assert done.converged and done.iterations < consistency.IBU_MAX_ITERATIONS
        best = consistency.ibu(L, tolerance=1e-12, max_iterations=1_000_000)
        # the stopping rule's promise: the log-likelihood (summed over the 40 reports) within tol of the maximum
        assert 0 <= 40 * (best.log_likelihood - done.log_likelihood) <= tol


@pytest.mark.parametrize("likelihood, weights", [
    (np.zeros((0, 3)), None), (np.array([[0.0, 0.0]]), None), (np.array([[-1.0, 1.0]]), None),
    (np.array([[0.5, 0.5]]), [1.0, 2.0]), (np.array([[0.5, 0.5]]), [-1.0]), (np.array([[True, False]]), None)])
def test_ibu_refuses_bad_input(likelihood, weights):
    with pytest.raises(ValueError):
        consistency.ibu(likelihood, weights)


@pytest.mark.parametrize("kwargs", [{"max_iterations": 0}, {"max_iterations": True}, {"tolerance": 0},
                                    {"tolerance": float("nan")}])
def test_ibu_refuses_bad_stopping_rules(kwargs):
    with pytest.raises(ValueError):
        consistency.ibu(np.ones((2, 2)), **kwargs)


def test_accelerated_ibu_reaches_plain_em_fixed_point_in_fewer_steps():
    """SQUAREM changes the path, not the answer: on a long-tailed OLH population both reach the same maximum
    (the accelerated one at least as high a likelihood) and the accelerated one in fewer EM steps."""
    rng = np.random.default_rng(21)
    m, eps = 30, 1.0
    zipf = 1.0 / np.arange(1, m + 1) ** 1.1
    x = rng.choice(m, size=400, p=zipf / zipf.sum())
    seeds, buckets = olh.olh_perturb(x, eps, m, rng)
    g = olh.olh_g(eps)
    p, _ = olh.probabilities(eps)
    support = olh.hash_values(seeds[:, None], np.arange(m)[None, :], g) == buckets[:, None]
    L, w = consistency.support_likelihood(support, p, (1 - p) / (g - 1))
    fast = consistency.ibu(L, w, tolerance=1e-10, max_iterations=200_000)
    slow = consistency.ibu(L, w, tolerance=1e-10, max_iterations=200_000, accelerate=False)
    dense = consistency.ibu(L.dense(), w, tolerance=1e-10, max_iterations=200_000)
    assert fast.converged and slow.converged and dense.converged
    assert fast.iterations < slow.iterations
    np.testing.assert_allclose(fast.frequencies, slow.frequencies, atol=1e-5)
    np.testing.assert_allclose(fast.frequencies, dense.frequencies, atol=1e-6)
    assert fast.log_likelihood >= slow.log_likelihood - 1e-10


def test_two_level_likelihood_is_the_dense_law():
    reports = np.array([[1, 0, 1], [0, 0, 0], [1, 0, 1]], dtype=np.uint8)
    L, w = consistency.unary_likelihood(reports, 0.5, 0.25)
    np.testing.assert_array_equal(w, [1, 2])
    np.testing.assert_allclose(L.dense(), [[2 / 3, 2 / 3, 2 / 3], [2.0, 2 / 3, 2.0]])
    K, c = consistency.krr_likelihood([(0.6, 0.2, np.array([3, 0, 1])), (0.8, 0.1, np.array([0, 2, 0]))])
    assert K.shape == (6, 3)
    np.testing.assert_allclose(K.dense()[:3], [[0.6, 0.2, 0.2], [0.2, 0.6, 0.2], [0.2, 0.2, 0.6]])
    np.testing.assert_array_equal(c, [3, 0, 1, 0, 2, 0])
