"""Server-rendered SVG charts of a purchase's estimate (docs/buyers.md#a-purchase), like the owner portal's:
hand-written SVG, no JavaScript, styled by class from the static CSS (no inline style: ldpmarket/csp.py).

* frequencies (categorical, binary, three states, ...): one bar per label, its 95% confidence interval as an
  error bar; the axis covers the intervals, which can leave [0, 1] (the unbiased estimate is not clipped);
* a mean (numeric): the estimate as a dot on the attribute's range, its interval as an error bar;
* bits (strings): one bar per Bloom bit, with its interval.
"""
from __future__ import annotations

import math

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

#: At most this many bars are drawn (strings have up to hundreds of bits; the table below the chart has them all).
MAX_BARS = 64


def _num(x: float) -> str:
    """A short, plain label for an axis tick or a value."""
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if x != 0 else "0"


def _nice_step(span: float, ticks: int = 4) -> float:
    raw = span / ticks if span > 0 else 1.0
    power = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * power:
            return m * power
    return 10 * power  # pragma: no cover - m = 10 always matches


def _frame(lo: float, hi: float) -> tuple[float, float, float]:
    """A tick step and the axis' ends (multiples of it) covering ``[lo, hi]``."""
    step = _nice_step(hi - lo)
    return step, math.floor(lo / step) * step, math.ceil(hi / step) * step


def _svg_open(uid: str, width: int, height: int, title: str, description: str) -> list[str]:
    return [f'<svg class="chart estimate-chart" viewBox="0 0 {width} {height}" role="img" '
            f'aria-labelledby="{uid}-title {uid}-desc" xmlns="http://www.w3.org/2000/svg">',
            f'<title id="{uid}-title">{escape(title)}</title>', f'<desc id="{uid}-desc">{escape(description)}</desc>']


def frequencies_svg(rows: list[dict], *, uid: str = "estimate", title: str = "Estimated frequencies",
                    width: int = 720, height: int = 260) -> SafeString:
    """Bars of ``rows`` (``label``, ``estimate``, ``ci95_low``, ``ci95_high``) with their intervals; a consistent
    estimate has none (``None``: docs/mechanisms-reference.md#consistent-estimates) and is drawn without them."""
    rows = rows[:MAX_BARS]
    if not rows:
        return mark_safe("")
    rows = [r if r.get("ci95_low") is not None else {**r, "ci95_low": r["estimate"], "ci95_high": r["estimate"],
                                                     "no_interval": True} for r in rows]
    lo = min([0.0] + [r["ci95_low"] for r in rows])
    hi = max([1.0 if max(r["ci95_high"] for r in rows) > 0.5 else 0.5] + [r["ci95_high"] for r in rows])
    step, lo, hi = _frame(lo, hi)
    left, right, upper, lower = 48, 12, 12, 44
    plot_w, plot_h = width - left - right, height - upper - lower

    def y(v: float) -> float:
        return round(upper + (hi - v) / (hi - lo) * plot_h, 1)

    desc = "; ".join(f"{r['label']}: {r['estimate']:.3f}" + ("" if r.get("no_interval") else
                     f" (95% interval {r['ci95_low']:.3f} to {r['ci95_high']:.3f})") for r in rows)
    parts = _svg_open(uid, width, height, title, desc)
    v = lo
    while v <= hi + step / 1e6:
        parts.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y(v)}" y2="{y(v)}"/>')
        parts.append(f'<text class="tick" x="{left - 6}" y="{y(v) + 4}" text-anchor="end">{_num(round(v, 6))}</text>')
        v += step
    parts.append(f'<line class="zero" x1="{left}" x2="{width - right}" y1="{y(0)}" y2="{y(0)}"/>')
    slot = plot_w / len(rows)
    bar = max(min(slot * 0.6, 80), 2)
    for i, r in enumerate(rows):
        cx = left + slot * (i + 0.5)
        top, bottom = sorted((y(r["estimate"]), y(0)))
        label = f"{r['label']}: estimate {r['estimate']:.4f}" + ("" if r.get("no_interval") else
                                                                 f", 95% interval {r['ci95_low']:.4f} to "
                                                                 f"{r['ci95_high']:.4f}")
        parts.append(f'<rect class="bar" x="{round(cx - bar / 2, 1)}" y="{top}" width="{round(bar, 1)}" '
                     f'height="{round(max(bottom - top, 0.5), 1)}"><title>{escape(label)}</title></rect>')
        if not r.get("no_interval"):
            y1, y2 = y(r["ci95_low"]), y(r["ci95_high"])
            cap = min(bar / 3, 10)
            parts.append(f'<g class="error-bar"><line x1="{round(cx, 1)}" x2="{round(cx, 1)}" y1="{y1}" '
                         f'y2="{y2}"/><line x1="{round(cx - cap, 1)}" x2="{round(cx + cap, 1)}" y1="{y1}" y2="{y1}"/>'
                         f'<line x1="{round(cx - cap, 1)}" x2="{round(cx + cap, 1)}" y1="{y2}" y2="{y2}"/></g>')
        if len(rows) <= 24:
            text = str(r["label"])
            text = text if len(text) <= 14 else text[:13] + "…"
            parts.append(f'<text class="tick" x="{round(cx, 1)}" y="{height - lower + 16}" '
                         f'text-anchor="middle">{escape(text)}</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))


def mean_svg(mean: dict, *, low: float, high: float, uid: str = "estimate-mean", title: str = "Estimated mean",
             width: int = 720, height: int = 110) -> SafeString:
    """The mean (``estimate``, ``ci95_low``, ``ci95_high``) as a dot on ``[low, high]`` with its interval (none for
    a consistent estimate, whose interval is ``None``)."""
    interval = mean.get("ci95_low") is not None
    if not interval:
        mean = {**mean, "ci95_low": mean["estimate"], "ci95_high": mean["estimate"]}
    lo = min(low, mean["ci95_low"])
    hi = max(high, mean["ci95_high"])
    step, lo, hi = _frame(lo, hi)
    left, right, mid = 24, 24, 46

    def x(v: float) -> float:
        return round(left + (v - lo) / (hi - lo) * (width - left - right), 1)

    desc = (f"Mean {mean['estimate']:.4g}, " + (f"95% interval {mean['ci95_low']:.4g} to {mean['ci95_high']:.4g}, "
                                                 if interval else "") +
            f"on the attribute's range {_num(low)} to {_num(high)}.")
    parts = _svg_open(uid, width, height, title, desc)
    parts.append(f'<rect class="range" x="{x(low)}" y="{mid - 14}" width="{max(x(high) - x(low), 1)}" height="28">'
                 f'<title>The attribute\'s range, {escape(_num(low))} to {escape(_num(high))}</title></rect>')
    v = lo
    while v <= hi + step / 1e6:
        parts.append(f'<line class="grid" x1="{x(v)}" x2="{x(v)}" y1="{mid - 24}" y2="{mid + 24}"/>')
        parts.append(f'<text class="tick" x="{x(v)}" y="{mid + 42}" text-anchor="middle">{_num(round(v, 6))}</text>')
        v += step
    a, b, m = x(mean["ci95_low"]), x(mean["ci95_high"]), x(mean["estimate"])
    if interval:
        parts.append(f'<g class="error-bar"><line x1="{a}" x2="{b}" y1="{mid}" y2="{mid}"/>'
                     f'<line x1="{a}" x2="{a}" y1="{mid - 9}" y2="{mid + 9}"/>'
                     f'<line x1="{b}" x2="{b}" y1="{mid - 9}" y2="{mid + 9}"/></g>')
    parts.append(f'<circle class="mean" cx="{m}" cy="{mid}" r="5"><title>{escape(desc)}</title></circle>')
    parts.append("</svg>")
    return mark_safe("".join(parts))
