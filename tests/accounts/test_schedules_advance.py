"""schedules_advance (what Celery beat runs): frozen time, set-based updates, and extension on commit."""
from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
import time_machine
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts import services as budget_services
from accounts.epsilon import from_micro
from accounts.models import BudgetAccount, LedgerEntry
from accounts.schedule import ceiling_micro
from accounts.services import Schedule, budget_set_ceiling, schedules_advance
from market.tasks import advance_schedules
from tests.factories import CategoricalAttributeFactory, chain_head, contribute, stored_chains
from tests.ledger_checks import hash_chain_problems

UTC = timezone.utc
T0 = datetime(2032, 6, 1, 12, 0, tzinfo=UTC)
D = Decimal
LINEAR = Schedule(start="0.3", cap="2.3", start_at=T0, end_at=T0 + timedelta(days=20))
STEPS = Schedule(start="0.2", cap="1.7", start_at=T0 + timedelta(days=1), end_at=T0 + timedelta(days=4),
                 shape="steps", steps=3)


def ceilings(values):
    return [BudgetAccount.objects.get(value=v).ceiling for v in values]


def expected_head(ceiling: Decimal) -> Decimal:
    """The last grid point (0.1, 0.2, ..., 10) at or below the ceiling (the grid start at least)."""
    return max(D("0.1"), (ceiling * 10).to_integral_value(rounding="ROUND_FLOOR") / 10)


def assert_chains_reach_the_grid_below_their_ceiling(attribute, values):
    stored = stored_chains(attribute)
    for v in values:
        budget = BudgetAccount.objects.get(value=v)
        head, points = chain_head(v)
        eps, out = stored[v.id]
        target = expected_head(budget.ceiling)
        assert head == target, (budget.ceiling, head)
        assert eps.tolist() == list(range(100_000, int(target * 10**6) + 1, 100_000))
        assert points == eps.size and out.shape == (eps.size, 1)


@pytest.fixture
def scheduled(categorical):
    """Three values on a linear schedule, two on a stepped one, one with a fixed ceiling."""
    with time_machine.travel(T0, tick=False):
        lin = contribute(categorical, ["red", "green", "blue"], prefix="lin", schedule=LINEAR)
        stp = contribute(categorical, ["red", "blue"], prefix="stp", schedule=STEPS)
        fixed = contribute(categorical, ["green"], prefix="fix", ceiling="0.4")
    return lin, stp, fixed


INSTANTS = [
    (timedelta(0), D("0.3"), D("0.2")),
    (timedelta(hours=12), D("0.35"), D("0.2")),
    (timedelta(days=1, hours=23, minutes=59, seconds=59), D("0.3") + from_micro(2_000_000 * 172_799 // 1_728_000),
     D("0.2")),
    (timedelta(days=2), D("0.5"), D("0.7")),
    (timedelta(days=3, seconds=1), D("0.6") + from_micro(2_000_000 // 1_728_000), D("1.2")),
    (timedelta(days=10), D("1.3"), D("1.7")),
    (timedelta(days=25), D("2.3"), D("1.7")),
]


def test_ceilings_rise_exactly_per_schedule_and_chains_follow(scheduled, categorical,
                                                              django_capture_on_commit_callbacks):
    lin, stp, fixed = scheduled
    for offset, want_lin, want_stp in INSTANTS:
        now = T0 + offset
        assert LINEAR.ceiling_at(now) == want_lin and STEPS.ceiling_at(now) == want_stp
        before = ceilings(lin + stp)
        with time_machine.travel(now, tick=False), django_capture_on_commit_callbacks(execute=True) as callbacks:
            raised = schedules_advance()
        after = ceilings(lin + stp)
        assert after == [want_lin] * 3 + [want_stp] * 2
        assert raised == sum(a > b for a, b in zip(after, before))
        assert bool(callbacks) == bool(raised)  # extension is enqueued (on commit) exactly when a ceiling rose
        assert ceilings(fixed) == [D("0.4")]
        assert_chains_reach_the_grid_below_their_ceiling(categorical, lin + stp + fixed)
    assert hash_chain_problems() == []


def test_ceilings_only_rise_even_if_the_clock_goes_back(scheduled):
    lin, stp, _ = scheduled
    with time_machine.travel(T0 + timedelta(days=10), tick=False):
        assert schedules_advance() == 5
    high = ceilings(lin + stp)
    for back in [timedelta(days=5), timedelta(days=-3), timedelta(days=9, hours=23)]:
        with time_machine.travel(T0 + back, tick=False):
            assert schedules_advance() == 0
        assert ceilings(lin + stp) == high
    with time_machine.travel(T0 + timedelta(days=10, seconds=1), tick=False):
        assert schedules_advance() == 3  # only the linear schedule still grows
    assert ceilings(lin + stp)[3:] == high[3:] and all(a > b for a, b in zip(ceilings(lin), high[:3]))


def test_schedules_advance_writes_no_ledger_entries_the_policy_is_already_recorded(scheduled):
    n = LedgerEntry.objects.count()
    with time_machine.travel(T0 + timedelta(days=3), tick=False):
        assert schedules_advance() == 5
    assert LedgerEntry.objects.count() == n


def test_schedules_advance_is_set_based(db):
    """The number of queries depends on the number of distinct schedules, not on the number of values."""
    def queries_for(n, prefix):
        attribute = CategoricalAttributeFactory()
        with time_machine.travel(T0, tick=False):
            contribute(attribute, ["red"] * n, prefix=prefix, schedule=LINEAR)
            contribute(attribute, ["blue"] * n, prefix=prefix + "s", schedule=STEPS)
        with time_machine.travel(T0 + timedelta(days=2), tick=False), CaptureQueriesContext(connection) as q:
            raised = schedules_advance()
        BudgetAccount.objects.filter(value__attribute=attribute).delete()  # leave the next round to itself
        return raised, len(q.captured_queries)

    raised_small, small = queries_for(3, "small")
    raised_big, big = queries_for(300, "big")
    assert (raised_small, raised_big) == (6, 600)
    assert big == small, f"{small} queries for 6 values but {big} for 600"
    assert big <= 12


def test_schedules_advance_never_overwrites_a_policy_changed_meanwhile(scheduled, monkeypatch, settings):
    """The owner switches one value to a fixed ceiling while the advance is running (after it read the groups):
    the set-based UPDATE matches on the schedule itself, so the new policy stands."""
    # The "concurrent" change runs here inside the advance's own transaction, which a real owner's never does:
    # the lock-order check (accounts.locks) would rightly see its ledger append before the advance's next locks.
    settings.LDP_CHECK_LOCK_ORDER = False
    lin, stp, _ = scheduled
    changed = lin[0]
    original = Schedule.ceiling_at
    calls = []

    def ceiling_at_with_a_concurrent_change(self, now):
        if not calls:
            budget_set_ceiling(value_id=changed.id, ceiling="0.31")
        calls.append(self)
        return original(self, now)

    monkeypatch.setattr(Schedule, "ceiling_at", ceiling_at_with_a_concurrent_change)
    with time_machine.travel(T0 + timedelta(days=10), tick=False):
        raised = schedules_advance()
    assert len(calls) == 2  # two distinct schedules, one UPDATE each
    assert raised == 4
    budget = BudgetAccount.objects.get(value=changed)
    assert budget.ceiling == D("0.31") and not budget.scheduled
    assert ceilings(lin[1:] + stp) == [D("1.3")] * 2 + [D("1.7")] * 2


def test_a_value_whose_schedule_was_replaced_follows_its_new_schedule(scheduled):
    lin, _, _ = scheduled
    slow = Schedule(start="0.3", cap="0.9", start_at=T0, end_at=T0 + timedelta(days=60))
    budget_services.budget_set_schedule(value_id=lin[2].id, schedule=slow, now=T0)
    with time_machine.travel(T0 + timedelta(days=30), tick=False):
        schedules_advance()
    assert ceilings(lin) == [D("2.3"), D("2.3"), D("0.6")]
    assert BudgetAccount.objects.get(value=lin[2]).ceiling == from_micro(
        ceiling_micro(300_000, 900_000, T0, T0 + timedelta(days=60), "linear", None, T0 + timedelta(days=30)))


def test_the_celery_task_and_the_command_advance_and_extend(scheduled, categorical,
                                                           django_capture_on_commit_callbacks):
    lin, stp, fixed = scheduled
    with time_machine.travel(T0 + timedelta(days=2), tick=False), django_capture_on_commit_callbacks(execute=True):
        assert advance_schedules.delay().get() == 5  # eager in the tests
    assert ceilings(lin + stp) == [D("0.5")] * 3 + [D("0.7")] * 2
    with time_machine.travel(T0 + timedelta(days=4), tick=False), django_capture_on_commit_callbacks(execute=True):
        out = io.StringIO()
        call_command("advance_schedules", stdout=out)
    assert "raised 5 ceilings" in out.getvalue()
    assert ceilings(lin + stp) == [D("0.7")] * 3 + [D("1.7")] * 2
    assert_chains_reach_the_grid_below_their_ceiling(categorical, lin + stp + fixed)
