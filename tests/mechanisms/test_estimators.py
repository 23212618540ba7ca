"""Estimators (docs/mechanisms-reference.md#estimation): exact formulas, Monte Carlo, post-processing.

Monte Carlo tests use seeded Generators and tolerances derived from the
variance formulas: a mean of R estimates must lie within 4 standard errors
of the truth, and a sample variance of R (near-normal) estimates within a
relative ``4 sqrt(2/(R - 1))`` of the formula (the chi-square spread of a
sample variance).  ``test_variance_models_are_distinguishable`` checks that
the same sample sizes reject the wrong sampling model, so neither variance
test could pass with the other model's formula.
"""
from __future__ import annotations

import math
from decimal import Decimal
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms import flip_probability, keep_probability, perturb
from mechanisms.estimators import (
    confidence_intervals,
    em_frequencies,
    frequencies,
    frequency_variance,
    frequency_variance_fixed,
    mean,
    mean_variance,
    project_simplex,
)
from mechanisms.numeric import discretize
from mechanisms.random import U64_MAX

SIGMAS = 4.0
LEVELS = np.array([0.1, 0.25, 0.5, 1.0, 2.0])  # a heterogeneous mix of epsilons


def var_tolerance(reps: int) -> float:
    """Relative tolerance of a sample variance of ``reps`` normal draws: 4 standard deviations."""
    return SIGMAS * math.sqrt(2.0 / (reps - 1))


def perturb_rows(values: np.ndarray, eps, m: int, rng) -> np.ndarray:
    """k-RR of an (R, n) array of values; ``eps`` scalar or per column (one ``perturb`` call per level)."""
    if np.ndim(eps) == 0:
        return perturb(values.ravel(), eps, m, rng).reshape(values.shape)
    out = np.empty_like(values)
    for e in np.unique(eps):
        cols = eps == e
        out[:, cols] = perturb(values[:, cols].ravel(), e, m, rng).reshape(values.shape[0], -1)
    return out


def iid_values(rng, f, reps: int, n: int) -> np.ndarray:
    return rng.choice(len(f), size=(reps, n), p=f)


def fixed_values(counts, reps: int) -> np.ndarray:
    return np.tile(np.repeat(np.arange(len(counts)), counts), (reps, 1))


def estimates(outputs: np.ndarray, eps, m: int) -> np.ndarray:
    return np.array([frequencies(row, eps, m) for row in outputs])


def reference_pq(eps, m):
    """Keep/flip probabilities from rr.py, elementwise (an independent route to p and q)."""
    levels, inv = np.unique(np.atleast_1d(eps), return_inverse=True)
    p = np.array([keep_probability(float(e), m) for e in levels])
    q = np.array([flip_probability(float(e), m) for e in levels])
    return p[inv], q[inv]


def heterogeneous_eps(rng, n: int) -> np.ndarray:
    return rng.choice(LEVELS, size=n)


# ------------------------------------------------------------------------------- frequencies: exact checks

def test_frequencies_scalar_matches_closed_form():
    m, eps = 4, 1.3
    y = np.array([0, 0, 1, 2, 3, 3, 3, 1, 0, 2, 2, 2, 2])
    E = math.exp(eps)
    p, q = E / (E + m - 1), 1 / (E + m - 1)
    expected = (np.bincount(y, minlength=m) / y.size - q) / (p - q)
    np.testing.assert_allclose(frequencies(y, eps, m), expected, rtol=1e-12, atol=1e-14)
    assert frequencies(y, eps, m).sum() == pytest.approx(1.0, abs=1e-12)


def test_frequencies_per_output_matches_the_spec_weighted_sum():
    rng = np.random.default_rng(11)
    m, n = 5, 300
    y = rng.integers(0, m, size=n)
    eps = rng.uniform(0.05, 3.0, size=n)  # every epsilon distinct: U = n groups
    p, q = reference_pq(eps, m)
    z = ((y[:, None] == np.arange(m)) - q[:, None]) / (p - q)[:, None]
    w = (p - q) ** 2 / ((p - q) ** 2).sum()
    np.testing.assert_allclose(frequencies(y, eps, m), w @ z, rtol=1e-10, atol=1e-12)
    eps_levels = heterogeneous_eps(rng, n)  # few distinct epsilons: the grouped path
    p, q = reference_pq(eps_levels, m)
    z = ((y[:, None] == np.arange(m)) - q[:, None]) / (p - q)[:, None]
    w = (p - q) ** 2 / ((p - q) ** 2).sum()
    np.testing.assert_allclose(frequencies(y, eps_levels, m), w @ z, rtol=1e-10, atol=1e-12)


def test_per_output_constant_eps_equals_scalar():
    y = np.random.default_rng(3).integers(0, 3, size=1000)
    np.testing.assert_array_equal(frequencies(y, np.full(1000, 0.7), 3), frequencies(y, 0.7, 3))
    np.testing.assert_array_equal(frequencies(y.astype(float), np.float64(0.7), 3), frequencies(y, 0.7, 3))


def test_frequencies_stable_at_extreme_epsilons():
    y = np.array([0, 1, 1, 2])
    np.testing.assert_allclose(frequencies(y, 700.0, 3), [0.25, 0.5, 0.25], rtol=1e-15)
    f = frequencies(y, 1e-8, 3)  # entries of order 1e7 (the estimator is that noisy), still finite
    assert np.all(np.isfinite(f)) and f.sum() == pytest.approx(1.0, rel=1e-6)


# --------------------------------------------------------------------------- frequencies: Monte Carlo means

def test_frequencies_unbiased_scalar_eps():
    rng = np.random.default_rng(101)
    m, eps, n, reps = 4, 1.0, 1000, 2000
    f = np.array([0.4, 0.3, 0.2, 0.1])
    est = estimates(perturb_rows(iid_values(rng, f, reps, n), eps, m, rng), eps, m)
    se = np.sqrt(frequency_variance(f, eps, m, n) / reps)
    assert np.all(np.abs(est.mean(axis=0) - f) < SIGMAS * se), (est.mean(axis=0), f, se)


def test_frequencies_unbiased_heterogeneous_eps():
    rng = np.random.default_rng(102)
    m, n, reps = 4, 2000, 1000
    f = np.array([0.1, 0.2, 0.3, 0.4])
    eps = heterogeneous_eps(rng, n)
    est = estimates(perturb_rows(iid_values(rng, f, reps, n), eps, m, rng), eps, m)
    se = np.sqrt(frequency_variance(f, eps, m) / reps)
    assert np.all(np.abs(est.mean(axis=0) - f) < SIGMAS * se), (est.mean(axis=0), f, se)


# ------------------------------------------------------------------------------ variance: exact checks

@pytest.mark.parametrize("eps", [0.3, 1.0, 5.0, 30.0])
def test_eq67_binary_variance_at_f_0_and_1(eps):
    n = 1000
    E = math.exp(eps)
    expected = E / (n * (E - 1) ** 2)
    for f in ([0.0, 1.0], [1.0, 0.0]):
        np.testing.assert_allclose(frequency_variance(f, eps, 2, n), [expected, expected], rtol=1e-12)
        np.testing.assert_allclose(frequency_variance_fixed(f, eps, 2, n), [expected, expected], rtol=1e-12)


def test_eq67_at_eps_700_is_finite_and_accurate():
    # E/(n (E - 1)^2) = e^-eps / (n (1 - e^-eps)^2) ~ e^-700 / n, with no overflow.
    v = frequency_variance([0.0, 1.0], 700.0, 2, 10)
    np.testing.assert_allclose(v, math.exp(-700.0) / 10, rtol=1e-12)


@pytest.mark.parametrize("eps,m", [(0.5, 2), (1.0, 3), (2.5, 7)])
def test_appendix_g_variance_and_model_identity(eps, m):
    n = 537
    f = np.linspace(0.0, 1.0, m)
    f /= f.sum()
    (p,), (q,) = reference_pq(eps, m)
    t = f * p + (1 - f) * q
    np.testing.assert_allclose(frequency_variance(f, eps, m, n), t * (1 - t) / (n * (p - q) ** 2), rtol=1e-12)
    fixed = (f * p * (1 - p) + (1 - f) * q * (1 - q)) / (n * (p - q) ** 2)
    np.testing.assert_allclose(frequency_variance_fixed(f, eps, m, n), fixed, rtol=1e-12)
    # t(1 - t) = f p(1 - p) + (1 - f) q(1 - q) + f(1 - f)(p - q)^2, i.e. Var_iid = Var_fixed + f(1 - f)/n
    np.testing.assert_allclose(frequency_variance(f, eps, m, n) - fixed, f * (1 - f) / n,
                               rtol=1e-9, atol=1e-18)
    counts = np.round(f * n).astype(np.int64)
    counts[-1] = n - counts[:-1].sum()
    np.testing.assert_allclose(frequency_variance_fixed(counts, eps, m, n),
                               frequency_variance_fixed(counts / n, eps, m, n), rtol=1e-15)


def test_variance_clips_plug_in_frequencies():
    np.testing.assert_array_equal(frequency_variance([-0.2, 1.2], 1.0, 2, 10),
                                  frequency_variance([0.0, 1.0], 1.0, 2, 10))


def test_heterogeneous_variance_matches_the_spec_sum():
    rng = np.random.default_rng(12)
    m, n = 4, 500
    f = np.array([0.1, 0.2, 0.3, 0.4])
    for eps in (heterogeneous_eps(rng, n), rng.uniform(0.05, 3.0, size=n)):
        p, q = reference_pq(eps, m)
        w = (p - q) ** 2 / ((p - q) ** 2).sum()
        t = f[None, :] * p[:, None] + (1 - f[None, :]) * q[:, None]
        expected = (w[:, None] ** 2 * t * (1 - t) / ((p - q) ** 2)[:, None]).sum(axis=0)
        np.testing.assert_allclose(frequency_variance(f, eps, m), expected, rtol=1e-10)
        np.testing.assert_allclose(frequency_variance(f, eps, m, n=n), expected, rtol=1e-10)
    np.testing.assert_allclose(frequency_variance(f, np.full(n, 0.8), m), frequency_variance(f, 0.8, m, n),
                               rtol=1e-14)


# -------------------------------------------------------------------------- variance: Monte Carlo checks

VAR_M, VAR_EPS, VAR_N, VAR_REPS = 3, 2.0, 400, 2000
VAR_F = np.array([0.5, 0.3, 0.2])
VAR_COUNTS = np.array([200, 120, 80])


@pytest.fixture(scope="module")
def iid_estimates():
    rng = np.random.default_rng(201)
    values = iid_values(rng, VAR_F, VAR_REPS, VAR_N)
    return estimates(perturb_rows(values, VAR_EPS, VAR_M, rng), VAR_EPS, VAR_M)


@pytest.fixture(scope="module")
def fixed_estimates():
    rng = np.random.default_rng(202)
    return estimates(perturb_rows(fixed_values(VAR_COUNTS, VAR_REPS), VAR_EPS, VAR_M, rng), VAR_EPS, VAR_M)


def relative_error(est: np.ndarray, formula: np.ndarray) -> np.ndarray:
    return np.abs(est.var(axis=0, ddof=1) / formula - 1.0)


def test_frequency_variance_iid_monte_carlo(iid_estimates):
    formula = frequency_variance(VAR_F, VAR_EPS, VAR_M, VAR_N)
    assert np.all(relative_error(iid_estimates, formula) < var_tolerance(VAR_REPS))


def test_frequency_variance_fixed_monte_carlo(fixed_estimates):
    formula = frequency_variance_fixed(VAR_COUNTS, VAR_EPS, VAR_M, VAR_N)
    assert np.all(relative_error(fixed_estimates, formula) < var_tolerance(VAR_REPS))
    # a fixed population is estimated exactly without bias, too
    se = np.sqrt(formula / VAR_REPS)
    assert np.all(np.abs(fixed_estimates.mean(axis=0) - VAR_COUNTS / VAR_N) < SIGMAS * se)


def test_variance_models_are_distinguishable(iid_estimates, fixed_estimates):
    """Each model's simulation rejects the other model's formula, so a swapped formula would fail."""
    iid = frequency_variance(VAR_F, VAR_EPS, VAR_M, VAR_N)
    fixed = frequency_variance_fixed(VAR_COUNTS, VAR_EPS, VAR_M, VAR_N)
    tol = var_tolerance(VAR_REPS)
    assert np.all(np.abs(fixed / iid - 1) > 3 * tol)  # the gap f(1 - f)/n is large here
    assert np.all(relative_error(iid_estimates, fixed) > tol)
    assert np.all(relative_error(fixed_estimates, iid) > tol)


def test_heterogeneous_variance_monte_carlo():
    rng = np.random.default_rng(203)
    m, n, reps = 4, 1000, 2000
    f = np.array([0.1, 0.2, 0.3, 0.4])
    eps = heterogeneous_eps(rng, n)
    est = estimates(perturb_rows(iid_values(rng, f, reps, n), eps, m, rng), eps, m)
    formula = frequency_variance(f, eps, m)
    tol = var_tolerance(reps)
    assert np.all(relative_error(est, formula) < tol)
    # weights proportional to (p - q) instead of (p - q)^2 give a variance the test rejects:
    p, q = reference_pq(eps, m)
    w = (p - q) / (p - q).sum()
    t = f[None, :] * p[:, None] + (1 - f[None, :]) * q[:, None]
    wrong = (w[:, None] ** 2 * t * (1 - t) / ((p - q) ** 2)[:, None]).sum(axis=0)
    assert np.all(relative_error(est, wrong) > tol)


# ------------------------------------------------------------------------------------ confidence intervals

@pytest.mark.parametrize("level", [0.9, 0.95])
def test_confidence_interval_coverage(level):
    rng = np.random.default_rng(301 + int(level * 100))
    m, eps, n, reps = 3, 1.5, 500, 2000
    f = np.array([0.5, 0.3, 0.2])
    outputs = perturb_rows(iid_values(rng, f, reps, n), eps, m, rng)
    covered = np.zeros(m)
    for row in outputs:
        _, lo, hi = confidence_intervals(row, eps, m, level)
        covered += (lo <= f) & (f <= hi)
    coverage = covered / reps
    tol = SIGMAS * math.sqrt(level * (1 - level) / reps)
    assert np.all(np.abs(coverage - level) < tol), coverage


def test_confidence_interval_half_width():
    rng = np.random.default_rng(31)
    y = perturb(rng.integers(0, 3, size=400), 1.0, 3, rng)
    f_hat, lo, hi = confidence_intervals(y, 1.0, 3, level=0.8)
    np.testing.assert_array_equal(f_hat, frequencies(y, 1.0, 3))
    half = NormalDist().inv_cdf(0.9) * np.sqrt(frequency_variance(np.clip(f_hat, 0, 1), 1.0, 3, 400))
    np.testing.assert_allclose(hi - f_hat, half, rtol=1e-12)
    np.testing.assert_allclose(f_hat - lo, half, rtol=1e-12)
    eps = heterogeneous_eps(rng, 400)
    f_hat, lo, hi = confidence_intervals(y, eps, 3)
    np.testing.assert_allclose(hi - f_hat, 1.959963984540054 * np.sqrt(frequency_variance(
        np.clip(f_hat, 0, 1), eps, 3)), rtol=1e-12)


# ---------------------------------------------------------------------------------------------- simplex

def on_simplex(w: np.ndarray) -> bool:
    return bool(np.all(w >= 0) and abs(w.sum() - 1.0) < 1e-9)


def test_project_simplex_examples():
    np.testing.assert_allclose(project_simplex([0.5, 0.5, 0.5]), [1 / 3] * 3)
    np.testing.assert_allclose(project_simplex([2.0, 0.0, -1.0]), [1.0, 0.0, 0.0])
    np.testing.assert_allclose(project_simplex([0.6, 0.6, -0.3]), [0.5, 0.5, 0.0])
    np.testing.assert_allclose(project_simplex([3.0]), [1.0])
    on = np.array([0.2, 0.0, 0.5, 0.3])
    np.testing.assert_allclose(project_simplex(on), on, atol=1e-15)


finite = st.floats(min_value=-10, max_value=10, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(finite, min_size=1, max_size=8), st.integers(0, 2**32 - 1))
def test_project_simplex_is_the_nearest_point(v, seed):
    v = np.array(v)
    w = project_simplex(v)
    assert on_simplex(w)
    np.testing.assert_allclose(project_simplex(w), w, atol=1e-12)  # idempotent
    rng = np.random.default_rng(seed)
    others = np.vstack([rng.dirichlet(np.full(v.size, 0.3), size=50), np.eye(v.size)])
    # also points just beside w on the simplex, where a slightly-wrong projection would lose
    others = np.vstack([others, np.clip(w + 0.01 * (others - w), 0, None)])
    others /= others.sum(axis=1, keepdims=True)
    assert np.linalg.norm(v - w) <= np.linalg.norm(v - others, axis=1).min() + 1e-9
    for s in others[:5]:  # points already on the simplex are left where they are
        np.testing.assert_allclose(project_simplex(s), s, atol=1e-12)


# ------------------------------------------------------------------------------------------------- EM

def loglik(f, outputs, eps, m):
    p, q = reference_pq(np.broadcast_to(eps, outputs.shape), m)
    return float(np.log(q + (p - q) * f[outputs]).sum())


def em_step(f, outputs, eps, m):
    """One textbook EM step from per-output likelihoods: f_x <- mean_i Pr(x_i = x | y_i)."""
    p, q = reference_pq(np.broadcast_to(eps, outputs.shape), m)
    lik = np.where(np.arange(m)[None, :] == outputs[:, None], p[:, None], q[:, None])  # Pr(y_i | x)
    post = f * lik
    return (post / post.sum(axis=1, keepdims=True)).mean(axis=0)


def water_filling_mle(counts, eps, m):
    """The exact single-eps MLE: t_y = max(q, c_y/lambda) with sum t = 1, then f = (t - q)/(p - q)."""
    (p,), (q,) = reference_pq(eps, m)
    lo, hi = 1e-6, 1e12
    for _ in range(400):
        lam = math.sqrt(lo * hi)
        lo, hi = (lam, hi) if np.maximum(q, counts / lam).sum() > 1 else (lo, lam)
    return (np.maximum(q, counts / lam) - q) / (p - q)


def test_em_equals_unbiased_estimate_when_interior():
    rng = np.random.default_rng(401)
    m, eps = 5, 1.0
    y = perturb(rng.choice(m, size=20000, p=[0.1, 0.2, 0.3, 0.15, 0.25]), eps, m, rng)
    f_hat = frequencies(y, eps, m)
    assert f_hat.min() > 0
    np.testing.assert_allclose(em_frequencies(y, eps, m), f_hat, atol=1e-12)


@pytest.mark.parametrize("eps", [0.05, 0.3, 1.0])
def test_em_matches_exact_mle_on_the_boundary(eps):
    m = 5
    for seed in range(402, 502):  # the first sample whose unbiased estimate leaves the simplex
        rng = np.random.default_rng(seed)
        y = perturb(rng.choice(m, size=3000, p=[0.0, 0.05, 0.45, 0.0, 0.5]), eps, m, rng)
        if frequencies(y, eps, m).min() < 0:
            break
    assert frequencies(y, eps, m).min() < 0, "no sample left the simplex: the test would check nothing"
    f_em = em_frequencies(y, eps, m)
    assert on_simplex(f_em)
    mle = water_filling_mle(np.bincount(y, minlength=m), eps, m)
    assert np.any(mle == 0)
    np.testing.assert_allclose(f_em, mle, atol=1e-12)


def test_em_matches_exact_mle_on_random_inputs():
    rng = np.random.default_rng(404)
    for _ in range(60):
        m = int(rng.choice([2, 3, 5, 16]))
        eps = float(rng.choice([0.02, 0.1, 0.5, 2.0, 20.0, 30.0]))
        n = int(rng.choice([1, 7, 300, 5000]))
        y = perturb(rng.choice(m, size=n, p=rng.dirichlet(np.full(m, 0.5))), eps, m, rng)
        np.testing.assert_allclose(em_frequencies(y, eps, m),
                                   water_filling_mle(np.bincount(y, minlength=m), eps, m), atol=1e-10)


def test_em_heterogeneous_close_to_truth_and_maximises_likelihood():
    rng = np.random.default_rng(403)
    m, n = 4, 100000
    f = np.array([0.05, 0.15, 0.3, 0.5])
    eps = heterogeneous_eps(rng, n)
    y = perturb_rows(rng.choice(m, size=(1, n), p=f), eps, m, rng)[0]
    f_em = em_frequencies(y, eps, m)
    assert on_simplex(f_em)
    # the MLE is asymptotically efficient: no worse than the weighted linear estimator's 4 SE
    assert np.all(np.abs(f_em - f) < SIGMAS * np.sqrt(frequency_variance(f, eps, m)))
    np.testing.assert_allclose(em_step(f_em, y, eps, m), f_em, atol=1e-12)  # a fixed point of EM
    best = loglik(f_em, y, eps, m)
    for other in [project_simplex(frequencies(y, eps, m)), f, *rng.dirichlet(np.ones(m), size=20)]:
        assert best >= loglik(other, y, eps, m) - 1e-7
    for d in rng.normal(size=(20, m)):  # nor does any nearby point on the simplex beat it
        d -= d.mean()
        assert best >= loglik(project_simplex(f_em + 1e-3 * d), y, eps, m) - 1e-7


def test_em_heterogeneous_boundary_satisfies_kkt():
    """Small samples at small epsilons: the maximum has zeros; check the KKT conditions directly."""
    rng = np.random.default_rng(405)
    for _ in range(20):
        m, n = int(rng.choice([3, 5, 16])), int(rng.choice([20, 500]))
        eps = rng.uniform(0.02, 1.0, size=n)  # every epsilon distinct
        x = rng.choice(m, size=n, p=rng.dirichlet(np.full(m, 0.3)))
        y = np.concatenate([perturb(x[i:i + 1], eps[i], m, rng) for i in range(n)])
        f = em_frequencies(y, eps, m)
        assert on_simplex(f)
        p, q = reference_pq(eps, m)
        lik = q + (p - q) * f[y]
        grad = np.array([((y == v) * (p - q) / lik).sum() for v in range(m)])  # dL/df_v
        pos = f > 1e-9
        lam = grad[pos].mean()
        np.testing.assert_allclose(grad[pos], lam, rtol=1e-7)
        assert np.all(grad[~pos] <= lam * (1 + 1e-7))
        np.testing.assert_allclose(em_step(f, y, eps, m), f, atol=1e-9)


# ------------------------------------------------------------------------------------------ discretize

def test_discretize_expectation():
    rng = np.random.default_rng(501)
    low, high, per = -2.0, 5.0, 20000
    xs = np.array([-2.0, -1.3, 0.0, 1.5, 4.9, 5.0])
    z = discretize(np.repeat(xs, per), low, high, rng)
    assert z.dtype == bool
    share = z.reshape(xs.size, per).mean(axis=1)
    p = (xs - low) / (high - low)
    assert share[0] == 0.0 and share[-1] == 1.0  # exact at the bounds
    se = np.sqrt(p * (1 - p) / per)
    assert np.all(np.abs(share - p) <= SIGMAS * se), (share, p)


def test_discretize_secure_default():
    n = 40000
    share = discretize(np.full(n, 0.3), 0.0, 1.0).mean()
    assert abs(share - 0.3) < 6 * math.sqrt(0.21 / n)  # 6 sigma: a false alarm is a 1e-9 event


class Words:
    """A randomness source returning chosen words, to test the integer thresholds exactly."""

    def __init__(self, *w):
        self.w = np.array(w, dtype=np.uint64)

    def words(self, n):
        assert n == self.w.size
        return self.w


def test_discretize_integer_thresholds():
    half = 1 << 63
    z = discretize([0.5, 0.5, 1.0, 1.0, 0.0, 0.0], 0.0, 1.0, Words(half - 1, half, U64_MAX, 0, 0, U64_MAX))
    np.testing.assert_array_equal(z, [True, False, True, True, False, False])
    assert discretize([], 0.0, 1.0, Words()).shape == (0,)
    z = discretize(np.array([3, 5, 4]), Decimal("3"), Decimal("5"), Words(0, U64_MAX, half - 1))
    np.testing.assert_array_equal(z, [False, True, True])


@pytest.mark.parametrize("values,low,high", [
    ([0.5], 1.0, 1.0), ([0.5], 2.0, 1.0), ([0.5], float("nan"), 1.0), ([0.5], 0.0, float("inf")),
    ([0.5], -1e308, 1e308), ([1.5], 0.0, 1.0), ([-0.1], 0.0, 1.0), ([float("nan")], 0.0, 1.0),
    ([float("inf")], 0.0, 1.0), ([[0.5]], 0.0, 1.0), (["a"], 0.0, 1.0), ([0.5], "0", 1.0), ([True], 0.0, 1.0),
])
def test_discretize_rejects_bad_input(values, low, high):
    with pytest.raises(ValueError):
        discretize(values, low, high, np.random.default_rng(0))


# ------------------------------------------------------------------------------------------------ mean

def test_mean_is_eq70():
    rng = np.random.default_rng(601)
    z = rng.random(777) < 0.35
    eps, low, high = 1.2, -3.0, 10.0
    E = math.exp(eps)
    lam = z.mean()
    eq70 = low + (high - low) * ((E + 1) * lam - 1) / (E - 1)
    assert mean(z, eps, low, high) == pytest.approx(eq70, rel=1e-12)
    assert mean(z.astype(int), np.full(777, eps), low, high) == pytest.approx(eq70, rel=1e-12)


def simulate_means(rng, eps, low, high, n, reps):
    values = low + (high - low) * rng.beta(2.0, 5.0, size=(reps, n))  # iid, true mean low + (h - l) 2/7
    z = discretize(values.ravel(), low, high, rng).reshape(reps, n).astype(np.int64)
    out = perturb_rows(z, eps, 2, rng) == 1
    return np.array([mean(row, eps, low, high) for row in out])


@pytest.mark.parametrize("heterogeneous", [False, True])
def test_mean_unbiased_and_variance(heterogeneous):
    rng = np.random.default_rng(602 + heterogeneous)
    low, high, n, reps = -2.0, 5.0, 1000, 2000
    eps = heterogeneous_eps(rng, n) if heterogeneous else 1.0
    true_mean = low + (high - low) * 2.0 / 7.0
    est = simulate_means(rng, eps, low, high, n, reps)
    var = mean_variance(true_mean, eps, low, high, None if heterogeneous else n)
    assert abs(est.mean() - true_mean) < SIGMAS * math.sqrt(var / reps)
    assert abs(est.var(ddof=1) / var - 1) < var_tolerance(reps)


def test_mean_variance_is_scaled_binary_variance():
    f = 0.3
    v = mean_variance(1.0 + 4.0 * f, 0.9, 1.0, 5.0, 250)
    assert v == pytest.approx(16.0 * frequency_variance([1 - f, f], 0.9, 2, 250)[1], rel=1e-14)
    E = math.exp(0.9)
    assert mean_variance(5.0, 0.9, 1.0, 5.0, 250) == pytest.approx(16.0 * E / (250 * (E - 1) ** 2), rel=1e-12)


# ------------------------------------------------------------------------------------------ bad input

GOOD_Y = np.array([0, 1, 2, 1])


@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf"), 701.0, "1", None, True,
                                 np.array([1.0, 0.0, 1.0, 1.0]), np.array([1.0, np.nan, 1.0, 1.0]),
                                 np.array([1.0, 1.0, 1.0]), np.ones((4, 1)), np.array([])])
def test_estimators_reject_bad_eps(eps):
    for call in (lambda: frequencies(GOOD_Y, eps, 3), lambda: em_frequencies(GOOD_Y, eps, 3),
                 lambda: confidence_intervals(GOOD_Y, eps, 3),
                 lambda: mean(GOOD_Y % 2, eps, 0.0, 1.0)):
        with pytest.raises(ValueError):
            call()


def test_eps_zero_message_is_clear():
    with pytest.raises(ValueError, match="must be > 0"):
        frequencies(GOOD_Y, 0.0, 3)
    with pytest.raises(ValueError, match="must be > 0"):
        frequency_variance([0.5, 0.5], 0, 2, 10)


@pytest.mark.parametrize("outputs", [[0, 3, 1], [-1, 0], [0.5, 1.0], [[0, 1]], [], ["a"], [np.nan]])
def test_estimators_reject_bad_outputs(outputs):
    with pytest.raises(ValueError):
        frequencies(outputs, 1.0, 3)
    with pytest.raises(ValueError):
        em_frequencies(outputs, 1.0, 3)


def test_bad_arguments():
    with pytest.raises(ValueError, match="same shape"):
        frequencies(GOOD_Y, np.ones(5), 3)
    with pytest.raises(ValueError):
        frequencies(GOOD_Y, 1.0, 1)
    with pytest.raises(ValueError, match="n"):
        frequency_variance([0.5, 0.5], 1.0, 2)  # n needed with a single eps
    with pytest.raises(ValueError):
        frequency_variance([0.5, 0.5], np.ones(4), 2, n=5)
    for bad_n in (0, -3, 2.5, True):
        with pytest.raises(ValueError):
            frequency_variance([0.5, 0.5], 1.0, 2, bad_n)
    for bad_f in ([0.5, 0.5, 0.0], [np.nan, 1.0], [[0.5, 0.5]], ["a", "b"]):
        with pytest.raises(ValueError):
            frequency_variance(bad_f, 1.0, 2, 10)
    with pytest.raises(ValueError, match="sum to n"):
        frequency_variance_fixed(np.array([0, 1]), 1.0, 2, 10)
    with pytest.raises(ValueError):
        frequency_variance_fixed(np.array([-1, 11]), 1.0, 2, 10)
    with pytest.raises(ValueError, match="single eps"):
        frequency_variance_fixed([0.5, 0.5], np.ones(10), 2, 10)
    for level in (0.0, 1.0, 1.5, float("nan"), "0.9", True):
        with pytest.raises(ValueError):
            confidence_intervals(GOOD_Y, 1.0, 3, level)
    for kw in ({"max_iter": 0}, {"max_iter": 1.5}, {"tol": 0.0}, {"tol": float("nan")}, {"tol": -1.0}):
        with pytest.raises(ValueError):
            em_frequencies(GOOD_Y, 1.0, 3, **kw)
    for v in ([], [[1.0, 2.0]], [np.nan, 1.0], [np.inf], ["x"]):
        with pytest.raises(ValueError):
            project_simplex(v)
    for low, high in ((1.0, 1.0), (2.0, 1.0), (np.nan, 1.0), (0.0, np.inf)):
        with pytest.raises(ValueError):
            mean([True, False], 1.0, low, high)
        with pytest.raises(ValueError):
            mean_variance(0.5, 1.0, low, high, 10)
    with pytest.raises(ValueError):
        mean([0, 2], 1.0, 0.0, 1.0)  # outputs must be binary
    with pytest.raises(ValueError):
        mean_variance(np.nan, 1.0, 0.0, 1.0, 10)
