"""Reproduction of the ULDP paper's common-mechanism experiment
(docs/mechanisms-reference.md#utility-optimized-ldp-urr-urap-pum; paper Sec. 6, Fig. 5).

*Domain*, shaped like the paper's Foursquare Manhattan data: a 25 x 25 grid (k = 625 regions) over a
long, thin island (about 40 % of the cells are "water" with probability 0), check-ins concentrated
around a few hot spots, and 15 sensitive regions ("a hospital visited by at least ten users") drawn
among the island cells; n = 179,527 users drawn iid from the distribution each repetition (the
model of Props. 4, 7, 15 and 18; the paper sampled half of the population).

*Mechanisms* across eps from 0.1 to 10: k-RR and RAPPOR (uRR and uRAP with every value sensitive, the
reference's reductions), uRR and uRAP with the 15 sensitive regions, and no privacy (the empirical
distribution).  *Estimators*: emp (Eqs. 35/41), emp+thr (Bonferroni, alpha = 0.05) and EM
(initialised with emp+thr; at most ``EM_MAX_ITER`` iterations, tolerance 1e-9).  RAPPOR's EM is not
run: every one of its reports is a distinct 625-bit pattern, so one EM iteration costs n x 625
operations (the paper reports 5225 s for its RAPPOR EM); its emp+thr is shown instead, which the
paper found "very close" to EM.

*Errors*: TV = l1/2 and MSE = l2^2/k against the true distribution, averaged over the repetitions,
and for emp the theory: the exact MSE (Props. 15/18, ``uldp.expected_l2``) and the asymptotic TV
(Props. 4/7, ``uldp.expected_l1``).  The reference's hand-worked worst-case TV at eps = ln k for the
Foursquare sizes (uRR 0.0241, uRAP 0.0267, no privacy 0.0235) is printed from the same functions.

Run: ``python -m benchmarks.uldp_reproduction [--reps R] [--seed S]`` (results to
``benchmarks/results/uldp_reproduction.json`` and ``uldp_tv_mse.png``).  Every repetition draws
from its own ``numpy.random.Generator`` spawned from one ``SeedSequence``.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from mechanisms import uldp

from . import _common

NAME = "uldp_reproduction"
SEED = 1807_10460          # the paper's arXiv number
GRID = 25                  # 25 x 25 regions
K = GRID * GRID
N_SENSITIVE = 15
N_USERS = 179_527
EPS = (0.1, 0.5, 1.0, 2.0, 4.0, round(math.log(K), 6), 8.0, 10.0)
REPS = 2
EM_MAX_ITER = 1000
MECHANISMS = ("RR", "RAPPOR", "uRR", "uRAP")
ESTIMATORS = ("emp", "emp+thr", "EM")


def synthetic_domain(seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """``(p, sensitive)``: a Manhattan-like distribution over the 25 x 25 grid and 15 sensitive cells."""
    g = np.random.default_rng(seed)
    r, c = np.divmod(np.arange(K), GRID)
    # a thin island along the diagonal from (24, 3) to (0, 17): distance to that segment in cells
    a, b = np.array([24.0, 3.0]), np.array([0.0, 17.0])
    t = np.clip(((r - a[0]) * (b[0] - a[0]) + (c - a[1]) * (b[1] - a[1])) / np.sum((b - a) ** 2), 0, 1)
    dist = np.hypot(r - (a[0] + t * (b[0] - a[0])), c - (a[1] + t * (b[1] - a[1])))
    island = dist <= 4.0
    # hot spots: (row, col, width, weight)
    hot = [(20, 6, 2.0, 6.0), (13, 10, 2.5, 4.0), (6, 14, 2.0, 3.0), (17, 8, 1.5, 2.0)]
    w = 0.15 + sum(h * np.exp(-((r - y) ** 2 + (c - x) ** 2) / (2 * s * s)) for y, x, s, h in hot)
    w = np.where(island, w * g.lognormal(0.0, 0.5, K), 0.0)
    p = w / w.sum()
    sensitive = np.sort(g.choice(np.flatnonzero(island), N_SENSITIVE, replace=False))
    return p, sensitive


def _errors(p_hat: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    d = p_hat - p
    return float(np.abs(d).sum() / 2.0), float(np.dot(d, d) / p.size)


def run_one(p, sensitive, eps, g) -> tuple[dict, dict]:
    """One repetition at one eps: ``errors[mechanism][estimator] = (TV, MSE)`` and EM iteration counts."""
    all_values = np.arange(K)
    x = g.choice(K, N_USERS, p=p)
    out: dict = {"no privacy": {"emp": _errors(np.bincount(x, minlength=K) / N_USERS, p)}}
    iterations = {}
    for name in MECHANISMS:
        S = all_values if name in ("RR", "RAPPOR") else sensitive
        mech = "urr" if name in ("RR", "uRR") else "urap"
        reports = (uldp.urr_perturb if mech == "urr" else uldp.urap_perturb)(x, K, S, eps, g)
        emp = uldp.urr_estimate(reports, K, S, eps) if mech == "urr" else uldp.urap_estimate(reports, S, eps)
        thr = uldp.threshold_estimate(emp, N_USERS, S, eps, mechanism=mech)
        out[name] = {"emp": _errors(emp, p), "emp+thr": _errors(thr, p)}
        if name != "RAPPOR":
            res = uldp.em_estimate(reports, K, S, eps, max_iter=EM_MAX_ITER)
            out[name]["EM"] = _errors(res.p, p)
            iterations[name] = (res.iterations, res.converged)
        del reports
    return out, iterations


def theory(p, sensitive, eps) -> dict:
    """Expected TV (asymptotic) and MSE (exact) of emp for each mechanism and for no privacy."""
    res = {}
    for name in MECHANISMS + ("no privacy",):
        S = np.arange(K) if name in ("RR", "RAPPOR") else sensitive
        mech = {"RR": "urr", "uRR": "urr", "RAPPOR": "urap", "uRAP": "urap", "no privacy": "none"}[name]
        res[name] = {"TV": uldp.expected_l1(p, S, eps, N_USERS, mech) / 2,
                     "MSE": uldp.expected_l2(p, S, eps, N_USERS, mech) / K}
    return res


def foursquare_worst_case() -> dict:
    """The reference's hand-worked worst-case TV at eps = ln k (k = 625, |S| = 15, n = 179,527)."""
    k, s, n = 625, 15, 179_527
    eps = math.log(k)
    e, N = math.exp(eps), k - s
    p_star = np.r_[np.full(s, (1 - N / (e - 1)) / k), np.full(N, (1 + s / (e - 1)) / k)]  # Prop. 6
    p_un = np.r_[np.zeros(s), np.full(N, 1 / N)]  # Prop. 8
    S = list(range(s))
    return {"uRR": uldp.expected_l1(p_star, S, eps, n, "urr") / 2,
            "uRAP": uldp.expected_l1(p_un, S, eps, n, "urap") / 2,
            "no privacy": uldp.expected_l1(np.full(k, 1 / k), S, eps, n, "none") / 2,
            "spec": {"uRR": 0.0241, "uRAP": 0.0267, "no privacy": 0.0235}}


def plot(results: dict, path: Path) -> None:
    from matplotlib.figure import Figure  # no pyplot: no global state, no display backend

    eps = [r["eps"] for r in results["per_eps"]]
    colors = {"RR": "tab:blue", "RAPPOR": "tab:orange", "uRR": "tab:green", "uRAP": "tab:red",
              "no privacy": "black"}
    fig = Figure(figsize=(13, 5), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    for name in MECHANISMS + ("no privacy",):
        best = "EM" if name not in ("RAPPOR", "no privacy") else ("emp+thr" if name == "RAPPOR" else "emp")
        tv = [r["simulated"][name][best]["TV"] for r in results["per_eps"]]
        ax1.plot(eps, tv, "o-", color=colors[name], label=f"{name} ({best})")
        if name != "no privacy":
            ax1.plot(eps, [r["simulated"][name]["emp"]["TV"] for r in results["per_eps"]], ":",
                     color=colors[name], alpha=0.7, label=f"{name} (emp)")
        mse_sim = [r["simulated"][name]["emp"]["MSE"] for r in results["per_eps"]]
        mse_th = [r["theory"][name]["MSE"] for r in results["per_eps"]]
        ax2.plot(eps, mse_th, "-", color=colors[name],
                 label=f"{name}: (1 - sum p^2)/(n k)" if name == "no privacy" else f"{name}: Prop. 15/18")
        ax2.plot(eps, mse_sim, "o", color=colors[name], mfc="none")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.axvline(math.log(K), color="grey", lw=2, alpha=0.4)
        ax.set_xlabel("epsilon (grey line: ln |X|)")
    ax1.set_ylabel("total variation")
    ax1.set_title(f"eps vs TV, k = {K}, |S| = {N_SENSITIVE}, n = {N_USERS:,}")
    ax1.legend(fontsize=7, ncol=2)
    ax2.set_ylabel("MSE of emp (l2^2 / k)")
    ax2.set_title("emp: simulated (circles) against the exact expected MSE (lines)")
    ax2.legend(fontsize=7)
    fig.savefig(path, dpi=110)


def main(reps: int = REPS, seed: int = SEED) -> dict:
    start = time.perf_counter()
    info = _common.machine_info()
    _common.print_machine(info)
    p, sensitive = synthetic_domain(seed)
    print(f"domain: k = {K} ({(p > 0).sum()} cells with mass), |S| = {sensitive.size}, n = {N_USERS:,}, "
          f"{reps} repetition(s) per eps, EM at most {EM_MAX_ITER} iterations", flush=True)
    streams = np.random.SeedSequence(seed).spawn(len(EPS) * reps)
    per_eps = []
    for i, eps in enumerate(EPS):
        t0 = time.perf_counter()
        runs, iters = [], []
        for r in range(reps):
            out, it = run_one(p, sensitive, eps, np.random.default_rng(streams[i * reps + r]))
            runs.append(out)
            iters.append(it)
        simulated = {name: {est: {"TV": float(np.mean([run[name][est][0] for run in runs])),
                                  "MSE": float(np.mean([run[name][est][1] for run in runs]))}
                            for est in runs[0][name]} for name in runs[0]}
        em = {name: {"iterations": [it[name][0] for it in iters], "converged": [it[name][1] for it in iters]}
              for name in iters[0]}
        per_eps.append({"eps": eps, "simulated": simulated, "theory": theory(p, sensitive, eps), "em": em,
                        "seconds": time.perf_counter() - t0})
        print(f"  eps = {eps:g}: {time.perf_counter() - t0:.1f} s", flush=True)

    headers = ["eps"] + list(MECHANISMS) + ["no privacy"]
    best = {"RR": "EM", "RAPPOR": "emp+thr", "uRR": "EM", "uRAP": "EM", "no privacy": "emp"}
    rows = [[f"{r['eps']:g}"] + [f"{r['simulated'][m][best[m]]['TV']:.4f}" for m in headers[1:]]
            for r in per_eps]
    _common.print_table(headers, rows,
                        title="\nTV (RR, uRR, uRAP: EM; RAPPOR: emp+thr; no privacy: empirical)")
    rows = [[f"{r['eps']:g}"] + [f"{r['simulated'][m]['emp+thr']['TV']:.4f}" for m in MECHANISMS]
            for r in per_eps]
    _common.print_table(headers[:-1], rows, title="TV with emp+thr")
    rows = [[f"{r['eps']:g}"] + [f"{r['simulated'][m]['emp']['TV']:.4g} / {r['theory'][m]['TV']:.4g}"
                                 for m in headers[1:]] for r in per_eps]
    _common.print_table(headers, rows, title="TV of emp: simulated / theory (Props. 4/7, asymptotic)")
    rows = [[f"{r['eps']:g}"] + [f"{r['simulated'][m]['emp']['MSE']:.3e} / {r['theory'][m]['MSE']:.3e}"
                                 for m in headers[1:]] for r in per_eps]
    _common.print_table(headers, rows, title="MSE of emp: simulated / exact theory (Props. 15/18)")
    rows = [[f"{r['eps']:g}"] + [f"{r['simulated'][m]['EM']['MSE']:.3e}" for m in ("RR", "uRR", "uRAP")]
            + [f"{max(r['em'][m]['iterations'])}{'' if all(r['em'][m]['converged']) else '*'}"
               for m in ("RR", "uRR", "uRAP")] for r in per_eps]
    _common.print_table(["eps", "RR MSE", "uRR MSE", "uRAP MSE", "RR iters", "uRR iters", "uRAP iters"], rows,
                        title=f"EM: MSE and iterations (* = stopped at {EM_MAX_ITER} before the tolerance)")
    worst = foursquare_worst_case()
    print("Worst-case TV at eps = ln 625, Foursquare sizes "
          "(spec: uRR 0.0241, uRAP 0.0267, no privacy 0.0235): "
          f"uRR {worst['uRR']:.4f}, uRAP {worst['uRAP']:.4f}, no privacy {worst['no privacy']:.4f}")
    ratio = {m: np.mean([r["simulated"][m]["emp"]["MSE"] / r["theory"][m]["MSE"] for r in per_eps])
             for m in headers[1:]}
    print("mean simulated/theory MSE ratio of emp: " + ", ".join(f"{m} {v:.3f}" for m, v in ratio.items()))

    _common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    png = _common.RESULTS_DIR / "uldp_tv_mse.png"
    config = {"k": K, "sensitive": sensitive.tolist(), "n": N_USERS, "eps": list(EPS), "reps": reps,
              "seed": seed, "em_max_iter": EM_MAX_ITER, "cells_with_mass": int((p > 0).sum())}
    results = {"machine": info, "config": config,
               "distribution": p.tolist(), "per_eps": per_eps, "foursquare_worst_case_tv": worst,
               "mse_ratio_simulated_over_theory": ratio, "seconds": time.perf_counter() - start}
    plot(results, png)
    path = _common.write_results(NAME, results)
    print(f"wrote {path} and {png} in {time.perf_counter() - start:.1f} s")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=REPS)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    main(args.reps, args.seed)
