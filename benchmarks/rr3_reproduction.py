"""RR3 estimator variances against their formulas (docs/mechanisms-reference.md#rr3-and-the-graph-protocol-lpp; the
paper has no experiments).

*Variances*: for EWRR3 at its best ``p* = e/(e+2)`` and at the low branch ``1/(2e+1)``, EWRR5,
RR3†, RR3‡ (as used by LPP‡) and RR3♣, ``REPS`` runs of ``N`` users whose inputs are drawn iid from a
fixed distribution go through the production sampler (``rr3.perturb``) and the general estimator
``(counts/N) @ inv(P)``; the sample mean and variance of every coordinate are compared with the truth
and with ``rr3.estimator_covariance`` (a check passes when the mean is within 4 SE and the variance
within 4 relative SE ``sqrt(2/(R-1))``).  The paper's Eq. 27 (EWRRn variance) is shown beside the
corrected form: it is right only for n = 2.

*LPP‡ graph statistics*: per-item degree and weight estimates of a synthetic weighted bipartite graph
(their mean and spread over the runs), and the exact privacy level ``lpp_epsilon`` against the
paper's Lemma 2 and sequential composition ``eps1 + eps2``, confirmed by brute force over a grid of
edge weights (``ldp_epsilon`` of the stacked rows).

Run: ``python -m benchmarks.rr3_reproduction [--reps R] [--seed S]`` (results to
``benchmarks/results/rr3_reproduction.json`` and ``rr3_variances.png``).
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

from mechanisms import rr3

from . import _common

NAME = "rr3_reproduction"
SEED = 2212_03467
REPS = 20_000
N = 500
Z = 4.0


def _expit(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def configurations() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``(label, P, pi)`` of every mechanism measured."""
    e1 = math.exp(1.0)
    pi3 = np.array([0.5, 0.3, 0.2])
    pi5 = np.array([0.35, 0.25, 0.2, 0.12, 0.08])
    return [
        ("EWRR3 p*=e/(e+2), eps=1", rr3.ewrr_matrix(3, e1 / (e1 + 2)), pi3),
        ("EWRR3 low p=1/(2e+1), eps=1", rr3.ewrr_matrix(3, 1 / (2 * e1 + 1)), pi3),
        ("EWRR5 p=e^2/(e^2+4), eps=2", rr3.ewrr_matrix(5, math.exp(2) / (math.exp(2) + 4)), pi5),
        ("RR3dagger(0.7, 0.6)", rr3.rr3_dagger(0.7, 0.6), pi3),
        ("RR3ddagger LPP(eps1=1, eps2=1.5)", rr3.rr3_ddagger(_expit(1.0), _expit(1.5)),
         np.array([0.6, 0.25, 0.15])),
        ("RR3club(0.6, 0.8, 0.75)", rr3.rr3_club(0.6, 0.8, 0.75), pi3),
    ]


def paper_eq27(pi: np.ndarray, n: int, p: float, total: int) -> np.ndarray:
    d = n * p - 1
    return (1 - p + d * pi) * (p - d * pi) / (d * d * total)


def simulate(P: np.ndarray, pi: np.ndarray, reps: int, g) -> np.ndarray:
    k = P.shape[1]
    x = g.choice(k, size=reps * N, p=pi)
    y = rr3.perturb(x, P, g)
    counts = np.bincount(np.repeat(np.arange(reps), N) * k + y, minlength=reps * k).reshape(reps, k)
    return rr3.estimate(counts, P)


def graph_experiment(reps: int, g) -> dict:
    n, m, eps1, eps2 = 4000, 5, 1.0, 1.5
    edges = np.full((n, m), np.nan)
    has = g.random((n, m)) < np.array([0.1, 0.3, 0.5, 0.7, 0.2])
    edges[has] = np.clip(g.normal([0.6, -0.4, 0.0, 0.3, -0.8], 0.3, (n, m)), -1, 1)[has]
    runs = max(50, reps // 20)
    deg, wt = np.empty((runs, m)), np.empty((runs, m))
    for r in range(runs):
        est = rr3.graph_estimates(rr3.lpp_report(edges, m, eps1, eps2, g), n, m, eps1, eps2)
        deg[r], wt[r] = est.degree, est.weight
    k_true, w_true = has.sum(axis=0), np.nansum(edges, axis=0)
    return {"n": n, "m": m, "eps1": eps1, "eps2": eps2, "runs": runs, "epsilon": rr3.lpp_epsilon(eps1, eps2),
            "degree_true": k_true.tolist(), "degree_mean": deg.mean(0).tolist(),
            "degree_sd": deg.std(0, ddof=1).tolist(),
            "weight_true": w_true.tolist(), "weight_mean": wt.mean(0).tolist(),
            "weight_sd": wt.std(0, ddof=1).tolist(),
            "degree_z": ((deg.mean(0) - k_true) / (deg.std(0, ddof=1) / math.sqrt(runs))).tolist(),
            "weight_z": ((wt.mean(0) - w_true) / (wt.std(0, ddof=1) / math.sqrt(runs))).tolist()}


def privacy_table() -> list[dict]:
    rows = []
    weights = np.linspace(-1, 1, 401)
    for eps1 in (0.5, 1.0, 2.0):
        for eps2 in (0.5, 1.0, 2.0, 3.0):
            p1, q = _expit(eps1), _expit(eps2)
            q2 = (1 + weights) * q / 2 + (1 - weights) * (1 - q) / 2
            stacked = np.vstack([[p1, (1 - p1) / 2, (1 - p1) / 2],
                                 np.column_stack([np.full(weights.size, 1 - p1), p1 * q2, p1 * (1 - q2)])])
            rows.append({"eps1": eps1, "eps2": eps2, "exact": rr3.lpp_epsilon(eps1, eps2),
                         "brute_force": rr3.ldp_epsilon(stacked),
                         "paper_lemma2": math.log(2 * math.exp(eps1 + eps2) / (math.exp(eps2) + 1)),
                         "composition": eps1 + eps2})
    return rows


def plot(results: dict, path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 5), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    grid = np.linspace(0.05, 4.0, 80)
    pi = np.array([0.5, 0.3, 0.2])
    for label, pfun, color in (("p* = e/(e+2)", lambda e: e / (e + 2), "tab:green"),
                               ("low branch 1/(2e+1)", lambda e: 1 / (2 * e + 1), "tab:red")):
        v = [rr3.estimator_covariance(pi, rr3.ewrr_matrix(3, pfun(math.exp(x))), N)[0, 0] for x in grid]
        ax1.plot(grid, v, color=color, label=f"EWRR3 {label}: formula")
    for row in results["variances"]:
        if row["label"].startswith("EWRR3"):
            color = "tab:green" if "p*" in row["label"] else "tab:red"
            ax1.plot([1.0], [row["var_simulated"][0]], "o", color=color, mfc="none", ms=9,
                     label=f"simulated ({row['label'].split(',')[0]})")
    ax1.set_yscale("log")
    ax1.set_xlabel("epsilon")
    ax1.set_ylabel(f"Var(pi_hat_0), N = {N}, pi = (0.5, 0.3, 0.2)")
    ax1.set_title("EWRR3: the best p against the low branch (Theorem 2)")
    ax1.legend(fontsize=8)
    eps2 = np.linspace(0.0, 4.0, 200)
    for eps1, color in ((0.5, "tab:blue"), (1.0, "tab:orange"), (2.0, "tab:purple")):
        ax2.plot(eps2, [rr3.lpp_epsilon(eps1, e) for e in eps2], color=color, label=f"exact, eps1 = {eps1}")
        lemma2 = [math.log(2 * math.exp(eps1 + e) / (math.exp(e) + 1)) for e in eps2]
        ax2.plot(eps2, lemma2, "--", color=color, label=f"paper Lemma 2, eps1 = {eps1}")
        ax2.plot(eps2, eps1 + eps2, ":", color=color, alpha=0.6)
    ax2.set_xlabel("eps2")
    ax2.set_ylabel("privacy level of LPP‡")
    ax2.set_title("LPP‡: exact level, the paper's Lemma 2 (dashed), eps1 + eps2 (dotted)")
    ax2.legend(fontsize=8)
    fig.savefig(path, dpi=110)


def main(reps: int = REPS, seed: int = SEED) -> dict:
    start = time.perf_counter()
    info = _common.machine_info()
    _common.print_machine(info)
    streams = np.random.SeedSequence(seed).spawn(len(configurations()) + 1)
    variances, table = [], []
    for (label, P, pi), stream in zip(configurations(), streams):
        est = simulate(P, pi, reps, np.random.default_rng(stream))
        cov = rr3.estimator_covariance(pi, P, N)
        var_f = np.diag(cov)
        mean, var_s = est.mean(axis=0), est.var(axis=0, ddof=1)
        z_mean = (mean - pi) / np.sqrt(var_f / reps)
        z_var = (var_s / var_f - 1) / math.sqrt(2 / (reps - 1))
        paper = paper_eq27(pi, P.shape[0], float(P[0, 0]), N) if label.startswith("EWRR") else None
        ok = bool(np.abs(z_mean).max() < Z and np.abs(z_var).max() < Z)
        variances.append({"label": label, "pi": pi.tolist(), "mean": mean.tolist(),
                          "var_simulated": var_s.tolist(), "var_formula": var_f.tolist(),
                          "var_paper_eq27": None if paper is None else paper.tolist(),
                          "z_mean": z_mean.tolist(), "z_var": z_var.tolist(), "ok": ok})
        for i in range(pi.size):
            table.append([label if i == 0 else "", i, f"{pi[i]:.3f}", f"{mean[i]:.4f}", f"{var_s[i]:.3e}",
                          f"{var_f[i]:.3e}", f"{var_s[i] / var_f[i]:.3f}",
                          "" if paper is None else f"{paper[i]:.3e}",
                          f"{z_mean[i]:+.2f}", f"{z_var[i]:+.2f}"])
    _common.print_table(["mechanism", "i", "pi_i", "mean pi_hat", "Var sim", "Var formula", "ratio",
                         "paper Eq.27", "z mean", "z var"], table,
                        title=f"\nEstimator variances: {reps} runs of N = {N} iid users (4-SE checks)")
    graph = graph_experiment(reps, np.random.default_rng(streams[-1]))
    rows = [[j, graph["degree_true"][j], f"{graph['degree_mean'][j]:.1f}", f"{graph['degree_sd'][j]:.1f}",
             f"{graph['degree_z'][j]:+.2f}", f"{graph['weight_true'][j]:.1f}",
             f"{graph['weight_mean'][j]:.1f}",
             f"{graph['weight_sd'][j]:.1f}", f"{graph['weight_z'][j]:+.2f}"] for j in range(graph["m"])]
    _common.print_table(["item", "k true", "k mean", "k sd", "z", "w true", "w mean", "w sd", "z"], rows,
                        title=f"LPP‡ degree and weight ({graph['runs']} runs, n = {graph['n']}, eps1 = "
                              f"{graph['eps1']}, eps2 = {graph['eps2']}, exact level {graph['epsilon']:.4f})")
    privacy = privacy_table()
    _common.print_table(["eps1", "eps2", "exact", "brute force", "paper Lemma 2", "eps1+eps2"],
                        [[r["eps1"], r["eps2"], f"{r['exact']:.4f}", f"{r['brute_force']:.4f}",
                          f"{r['paper_lemma2']:.4f}", f"{r['composition']:.1f}"] for r in privacy],
                        title="LPP‡ privacy level (the paper's Lemma 2 is too low whenever eps2 exceeds it)")
    results = {"machine": info, "config": {"reps": reps, "N": N, "seed": seed}, "variances": variances,
               "graph": graph, "privacy": privacy, "all_checks_pass": all(v["ok"] for v in variances)
               and max(abs(z) for z in graph["degree_z"] + graph["weight_z"]) < Z
               and all(abs(r["exact"] - r["brute_force"]) < 1e-9 for r in privacy)}
    _common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    png = _common.RESULTS_DIR / "rr3_variances.png"
    plot(results, png)
    results["seconds"] = time.perf_counter() - start
    path = _common.write_results(NAME, results)
    print(f"all checks pass: {results['all_checks_pass']}; wrote {path} and {png} "
          f"in {results['seconds']:.1f} s")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=REPS)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    main(args.reps, args.seed)
