"""Three-element randomized response and the LPP‡ graph protocol
(docs/mechanisms-reference.md#rr3-and-the-graph-protocol-lpp).

The paper has no experiments: everything is checked against closed forms, exact enumeration and
Monte Carlo with fixed seeds (4 standard errors; chi-square p-values above 1e-4 seeded, 1e-7 through
the secure default).  The paper's wrong formulas (Eqs. 27, 28, 30, Corollary 4's condition, Lemma 2)
each have a test showing the paper's form fails and the corrected form holds.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp

from mechanisms import rr3, rr_matrix
from mechanisms.random import U64_MAX
from tests.mechanisms.fixed_words import FixedWords
from tests.mechanisms.test_sampling import SECURE_ALPHA, SEEDED_ALPHA, chi_square_p

Z = 4.0


def rng(seed):
    return np.random.default_rng(seed)


def expit(x):
    return 1 / (1 + math.exp(-x))


def brute_ldp(P):
    """Every ordered pair of inputs on every output: max ln(P[i, j]/P[i', j]) (loops, no shortcuts)."""
    worst = 0.0
    for j in range(P.shape[1]):
        for i, i2 in itertools.permutations(range(P.shape[0]), 2):
            if P[i, j] > 0 and P[i2, j] == 0:
                return math.inf
            if P[i, j] > 0:
                worst = max(worst, math.log(P[i, j] / P[i2, j]))
    return worst


MATRICES = {
    "ewrr3": lambda: rr3.ewrr_matrix(3, 0.6),
    "ewrr5": lambda: rr3.ewrr_matrix(5, 0.45),
    "dagger": lambda: rr3.rr3_dagger(0.7, 0.5),
    "ddagger": lambda: rr3.rr3_ddagger(expit(1.0), expit(1.5)),
    "club": lambda: rr3.rr3_club(0.6, 0.8, 0.75),
}


# ---------------------------------------------------------------------------------------------
# matrices and exact privacy levels
# ---------------------------------------------------------------------------------------------

def test_matrices_have_the_stated_entries_and_are_row_stochastic():
    p1, p2, q = 0.7, 0.6, 0.8
    a, b = (1 - p1) / 2, (1 - p2) / 2
    np.testing.assert_allclose(rr3.rr3_dagger(p1, p2), [[p1, a, a], [b, p2, b], [b, b, p2]])
    np.testing.assert_allclose(rr3.rr3_ddagger(p1, p2),
                               [[p1, a, a], [1 - p1, p1 * p2, p1 * (1 - p2)],
                                [1 - p1, p1 * (1 - p2), p1 * p2]])
    np.testing.assert_allclose(rr3.rr3_club(p1, p2, q),
                               [[p1, a, a], [1 - p2, p2 * q, p2 * (1 - q)], [1 - p2, p2 * (1 - q), p2 * q]])
    np.testing.assert_allclose(rr3.ewrr_matrix(4, 0.4), 0.2 + 0.2 * np.eye(4))
    g = rng(0)
    for _ in range(200):
        p1, p2, q = g.random(3)
        for P in (rr3.rr3_dagger(p1, p2), rr3.rr3_ddagger(p1, p2), rr3.rr3_club(p1, p2, q),
                  rr3.ewrr_matrix(int(g.integers(2, 9)), p1)):
            assert (P >= 0).all()
            np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-14)


@pytest.mark.parametrize("eps", [0.05, 0.5, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_ewrr_exact_level_equals_the_design_epsilon(n, eps):
    e = math.exp(eps)
    best, low = e / (e + n - 1), 1 / ((n - 1) * e + 1)
    P = rr3.ewrr_matrix(n, best)
    np.testing.assert_allclose(P, rr_matrix(eps, n), rtol=1e-12)  # EWRRn at p* is k-RR
    assert rr3.ldp_epsilon(P) == pytest.approx(eps, rel=1e-10)
    assert rr3.ldp_epsilon(rr3.ewrr_matrix(n, low)) == pytest.approx(eps, rel=1e-10)  # the low branch too
    # beyond p* (or below the low branch) the level exceeds eps
    assert rr3.ldp_epsilon(rr3.ewrr_matrix(n, min(best * 1.01, 1.0))) > eps


def test_ldp_epsilon_matches_brute_force_on_random_matrices():
    g = rng(1)
    for _ in range(300):
        kind = g.integers(4)
        p1, p2, q = g.uniform(0.01, 0.99, 3)
        P = [rr3.rr3_dagger(p1, p2), rr3.rr3_ddagger(p1, p2), rr3.rr3_club(p1, p2, q),
             rr3.ewrr_matrix(int(g.integers(2, 6)), p1)][kind]
        assert rr3.ldp_epsilon(P) == pytest.approx(brute_ldp(P), rel=1e-12)
    assert rr3.ldp_epsilon(rr3.rr3_ddagger(1.0, 1.0)) == math.inf  # a deterministic answer
    assert rr3.ldp_epsilon(np.full((3, 3), 1 / 3)) == 0.0


@pytest.mark.parametrize("eps", [0.2, 1.0, 2.5])
def test_theorem_2_best_p_minimises_the_variance_and_the_low_branch_is_always_worse(eps):
    e = math.exp(eps)
    best, low = e / (e + 2), 1 / (2 * e + 1)
    grid = np.linspace(0.001, 0.999, 999)
    feasible = [p for p in grid
                if abs(3 * p - 1) > 1e-6 and rr3.ldp_epsilon(rr3.ewrr_matrix(3, p)) <= eps + 1e-12]
    for pi0 in (0.0, 0.2, 0.5, 0.9):
        pi = np.array([pi0, (1 - pi0) / 2, (1 - pi0) / 2])

        def var(p):
            return rr3.estimator_covariance(pi, rr3.ewrr_matrix(3, p), 1)[0, 0]

        assert var(best) < var(low)
        assert var(best) <= min(var(p) for p in feasible) * (1 + 1e-12)


# ---------------------------------------------------------------------------------------------
# estimators: exact unbiasedness and covariance by enumeration
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(MATRICES))
def test_estimate_is_exactly_unbiased_for_a_fixed_population(name):
    """All output sequences of 3 users with fixed inputs, weighted by their exact probabilities."""
    P = MATRICES[name]()
    n_out = P.shape[1]
    for x in [(0, 1, 2), (0, 0, 1), (2, 2, 2)]:
        x = [v % n_out for v in x]
        mean = np.zeros(n_out)
        for ys in itertools.product(range(n_out), repeat=len(x)):
            prob = np.prod([P[a, b] for a, b in zip(x, ys)])
            mean += prob * rr3.estimate(np.bincount(ys, minlength=n_out), P)
        np.testing.assert_allclose(mean, np.bincount(x, minlength=n_out) / len(x), atol=1e-12)


@pytest.mark.parametrize("name", list(MATRICES))
def test_covariance_formula_is_exact_by_enumeration(name):
    """Inputs iid from pi, N = 4: the mean and covariance over all 3^4 (or 5^4) output sequences."""
    P = MATRICES[name]()
    n_out = P.shape[1]
    pi = np.linspace(1, 2, n_out)
    pi /= pi.sum()
    t = pi @ P
    N = 4
    first, second = np.zeros(n_out), np.zeros((n_out, n_out))
    for ys in itertools.product(range(n_out), repeat=N):
        prob = np.prod(t[list(ys)])
        est = rr3.estimate(np.bincount(ys, minlength=n_out), P)
        first += prob * est
        second += prob * np.outer(est, est)
    np.testing.assert_allclose(first, pi, atol=1e-12)
    cov = second - np.outer(first, first)
    np.testing.assert_allclose(cov, rr3.estimator_covariance(pi, P, N), atol=1e-11)


@pytest.mark.parametrize("name", list(MATRICES))
def test_monte_carlo_variance_matches_the_covariance_formula(name):
    """2000 runs of 400 iid users through the production sampler.  Sample variances within 4
    relative SE (sqrt(2/(R-1))) and means within 4 SE: a sampler with a wrong row (a swapped
    p1 p2 / p1(1-p2)) or a transposed inverse in the estimator fails by far."""
    P = MATRICES[name]()
    n_out = P.shape[1]
    pi = np.linspace(3, 1, n_out)
    pi /= pi.sum()
    R, N = 2000, 400
    g = rng(2)
    x = g.choice(n_out, size=R * N, p=pi)
    y = rr3.perturb(x, P, g)
    counts = np.bincount(np.repeat(np.arange(R), N) * n_out + y, minlength=R * n_out).reshape(R, n_out)
    est = rr3.estimate(counts, P)
    cov = rr3.estimator_covariance(pi, P, N)
    sd = np.sqrt(np.diag(cov))
    assert np.abs((est.mean(axis=0) - pi) / (sd / math.sqrt(R))).max() < Z
    rel = est.var(axis=0, ddof=1) / np.diag(cov) - 1
    assert np.abs(rel).max() < Z * math.sqrt(2 / (R - 1))
    # off-diagonal: sample correlation against the formula's (SE ~ (1 - rho^2)/sqrt(R))
    rho = cov / np.outer(sd, sd)
    rho_hat = np.corrcoef(est.T)
    assert np.abs(rho_hat - rho).max() < Z * 1.0 / math.sqrt(R)


def test_estimate_handles_groups_and_refuses_singular_matrices():
    P = MATRICES["ddagger"]()
    counts = np.array([[10, 5, 3], [0, 0, 0], [4, 4, 4]])
    est = rr3.estimate(counts, P)
    np.testing.assert_allclose(est[0], rr3.estimate(counts[0], P))
    assert np.isnan(est[1]).all()
    for singular in (rr3.rr3_ddagger(0.5, 0.8), rr3.rr3_ddagger(0.7, 0.5), rr3.rr3_ddagger(0.0, 0.8),
                     rr3.ewrr_matrix(3, 1 / 3), rr3.rr3_club(0.7, 0.8, 0.5)):
        with pytest.raises(ValueError, match="singular"):
            rr3.estimate([1, 2, 3], singular)
        with pytest.raises(ValueError, match="singular"):
            rr3.estimator_covariance([0.2, 0.3, 0.5], singular, 10)
    with pytest.raises(ValueError, match="nothing to estimate"):
        rr3.estimate([0, 0, 0], P)


# ---------------------------------------------------------------------------------------------
# corrected closed forms (and the paper's wrong ones)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3, 4, 6])
def test_ewrr_closed_forms_match_the_general_inverse(n):
    g = rng(3)
    for p in (0.05, 0.3, 0.7, 0.95):
        if abs(n * p - 1) < 1e-9:
            continue
        P = rr3.ewrr_matrix(n, p)
        counts = g.integers(0, 50, n)
        np.testing.assert_allclose(rr3.ewrr_closed_form(counts, p), rr3.estimate(counts, P), atol=1e-10)
        pi = g.dirichlet(np.ones(n))
        general = np.diag(rr3.estimator_covariance(pi, P, 100))
        np.testing.assert_allclose(rr3.ewrr_variance(pi, p, 100), general, rtol=1e-9)


def paper_eq27(pi_i, n, p, N):
    """The paper's Eq. 27 for EWRRn: [1-p+(np-1) pi][p-(np-1) pi]/((np-1)^2 N)."""
    return (1 - p + (n * p - 1) * pi_i) * (p - (n * p - 1) * pi_i) / ((n * p - 1) ** 2 * N)


def test_erratum_eq_27_ewrr_variance_is_wrong_for_n_above_2():
    for n, p in [(3, 0.6), (4, 0.5), (6, 0.3)]:
        pi = np.linspace(1, 2, n)
        pi /= pi.sum()
        true = np.diag(rr3.estimator_covariance(pi, rr3.ewrr_matrix(n, p), 1))
        paper = np.array([paper_eq27(v, n, p, 1) for v in pi])
        assert np.abs(paper / true - 1).min() > 0.5  # off by far (the second factor should be n-2+p)
        np.testing.assert_allclose(rr3.ewrr_variance(pi, p, 1), true, rtol=1e-10)
    # for n = 2 the paper's form is right (n - 2 + p = p)
    pi = np.array([0.3, 0.7])
    np.testing.assert_allclose([paper_eq27(v, 2, 0.8, 1) for v in pi],
                               np.diag(rr3.estimator_covariance(pi, rr3.ewrr_matrix(2, 0.8), 1)), rtol=1e-10)


def test_erratum_eq_28_rr3_dagger_pi1_estimator_is_biased():
    """Eq. 28's pi_hat_1, applied to the exact expected output shares, misses pi_1; the general
    inverse (and Eq. 28's pi_hat_0, which is right) recover pi exactly."""
    p1, p2 = 0.7, 0.6
    P = rr3.rr3_dagger(p1, p2)
    pi = np.array([0.5, 0.3, 0.2])
    t = pi @ P  # E[N_i]/N
    d = p2 + 2 * p1 - 1
    paper_pi0 = (p2 - 1) / d + 2 * t[0] / d
    paper_pi1 = (p1 - 1) / d - 1 / (3 * p2 - 1) - t[0] / d + (2 * t[1] + t[0]) / (3 * p2 - 1)
    assert paper_pi0 == pytest.approx(pi[0])
    assert abs(paper_pi1 - pi[1]) > 0.5
    np.testing.assert_allclose(rr3.estimate(t * 1000, P), pi, atol=1e-12)


def test_erratum_eq_30_rr3_ddagger_pi1_estimator_is_biased_and_the_corrected_forms_hold():
    p1, p2 = 0.7, 0.6
    P = rr3.rr3_ddagger(p1, p2)
    for pi in (np.array([0.5, 0.3, 0.2]), np.array([0.1, 0.1, 0.8])):
        t = pi @ P
        paper_pi1 = (p1 / (2 * p1 - 1) - 1 / (2 * p1 * p2 - 1) - t[0] / (2 * p1 - 1)
                     + (2 * t[1] + t[0]) / (2 * p1 * p2 - 1))
        assert abs(paper_pi1 - pi[1]) > 0.05
        pi0, diff = rr3.ddagger_closed_form(t * 1000, p1, p2)
        assert pi0 == pytest.approx(pi[0]) and diff == pytest.approx(pi[1] - pi[2])
    g = rng(4)
    for _ in range(50):
        p1, p2 = g.uniform(0.05, 0.95, 2)
        counts = g.integers(0, 40, 3) + 1
        est = rr3.estimate(counts, rr3.rr3_ddagger(p1, p2))
        pi0, diff = rr3.ddagger_closed_form(counts, p1, p2)
        assert pi0 == pytest.approx(est[0], abs=1e-9) and diff == pytest.approx(est[1] - est[2], abs=1e-9)


def test_erratum_corollary_4_invertibility_condition():
    """det(RR3‡) = p1 (2p1 - 1)(2p2 - 1): singular iff p1 in {0, 1/2} or p2 = 1/2.  The paper's
    condition (p1 != 1/2 and p1 p2 != 1/2) both accepts singular matrices and rejects invertible ones."""
    g = rng(5)
    for _ in range(100):
        p1, p2 = g.random(2)
        det = p1 * (2 * p1 - 1) * (2 * p2 - 1)
        assert np.linalg.det(rr3.rr3_ddagger(p1, p2)) == pytest.approx(det, abs=1e-12)
    # p1 p2 = 1/2: the paper excludes it, yet the matrix is invertible and estimate works
    P = rr3.rr3_ddagger(0.8, 0.625)
    assert abs(np.linalg.det(P)) > 0.1
    np.testing.assert_allclose(rr3.estimate((np.array([0.2, 0.5, 0.3]) @ P) * 100, P), [0.2, 0.5, 0.3])
    # p2 = 1/2 with p1 = 0.7, and p1 = 0: the paper allows them, both are singular
    for p1, p2 in [(0.7, 0.5), (0.0, 0.3)]:
        assert np.linalg.matrix_rank(rr3.rr3_ddagger(p1, p2)) == 2
        with pytest.raises(ValueError, match="singular"):
            rr3.estimate([3, 4, 5], rr3.rr3_ddagger(p1, p2))


# ---------------------------------------------------------------------------------------------
# LPP‡ privacy level
# ---------------------------------------------------------------------------------------------

def lpp_rows(eps1, eps2, weights):
    """The LPP‡ mechanism over every input: no edge, and an edge of each weight w (rows as Eq. 43 with
    the dummy weight 0: (1-p1, p1 Q2(w), p1 (1 - Q2(w))), Q2(w) = (1+w)q/2 + (1-w)(1-q)/2)."""
    p1, q = expit(eps1), expit(eps2)
    rows = [[p1, (1 - p1) / 2, (1 - p1) / 2]]
    for w in weights:
        q2 = (1 + w) * q / 2 + (1 - w) * (1 - q) / 2
        rows.append([1 - p1, p1 * q2, p1 * (1 - q2)])
    return np.array(rows)


@pytest.mark.parametrize("eps1", [0.0, 0.1, 0.5, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("eps2", [0.0, 0.1, 0.5, 1.0, 2.0, 5.0])
def test_lpp_epsilon_equals_brute_force_over_a_grid_of_weights(eps1, eps2):
    P = lpp_rows(eps1, eps2, np.linspace(-1, 1, 201))
    exact = rr3.lpp_epsilon(eps1, eps2)
    assert rr3.ldp_epsilon(P) == pytest.approx(exact, rel=1e-10, abs=1e-12)
    some = P[[0, 1, 37, 101, 150, 201]]  # no edge, w = -1, ..., w = 1
    assert brute_ldp(some) == pytest.approx(exact, rel=1e-10, abs=1e-12)
    # the extremes w = +-1 are the RR3‡ matrix with p2 = q
    extremes = rr3.rr3_ddagger(expit(eps1), expit(eps2))
    assert rr3.ldp_epsilon(extremes) == pytest.approx(exact, rel=1e-10, abs=1e-12)
    assert max(eps1, eps2) - 1e-12 <= exact <= eps1 + eps2 + 1e-12  # never more than sequential composition


def test_erratum_lemma_2_omits_eps2_hand_worked_values():
    assert rr3.lpp_epsilon(1, 1) == pytest.approx(1.3799, abs=5e-5)
    assert rr3.lpp_epsilon(1, 2) == 2.0
    paper = math.log(2 * math.exp(1 + 2) / (math.exp(2) + 1))
    assert paper == pytest.approx(1.5662, abs=5e-5)
    P = rr3.rr3_ddagger(expit(1), expit(2))
    assert rr3.ldp_epsilon(P) > paper + 0.4  # the mechanism is not paper-eps-LDP
    # the ratio Lemma 2's Eq. 48 misses: p1 q / (p1 (1 - q)) = e^eps2 between the two edge states
    assert math.log(P[1, 1] / P[2, 1]) == pytest.approx(2.0)
    # whenever eps2 <= the paper's term the paper's value is right
    assert rr3.lpp_epsilon(2, 1) == pytest.approx(math.log(2 * math.exp(3) / (math.exp(1) + 1)))


# ---------------------------------------------------------------------------------------------
# sampling code path
# ---------------------------------------------------------------------------------------------

PER_CELL = 200_000


def rngs():
    return [pytest.param(lambda: rng(20261122), SEEDED_ALPHA, id="seeded"),
            pytest.param(lambda: None, SECURE_ALPHA, id="secure-default")]


@pytest.mark.parametrize("make_rng,alpha", rngs())
@pytest.mark.parametrize("name", list(MATRICES))
def test_perturb_matches_the_matrix(make_rng, alpha, name):
    P = MATRICES[name]()
    x = np.repeat(np.arange(P.shape[0]), PER_CELL)
    y = rr3.perturb(x, P, make_rng())
    assert chi_square_p([(y[x == a], P[a]) for a in range(P.shape[0])]) > alpha


def test_perturb_detects_a_one_percent_error_and_never_draws_impossible_outputs():
    P = MATRICES["ddagger"]()
    wrong = rr3.rr3_ddagger(expit(1.0), expit(1.5) * 0.99)
    x = np.repeat(np.arange(3), PER_CELL)
    y = rr3.perturb(x, wrong, rng(6))
    assert chi_square_p([(y[x == a], P[a]) for a in range(3)]) < 1e-6
    Q = np.array([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5], [0.0, 0.0, 1.0]])  # zeros, including the last column
    y = rr3.perturb(np.repeat(np.arange(3), 20_000), Q, rng(7))
    assert (y[:20_000] == 1).all() and (y[40_000:] == 2).all() and set(y[20_000:40_000]) == {0, 2}



def test_integer_boundaries_are_exact():
    """Row (0.25, 0.5, 0.25): the most probable output (1) comes last; boundaries 2^62 and 2^63."""
    P = np.array([[0.25, 0.5, 0.25], [0.25, 0.5, 0.25]])
    b1, b2 = 1 << 62, 1 << 63
    u = [0, b1 - 1, b1, b2 - 1, b2, U64_MAX]
    out = rr3.perturb(np.zeros(len(u), dtype=int), P, FixedWords(u))
    assert out.tolist() == [0, 0, 2, 2, 1, 1]


def test_seeded_is_reproducible_and_default_is_secure():
    P = MATRICES["club"]()
    x = np.arange(3).repeat(300)
    np.testing.assert_array_equal(rr3.perturb(x, P, rng(1)), rr3.perturb(x, P, rng(1)))
    np.random.seed(0)
    a = rr3.perturb(x, P)
    np.random.seed(0)
    assert (a != rr3.perturb(x, P)).any()


# ---------------------------------------------------------------------------------------------
# graph protocol LPP‡
# ---------------------------------------------------------------------------------------------

def test_lpp_report_law_per_user_type():
    """Each kind of user (no edge, w = +1, -1, 0.3) reports item j uniformly and a state with the
    LPP‡ row (1-p1, p1 Q2(w), p1 (1 - Q2(w))) - discretization and RR3‡ composed."""
    eps1, eps2, m, per = 0.8, 1.3, 3, 60_000
    weights = [np.nan, 1.0, -1.0, 0.3]
    edges = np.repeat(np.array([[w] * m for w in weights]), per, axis=0)
    rep = rr3.lpp_report(edges, m, eps1, eps2, rng(8))
    assert rep.shape == (edges.shape[0], 2) and rep.dtype == np.int64
    kinds = np.repeat(np.arange(len(weights)), per)
    P = lpp_rows(eps1, eps2, [1.0, -1.0, 0.3])
    groups = [(rep[kinds == a, 1], P[a]) for a in range(len(weights))]
    groups += [(rep[kinds == a, 0], np.full(m, 1 / m)) for a in range(len(weights))]
    assert chi_square_p(groups) > SEEDED_ALPHA


def test_graph_estimates_are_exactly_unbiased_given_the_number_of_samples():
    """n = 3 users, m = 2 items: enumerate who sampled which item and every report (exact
    probabilities incl. discretization).  Given N_j = r >= 1, E[degree_j] = k_j and E[weight_j] = w_j."""
    eps1, eps2 = 0.7, 1.1
    edges = np.array([[0.5, np.nan], [np.nan, -1.0], [1.0, -0.2]])
    n, m = edges.shape
    P = lpp_rows(eps1, eps2, [])  # row 0: no edge
    rows = {(i, j): (P[0] if np.isnan(edges[i, j]) else lpp_rows(eps1, eps2, [edges[i, j]])[1])
            for i in range(n) for j in range(m)}
    acc = {}
    for items in itertools.product(range(m), repeat=n):
        for states in itertools.product(range(3), repeat=n):
            prob = np.prod([rows[i, items[i]][states[i]] for i in range(n)]) / m ** n
            est = rr3.graph_estimates(np.column_stack([items, states]), n, m, eps1, eps2)
            for j in range(m):
                r = items.count(j)
                if r:
                    a = acc.setdefault((j, r), np.zeros(3))
                    a += prob * np.array([1.0, est.degree[j], est.weight[j]])
    for (j, r), (mass, deg, wt) in acc.items():
        assert deg / mass == pytest.approx((~np.isnan(edges[:, j])).sum(), abs=1e-12)
        assert wt / mass == pytest.approx(np.nansum(edges[:, j]), abs=1e-12)


def test_graph_estimates_monte_carlo_and_paper_averages():
    """300 runs of 3000 users and 4 items: degree and weight means within 4 SE of the truth; the
    mean weight is consistent; the averages use the paper's (n+m)(n+m-1)/2 vertex pairs."""
    g = rng(9)
    n, m, eps1, eps2, R = 3000, 4, 1.0, 1.5, 300
    edges = np.full((n, m), np.nan)
    has = g.random((n, m)) < np.array([0.2, 0.4, 0.6, 0.3])
    edges[has] = np.clip(g.normal([0.5, -0.3, 0.0, 0.8], 0.3, (n, m)), -1, 1)[has]
    deg, wt, mw = [], [], []
    for _ in range(R):
        est = rr3.graph_estimates(rr3.lpp_report(edges, m, eps1, eps2, g), n, m, eps1, eps2)
        deg.append(est.degree)
        wt.append(est.weight)
        mw.append(est.mean_weight)
    deg, wt, mw = np.array(deg), np.array(wt), np.array(mw)
    k_true, w_true = has.sum(axis=0), np.nansum(edges, axis=0)
    assert np.abs((deg.mean(0) - k_true) / (deg.std(0, ddof=1) / math.sqrt(R))).max() < Z
    assert np.abs((wt.mean(0) - w_true) / (wt.std(0, ddof=1) / math.sqrt(R))).max() < Z
    np.testing.assert_allclose(np.median(mw, axis=0), w_true / k_true, atol=0.15)
    assert est.epsilon == pytest.approx(rr3.lpp_epsilon(eps1, eps2))
    pairs = (n + m) * (n + m - 1) // 2
    assert est.vertex_pairs == pairs
    assert est.average_degree_over_vertex_pairs == pytest.approx(est.degree.sum() / pairs)
    assert est.average_weight_over_vertex_pairs == pytest.approx(est.weight.sum() / pairs)
    np.testing.assert_array_equal(est.samples.sum(), n)


def test_lpp_item_covariance_matches_monte_carlo_with_its_finite_population_term():
    """1500 runs of 2000 users and 2 items at eps1 = eps2 = 3 (weights +-1): the empirical variances
    and covariance of each item's (degree, weight) are within 4 SE of ``lpp_item_covariance``.  The
    formula without the finite-population term (``E[1/N] A``: reports treated as iid) is refused by the
    same check, so the test tells the two apart."""
    g = rng(12)
    n, m, eps, R = 2000, 2, 3.0, 1500
    states = np.column_stack([np.repeat([0, 1, 2], [800, 800, 400]), np.repeat([1, 0, 2], [200, 1000, 800])])
    edges = np.where(states == 0, np.nan, np.where(states == 1, 1.0, -1.0))
    est = np.empty((R, m, 2))
    for r in range(R):
        e = rr3.graph_estimates(rr3.lpp_report(edges, m, eps, eps, g), n, m, eps, eps)
        est[r, :, 0], est[r, :, 1] = e.degree, e.weight
    P = rr3.rr3_ddagger(1 / (1 + math.exp(-eps)), 1 / (1 + math.exp(-eps)))
    L = n * np.array([[-1.0, 0.0, 0.0], [0.0, 1.0, -1.0]])
    for j in range(m):
        pi = np.bincount(states[:, j], minlength=3) / n
        cov = rr3.lpp_item_covariance(pi, n, m, eps, eps)
        iid = L @ (rr3.inverse_sample_size(n, m) * rr3.estimator_covariance(pi, P, 1)) @ L.T
        emp = np.cov(est[:, j, :].T)
        # the standard error of a sample covariance of normal data: sqrt((s_aa s_bb + s_ab^2)/(R - 1))
        se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov ** 2) / (R - 1))
        assert np.abs((emp - cov) / se).max() < Z, (j, emp, cov)
        assert np.abs((emp - iid) / se).max() > Z, (j, emp, iid)


@pytest.mark.parametrize("weights", ["signs", "zero"])
def test_lpp_plug_in_intervals_cover_the_truth(weights):
    """400 runs of 1500 users and 2 items at eps1 = eps2 = 3: the 95% intervals of ``lpp_standard_errors``
    cover each item's true degree and weight 95% of the time (within 4 binomial SE over the 1600
    intervals), with weights +-1 and with weights 0 (every sign a coin flip: the covariance for any weights
    is exact there).  Checked to fail without the finite-population term (over-coverage) and with the
    term taken for signs under zero weights (the weights' intervals cover about 88%)."""
    g = rng(13)
    n, m, eps, R = 1500, 2, 3.0, 400
    has = g.random((n, m)) < np.array([0.6, 0.85])
    w = np.where(g.random((n, m)) < 0.5, 1.0, -1.0) if weights == "signs" else np.zeros((n, m))
    edges = np.where(has, w, np.nan)
    truth = np.stack([has.sum(axis=0), np.nansum(edges, axis=0)])  # (2, m)
    hits = 0
    for _ in range(R):
        rep = rr3.lpp_report(edges, m, eps, eps, g)
        est = rr3.graph_estimates(rep, n, m, eps, eps)
        se = np.stack(rr3.lpp_standard_errors(rep, n, m, eps, eps))
        hits += int((np.abs(np.stack([est.degree, est.weight]) - truth) <= 1.959963984540054 * se).sum())
    total = R * 2 * m
    coverage = hits / total
    assert abs(coverage - 0.95) < Z * math.sqrt(0.95 * 0.05 / total), coverage


def test_inverse_sample_size_against_direct_sums():
    from scipy.stats import binom

    for n, m in ((1, 1), (5, 1), (3, 7), (40, 3), (2000, 2)):
        k = np.arange(1, n + 1)
        direct = (binom.pmf(k, n, 1 / m) / k).sum() / (1 - binom.pmf(0, n, 1 / m))
        assert rr3.inverse_sample_size(n, m) == pytest.approx(direct, rel=1e-12)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            rr3.inverse_sample_size(bad, 2)


def test_dense_and_sparse_edges_give_identical_reports():
    g = rng(10)
    n, m = 500, 6
    dense = np.full((n, m), np.nan)
    has = g.random((n, m)) < 0.3
    dense[has] = g.uniform(-1, 1, has.sum())
    dense[0, 0] = 0.0  # an edge of weight 0 is still an edge
    coo = sp.coo_matrix((dense[has | (np.arange(n)[:, None] == 0) & (np.arange(m) == 0)],
                         np.nonzero(has | (np.arange(n)[:, None] == 0) & (np.arange(m) == 0))), shape=(n, m))
    a = rr3.lpp_report(dense, m, 1.0, 1.0, rng(11))
    b = rr3.lpp_report(coo, m, 1.0, 1.0, rng(11))
    np.testing.assert_array_equal(a, b)


def test_items_nobody_sampled_are_nan():
    rep = np.array([[0, 1], [0, 0], [2, 2]])
    est = rr3.graph_estimates(rep, 3, 3, 1.0, 1.0)
    assert np.isnan(est.degree[1]) and np.isnan(est.weight[1]) and est.samples.tolist() == [2, 0, 1]


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call,match", [
    (lambda: rr3.ewrr_matrix(1, 0.5), "at least 2"),
    (lambda: rr3.ewrr_matrix(3, 1.5), "p must lie in \\[0, 1\\]"),
    (lambda: rr3.rr3_dagger(float("nan"), 0.5), "p1 must lie"),
    (lambda: rr3.rr3_club(0.5, 0.5, "x"), "q must be a real"),
    (lambda: rr3.ldp_epsilon([[0.5, 0.6], [0.5, 0.5]]), "row-stochastic"),
    (lambda: rr3.ldp_epsilon([[-0.5, 1.5], [0.5, 0.5]]), "non-negative"),
    (lambda: rr3.estimate([1, 2], rr3.ewrr_matrix(3, 0.6)), "counts must have shape"),
    (lambda: rr3.estimate([1, -2, 3], rr3.ewrr_matrix(3, 0.6)), "non-negative"),
    (lambda: rr3.estimate([1, 2, 3], np.ones((2, 3)) / 3), "square"),
    (lambda: rr3.estimator_covariance([0.5, 0.6, 0.1], rr3.ewrr_matrix(3, 0.6), 10), "distribution"),
    (lambda: rr3.estimator_covariance([0.5, 0.4, 0.1], rr3.ewrr_matrix(3, 0.6), 0), "positive"),
    (lambda: rr3.perturb([0, 3], rr3.ewrr_matrix(3, 0.6)), "domain 0..2"),
    (lambda: rr3.perturb([0, 1], rr3.ewrr_matrix(3, 0.6), rng=5), "rng must be"),
    (lambda: rr3.lpp_epsilon(-1, 1), "eps1 must be >= 0"),
    (lambda: rr3.lpp_report(np.full((2, 3), 2.0), 3, 1, 1), "\\[-1, 1\\]"),
    (lambda: rr3.lpp_report(np.zeros((2, 3)), 4, 1, 1), "m = 4"),
    (lambda: rr3.lpp_report(np.zeros((2, 3)), 0, 1, 1), "positive integer"),
    (lambda: rr3.graph_estimates(np.zeros((3, 2), int), 4, 2, 1, 1), "one report per user"),
    (lambda: rr3.graph_estimates(np.array([[0, 3]]), 1, 2, 1, 1), "report states"),
    (lambda: rr3.graph_estimates(np.array([[0, 1]]), 1, 2, 0, 1), "eps1 must be > 0"),
    (lambda: rr3.ewrr_closed_form([1, 2, 3], 1 / 3), "singular"),
    (lambda: rr3.ddagger_closed_form([1, 2, 3], 0.5, 0.7), "singular"),
])
def test_invalid_inputs_raise_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
