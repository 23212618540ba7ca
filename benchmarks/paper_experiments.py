"""The paper's two experiments (docs/mechanisms-reference.md#the-demo-experiments) and its Figures 1-3.

*Binary* (paper Sec. 6.1): 1000 values (600 ones, 400 zeros), each bit's randomized response relaxed
along the RAPPOR path ``eps_ns(1..10)`` (Eq. 65, eps_alpha = 1, eps_beta = 0.5) with
``rappor.gradual_release``; 100 repetitions.  Per round K:

* the estimated share of ones (Eq. 6): mean against 0.6, spread against Eq. (67);
* its variance against original RAPPOR's repeated noisy sampling with the same alpha, beta, sampled
  10 times (``permanent_response`` + ``noisy_sampling``, Eq. 68): equal at K = 1, relaxation lower after;
* the four attackers (LO, MLE, HF, WHF) on the chain prefix o_1..o_K of a uniform-prior subsample
  (400 ones, all 400 zeros) against the Theorem 6.1 bound at eps_ns(K).

*Categorical* (Sec. 6.2): 1500 values (100, 200, 300, 400, 500 of values 1..5), k-RR relaxed along
eps = 0.1, 0.2, ..., 1.0 with ``relaxation.chain``; 100 repetitions: the five estimated frequencies
(Eq. 7) per epsilon against the Appendix G bands, and the attackers on a uniform-prior subsample
(100 of each value) against the bound.

*Variance model.*  The experiments hold the population fixed (exactly 600 ones; exactly 100..500 of
each value): only the randomized response is random.  Its variance is Appendix G's
``[f p(1-p) + (1-f) q(1-q)] / (n (p-q)^2)`` (``estimators.frequency_variance_fixed``); for m = 2,
``p(1-p) = q(1-q)`` and it is Eq. (67), ``E/(n (E-1)^2)``, whatever f.  The estimation section's
(docs/mechanisms-reference.md#estimation) ``t(1-t)/(n (p-q)^2)`` (``estimators.frequency_variance``) is the variance
when every value is drawn iid with frequency f; it is larger by ``f(1-f)/n``.  Checks use the fixed form; both are
printed.  Eq. (68) for noisy sampling is likewise exact for a fixed population.

*Checks* (4 standard errors, R repetitions): a mean within 4 SE (sample SD / sqrt(R)) of the truth;
a sample variance within 4 SE (``Var sqrt(2/(R-1))``, normal sampling) of the fixed-population theory;
the share of estimates inside the theoretical 2-sigma band within 4 binomial SE of 95.45 %; every
attacker's mean error rate >= bound - 4 SE, and LO and MLE within 4 SE of the bound.  The leak flag
of ``audit.run_attacks`` (exact binomial test per repetition) is counted too.

*Figure 1* (paper Fig. 1, closed forms): eps_ns(K) for several eps_beta; the variance of noisy
sampling (Eq. 68) and relaxation (Eq. 67) along the same path, N = 1; the variance along a linear
relaxation 0.1 -> 1.0 completed in K rounds.  *Figure 2*: the binary experiment; *Figure 3*: the
categorical one.

Every repetition draws from its own ``numpy.random.Generator`` spawned from one ``SeedSequence``
(repetition i is the same whatever the number of repetitions), so runs are reproducible.

Run: ``python -m benchmarks paper_experiments`` (results to ``benchmarks/results/``: paper_fig1.png,
paper_fig2.png, paper_fig3.png and paper_experiments.json), or
``python -m benchmarks.paper_experiments --reps 10 --out DIR``.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from scipy.special import expit

from mechanisms import audit, estimators, rappor, relaxation

from . import _common

NAME = "paper_experiments"
SEED = 2401_13952          # the paper's arXiv number
REPS = 100                 # repetitions, as in the paper
Z = 4.0                    # every check allows 4 standard errors
COVERAGE_2SIGMA = math.erf(2.0 / math.sqrt(2.0))  # 0.9545, normal mass within 2 sigma

# binary experiment (Sec. 6.1)
BIN_ONES, BIN_ZEROS = 600, 400
EPS_ALPHA, EPS_BETA = 1.0, 0.5
ROUNDS = 10

# categorical experiment (Sec. 6.2)
CAT_COUNTS = (100, 200, 300, 400, 500)           # of values 1..5 (stored as 0..4)
CAT_EPS = tuple(round(0.1 * i, 10) for i in range(1, 11))

# Figure 1 (closed forms)
FIG1_EPS_BETA = tuple(round(0.1 * i, 10) for i in range(1, 11))
FIG1_K_MAX = 50
FIG1_LINEAR_K = (2, 5, 10, 20, 50)
FIG1_LINEAR_RANGE = (0.1, 1.0)

ATTACKERS = audit.ATTACKERS
SHORT = {"last_output": "LO", "mle": "MLE", "highest_frequency": "HF", "weighted_highest_frequency": "WHF"}


# ------------------------------------------------------------------------------------------ helpers

def _rngs(seed: int, stream: int, reps: int) -> list[np.random.Generator]:
    """One Generator per repetition of experiment ``stream``; repetition i does not depend on ``reps``."""
    children = np.random.SeedSequence([seed, stream]).spawn(reps)
    return [np.random.default_rng(c) for c in children]


def _mean_sd_se(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over axis 0 (repetitions): mean, sample SD (ddof 1), standard error of the mean."""
    r = x.shape[0]
    sd = x.std(axis=0, ddof=1)
    return x.mean(axis=0), sd, sd / math.sqrt(r)


def _var_z(var_emp, var_th, reps: int):
    """(sample variance - theory) in standard errors ``theory sqrt(2/(R-1))`` of a normal sample variance."""
    return (np.asarray(var_emp) - var_th) / (np.asarray(var_th) * math.sqrt(2.0 / (reps - 1)))


def _coverage_z(cov, reps: int):
    return (np.asarray(cov) - COVERAGE_2SIGMA) / math.sqrt(COVERAGE_2SIGMA * (1 - COVERAGE_2SIGMA) / reps)


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _f(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}f}"


def _g(x: float) -> str:
    return f"{x:.3e}"


def _tolist(obj):
    """numpy -> plain Python, recursively, for JSON."""
    if isinstance(obj, dict):
        return {k: _tolist(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_tolist(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


class Checks:
    """The PASS/FAIL verdicts of every table, collected for the summary and the JSON."""

    def __init__(self) -> None:
        self.items: list[dict] = []

    def add(self, table: str, row: str, ok: bool, detail: str) -> bool:
        self.items.append({"table": table, "row": row, "pass": bool(ok), "detail": detail})
        return bool(ok)

    @property
    def failed(self) -> list[dict]:
        return [c for c in self.items if not c["pass"]]


# ------------------------------------------------------------------------------- Figure 1 (closed forms)

def closed_forms() -> dict:
    """Paper Fig. 1: eps_ns(K), the N = 1 variances of noisy sampling and relaxation, linear relaxation."""
    k = np.arange(1, FIG1_K_MAX + 1)
    alpha = float(expit(EPS_ALPHA))
    curves = []
    for eb in FIG1_EPS_BETA:
        eps = rappor.eps_ns(k, EPS_ALPHA, eb)
        curves.append({
            "eps_beta": eb,
            "eps_ns": eps,
            "var_noisy_sampling": rappor.noisy_sampling_variance(k, alpha, float(expit(eb)), 1),
            "var_relaxation": rappor.relaxation_variance(eps, 1),
        })
    lo, hi = FIG1_LINEAR_RANGE
    linear = []
    for kk in FIG1_LINEAR_K:
        eps = np.linspace(lo, hi, kk)
        linear.append({"K": kk, "eps": eps, "var_relaxation": rappor.relaxation_variance(eps, 1)})
    return {"K": k, "eps_alpha": EPS_ALPHA, "curves": curves, "linear": linear}


def report_closed_forms(cf: dict, checks: Checks) -> None:
    rows = []
    for c in cf["curves"]:
        eps, v_ns, v_rr = c["eps_ns"], c["var_noisy_sampling"], c["var_relaxation"]
        k1_rel = abs(v_ns[0] - v_rr[0]) / v_ns[0]
        lower = bool(np.all(v_rr[1:] < v_ns[1:]))
        # increasing towards eps_alpha: strictly while below it, reaching it only where tanh(K eps_beta/2)
        # rounds to 1 in floating point
        d = np.diff(eps)
        monotone = bool(np.all(eps <= EPS_ALPHA) and np.all(d >= 0) and np.all(d[eps[1:] < EPS_ALPHA] > 0))
        ok = k1_rel < 1e-9 and lower and monotone
        checks.add("fig1", f"eps_beta={c['eps_beta']:g}", ok,
                   f"K=1 rel. diff {k1_rel:.1e}; relaxation < noisy sampling for K=2..{FIG1_K_MAX}: {lower}; "
                   f"eps_ns increasing towards eps_alpha: {monotone}")
        rows.append([f"{c['eps_beta']:.1f}", _f(eps[0]), _f(eps[9]), _f(eps[-1]),
                     _f(v_ns[0], 3), _f(v_rr[0], 3), _f(v_ns[9], 3), _f(v_rr[9], 3), _f(v_ns[-1], 3),
                     _f(v_rr[-1], 3), f"{k1_rel:.0e}", _verdict(ok)])
    _common.print_table(
        ["eps_beta", "eps_ns(1)", "eps_ns(10)", f"eps_ns({FIG1_K_MAX})", "NS K=1", "RR K=1", "NS K=10",
         "RR K=10", f"NS K={FIG1_K_MAX}", f"RR K={FIG1_K_MAX}", "K=1 diff", "check"], rows,
        title=f"Figure 1 (closed forms, eps_alpha = {EPS_ALPHA:g}, N = 1): eps_ns(K) (Eq. 65) and the "
              f"variance of the estimated bit share,\nNS = repeated noisy sampling (Eq. 68), RR = gradual "
              f"release along eps_ns (Eq. 67).  check: equal at K = 1 (rel. 1e-9), RR < NS for\n"
              f"K = 2..{FIG1_K_MAX}, eps_ns increasing towards eps_alpha (reaching it only where it rounds "
              f"to it)")


# ------------------------------------------------------------------------------ binary experiment

def binary_experiment(reps: int, seed: int = SEED) -> dict:
    """Sec. 6.1: per repetition, gradual release along eps_ns(1..10), noisy sampling 10 times, attacks."""
    values = np.r_[np.ones(BIN_ONES, dtype=np.int64), np.zeros(BIN_ZEROS, dtype=np.int64)]
    n = values.shape[0]
    k = np.arange(1, ROUNDS + 1)
    eps = rappor.eps_ns(k, EPS_ALPHA, EPS_BETA)
    alpha, beta = float(expit(EPS_ALPHA)), float(expit(EPS_BETA))
    est = np.empty((reps, ROUNDS))
    est_ns = np.empty((reps, ROUNDS))
    err = np.empty((reps, ROUNDS, len(ATTACKERS)))
    leaks = np.zeros((reps, ROUNDS, len(ATTACKERS)), dtype=bool)
    n_audit = 0
    for r, rng in enumerate(_rngs(seed, 1, reps)):
        outs = rappor.gradual_release(values.astype(bool), eps, rng).astype(np.int64)  # (n, ROUNDS)
        for i in range(ROUNDS):
            est[r, i] = estimators.frequencies(outs[:, i], eps[i], 2)[1]
        permanent = rappor.permanent_response(values.astype(bool), EPS_ALPHA, rng)
        counts = np.zeros(n, dtype=np.int64)
        for i in range(ROUNDS):  # one more instantaneous report per round; estimate from all so far
            counts += rappor.noisy_sampling(permanent, EPS_BETA, 1, rng)
            est_ns[r, i] = rappor.estimate_noisy_sampling(counts, i + 1, alpha, beta)
        idx = audit.uniform_prior_subsample(values, 2, rng)  # 400 ones, all 400 zeros; fixed for the rounds
        n_audit = idx.shape[0]
        for i in range(ROUNDS):
            rep = audit.run_attacks(values[idx], outs[idx, : i + 1], eps[: i + 1], 2, rng, subsample=False)
            for j, name in enumerate(ATTACKERS):
                err[r, i, j] = rep["attackers"][name]["error_rate"]
                leaks[r, i, j] = rep["attackers"][name]["below_bound"]
    truth = BIN_ONES / n
    freq = np.array([1 - truth, truth])
    return {
        "n": n, "reps": reps, "truth": truth, "K": k, "eps": eps, "alpha": alpha, "beta": beta,
        "estimates": est, "estimates_noisy_sampling": est_ns, "error_rates": err, "leak_flags": leaks,
        "n_audit": n_audit,
        "var_fixed": np.array([estimators.frequency_variance_fixed(freq, e, 2, n)[1] for e in eps]),
        "var_iid": np.array([estimators.frequency_variance(freq, e, 2, n)[1] for e in eps]),
        "var_eq67": rappor.relaxation_variance(eps, n),
        "var_eq68": rappor.noisy_sampling_variance(k, alpha, beta, n),
        "bound": audit.bayes_error_bound(eps, 2),
    }


def report_binary(b: dict, checks: Checks) -> dict:
    reps, truth = b["reps"], b["truth"]
    mean, sd, se = _mean_sd_se(b["estimates"])
    var_emp = sd ** 2
    cov = (np.abs(b["estimates"] - truth) <= 2 * np.sqrt(b["var_fixed"])).mean(axis=0)
    zc = _coverage_z(cov, reps)
    zm = (mean - truth) / se
    zv_fixed, zv_iid = _var_z(var_emp, b["var_fixed"], reps), _var_z(var_emp, b["var_iid"], reps)
    rows = []
    for i, kk in enumerate(b["K"]):
        ok = abs(zm[i]) <= Z and abs(zv_fixed[i]) <= Z and abs(zc[i]) <= Z
        checks.add("binary_estimates", f"K={kk}", ok,
                   f"mean z {zm[i]:+.2f}, variance z (fixed) {zv_fixed[i]:+.2f}, "
                   f"2-sigma coverage z {zc[i]:+.2f}")
        rows.append([kk, _f(b["eps"][i]), _f(mean[i]), _f(se[i]), f"{zm[i]:+.2f}", _f(sd[i]),
                     _f(math.sqrt(b["var_fixed"][i])), _f(math.sqrt(b["var_iid"][i])), f"{zv_fixed[i]:+.2f}",
                     f"{zv_iid[i]:+.2f}", f"{cov[i]:.2f}", _verdict(ok)])
    _common.print_table(
        ["K", "eps_ns(K)", "mean", "SE", "z mean", "SD emp", "SD fixed=Eq67", "SD iid", "z var fix",
         "z var iid", "in 2sd band", "check"], rows,
        title=f"Binary experiment (Fig. 2a): estimated share of ones, truth {truth:g}, n = {b['n']}, "
              f"{reps} repetitions, gradual release along eps_ns(K) (eps_alpha = {EPS_ALPHA:g}, "
              f"eps_beta = {EPS_BETA:g}).\nSD fixed = fixed-population variance (App. G; for m = 2 it is "
              "Eq. 67); SD iid = the t(1-t) form of docs/mechanisms-reference.md#estimation (values drawn iid), "
              "larger by f(1-f)/n.\n"
              f"check: |z mean| <= {Z:g}, |z var fix| <= {Z:g}, share of estimates inside truth +- 2 SD "
              f"fixed within {Z:g} SE of {COVERAGE_2SIGMA:.4f}")

    mean_ns, sd_ns, _ = _mean_sd_se(b["estimates_noisy_sampling"])
    var_ns = sd_ns ** 2
    zv_rr = _var_z(var_emp, b["var_eq67"], reps)
    zv_ns = _var_z(var_ns, b["var_eq68"], reps)
    zm_ns = (mean_ns - truth) / (sd_ns / math.sqrt(reps))
    se_log = math.sqrt(4.0 / (reps - 1))  # SE of log(ratio of two independent normal sample variances)
    rows = []
    for i, kk in enumerate(b["K"]):
        th_ratio = b["var_eq68"][i] / b["var_eq67"][i]
        emp_ratio = var_ns[i] / var_emp[i]
        if kk == 1:
            order = abs(th_ratio - 1.0) < 1e-9
        else:
            order = th_ratio > 1.0
        must_show = kk > 1 and math.log(th_ratio) > Z * se_log  # a correct run shows it empirically
        emp_lower = emp_ratio > 1.0
        ok = (order and abs(zv_rr[i]) <= Z and abs(zv_ns[i]) <= Z and abs(zm_ns[i]) <= Z
              and (emp_lower or not must_show))
        checks.add("binary_variance", f"K={kk}", ok,
                   f"theory NS/RR {th_ratio:.3f}, empirical {emp_ratio:.3f}; z var RR {zv_rr[i]:+.2f}, "
                   f"z var NS {zv_ns[i]:+.2f}, z mean NS {zm_ns[i]:+.2f}")
        rows.append([kk, _f(b["eps"][i]), _g(var_emp[i]), _g(b["var_eq67"][i]), f"{zv_rr[i]:+.2f}",
                     _g(var_ns[i]), _g(b["var_eq68"][i]), f"{zv_ns[i]:+.2f}", f"{th_ratio:.3f}",
                     f"{emp_ratio:.3f}",
                     ("yes" if emp_lower else "no") + ("" if must_show or kk == 1 else "*"), _verdict(ok)])
    _common.print_table(
        ["K", "eps_ns(K)", "RR var emp", "RR Eq67", "z RR", "NS var emp", "NS Eq68", "z NS", "NS/RR th",
         "NS/RR emp", "RR<NS emp", "check"], rows,
        title=f"Binary experiment (Fig. 2b): variance of the estimate, gradual release (RR) vs RAPPOR noisy "
              f"sampling (NS, alpha = {b['alpha']:.4f}, beta = {b['beta']:.4f}, K reports)\ncheck: theory "
              f"equal at K = 1 and RR < NS for K >= 2; both empirical variances within {Z:g} SE of theory; "
              f"NS mean within {Z:g} SE of {truth:g};\nempirical RR < NS required where the theoretical "
              f"log-ratio exceeds {Z:g} SE ({Z * se_log:.2f}); * = not required")

    attacks = _report_attacks(
        checks, "binary_attacks", b["error_rates"], b["bound"], b["leak_flags"],
        [f"{kk}" for kk in b["K"]], b["eps"], "K",
        title=f"Binary experiment (Fig. 2c): attackers' error rate on chain o_1..o_K, uniform-prior "
              f"subsample of {b['n_audit']} ({b['n_audit'] // 2} ones, {b['n_audit'] // 2} zeros), mean "
              f"+- SE over {reps} repetitions;\nbound = Theorem 6.1 at eps_ns(K).  check: every attacker >= "
              f"bound - {Z:g} SE; LO and MLE within {Z:g} SE of the bound.  leaks = repetitions flagged by\n"
              f"audit.run_attacks (exact binomial test at Phi(-4)), any attacker")
    return {
        "mean": mean, "sd": sd, "se": se, "z_mean": zm, "var_emp": var_emp, "z_var_fixed": zv_fixed,
        "z_var_iid": zv_iid, "coverage_2sigma": cov, "var_noisy_sampling_emp": var_ns,
        "mean_noisy_sampling": mean_ns, "z_var_eq67": zv_rr, "z_var_eq68": zv_ns, "attacks": attacks,
    }


def _report_attacks(checks: Checks, table: str, err: np.ndarray, bound: np.ndarray, leaks: np.ndarray,
                    labels: list[str], eps: np.ndarray, label_name: str, title: str) -> dict:
    """err, leaks: (reps, rounds, attackers)."""
    mean, sd, se = _mean_sd_se(err)
    leaks_any = leaks.any(axis=2).sum(axis=0)
    rows = []
    for i, lab in enumerate(labels):
        z = (mean[i] - bound[i]) / np.where(se[i] > 0, se[i], np.inf)
        above = bool(np.all(mean[i] >= bound[i] - Z * se[i]))
        on = all(abs(mean[i, j] - bound[i]) <= Z * se[i, j] for j in (0, 1))
        ok = above and on
        checks.add(table, f"{label_name}={lab}", ok,
                   ", ".join(f"{SHORT[a]} {mean[i, j]:.4f} (z {z[j]:+.2f})" for j, a in enumerate(ATTACKERS))
                   + f"; bound {bound[i]:.4f}")
        rows.append([lab, _f(eps[i]), _f(bound[i])]
                    + [f"{mean[i, j]:.4f}+-{se[i, j]:.4f}" for j in range(len(ATTACKERS))]
                    + [" ".join(f"{v:+.1f}" for v in z), int(leaks_any[i]), _verdict(ok)])
    _common.print_table([label_name, "eps", "bound"] + [SHORT[a] for a in ATTACKERS]
                        + ["z LO MLE HF WHF", "leaks", "check"], rows, title=title)
    return {"mean": mean, "sd": sd, "se": se, "bound": bound, "leak_flags_any": leaks_any,
            "leak_flags_per_attacker": leaks.sum(axis=0)}


# ------------------------------------------------------------------------------ categorical experiment

def categorical_experiment(reps: int, seed: int = SEED) -> dict:
    """Sec. 6.2: per repetition, a k-RR chain (m = 5) along eps 0.1..1.0, estimates per epsilon, attacks."""
    m = len(CAT_COUNTS)
    values = np.repeat(np.arange(m, dtype=np.int64), CAT_COUNTS)
    n = values.shape[0]
    eps = np.array(CAT_EPS)
    L = eps.shape[0]
    est = np.empty((reps, L, m))
    err = np.empty((reps, L, len(ATTACKERS)))
    leaks = np.zeros((reps, L, len(ATTACKERS)), dtype=bool)
    n_audit = 0
    for r, rng in enumerate(_rngs(seed, 2, reps)):
        outs = relaxation.chain(values, eps, m, rng)  # (n, L)
        for i in range(L):
            est[r, i] = estimators.frequencies(outs[:, i], eps[i], m)
        idx = audit.uniform_prior_subsample(values, m, rng)  # 100 of each value
        n_audit = idx.shape[0]
        for i in range(L):
            rep = audit.run_attacks(values[idx], outs[idx, : i + 1], eps[: i + 1], m, rng, subsample=False)
            for j, name in enumerate(ATTACKERS):
                err[r, i, j] = rep["attackers"][name]["error_rate"]
                leaks[r, i, j] = rep["attackers"][name]["below_bound"]
    counts = np.array(CAT_COUNTS, dtype=np.int64)
    truth = counts / n
    return {
        "n": n, "m": m, "reps": reps, "counts": counts, "truth": truth, "eps": eps,
        "estimates": est, "error_rates": err, "leak_flags": leaks, "n_audit": n_audit,
        "var_fixed": np.array([estimators.frequency_variance_fixed(counts, e, m, n) for e in eps]),
        "var_iid": np.array([estimators.frequency_variance(truth, e, m, n) for e in eps]),
        "bound": audit.bayes_error_bound(eps, m),
    }


def report_categorical(c: dict, checks: Checks) -> dict:
    reps, truth, m = c["reps"], c["truth"], c["m"]
    mean, sd, se = _mean_sd_se(c["estimates"])  # (L, m)
    var_emp = sd ** 2
    cov = (np.abs(c["estimates"] - truth) <= 2 * np.sqrt(c["var_fixed"])).mean(axis=0)
    zm = (mean - truth) / se
    zv_fixed, zv_iid = _var_z(var_emp, c["var_fixed"], reps), _var_z(var_emp, c["var_iid"], reps)
    zc = _coverage_z(cov, reps)
    rows = []
    for i, e in enumerate(c["eps"]):
        for v in range(m):
            ok = abs(zm[i, v]) <= Z and abs(zv_fixed[i, v]) <= Z and abs(zc[i, v]) <= Z
            checks.add("categorical_estimates", f"eps={e:g}, value={v + 1}", ok,
                       f"mean z {zm[i, v]:+.2f}, variance z (fixed) {zv_fixed[i, v]:+.2f}, "
                       f"2-sigma coverage z {zc[i, v]:+.2f}")
            rows.append([f"{e:.1f}", v + 1, _f(truth[v]), _f(mean[i, v]), _f(se[i, v]), f"{zm[i, v]:+.2f}",
                         _f(sd[i, v]), _f(math.sqrt(c["var_fixed"][i, v])), _f(math.sqrt(c["var_iid"][i, v])),
                         f"{zv_fixed[i, v]:+.2f}", f"{zv_iid[i, v]:+.2f}", f"{cov[i, v]:.2f}", _verdict(ok)])
    _common.print_table(
        ["eps", "value", "truth", "mean", "SE", "z mean", "SD emp", "SD App.G", "SD iid", "z var fix",
         "z var iid", "in 2sd band", "check"], rows,
        title=f"Categorical experiment (Fig. 3a-e): estimated frequency of each value, n = {c['n']} "
              f"(counts {', '.join(map(str, c['counts']))} of values 1..{m}), k-RR relaxed along eps = "
              f"{c['eps'][0]:g}..{c['eps'][-1]:g}, {reps} repetitions.\nSD App.G = fixed-population variance "
              "(Appendix G); SD iid = the t(1-t) form of docs/mechanisms-reference.md#estimation.  check: "
              f"|z mean| <= {Z:g}, |z var fix| <= {Z:g}, 2-sigma coverage within {Z:g} SE of {COVERAGE_2SIGMA:.4f}")
    attacks = _report_attacks(
        checks, "categorical_attacks", c["error_rates"], c["bound"], c["leak_flags"],
        [f"{e:.1f}" for e in c["eps"]], c["eps"], "eps_L",
        title=f"Categorical experiment (Fig. 3f): attackers' error rate on chain o_1..o_L (eps_1 = "
              f"{c['eps'][0]:g} .. eps_L), uniform-prior subsample of {c['n_audit']} ({c['n_audit'] // m} of "
              f"each value), mean +- SE over {reps} repetitions;\nbound = Theorem 6.1 at eps_L, m = {m}.  "
              f"check: every attacker >= bound - {Z:g} SE; LO and MLE within {Z:g} SE of the bound")
    return {"mean": mean, "sd": sd, "se": se, "z_mean": zm, "var_emp": var_emp, "z_var_fixed": zv_fixed,
            "z_var_iid": zv_iid, "coverage_2sigma": cov, "attacks": attacks}


# ------------------------------------------------------------------------------------------- figures

_COLORS = {"last_output": "tab:blue", "mle": "tab:orange", "highest_frequency": "tab:green",
           "weighted_highest_frequency": "tab:red"}
_MARKERS = {"last_output": "o", "mle": "x", "highest_frequency": "s", "weighted_highest_frequency": "^"}


def _figure(nrows: int, ncols: int, width: float, height: float):
    from matplotlib.figure import Figure  # no pyplot: no global state, no display backend

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _panel_label(ax, text: str) -> None:
    ax.set_title(text, fontsize=11)


def plot_fig1(cf: dict, path: Path) -> None:
    import matplotlib as mpl

    fig, axes = _figure(1, 3, 16, 4.8)
    ax_a, ax_b, ax_c = axes[0]
    cmap = mpl.colormaps["viridis"]
    n_c = len(cf["curves"])
    for j, c in enumerate(cf["curves"]):
        col = cmap(j / max(1, n_c - 1))
        ax_a.plot(cf["K"], c["eps_ns"], color=col, label=f"{c['eps_beta']:.1f}")
        ax_b.plot(cf["K"], c["var_noisy_sampling"], color=col, label=f"{c['eps_beta']:.1f}")
        ax_b.plot(cf["K"], c["var_relaxation"], color=col, ls="--")
    ax_a.axhline(cf["eps_alpha"], color="grey", lw=0.8, ls=":")
    ax_a.set_xlabel("number of noisy samplings K")
    ax_a.set_ylabel(r"$\epsilon_{ns}(K)$")
    ax_a.legend(title=r"$\epsilon_\beta$", fontsize=8, ncol=2)
    _panel_label(ax_a, r"(a) DP guarantee of repeated noisy sampling, $\epsilon_\alpha=1$")
    ax_b.set_yscale("log")
    ax_b.set_xlabel("K")
    ax_b.set_ylabel("variance of estimated frequency (N = 1)")
    leg = ax_b.legend(title=r"$\epsilon_\beta$", fontsize=8, ncol=2, loc="upper right")
    ax_b.add_artist(leg)
    from matplotlib.lines import Line2D

    ax_b.legend([Line2D([], [], color="k"), Line2D([], [], color="k", ls="--")],
                ["noisy sampling (Eq. 68)", "DP relaxation (Eq. 67)"], fontsize=8, loc="upper center")
    _panel_label(ax_b, "(b) noisy sampling (solid) vs relaxation (dashed)")
    cmap2 = mpl.colormaps["plasma"]
    for j, lin in enumerate(cf["linear"]):
        rounds = np.arange(1, lin["K"] + 1)
        ax_c.plot(rounds, lin["var_relaxation"], marker="o" if lin["K"] <= 10 else None, ms=3,
                  color=cmap2(j / max(1, len(cf["linear"]))), label=f"K = {lin['K']}")
    ax_c.set_yscale("log")
    ax_c.set_xlabel("relaxation round i")
    ax_c.set_ylabel("variance of estimated frequency (N = 1)")
    ax_c.legend(fontsize=8)
    lo, hi = FIG1_LINEAR_RANGE
    _panel_label(ax_c, rf"(c) $\epsilon$ relaxed linearly {lo:g} $\to$ {hi:g} in K rounds")
    for ax in (ax_a, ax_b, ax_c):
        ax.grid(alpha=0.3)
    fig.savefig(path)


def _round_ticks(ax, ks, eps) -> None:
    ax.set_xticks(ks)
    ax.set_xticklabels([f"{k}\n{e:.2f}" for k, e in zip(ks, eps)], fontsize=8)


def _attack_panel(ax, att: dict, x: np.ndarray, bound: np.ndarray, xlabel: str, title: str,
                  step: float) -> None:
    offsets = (np.arange(len(ATTACKERS)) - (len(ATTACKERS) - 1) / 2) * step
    for j, name in enumerate(ATTACKERS):
        ax.errorbar(x + offsets[j], att["mean"][:, j], yerr=att["sd"][:, j], fmt=_MARKERS[name], ms=4,
                    capsize=2, lw=0.8, color=_COLORS[name], label=SHORT[name])
    ax.plot(x, bound, "k--", lw=1.2, label="Theorem 6.1 bound")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("error rate (mean +- SD over repetitions)")
    ax.legend(fontsize=8)
    _panel_label(ax, title)


def plot_fig2(b: dict, rb: dict, path: Path) -> None:
    fig, axes = _figure(1, 3, 16, 4.8)
    ax_a, ax_b, ax_c = axes[0]
    ks, eps, truth = b["K"], b["eps"], b["truth"]
    ax_a.errorbar(ks, rb["mean"], yerr=2 * rb["sd"], fmt="o", capsize=3, color="tab:blue",
                  label=r"estimate: mean $\pm 2\sigma$ (empirical)")
    s_fix, s_iid = np.sqrt(b["var_fixed"]), np.sqrt(b["var_iid"])
    ax_a.axhline(truth, color="k", ls="--", lw=1)
    ax_a.plot(ks, truth + 2 * s_fix, "k--", lw=1, label=r"theory $\pm 2\sigma$, Eq. 67 (fixed population)")
    ax_a.plot(ks, truth - 2 * s_fix, "k--", lw=1)
    ax_a.plot(ks, truth + 2 * s_iid, color="grey", ls=":", lw=1, label=r"$\pm 2\sigma$ iid form $t(1-t)$")
    ax_a.plot(ks, truth - 2 * s_iid, color="grey", ls=":", lw=1)
    _round_ticks(ax_a, ks, eps)
    ax_a.set_xlabel(r"round K  /  $\epsilon_{ns}(K)$")
    ax_a.set_ylabel("estimated frequency of ones")
    ax_a.legend(fontsize=8)
    _panel_label(ax_a, f"(a) estimate, {b['reps']} repetitions (truth {truth:g})")

    ax_b.plot(ks, rb["var_emp"], "o", color="tab:blue", label="DP relaxation (empirical)")
    ax_b.plot(ks, b["var_eq67"], "--", color="tab:blue", label="DP relaxation theory (Eq. 67)")
    ax_b.plot(ks, rb["var_noisy_sampling_emp"], "s", color="tab:red", label="noisy sampling (empirical)")
    ax_b.plot(ks, b["var_eq68"], ":", color="tab:red", label="noisy sampling theory (Eq. 68)")
    ax_b.set_yscale("log")
    _round_ticks(ax_b, ks, eps)
    ax_b.set_xlabel(r"round K  /  $\epsilon_{ns}(K)$")
    ax_b.set_ylabel("variance of estimated frequency")
    ax_b.legend(fontsize=8)
    _panel_label(ax_b, "(b) variance: relaxation vs noisy sampling")

    _attack_panel(ax_c, rb["attacks"], ks.astype(float), b["bound"], r"round K  /  $\epsilon_{ns}(K)$",
                  f"(c) inference error rates (uniform prior, {b['n_audit']} objects)", 0.1)
    _round_ticks(ax_c, ks, eps)
    for ax in (ax_a, ax_b, ax_c):
        ax.grid(alpha=0.3)
    fig.savefig(path)


def plot_fig3(c: dict, rc: dict, path: Path) -> None:
    fig, axes = _figure(2, 3, 16, 9)
    eps = c["eps"]
    letters = "abcde"
    for v in range(c["m"]):
        ax = axes.flat[v]
        t = c["truth"][v]
        ax.errorbar(eps, rc["mean"][:, v], yerr=2 * rc["sd"][:, v], fmt="o", capsize=3, color="tab:blue",
                    label=r"estimate: mean $\pm 2\sigma$ (empirical)")
        s_fix, s_iid = np.sqrt(c["var_fixed"][:, v]), np.sqrt(c["var_iid"][:, v])
        ax.axhline(t, color="k", ls="--", lw=1)
        ax.plot(eps, t + 2 * s_fix, "k--", lw=1, label=r"theory $\pm 2\sigma$ (App. G, fixed population)")
        ax.plot(eps, t - 2 * s_fix, "k--", lw=1)
        ax.plot(eps, t + 2 * s_iid, color="grey", ls=":", lw=1, label=r"$\pm 2\sigma$ iid form $t(1-t)$")
        ax.plot(eps, t - 2 * s_iid, color="grey", ls=":", lw=1)
        ax.set_xlabel(r"$\epsilon$")
        ax.set_ylabel(f"estimated frequency of value {v + 1}")
        ax.set_xticks(eps)
        ax.legend(fontsize=7, loc="upper right")
        _panel_label(ax, f"({letters[v]}) value {v + 1}: truth {t:.4f} ({c['counts'][v]}/{c['n']})")
        ax.grid(alpha=0.3)
    ax = axes.flat[5]
    _attack_panel(ax, rc["attacks"], eps, c["bound"], r"$\epsilon$ of the last output",
                  f"(f) inference error rates (uniform prior, {c['n_audit']} objects)", 0.012)
    ax.set_xticks(eps)
    ax.grid(alpha=0.3)
    fig.savefig(path)


# ---------------------------------------------------------------------------------------------- run

def run(out_dir: str | Path | None = None, reps: int = REPS, seed: int = SEED, *,
        write_json: bool = True) -> dict:
    """Both experiments, the tables, Figures 1-3 and the JSON; returns the result (``all_checks_pass``)."""
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 3:
        raise ValueError(f"reps must be an integer >= 3, got {reps!r}")
    out = Path(out_dir) if out_dir is not None else _common.RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    info = _common.machine_info()
    _common.print_machine(info)
    print(f"Paper experiments (arXiv 2401.13952, Sec. 6): {reps} repetitions, seed {seed} "
          f"(numpy Generator per repetition); checks allow {Z:g} standard errors\n", flush=True)
    checks = Checks()

    cf = closed_forms()
    report_closed_forms(cf, checks)

    t = time.perf_counter()
    b = binary_experiment(reps, seed)
    t_bin = time.perf_counter() - t
    rb = report_binary(b, checks)

    t = time.perf_counter()
    c = categorical_experiment(reps, seed)
    t_cat = time.perf_counter() - t
    rc = report_categorical(c, checks)

    figures = {"fig1": out / "paper_fig1.png", "fig2": out / "paper_fig2.png", "fig3": out / "paper_fig3.png"}
    plot_fig1(cf, figures["fig1"])
    plot_fig2(b, rb, figures["fig2"])
    plot_fig3(c, rc, figures["fig3"])

    failed = checks.failed
    by_table: dict[str, list[int]] = {}
    for ch in checks.items:
        tot = by_table.setdefault(ch["table"], [0, 0])
        tot[0] += 1
        tot[1] += ch["pass"]
    _common.print_table(["table", "checks", "passed", "verdict"],
                        [[k, v[0], v[1], _verdict(v[0] == v[1])] for k, v in by_table.items()],
                        title="Summary")
    for ch in failed:
        print(f"FAIL  {ch['table']} {ch['row']}: {ch['detail']}")
    print(("ALL CHECKS PASS" if not failed else f"{len(failed)} of {len(checks.items)} CHECKS FAILED")
          + f" ({len(checks.items)} checks)")
    for name, p in figures.items():
        print(f"figure {name}: {p}")
    elapsed = time.perf_counter() - t0
    result = {
        "benchmark": NAME,
        "machine": info,
        "config": {
            "paper": "arXiv 2401.13952, Sec. 6 (Figures 1-3)", "reps": reps, "seed": seed, "z": Z,
            "binary": {"ones": BIN_ONES, "zeros": BIN_ZEROS, "eps_alpha": EPS_ALPHA, "eps_beta": EPS_BETA,
                       "rounds": ROUNDS, "path": "eps_ns(1..10) (Eq. 65)",
                       "noisy_sampling": "permanent_response once, one noisy_sampling report per round"},
            "categorical": {"counts": list(CAT_COUNTS), "eps": list(CAT_EPS)},
            "variance_model": "fixed population (Appendix G; = Eq. 67 for m = 2); the iid t(1-t) form is "
                              "reported beside it and is larger by f(1-f)/n",
            "rng": "numpy.random.SeedSequence([seed, experiment]).spawn(reps), one Generator per repetition",
        },
        "figure1_closed_forms": cf,
        "binary": {
            "K": b["K"], "eps": b["eps"], "truth": b["truth"], "n": b["n"], "n_audit": b["n_audit"],
            "estimate_mean": rb["mean"], "estimate_sd": rb["sd"], "estimate_se": rb["se"],
            "var_empirical": rb["var_emp"], "var_fixed_eq67": b["var_fixed"], "var_iid": b["var_iid"],
            "z_mean": rb["z_mean"], "z_var_fixed": rb["z_var_fixed"], "z_var_iid": rb["z_var_iid"],
            "coverage_2sigma": rb["coverage_2sigma"],
            "noisy_sampling": {"alpha": b["alpha"], "beta": b["beta"],
                               "estimate_mean": rb["mean_noisy_sampling"],
                               "var_empirical": rb["var_noisy_sampling_emp"], "var_eq68": b["var_eq68"],
                               "z_var_eq68": rb["z_var_eq68"]},
            "attacks": {"attackers": list(ATTACKERS), "bound": b["bound"],
                        "error_rate_mean": rb["attacks"]["mean"], "error_rate_sd": rb["attacks"]["sd"],
                        "error_rate_se": rb["attacks"]["se"],
                        "leak_flags_any": rb["attacks"]["leak_flags_any"],
                        "leak_flags_per_attacker": rb["attacks"]["leak_flags_per_attacker"]},
            "seconds": t_bin,
        },
        "categorical": {
            "eps": c["eps"], "values": list(range(1, c["m"] + 1)), "truth": c["truth"], "n": c["n"],
            "n_audit": c["n_audit"],
            "estimate_mean": rc["mean"], "estimate_sd": rc["sd"], "estimate_se": rc["se"],
            "var_empirical": rc["var_emp"], "var_fixed_appendix_g": c["var_fixed"], "var_iid": c["var_iid"],
            "z_mean": rc["z_mean"], "z_var_fixed": rc["z_var_fixed"], "z_var_iid": rc["z_var_iid"],
            "coverage_2sigma": rc["coverage_2sigma"],
            "attacks": {"attackers": list(ATTACKERS), "bound": c["bound"],
                        "error_rate_mean": rc["attacks"]["mean"], "error_rate_sd": rc["attacks"]["sd"],
                        "error_rate_se": rc["attacks"]["se"],
                        "leak_flags_any": rc["attacks"]["leak_flags_any"],
                        "leak_flags_per_attacker": rc["attacks"]["leak_flags_per_attacker"]},
            "seconds": t_cat,
        },
        "checks": checks.items,
        "n_checks": len(checks.items),
        "n_failed": len(failed),
        "all_checks_pass": not failed,
        "figures": {k: str(p) for k, p in figures.items()},
        "elapsed_seconds": elapsed,
    }
    result = _tolist(result)
    if write_json:
        path = out / f"{NAME}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)
        result["json"] = str(path)
        print(f"results: {path}")
    print(f"({elapsed:.1f} s: binary {t_bin:.1f} s, categorical {t_cat:.1f} s)", flush=True)
    return result


def main(out_dir: str | Path | None = None, reps: int = REPS, seed: int = SEED) -> dict:
    """Entry point of ``python -m benchmarks paper_experiments``: the full run into benchmarks/results/."""
    return run(out_dir, reps, seed)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.paper_experiments",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=REPS,
                        help=f"repetitions (default {REPS}, as in the paper)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", default=None, help="output directory (default benchmarks/results/)")
    a = parser.parse_args()
    main(a.out, a.reps, a.seed)
