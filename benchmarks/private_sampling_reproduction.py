"""Reproduction of "Locally Private Sampling with Public Data" (seed 002;
docs/mechanisms-reference.md#private-sampling-with-a-public-prior).

*Synthetic experiment* (paper Sec. 5.2, Figure 2): alphabet n = 100, eps = 8, 10 runs.  Each run draws a
public prior ``q ~ U[0, 1]^n`` normalised; the owner's distribution ``p`` has first coordinate ``p1``
from 1/n to 1 and the rest equal.  For each ``p1`` we report the mean (and standard error over the runs)
of the gap between ``p`` and the sampling distribution of

* the minimax-optimal sampler: ``p @ K`` with ``K = optimal_kernel(q, eps)`` (TV and KL(p || pK));
* the relative mollifier (Husain et al.): the KL projection (``mollifier_kl``, for KL) and the TV
  projection (``mollifier_tv``, the paper's Appendix A.8 linear program, for TV).

The expectation of docs/mechanisms-reference.md: the mollifier wins for nearly uniform ``p``; the optimal sampler wins
once ``p1`` is above about 0.1 (KL) / 0.3 (TV).  Where exactly the curves cross depends on the draws of ``q_1`` (the
mollifier is exact while ``p1 <= q_1 e^(eps/2)``), so besides the paper's 10 runs we locate the crossovers
over 200 priors (TV projection by its closed form ``max(sum (p - hi)_+, sum (lo - p)_+)``, which the
10-run part checks against the linear program).

*Worst case* (Theorem 1 / Lemma 1): per run, ``Gamma_TV`` and ``Gamma_KL`` against the worst point mass
of each method -- the optimal sampler's worst case equals Gamma; the mollifier's is far larger.

*Sampling check*: ``sample`` (the releasing function) is drawn 200,000 times at three ``p1`` and its
histogram compared with ``p @ K`` by chi-square.  *Reference values*: the hand-worked kernel of
docs/mechanisms-reference.md and Example 1 (whose values the paper mislabels as worst-case risks).

Run: ``python -m benchmarks.private_sampling_reproduction [--runs 10] [--out DIR]``; results in
``benchmarks/results/``: ``private_sampling_reproduction.json`` and ``private_sampling_synthetic.png``.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from scipy import stats

from mechanisms.private_sampling import (
    kl,
    minimax_risk,
    mollifier_kl,
    mollifier_tv,
    optimal_kernel,
    output_distribution,
    randomized_response_kernel,
    sample,
    tv,
)

from . import _common

NAME = "private_sampling_reproduction"
SEED = 2025_02_002
N_ALPHABET, EPS, RUNS = 100, 8.0, 10
MANY_RUNS = 200
P1_GRID = np.concatenate([[1 / N_ALPHABET], np.round(np.arange(0.02, 1.0001, 0.02), 2)])
SAMPLE_DRAWS = 200_000


def user_distribution(p1: float, n: int = N_ALPHABET) -> np.ndarray:
    p = np.full(n, (1.0 - p1) / (n - 1))
    p[0] = p1
    return p


def tv_projection_value(p, q, eps) -> float:
    lo, hi = q * math.exp(-eps / 2), q * math.exp(eps / 2)
    return float(max(np.maximum(p - hi, 0).sum(), np.maximum(lo - p, 0).sum()))


def synthetic(runs: int, seed: int) -> dict:
    rng = np.random.default_rng([seed, 1])
    gaps = np.empty((runs, P1_GRID.size, 4))      # ours TV, mollifier TV (LP), ours KL, mollifier KL
    lp_vs_closed = 0.0
    worst = []
    for r in range(runs):
        q = rng.random(N_ALPHABET)
        q /= q.sum()
        for k, p1 in enumerate(P1_GRID):
            p = user_distribution(p1)
            o = output_distribution(p, q, EPS)
            r_tv = mollifier_tv(p, q, EPS)
            gaps[r, k] = [tv(p, o), tv(p, r_tv), kl(p, o), kl(p, mollifier_kl(p, q, EPS))]
            lp_vs_closed = max(lp_vs_closed, abs(gaps[r, k, 1] - tv_projection_value(p, q, EPS)))
        K = optimal_kernel(q, EPS)
        eye = np.eye(N_ALPHABET)
        worst.append({
            "q_min": float(q.min()), "q_1": float(q[0]),
            # at p1 = 1 (a point mass on symbol 0) formula (3) has no normalising C: the edge case in
            # docs/mechanisms-reference.md#private-sampling-with-a-public-prior
            "kl_edge_case_at_p1_1": bool(math.exp(EPS / 2) * q[0] + math.exp(-EPS / 2) * (1 - q[0]) < 1),
            "gamma_tv": minimax_risk(q, EPS, "tv"), "gamma_kl": minimax_risk(q, EPS, "kl"),
            "optimal_worst_tv": max(tv(e, e @ K) for e in eye),
            "optimal_worst_kl": max(kl(e, e @ K) for e in eye),
            "mollifier_worst_tv": max(tv_projection_value(e, q, EPS) for e in eye),
            "mollifier_worst_kl": max(kl(e, mollifier_kl(e, q, EPS)) for e in eye),
        })
    mean = gaps.mean(axis=0)
    se = gaps.std(axis=0, ddof=1) / math.sqrt(runs) if runs > 1 else np.zeros_like(mean)
    return {"gaps": gaps, "mean": mean, "se": se, "lp_vs_closed_form_max_abs_diff": lp_vs_closed,
            "worst": worst}


def crossover(p1: np.ndarray, ours: np.ndarray, moll: np.ndarray) -> float | None:
    """The p1 where ours - mollifier changes sign for good (linear interpolation), None if never."""
    diff = ours - moll
    wins = diff < 0
    if not wins[-1]:
        return None
    k = int(np.flatnonzero(~wins)[-1]) if (~wins).any() else -1
    if k < 0:
        return float(p1[0])
    a, b = diff[k], diff[k + 1]
    return float(p1[k] + (p1[k + 1] - p1[k]) * a / (a - b))


def many_priors(runs: int, seed: int) -> dict:
    """Crossovers over many priors (KL projection exact; TV by the closed form)."""
    rng = np.random.default_rng([seed, 2])
    grid = np.round(np.arange(0.01, 0.6001, 0.01), 2)
    acc = np.zeros((grid.size, 4))
    per_run = {"kl": [], "tv": []}
    curves = []
    for _ in range(runs):
        q = rng.random(N_ALPHABET)
        q /= q.sum()
        g = np.empty((grid.size, 4))
        for k, p1 in enumerate(grid):
            p = user_distribution(p1)
            o = output_distribution(p, q, EPS)
            g[k] = [tv(p, o), tv_projection_value(p, q, EPS), kl(p, o), kl(p, mollifier_kl(p, q, EPS))]
        acc += g
        curves.append(g)
        per_run["tv"].append(crossover(grid, g[:, 0], g[:, 1]))
        per_run["kl"].append(crossover(grid, g[:, 2], g[:, 3]))
    mean = acc / runs
    out = {"runs": runs, "p1": grid, "mean": mean,
           "crossover_of_means": {"tv": crossover(grid, mean[:, 0], mean[:, 1]),
                                  "kl": crossover(grid, mean[:, 2], mean[:, 3])}}
    batches = np.array(curves[: runs - runs % RUNS]).reshape(-1, RUNS, grid.size, 4).mean(axis=1)
    for key, (io, im) in (("tv", (0, 1)), ("kl", (2, 3))):      # the paper's design: means of 10 priors
        xs = [crossover(grid, b[:, io], b[:, im]) for b in batches]
        xs = np.array([x for x in xs if x is not None])
        out[f"crossover_of_{RUNS}_prior_batches_{key}"] = {
            "batches": int(batches.shape[0]), "median": float(np.median(xs)), "min": float(xs.min()),
            "max": float(xs.max())}
    for key in ("tv", "kl"):
        vals = np.array([v for v in per_run[key] if v is not None])
        out[f"crossover_per_prior_{key}"] = {"median": float(np.median(vals)),
                                             "quartiles": [float(np.quantile(vals, 0.25)),
                                                           float(np.quantile(vals, 0.75))],
                                             "never": int(sum(v is None for v in per_run[key]))}
    return out


def sampling_check(seed: int) -> list[dict]:
    rng = np.random.default_rng([seed, 3])
    q = rng.random(N_ALPHABET)
    q /= q.sum()
    rows = []
    for p1 in (1 / N_ALPHABET, 0.3, 1.0):
        p = user_distribution(p1)
        expected = output_distribution(p, q, EPS)
        draws = sample(np.tile(p, (SAMPLE_DRAWS, 1)), q, EPS, rng)
        counts = np.bincount(draws, minlength=N_ALPHABET)
        exp_counts = expected * SAMPLE_DRAWS
        stat = float(((counts - exp_counts) ** 2 / exp_counts).sum())
        rows.append({"p1": float(p1), "draws": SAMPLE_DRAWS, "chi2": stat, "dof": N_ALPHABET - 1,
                     "p_value": float(stats.chi2.sf(stat, N_ALPHABET - 1)),
                     "empirical_tv_to_pK": float(0.5 * np.abs(counts / SAMPLE_DRAWS - expected).sum())})
    return rows


def reference_values() -> list[list]:
    K = optimal_kernel([0.2, 0.3, 0.5], math.log(2))
    hand = np.array([[1 / 3, 1 / 4, 5 / 12], [1 / 6, 5 / 11, 25 / 66], [1 / 6, 5 / 22, 20 / 33]])
    p = np.array([0.05, 0.95])
    return [
        ["K(q=[.2,.3,.5], ln 2) max |K - hand-worked|", f"{np.abs(K - hand).max():.1e}", "0"],
        ["Gamma_TV(q=[.2,.3,.5], ln 2)", f"{minimax_risk([0.2, 0.3, 0.5], math.log(2), 'tv'):.6f}", "2/3"],
        ["Gamma_KL(q=[.2,.3,.5], ln 2)", f"{minimax_risk([0.2, 0.3, 0.5], math.log(2), 'kl'):.6f}",
         f"ln 3 = {math.log(3):.6f}"],
        ["Example 1: TV(p, pK_RR), eps 2", f"{tv(p, p @ randomized_response_kernel(2, 2.0)):.5f}", "0.10728"],
        ["Example 1: TV(p, pK_q), eps 2", f"{tv(p, p @ optimal_kernel([0.01, 0.99], 2.0)):.5f}", "0.03760"],
        ["Example 1: Gamma_TV(uniform, 2) (paper: 0.1)", f"{minimax_risk([0.5, 0.5], 2.0, 'tv'):.5f}",
         "mislabelled"],
        ["Example 1: Gamma_TV(q, 2) (paper: 0.03)", f"{minimax_risk([0.01, 0.99], 2.0, 'tv'):.5f}",
         "mislabelled"],
    ]


def plot(syn: dict, many: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.6), dpi=110, layout="constrained")
    axes = fig.subplots(1, 2)
    m, se = syn["mean"], syn["se"]
    panels = ((axes[0], (0, 1), "TV distance", "tv"), (axes[1], (2, 3), "KL(p || sampling)", "kl"))
    for ax, (io, im), label, key in panels:
        for idx, name, col in ((io, "minimax-optimal sampler (ours)", "tab:blue"),
                               (im, "relative mollifier", "tab:orange")):
            ax.plot(P1_GRID, m[:, idx], color=col, label=name)
            ax.fill_between(P1_GRID, m[:, idx] - se[:, idx], m[:, idx] + se[:, idx], color=col, alpha=0.25)
        x = many["crossover_of_means"][key]
        if x is not None:
            ax.axvline(x, color="grey", ls=":", lw=1)
            ax.text(x, ax.get_ylim()[1] * 0.6,
                    f" crossover of the means\n over {many['runs']} priors: {x:.2f}", fontsize=8, va="top")
        ax.set_xlabel(r"$p^1$ (first coordinate of the owner's distribution)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    runs = syn["gaps"].shape[0]
    for ax, what in zip(axes, ("TV", "KL")):
        ax.set_title(rf"{what}, n = {N_ALPHABET}, $\epsilon$ = {EPS:g}, {runs} runs (mean $\pm$ SE)",
                     fontsize=10)
    fig.savefig(path)


def _tolist(obj):
    if isinstance(obj, dict):
        return {k: _tolist(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_tolist(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def run(out_dir: str | Path | None = None, runs: int = RUNS, seed: int = SEED) -> dict:
    t0 = time.perf_counter()
    out = Path(out_dir) if out_dir else _common.RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    info = _common.machine_info()
    _common.print_machine(info)

    _common.print_table(["quantity", "computed", "spec"], reference_values(), title="Reference values",
                        align="lrr")

    syn = synthetic(runs, seed)
    m, se = syn["mean"], syn["se"]
    rows = []
    for k, p1 in enumerate(P1_GRID):
        if k % 5 and k not in (1, 2) and p1 not in (0.1, 0.3):
            continue
        rows.append([f"{p1:.2f}", f"{m[k, 0]:.4f} ± {se[k, 0]:.4f}", f"{m[k, 1]:.4f} ± {se[k, 1]:.4f}",
                     "ours" if m[k, 0] < m[k, 1] else "mollifier",
                     f"{m[k, 2]:.4f} ± {se[k, 2]:.4f}", f"{m[k, 3]:.4f} ± {se[k, 3]:.4f}",
                     "ours" if m[k, 2] < m[k, 3] else "mollifier"])
    _common.print_table(["p1", "TV ours", "TV mollifier (LP)", "TV winner", "KL ours", "KL mollifier",
                         "KL winner"], rows,
                        title=f"Synthetic experiment (paper Sec. 5.2): n = {N_ALPHABET}, eps = {EPS:g}, "
                              f"{runs} runs, mean ± SE")
    cross10 = {"tv": crossover(P1_GRID, m[:, 0], m[:, 1]), "kl": crossover(P1_GRID, m[:, 2], m[:, 3])}
    many = many_priors(MANY_RUNS, seed)
    fmt = lambda v: "never" if v is None else f"{v:.3f}"  # noqa: E731
    bkey = f"crossover_of_{RUNS}_prior_batches_"
    _common.print_table(
        ["metric", f"{runs} runs (paper)", f"{MANY_RUNS} priors: of means",
         f"{MANY_RUNS // RUNS} batches of {RUNS}: median [range]", "per prior: median [IQR]", "spec"],
        [[key.upper(), fmt(cross10[key]), fmt(many["crossover_of_means"][key]),
          f"{many[bkey + key]['median']:.3f} [{many[bkey + key]['min']:.3f}, {many[bkey + key]['max']:.3f}]",
          f"{many[f'crossover_per_prior_{key}']['median']:.3f} "
          f"[{many[f'crossover_per_prior_{key}']['quartiles'][0]:.3f}, "
          f"{many[f'crossover_per_prior_{key}']['quartiles'][1]:.3f}]", spec]
         for key, spec in (("kl", "about 0.1"), ("tv", "about 0.3"))],
        title="Crossover p1 (the optimal sampler is closer above it)")
    print("TV projection: linear program vs closed form, max |diff| = "
          f"{syn['lp_vs_closed_form_max_abs_diff']:.1e}")

    w = syn["worst"]
    _common.print_table(
        ["run", "q_min", "Gamma_TV", "ours worst TV", "mollifier worst TV", "Gamma_KL", "ours worst KL",
         "mollifier worst KL"],
        [[i + 1, f"{d['q_min']:.2e}", f"{d['gamma_tv']:.4f}", f"{d['optimal_worst_tv']:.4f}",
          f"{d['mollifier_worst_tv']:.4f}", f"{d['gamma_kl']:.4f}", f"{d['optimal_worst_kl']:.4f}",
          f"{d['mollifier_worst_kl']:.4f}"] for i, d in enumerate(w)],
        title="Worst case over owner distributions (point masses, Lemma 1): the optimal sampler attains "
              "Gamma")

    edge = sum(d["kl_edge_case_at_p1_1"] for d in w)
    print(f"KL mollifier at p1 = 1: no normalising constant C exists (the edge case the paper misses) in {edge} "
          f"of {len(w)} runs\n")

    checks = sampling_check(seed)
    _common.print_table(["p1", "draws", "chi2", "dof", "p-value", "TV(empirical, pK)"],
                        [[f"{c['p1']:.2f}", c["draws"], f"{c['chi2']:.1f}", c["dof"], f"{c['p_value']:.3f}",
                          f"{c['empirical_tv_to_pK']:.4f}"] for c in checks],
                        title="sample() against p @ K (chi-square)")

    png = out / "private_sampling_synthetic.png"
    plot(syn, many, png)
    print(f"figure: {png}")
    elapsed = time.perf_counter() - t0
    result = _tolist({
        "benchmark": NAME, "machine": info,
        "config": {"paper": "Zamanlooy, Diaz, Asoodeh, Locally Private Sampling with Public Data, Sec. 5.2",
                   "n": N_ALPHABET, "eps": EPS, "runs": runs, "many_priors": MANY_RUNS, "seed": seed,
                   "p1_grid": P1_GRID, "prior": "q ~ U[0,1]^n normalised, one per run",
                   "mollifier_kl": "exact KL projection (breakpoint solve)",
                   "mollifier_tv": "Appendix A.8 linear program, scipy HiGHS"},
        "reference_values": reference_values(),
        "synthetic": {"p1": P1_GRID, "columns": ["tv_ours", "tv_mollifier", "kl_ours", "kl_mollifier"],
                      "mean": m, "se": se, "per_run": syn["gaps"],
                      "lp_vs_closed_form_max_abs_diff": syn["lp_vs_closed_form_max_abs_diff"],
                      "crossover": cross10},
        "many_priors": many,
        "worst_case": w,
        "sampling_check": checks,
        "figure": str(png),
        "elapsed_seconds": elapsed,
    })
    path = out / f"{NAME}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    print(f"results: {path}  ({elapsed:.1f} s)", flush=True)
    return result


def main(out_dir: str | Path | None = None, runs: int = RUNS, seed: int = SEED) -> dict:
    """Entry point (``python -m benchmarks private_sampling_reproduction`` once registered)."""
    return run(out_dir, runs, seed)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.private_sampling_reproduction",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS,
                        help=f"priors in the synthetic experiment (default {RUNS})")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", default=None, help="output directory (default benchmarks/results/)")
    a = parser.parse_args()
    main(a.out, a.runs, a.seed)
