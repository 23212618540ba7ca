"""accounts.schedule: the exact integer schedule, its vectorized twin, and the Schedule value object.

Pure functions, no database.  The property tests compare against the exact rational schedule computed
with ``fractions.Fraction`` from the real elapsed time (microseconds included).
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounts.epsilon import MICRO
from accounts.schedule import ceiling_micro, ceilings_micro
from accounts.services import BudgetError, Schedule

UTC = timezone.utc
T0 = datetime(2030, 1, 1, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The documented range of ceilings_micro: epsilons up to 700, schedules up to 95 years.
MAX_SECONDS = 95 * 365 * 86400


def seconds(dt: datetime) -> int:
    return math.floor((dt - EPOCH).total_seconds())


def vectorized(start, cap, start_at, end_at, shape, steps, now) -> int:
    out = ceilings_micro([start], [cap], [seconds(start_at)], [seconds(end_at)],
                         [steps if shape == "steps" else 0], seconds(now))
    return int(out[0])


def exact(start, cap, start_at, end_at, shape, steps, now) -> Fraction:
    """The rational schedule at the real instant ``now`` (no rounding anywhere)."""
    d = Fraction((end_at - start_at) // timedelta(microseconds=1))
    e = min(max(Fraction((now - start_at) // timedelta(microseconds=1)), Fraction(0)), d)
    if shape == "steps":
        return start + (cap - start) * Fraction(math.floor(steps * e / d), steps)
    return start + (cap - start) * e / d


# ---------------------------------------------------------------------------------------------
# Worked examples at fixed instants
# ---------------------------------------------------------------------------------------------

LINEAR = dict(start=500_000, cap=2_500_000, start_at=T0, end_at=T0 + timedelta(days=10), shape="linear", steps=None)
STEPS = dict(start=1_000_000, cap=4_000_000, start_at=T0, end_at=T0 + timedelta(days=3), shape="steps", steps=3)


@pytest.mark.parametrize("now,expected", [
    (T0 - timedelta(days=5), 500_000),                      # before the start: the start
    (T0, 500_000),
    (T0 + timedelta(seconds=1), 500_000 + 2_000_000 // 864_000),  # floor(2e6 * 1 / 864000) = 2
    (T0 + timedelta(days=1), 700_000),                      # a tenth of the way: +0.2
    (T0 + timedelta(days=2, hours=12), 1_000_000),
    (T0 + timedelta(days=5), 1_500_000),
    (T0 + timedelta(days=9, seconds=86399, microseconds=999_999), 500_000 + (2_000_000 * 863_999) // 864_000),
    (T0 + timedelta(days=10), 2_500_000),                   # the cap at the end
    (T0 + timedelta(days=400), 2_500_000),                  # and ever after
])
def test_linear_schedule_at_fixed_instants(now, expected):
    assert ceiling_micro(now=now, **LINEAR) == expected
    assert vectorized(now=now, **LINEAR) == expected


@pytest.mark.parametrize("now,expected", [
    (T0 - timedelta(seconds=1), 1_000_000),
    (T0, 1_000_000),
    (T0 + timedelta(days=1) - timedelta(seconds=1), 1_000_000),  # the first step is not reached one second early
    (T0 + timedelta(days=1), 2_000_000),
    (T0 + timedelta(days=1, hours=23), 2_000_000),
    (T0 + timedelta(days=2), 3_000_000),
    (T0 + timedelta(days=3) - timedelta(microseconds=1), 3_000_000),
    (T0 + timedelta(days=3), 4_000_000),
    (T0 + timedelta(days=30), 4_000_000),
])
def test_stepped_schedule_at_fixed_instants(now, expected):
    assert ceiling_micro(now=now, **STEPS) == expected
    assert vectorized(now=now, **STEPS) == expected


def test_stepped_schedule_rounds_each_step_down():
    # (cap - start) = 1 micro over 3 steps: 1/3, 2/3 round down to 0; only the end reaches the cap.
    sched = dict(start=0, cap=1, start_at=T0, end_at=T0 + timedelta(seconds=3), shape="steps", steps=3)
    assert [ceiling_micro(now=T0 + timedelta(seconds=s), **sched) for s in range(5)] == [0, 0, 0, 1, 1]


def test_vectorized_evaluates_many_schedules_at_once():
    start = np.array([0, 500_000, 1_000_000, 2_000_000])
    cap = np.array([1_000_000, 2_500_000, 4_000_000, 2_000_000])
    start_s = np.full(4, seconds(T0))
    end_s = start_s + np.array([100, 864_000, 259_200, 10])
    steps = np.array([0, 0, 3, 7])
    now = T0 + timedelta(days=1)
    got = ceilings_micro(start, cap, start_s, end_s, steps, seconds(now))
    expected = [ceiling_micro(int(s), int(c), T0, T0 + timedelta(seconds=int(e - b)),
                              "steps" if k else "linear", int(k) or None, now)
                for s, c, b, e, k in zip(start, cap, start_s, end_s, steps)]
    assert got.tolist() == expected == [1_000_000, 700_000, 2_000_000, 2_000_000]


# ---------------------------------------------------------------------------------------------
# Properties (hypothesis)
# ---------------------------------------------------------------------------------------------

micro_eps = st.integers(min_value=0, max_value=700 * MICRO)
instants = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))


@st.composite
def schedules(draw):
    a, b = sorted(draw(st.tuples(micro_eps, micro_eps)))
    start_at = draw(instants).replace(microsecond=0)
    duration = draw(st.one_of(st.integers(1, 100), st.integers(1, MAX_SECONDS)))
    shape = draw(st.sampled_from(["linear", "steps"]))
    steps = draw(st.integers(1, 10_000)) if shape == "steps" else None
    return dict(start=a, cap=b, start_at=start_at, end_at=start_at + timedelta(seconds=duration), shape=shape,
                steps=steps)


def around(sched):
    """Instants before, inside and after the schedule, at microsecond resolution."""
    d = sched["end_at"] - sched["start_at"]
    return st.one_of(
        instants,
        st.floats(min_value=-0.5, max_value=1.5).map(lambda f: sched["start_at"] + d * f),
        st.integers(-3, 3).map(lambda k: sched["end_at"] + timedelta(microseconds=k)),
    )


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_vectorized_agrees_with_the_scalar_schedule(data):
    sched = data.draw(schedules())
    now = data.draw(around(sched))
    assert vectorized(now=now, **sched) == ceiling_micro(now=now, **sched)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_never_exceeds_the_exact_rational_schedule_and_stays_in_range(data):
    sched = data.draw(schedules())
    now = data.draw(around(sched))
    c = ceiling_micro(now=now, **sched)
    assert sched["start"] <= c <= sched["cap"]
    assert c <= exact(now=now, **sched)
    # and it is the floor of the exact value at the whole second (no more than one micro-epsilon lost to
    # rounding, on top of the fraction of a second not yet elapsed)
    whole = now.replace(microsecond=0) if now >= sched["start_at"] else now
    assert exact(now=whole, **sched) - 1 < c


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_monotone_in_time(data):
    sched = data.draw(schedules())
    t1, t2 = sorted([data.draw(around(sched)), data.draw(around(sched))])
    assert ceiling_micro(now=t1, **sched) <= ceiling_micro(now=t2, **sched)
    assert vectorized(now=t1, **sched) <= vectorized(now=t2, **sched)


@settings(max_examples=200, deadline=None)
@given(sched=schedules())
def test_starts_at_start_and_ends_at_cap(sched):
    assert ceiling_micro(now=sched["start_at"], **sched) == sched["start"]
    assert ceiling_micro(now=sched["end_at"], **sched) == sched["cap"]
    assert vectorized(now=sched["end_at"] + timedelta(days=1), **sched) == sched["cap"]


# ---------------------------------------------------------------------------------------------
# The Schedule value object (accounts.services)
# ---------------------------------------------------------------------------------------------

def test_schedule_parses_and_truncates():
    s = Schedule(start="0.5", cap=Decimal("2.5"), start_at=T0 + timedelta(microseconds=123),
                 end_at=T0 + timedelta(days=10, microseconds=999), shape="linear", steps=7)
    assert s.start == Decimal("0.500000") and s.cap == Decimal("2.500000")
    assert s.start_at == T0 and s.end_at == T0 + timedelta(days=10)
    assert s.steps is None  # a linear schedule has no steps
    assert s.ceiling_at(T0 + timedelta(days=5)) == Decimal("1.5")
    assert s.fields()["schedule_shape"] == "linear"


@pytest.mark.parametrize("kwargs,message", [
    (dict(start="2", cap="1"), "cap must be at least"),
    (dict(end_at=T0), "must end after it starts"),
    (dict(end_at=T0 + timedelta(microseconds=999_999)), "must end after it starts"),
    (dict(shape="exponential"), "linearly or in steps"),
    (dict(shape="steps", steps=None), "number of steps"),
    (dict(shape="steps", steps=0), "number of steps"),
    (dict(shape="steps", steps=10_001), "number of steps"),
    (dict(shape="steps", steps=2.5), "number of steps"),
])
def test_schedule_refuses_inconsistent_policies(kwargs, message):
    base = dict(start="0.5", cap="1.5", start_at=T0, end_at=T0 + timedelta(days=1), shape="linear", steps=None)
    with pytest.raises(BudgetError, match=message):
        Schedule(**{**base, **kwargs})


@pytest.mark.parametrize("bad", ["nan", "inf", "-1", "700.000001", "0.1234567", "abc", True])
def test_schedule_refuses_bad_epsilons(bad):
    with pytest.raises(ValueError):
        Schedule(start=bad, cap="800" if bad == "700.000001" else "1", start_at=T0, end_at=T0 + timedelta(days=1))


def test_every_accepted_schedule_is_evaluated_exactly_by_the_vectorized_form():
    """Schedule accepts any duration; ceilings_micro must then not overflow int64 silently.

    (c - s) * e overflows int64 once e > 2**63 / 7e8 seconds (about 417 years), while Schedule accepts
    schedules that end in year 9999.  Either Schedule refuses durations outside the documented range or the
    vectorized form must stay exact.
    """
    start_at, end_at = datetime(2000, 1, 1, tzinfo=UTC), datetime(2600, 1, 1, tzinfo=UTC)
    try:
        s = Schedule(start="0", cap="700", start_at=start_at, end_at=end_at)
    except BudgetError:
        return  # refusing such a schedule is a fine fix
    now = datetime(2550, 1, 1, tzinfo=UTC)
    args = dict(start=0, cap=700 * MICRO, start_at=s.start_at, end_at=s.end_at, shape="linear", steps=None)
    assert vectorized(now=now, **args) == ceiling_micro(now=now, **args)
