"""Budget rules (docs/budget-rules.md#budgets-and-ceilings): ceilings, schedules, pause/resume, and their ledger
entries."""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
import time_machine
from django.db import connection, transaction

from accounts.ledger import hashchain as ledger
from accounts.models import BudgetAccount, LedgerBlock, LedgerEntry, LedgerEvent
from accounts.services import BudgetError, Schedule, budget_set_ceiling, budget_set_paused, budget_set_schedule
from market.models import Value
from market.values.services import value_delete_raw
from tests.factories import chain_head, contribute, stored_chains
from tests.ledger_checks import hash_chain_problems

UTC = timezone.utc
T0 = datetime(2031, 3, 1, tzinfo=UTC)
D = Decimal


def spend(value_id, chain=D(0), oneshot=D(0)):
    """Stand in for releases (the purchase service is not part of this foundation): set the losses directly."""
    BudgetAccount.objects.filter(value_id=value_id).update(chain_loss=chain, oneshot_loss=oneshot)


def entries(value_id):
    return list(LedgerEntry.objects.filter(value_id=value_id).order_by("id"))


def head(value_id):
    """The head of the value's chain (its slot's highest point in its block)."""
    return chain_head(Value(id=value_id))[0]


@pytest.fixture
def value(categorical):
    return contribute(categorical, ["red"], ceiling="0.3")[0]


def test_a_new_value_has_its_policy_in_the_ledger_and_a_chain_up_to_its_ceiling(value, categorical):
    budget = BudgetAccount.objects.get(value=value)
    assert (budget.ceiling, budget.chain_loss, budget.oneshot_loss, budget.paused) == (D("0.3"), 0, 0, False)
    [entry] = entries(value.id)
    assert entry.kind == LedgerEntry.Kind.CEILING and entry.ceiling == D("0.3") and entry.epsilon is None
    eps, out = stored_chains(categorical)[value.id]
    assert eps.tolist() == [100_000, 200_000, 300_000] and out.shape == (3, 1)
    assert head(value.id) == D("0.3")


def test_raising_a_ceiling_enqueues_extension_on_commit(value, categorical, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        budget_set_ceiling(value_id=value.id, ceiling="1.05")
    assert len(callbacks) == 1
    assert head(value.id) == D("0.3"), "extension must wait for the commit"
    callbacks[0]()  # what the commit does (Celery eager in the tests)
    eps, _ = stored_chains(categorical)[value.id]
    assert eps.tolist() == list(range(100_000, 1_000_001, 100_000))  # the last grid point <= 1.05 is 1.0
    assert head(value.id) == D("1.0")
    budget = BudgetAccount.objects.get(value=value)
    assert budget.ceiling == D("1.05")
    assert [e.kind for e in entries(value.id)] == ["ceiling", "ceiling"]
    assert entries(value.id)[-1].ceiling == D("1.05")


def test_a_rolled_back_raise_enqueues_nothing(value, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            budget_set_ceiling(value_id=value.id, ceiling="2")
            raise RuntimeError("the caller's transaction fails afterwards")
    assert callbacks == []
    assert BudgetAccount.objects.get(value=value).ceiling == D("0.3")
    assert len(entries(value.id)) == 1 and head(value.id) == D("0.3")


def test_lowering_a_ceiling_is_allowed_down_to_the_loss(value, django_capture_on_commit_callbacks):
    spend(value.id, chain=D("0.2"))
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        budget_set_ceiling(value_id=value.id, ceiling="0.2")  # exactly the loss: allowed
    assert callbacks == []  # lowering never extends
    budget = BudgetAccount.objects.get(value=value)
    assert budget.ceiling == D("0.2") and budget.loss == D("0.2")
    assert entries(value.id)[-1].ceiling == D("0.2")
    assert entries(value.id)[-1].chain_loss_after == D("0.2")


@pytest.mark.parametrize("chain,oneshot", [(D("0.25"), D(0)), (D(0), D("0.25")), (D("0.15"), D("0.1"))])
def test_lowering_a_ceiling_below_the_loss_is_refused_with_a_clear_message(value, chain, oneshot):
    spend(value.id, chain=chain, oneshot=oneshot)
    before = (BudgetAccount.objects.get(value=value).ceiling, LedgerEntry.objects.count(), LedgerBlock.objects.count())
    with pytest.raises(BudgetError) as info:
        budget_set_ceiling(value_id=value.id, ceiling="0.2")
    message = str(info.value)
    assert "cannot be lowered to 0.200000" in message
    assert "0.250000 of this value's privacy budget has already been spent" in message
    assert (BudgetAccount.objects.get(value=value).ceiling, LedgerEntry.objects.count(),
            LedgerBlock.objects.count()) == before


def test_a_schedule_whose_current_ceiling_is_below_the_loss_is_refused(value):
    spend(value.id, chain=D("0.3"))
    schedule = Schedule(start="0.1", cap="5", start_at=T0, end_at=T0 + timedelta(days=10))
    with pytest.raises(BudgetError, match=r"would allow only 0\.100000 now, but 0\.300000 .* already been spent"):
        budget_set_schedule(value_id=value.id, schedule=schedule, now=T0)
    assert BudgetAccount.objects.get(value=value).schedule_shape == ""
    # the same schedule later, once it has grown past the loss, is accepted
    budget = budget_set_schedule(value_id=value.id, schedule=schedule, now=T0 + timedelta(days=1))
    assert budget.ceiling == D("0.59") and budget.schedule_shape == "linear"


def test_setting_a_schedule_records_it_and_extends(value, categorical, django_capture_on_commit_callbacks):
    schedule = Schedule(start="0.5", cap="2.5", start_at=T0, end_at=T0 + timedelta(days=4), shape="steps", steps=4)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        budget_set_schedule(value_id=value.id, schedule=schedule, now=T0 + timedelta(days=1, hours=1))
    assert len(callbacks) == 1
    budget = BudgetAccount.objects.get(value=value)
    assert budget.ceiling == D("1.0")
    assert (budget.schedule_start, budget.schedule_cap, budget.schedule_shape, budget.schedule_steps) == (
        D("0.5"), D("2.5"), "steps", 4)
    entry = entries(value.id)[-1]
    assert entry.kind == LedgerEntry.Kind.SCHEDULE
    assert (entry.ceiling, entry.schedule_start, entry.schedule_cap, entry.schedule_start_at, entry.schedule_end_at,
            entry.schedule_shape, entry.schedule_steps) == (
        D("1.0"), D("0.5"), D("2.5"), T0, T0 + timedelta(days=4), "steps", 4)
    assert head(value.id) == D("1.0")


def test_a_fixed_ceiling_replaces_a_schedule(value):
    schedule = Schedule(start="0.3", cap="2", start_at=T0, end_at=T0 + timedelta(days=1))
    budget_set_schedule(value_id=value.id, schedule=schedule, now=T0)
    budget_set_ceiling(value_id=value.id, ceiling="0.4")
    budget = BudgetAccount.objects.get(value=value)
    assert budget.ceiling == D("0.4") and not budget.scheduled
    assert budget.schedule_start is None and budget.schedule_end_at is None and budget.schedule_steps is None
    assert entries(value.id)[-1].schedule_shape == "" and entries(value.id)[-1].schedule_start is None


def test_pause_and_resume_write_one_ledger_entry_each_and_only_on_change(value):
    budget_set_paused(value_id=value.id, paused=True)
    budget_set_paused(value_id=value.id, paused=True)  # no change: no entry
    assert BudgetAccount.objects.get(value=value).paused
    budget_set_paused(value_id=value.id, paused=False)
    budget_set_paused(value_id=value.id, paused=False)
    assert not BudgetAccount.objects.get(value=value).paused
    assert [e.kind for e in entries(value.id)] == ["ceiling", "pause", "resume"]
    assert all(e.ceiling == D("0.3") for e in entries(value.id))


def test_deleting_the_raw_value_is_recorded_and_keeps_the_chain_without_extending_it(
        value, categorical, django_capture_on_commit_callbacks):
    before = stored_chains(categorical)[value.id]
    value_delete_raw(value_id=value.id)
    value_delete_raw(value_id=value.id)  # idempotent
    value.refresh_from_db()
    assert value.raw_sealed is None and value.input_sealed is None and value.raw_deleted_at is not None
    assert [e.kind for e in entries(value.id)] == ["ceiling", "raw_deleted"]
    with django_capture_on_commit_callbacks(execute=True):
        budget_set_ceiling(value_id=value.id, ceiling="3")  # raising is allowed; the chain cannot grow
    after = stored_chains(categorical)[value.id]
    assert after[0].tolist() == before[0].tolist() and after[1].tolist() == before[1].tolist()


@pytest.mark.django_db(transaction=True)
def test_the_ledger_refuses_to_append_outside_a_transaction():
    from accounts.services import event_rows
    from tests.factories import CategoricalAttributeFactory

    value = contribute(CategoricalAttributeFactory(), ["red"], ceiling="0.3")[0]
    rows = event_rows([BudgetAccount.objects.get(value=value)], LedgerEntry.Kind.PAUSE)
    with pytest.raises(RuntimeError, match="inside the transaction"):
        ledger.append(rows, shard=value.attribute_id)
    assert hash_chain_problems() == []


def test_every_change_writes_a_ledger_entry_and_the_hash_chain_verifies(categorical):
    """Many random operations over a few values: each policy change is exactly one entry, the chain verifies."""
    values = contribute(categorical, ["red", "green", "blue", "red", "green"], ceiling="0.5")
    rng = random.Random(20310301)
    expected = {v.id: 1 for v in values}
    with time_machine.travel(T0, tick=False) as clock:
        for step in range(60):
            v = rng.choice(values)
            budget = BudgetAccount.objects.get(value=v)
            op = rng.choice(["raise", "lower", "pause", "schedule", "refused"])
            if op == "raise":
                budget_set_ceiling(value_id=v.id, ceiling=budget.ceiling + D("0.1"))
            elif op == "lower":
                budget_set_ceiling(value_id=v.id, ceiling=max(budget.loss, budget.ceiling - D("0.1")))
            elif op == "pause":
                budget_set_paused(value_id=v.id, paused=not budget.paused)
            elif op == "schedule":
                sched = Schedule(start=budget.loss, cap=budget.loss + 3, start_at=T0, end_at=T0 + timedelta(days=30),
                                 shape=rng.choice(["linear", "steps"]), steps=rng.randint(1, 30))
                budget_set_schedule(value_id=v.id, schedule=sched)
            else:
                spend(v.id, chain=budget.ceiling)
                with pytest.raises(BudgetError):
                    budget_set_ceiling(value_id=v.id, ceiling=budget.ceiling - D("0.000001"))
                expected[v.id] -= 1
            expected[v.id] += 1
            clock.shift(timedelta(hours=7))
    for v in values:
        assert LedgerEntry.objects.filter(value=v).count() == expected[v.id]
        budget = BudgetAccount.objects.get(value=v)
        last = entries(v.id)[-1]
        assert last.ceiling == budget.ceiling  # the ledger holds the policy in force
        assert last.schedule_shape == budget.schedule_shape and last.schedule_cap == budget.schedule_cap
        assert last.chain_loss_after <= budget.chain_loss and last.oneshot_loss_after == budget.oneshot_loss
    assert LedgerBlock.objects.count() == sum(expected.values()) - len(values) + 1
    assert hash_chain_problems() == []


def test_the_audit_finds_an_edited_and_a_deleted_entry(categorical):
    """The hash chain's check is the audit's (``audit.hashchain``): it names the block an edit or a deletion broke."""
    values = contribute(categorical, ["red", "green", "blue"], ceiling="0.5")
    for v in values:
        budget_set_paused(value_id=v.id, paused=True)
        budget_set_ceiling(value_id=v.id, ceiling="0.7")
    assert hash_chain_problems() == []
    target = entries(values[1].id)[1]
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":  # tampering needs the append-only triggers out of the way
            cur.execute("SET LOCAL session_replication_role = replica")
        table = LedgerEvent._meta.db_table  # budget events are stored one row each (the view's rows)
        stored = LedgerEvent.objects.get(block_id=target.block_id, position=target.id % ledger.ID_SHIFT).id
        cur.execute(f"UPDATE {table} SET ceiling = %s WHERE id = %s", [D("9"), stored])
        problems = hash_chain_problems()
        assert len(problems) == 1 and problems[0].startswith(
            f"each block's hash recomputes from its stored entries: block {target.block_id} ("), problems
        cur.execute(f"UPDATE {table} SET ceiling = %s WHERE id = %s", [target.ceiling, stored])
        assert hash_chain_problems() == []
        cur.execute(f"DELETE FROM {table} WHERE id = %s", [stored])
        problems = hash_chain_problems()
        assert (f"entry count of each block matches its entries: block {target.block_id} records 1 entries but "
                f"holds 0") in problems, problems
        assert any(p.startswith(f"each block's hash recomputes from its stored entries: block {target.block_id} (")
                   for p in problems), problems
        if connection.vendor == "postgresql":
            cur.execute("SET LOCAL session_replication_role = origin")
