"""Survey mechanisms: Warner, Simmons, Christofides, improved Christofides
(docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides, seed 004).

* Privacy: each ``*_epsilon`` against the exact LDP level of its matrix, found by enumerating every
  pair of inputs and every output; each matrix against the device it describes; each sampler against
  its matrix by chi-square (seeded threshold 1e-4, secure default 1e-7).
* Exactness: mean and variance of every estimator by exact enumeration of all outcomes at small N
  (all card deals for IC), equal to the closed forms to 1e-12.
* Monte Carlo through the real samplers (seeded, R repetitions of a census of N): the mean within 4
  standard errors of pi (SE from the closed form), the sample variance within 4 standard errors of the
  closed form (SE from the sample's fourth moment); each test also shows that a plausible wrong
  formula (with-replacement variance, MC's variance for IC, the paper's Appendix C) is rejected.
* Identities, Table 1, Table 2, the 28.7% figure (closed form and a sufficient-statistics simulation
  of the whole HCOVANY-sized census), and every place the spec or we found the paper wrong.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mechanisms import surveys as sv
from mechanisms.random import U64_MAX
from mechanisms.surveys import (
    KIND_PER_REPORT,
    LABEL_PER_REPORT,
    christofides_epsilon,
    christofides_estimate,
    christofides_matrix,
    christofides_optimal_probs,
    christofides_perturb,
    christofides_variance,
    ic_advantage_interval,
    ic_deck_counts,
    improved_christofides_deal,
    improved_christofides_epsilon,
    improved_christofides_estimate,
    improved_christofides_guarantee,
    improved_christofides_variance,
    min_sample_size,
    simmons_epsilon,
    simmons_estimate,
    simmons_matrix,
    simmons_perturb,
    simmons_probability,
    simmons_variance,
    warner_epsilon,
    warner_estimate,
    warner_matrix,
    warner_perturb,
    warner_probability,
    warner_variance,
)
from tests.mechanisms.fixed_words import FixedWords
from tests.mechanisms.test_sampling import chi_square_table_p

SEEDED_ALPHA = 1e-4
SECURE_ALPHA = 1e-7
SIGMAS = 4.0
HCOVANY_N, HCOVANY_PI = 3_252_599, 0.0778


def exact_ldp(P) -> float:
    """max over outputs j and ordered input pairs (x, x') of ln(P[x, j]/P[x', j]), by enumeration."""
    P = np.asarray(P, dtype=float)
    level = 0.0
    for j in range(P.shape[1]):
        for a, b in itertools.permutations(range(P.shape[0]), 2):
            if P[a, j] == 0:                      # no constraint from a zero numerator
                continue
            level = max(level, math.inf if P[b, j] == 0 else math.log(P[a, j] / P[b, j]))
    return level


def census(n: int, ones: int) -> np.ndarray:
    x = np.zeros(n, dtype=np.int64)
    x[:ones] = 1
    return x


def check_mean_and_variance(est: np.ndarray, truth: float, var: float, wrong_var: float | None = None):
    """Mean within 4 SE of ``truth`` (SE from ``var``); sample variance within 4 SE of ``var`` (SE from the
    sample's fourth moment); and, when given, ``wrong_var`` rejected by the same test."""
    R = est.size
    assert abs(est.mean() - truth) <= SIGMAS * math.sqrt(var / R), (est.mean(), truth)
    s2 = est.var(ddof=1)
    dev = est - est.mean()
    se = math.sqrt(max(np.mean(dev ** 4) - s2 ** 2, 0.0) / R)
    assert abs(s2 - var) <= SIGMAS * se, (s2, var, se)
    if wrong_var is not None:
        assert abs(s2 - wrong_var) > SIGMAS * se, (s2, wrong_var, se)


# -------------------------------------------------------------------------------------------------- privacy

@pytest.mark.parametrize("p", [0.5, 0.6, 0.75, 0.9, 0.25, 0.02, 0.0, 1.0])
def test_warner_epsilon_is_the_exact_level_of_its_matrix(p):
    P = warner_matrix(p)
    assert warner_epsilon(p) == pytest.approx(exact_ldp(P), abs=1e-12)
    assert P.tolist() == [[p, 1 - p], [1 - p, p]]


@pytest.mark.parametrize("eps", [0.01, 0.5, 1.0, 3.0])
def test_warner_probability_gives_eps(eps):
    p = warner_probability(eps)
    assert warner_epsilon(p) == pytest.approx(eps, rel=1e-12)
    assert warner_epsilon(1 - p) == pytest.approx(eps, rel=1e-12)
    assert warner_variance(p, 100) == pytest.approx(math.exp(eps) / (100 * math.expm1(eps) ** 2), rel=1e-12)


def simmons_device_matrix(p, pi_b):
    """The device enumerated: truth (prob p) or an unrelated Bernoulli(pi_B) answer (prob 1 - p)."""
    P = np.zeros((2, 2))
    for x in (0, 1):
        P[x, x] += p
        P[x, 1] += (1 - p) * pi_b
        P[x, 0] += (1 - p) * (1 - pi_b)
    return P


@pytest.mark.parametrize("p,pi_b", [(0.5, 0.5), (0.3, 0.1), (0.3, 0.9), (0.8, 0.5), (0.2, 0.5001),
                                    (0.6, 0.4999), (0.5, 0.0), (0.5, 1.0), (1.0, 0.3)])
def test_simmons_epsilon_is_the_exact_level_of_its_matrix(p, pi_b):
    P = simmons_matrix(p, pi_b)
    np.testing.assert_allclose(P, simmons_device_matrix(p, pi_b), atol=1e-15)
    assert simmons_epsilon(p, pi_b) == pytest.approx(exact_ldp(P), abs=1e-12)
    q1, q0 = p + (1 - p) * pi_b, (1 - p) * pi_b               # the reference's case form, eq. (4)
    if 0 < pi_b < 1 and p < 1:
        spec = math.log(q1 / q0) if pi_b <= 0.5 else math.log((1 - q0) / (1 - q1))
        assert simmons_epsilon(p, pi_b) == pytest.approx(spec, abs=1e-12)


@pytest.mark.parametrize("eps,pi_b", [(0.1, 0.2), (1.0, 0.5), (2.0, 0.85), (0.5, 0.99)])
def test_simmons_probability_gives_eps(eps, pi_b):
    assert simmons_epsilon(simmons_probability(eps, pi_b), pi_b) == pytest.approx(eps, rel=1e-10)


def christofides_device_matrix(probs):
    """The device enumerated: card k drawn with p_k; x = 1 reports L + 1 - k, x = 0 reports k."""
    L = len(probs)
    P = np.zeros((2, L))
    for k, pk in enumerate(probs, start=1):
        P[0, k - 1] += pk
        P[1, L + 1 - k - 1] += pk
    return P


@pytest.mark.parametrize("probs", [[0.2, 0.1, 0.7], [0.7, 0.1, 0.2], [0.1, 0.2, 0.3, 0.4], [0.3, 0.7],
                                   [0.1, 0.25, 0.3, 0.25, 0.1], [0.05, 0.15, 0.2, 0.0, 0.6],
                                   [0.0, 0.5, 0.0, 0.5], [0.0, 1.0, 0.0]])
def test_christofides_epsilon_is_the_exact_level_of_its_matrix(probs):
    P = christofides_matrix(probs)
    np.testing.assert_allclose(P, christofides_device_matrix(probs), atol=1e-15)
    assert christofides_epsilon(probs) == pytest.approx(exact_ldp(P), abs=1e-12)


@pytest.mark.parametrize("eps,p2", [(0.01, 0.01), (0.25, 0.05), (1.0, 0.0), (3.0, 0.5)])
def test_christofides_optimal_probs(eps, p2):
    probs = christofides_optimal_probs(eps, p2)
    E = math.exp(eps)
    np.testing.assert_allclose(probs, [(1 - p2) / (E + 1), p2, E * (1 - p2) / (E + 1)], rtol=1e-14)
    assert christofides_epsilon(probs) == pytest.approx(eps, rel=1e-10)
    K = (E + 1) ** 2 / ((E - 1) ** 2 * (1 - p2)) - 1
    assert christofides_variance(probs, 1000) == pytest.approx(K / 4000, rel=1e-10)


@pytest.mark.parametrize("N,eps,p2", [(10_000, 0.01, 0.01), (1000, 0.25, 0.05), (HCOVANY_N, 0.5, 0.01),
                                      (50, 1.0, 0.1), (7, 1.0, 0.0), (1000, 30.0, 0.2)])
def test_ic_deck_counts_keep_the_realised_epsilon_at_or_below_the_target(N, eps, p2):
    c = ic_deck_counts(N, eps, p2)
    assert c.sum() == N and c[1] == round(p2 * N) and c[2] > c[0] >= 1
    assert improved_christofides_epsilon(c) <= eps + 1e-15
    P = christofides_matrix(c / N)                   # the per-report law of one respondent
    assert improved_christofides_epsilon(c) == pytest.approx(exact_ldp(P), abs=1e-12)
    if N >= 1000 and eps <= 1:
        np.testing.assert_allclose(c / N, christofides_optimal_probs(eps, p2), atol=1.5 / N)


# ----------------------------------------------------------------------------- samplers follow the matrices

def rng_params():
    return [pytest.param(lambda: np.random.default_rng(20261122), SEEDED_ALPHA, id="seeded"),
            pytest.param(lambda: None, SECURE_ALPHA, id="secure-default")]


def law_p_value(x, reports, P, offset=0):
    counts = np.vstack([np.bincount(reports[x == a] - offset, minlength=P.shape[1]) for a in (0, 1)])
    return chi_square_table_p(counts, P)


@pytest.mark.parametrize("make_rng,alpha", rng_params())
def test_samplers_follow_their_matrices(make_rng, alpha):
    rng = make_rng()
    x = np.repeat([0, 1], 100_000)
    p = warner_probability(0.8)
    assert law_p_value(x, warner_perturb(x, p, rng), warner_matrix(p)) > alpha
    for pi_b in (0.2, 0.85):
        p = simmons_probability(1.0, pi_b)
        assert law_p_value(x, simmons_perturb(x, p, pi_b, rng), simmons_matrix(p, pi_b)) > alpha
    for probs in ([0.2, 0.1, 0.7], [0.1, 0.2, 0.0, 0.3, 0.4]):
        reports = christofides_perturb(x, probs, rng)
        assert law_p_value(x, reports, christofides_matrix(probs), offset=1) > alpha


def test_chi_square_detects_the_papers_swapped_christofides_rule():
    """Power: the same sample size rejects reports made with the paper's pseudocode (x = 1 reports Y)."""
    rng = np.random.default_rng(3)
    x = np.repeat([0, 1], 100_000)
    probs = christofides_optimal_probs(0.5, 0.1)
    swapped = christofides_perturb(1 - x, probs, rng)
    assert law_p_value(x, swapped, christofides_matrix(probs), offset=1) < 1e-12



def test_integer_thresholds_at_their_boundaries():
    """'yes' exactly when u < floor(Pr(yes | x) 2^64); probability 1 is 'yes' even for the largest word."""
    t = 3 << 62                                                   # threshold(0.75)
    words_ = [0, t - 1, t, U64_MAX]
    assert warner_perturb(np.ones(4, dtype=int), 0.75, FixedWords(words_)).tolist() == [1, 1, 0, 0]
    assert warner_perturb(np.zeros(4, dtype=int), 0.25, FixedWords(words_)).tolist() == [1, 1, 0, 0]
    assert warner_perturb(np.ones(4, dtype=int), 1.0, FixedWords(words_)).tolist() == [1, 1, 1, 1]
    assert warner_perturb(np.zeros(4, dtype=int), 1.0, FixedWords(words_)).tolist() == [0, 0, 0, 0]
    assert simmons_perturb(np.array([0, 0, 1, 1]), 0.5, 0.5, FixedWords([(1 << 62) - 1, 1 << 62, t - 1, t])
                           ).tolist() == [1, 0, 1, 0]
    probs = [0.25, 0.0, 0.75]                                     # card 2 never drawn; x = 0 reports the card
    source = FixedWords([0, (1 << 62) - 1, 1 << 62, U64_MAX])
    assert christofides_perturb(np.zeros(4, dtype=int), probs, source).tolist() == [1, 1, 3, 3]


def ic_joint_law(x, counts):
    """Exact law of the report vector: every ordering of the N cards equally likely."""
    deck = np.repeat(np.arange(1, len(counts) + 1), counts)
    law = {}
    perms = list(itertools.permutations(range(len(deck))))
    for perm in perms:
        y = deck[list(perm)]
        rep = tuple(np.where(np.asarray(x) == 1, len(counts) + 1 - y, y).tolist())
        law[rep] = law.get(rep, 0.0) + 1.0 / len(perms)
    return law


@pytest.mark.parametrize("make_rng,alpha", rng_params())
def test_ic_deal_follows_the_exact_joint_law(make_rng, alpha):
    rng = make_rng()
    x, counts = np.array([1, 0, 0, 1, 0]), np.array([1, 2, 2])
    law = ic_joint_law(x, counts)
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    draws = 12_000
    got = np.zeros(len(keys))
    for _ in range(draws):
        got[index[tuple(improved_christofides_deal(x, counts, rng).tolist())]] += 1
    assert chi_square_table_p(got[None, :], np.array([law[k] for k in keys])[None, :]) > alpha


# -------------------------------------------------------------------------- exact unbiasedness and variance

def exact_moments(outcomes):
    """Mean and variance of an estimator from (probability, value) pairs."""
    w = np.array([o[0] for o in outcomes])
    v = np.array([o[1] for o in outcomes])
    assert w.sum() == pytest.approx(1.0, abs=1e-12)
    mean = float(w @ v)
    return mean, float(w @ (v - mean) ** 2)


@pytest.mark.parametrize("ones", [0, 1, 3])
def test_warner_and_simmons_exact_moments(ones):
    N, x = 4, census(4, ones)
    pi = ones / N
    for p in (0.8, 0.35):
        P = warner_matrix(p)
        outs = []
        for rep in itertools.product((0, 1), repeat=N):
            prob = np.prod([P[x[i], rep[i]] for i in range(N)])
            outs.append((prob, warner_estimate(np.array(rep), p)))
        mean, var = exact_moments(outs)
        assert mean == pytest.approx(pi, abs=1e-12) and var == pytest.approx(warner_variance(p, N), rel=1e-12)
    for p, pi_b in ((0.6, 0.2), (0.4, 0.8)):
        P = simmons_matrix(p, pi_b)
        outs = [(np.prod([P[x[i], rep[i]] for i in range(N)]), simmons_estimate(np.array(rep), p, pi_b))
                for rep in itertools.product((0, 1), repeat=N)]
        mean, var = exact_moments(outs)
        assert mean == pytest.approx(pi, abs=1e-12)
        assert var == pytest.approx(simmons_variance(p, pi_b, pi, N), rel=1e-12)


@pytest.mark.parametrize("ones", [0, 2, 4])
def test_christofides_exact_moments(ones):
    N, x = 4, census(4, ones)
    for probs in ([0.2, 0.1, 0.7], [0.4, 0.3, 0.2, 0.1]):
        P = christofides_matrix(probs)
        L = len(probs)
        outs = [(np.prod([P[x[i], rep[i] - 1] for i in range(N)]),
                 christofides_estimate(np.array(rep), probs))
                for rep in itertools.product(range(1, L + 1), repeat=N)]
        mean, var = exact_moments(outs)
        assert mean == pytest.approx(ones / N, abs=1e-12)
        assert var == pytest.approx(christofides_variance(probs, N), rel=1e-12)


@pytest.mark.parametrize("counts,ones", [([1, 2, 4], 2), ([1, 0, 5], 1), ([2, 1, 4], 3), ([1, 2, 4], 0)])
def test_improved_christofides_exact_moments_over_all_deals(counts, ones):
    """Every deal of the deck enumerated: exactly unbiased, variance 4 pi(1 - pi) VarY/((N - 1) D^2)."""
    counts = np.array(counts)
    N = int(counts.sum())
    x = census(N, ones)
    law = ic_joint_law(x, counts)
    outs = [(prob, improved_christofides_estimate(np.array(rep), counts)) for rep, prob in law.items()]
    mean, var = exact_moments(outs)
    pi = ones / N
    assert mean == pytest.approx(pi, abs=1e-12)
    assert var == pytest.approx(improved_christofides_variance(counts, pi), rel=1e-12, abs=1e-15)
    probs = counts / N                                          # the IC/MC identity, N - 1 not N
    assert var == pytest.approx(4 * N * pi * (1 - pi) / (N - 1) * christofides_variance(probs, N), rel=1e-12,
                                abs=1e-15)


# ------------------------------------------------------------------------- Monte Carlo through the samplers

N_MC, REPS = 400, 4000


def repeated(perturb, x, reps):
    return perturb(np.tile(x, reps)).reshape(reps, x.size)


def test_warner_monte_carlo():
    rng, eps, pi = np.random.default_rng(1), 1.0, 0.3
    x = census(N_MC, int(pi * N_MC))
    p = warner_probability(eps)
    est = warner_estimate(repeated(lambda v: warner_perturb(v, p, rng), x, REPS), p)
    var = warner_variance(p, N_MC)
    assert var == pytest.approx(math.exp(eps) / (N_MC * math.expm1(eps) ** 2))
    check_mean_and_variance(est, pi, var, wrong_var=var + pi * (1 - pi) / N_MC)   # with-replacement form


@pytest.mark.parametrize("pi_b,eps,pi", [(0.3, 2.0, 0.5), (0.9, 1.0, 0.1)])
def test_simmons_monte_carlo_and_the_appendix_c_erratum(pi_b, eps, pi):
    """Eq. (2) holds for every pi_B; for pi_B > 1/2 the paper's Appendix C form (pi_B -> 1 - pi_B with pi
    kept) is rejected by the same sample (for pi_B <= 1/2 the two agree)."""
    rng = np.random.default_rng(2)
    x = census(N_MC, int(pi * N_MC))
    p = simmons_probability(eps, pi_b)
    est = simmons_estimate(repeated(lambda v: simmons_perturb(v, p, pi_b, rng), x, REPS), p, pi_b)
    var = simmons_variance(p, pi_b, pi, N_MC)
    r, b = math.expm1(eps), min(pi_b, 1 - pi_b)
    appendix_c = ((1 / r + pi) * (1 + 1 / (r * b)) - 1 / r ** 2 - (math.exp(eps) + 1) * pi / r) / N_MC
    if pi_b <= 0.5:
        assert appendix_c == pytest.approx(var, rel=1e-12)
        check_mean_and_variance(est, pi, var, wrong_var=var + pi * (1 - pi) / N_MC)
    else:
        assert appendix_c == pytest.approx(simmons_variance(p, 1 - pi_b, pi, N_MC), rel=1e-12)
        check_mean_and_variance(est, pi, var, wrong_var=appendix_c)


def test_christofides_monte_carlo():
    rng, pi = np.random.default_rng(3), 0.3
    x = census(N_MC, int(pi * N_MC))
    probs = christofides_optimal_probs(1.0, 0.1)
    est = christofides_estimate(repeated(lambda v: christofides_perturb(v, probs, rng), x, REPS), probs)
    var = christofides_variance(probs, N_MC)
    check_mean_and_variance(est, pi, var, wrong_var=var + pi * (1 - pi) / N_MC)


def test_improved_christofides_monte_carlo():
    rng, pi = np.random.default_rng(4), 0.1
    x = census(N_MC, int(pi * N_MC))
    counts = ic_deck_counts(N_MC, 1.0, 0.1)
    est = np.array([improved_christofides_estimate(improved_christofides_deal(x, counts, rng), counts)
                    for _ in range(REPS)])
    var = improved_christofides_variance(counts, pi)
    mc_var = christofides_variance(counts / N_MC, N_MC)                 # the plausible bug: MC's variance
    check_mean_and_variance(est, pi, var, wrong_var=mc_var)


# ----------------------------------------------------------------------------------------------- identities

@pytest.mark.parametrize("eps", [0.05, 0.5, 2.0])
def test_simmons_at_one_half_is_warner(eps):
    p_s, p_w = simmons_probability(eps, 0.5), warner_probability(eps)
    np.testing.assert_allclose(simmons_matrix(p_s, 0.5), warner_matrix(p_w), atol=1e-15)
    mw = math.exp(eps) / (1000 * math.expm1(eps) ** 2)
    for pi in (0.0, 0.1, 0.5, 0.93):
        assert simmons_variance(p_s, 0.5, pi, 1000) == pytest.approx(mw, rel=1e-10)
    # and pi_B = 1/2 minimises Simmons' variance at fixed eps (Theorem 5.3), for every pi
    for pi in (0.05, 0.5, 0.9):
        grid = np.linspace(0.02, 0.98, 97)
        values = [simmons_variance(simmons_probability(eps, b), b, pi, 1000) for b in grid]
        assert min(values) >= mw * (1 - 1e-10)
        assert grid[int(np.argmin(values))] == pytest.approx(0.5)


@pytest.mark.parametrize("eps", [0.05, 0.7, 3.0])
def test_christofides_with_p2_zero_is_warner(eps):
    probs, p = christofides_optimal_probs(eps, 0.0), warner_probability(eps)
    assert christofides_variance(probs, 777) == pytest.approx(warner_variance(p, 777), rel=1e-10)
    # card 1 plays "yes" and card 3 "no": same matrix, and the same estimate from the same answers
    np.testing.assert_allclose(christofides_matrix(probs)[:, [2, 0]], warner_matrix(p), atol=1e-15)
    reports = np.random.default_rng(0).choice([1, 3], size=50)
    assert christofides_estimate(reports, probs) == pytest.approx(warner_estimate(reports == 1, p), rel=1e-12)


def test_ic_over_mc_ratio_for_any_parameters():
    rng = np.random.default_rng(6)
    for _ in range(20):
        L = int(rng.integers(2, 6))
        N = int(rng.integers(10, 10_000))
        counts = rng.multinomial(N, rng.dirichlet(np.ones(L)))
        if abs(sv._card_moments(counts / N)[2]) < 1e-9:
            continue
        pi = float(rng.random())
        ratio = improved_christofides_variance(counts, pi) / christofides_variance(counts / N, N)
        assert ratio == pytest.approx(4 * N * pi * (1 - pi) / (N - 1), rel=1e-12)


def test_when_ic_beats_warner_and_christofides():
    """IC beats MW/MS exactly outside [pi_A1, pi_A2]; it beats MC exactly outside 1/2 -+ 1/(2 sqrt N)."""
    for N, eps, p2 in [(10_000, 0.25, 0.01), (400, 1.0, 0.2), (9, 0.5, 0.36)]:
        a1, a2 = ic_advantage_interval(N, eps, p2)
        assert a1 + a2 == pytest.approx(1.0)
        K = 1 / (math.tanh(eps / 2) ** 2 * (1 - p2)) - 1
        ic = lambda pi: pi * (1 - pi) * K / (N - 1)  # noqa: E731  (Theorem 5.7's optimum)
        mw = math.exp(eps) / (N * math.expm1(eps) ** 2)
        mc = K / (4 * N)
        h = 1e-6
        assert ic(a1 - h) < mw < ic(a1 + h) and ic(a2 + h) < mw < ic(a2 - h)
        assert ic(a1) == pytest.approx(mw, rel=1e-9)
        b1, b2 = 0.5 - 0.5 / math.sqrt(N), 0.5 + 0.5 / math.sqrt(N)
        assert ic(b1 - h) < mc < ic(b1 + h) and ic(b2 + h) < mc < ic(b2 - h)
        if p2 > 0:
            assert a1 < b1 and mw < mc                           # Theorem 6.1's ordering


def test_table_1_interval_lengths():
    """Paper Table 1 (N = 10^4): pi_A2 - pi_A1 to three decimals."""
    table = {0.01: [0.100, 0.101, 0.101, 0.104], 0.05: [0.224, 0.224, 0.225, 0.230]}
    for p2, row in table.items():
        got = [ic_advantage_interval(10_000, eps, p2) for eps in (0.01, 0.05, 0.25, 0.5)]
        assert [round(b - a, 3) for a, b in got] == row


def test_table_2_minimum_sample_sizes_and_the_off_by_one():
    """Paper Table 2 (pi = 0.1, Var <= 0.1, p2 = 0.01); its MC entry at eps = 0.01 is 101010, not 101011:
    N = 101010 already meets the bound (101011 is IC's size at pi = 1/2, the paper's own N > 101010.3)."""
    table = {"MW": [100000, 4000, 160, 40], "MS": [100000, 4000, 160, 40], "MC": [101010, 4040, 161, 40],
             "IC": [36365, 1456, 59, 16]}
    for mech, row in table.items():
        assert [min_sample_size(mech, e, 0.1, 0.1, 0.01) for e in (0.01, 0.05, 0.25, 0.5)] == row
    probs = christofides_optimal_probs(0.01, 0.01)
    assert christofides_variance(probs, 101010) <= 0.1 < christofides_variance(probs, 101009)
    assert min_sample_size("improved_christofides", 0.01, 0.1, 0.5, 0.01) == 101011
    assert min_sample_size("warner", 0.5, 0.1, 0.3, 0.0) == min_sample_size("MS", 0.5, 0.1, 0.9, 0.3)


# ----------------------------------------------------------------------------------------- the 28.7% figure

def test_hcovany_ratio_in_closed_form():
    N, pi = HCOVANY_N, HCOVANY_PI
    ratio = 4 * N * pi * (1 - pi) / (N - 1)
    assert round(ratio, 3) == 0.287
    ones = round(pi * N)
    for eps in (0.05, 0.1, 0.25, 0.5):                           # "at every eps", with integer decks
        counts = ic_deck_counts(N, eps, 0.01)
        real = improved_christofides_variance(counts, ones / N) / christofides_variance(
            christofides_optimal_probs(eps, 0.01), N)
        assert real == pytest.approx(ratio, rel=2e-3)


def simulate_sums(rng, mechanism, counts_or_probs, ones, zeros, reps):
    """sum X of a census on sufficient statistics: multinomial card counts per group (MC), or the ones'
    share of the deck as a multivariate hypergeometric draw (IC)."""
    L = len(counts_or_probs)
    k = np.arange(1, L + 1)
    if mechanism == "MC":
        a = rng.multinomial(ones, counts_or_probs, size=reps)
        b = rng.multinomial(zeros, counts_or_probs, size=reps)
    else:
        a = rng.multivariate_hypergeometric(counts_or_probs, ones, size=reps)
        b = np.asarray(counts_or_probs) - a
    return a @ (L + 1 - k) + b @ k


def test_hcovany_ratio_by_simulation():
    """The whole census of 3,252,599 (pi = 0.0778, eps = 0.25, p2 = 0.01) simulated on sufficient
    statistics: Var_IC/Var_MC within 4 SE of 4 N pi(1 - pi)/(N - 1) = 0.287, and each variance within
    4 SE of its closed form."""
    rng, N, reps, eps = np.random.default_rng(287), HCOVANY_N, 3000, 0.25
    ones = round(HCOVANY_PI * N)
    pi = ones / N
    probs, counts = christofides_optimal_probs(eps, 0.01), ic_deck_counts(N, eps, 0.01)
    ey_mc, _, d_mc = sv._card_moments(probs)
    ey_ic, _, d_ic = sv._card_moments(counts / N)
    mc = (simulate_sums(rng, "MC", probs, ones, N - ones, reps) / N - ey_mc) / d_mc
    ic = (simulate_sums(rng, "IC", counts, ones, N - ones, reps) / N - ey_ic) / d_ic
    v_mc, v_ic = christofides_variance(probs, N), improved_christofides_variance(counts, pi)
    check_mean_and_variance(mc, pi, v_mc)
    check_mean_and_variance(ic, pi, v_ic, wrong_var=v_mc)
    rel_se = math.sqrt(2 / (reps - 1)) * math.sqrt(2)           # ratio of two independent sample variances
    sim = ic.var(ddof=1) / mc.var(ddof=1)
    assert round(v_ic / v_mc, 3) == 0.287
    assert abs(sim / (v_ic / v_mc) - 1) <= SIGMAS * rel_se
    assert abs(sim - 1.0) > SIGMAS * rel_se                    # IC really is better than MC here


# ---------------------------------------------------------------------------- the paper's pseudocode errata

def test_warner_pseudocode_inverts_the_coin():
    """Algorithm 1 keeps the truth when the Bernoulli(p) coin u satisfies u < p, i.e. u = 0 (probability
    1 - p): the estimator then targets 1 - pi.  'Truthful with probability p' is unbiased."""
    p, pi = warner_probability(1.0), 0.2
    x = census(1000, 200)
    paper = warner_matrix(1 - p)                                 # truthful with probability 1 - p
    expected_paper = ((paper[x, 1].mean()) - (1 - p)) / (2 * p - 1)
    assert expected_paper == pytest.approx(1 - pi, abs=1e-12)
    rng = np.random.default_rng(9)
    ours = warner_estimate(repeated(lambda v: warner_perturb(v, p, rng), x, 500), p)
    theirs = warner_estimate(repeated(lambda v: warner_perturb(v, 1 - p, rng), x, 500), p)
    se = math.sqrt(warner_variance(p, 1000) / 500)
    assert abs(ours.mean() - pi) < SIGMAS * se and abs(theirs.mean() - (1 - pi)) < SIGMAS * se


def test_simmons_pseudocode_inverts_both_coins():
    """Found while implementing: Algorithm 2 has the same inverted tests (truth when u = 0, 'yes' when
    v = 0), i.e. truth with 1 - p and an unrelated 'yes' with 1 - pi_B; the eq. (2) estimator is then
    biased.  Exact expectations."""
    p, pi_b = 0.6, 0.3
    x = census(1000, 100)
    pi = 0.1
    paper = simmons_matrix(1 - p, 1 - pi_b)
    expected_paper = (paper[x, 1].mean() - (1 - p) * pi_b) / p
    expected_ours = (simmons_matrix(p, pi_b)[x, 1].mean() - (1 - p) * pi_b) / p
    assert expected_ours == pytest.approx(pi, abs=1e-12)
    assert abs(expected_paper - pi) > 0.2


def test_christofides_pseudocode_swaps_the_report_rule():
    """Algorithm 3 reports k for x = 1 and L + 1 - k for x = 0, the opposite of its formula
    X = (L + 1 - Y) x + Y (1 - x): with the estimator it targets 1 - pi."""
    probs, pi = christofides_optimal_probs(1.0, 0.1), 0.15
    x = census(1000, 150)
    swapped = christofides_matrix(probs)[::-1]                    # rows exchanged
    k = np.arange(1, 4)
    ey, _, d = sv._card_moments(probs)
    expected_paper = ((swapped[x] @ k).mean() - ey) / d
    expected_ours = ((christofides_matrix(probs)[x] @ k).mean() - ey) / d
    assert expected_ours == pytest.approx(pi, abs=1e-12)
    assert expected_paper == pytest.approx(1 - pi, abs=1e-12)
    rng = np.random.default_rng(10)
    est = christofides_estimate(repeated(lambda v: christofides_perturb(v, probs, rng), x, 300), probs)
    assert abs(est.mean() - pi) < SIGMAS * math.sqrt(christofides_variance(probs, 1000) / 300)


# ----------------------------------------------------------------------------------------- the IC guarantee

def test_ic_joint_release_is_not_eps_dp_but_each_report_is():
    """Neighbouring censuses (one respondent's x flipped): the per-report law has level ln(c3/c1), the
    joint law of all reports has infinite level, and knowing the others' values decodes the respondent's
    card (hence x whenever the card is not the middle one)."""
    counts = np.array([1, 1, 2])
    x, x_nb = np.array([1, 0, 0, 0]), np.array([0, 0, 0, 0])
    law, law_nb = ic_joint_law(x, counts), ic_joint_law(x_nb, counts)
    support = set(law) | set(law_nb)
    assert any(law.get(o, 0) > 0 and law_nb.get(o, 0) == 0 for o in support)      # infinite joint level
    marg = np.zeros((2, 3))
    for row, lw in ((1, law), (0, law_nb)):
        for rep, prob in lw.items():
            marg[row, rep[0] - 1] += prob
    assert exact_ldp(marg) == pytest.approx(improved_christofides_epsilon(counts))
    assert exact_ldp(marg) == pytest.approx(math.log(2))
    # decoding: given the others' values and all reports, respondent 0's card is the deck's remaining card
    deck = np.repeat([1, 2, 3], counts)
    for lw, x0 in ((law, 1), (law_nb, 0)):
        for rep in lw:
            others = [rep[j] if x[j] == 0 else 4 - rep[j] for j in range(1, 4)]
            card = int(sum(deck) - sum(others))
            assert rep[0] == (4 - card if x0 == 1 else card)
    guarantee = improved_christofides_guarantee(counts)
    assert guarantee.kind == KIND_PER_REPORT and guarantee.label == LABEL_PER_REPORT
    assert guarantee.epsilon == pytest.approx(math.log(2)) and guarantee.joint_epsilon == math.inf
    assert guarantee.aggregate_only and guarantee.requires_every_respondent


def test_ic_requires_every_dealt_respondent():
    counts = ic_deck_counts(100, 1.0, 0.1)
    x = census(100, 10)
    reports = improved_christofides_deal(x, counts, np.random.default_rng(0))
    with pytest.raises(ValueError, match="exactly once"):
        improved_christofides_estimate(reports[:-1], counts)
    with pytest.raises(ValueError, match="deck has 100 cards but there are 99"):
        improved_christofides_deal(x[:-1], counts)


# ----------------------------------------------------------------------------------------------- validation

@pytest.mark.parametrize("call,match", [
    (lambda: warner_perturb([0, 1, 2], 0.7), r"0\.\.1"),
    (lambda: warner_perturb([0, 1], 1.5), r"\[0, 1\]"),
    (lambda: warner_estimate([0, 1], 0.5), "no estimator"),
    (lambda: warner_estimate([], 0.7), "non-empty"),
    (lambda: warner_variance(0.7, 0), "integer >= 1"),
    (lambda: simmons_estimate([0, 1], 0.0, 0.5), r"\(0, 1\]"),
    (lambda: simmons_probability(1.0, 1.0), r"\(0, 1\)"),
    (lambda: simmons_perturb([0, 1], 0.5, True), "probability"),
    (lambda: christofides_perturb([0, 1], [0.5, 0.6]), "sum to 1"),
    (lambda: christofides_perturb([0, 1], [1.0]), "L >= 2"),
    (lambda: christofides_estimate([1, 4], [0.2, 0.1, 0.7]), r"1\.\.3"),
    (lambda: christofides_estimate([1, 3], [0.3, 0.4, 0.3]), "symmetric"),
    (lambda: christofides_optimal_probs(-1.0, 0.1), "eps must be >= 0"),
    (lambda: christofides_optimal_probs(1.0, 1.0), r"\[0, 1\)"),
    (lambda: ic_deck_counts(5, 0.01, 0.0), "too small"),
    (lambda: ic_deck_counts(100, 0.0, 0.1), "eps must be > 0"),
    (lambda: improved_christofides_deal([0, 1], [1.5, 0.5]), "integer card counts"),
    (lambda: improved_christofides_deal([0, 1], [-1, 3]), "non-negative"),
    (lambda: improved_christofides_deal([0, 1], [1, 1], rng="seed"), "rng must be"),
    (lambda: improved_christofides_variance([1, 2, 3], 1.2), r"\[0, 1\]"),
    (lambda: ic_advantage_interval(1, 0.5, 0.01), "integer >= 2"),
    (lambda: min_sample_size("laplace", 0.5, 0.1, 0.1, 0.01), "mechanism must be"),
    (lambda: min_sample_size("MW", 0.5, 0.0, 0.1, 0.01), "var must be"),
])
def test_invalid_inputs_raise_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
