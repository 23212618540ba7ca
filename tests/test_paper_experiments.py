"""The paper-experiments benchmark (benchmarks/paper_experiments.py) on a reduced number of repetitions.

The full run (100 repetitions) is ``python -m benchmarks paper_experiments``; here 10 repetitions with
the same seed (the first 10 of the full run) must pass every check and write the three figures and the
JSON to a temporary directory.  Two power tests show the checks are not vacuous: a biased estimator and
a "relaxation" that draws fresh, independent randomized responses every round (which leaks: a
majority vote over the rounds beats the Theorem 6.1 bound) must both fail.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import paper_experiments as pe
from mechanisms import estimators, rappor
from mechanisms.rr import perturb

REPS = 10
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def reduced_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("paper_experiments")
    return out, pe.run(out, reps=REPS)


def test_reduced_run_passes_every_check(reduced_run):
    _, result = reduced_run
    failed = [c for c in result["checks"] if not c["pass"]]
    assert not failed, failed
    assert result["all_checks_pass"] is True
    tables = {c["table"] for c in result["checks"]}
    assert tables == {"fig1", "binary_estimates", "binary_variance", "binary_attacks",
                      "categorical_estimates", "categorical_attacks"}
    # 10 eps_beta curves, 10 rounds x 3 binary tables, 10 eps x 5 values + 10 attack rows
    assert result["n_checks"] == 10 + 30 + 50 + 10


def test_reduced_run_writes_figures_and_json(reduced_run):
    out, result = reduced_run
    for name in ("paper_fig1.png", "paper_fig2.png", "paper_fig3.png"):
        path = out / name
        assert path.is_file(), name
        data = path.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 20_000, name
    saved = json.loads((out / "paper_experiments.json").read_text(encoding="utf-8"))
    assert saved["all_checks_pass"] is True
    assert saved["config"]["reps"] == REPS
    b, c = saved["binary"], saved["categorical"]
    assert len(b["estimate_mean"]) == pe.ROUNDS and len(b["attacks"]["error_rate_mean"]) == pe.ROUNDS
    assert np.array(c["estimate_mean"]).shape == (len(pe.CAT_EPS), len(pe.CAT_COUNTS))
    # for m = 2 the fixed-population variance is Eq. (67); the iid form exceeds it by f(1-f)/n
    np.testing.assert_allclose(b["var_fixed_eq67"], rappor.relaxation_variance(b["eps"], b["n"]), rtol=1e-12)
    np.testing.assert_allclose(np.array(b["var_iid"]) - b["var_fixed_eq67"], 0.6 * 0.4 / 1000, rtol=1e-9)
    # noisy sampling after one report is binary RR at eps_ns(1): the two theories coincide at K = 1
    assert b["noisy_sampling"]["var_eq68"][0] == pytest.approx(b["var_fixed_eq67"][0], rel=1e-12)
    assert all(ns > rr for ns, rr in zip(b["noisy_sampling"]["var_eq68"][1:], b["var_fixed_eq67"][1:]))
    # LO and MLE make the same guesses (Lemma 3.1): identical error rates
    for exp in (b, c):
        rates = np.array(exp["attacks"]["error_rate_mean"])
        np.testing.assert_array_equal(rates[:, 0], rates[:, 1])


def test_repetitions_are_reproducible_and_prefix_stable():
    a = pe.categorical_experiment(3)
    b = pe.categorical_experiment(5)
    np.testing.assert_array_equal(a["estimates"], b["estimates"][:3])
    np.testing.assert_array_equal(a["error_rates"], b["error_rates"][:3])
    c = pe.binary_experiment(3)
    d = pe.binary_experiment(3)
    np.testing.assert_array_equal(c["estimates"], d["estimates"])
    np.testing.assert_array_equal(c["estimates_noisy_sampling"], d["estimates_noisy_sampling"])


def test_checks_catch_a_biased_estimator(monkeypatch):
    true_frequencies = estimators.frequencies

    def biased(outputs, eps, m):
        f = true_frequencies(outputs, eps, m)
        return f + np.where(np.arange(m) == m - 1, 0.05, 0.0)

    monkeypatch.setattr(estimators, "frequencies", biased)
    checks = pe.Checks()
    pe.report_binary(pe.binary_experiment(REPS), checks)
    failed = {c["row"] for c in checks.failed if c["table"] == "binary_estimates"}
    assert {"K=8", "K=9", "K=10"} <= failed


def test_checks_catch_independent_rerandomization(monkeypatch):
    def leaky_release(bits, eps_path, rng=None):
        """Fresh randomized responses every round: each is eps-RR, but together they cost far more."""
        x = np.asarray(bits).astype(np.int64)
        return np.stack([perturb(x, e, 2, rng) for e in eps_path], axis=-1).astype(bool)

    monkeypatch.setattr(rappor, "gradual_release", leaky_release)
    checks = pe.Checks()
    pe.report_binary(pe.binary_experiment(5), checks)
    estimates_ok = all(c["pass"] for c in checks.items if c["table"] == "binary_estimates")
    attacks_failed = {c["row"] for c in checks.failed if c["table"] == "binary_attacks"}
    assert estimates_ok  # every round's marginal is still right ...
    assert {"K=5", "K=10"} <= attacks_failed  # ... but majority votes beat the bound
