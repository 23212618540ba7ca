"""OUE and OLH (docs/mechanisms-reference.md#oue-and-olh): exact levels at most the charge, unbiased estimates
whose Monte Carlo variance matches the closed forms, and agreement with pure-ldp's estimators.

Tolerances are four standard errors: of a mean over ``R`` runs, ``sqrt(var / R)``; of a sample variance
over ``R`` runs, about ``var sqrt(2 / (R - 1))``.
"""
from __future__ import annotations

import importlib
import math
import sys
import types
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import xxhash

from mechanisms import olh, oue
from mechanisms.exactness import krr_level

GRID = [Decimal("0.1") * k for k in range(1, 101)] + [Decimal(x) for x in ("0", "15", "20", "25.5", "30")]
SHARES = np.array([0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02, 0.0])


def _population(n: int) -> np.ndarray:
    counts = np.floor(SHARES * n).astype(int)
    counts[0] += n - counts.sum()
    return np.repeat(np.arange(SHARES.size), counts)


def _true_shares(x: np.ndarray) -> np.ndarray:
    return np.bincount(x, minlength=SHARES.size) / x.size


# ------------------------------------------------------------------------------------------- exact levels

@pytest.mark.parametrize("eps", GRID, ids=str)
def test_oue_realises_at_most_its_epsilon_and_within_1e6_of_it(eps):
    level = oue.oue_level(eps)
    assert level.at_most(eps)
    assert level.epsilon >= eps - Decimal("1e-6")
    # the level is the two-bit ratio p (1 - q) / ((1 - p) q) of the thresholds actually used
    q = oue.other_threshold(eps)
    assert level.ratio == Fraction(2**64 - q, q)


@pytest.mark.parametrize("eps", GRID, ids=str)
def test_olh_realises_at_most_its_epsilon_and_within_1e6_of_it(eps):
    level = olh.olh_level(eps)
    # at 30, g = e^30 + 1 buckets leave each other bucket a cell of only ~8.6e5 units: 1.4e-6 below (safe side)
    assert level.at_most(eps) and level.epsilon >= eps - Decimal("1e-6" if eps < 30 else "2e-6")
    assert level == krr_level(eps, olh.olh_g(eps))


def test_olh_uses_the_papers_number_of_buckets():
    assert [olh.olh_g(Decimal(e)) for e in ("0", "0.5", "1", "2", "3")] == [2, 3, 4, 8, 21]  # round(e^eps) + 1
    assert olh.olh_g(30) == round(math.exp(30)) + 1


def test_the_samplers_use_the_thresholds_the_levels_are_computed_from():
    """OUE's other bits are 1 with probability Q / 2^64 (a chi-square-free check: 4 standard errors)."""
    rng = np.random.default_rng(5)
    eps, m, n = Decimal("1.5"), 6, 200_000
    bits = oue.oue_perturb(np.zeros(n, dtype=np.int64), eps, m, rng)
    p, q = oue.probabilities(eps)
    for j, expected in enumerate([p] + [q] * (m - 1)):
        assert abs(bits[:, j].mean() - expected) <= 4 * math.sqrt(expected * (1 - expected) / n)
    seeds, y = olh.olh_perturb(np.full(n, 3), eps, m, rng)
    keep, _ = olh.probabilities(eps)
    kept = (y == olh.hash_values(seeds, np.full(n, 3), olh.olh_g(eps))).mean()
    assert abs(kept - keep) <= 4 * math.sqrt(keep * (1 - keep) / n)


# ------------------------------------------------------------------------------ unbiasedness and variance

@pytest.mark.parametrize("eps", [Decimal("0.5"), Decimal("1"), Decimal("3")], ids=str)
@pytest.mark.parametrize("oracle", ["oue", "olh"])
def test_estimates_are_unbiased_with_the_closed_form_variance(oracle, eps):
    rng = np.random.default_rng(20170811)
    n, runs, m = 2000, 300, SHARES.size
    x = _population(n)
    f = _true_shares(x)
    estimates = np.empty((runs, m))
    for r in range(runs):
        if oracle == "oue":
            estimates[r] = oue.oue_estimate(oue.oue_perturb(x, eps, m, rng), eps)
        else:
            estimates[r] = olh.olh_estimate(*olh.olh_perturb(x, eps, m, rng), eps, m)
    variance = (oue.oue_variance if oracle == "oue" else olh.olh_variance)(eps, n, f)
    mean_err = np.abs(estimates.mean(axis=0) - f)
    assert (mean_err <= 4 * np.sqrt(variance / runs)).all(), (mean_err, np.sqrt(variance / runs))
    sample_var = estimates.var(axis=0, ddof=1)
    assert (np.abs(sample_var - variance) <= 4 * variance * math.sqrt(2 / (runs - 1))).all(), (sample_var, variance)


def test_the_closed_forms_are_the_papers_at_a_zero_share():
    """At f = 0 both variances are ``q (1 - q) / (n (p - q)^2)``; OUE's is ``4 e^eps / (n (e^eps - 1)^2)``."""
    for eps in (Decimal("0.5"), Decimal("1"), Decimal("4")):
        e = math.exp(float(eps))
        assert oue.oue_variance(eps, 1000) == pytest.approx(4 * e / (1000 * (e - 1) ** 2), rel=1e-12)
        g = olh.olh_g(eps)
        p = e / (e + g - 1)
        assert olh.olh_variance(eps, 1000) == pytest.approx((1 / g) * (1 - 1 / g) / (1000 * (p - 1 / g) ** 2),
                                                            rel=1e-9)


def test_the_hash_family_collides_with_probability_one_over_g():
    """For v != v', ``Pr[h(v) = h(v')] = 1/g`` over the random hash, within 4 standard errors."""
    rng = np.random.default_rng(9)
    n, g = 400_000, 7
    a = rng.integers(1, olh.P, size=n, dtype=np.uint64)
    b = rng.integers(0, olh.P, size=n, dtype=np.uint64)
    seeds = (a << np.uint64(32)) | b
    for v, w in [(0, 1), (5, 999), (123, 124)]:
        rate = (olh.hash_values(seeds, v, g) == olh.hash_values(seeds, w, g)).mean()
        assert abs(rate - 1 / g) <= 4 * math.sqrt((1 / g) * (1 - 1 / g) / n)


# ------------------------------------------------------------------------------------------------ pure-ldp

@pytest.fixture(scope="module")
def pure_ldp():
    """pure-ldp's unary-encoding and local-hashing oracles, loaded without its ``frequency_oracles`` package
    ``__init__`` (which imports every oracle, and scikit-learn with them)."""
    root = Path(importlib.util.find_spec("pure_ldp").origin).parent / "frequency_oracles"
    saved = {k: v for k, v in sys.modules.items() if k.startswith("pure_ldp.frequency_oracles")}
    package = types.ModuleType("pure_ldp.frequency_oracles")
    package.__path__ = [str(root)]
    sys.modules["pure_ldp.frequency_oracles"] = package
    try:
        ue = importlib.import_module("pure_ldp.frequency_oracles.unary_encoding")
        lh = importlib.import_module("pure_ldp.frequency_oracles.local_hashing")
        # pure-ldp 1.2 hashes ``str(i)``: the xxhash it was written for took text as UTF-8, xxhash >= 2 wants bytes
        shim = types.SimpleNamespace(xxh32=lambda data, seed=0: xxhash.xxh32(
            data.encode() if isinstance(data, str) else data, seed=seed))
        for name in ("lh_client", "lh_server"):
            sys.modules[f"pure_ldp.frequency_oracles.local_hashing.{name}"].xxhash = shim
        yield types.SimpleNamespace(UEServer=ue.UEServer, LHServer=lh.LHServer, LHClient=lh.LHClient)
    finally:
        for k in [k for k in sys.modules if k.startswith("pure_ldp.frequency_oracles")]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_oue_estimates_equal_pure_ldps_on_the_same_reports(pure_ldp):
    rng = np.random.default_rng(2017)
    eps, m, n = Decimal("1.2"), 8, 5000
    reports = oue.oue_perturb(_population(n), eps, m, rng)
    server = pure_ldp.UEServer(epsilon=float(eps), d=m, use_oue=True, index_mapper=lambda v: v)
    for row in reports:
        server.aggregate(row.astype(np.int64))
    theirs = np.array([server.estimate(v, suppress_warnings=True) for v in range(m)]) / n
    np.testing.assert_allclose(oue.oue_estimate(reports, eps), theirs, rtol=1e-12, atol=1e-12)


def test_olh_estimates_agree_with_pure_ldps_within_monte_carlo_error(pure_ldp):
    """Different hash families (theirs xxhash, ours Carter-Wegman), the same data: the two estimates differ
    by less than 4 standard errors of their difference."""
    import random

    random.seed(7)
    np.random.seed(7)  # pure-ldp's client draws from the global generators
    eps, m, n = Decimal("1"), 8, 20_000
    x = _population(n)
    client = pure_ldp.LHClient(epsilon=float(eps), d=m, use_olh=True, index_mapper=lambda v: v)
    server = pure_ldp.LHServer(epsilon=float(eps), d=m, use_olh=True, index_mapper=lambda v: v)
    for v in x.tolist():
        server.aggregate(client.privatise(v))
    theirs = np.array([server.estimate(v, suppress_warnings=True) for v in range(m)]) / n
    ours = olh.olh_estimate(*olh.olh_perturb(x, eps, m, np.random.default_rng(7)), eps, m)
    se = np.sqrt(2 * olh.olh_variance(eps, n, _true_shares(x)))
    assert (np.abs(ours - theirs) <= 4 * se).all(), (ours, theirs, se)
    assert np.abs(ours - SHARES).max() <= 4 * se.max()
