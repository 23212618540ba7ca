"""Privacy audit by inference (docs/mechanisms-reference.md#privacy-audit-by-inference, paper Sec. 6 / Theorem 6.1).

Exact tests enumerate every chain of small domains; statistical tests use fixed seeds and 4-standard-
error bands, and the comment beside each names the bug it would catch.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from mechanisms import audit, chain, rr_matrix, step_matrix
from mechanisms.rappor import eps_ns
from mechanisms.rr import keep_probability

P_MIN = 1e-4


def rng(seed):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------
# the bound
# ---------------------------------------------------------------------------------------------

def test_bayes_error_bound_formula():
    for m in (2, 3, 10):
        for eps in (0.0, 0.1, 1.0, 5.0):
            E = math.exp(eps)
            assert audit.bayes_error_bound(eps, m) == pytest.approx(1 - E / (E + m - 1), rel=1e-13)
            assert audit.bayes_error_bound(eps, m) == pytest.approx(1 - keep_probability(eps, m), rel=1e-13)
        assert audit.bayes_error_bound(0.0, m) == pytest.approx((m - 1) / m)
    np.testing.assert_allclose(audit.bayes_error_bound([0.5, 2.0], 4),
                               [3 / (math.exp(0.5) + 3), 3 / (math.exp(2) + 3)])
    # the stable form keeps its relative accuracy where 1 - E/(E + m - 1) would round to 0
    assert audit.bayes_error_bound(700.0, 3) == pytest.approx(2 * math.exp(-700.0), rel=1e-12)
    assert audit.bayes_error_bound(50.0, 2) == pytest.approx(math.exp(-50.0), rel=1e-12)
    with pytest.raises(ValueError, match="eps"):
        audit.bayes_error_bound(-1.0, 2)
    with pytest.raises(ValueError, match="m"):
        audit.bayes_error_bound(1.0, 1)


# ---------------------------------------------------------------------------------------------
# chain likelihood: exact enumeration
# ---------------------------------------------------------------------------------------------

def _brute_force_probability(chain_, epsilons, m, a):
    p = rr_matrix(epsilons[0], m)[a, chain_[0]]
    for i in range(1, len(chain_)):
        p *= step_matrix(epsilons[i - 1], epsilons[i], m, a)[chain_[i - 1], chain_[i]]
    return p


@pytest.mark.parametrize("m, epsilons",
                         [(2, [0.2, 0.5, 1.0, 2.5]), (3, [0.0, 0.5, 1.2]), (4, [0.3, 0.4, 3.0])])
def test_chain_log_likelihood_matches_enumeration(m, epsilons):
    chains = np.array(list(itertools.product(range(m), repeat=len(epsilons))))
    ll = audit.chain_log_likelihood(chains, epsilons, m)
    assert ll.shape == (chains.shape[0], m)
    want = np.array([[_brute_force_probability(c, epsilons, m, a) for a in range(m)] for c in chains])
    np.testing.assert_allclose(np.exp(ll), want, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(np.exp(ll).sum(axis=0), 1.0, rtol=1e-12)  # a distribution for every a
    # Lemma 3.1: the likelihood ratio between any two values is that of the last output alone
    last = rr_matrix(epsilons[-1], m)[:, chains[:, -1]].T  # (n_chains, m): Pr(o_L | a)
    np.testing.assert_allclose(ll - ll[:, :1], np.log(last) - np.log(last[:, :1]), atol=1e-12)


def test_chain_log_likelihood_validation():
    with pytest.raises(ValueError, match="epsilons"):
        audit.chain_log_likelihood(np.zeros((2, 2), int), [0.5], 2)
    with pytest.raises(ValueError, match="increasing"):
        audit.chain_log_likelihood(np.zeros((2, 2), int), [0.5, 0.5], 2)
    with pytest.raises(ValueError, match="domain"):
        audit.chain_log_likelihood(np.array([[0, 3]]), [0.5, 1.0], 3)
    with pytest.raises(ValueError, match="chains"):
        audit.chain_log_likelihood(np.zeros(3, int), [0.5], 2)


# ---------------------------------------------------------------------------------------------
# attackers
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("m, epsilons", [(2, list(eps_ns(np.arange(1, 11), 1.0, 0.5))),
                                         (5, [0.0, 0.3, 0.6, 1.0]), (3, [0.05, 2.0, 4.0])])
def test_mle_equals_last_output(m, epsilons):
    # Lemma 3.1: Pr(chain | a) is proportional to Pr(o_L | a) in a, maximal only at a = o_L when eps_L > 0
    r = rng(31)
    x = r.integers(0, m, 5000)
    chains = chain(x, epsilons, m, r)
    np.testing.assert_array_equal(audit.attack_mle(chains, epsilons, m, r), audit.attack_last_output(chains))


def test_hf_and_whf_by_hand():
    chains = np.array([[0, 0, 1], [2, 1, 1], [1, 2, 2]])
    eps = [0.1, 0.2, 1.0]
    np.testing.assert_array_equal(audit.attack_highest_frequency(chains, 3, rng(0)), [0, 1, 2])
    np.testing.assert_array_equal(audit.attack_weighted_highest_frequency(chains, eps, 3, rng(0)), [1, 1, 2])
    np.testing.assert_array_equal(audit.attack_last_output(chains), [1, 1, 2])


def test_ties_are_broken_uniformly():
    # every row ties between its two values (HF), or among all m (MLE on a single eps = 0 output);
    # a tie-break that always takes the first maximum fails both tests
    r = rng(41)
    n = 20000
    chains = np.column_stack([np.zeros(n, int), np.full(n, 3)])
    hf = audit.attack_highest_frequency(chains, 4, r)
    assert set(np.unique(hf)) == {0, 3}
    assert stats.binomtest(int((hf == 3).sum()), n, 0.5).pvalue > P_MIN
    mle = audit.attack_mle(np.zeros((n, 1), int), [0.0], 5, r)
    assert stats.chisquare(np.bincount(mle, minlength=5)).pvalue > P_MIN
    # WHF: 0.1 + 0.2 vs 0.3 is a tie up to rounding
    whf = audit.attack_weighted_highest_frequency(np.tile([0, 0, 1], (n, 1)), [0.1, 0.2, 0.3], 2, r)
    assert stats.binomtest(int((whf == 1).sum()), n, 0.5).pvalue > P_MIN


def _exact_error_rates(epsilons, m):
    """Exact error rates of LO, HF and WHF under a uniform prior, by enumerating every chain."""
    chains = np.array(list(itertools.product(range(m), repeat=len(epsilons))))
    prob = np.exp(audit.chain_log_likelihood(chains, epsilons, m))  # (n_chains, m)
    counts = np.stack([(chains == a).sum(1) for a in range(m)], 1).astype(float)
    weighted = np.stack([(chains == a) @ np.asarray(epsilons) for a in range(m)], 1)
    rates = {}
    for name, scores in (("last_output", np.eye(m)[chains[:, -1]]),
                         ("highest_frequency", counts), ("weighted_highest_frequency", weighted)):
        top = scores >= scores.max(axis=1, keepdims=True) - 1e-12
        guess_prob = top / top.sum(axis=1, keepdims=True)  # uniform tie-break
        correct = (prob * guess_prob).sum() / m
        rates[name] = 1 - correct
    return rates


@pytest.mark.parametrize("m, epsilons", [(2, list(eps_ns(np.arange(1, 11), 1.0, 0.5))),
                                         (5, [round(0.1 * i, 1) for i in range(1, 11)])])
def test_attackers_against_the_bound_on_relaxation_chains(m, epsilons):
    # the paper's two experiments: binary on the path eps_ns(1..10) (eps_alpha = 1, eps_beta = 0.5),
    # categorical m = 5 on 0.1 .. 1.0
    r = rng(50 + m)
    x = r.integers(0, m, 60000)
    chains = chain(x, epsilons, m, r)
    res = audit.run_attacks(x, chains, epsilons, m, r)
    bound = audit.bayes_error_bound(epsilons[-1], m)
    assert res["bound"] == bound and res["epsilon"] == epsilons[-1] and res["m"] == m
    assert res["n"] == m * np.bincount(x, minlength=m).min()
    assert not res["leak"]
    att = res["attackers"]
    for name in ("last_output", "mle"):  # optimal: on the bound (a bound at the wrong eps fails)
        assert abs(att[name]["error_rate"] - bound) < 4 * att[name]["standard_error"]
        assert not att[name]["below_bound"]
    for name in ("highest_frequency", "weighted_highest_frequency"):  # never below it
        assert att[name]["error_rate"] > bound - 4 * att[name]["standard_error"]
        assert not att[name]["below_bound"]
    # exact error rates by enumeration (m = 2: all 1024 chains); HF and WHF are strictly worse
    if m == 2:
        exact = _exact_error_rates(epsilons, m)
        assert exact["last_output"] == pytest.approx(bound, rel=1e-10)
        assert exact["highest_frequency"] > exact["weighted_highest_frequency"] > bound + 0.005
        for name, rate in exact.items():  # the Monte Carlo attackers hit their exact error rates
            assert abs(att[name]["error_rate"] - rate) < 4 * att[name]["standard_error"]
    else:
        assert att["highest_frequency"]["error_rate"] > bound + 4 * att["highest_frequency"]["standard_error"]


def test_exact_hf_and_whf_for_categorical_chain():
    eps = [0.2, 0.6, 1.0, 1.5, 2.0]
    exact = _exact_error_rates(eps, 3)
    bound = audit.bayes_error_bound(eps[-1], 3)
    assert exact["last_output"] == pytest.approx(bound, rel=1e-10)
    assert exact["highest_frequency"] > bound and exact["weighted_highest_frequency"] > bound
    r = rng(77)
    x = r.integers(0, 3, 60000)
    ch = chain(x, eps, 3, r)
    guesses = {"highest_frequency": audit.attack_highest_frequency(ch, 3, r),
               "weighted_highest_frequency": audit.attack_weighted_highest_frequency(ch, eps, 3, r)}
    for name, g in guesses.items():
        rate, se = audit.error_rate(g, x)
        assert abs(rate - exact[name]) < 4 * se


# ---------------------------------------------------------------------------------------------
# planted leaks
# ---------------------------------------------------------------------------------------------

def test_flags_chain_that_repeats_the_true_value():
    r = rng(61)
    m, eps = 3, [0.2, 0.5, 1.0]
    x = r.integers(0, m, 6000)
    noise = r.integers(0, m, (6000, 3))
    chains = np.where(r.random((6000, 3)) < 0.9, x[:, None], noise)  # ~93 % the truth at every step
    res = audit.run_attacks(x, chains, eps, m, r)
    assert res["leak"]
    assert all(a["below_bound"] for a in res["attackers"].values())
    assert res["attackers"]["last_output"]["z"] < -4


def test_flags_exact_last_output():
    r = rng(62)
    x = r.integers(0, 2, 2000)
    eps = [0.5, 1.0]
    chains = chain(x, eps, 2, r)
    chains[:, -1] = x
    res = audit.run_attacks(x, chains, eps, 2, r)
    assert res["attackers"]["last_output"]["error_rate"] == 0.0
    assert res["attackers"]["last_output"]["below_bound"] and res["leak"]


def test_flags_leak_in_an_early_output_that_lo_misses():
    # a chain whose *first* output is the raw value: LO sits on the bound, HF sees the leak
    r = rng(63)
    m, eps = 2, [0.3, 0.8]
    x = r.integers(0, m, 20000)
    chains = chain(x, eps, m, r)
    chains[:, 0] = x
    res = audit.run_attacks(x, chains, eps, m, r)
    assert not res["attackers"]["last_output"]["below_bound"]
    assert res["attackers"]["highest_frequency"]["below_bound"]
    assert res["leak"]


def test_small_sample_without_errors_is_not_a_false_alarm():
    # 3 users per value, all guessed right by luck: the null SE (not the plug-in 0) governs the flag
    x = np.array([0, 1, 0, 1, 0, 1])
    chains = np.column_stack([x, x])
    res = audit.run_attacks(x, chains, [0.5, 1.0], 2, rng(0))
    assert res["attackers"]["last_output"]["error_rate"] == 0.0
    assert res["attackers"]["last_output"]["standard_error"] == 0.0
    assert not res["leak"]


def test_run_attacks_validation_and_no_subsample():
    x = np.array([0, 0, 1])
    ch = np.array([[0, 0], [0, 1], [1, 1]])
    with pytest.raises(ValueError, match="value 2 does not"):
        audit.run_attacks(x, ch, [0.5, 1.0], 3)
    with pytest.raises(ValueError, match="rows"):
        audit.run_attacks(x[:2], ch, [0.5, 1.0], 2)
    with pytest.raises(ValueError, match="epsilons"):
        audit.run_attacks(x, ch, [0.5, 1.0, 2.0], 2)
    res = audit.run_attacks(x, ch, [0.5, 1.0], 2, rng(1), subsample=False)
    assert res["n"] == 3
    assert set(res["attackers"]) == set(audit.ATTACKERS)
    assert set(res["attackers"]["mle"]) == {"error_rate", "standard_error", "z", "p_value", "below_bound"}


# ---------------------------------------------------------------------------------------------
# error rate and uniform-prior subsample
# ---------------------------------------------------------------------------------------------

def test_error_rate():
    rate, se = audit.error_rate([0, 1, 1, 0], [0, 1, 0, 0])
    assert rate == 0.25 and se == pytest.approx(math.sqrt(0.25 * 0.75 / 4))
    with pytest.raises(ValueError, match="empty"):
        audit.error_rate([], [])
    with pytest.raises(ValueError, match="equal length"):
        audit.error_rate([0, 1], [0])


def test_uniform_prior_subsample_counts_and_uniformity():
    values = np.array([0] * 50 + [1] * 20 + [2] * 30)
    idx = audit.uniform_prior_subsample(values, 3, rng(3))
    assert np.all(np.diff(idx) > 0) and idx.min() >= 0 and idx.max() < values.size
    np.testing.assert_array_equal(np.bincount(values[idx], minlength=3), [20, 20, 20])
    assert np.all(np.isin(np.flatnonzero(values == 1), idx))  # the rarest value is kept whole
    # each of the 50 zeros is kept with probability 20/50: selection counts over 2000 draws are
    # homogeneous (a "first c of each value" subsample fails)
    r = rng(4)
    hits = np.zeros(values.size)
    for _ in range(2000):
        hits[audit.uniform_prior_subsample(values, 3, r)] += 1
    assert stats.chisquare(hits[:50]).pvalue > P_MIN
    assert stats.chisquare(hits[70:]).pvalue > P_MIN
    assert np.all(hits[50:70] == 2000)
    # a value that never occurs: nothing can be uniform
    assert audit.uniform_prior_subsample([0, 0, 1], 3, rng(5)).size == 0
    with pytest.raises(ValueError, match="domain"):
        audit.uniform_prior_subsample([0, 3], 3)
