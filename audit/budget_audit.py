"""The budget audit: every rule of docs/budget-rules.md#budgets-and-ceilings, re-proved from the ledger
(docs/budget-rules.md#the-audit).

:func:`audit_budgets` reads each table once (one query per table: the ledger
entries and blocks, budgets, values, purchases, money accounts and entries) into
numpy columns of exact integers -- micro-epsilons, money in ten-thousandths,
timestamps in microseconds -- and checks, with no Python loop per entry:

**Hash chain** (tamper evidence): every block's hash recomputed with
``accounts.ledger.hashchain.block_hash`` from its entries as stored, the blocks linked by
``prev_hash`` in id order from the genesis hash, entry counts, the head row
pointing at the last block, every entry's ``created_at`` equal to its block's
(the hash covers the block's time, not each entry's), and optionally a block
hash recorded earlier (``anchor``) still present -- which also catches a
rewrite that recomputed every hash after it.  Edits, deletions, insertions and
reorderings of entries or blocks all change a recomputed hash or a link.

**Budget replay**: per value, its entries in ledger order, starting from a
ceiling or schedule event with zero loss; each entry's before-losses equal the
previous entry's after-losses; a chain release sets ``chain = max(chain, e)``, a
one-shot release adds ``e``, other events change no loss; the ceiling in force
at each entry is recomputed from the ledger's own policy events (a fixed
ceiling, or the schedule evaluated with ``accounts.schedule`` at the entry's
time), and every loss after an entry, and every recorded ceiling, is within it;
under a schedule the recorded ceiling never falls; the final losses, policy,
pause flag and raw-deletion state equal the ``BudgetAccount`` and ``Value`` rows.

**Purchases**: each completed purchase has exactly ``included`` release
entries, at the purchase's epsilon, for values of its attribute, one per value;
other purchases have none.  One-shot purchases and surveys
(docs/budget-rules.md#one-shot-losses-add-up): their releases are ``oneshot_release`` entries (chain purchases'
are ``chain_release``) at the purchase's ``charged_epsilon``; every release's
guarantee, and the purchase's, is the one its mechanism gives (``uldp`` for
uRR/uRAP, ``per_report_non_collusion`` for improved Christofides, ``ldp`` for
the others, none or ``ldp`` for chains); surveys store no outputs at all (the
buyer gets only the aggregate).  And per value, ``oneshot_loss`` equals the sum
of its one-shot releases' epsilons.

**Chains** (``audit.chains``): every gradual-release value has its own slot in
a chain block; every sealed chain point opens (bound to its identity); each
head is its slot's highest point and covers the chain loss; every chain
purchase's released outputs are the stored points at its epsilon (no fork).

**Keys** (``audit.keys``): every sealed row is under a key of ``LDP_VALUE_KEYS`` (none under a retired key) and
opens with it (docs/security.md#rotating-the-value-key).

**Money**: every account's balance equals the sum of its entries and its last
``balance_after`` (each entry's ``balance_after`` is the running sum); per
purchase the buyer's debit equals the price and equals the owners' shares plus
the platform fee; only owners whose values were released are paid; earnings
and fees never appear without a purchase.  Each top-up is one credit of its
buyer's account by its amount, each payout request one debit of its owner's
earnings by its amount (and, if rejected, one credit back); every top-up and
payout movement belongs to its record, purchases' movements (kinds purchase,
fee, earning) name their purchase and no other movement does; and money is
neither created nor lost: all balances add up to what came in (top-ups and
other deposits) less what was paid out (docs/money.md).

The checks live in one module per concern (``audit.hashchain``, ``audit.replay``, ``audit.budgets``,
``audit.purchases``, ``audit.money``); this module reads the tables in one snapshot and runs them.
"""
from __future__ import annotations

import time
from datetime import datetime

import numpy as np
from django.utils import timezone

from accounts.ledger import hashchain as ledger

from . import sql
from .budgets import check_budget_rows, check_oneshot_losses
from .chains import check_chains, check_custody
from .hashchain import check_checkpoints, check_hash_chain
from .keys import check_keys
from .money import check_money, check_settlements, check_topups_payouts
from .purchases import check_oneshot, check_purchases
from .replay import check_replay
from .report import AuditReport, Recorder
from .tables import (
    read_blocks,
    read_budgets,
    read_checkpoints,
    read_chunks,
    read_entries,
    read_heads,
    read_money,
    read_purchases,
    read_release_values,
    read_settlements,
    read_topups_payouts,
    read_values,
)


def audit_budgets(*, examples: int = 5, anchor: str | None = None, now: datetime | None = None) -> AuditReport:
    """Re-check every budget, ledger and money invariant (module doc); never writes anything."""
    started = time.perf_counter()
    rec = Recorder(examples)
    with sql.snapshot():
        now_us = ledger.micros(now or timezone.now())
        e = read_entries()
        blocks, prev_hashes, hashes = read_blocks()
        heads = read_heads()
        checkpoints, leaves = read_checkpoints()
        budgets = read_budgets()
        values = read_values()
        purchases = read_purchases()
        chunks = read_chunks()
        accounts, money = read_money()
        topups, payouts = read_topups_payouts()
        settlements = read_settlements()
        release_values = read_release_values()
        # reads and opens the chain blocks a batch at a time, in the same snapshot
        chain_heads = check_chains(rec, budgets)
        # every sealed row under a key of the ring, and opening with it (docs/security.md#rotating-the-value-key)
        under_older_keys = check_keys(rec)

    check_hash_chain(rec, e, blocks, prev_hashes, hashes, heads, anchor, values)
    check_checkpoints(rec, blocks, hashes, checkpoints, leaves, e)
    final = check_replay(rec, e)
    check_custody(rec, values, final, chain_heads)
    check_budget_rows(rec, e, final, budgets, values, now_us)
    check_purchases(rec, e, purchases, values)
    check_oneshot(rec, e, purchases, chunks)
    check_oneshot_losses(rec, e, budgets)
    check_money(rec, e, purchases, values, accounts, money, payouts)
    check_topups_payouts(rec, accounts, money, topups, payouts)
    check_settlements(rec, purchases, values, accounts, money, settlements, release_values)

    stats = {"blocks": int(blocks["id"].size), "shards": int(np.unique(blocks["shard"]).size),
             "checkpoints": len(checkpoints), "ledger_entries": int(e["id"].size),
             "values": int(values["id"].size), "budgets": int(budgets["value"].size),
             "purchases": int(purchases["id"].size), "money_accounts": int(accounts["id"].size),
             "money_entries": int(money["id"].size), "sealed_rows_under_older_value_keys": under_older_keys}
    return AuditReport(rec.checks, stats, hashes[-1] if hashes else None, time.perf_counter() - started)
