"""``audit_budgets``: a clean market passes; each kind of tampering with the ledger, budgets, purchases or money
is caught (on SQLite and, with the append-only triggers disabled for the tampering, on PostgreSQL)."""
from __future__ import annotations

import io
import json
from datetime import timedelta
from decimal import Decimal as D

import numpy as np
import pytest
from django.core.management import ManagementUtility, call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.db.models import F

from accounts.ledger import hashchain as ledger
from accounts.models import (
    BudgetAccount,
    LedgerBlock,
    LedgerEntry,
    LedgerEvent,
    LedgerRelease,
    MoneyAccount,
    MoneyEntry,
)
from accounts.schedule import ceiling_micro
from audit import budget_audit, replay, tables
from audit.budget_audit import audit_budgets
from audit.report import SECTIONS
from market.models import ChainBlock, ChainPoint, Purchase, PurchaseChunk, Value
from market.values import sealing
from tests.audit.conftest import tampering
from tests.ledger_checks import hash_chain_problems
from tests.ledger_edits import delete_block_entries, delete_entry, edit_block_entries, edit_entry, insert_entry


def names(report) -> list[str]:
    return [c.name for c in report.failed]


def failed(report, *fragments):
    """Every fragment names a failed check."""
    bad = names(report)
    for fragment in fragments:
        assert any(fragment in n for n in bad), (fragment, bad)


# ---------------------------------------------------------------------------------------------------------------
# Clean data
# ---------------------------------------------------------------------------------------------------------------

def test_clean_market_passes_every_check(market):
    report = audit_budgets()
    assert report.ok, report.as_text()
    assert report.stats["ledger_entries"] == LedgerEntry.objects.count() > 0
    assert {c.section for c in report.checks} == set(SECTIONS)
    releases = next(c for c in report.checks if c.name.startswith("chain releases set"))
    assert releases.checked == LedgerEntry.objects.filter(kind="chain_release").count() == 57
    assert report.head_hash == LedgerBlock.objects.order_by("-id").first().hash


def test_command_prints_report_and_exits_zero(market):
    out = io.StringIO()
    call_command("audit_budgets", stdout=out)
    text = out.getvalue()
    assert "RESULT: PASS" in text and "[PASS] Hash chain" in text and "[PASS] Money" in text
    out = io.StringIO()
    call_command("audit_budgets", "--json", stdout=out)
    body = json.loads(out.getvalue())
    assert body["ok"] is True and body["stats"]["purchases"] == 2


def test_command_exits_non_zero_on_a_violation(market):
    BudgetAccount.objects.filter(value_id=market.fixed[5].id).update(chain_loss=D("0"))
    out = io.StringIO()
    with pytest.raises(CommandError, match="budget audit FAILED"):
        call_command("audit_budgets", stdout=out)
    assert "[FAIL] Budgets and values" in out.getvalue() and f"value {market.fixed[5].id}" in out.getvalue()
    # From the command line (manage.py): exit status 1.
    with pytest.raises(SystemExit) as exit_:
        ManagementUtility(["manage.py", "audit_budgets", "--skip-checks"]).execute()
    assert exit_.value.code == 1


def test_audit_encoding_matches_ledger_stored_records(market):
    """The audit's one-query records are byte-identical to ``ledger.stored_records`` block by block."""
    e = tables.read_entries()
    for block in LedgerBlock.objects.order_by("id"):
        sl = np.flatnonzero(e["block"] == block.id)
        ours = tables.entry_records(e, slice(sl[0], sl[-1] + 1))
        assert ours.tobytes() == ledger.stored_records(block).tobytes()
    assert hash_chain_problems() == []


def test_vectorized_schedule_ceiling_equals_ceiling_micro():
    rng = np.random.default_rng(3)
    base = ledger.micros(ledger.EPOCH + timedelta(days=20000))
    n = 2000
    start = rng.integers(0, 5_000_000, n)
    cap = start + rng.integers(0, 5_000_000, n)
    start_at = base + rng.integers(0, 10**6, n) * 1_000_000
    end_at = start_at + rng.integers(1, 10**6, n) * 1_000_000 + rng.integers(0, 10**6, n)
    t = start_at + rng.integers(-10**12, 2 * 10**12, n)
    shape = rng.integers(1, 3, n)
    steps = np.where(shape == 2, rng.integers(1, 50, n), -1)
    got = replay.schedule_ceilings(start, cap, start_at, end_at, shape, steps, t)
    dt = ledger._dt
    want = [ceiling_micro(int(a), int(b), dt(int(c)), dt(int(d)), ledger.SHAPES[int(s)], int(k) if k > 0 else None,
                          dt(int(x))) for a, b, c, d, s, k, x in zip(start, cap, start_at, end_at, shape, steps, t)]
    assert got.tolist() == want


def test_empty_database_passes(db):
    assert audit_budgets().ok


# ---------------------------------------------------------------------------------------------------------------
# Tampering, each caught
# ---------------------------------------------------------------------------------------------------------------

def releases(market, purchase=0):
    return LedgerEntry.objects.filter(purchase=market.purchases[purchase], kind="chain_release").order_by("id")


def edit_release_epsilon(m):
    e = releases(m).first()
    edit_entry(e, epsilon=e.epsilon - D("0.1"))


def raise_loss_after(m):
    e = releases(m).first()
    edit_entry(e, chain_loss_after=e.chain_loss_after + D("0.1"))


def raise_recorded_ceiling(m):
    e = LedgerEntry.objects.filter(value=m.fixed[4], kind="ceiling").first()
    edit_entry(e, ceiling=D("5"))


def delete_release(m):
    delete_entry(releases(m, 1).last())


def delete_middle_block(m):
    block = LedgerEntry.objects.filter(kind="pause").first().block_id
    delete_block_entries(block)
    LedgerBlock.objects.filter(id=block).delete()


def insert_forged_entry(m):
    e = releases(m, 1).first()
    insert_entry(block_id=e.block_id, value=m.scheduled[0], purchase_id=e.purchase_id, kind="chain_release",
                 created_at=e.created_at, epsilon=e.epsilon, chain_loss_before=D("0.5"), chain_loss_after=D("1"),
                 oneshot_loss_before=0, oneshot_loss_after=0, ceiling=D("1"))


def _point(m, epsilon="1.0"):
    """The chain point row at ``epsilon`` of the block of the market's value fixed[5]."""
    v = Value.objects.get(id=m.fixed[5].id)
    return ChainPoint.objects.get(block_id=v.block_id, epsilon=int(D(epsilon) * 10**6)), v


def flip_a_sealed_chain_byte(m):
    p, _ = _point(m)
    sealed = bytearray(bytes(p.sealed))
    sealed[-1] ^= 1
    ChainPoint.objects.filter(id=p.id).update(sealed=bytes(sealed))


def move_a_chain_point_to_another_epsilon(m):
    p, _ = _point(m)
    ChainPoint.objects.filter(id=p.id).update(epsilon=p.epsilon + 1)


def rewrite_a_sold_chain_point_with_the_key(m):
    """An operator holding the key re-seals a point that was sold with another output: it opens, but no longer
    equals what the buyer received."""
    p, v = _point(m)
    out = sealing.open_points(p.sealed, attribute_id=p.attribute_id, block_id=p.block_id, epsilon=p.epsilon,
                              present=bytes(p.present), width=1).copy()
    out[v.slot] = (out[v.slot] + 1) % 3
    ChainPoint.objects.filter(id=p.id).update(sealed=sealing.seal_points(
        out, attribute_id=p.attribute_id, block_id=p.block_id, epsilon=p.epsilon, present=bytes(p.present)))


def move_released_outputs_to_another_purchase(m):
    """The sealed outputs of the first purchase's chunk put in the second's: they do not open there."""
    first = PurchaseChunk.objects.filter(purchase=m.purchases[0]).order_by("seq").first()
    PurchaseChunk.objects.filter(purchase=m.purchases[1], seq=0).update(outputs=first.outputs)


def lower_a_chain_head_below_its_loss(m):
    v = Value.objects.get(id=m.fixed[5].id)
    block = ChainBlock.objects.get(id=v.block_id)
    heads = np.frombuffer(bytes(block.heads), dtype="<i8").copy()
    heads[v.slot] = 500_000
    ChainBlock.objects.filter(id=block.id).update(heads=heads.tobytes())


def swap_values_of_two_entries(m):
    """Reorder: two releases of one block trade values; their losses are equal, so only the hash notices."""
    a, b = list(releases(m, 1)[3:5])
    assert (a.chain_loss_before, a.chain_loss_after) == (b.chain_loss_before, b.chain_loss_after)
    edit_entry(a, value_id=b.value_id)
    edit_entry(b, value_id=a.value_id)


def swap_block_times(m):
    b1, b2 = LedgerBlock.objects.order_by("id")[2:4]
    LedgerBlock.objects.filter(id=b1.id).update(created_at=b2.created_at)
    LedgerBlock.objects.filter(id=b2.id).update(created_at=b1.created_at)
    edit_block_entries(b1.id, created_at=b2.created_at)
    edit_block_entries(b2.id, created_at=b1.created_at)


def backdate_entry(m):
    e = releases(m).first()
    edit_entry(e, created_at=e.created_at - timedelta(days=3))


def reset_budget_loss(m):
    BudgetAccount.objects.filter(value=m.fixed[6]).update(chain_loss=D("0"))


def raise_budget_ceiling(m):
    BudgetAccount.objects.filter(value=m.fixed[7]).update(ceiling=D("9"))


def pause_without_ledger(m):
    BudgetAccount.objects.filter(value=m.fixed[8]).update(paused=True)


def edit_money_amount(m):
    e = MoneyEntry.objects.filter(account__kind="owner_earnings").order_by("id").first()
    MoneyEntry.objects.filter(id=e.id).update(amount=F("amount") + D("1"))


def delete_money_entry(m):
    MoneyEntry.objects.filter(id=MoneyEntry.objects.filter(account__kind="platform").order_by("id").first().id).delete()


def insert_money_entry(m):
    account = MoneyAccount.objects.filter(kind="owner_earnings").order_by("id").first()
    MoneyEntry.objects.create(account=account, amount=D("5"), balance_after=account.balance + D("5"), memo="forged")
    MoneyAccount.objects.filter(id=account.id).update(balance=F("balance") + D("5"))


def edit_account_balance(m):
    MoneyAccount.objects.filter(user=m.buyer).update(balance=F("balance") + D("10"))


def edit_purchase_included(m):
    Purchase.objects.filter(id=m.purchases[0].id).update(included=F("included") - 1)


def edit_purchase_price(m):
    Purchase.objects.filter(id=m.purchases[1].id).update(price=F("price") + D("1"))


CASES = {
    "ledger entry edited (epsilon)": (edit_release_epsilon, ["each block's hash recomputes",
                                                              "each release is at its purchase's epsilon"]),
    "ledger entry edited (loss after)": (raise_loss_after, ["each block's hash recomputes", "chain releases set",
                                                            "before-losses equal the previous"]),
    "ledger entry edited (ceiling)": (raise_recorded_ceiling, ["each block's hash recomputes",
                                                               "ceiling and schedule match"]),
    "ledger entry deleted": (delete_release, ["entry count of each block", "each block's hash recomputes",
                                              "exactly `included` ledger entries"]),
    "ledger block deleted": (delete_middle_block, ["blocks are linked"]),
    "ledger entry inserted": (insert_forged_entry, ["entry count of each block", "each block's hash recomputes",
                                                    "exactly `included` ledger entries"]),
    "ledger entries reordered": (swap_values_of_two_entries, ["each block's hash recomputes"]),
    "ledger blocks reordered in time": (swap_block_times, ["each block's hash recomputes"]),
    "ledger entry backdated": (backdate_entry, ["each entry's created_at equals its block's"]),
    "budget loss reset": (reset_budget_loss, ["replayed final losses equal the budget rows"]),
    "budget ceiling raised": (raise_budget_ceiling, ["ceiling and schedule match"]),
    "budget paused behind the ledger": (pause_without_ledger, ["paused flag"]),
    "money entry edited": (edit_money_amount, ["running sum", "balance equals the sum of its entries",
                                               "each settlement credits every owner exactly"]),
    "money entry deleted": (delete_money_entry, ["balance equals the sum of its entries", "buyer debit = price"]),
    "money entry inserted": (insert_money_entry, ["credited only by purchases"]),
    "money balance edited": (edit_account_balance, ["balance equals the sum of its entries",
                                                    "balance equals its last balance_after"]),
    "purchase count edited": (edit_purchase_included, ["exactly `included` ledger entries"]),
    "sealed chain point altered": (flip_a_sealed_chain_byte, ["every chain point opens"]),
    "chain point moved to another epsilon": (move_a_chain_point_to_another_epsilon, ["every chain point opens"]),
    "sold chain point rewritten with the key": (rewrite_a_sold_chain_point_with_the_key,
                                                ["released outputs are its values' stored points"]),
    "released outputs moved to another purchase": (move_released_outputs_to_another_purchase,
                                                   ["released outputs are its values' stored points"]),
    "chain head lowered below the loss": (lower_a_chain_head_below_its_loss,
                                          ["head is its highest stored point", "head >= chain loss"]),
    "purchase price edited": (edit_purchase_price, ["buyer debit = price"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tampering_is_caught(market, case):
    tamper, expected = CASES[case]
    clean = audit_budgets()
    assert clean.ok, clean.as_text()
    with tampering():
        tamper(market)
    report = audit_budgets()
    assert not report.ok
    failed(report, *expected)
    for c in report.failed:
        assert c.examples, c.name  # the first offending rows are shown


def test_forged_block_with_a_valid_hash_is_caught_by_the_replay(market, monkeypatch):
    """Whoever can append a well-hashed block still cannot hide a release over the ceiling in force.  (The forger
    writes the release, which names no purchase, as one row of the events table: ``ledger.append`` itself refuses
    a release without its purchase.)"""
    monkeypatch.setattr(ledger, "_insert_entries",
                        lambda block, created_at, rows: ledger._insert_events(block, created_at, rows.records))
    value = market.fixed[9]
    budget = BudgetAccount.objects.get(value=value)
    rows = ledger.Rows.empty(1)
    r = rows.records
    r["value"], r["kind"], r["epsilon"] = value.id, ledger.KINDS.index("chain_release"), 3_000_000
    r["chain_before"], r["chain_after"] = int(budget.chain_loss * 10**6), 3_000_000
    r["oneshot_before"] = r["oneshot_after"] = 0
    r["ceiling"] = 5_000_000
    with transaction.atomic():
        ledger.append(rows, shard=value.attribute_id)
    report = audit_budgets()
    assert [c for c in report.checks if c.section == "Hash chain" and not c.ok] == []
    failed(report, "loss after every entry <= the ceiling in force", "each recorded ceiling is the one in force",
           "every release belongs to an existing purchase", "replayed final losses equal the budget rows")
    over = next(c for c in report.failed if c.name.startswith("loss after every entry"))
    assert f"value {value.id}" in over.examples[0] and "exceeds the fixed ceiling 2.000000" in over.examples[0]


def test_rewritten_chain_is_caught_by_an_anchor(market):
    """Rewriting history and recomputing every later hash passes the chain check alone, but not an anchor."""
    anchor = audit_budgets().head_hash
    first_purchase_block = releases(market, 1).first().block
    with tampering():
        swap_values_of_two_entries(market)
        prev = first_purchase_block.prev_hash
        for block in LedgerBlock.objects.filter(shard=first_purchase_block.shard,
                                                id__gte=first_purchase_block.id).order_by("id"):
            new = ledger.block_hash(prev, block.created_at, ledger.stored_records(block), block.shard)
            LedgerBlock.objects.filter(id=block.id).update(prev_hash=prev, hash=new)
            prev = new
    assert audit_budgets().ok  # a consistent rewrite...
    report = audit_budgets(anchor=anchor)
    failed(report, "the anchored block hash is still in the chain")  # ...is caught by a hash recorded earlier
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("audit_budgets", "--anchor", anchor, stdout=out)


def test_schedule_ceiling_is_recomputed_independently(market):
    """A release recorded under a schedule at a time the schedule did not yet allow it is caught."""
    value = market.scheduled[1]
    entry = LedgerEntry.objects.filter(value=value, kind="chain_release").first()
    schedule_event = LedgerEntry.objects.get(value=value, kind="schedule")
    with tampering():  # the schedule now starts later: at the release's time it allowed only its start, 0.5 -> less
        edit_entry(schedule_event, schedule_start=D("0.1"), ceiling=D("0.1"))
    report = audit_budgets()
    failed(report, "loss after every entry <= the ceiling in force")
    assert any(f"entry {entry.id}" in x for c in report.failed for x in c.examples)


# ---------------------------------------------------------------------------------------------------------------
# PostgreSQL: the triggers refuse tampering unless disabled, and come back
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.postgres
def test_triggers_refuse_tampering_and_are_restored(market):
    entry = releases(market).first()
    rows = LedgerRelease.objects.filter(purchase=market.purchases[0])
    row = rows.order_by("position").first()
    event = LedgerEvent.objects.filter(kind="pause").order_by("id").first()
    for refused in (lambda: rows.filter(id=row.id).update(epsilon=row.epsilon - D("0.1")),
                    lambda: LedgerEvent.objects.filter(id=event.id).update(ceiling=event.ceiling + 1)):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            refused()
    with tampering():
        edit_entry(entry, epsilon=entry.epsilon - D("0.1"))
    for refused in (lambda: rows.delete(), lambda: LedgerEvent.objects.filter(id=event.id).delete()):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            refused()
    with connection.cursor() as cur:
        cur.execute("SELECT tgname FROM pg_trigger WHERE tgname LIKE %s AND tgenabled = 'O'", ["%append_only"])
        enabled = {name for (name,) in cur.fetchall()}
        # ledger events, compact releases and blocks, money entries, settlements, checkpoints and their leaves
        assert len(enabled) == 7
        assert "accounts_settlement_append_only" in enabled
    failed(audit_budgets(), "each block's hash recomputes")


@pytest.mark.parametrize("micro", [0, 1, 500000, 999499, 999500, 999999])
def test_timestamps_are_read_exactly(db, micro):
    """Microsecond timestamps come back exact from one query (SQLite's strftime would round .9995 s up)."""
    from datetime import datetime
    from datetime import timezone as tz

    when = datetime(2026, 11, 22, 2, 43, 43, micro, tzinfo=tz.utc)
    block = LedgerBlock.objects.create(prev_hash=ledger.GENESIS, hash=f"{micro:064d}", entry_count=1, created_at=when)
    blocks, _, _ = tables.read_blocks()
    assert blocks["created_at"][list(blocks["id"]).index(block.id)] == ledger.micros(when)


def test_audit_reads_one_snapshot_outside_a_transaction(transactional_db, monkeypatch):
    """Run as a command (no surrounding transaction), every table is read in one read-only snapshot."""
    from tests.factories import CategoricalAttributeFactory, contribute

    contribute(CategoricalAttributeFactory(), ["red", "green", "blue"], prefix="snap", ceiling="1",
               rng=np.random.default_rng(0))
    seen = []
    original = budget_audit.read_money

    def spy():
        seen.append(connection.in_atomic_block)
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("SHOW transaction_isolation")
                seen.append(cur.fetchone()[0])
                cur.execute("SHOW transaction_read_only")
                seen.append(cur.fetchone()[0])
        return original()

    monkeypatch.setattr(budget_audit, "read_money", spy)
    assert not connection.in_atomic_block
    assert audit_budgets().ok
    assert seen[0] is True
    if connection.vendor == "postgresql":
        assert seen[1:] == ["repeatable read", "on"]
