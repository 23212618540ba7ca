"""Server-rendered SVG charts for the owner portal: ceiling and loss over time, and schedule previews.

Hand-written SVG (no JavaScript, no plotting library at request time).  The
ceiling is derived from the value's ledger: after a "ceiling set" entry it is
that fixed ceiling; after a "schedule set" entry it follows the schedule
(``accounts.schedule.ceiling_micro``, exactly what the service materialises).
The loss is a step function through the releases' losses; when a value has
one-shot spending (one-shot releases, surveys), the chain's part of it is drawn
as a second, dotted line, so the band between the two is the one-shot part.
The part of the ceiling after "now" (a schedule still to run, or the ceiling in force if nothing changes) is
drawn dashed.  The time axis starts when the value was contributed and spans at least ``MIN_SPAN``, so a new
value's ceiling is a line across the chart rather than a dot at its right edge.  A light band under the ceiling
keeps it visible where the loss reaches it (an exhausted budget).  One-shot values have no chain, so their chart
has no chain part.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from accounts.epsilon import from_micro, to_micro
from accounts.models import LedgerEntry
from accounts.schedule import ceiling_micro

MIN_SPAN = timedelta(hours=1)
#: The ledger entries drawn as a release dot (docs/custody.md: an ``owner_upload`` carries an epsilon, the upload
#: level, but releases nothing and changes no loss).
RELEASE_KINDS = (LedgerEntry.Kind.CHAIN_RELEASE, LedgerEntry.Kind.ONESHOT_RELEASE)
MAX_STEP_POINTS = 400


@dataclass(frozen=True)
class Policy:
    fixed: Decimal | None = None
    start: Decimal | None = None
    cap: Decimal | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    shape: str = ""
    steps: int | None = None

    @classmethod
    def of_schedule(cls, s: dict) -> "Policy":
        return cls(start=s["start"], cap=s["cap"], start_at=s["start_at"], end_at=s["end_at"], shape=s["shape"],
                   steps=s["steps"])

    def at(self, t: datetime) -> Decimal:
        if self.fixed is not None:
            return self.fixed
        return from_micro(ceiling_micro(to_micro(self.start), to_micro(self.cap), self.start_at, self.end_at,
                                        self.shape, self.steps, t))

    def breakpoints(self, a: datetime, b: datetime) -> list[tuple[datetime, Decimal]]:
        """The ceiling over [a, b] as polyline points (steps drawn as vertical jumps)."""
        if self.fixed is not None:
            return [(a, self.fixed), (b, self.fixed)]
        times = {a, b}
        times.update(t for t in (self.start_at, self.end_at) if a < t < b)
        points = []
        d = int((self.end_at - self.start_at).total_seconds())
        if self.shape == "steps" and self.steps:
            boundaries = [self.start_at + timedelta(seconds=(j * d + self.steps - 1) // self.steps)
                          for j in range(1, self.steps + 1)]
            inside = [t for t in boundaries if a < t <= b]
            if len(inside) <= MAX_STEP_POINTS:
                for t in inside:
                    points.append((t, self.at(t - timedelta(seconds=1))))
                    times.add(t)
            else:  # too many steps to draw each: sample (visually the same at this size)
                n = MAX_STEP_POINTS
                times.update(a + (b - a) * i / n for i in range(1, n))
        points += [(t, self.at(t)) for t in times]
        points.sort(key=lambda p: (p[0], p[1]))
        return points


def ceiling_series(events, end: datetime) -> list[tuple[datetime, Decimal]]:
    """The ceiling from the first policy entry to ``end``, following each policy in force in turn."""
    policies = []
    for e in events:
        if e.kind == LedgerEntry.Kind.SCHEDULE and e.schedule:
            policies.append((e.at, Policy.of_schedule(e.schedule)))
        elif e.kind == LedgerEntry.Kind.CEILING:
            policies.append((e.at, Policy(fixed=e.ceiling)))
    points = []
    for i, (at, policy) in enumerate(policies):
        until = policies[i + 1][0] if i + 1 < len(policies) else end
        if until < at:
            continue
        points += policy.breakpoints(at, max(until, at))
    return points


def loss_series(events, end: datetime, part: str = "loss") -> list[tuple[datetime, Decimal]]:
    """The loss (``part``: ``loss``, or its ``chain_loss`` or ``oneshot_loss`` part) as a step function."""
    if not events:
        return []
    points = [(events[0].at, Decimal(0))]
    for e in events:
        v = getattr(e, part)
        if v != points[-1][1]:
            points += [(e.at, points[-1][1]), (e.at, v)]
    points.append((end, points[-1][1]))
    return points


def has_oneshot(events) -> bool:
    return any(getattr(e, "oneshot_loss", 0) > 0 for e in events)


def paused_spans(events, end: datetime) -> list[tuple[datetime, datetime]]:
    spans, since = [], None
    for e in events:
        if e.kind == LedgerEntry.Kind.PAUSE and since is None:
            since = e.at
        elif e.kind == LedgerEntry.Kind.RESUME and since is not None:
            spans.append((since, e.at))
            since = None
    if since is not None:
        spans.append((since, end))
    return spans


# ------------------------------------------------------------------------------------------------ drawing

def _nice_step(top: float, ticks: int = 4) -> float:
    raw = top / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def _eps(d) -> str:
    d = Decimal(d)
    s = format(d.normalize(), "f") if d != 0 else "0"
    return s


def _time_label(t: datetime, span: timedelta) -> str:
    t = timezone.localtime(t)
    if span <= timedelta(minutes=10):
        return t.strftime("%H:%M:%S")
    if span <= timedelta(days=2):
        return t.strftime("%H:%M")
    if span <= timedelta(days=120):
        return t.strftime("%-d %b")
    return t.strftime("%b %Y")


class _Frame:
    def __init__(self, t0: datetime, t1: datetime, top: float, width: int, height: int):
        self.t0, self.t1 = t0, t1
        self.span = max((t1 - t0).total_seconds(), 1.0)
        self.top = top
        self.w, self.h = width, height
        self.left, self.right, self.upper, self.lower = 46, 12, 12, 28

    def x(self, t: datetime) -> float:
        frac = (t - self.t0).total_seconds() / self.span
        return round(self.left + frac * (self.w - self.left - self.right), 1)

    def y(self, v) -> float:
        frac = float(v) / self.top
        return round(self.h - self.lower - frac * (self.h - self.lower - self.upper), 1)

    def path(self, points) -> str:
        return " ".join(f"{'M' if i == 0 else 'L'}{self.x(t)},{self.y(v)}" for i, (t, v) in enumerate(points))

    def axes(self) -> list[str]:
        out = []
        step = _nice_step(self.top)
        v = 0.0
        while v <= self.top + 1e-9:
            y = self.y(v)
            out.append(f'<line class="grid" x1="{self.left}" x2="{self.w - self.right}" y1="{y}" y2="{y}"/>')
            out.append(f'<text class="tick" x="{self.left - 6}" y="{y + 4}" text-anchor="end">'
                       f'{_eps(Decimal(str(round(v, 6))))}</text>')
            v += step
        span = self.t1 - self.t0
        for i in range(5):
            t = self.t0 + span * i / 4
            anchor = "start" if i == 0 else "end" if i == 4 else "middle"
            out.append(f'<text class="tick" x="{self.x(t)}" y="{self.h - 8}" text-anchor="{anchor}">'
                       f'{escape(_time_label(t, span))}</text>')
        out.append(f'<text class="axis-label" x="4" y="{self.upper + 2}">ε</text>')
        return out


def ceiling_loss_svg(events, *, now: datetime | None = None, uid: str = "chart", description: str = "",
                     width: int = 640, height: int = 220, chain: bool = True) -> SafeString:
    """The chart of a value's ceiling and loss over time, from its ledger events (oldest first).

    ``chain=False`` (one-shot values) draws no chain part of the loss.
    """
    now = now or timezone.now()
    if not events:
        return mark_safe("")
    t0 = events[0].at
    end = max(now, t0 + MIN_SPAN)
    last_policy = next((e for e in reversed(events) if e.kind in (LedgerEntry.Kind.CEILING,
                                                                  LedgerEntry.Kind.SCHEDULE)), None)
    if last_policy is not None and last_policy.schedule and last_policy.schedule["end_at"] > end:
        end = last_policy.schedule["end_at"]
    ceiling = ceiling_series(events, end)
    loss = loss_series(events, max(min(now, end), t0))
    top = max([float(v) for _, v in ceiling + loss] + [0.0])
    top = (_nice_step(top * 1.1) * 4) if top > 0 else 1.0
    f = _Frame(t0, end, top, width, height)
    title = "Ceiling and privacy loss over time"
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
             f'aria-labelledby="{uid}-title {uid}-desc" xmlns="http://www.w3.org/2000/svg">',
             f'<title id="{uid}-title">{escape(title)}</title>',
             f'<desc id="{uid}-desc">{escape(description)}</desc>']
    for a, b in paused_spans(events, min(now, end)):
        parts.append(f'<rect class="paused" x="{f.x(a)}" y="{f.upper}" width="{max(f.x(b) - f.x(a), 1)}" '
                     f'height="{f.h - f.lower - f.upper}"><title>Sales paused</title></rect>')
    parts += f.axes()
    if ceiling:
        # under the loss: where the loss reaches the ceiling, the ceiling still shows on both sides of it
        parts.append(f'<path class="ceiling-halo" d="{f.path(ceiling)}"/>')
    if loss:
        area = loss + [(loss[-1][0], Decimal(0)), (loss[0][0], Decimal(0))]
        parts.append(f'<path class="loss-area" d="{f.path(area)} Z"/>')
        if chain and has_oneshot(events):
            parts.append(f'<path class="chain-loss" d="{f.path(loss_series(events, loss[-1][0], "chain_loss"))}">'
                         f'<title>Chain part of the privacy spent (the rest is one-shot)</title></path>')
    if ceiling:
        xnow = f.x(now)
        parts.append(f'<clipPath id="{uid}-past"><rect x="0" y="0" width="{xnow}" height="{height}"/></clipPath>')
        parts.append(f'<clipPath id="{uid}-future"><rect x="{xnow}" y="0" width="{max(width - xnow, 0)}" '
                     f'height="{height}"/></clipPath>')
        d = f.path(ceiling)
        parts.append(f'<path class="ceiling" d="{d}" clip-path="url(#{uid}-past)"/>')
        parts.append(f'<path class="ceiling planned" d="{d}" clip-path="url(#{uid}-future)"/>')
    if loss:
        parts.append(f'<path class="loss" d="{f.path(loss)}"/>')
    for e in events:
        if e.kind in RELEASE_KINDS:  # not an owner's upload (it has an epsilon too, but releases nothing)
            how = " (one-shot)" if e.kind == LedgerEntry.Kind.ONESHOT_RELEASE else ""
            label = f"Released at ε {_eps(e.epsilon)}{how} on {timezone.localtime(e.at):%d %b %Y %H:%M}"
            parts.append(f'<circle class="release" cx="{f.x(e.at)}" cy="{f.y(e.loss)}" r="3.5">'
                         f'<title>{escape(label)}</title></circle>')
    if now < end:
        parts += _now_marker(f, now)
    parts.append("</svg>")
    return mark_safe("".join(parts))


def _now_marker(f: "_Frame", now: datetime) -> list[str]:
    x = f.x(now)
    anchor = "end" if x > f.w - f.right - 30 else "start"
    tx = x - 3 if anchor == "end" else x + 3
    return [f'<line class="now" x1="{x}" x2="{x}" y1="{f.upper}" y2="{f.h - f.lower}"/>',
            f'<text class="tick now-label" x="{tx}" y="{f.upper + 10}" text-anchor="{anchor}">now</text>']


# -------------------------------------------------------------------------------------- schedule preview

PREVIEW_FRACTIONS = (0, 0.1, 0.25, 0.5, 0.75, 1)
#: Schedules in at most this many steps are previewed step by step; longer ones at PREVIEW_FRACTIONS.
PREVIEW_MAX_STEPS = 12


def preview_rows(*, start: Decimal, cap: Decimal, start_at: datetime, end_at: datetime, shape: str,
                 steps: int | None) -> list[tuple[datetime, Decimal]]:
    """The ceilings a schedule gives, each once: at its start, then at every step (up to ``PREVIEW_MAX_STEPS``
    steps) or at 10%, 25%, 50%, 75% of its duration, and at its end.  A row whose ceiling is the previous row's
    is left out (it would say nothing new), except the end."""
    start_at, end_at = start_at.replace(microsecond=0), end_at.replace(microsecond=0)
    s, c = to_micro(start), to_micro(cap)
    if shape == "steps" and steps and steps <= PREVIEW_MAX_STEPS:
        d = int((end_at - start_at).total_seconds())
        times = [start_at] + [start_at + timedelta(seconds=(j * d + steps - 1) // steps) for j in range(1, steps + 1)]
    else:
        times = [start_at + (end_at - start_at) * frac for frac in PREVIEW_FRACTIONS]
    out: list[tuple[datetime, Decimal]] = []
    for i, t in enumerate(times):
        value = from_micro(ceiling_micro(s, c, start_at, end_at, shape, steps, t))
        if out and (value == out[-1][1] or t == out[-1][0]) and i < len(times) - 1:
            continue
        out.append((t, value))
    return out


def schedule_svg(*, start: Decimal, cap: Decimal, start_at: datetime, end_at: datetime, shape: str,
                 steps: int | None, loss: Decimal = Decimal(0), uid: str = "preview", width: int = 560,
                 height: int = 180) -> SafeString:
    """A preview of a schedule's ceiling from its start to its end, with the loss already spent."""
    policy = Policy(start=start, cap=cap, start_at=start_at.replace(microsecond=0),
                    end_at=end_at.replace(microsecond=0), shape=shape, steps=steps)
    points = policy.breakpoints(policy.start_at, policy.end_at)
    top = max(float(cap), float(loss), 0.0)
    top = (_nice_step(top * 1.1) * 4) if top > 0 else 1.0
    f = _Frame(policy.start_at, policy.end_at, top, width, height)
    desc = (f"The ceiling starts at ε {_eps(start)} and reaches ε {_eps(cap)} at the end, "
            f"{'linearly' if shape == 'linear' else f'in {steps} steps'}.")
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
             f'aria-labelledby="{uid}-title {uid}-desc" xmlns="http://www.w3.org/2000/svg">',
             f'<title id="{uid}-title">Preview of the schedule\'s ceiling</title>',
             f'<desc id="{uid}-desc">{escape(desc)}</desc>']
    parts += f.axes()
    if loss > 0:
        y = f.y(loss)
        parts.append(f'<line class="loss" x1="{f.left}" x2="{width - f.right}" y1="{y}" y2="{y}"/>')
    parts.append(f'<path class="ceiling" d="{f.path(points)}"/>')
    parts += _now_marker(f, policy.start_at)
    parts.append("</svg>")
    return mark_safe("".join(parts))
