"""RAPPOR with gradual release (docs/mechanisms-reference.md#rappor-with-gradual-release).

Statistical tests use fixed seeds; each threshold is derived from the sampling distribution of the
statistic (binomial / chi-square p-values above 1e-4, sample variances within 4 relative standard
errors sqrt(2/(R-1))), and the comment beside it names the bug it would catch.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
from scipy import stats

from mechanisms import rappor
from mechanisms.rr import keep_probability

P_MIN = 1e-4  # fixed seeds: a correct implementation passes deterministically; a wrong law fails by far


def rng(seed):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------
# Bloom filter
# ---------------------------------------------------------------------------------------------

def test_bloom_bits_shape_positions_and_hash_definition():
    strings = ["apple", "banana", "apple", "cherry", ""]
    cohorts = [0, 1, 0, 3, 2]
    bits = rappor.bloom_bits(strings, cohorts, 32, 3)
    assert bits.shape == (5, 32) and bits.dtype == bool
    assert np.all(bits.sum(axis=1) >= 1) and np.all(bits.sum(axis=1) <= 3)
    np.testing.assert_array_equal(bits[0], bits[2])  # same (cohort, string) -> same filter
    # the documented hash: 8-byte big-endian words of SHAKE-256("cohort:string") mod num_bits
    d = hashlib.shake_256(b"3:cherry").digest(24)
    expected = {int.from_bytes(d[8 * j:8 * j + 8], "big") % 32 for j in range(3)}
    assert set(np.flatnonzero(bits[3])) == expected
    # one cohort for all strings
    same = rappor.bloom_bits(["apple", "banana"], 0, 32, 3)
    np.testing.assert_array_equal(same[0], bits[0])


def test_bloom_bits_depend_on_cohort():
    strings = [f"s{i}" for i in range(200)]
    a = rappor.bloom_bits(strings, 0, 64, 2)
    b = rappor.bloom_bits(strings, 1, 64, 2)
    # a hash ignoring the cohort would make every row equal
    assert (a != b).any(axis=1).mean() > 0.9


def test_bloom_bit_positions_are_uniform():
    # 20000 strings x 2 hashes over 64 bits: chi-square of the position histogram.  A biased
    # reduction (e.g. one byte mod num_bits for num_bits not dividing 256, or a constant hash)
    # fails this.
    strings = [f"user-{i}" for i in range(10000)]
    bits = rappor.bloom_bits(strings * 2, np.repeat([0, 1], 10000), 48, 2)
    counts = bits.sum(axis=0)
    assert stats.chisquare(counts).pvalue > P_MIN


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(strings="abc", cohorts=0, num_bits=8, num_hashes=1), "sequence of strings"),
        (dict(strings=[b"x"], cohorts=0, num_bits=8, num_hashes=1), "str"),
        (dict(strings=["x"], cohorts=-1, num_bits=8, num_hashes=1), "cohorts"),
        (dict(strings=["x", "y"], cohorts=[0, 1, 2], num_bits=8, num_hashes=1), "cohorts"),
        (dict(strings=["x"], cohorts=0, num_bits=0, num_hashes=1), "num_bits"),
        (dict(strings=["x"], cohorts=0, num_bits=8, num_hashes=0), "num_hashes"),
        (dict(strings=["x"], cohorts=0, num_bits=8.0, num_hashes=1), "num_bits"),
    ],
)
def test_bloom_bits_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        rappor.bloom_bits(**kwargs)


# ---------------------------------------------------------------------------------------------
# eps_ns (Eq. 65 / Appendix E), parameter conversions
# ---------------------------------------------------------------------------------------------

def _eq121(k, alpha, beta):
    """The paper's Appendix E closed form in alpha/beta (Eq. 121)."""
    return math.log((alpha * beta**k + (1 - alpha) * (1 - beta) ** k)
                    / (alpha * (1 - beta) ** k + (1 - alpha) * beta**k))


@pytest.mark.parametrize("eps_alpha", [0.1, 1.0, 3.0])
@pytest.mark.parametrize("eps_beta", [0.1, 0.5, 1.0, 2.0])
def test_eps_ns_matches_eq121_and_is_increasing_to_eps_alpha(eps_alpha, eps_beta):
    ks = np.arange(1, 41)
    got = rappor.eps_ns(ks, eps_alpha, eps_beta)
    alpha, beta = rappor.alpha_from_eps(eps_alpha), rappor.alpha_from_eps(eps_beta)
    want = np.array([_eq121(int(k), alpha, beta) for k in ks])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    # increasing; strictly so until it saturates at eps_alpha in double precision
    assert np.all(np.diff(got) >= 0)
    unsaturated = got[1:] < eps_alpha * (1 - 1e-13)
    assert np.all(np.diff(got)[unsaturated] > 0)
    assert np.all(got <= eps_alpha)
    # tends to eps_alpha: the gap is ~ 2 sinh(eps_alpha) e^{-k eps_beta}
    far = rappor.eps_ns(np.array([2000]), eps_alpha, eps_beta)[0]
    assert far == pytest.approx(eps_alpha, rel=1e-12)
    assert rappor.eps_ns(0, eps_alpha, eps_beta) == 0.0


def test_eps_ns_strictly_increasing_where_not_saturated():
    got = rappor.eps_ns(np.arange(0, 30), 1.0, 0.5)
    assert np.all(np.diff(got) > 0)
    # paper Sec. 6.1: eps_ns(10) for eps_alpha = 1, eps_beta = 0.5
    assert got[10] == pytest.approx(math.log((math.e * math.exp(5) + 1) / (math.e + math.exp(5))), rel=1e-14)


@pytest.mark.parametrize("eps_alpha, eps_beta, k",
                         [(1.0, 0.5, 1), (1.0, 0.5, 7), (2.0, 0.3, 12), (0.4, 1.5, 4)])
def test_eps_ns_is_the_ldp_level_of_the_count(eps_alpha, eps_beta, k):
    # Independent of Appendix E's monotonicity argument: the exact LDP level of the count of ones
    # N ~ alpha Bin(k, beta) + (1 - alpha) Bin(k, 1 - beta) (Eq. 116-118) is its worst-case log ratio.
    alpha, beta = rappor.alpha_from_eps(eps_alpha), rappor.alpha_from_eps(eps_beta)
    j = np.arange(k + 1)
    p1 = alpha * stats.binom.pmf(j, k, beta) + (1 - alpha) * stats.binom.pmf(j, k, 1 - beta)
    p0 = alpha * stats.binom.pmf(j, k, 1 - beta) + (1 - alpha) * stats.binom.pmf(j, k, beta)
    assert np.max(np.abs(np.log(p1 / p0))) == pytest.approx(rappor.eps_ns(k, eps_alpha, eps_beta), rel=1e-10)


def test_eps_ns_tanh_composition_and_one_sample():
    # K noisy samples = RR(eps_alpha) composed with RR(K eps_beta): tanh halves multiply
    ks = np.arange(1, 20)
    got = rappor.eps_ns(ks, 0.8, 0.3)
    np.testing.assert_allclose(np.tanh(got / 2), np.tanh(0.4) * np.tanh(ks * 0.3 / 2), rtol=1e-13)
    # one sample: keep probability alpha beta + (1 - alpha)(1 - beta)
    a, b = rappor.alpha_from_eps(0.8), rappor.alpha_from_eps(0.3)
    assert rappor.alpha_from_eps(got[0]) == pytest.approx(a * b + (1 - a) * (1 - b), rel=1e-14)


def test_eps_ns_large_values_do_not_overflow():
    got = rappor.eps_ns(np.array([1, 10, 1000]), 600.0, 50.0)
    assert np.all(np.isfinite(got)) and got[-1] == pytest.approx(600.0)
    assert rappor.eps_ns(3, 1e-6, 1e-6) == pytest.approx(2 * math.atanh(math.tanh(5e-7) * math.tanh(1.5e-6)),
                                                          rel=1e-6)


@pytest.mark.parametrize("args, message", [((-1, 1.0, 0.5), "k"), ((1.5, 1.0, 0.5), "k"),
                                           ((1, -1.0, 0.5), "eps_alpha"),
                                           ((1, 1.0, float("nan")), "eps_beta")])
def test_eps_ns_validation(args, message):
    with pytest.raises(ValueError, match=message):
        rappor.eps_ns(*args)


def test_alpha_eps_round_trip():
    eps = np.array([0.0, 0.01, 0.5, 1.0, 5.0, 30.0])
    alpha = rappor.alpha_from_eps(eps)
    np.testing.assert_allclose(alpha, [keep_probability(e, 2) for e in eps], rtol=1e-15)
    np.testing.assert_allclose(rappor.eps_from_alpha(alpha[:-1]), eps[:-1], rtol=1e-9, atol=1e-15)
    assert rappor.eps_from_alpha(0.75) == pytest.approx(math.log(3))
    for bad in (0.4, 1.0, float("nan")):
        with pytest.raises(ValueError, match="alpha"):
            rappor.eps_from_alpha(bad)
    with pytest.raises(ValueError, match="eps"):
        rappor.alpha_from_eps(-0.1)


def test_report_epsilon_and_bloom_hamming_distance():
    assert rappor.report_epsilon(0.5, 2) == 2.0
    np.testing.assert_allclose(rappor.report_epsilon([0.1, 1.0], 3), [0.6, 6.0])
    with pytest.raises(ValueError, match="num_hashes"):
        rappor.report_epsilon(1.0, 0)
    with pytest.raises(ValueError, match="bit_eps"):
        rappor.report_epsilon(-1.0, 2)
    # Two strings' filters differ in at most 2h bits, so the worst log-likelihood ratio of a report
    # with per-bit eps (d eps over the d differing bits) never exceeds report_epsilon.
    h, eps = 3, 0.7
    strings = [f"w{i}" for i in range(300)]
    bits = rappor.bloom_bits(strings, 5, 16, h)
    dist = (bits[:, None, :] != bits[None, :, :]).sum(axis=2)
    assert dist.max() <= 2 * h
    assert dist.max() == 2 * h  # the bound is attained by some pair: the accounting is tight
    assert dist.max() * eps <= rappor.report_epsilon(eps, h) + 1e-12


# ---------------------------------------------------------------------------------------------
# permanent response and noisy sampling: marginals
# ---------------------------------------------------------------------------------------------

def test_permanent_response_marginals():
    r = rng(11)
    bits = r.random((2000, 100)) < 0.3
    eps_alpha = 1.0
    alpha = rappor.alpha_from_eps(eps_alpha)
    out = rappor.permanent_response(bits, eps_alpha, r)
    assert out.shape == bits.shape and out.dtype == bool
    for b in (True, False):  # keep probability alpha for ones and for zeros (a flip-with-alpha bug fails)
        kept = int((out[bits == b] == b).sum())
        assert stats.binomtest(kept, int((bits == b).sum()), alpha).pvalue > P_MIN
    # flips independent across positions: per-column flip counts homogeneous (a per-row draw fails)
    flips = (out != bits).sum(axis=0)
    assert stats.chisquare(flips).pvalue > P_MIN
    # rows differ: a per-column (shared) draw would flip whole columns at once
    assert stats.binomtest(int((out != bits)[:, 0].sum()), 2000, 1 - alpha).pvalue > P_MIN


def test_permanent_response_reproducible_and_secure_default():
    bits = np.ones((50, 8), dtype=int)
    a = rappor.permanent_response(bits, 1.0, rng(5))
    b = rappor.permanent_response(bits, 1.0, rng(5))
    np.testing.assert_array_equal(a, b)
    c = rappor.permanent_response(bits, 1.0)  # secure source
    assert c.shape == (50, 8) and c.dtype == bool
    with pytest.raises(ValueError, match="bits"):
        rappor.permanent_response(np.array([[0, 2]]), 1.0)
    with pytest.raises(ValueError, match="eps_alpha"):
        rappor.permanent_response(bits, -1.0)


@pytest.mark.parametrize("k", [1, 6])
def test_noisy_sampling_counts_are_binomial(k):
    r = rng(20 + k)
    perm = r.random((400, 100)) < 0.5
    eps_beta = 0.5
    beta = rappor.alpha_from_eps(eps_beta)
    counts = rappor.noisy_sampling(perm, eps_beta, k, r)
    assert counts.shape == perm.shape and counts.dtype == np.int64
    assert counts.min() >= 0 and counts.max() <= k
    for b, p in ((True, beta), (False, 1 - beta)):
        c = counts[perm == b]
        observed = np.bincount(c, minlength=k + 1)
        expected = stats.binom.pmf(np.arange(k + 1), k, p) * c.size
        # the same draw repeated k times (counts only 0 or k) or beta swapped fails this
        if k == 1:
            assert stats.binomtest(int(observed[1]), c.size, p).pvalue > P_MIN
        else:
            assert stats.chisquare(observed, expected).pvalue > P_MIN


def test_one_noisy_sample_is_rr_at_eps_ns_1():
    # original bit -> permanent -> one instantaneous report is a binary RR at eps_ns(1)
    r = rng(3)
    bits = np.zeros((100000, 2), dtype=bool)
    bits[:, 0] = True
    reports = rappor.noisy_sampling(rappor.permanent_response(bits, 1.0, r), 0.5, 1, r)
    keep = rappor.alpha_from_eps(rappor.eps_ns(1, 1.0, 0.5))
    assert stats.binomtest(int(reports[:, 0].sum()), 100000, keep).pvalue > P_MIN
    assert stats.binomtest(int((reports[:, 1] == 0).sum()), 100000, keep).pvalue > P_MIN


def test_noisy_sampling_validation():
    with pytest.raises(ValueError, match="k"):
        rappor.noisy_sampling(np.ones(3, bool), 0.5, 0)
    with pytest.raises(ValueError, match="eps_beta"):
        rappor.noisy_sampling(np.ones(3, bool), float("inf"), 2)
    with pytest.raises(ValueError, match="counts"):
        rappor.estimate_noisy_sampling(np.array([[0, 5]]), 4, 0.7, 0.6)
    with pytest.raises(ValueError, match="alpha"):
        rappor.estimate_noisy_sampling(np.array([[0, 1]]), 4, 0.5, 0.6)
    with pytest.raises(ValueError, match="beta"):
        rappor.noisy_sampling_variance(3, 0.7, 1.0, 10)
    with pytest.raises(ValueError, match="n"):
        rappor.noisy_sampling_variance(3, 0.7, 0.6, 0)


# ---------------------------------------------------------------------------------------------
# variances: Monte Carlo checks of Eq. 68 and Eq. 67, and the Fig. 1b comparison
# ---------------------------------------------------------------------------------------------

N_USERS, REPS = 200, 2000  # each column of an (N_USERS, REPS) array is one repetition
VAR_TOL = 4 * math.sqrt(2 / (REPS - 1))  # relative SE of a sample variance (near-normal estimates)


def _population():
    bits = np.zeros((N_USERS, REPS), dtype=bool)
    bits[: int(0.6 * N_USERS)] = True  # the paper's 60 % ones, the same fixed population in every column
    return bits


@pytest.mark.parametrize("k", [1, 8])
def test_noisy_sampling_estimate_is_unbiased_with_eq68_variance(k):
    eps_alpha, eps_beta = 1.0, 0.5
    alpha, beta = rappor.alpha_from_eps(eps_alpha), rappor.alpha_from_eps(eps_beta)
    r = rng(100 + k)
    bits = _population()
    counts = rappor.noisy_sampling(rappor.permanent_response(bits, eps_alpha, r), eps_beta, k, r)
    est = rappor.estimate_noisy_sampling(counts, k, alpha, beta)  # one estimate per column
    assert est.shape == (REPS,)
    var = rappor.noisy_sampling_variance(k, alpha, beta, N_USERS)
    # unbiased: the mean of REPS estimates within 4 standard errors of 0.6
    assert abs(est.mean() - 0.6) < 4 * math.sqrt(var / REPS)
    # Eq. 68 (dropping either term, or the 1/K, moves the variance by > 20 %; tolerance is 12.7 %)
    assert abs(est.var(ddof=1) / var - 1) < VAR_TOL


def test_gradual_release_step_k_has_eq67_variance():
    eps_alpha, eps_beta, K = 1.0, 0.5, 10
    path = rappor.eps_ns(np.arange(1, K + 1), eps_alpha, eps_beta)
    r = rng(7)
    bits = _population()
    out = rappor.gradual_release(bits, path, r)
    assert out.shape == (N_USERS, REPS, K) and out.dtype == bool
    for step in (0, 4, K - 1):
        eps = path[step]
        p = rappor.alpha_from_eps(eps)
        est = (out[:, :, step].mean(axis=0) - (1 - p)) / (2 * p - 1)  # Eq. 6 per column
        var = rappor.relaxation_variance(eps, N_USERS)
        assert abs(est.mean() - 0.6) < 4 * math.sqrt(var / REPS)
        # a chain whose step-K output were not an eps_K RR (e.g. stuck at the first step) fails
        assert abs(est.var(ddof=1) / var - 1) < VAR_TOL
    # and it beats noisy sampling with the same privacy (Fig. 1b): at K = 10 by a wide margin
    alpha, beta = rappor.alpha_from_eps(eps_alpha), rappor.alpha_from_eps(eps_beta)
    ns = rappor.noisy_sampling_variance(K, alpha, beta, N_USERS)
    assert rappor.relaxation_variance(path[-1], N_USERS) < 0.6 * ns


def test_gradual_release_marginals_per_step():
    r = rng(8)
    bits = r.random((1000, 50)) < 0.5
    path = [0.2, 0.7, 1.5]
    out = rappor.gradual_release(bits, path, r)
    for i, eps in enumerate(path):
        kept = int((out[..., i] == bits).sum())
        assert stats.binomtest(kept, bits.size, rappor.alpha_from_eps(eps)).pvalue > P_MIN
    with pytest.raises(ValueError, match="increasing"):
        rappor.gradual_release(bits, [0.5, 0.5])


@pytest.mark.parametrize("eps_alpha", [0.3, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("eps_beta", [0.1, 0.25, 0.5, 1.0, 2.0])
def test_relaxation_variance_never_above_noisy_sampling(eps_alpha, eps_beta):
    ks = np.arange(1, 51)
    path = rappor.eps_ns(ks, eps_alpha, eps_beta)
    alpha, beta = rappor.alpha_from_eps(eps_alpha), rappor.alpha_from_eps(eps_beta)
    ns = rappor.noisy_sampling_variance(ks, alpha, beta, 1)
    rel = rappor.relaxation_variance(path, 1)
    # K = 1: one noisy sample of a permanent RR *is* an RR at eps_ns(1); the two variances coincide
    assert rel[0] == pytest.approx(ns[0], rel=1e-10)
    # K >= 2: gradual release is strictly better (paper Fig. 1b)
    assert np.all(rel[1:] < ns[1:] * (1 - 1e-9))
    # both approach the same floor from above, alpha(1-alpha)/(1-2alpha)^2 = Var at eps_alpha (Eq. 67)
    floor = rappor.relaxation_variance(eps_alpha, 1)
    assert floor == pytest.approx(alpha * (1 - alpha) / (1 - 2 * alpha) ** 2, rel=1e-12)
    assert np.all(ns > floor) and np.all(rel >= floor * (1 - 1e-12))
    if 50 * eps_beta >= 25:
        assert rel[-1] == pytest.approx(floor, rel=1e-9)


def test_relaxation_variance_formula_and_validation():
    for eps in (0.01, 0.5, 1.0, 5.0):
        E = math.exp(eps)
        assert rappor.relaxation_variance(eps, 10) == pytest.approx(E / (10 * (E - 1) ** 2), rel=1e-12)
    assert np.isfinite(rappor.relaxation_variance(700.0, 1)) and rappor.relaxation_variance(700.0, 1) > 0
    with pytest.raises(ValueError, match="eps"):
        rappor.relaxation_variance(0.0, 10)
    with pytest.raises(ValueError, match="n"):
        rappor.relaxation_variance(1.0, 0)


# ---------------------------------------------------------------------------------------------
# decoding
# ---------------------------------------------------------------------------------------------

def test_bit_frequencies_unbiased_and_heterogeneous_eps():
    r = rng(9)
    n, C, B = 60000, 3, 4
    cohorts = np.arange(n) % C
    truth = np.array([[0.1, 0.5, 0.9, 0.0], [0.3, 0.3, 0.3, 0.3], [1.0, 0.0, 0.2, 0.7]])
    bits = r.random((n, B)) < truth[cohorts]
    true_share = np.array([bits[cohorts == c].mean(axis=0) for c in range(C)])
    eps = np.where(np.arange(n) < n // 2, 0.5, 2.0)  # two epsilons, interleaved over the cohorts
    reports = np.empty_like(bits)
    for e in (0.5, 2.0):
        rows = eps == e
        reports[rows] = rappor.permanent_response(bits[rows], e, r)
    got = rappor.bit_frequencies(reports, cohorts, eps, C)
    assert got.shape == (C, B)
    # SD of the weighted mean: m reports at each eps per cohort, weight g^2 (g = p - q = tanh(eps/2)),
    # Var(z) = pq / g^2 = (1 - g^2) / (4 g^2)
    m = n / C / 2
    g2 = np.tanh(np.array([0.5, 2.0]) / 2) ** 2
    sd = math.sqrt(m * np.sum(g2**2 * (1 - g2) / (4 * g2)) / (m * g2.sum()) ** 2)
    assert np.max(np.abs(got - true_share)) < 4.5 * sd  # a wrong debias (e.g. q for p) is off by >> sd
    # a scalar eps on reports generated at that eps
    rep1 = rappor.permanent_response(bits, 1.0, r)
    got1 = rappor.bit_frequencies(rep1, cohorts, 1.0, C)
    sd1 = math.sqrt(rappor.relaxation_variance(1.0, n // C))
    assert np.max(np.abs(got1 - true_share)) < 4.5 * sd1


def test_bit_frequencies_empty_cohort_and_validation():
    reports = np.array([[1, 0], [0, 1]], dtype=bool)
    got = rappor.bit_frequencies(reports, [0, 0], 1.0, 3)
    assert np.all(got[1:] == 0)
    with pytest.raises(ValueError, match="cohorts"):
        rappor.bit_frequencies(reports, [0, 3], 1.0, 3)
    with pytest.raises(ValueError, match="cohorts"):
        rappor.bit_frequencies(reports, [0], 1.0, 3)
    with pytest.raises(ValueError, match="eps"):
        rappor.bit_frequencies(reports, [0, 1], 0.0, 3)
    with pytest.raises(ValueError, match="eps"):
        rappor.bit_frequencies(reports, [0, 1], [1.0, 1.0, 1.0], 3)
    with pytest.raises(ValueError, match="reports"):
        rappor.bit_frequencies(np.ones(3, bool), [0, 1, 2], 1.0, 3)


NUM_BITS, NUM_HASHES, NUM_COHORTS, N_POP = 64, 2, 8, 20000
FREQUENT = [f"https://site-{i}.example/" for i in range(5)]
FREQ_SHARES = 0.25 / np.arange(1, 6)  # Zipf-like: 0.25, 0.125, 0.083, 0.0625, 0.05 (sum 0.571)
DECOYS = [f"decoy-{i}" for i in range(40)]


def _population_strings(r, with_rare=True):
    n_freq = np.round(FREQ_SHARES * N_POP).astype(int)
    strings = [s for s, c in zip(FREQUENT, n_freq) for _ in range(c)]
    rest = N_POP - len(strings)
    if with_rare:  # 3000 rare strings, each held by a few users
        strings += [f"rare-{i}" for i in r.integers(0, 3000, rest)]
        true = n_freq / N_POP
    else:  # fill with the frequent strings in proportion
        extra = r.choice(len(FREQUENT), rest, p=FREQ_SHARES / FREQ_SHARES.sum())
        strings += [FREQUENT[i] for i in extra]
        true = (n_freq + np.bincount(extra, minlength=5)) / N_POP
    strings = np.array(strings, dtype=object)[r.permutation(N_POP)]
    cohorts = r.integers(0, NUM_COHORTS, N_POP)
    return list(strings), cohorts, true


@pytest.mark.parametrize("with_rare", [True, False])
def test_decode_finds_frequent_strings_and_ignores_decoys(with_rare):
    r = rng(2024 + with_rare)
    strings, cohorts, true = _population_strings(r, with_rare)
    bits = rappor.bloom_bits(strings, cohorts, NUM_BITS, NUM_HASHES)
    eps_path = rappor.eps_ns(np.arange(1, 4), math.log(3), 1.5)  # report after 3 relaxations
    reports = rappor.gradual_release(bits, eps_path, r)[:, :, -1]
    freqs = rappor.bit_frequencies(reports, cohorts, eps_path[-1], NUM_COHORTS)
    sizes = np.bincount(cohorts, minlength=NUM_COHORTS)
    candidates = DECOYS[:20] + FREQUENT + DECOYS[20:]
    fit = rappor.decode_fit(freqs, sizes, candidates, NUM_BITS, NUM_HASHES)
    est = fit.frequencies
    assert est.shape == (len(candidates),) and np.all(est >= 0)
    np.testing.assert_array_equal(rappor.decode(freqs, sizes, candidates, NUM_BITS, NUM_HASHES), est)
    true_idx = np.arange(20, 25)
    # the true strings are ranked on top, the well-separated head in Zipf order
    assert set(np.argsort(est)[::-1][:5]) == set(true_idx)
    np.testing.assert_array_equal(np.argsort(est[true_idx])[::-1][:3], np.arange(3))
    # their frequencies are recovered (bit-share noise sd ~ 0.018 per row, 16 rows per string, so
    # ~0.005 per string; observed over other seeds: at most 0.012)
    np.testing.assert_allclose(est[true_idx], true, atol=0.02)
    # decoys: each far below the rarest true string (0.05), and little in total: NNLS keeps the
    # positive part of the noise, ~0.4 sd = 0.002 per decoy; without the background column the
    # rare strings' 0.43 leaks into the decoys (~0.25 in total) and this fails
    decoys = np.delete(est, true_idx)
    assert decoys.max() < 0.025 and decoys.sum() < 0.15
    # the background column takes the rare strings' mass (0.43; what it misses went to decoys), or
    # ~0 without rare strings
    assert fit.background == pytest.approx(1 - true.sum(), abs=0.1)
    # (over seeds 2024..2043 this sum is 0.02 to 0.08 above 1 - true.sum(): the decoys' positive noise)
    assert fit.background + decoys.sum() == pytest.approx(1 - true.sum(), abs=0.1)
    if with_rare:  # the background column is what keeps the decoys clean
        plain = rappor.decode(freqs, sizes, candidates, NUM_BITS, NUM_HASHES, background=False)
        assert np.delete(plain, true_idx).sum() > 0.15


def test_decode_exact_on_noise_free_bit_shares():
    # noise-free input: the expected bit shares of a known mixture are fitted exactly
    candidates = ["a", "b", "c", "d"]
    f = np.array([0.5, 0.0, 0.3, 0.2])
    P = rappor.candidate_patterns(candidates, 4, 32, 2).astype(float)  # (C, S, B)
    shares = np.einsum("s,csb->cb", f, P)
    got = rappor.decode(shares, [10, 20, 30, 40], candidates, 32, 2, background=False)
    np.testing.assert_allclose(got, f, atol=1e-10)
    got_bg = rappor.decode_fit(shares + 0.1 * (1 - (1 - 1 / 32) ** 2), [10, 20, 30, 40], candidates, 32, 2)
    np.testing.assert_allclose(got_bg.frequencies, f, atol=1e-10)
    assert got_bg.background == pytest.approx(0.1)


def test_decode_validation():
    shares = np.zeros((2, 8))
    with pytest.raises(ValueError, match="bit_freqs"):
        rappor.decode(np.zeros((2, 7)), [1, 1], ["a"], 8, 1)
    with pytest.raises(ValueError, match="cohort_sizes"):
        rappor.decode(shares, [1, 1, 1], ["a"], 8, 1)
    with pytest.raises(ValueError, match="cohort_sizes"):
        rappor.decode(shares, [0, 0], ["a"], 8, 1)
    with pytest.raises(ValueError, match="candidates"):
        rappor.decode(shares, [1, 1], [], 8, 1)
    with pytest.raises(ValueError, match="finite"):
        rappor.decode(np.full((2, 8), np.nan), [1, 1], ["a"], 8, 1)
