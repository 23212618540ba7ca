"""``ldpmarket-client estimate ID --plot out.png``: a purchase's estimate with its 95% confidence intervals
(docs/client.md#command-line).

Needs matplotlib (``pip install 'ldpmarket-client[plot]'``): this module, which imports it, is imported only
for ``--plot``.  Drawn with its Agg backend (no display, no pyplot state): per category (or Bloom bit) the
estimated frequency as a bar with its interval as an error bar; for a numeric attribute the mean as a point with
its interval.  A consistent estimate (``method`` norm_sub or ibu: biased, so without intervals) is drawn without
error bars, and says so.  :func:`estimate_figure` returns the figure, so that tests can read back what was drawn.
"""
from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


class NothingToPlot(ValueError):
    """An estimate with no frequencies, mean or bits (a graph estimate, say)."""


def estimate_figure(estimate: dict):
    """The estimate drawn on a new ``matplotlib.figure.Figure`` (Agg canvas) with one axes."""
    fig = Figure(figsize=(6.4, 4.8), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    title = f"Purchase {estimate.get('purchase')}: attribute {estimate.get('attribute')}, n = {estimate.get('n')}"
    method = estimate.get("method") or "unbiased"
    if method != "unbiased":
        title += f" ({method}: consistent, no intervals)"
    mean = estimate.get("mean")
    if estimate.get("kind") == "numeric" and mean:
        if mean.get("ci95_low") is None:
            ax.plot([0], [mean["estimate"]], "o", color="C0")
            ax.set_ylabel("mean")
        else:
            ax.errorbar([0], [mean["estimate"]], yerr=[[mean["estimate"] - mean["ci95_low"]],
                                                       [mean["ci95_high"] - mean["estimate"]]],
                        fmt="o", capsize=8, color="C0")
            ax.set_ylabel("mean, with its 95% confidence interval")
        ax.set_xticks([0], ["mean"])
        ax.set_xlim(-1, 1)
    else:
        rows = estimate.get("frequencies") or []
        names = [str(r["label"]) for r in rows]
        if not rows:
            rows = estimate.get("bits") or []
            names = [str(r["bit"]) for r in rows]
            ax.set_xlabel("Bloom bit")
        if not rows:
            raise NothingToPlot(f"the estimate of purchase {estimate.get('purchase')} has no frequencies, mean or "
                                "bits to plot")
        x = list(range(len(rows)))
        values = [r["estimate"] for r in rows]
        ax.bar(x, values, color="C0", alpha=0.6)
        if all(r.get("ci95_low") is not None for r in rows):
            ax.errorbar(x, values, yerr=[[v - r["ci95_low"] for v, r in zip(values, rows)],
                                         [r["ci95_high"] - v for v, r in zip(values, rows)]],
                        fmt="none", ecolor="black", capsize=4)
            ax.set_ylabel("frequency, with its 95% confidence interval")
        else:
            ax.set_ylabel("frequency")
        ax.set_xticks(x, names, rotation=45 if len(rows) > 8 else 0)
        ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_estimate(estimate: dict, path) -> Path:
    """Write the estimate's plot to ``path`` as PNG."""
    path = Path(path)
    estimate_figure(estimate).savefig(path, format="png")
    return path
