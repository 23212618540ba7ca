"""Locally private sampling with a public prior
(docs/mechanisms-reference.md#private-sampling-with-a-public-prior, seed 002).

Exact checks: the hand-worked kernel and risks, the closed form against the paper's recursive
Algorithm 1, the kernel properties (row-stochastic, ``q @ K = q``, exact LDP level by enumeration of
the columns, the tight ``q_min`` column, the sorted diagonal), Lemma 1's point-mass worst case, the
minimax risk against a brute-force linear program over all eps-LDP kernels with ``q K = q`` (n <= 6),
and every place the spec says the paper is wrong (Example 1's labels, Corollary 2's scale factor,
Proposition 3's ``qK = K``, the mollifier's missing edge case).  Statistical checks: chi-square tests
that :func:`sample` follows ``p @ K`` (seeded threshold 1e-4; secure default 1e-7), with a power check
showing the same sample size rejects the plausible bug of not permuting the kernel back to q's order.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.optimize import linprog

from mechanisms._sampling import draw_categorical, draw_iid
from mechanisms.private_sampling import (
    f_divergence,
    kernel_epsilon,
    kl,
    minimax_risk,
    mollifier_kl,
    mollifier_tv,
    optimal_kernel,
    output_distribution,
    randomized_response_kernel,
    sample,
    tv,
    worst_case_divergence,
)
from mechanisms.random import U64_MAX
from tests.mechanisms.fixed_words import FixedWords
from tests.mechanisms.test_sampling import chi_square_table_p

SEEDED_ALPHA = 1e-4
SECURE_ALPHA = 1e-7
DIVERGENCES = ["tv", "kl", "chi2", "hellinger"]
#: The same divergences as plain convex functions f(t), for the generic g(x) = (1 - x) f(0) + x f(1/x).
F = {
    "tv": lambda t: 0.5 * np.abs(t - 1.0),
    "kl": lambda t: np.where(t > 0, t * np.log(np.where(t > 0, t, 1.0)), 0.0),
    "chi2": lambda t: (t - 1.0) ** 2,
    "hellinger": lambda t: (np.sqrt(t) - 1.0) ** 2,
}


def random_prior(rng, n):
    q = rng.random(n) + 1e-3
    return q / q.sum()


def priors():
    rng = np.random.default_rng(2024)
    cases = [([0.2, 0.3, 0.5], math.log(2)), ([0.5, 0.2, 0.3], 0.7), ([0.01, 0.99], 2.0), ([0.25] * 4, 1.3),
             ([0.4, 0.1, 0.1, 0.4], 0.9)]          # ties in q
    for n, eps in [(2, 0.0), (3, 1e-6), (5, 0.5), (8, 3.0), (20, 8.0), (50, 40.0), (6, 700.0)]:
        cases.append((random_prior(rng, n), eps))
    return cases


def paper_algorithm_1(q_sorted, eps, m_rule=None):
    """The paper's recursion verbatim (Algorithm 1, q sorted ascending); ``m_rule(qmin, d, n)`` sets m."""
    q = np.asarray(q_sorted, dtype=np.float64)
    n, E = q.size, math.exp(eps)
    if n == 2:                                           # Proposition 1
        a = q[0]
        return np.array([[E * a, 1 - a], [a, (E - 1) * a + 1 - a]]) / (E * a + 1 - a)
    qmin = q[0]
    d = E * qmin + 1 - qmin
    K = np.zeros((n, n))
    K[0, 0] = E * qmin / d
    K[1:, 0] = qmin / d
    m = 1 - qmin / d if m_rule is None else m_rule(qmin, d, n)
    K[1:, 1:] = m * paper_algorithm_1(q[1:] / q[1:].sum(), eps, m_rule)
    K[0, 1:] = q[1:] / d
    return K


# --------------------------------------------------------------------------------------- hand-worked values

def test_reference_kernel_and_risks_hand_worked():
    """q = [0.2, 0.3, 0.5], eps = ln 2: K, Gamma_TV = 2/3, Gamma_KL = ln 3 (spec "Reference values")."""
    F_ = Fraction
    expected = np.array([[F_(1, 3), F_(1, 4), F_(5, 12)], [F_(1, 6), F_(5, 11), F_(25, 66)],
                         [F_(1, 6), F_(5, 22), F_(20, 33)]], dtype=float)
    K = optimal_kernel([0.2, 0.3, 0.5], math.log(2))
    np.testing.assert_allclose(K, expected, rtol=0, atol=1e-15)
    assert minimax_risk([0.2, 0.3, 0.5], math.log(2), "tv") == pytest.approx(2 / 3, abs=1e-15)
    assert minimax_risk([0.2, 0.3, 0.5], math.log(2), "kl") == pytest.approx(math.log(3), abs=1e-15)
    # the same kernel, relabelled, when q is given in another order
    perm = [2, 0, 1]
    np.testing.assert_allclose(optimal_kernel(np.array([0.2, 0.3, 0.5])[perm], math.log(2)),
                               expected[np.ix_(perm, perm)], atol=1e-15)


@pytest.mark.parametrize("alpha,eps", [(0.01, 2.0), (0.3, 0.5), (0.5, 1.0), (0.2, 0.0)])
def test_binary_kernel_is_proposition_1(alpha, eps):
    E = math.exp(eps)
    prop1 = np.array([[E * alpha, 1 - alpha], [alpha, (E - 1) * alpha + 1 - alpha]]) / (E * alpha + 1 - alpha)
    np.testing.assert_allclose(optimal_kernel([alpha, 1 - alpha], eps), prop1, atol=1e-15)
    np.testing.assert_allclose(optimal_kernel([1 - alpha, alpha], eps), prop1[::-1, ::-1], atol=1e-15)


def test_example_1_values_and_the_papers_mislabelling():
    """Example 1 (q = (0.01, 0.99), p = (0.05, 0.95), eps = 2): 0.10728 (RR) and 0.03760 (prior) are
    TV(p, pK) for this p, not the worst-case Gamma_TV the paper calls them (0.1 and 0.03)."""
    q, p, eps = [0.01, 0.99], np.array([0.05, 0.95]), 2.0
    rr_value = tv(p, p @ randomized_response_kernel(2, eps))
    prior_value = tv(p, p @ optimal_kernel(q, eps))
    assert round(rr_value, 5) == 0.10728 and round(prior_value, 5) == 0.03760
    # the paper's labels fail: the worst cases are 1/(e^2 + 1) = 0.119 and 0.99/(0.01 e^2 + 0.99) = 0.931
    gamma_rr, gamma_prior = minimax_risk([0.5, 0.5], eps, "tv"), minimax_risk(q, eps, "tv")
    assert gamma_rr == pytest.approx(1 / (math.exp(2) + 1), abs=1e-15)
    assert gamma_prior == pytest.approx(0.99 / (0.01 * math.exp(2) + 0.99), abs=1e-15)
    assert abs(gamma_rr - 0.1) > 0.015 and abs(gamma_prior - 0.03) > 0.8


# ---------------------------------------------------------------------------------------- kernel properties

@pytest.mark.parametrize("q,eps", priors())
def test_kernel_properties(q, eps):
    q = np.asarray(q, dtype=float)
    K = optimal_kernel(q, eps)
    E = math.exp(eps)
    assert K.min() >= 0
    np.testing.assert_allclose(K.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(q @ K, q, atol=1e-12)          # Prop. 3's invariance, q K = q (not "q K = K")
    # exact LDP level by enumeration of every column (and every ordered pair of inputs in it)
    ratios = K[:, None, :] / K[None, :, :]
    level = float(np.log(ratios.max()))
    assert level <= eps + 1e-9
    assert kernel_epsilon(K) == pytest.approx(eps, abs=1e-9)
    if eps > 0:
        jmin = int(np.argmin(q))                                # the q_min column is tight
        col = K[:, jmin]
        assert math.log(col.max() / col.min()) == pytest.approx(eps, abs=1e-9)
    order = np.argsort(q, kind="stable")
    assert np.all(np.diff(np.diag(K)[order]) >= -1e-12)       # diagonal non-decreasing in sorted order
    kstar = E * q.min() / (E * q.min() + 1 - q.min())
    assert np.diag(K).min() == pytest.approx(kstar, rel=1e-12)
    for name in DIVERGENCES:                                    # Theorem 1: the kernel attains Gamma_f
        assert worst_case_divergence(K, name) == pytest.approx(minimax_risk(q, eps, name), rel=1e-9,
                                                               abs=1e-300)


@pytest.mark.parametrize("q,eps", priors())
def test_kernel_is_user_level_private(q, eps):
    """For any two owner distributions p, p' and any output j: (pK)_j <= e^eps (p'K)_j."""
    rng = np.random.default_rng(7)
    q = np.asarray(q, dtype=float)
    n = q.size
    ps_ = np.vstack([rng.dirichlet(np.full(n, 0.3), size=200), np.eye(n)])
    out = output_distribution(ps_, q, eps)
    ratio = np.log(out.max(axis=0)) - np.log(out.min(axis=0))
    assert ratio.max() <= eps + 1e-9


def test_uniform_prior_gives_randomized_response():
    for n, eps in [(2, 0.4), (3, 1.0), (7, 2.5), (30, 0.05)]:
        np.testing.assert_allclose(optimal_kernel(np.full(n, 1 / n), eps), randomized_response_kernel(n, eps),
                                   atol=1e-14)
        assert kernel_epsilon(randomized_response_kernel(n, eps)) == pytest.approx(eps, abs=1e-12)


def test_closed_form_equals_the_recursive_algorithm_1():
    rng = np.random.default_rng(11)
    for n in range(2, 9):
        for eps in (0.0, 0.3, 2.0, 9.0):
            q = np.sort(random_prior(rng, n))
            np.testing.assert_allclose(optimal_kernel(q, eps), paper_algorithm_1(q, eps), atol=1e-13)


def test_corollary_2_scale_factor_erratum():
    """Corollary 2's proof writes m = (e^eps + n - 2)/(e^eps + n - 2) = 1: with it the recursion's rows no
    longer sum to 1; the corrected m = (e^eps + n - 2)/(e^eps + n - 1) gives n-ary randomized response."""
    n, eps = 5, 1.0
    E = math.exp(eps)
    uniform = np.full(n, 1 / n)
    paper = paper_algorithm_1(uniform, eps, m_rule=lambda qmin, d, k: (E + k - 2) / (E + k - 2))
    fixed = paper_algorithm_1(uniform, eps, m_rule=lambda qmin, d, k: (E + k - 2) / (E + k - 1))
    assert np.abs(paper.sum(axis=1) - 1).max() > 0.1
    np.testing.assert_allclose(fixed, randomized_response_kernel(n, eps), atol=1e-14)
    np.testing.assert_allclose(fixed, optimal_kernel(uniform, eps), atol=1e-14)


def test_output_distribution_is_p_times_k():
    rng = np.random.default_rng(3)
    for n, eps in [(2, 1.0), (9, 0.2), (40, 6.0)]:
        q = random_prior(rng, n)
        p = rng.dirichlet(np.full(n, 0.5), size=6)
        p[0] = np.eye(n)[n // 2]
        np.testing.assert_allclose(output_distribution(p, q, eps), p @ optimal_kernel(q, eps), atol=1e-14)
        np.testing.assert_allclose(output_distribution(p[1], q, eps), p[1] @ optimal_kernel(q, eps),
                                   atol=1e-14)


# --------------------------------------------------------------------------------------------- minimax risk

@pytest.mark.parametrize("name", DIVERGENCES)
def test_minimax_risk_closed_forms(name):
    """The named instances against g(K*) with the plain f (spec "Minimax risk")."""
    for q, eps in priors()[:-2]:
        q = np.asarray(q, dtype=float)
        E, qmin = math.exp(eps), q.min()
        d = E * qmin + 1 - qmin
        kstar = E * qmin / d
        spec = {"tv": (1 - qmin) / d, "kl": math.log(1 + math.exp(-eps) * (1 / qmin - 1)),
                "chi2": (1 - qmin) / (E * qmin), "hellinger": 2 * (1 - math.sqrt(kstar))}[name]
        generic = (1 - kstar) * float(F[name](np.array(0.0))) + kstar * float(F[name](np.array(1 / kstar)))
        got = minimax_risk(q, eps, name)
        assert got == pytest.approx(spec, rel=1e-12, abs=1e-300)
        assert got == pytest.approx(generic, rel=1e-9, abs=1e-12)
        assert minimax_risk(q, eps, F[name]) == pytest.approx(generic, rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("name", DIVERGENCES)
def test_lemma_1_worst_case_is_a_point_mass(name):
    """sup_p D_f(p || pK) = max_i D_f(delta_i || K_i): random p never exceed it, a Dirac attains it."""
    rng = np.random.default_rng(5)
    for _ in range(5):
        n = int(rng.integers(2, 7))
        K = rng.dirichlet(np.ones(n), size=n) + np.eye(n) * rng.random()
        K /= K.sum(axis=1, keepdims=True)
        worst = worst_case_divergence(K, name)
        diracs = [f_divergence(np.eye(n)[i], K[i], name) for i in range(n)]
        assert worst == pytest.approx(max(diracs), rel=1e-12)
        assert worst_case_divergence(K, F[name]) == pytest.approx(worst, rel=1e-9)
        for p in rng.dirichlet(np.full(n, 0.4), size=300):
            assert f_divergence(p, p @ K, name) <= worst + 1e-12


def brute_force_gamma_tv(q, eps):
    """min over eps-LDP kernels with q K = q of max_i (1 - K_ii): a linear program in (K, t)."""
    q = np.asarray(q, dtype=float)
    n, E = q.size, math.exp(eps)
    nv = n * n + 1
    idx = lambda i, j: i * n + j  # noqa: E731
    A_ub, b_ub = [], []
    for j in range(n):
        for i in range(n):
            for k in range(n):
                if i != k:
                    row = np.zeros(nv)
                    row[idx(i, j)], row[idx(k, j)] = 1.0, -E
                    A_ub.append(row)
                    b_ub.append(0.0)
    for i in range(n):
        row = np.zeros(nv)
        row[idx(i, i)], row[-1] = -1.0, -1.0
        A_ub.append(row)
        b_ub.append(-1.0)
    A_eq, b_eq = [], []
    for i in range(n):
        row = np.zeros(nv)
        row[i * n:(i + 1) * n] = 1.0
        A_eq.append(row)
        b_eq.append(1.0)
    for j in range(n):
        row = np.zeros(nv)
        for i in range(n):
            row[idx(i, j)] = q[i]
        A_eq.append(row)
        b_eq.append(q[j])
    c = np.zeros(nv)
    c[-1] = 1.0
    res = linprog(c, A_ub=np.array(A_ub), b_ub=b_ub, A_eq=np.array(A_eq), b_eq=b_eq,
                  bounds=[(0, 1)] * (n * n) + [(0, 1)], method="highs")
    assert res.status == 0
    return res.fun


def test_brute_force_linear_program_gives_the_same_gamma_tv():
    rng = np.random.default_rng(99)
    for n in range(2, 7):
        for eps in (0.2, 1.0, 3.0):
            q = random_prior(rng, n)
            assert brute_force_gamma_tv(q, eps) == pytest.approx(minimax_risk(q, eps, "tv"), abs=1e-7)


# ------------------------------------------------------------------------------------------------- sampling

def sample_counts(p, q, eps, rng, draws):
    out = sample(np.tile(p, (draws, 1)), q, eps, rng)
    assert out.shape == (draws,) and out.dtype == np.int64
    return np.bincount(out, minlength=len(q))


CASES = [([0.1, 0.6, 0.0, 0.3], [0.4, 0.1, 0.35, 0.15], 1.0),
         ([1.0, 0.0, 0.0], [0.2, 0.3, 0.5], math.log(2)),
         ([0.0, 0.0, 1.0, 0.0, 0.0], [0.3, 0.05, 0.25, 0.1, 0.3], 2.5)]


@pytest.mark.parametrize("seeded", [True, False], ids=["seeded", "secure-default"])
@pytest.mark.parametrize("p,q,eps", CASES)
def test_sample_follows_p_times_k(seeded, p, q, eps):
    rng = np.random.default_rng(20261122) if seeded else None
    counts = sample_counts(p, q, eps, rng, 200_000)
    probs = np.asarray(p) @ optimal_kernel(q, eps)
    assert chi_square_table_p(counts[None, :], probs[None, :]) > (SEEDED_ALPHA if seeded else SECURE_ALPHA)


def test_chi_square_detects_a_kernel_left_in_sorted_order():
    """Power: the same sample size rejects the plausible bug of building K in q's sorted order and not
    permuting it back (and the bug of releasing a draw from p itself)."""
    p, q, eps = CASES[0]
    counts = sample_counts(p, q, eps, np.random.default_rng(1), 200_000)
    unpermuted = np.asarray(p) @ optimal_kernel(np.sort(q), eps)
    assert chi_square_table_p(counts[None, :], unpermuted[None, :]) < 1e-12
    with pytest.raises(AssertionError, match="probability zero"):  # p has a zero that p K does not
        chi_square_table_p(counts[None, :], np.asarray(p)[None, :])


def test_single_sample_is_an_int_and_batches_are_arrays():
    rng = np.random.default_rng(0)
    one = sample([0.2, 0.8], [0.5, 0.5], 1.0, rng)
    assert isinstance(one, int) and one in (0, 1)
    many = sample(np.array([[1.0, 0.0], [0.0, 1.0]]), [0.3, 0.7], 40.0, rng)
    assert many.tolist() == [0, 1]                        # eps = 40: K is the identity up to e^-40
    with pytest.raises(ValueError, match="largest epsilon for this prior is 44.36"):   # cells below 2^-64
        sample(np.array([[1.0, 0.0], [0.0, 1.0]]), [0.3, 0.7], 50.0, rng)
    assert isinstance(sample([0.2, 0.8], [0.5, 0.5], 1.0), int)   # the secure default



def test_integer_thresholds_at_their_boundaries():
    """Category j is drawn for u in [T_{j-1}, T_j), T_j = floor(cdf_j 2^64); zero-probability categories
    (inside and trailing) are never drawn, and the largest word lands on the last category with mass."""
    probs = np.array([0.25, 0.0, 0.5, 0.25, 0.0])
    t1, t3 = 1 << 62, 3 << 62
    u = [0, t1 - 1, t1, t3 - 1, t3, U64_MAX]
    want = [0, 0, 2, 2, 3, 3]
    got_iid = draw_iid(FixedWords(u), probs, len(u))
    got_rows = draw_categorical(FixedWords(u), np.tile(probs, (len(u), 1)))
    assert got_iid.tolist() == want and got_rows.tolist() == want
    for k, w in enumerate(u):
        assert draw_categorical(FixedWords([w]), probs[None, :]).tolist() == [want[k]]


# --------------------------------------------------------------------------------------- mollifier baseline

def mollifier_cases():
    rng = np.random.default_rng(17)
    out = []
    for n, eps in [(2, 0.5), (5, 1.0), (12, 3.0), (40, 8.0)]:
        q = random_prior(rng, n)
        out.append((rng.dirichlet(np.ones(n)), q, eps))
        sparse = rng.dirichlet(np.ones(n))
        sparse[rng.random(n) < 0.5] = 0.0
        sparse[0] += 1e-3
        out.append((sparse / sparse.sum(), q, eps))
    return out


@pytest.mark.parametrize("p,q,eps", mollifier_cases())
def test_mollifier_kl_is_the_kl_projection(p, q, eps):
    r = mollifier_kl(p, q, eps)
    lo, hi = q * math.exp(-eps / 2), q * math.exp(eps / 2)
    assert abs(r.sum() - 1) < 1e-12
    assert np.all(r >= lo * (1 - 1e-12)) and np.all(r <= hi * (1 + 1e-12))
    S = p > 0
    if hi[S].sum() + lo[~S].sum() >= 1:              # KKT form (3): r = clip(p / C, lo, hi) with one C
        free = S & (r > lo * (1 + 1e-9)) & (r < hi * (1 - 1e-9))
        if free.any():
            C = p[free] / r[free]
            assert np.allclose(C, C[0], rtol=1e-9)
            np.testing.assert_allclose(r, np.clip(p / C[0], lo, hi), rtol=1e-9, atol=1e-15)
    # no feasible direction decreases KL (r is the minimiser over the mollifier set)
    rng = np.random.default_rng(0)
    best = kl(p, r)
    for _ in range(200):
        d = rng.normal(size=q.size) * q
        d -= d.sum() * q
        r2 = r + 1e-4 * d
        if np.all(r2 >= lo) and np.all(r2 <= hi):
            assert kl(p, r2 / r2.sum()) >= best - 1e-12


def test_mollifier_kl_edge_case_the_paper_misses():
    """p = a point mass on a symbol with small q: formula (3) sums to less than 1 for every C, so no C
    exists; the reference's fix puts r = q e^(eps/2) on p's support and spreads the rest over the zeros."""
    q = np.array([0.01, 0.2, 0.3, 0.49])
    p = np.array([1.0, 0.0, 0.0, 0.0])
    eps = 2.0
    lo, hi = q * math.exp(-eps / 2), q * math.exp(eps / 2)
    for C in np.logspace(-12, 12, 97):                 # the paper's form never normalises
        assert np.minimum(np.maximum(lo, p / C), hi).sum() < 0.95
    r = mollifier_kl(p, q, eps)
    assert abs(r.sum() - 1) < 1e-12 and np.all(r >= lo) and np.all(r <= hi * (1 + 1e-12))
    assert r[0] == pytest.approx(hi[0])
    assert kl(p, r) == pytest.approx(-math.log(hi[0]))  # the lower bound over the set: r_0 <= q_0 e^(eps/2)


@pytest.mark.parametrize("p,q,eps", mollifier_cases())
def test_mollifier_tv_linear_program(p, q, eps):
    r = mollifier_tv(p, q, eps)
    lo, hi = q * math.exp(-eps / 2), q * math.exp(eps / 2)
    assert abs(r.sum() - 1) < 1e-12 and np.all(r >= lo * (1 - 1e-9)) and np.all(r <= hi * (1 + 1e-9))
    closed = max(np.maximum(p - hi, 0).sum(), np.maximum(lo - p, 0).sum())
    assert tv(p, r) == pytest.approx(closed, abs=1e-9)
    assert tv(p, r) <= tv(p, mollifier_kl(p, q, eps)) + 1e-9


def test_mollifier_outputs_are_eps_private_samplers():
    """Any two mollifier outputs differ by at most e^eps per symbol (the baseline's own guarantee)."""
    rng = np.random.default_rng(8)
    q, eps = random_prior(rng, 10), 1.5
    owners = np.vstack([np.eye(10), rng.dirichlet(np.ones(10), 20)])
    outs = np.array([mollifier_kl(p, q, eps) for p in owners])
    assert (np.log(outs.max(axis=0)) - np.log(outs.min(axis=0))).max() <= eps + 1e-9


def test_synthetic_experiment_crossovers():
    """Paper Sec. 5.2 in miniature (n = 100, eps = 8, 10 priors q ~ normalised U[0, 1]): the mollifier wins
    for nearly uniform p, the optimal sampler for concentrated p; the crossovers sit near p1 = 0.1 (KL) and
    0.3 (TV).  (Where exactly depends on the draws of q_1: the mollifier is exact while
    p1 <= q_1 e^(eps/2).)"""
    n, eps = 100, 8.0
    rng = np.random.default_rng(0)
    qs = [q / q.sum() for q in rng.random((10, n))]
    grid = [1 / n, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 1.0]
    gaps = []
    for p1 in grid:
        p = np.full(n, (1 - p1) / (n - 1))
        p[0] = p1
        rows = []
        for q in qs:
            o = output_distribution(p, q, eps)
            rows.append([kl(p, o), kl(p, mollifier_kl(p, q, eps)), tv(p, o), tv(p, mollifier_tv(p, q, eps))])
        gaps.append(np.mean(rows, axis=0))
    gaps = np.array(gaps)
    kl_wins, tv_wins = gaps[:, 0] < gaps[:, 1], gaps[:, 2] < gaps[:, 3]
    assert not kl_wins[0] and not tv_wins[0]                 # nearly uniform p: the mollifier is closer
    assert kl_wins[-3:].all() and tv_wins[-3:].all()         # p1 >= 0.4: the optimal sampler is closer
    kl_cross = grid[int(np.argmax(kl_wins))]
    tv_cross = grid[int(np.argmax(tv_wins))]
    assert 0.05 <= kl_cross <= 0.15 and 0.2 <= tv_cross <= 0.4
    assert kl_wins[grid.index(kl_cross):].all() and tv_wins[grid.index(tv_cross):].all()


# ---------------------------------------------------------------------------------------------- divergences

def test_divergences_and_conventions():
    p, r = np.array([0.5, 0.5, 0.0]), np.array([0.25, 0.25, 0.5])
    assert tv(p, r) == pytest.approx(0.5)
    assert kl(p, r) == pytest.approx(math.log(2))
    assert f_divergence(p, r, "chi2") == pytest.approx(2 * 0.25 ** 2 / 0.25 + 0.5)
    assert f_divergence(p, r, "hellinger") == pytest.approx(2 * (math.sqrt(0.5) - 0.5) ** 2 + 0.5)
    for name in DIVERGENCES:
        assert f_divergence(p, r, name) == pytest.approx(f_divergence(p, r, F[name]), rel=1e-12)
        assert f_divergence(r, r, name) == pytest.approx(0.0, abs=1e-15)
    assert kl(r, p) == math.inf and f_divergence(r, p, "chi2") == math.inf
    assert f_divergence(r, p, "tv") == pytest.approx(0.5)
    with pytest.raises(ValueError, match="absolutely continuous"):
        f_divergence(r, p, F["kl"])


def test_kernel_epsilon_by_enumeration():
    assert kernel_epsilon([[0.5, 0.5], [0.5, 0.5]]) == 0.0
    assert kernel_epsilon([[0.75, 0.25], [0.25, 0.75]]) == pytest.approx(math.log(3))
    assert kernel_epsilon([[1.0, 0.0], [0.5, 0.5]]) == math.inf
    assert kernel_epsilon([[0.5, 0.5, 0.0], [0.25, 0.75, 0.0], [0.5, 0.5, 0.0]]) == pytest.approx(math.log(2))


# ----------------------------------------------------------------------------------------------- validation

@pytest.mark.parametrize("call,match", [
    (lambda: optimal_kernel([0.5, 0.5, 0.0], 1.0), "strictly positive"),
    (lambda: optimal_kernel([0.5, 0.6], 1.0), "sum to 1"),
    (lambda: optimal_kernel([1.0], 1.0), "at least 2"),
    (lambda: optimal_kernel([[0.5, 0.5]], 1.0), "one-dimensional"),
    (lambda: optimal_kernel([0.5, 0.5], -1.0), "eps must be >= 0"),
    (lambda: optimal_kernel([0.5, 0.5], float("nan")), "NaN"),
    (lambda: optimal_kernel([0.5, float("nan")], 1.0), "finite"),
    (lambda: optimal_kernel([1.5, -0.5], 1.0), "non-negative"),
    (lambda: sample([0.5, 0.5, 0.0], [0.5, 0.5], 1.0), "2 entries"),
    (lambda: sample("ab", [0.5, 0.5], 1.0), "probabilities"),
    (lambda: sample([0.5, 0.5], [0.5, 0.5], 1.0, rng=42), "rng must be"),
    (lambda: minimax_risk([0.5, 0.5], 1.0, "renyi"), "divergence must be"),
    (lambda: worst_case_divergence([[0.5, 0.5]], "tv"), "square"),
    (lambda: worst_case_divergence([[0.5, 0.6], [0.5, 0.5]], "tv"), "row-stochastic"),
    (lambda: kernel_epsilon([[0.5, 0.5], [-0.5, 1.5]]), "non-negative"),
    (lambda: randomized_response_kernel(1, 1.0), "at least 2"),
    (lambda: mollifier_kl([0.5, 0.5], [0.5, 0.5, 0.0], 1.0), "strictly positive"),
    (lambda: mollifier_tv([0.2, 0.2, 0.6], [0.5, 0.5], 1.0), "2 entries"),
    (lambda: tv([0.5, 0.5], [1.0, 0.0, 0.0]), "2 entries"),
])
def test_invalid_inputs_raise_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
