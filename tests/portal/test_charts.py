"""The portal's charts: ceiling and loss derived from the ledger and the schedule, drawn as SVG."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from accounts.models import LedgerEntry
from market.values.owner_rows import Event
from portal import charts

UTC = timezone.utc
T0 = datetime(2031, 3, 1, tzinfo=UTC)
D = Decimal
K = LedgerEntry.Kind


def ev(i, kind, minutes, ceiling, loss="0", epsilon=None, schedule=None):
    return Event(id=i, kind=kind, at=T0 + timedelta(minutes=minutes), ceiling=D(ceiling), loss=D(loss),
                 epsilon=None if epsilon is None else D(epsilon), schedule=schedule)


def steps_schedule(start="1", cap="3", minutes=(10, 50), steps=4):
    return {"start": D(start), "cap": D(cap), "start_at": T0 + timedelta(minutes=minutes[0]),
            "end_at": T0 + timedelta(minutes=minutes[1]), "shape": "steps", "steps": steps}


def test_the_ceiling_follows_each_policy_in_turn():
    events = [ev(1, K.CEILING, 0, "1"), ev(2, K.SCHEDULE, 10, "1", schedule=steps_schedule()),
              ev(3, K.CEILING, 60, "5")]
    points = charts.ceiling_series(events, T0 + timedelta(minutes=90))
    at = lambda m: [v for t, v in points if t == T0 + timedelta(minutes=m)]  # noqa: E731
    assert at(0) == [D(1)] and at(10) == [D(1), D(1)]
    assert at(20) == [D(1), D("1.5")] and at(30) == [D("1.5"), D(2)] and at(40) == [D(2), D("2.5")]
    assert at(50) == [D("2.5"), D(3)]  # the last step lands on the end
    assert at(60) == [D(3), D(5)] and at(90) == [D(5)]
    assert [v for _, v in points] == sorted(v for _, v in points), "only rises here"
    assert all(a[0] <= b[0] for a, b in zip(points, points[1:]))


def test_a_linear_schedule_is_a_ramp_then_flat():
    s = {**steps_schedule(), "shape": "linear", "steps": None}
    points = charts.ceiling_series([ev(1, K.SCHEDULE, 10, "1", schedule=s)], T0 + timedelta(minutes=70))
    assert points == [(T0 + timedelta(minutes=10), D(1)), (T0 + timedelta(minutes=50), D(3)),
                      (T0 + timedelta(minutes=70), D(3))]


def test_very_many_steps_are_sampled():
    s = steps_schedule(steps=10000, minutes=(0, 60 * 24 * 30))
    points = charts.ceiling_series([ev(1, K.SCHEDULE, 0, "1", schedule=s)], T0 + timedelta(days=30))
    assert len(points) < 2 * charts.MAX_STEP_POINTS + 10 and points[-1][1] == D(3)


def test_the_loss_steps_up_at_each_release():
    events = [ev(1, K.CEILING, 0, "2"), ev(2, K.CHAIN_RELEASE, 5, "2", "0.5", "0.5"),
              ev(3, K.CHAIN_RELEASE, 7, "2", "0.5", "0.3"), ev(4, K.CHAIN_RELEASE, 9, "2", "1.2", "1.2")]
    points = charts.loss_series(events, T0 + timedelta(minutes=20))
    assert [v for _, v in points] == [0, 0, D("0.5"), D("0.5"), D("1.2"), D("1.2")]


def test_paused_spans():
    events = [ev(1, K.CEILING, 0, "2"), ev(2, K.PAUSE, 5, "2"), ev(3, K.RESUME, 8, "2"), ev(4, K.PAUSE, 12, "2")]
    end = T0 + timedelta(minutes=20)
    assert charts.paused_spans(events, end) == [(T0 + timedelta(minutes=5), T0 + timedelta(minutes=8)),
                                                (T0 + timedelta(minutes=12), end)]


def test_the_svg_draws_ceiling_loss_releases_and_the_planned_part():
    events = [ev(1, K.CEILING, 0, "1"), ev(2, K.CHAIN_RELEASE, 3, "1", "0.8", "0.8"),
              ev(3, K.SCHEDULE, 5, "1", "0.8", schedule=steps_schedule(minutes=(5, 600)))]
    svg = str(charts.ceiling_loss_svg(events, now=T0 + timedelta(minutes=30), uid="c1", description="d <&>"))
    assert svg.startswith('<svg class="chart"') and svg.endswith("</svg>")
    assert 'aria-labelledby="c1-title c1-desc"' in svg and "d &lt;&amp;&gt;" in svg
    assert svg.count('class="release"') == 1 and "Released at ε 0.8" in svg
    assert 'class="ceiling planned"' in svg and ">now<" in svg
    assert 'clip-path="url(#c1-past)"' in svg


def test_an_empty_history_draws_nothing():
    assert charts.ceiling_loss_svg([], uid="x") == ""


@pytest.mark.parametrize("span, label", [(timedelta(minutes=5), "12:00:00"), (timedelta(hours=5), "12:00"),
                                         (timedelta(days=30), "1 Mar"), (timedelta(days=400), "Mar 2031")])
def test_time_labels_suit_the_span(span, label):
    assert charts._time_label(T0 + timedelta(hours=12), span) == label


def test_the_schedule_preview_svg():
    svg = str(charts.schedule_svg(start=D("0.5"), cap=D("2"), start_at=T0, end_at=T0 + timedelta(days=3),
                                  shape="steps", steps=3, loss=D("0.4"), uid="p"))
    assert "in 3 steps" in svg and 'class="loss"' in svg and 'id="p-title"' in svg
