"""Privacy audit by inference, docs/mechanisms-reference.md#privacy-audit-by-inference (paper Sec. 6, Theorem 6.1).

With X uniform on 0..m-1 and Y an eps-LDP k-RR of X, no attacker guesses X from Y with error below

    bound(eps, m) = 1 - E/(E + m - 1) = (m - 1) e^-eps / (1 + (m - 1) e^-eps)

(the Bayes error under the uniform prior).  A relaxation chain o_1..o_L at eps_1 < ... < eps_L is
eps_L-LDP and, by Lemma 3.1, ``Pr(o_<=L | a) ∝ Pr(o_L | a)`` in a; so the whole-chain maximum
likelihood guess (MLE) equals the last output (LO) whenever eps_L > 0, and both attain the bound.
Highest Frequency (HF: the most frequent value in the chain) and Weighted Highest Frequency (WHF:
each output weighted by its epsilon) are suboptimal: their error sits at or above the bound.

An audit runs the four attackers on stored chains of a uniform-prior subsample (equal numbers of
every value) and flags an attacker whose error rate is significantly *below* the bound: a one-sided
exact binomial test of H0 "error rate >= bound" at level Phi(-4) ~ 3.2e-5, the "4 standard errors"
rule with the standard error taken under H0 (so that a small sample with no errors is not a false alarm).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import binom, norm

from ._validation import check_eps_array, check_increasing, check_m, check_values
from .random import uniform_below, words
from .relaxation import StepTerms, step_terms
from .rr import flip_probability, keep_probability

#: One-sided level of the leak flag: the normal tail beyond 4 standard errors.
LEAK_LEVEL = float(norm.cdf(-4.0))

#: Attacker names, in the order :func:`run_attacks` reports them.
ATTACKERS = ("last_output", "mle", "highest_frequency", "weighted_highest_frequency")


def bayes_error_bound(eps, m):
    """Theorem 6.1: ``1 - E/(E + m - 1)`` in the overflow-free form ``(m-1)e^-eps / (1 + (m-1)e^-eps)``."""
    m = check_m(m)
    e = check_eps_array(eps, "eps")
    z = (m - 1) * np.exp(-e)
    out = z / (1.0 + z)
    return float(out) if out.ndim == 0 else out


def _check_chains(chains, m: int) -> np.ndarray:
    arr = np.asarray(chains)
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise ValueError(f"chains must be an (n, L) array with L >= 1, got shape {arr.shape}")
    return check_values(arr.reshape(-1), m, "chains").reshape(arr.shape)


def _check_chains_eps(chains, epsilons, m) -> tuple[np.ndarray, np.ndarray, int]:
    m = check_m(m)
    eps = check_increasing(epsilons, "epsilons")
    o = _check_chains(chains, m)
    if o.shape[1] != eps.shape[0]:
        raise ValueError(f"chains have {o.shape[1]} outputs per row but epsilons has {eps.shape[0]} entries")
    return o, eps, m


def _log(p: float) -> float:
    return math.log(p) if p > 0.0 else -math.inf


def _step_terms(e1: float, e2: float, m: int) -> StepTerms:
    """``step_terms``, or the identity where two epsilons are equal as floats (distinct Decimals such as 0.1
    and 0.10000000000000000001 pass ``check_increasing``): the limit of the step as eps2 -> eps1."""
    if e2 == e1:
        return StepTerms(p_aa=1.0, p_ba=0.0, p_bb=1.0, r_a=0.0, r_b=0.0)
    return step_terms(e1, e2, m)


def chain_log_likelihood(chains, epsilons, m) -> np.ndarray:
    """``L[i, a] = log Pr(o_1..o_L = chains[i] | X = a)``, an (n, m) array.

    ``Pr = rr(eps_1)[a, o_1] * prod_i T_i[o_{i-1}, o_i]`` with the step kernels of
    docs/mechanisms-reference.md#gradual-release-of-randomized-response: from o_{i-1} = a: p_aa to a, r_a elsewhere;
    from o_{i-1} = b != a: p_ba to a, p_bb to b, r_b elsewhere.  Zero probabilities give -inf.  Loops over a and over
    steps only.
    """
    o, eps, m = _check_chains_eps(chains, epsilons, m)
    n, L = o.shape
    out = np.empty((n, m))
    log_keep, log_flip = _log(keep_probability(eps[0], m)), _log(flip_probability(eps[0], m))
    steps = [_step_terms(eps[i - 1], eps[i], m) for i in range(1, L)]
    logs = [tuple(_log(p) for p in (t.p_aa, t.r_a, t.p_ba, t.p_bb, t.r_b)) for t in steps]
    stay = o[:, 1:] == o[:, :-1]  # (n, L-1): o_i == o_{i-1}
    for a in range(m):
        at = o == a
        ll = np.where(at[:, 0], log_keep, log_flip)
        for i, (l_aa, l_ra, l_ba, l_bb, l_rb) in enumerate(logs):
            prev, cur = at[:, i], at[:, i + 1]
            from_a = np.where(cur, l_aa, l_ra)
            from_b = np.where(cur, l_ba, np.where(stay[:, i], l_bb, l_rb))
            ll = ll + np.where(prev, from_a, from_b)
        out[:, a] = ll
    return out


def _argmax_random(scores: np.ndarray, rng, rel_tol: float = 0.0) -> np.ndarray:
    """Row-wise argmax; ties (within ``rel_tol * (1 + |max|)``) broken uniformly at random."""
    top = scores.max(axis=1)
    finite = np.isfinite(top)
    tol = np.zeros_like(top)
    tol[finite] = rel_tol * (1.0 + np.abs(top[finite]))
    tied = scores >= (top - tol)[:, None]  # an all -inf row ties everywhere
    count = tied.sum(axis=1)
    out = tied.argmax(axis=1)
    multi = np.flatnonzero(count > 1)
    if multi.size:
        pick = uniform_below(rng, count[multi], multi.size)
        out[multi] = (np.cumsum(tied[multi], axis=1) > pick[:, None]).argmax(axis=1)
    return out.astype(np.int64)


def attack_last_output(chains) -> np.ndarray:
    """LO: guess the last output of each chain."""
    arr = np.asarray(chains)
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise ValueError(f"chains must be an (n, L) array with L >= 1, got shape {arr.shape}")
    integral = np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool
    if arr.size and (not integral or arr.min() < 0):
        raise ValueError("chains must hold non-negative integer values")
    return arr[:, -1].astype(np.int64)


def attack_mle(chains, epsilons, m, rng=None) -> np.ndarray:
    """MLE: the value maximizing the whole chain's likelihood; near-ties (1e-9 relative) broken at random."""
    return _argmax_random(chain_log_likelihood(chains, epsilons, m), rng, rel_tol=1e-9)


def _value_scores(o: np.ndarray, m: int, weights: np.ndarray) -> np.ndarray:
    scores = np.empty((o.shape[0], m))
    for a in range(m):
        scores[:, a] = (o == a) @ weights
    return scores


def attack_highest_frequency(chains, m, rng=None) -> np.ndarray:
    """HF: the value occurring most often in the chain; ties broken uniformly at random."""
    m = check_m(m)
    o = _check_chains(chains, m)
    return _argmax_random(_value_scores(o, m, np.ones(o.shape[1])), rng)


def attack_weighted_highest_frequency(chains, epsilons, m, rng=None) -> np.ndarray:
    """WHF: the value with the largest sum of its outputs' epsilons; near-ties broken at random."""
    o, eps, m = _check_chains_eps(chains, epsilons, m)
    return _argmax_random(_value_scores(o, m, eps), rng, rel_tol=1e-12)


def error_rate(guesses, truth) -> tuple[float, float]:
    """``(rate, standard_error)``: share of wrong guesses and its plug-in SE ``sqrt(rate(1-rate)/n)``."""
    g, t = np.asarray(guesses), np.asarray(truth)
    if g.ndim != 1 or t.shape != g.shape:
        raise ValueError(
            f"guesses and truth must be one-dimensional of equal length, got {g.shape} and {t.shape}"
        )
    if g.size == 0:
        raise ValueError("guesses must not be empty")
    rate = float(np.mean(g != t))
    return rate, math.sqrt(rate * (1.0 - rate) / g.size)


def uniform_prior_subsample(values, m, rng=None) -> np.ndarray:
    """Indices of a random subsample with exactly ``c = min_a count(a)`` entries of every value a.

    Within each value, a uniformly random subset (ranks of random 64-bit keys).  Sorted indices.
    """
    m = check_m(m)
    x = check_values(values, m)
    counts = np.bincount(x, minlength=m)
    c = int(counts.min())
    if c == 0:
        return np.zeros(0, dtype=np.int64)
    keys = words(rng, x.shape[0])
    order = np.lexsort((keys, x))  # grouped by value, random order within each value
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rank = np.arange(x.shape[0]) - starts[x[order]]
    return np.sort(order[rank < c])


def run_attacks(values, chains, epsilons, m, rng=None, *, subsample: bool = True) -> dict:
    """Audit stored chains: the four attackers' error rates against the Theorem 6.1 bound at eps_L.

    With ``subsample`` (default) the chains of a uniform-prior subsample are attacked
    (:func:`uniform_prior_subsample`); every value 0..m-1 must then occur.  Returns::

        {"n", "m", "epsilon", "bound", "leak",
         "attackers": {name: {"error_rate", "standard_error", "z", "p_value", "below_bound"}}}

    ``z = (rate - bound)/sqrt(bound (1 - bound)/n)``; ``p_value`` = exact binomial Pr(errors <= observed)
    at the bound; ``below_bound`` when ``p_value < LEAK_LEVEL`` (the error rate is more than ~4 standard
    errors below the bound: the chains leak more than eps_L allows).  ``leak`` is any attacker's flag.
    """
    o, eps, m = _check_chains_eps(chains, epsilons, m)
    x = check_values(values, m)
    if x.shape[0] != o.shape[0]:
        raise ValueError(f"values has {x.shape[0]} entries but chains has {o.shape[0]} rows")
    if subsample:
        missing = np.flatnonzero(np.bincount(x, minlength=m) == 0)
        if missing.size:
            raise ValueError(
                f"a uniform-prior audit needs every value 0..{m - 1} to occur; "
                f"value {int(missing[0])} does not"
            )
        idx = uniform_prior_subsample(x, m, rng)
        x, o = x[idx], o[idx]
    n = x.shape[0]
    if n == 0:
        raise ValueError("no chains to audit")
    bound = bayes_error_bound(eps[-1], m)
    guesses = {
        "last_output": attack_last_output(o),
        "mle": attack_mle(o, epsilons, m, rng),  # as given: the exact order check_increasing checked
        "highest_frequency": attack_highest_frequency(o, m, rng),
        "weighted_highest_frequency": attack_weighted_highest_frequency(o, epsilons, m, rng),
    }
    null_se = math.sqrt(bound * (1.0 - bound) / n)
    report = {}
    for name in ATTACKERS:
        rate, se = error_rate(guesses[name], x)
        errors = int(round(rate * n))
        p_value = float(binom.cdf(errors, n, bound))
        report[name] = {
            "error_rate": rate,
            "standard_error": se,
            "z": (rate - bound) / null_se if null_se > 0 else 0.0,
            "p_value": p_value,
            "below_bound": bool(p_value < LEAK_LEVEL),
        }
    return {
        "n": n,
        "m": m,
        "epsilon": float(eps[-1]),
        "bound": bound,
        "leak": any(r["below_bound"] for r in report.values()),
        "attackers": report,
    }
