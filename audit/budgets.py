"""The budget rows and values against the replayed ledger (docs/budget-rules.md#the-audit).

The final losses, policy, pause flag and raw-deletion state replayed from the ledger (``audit.replay``) equal the
``BudgetAccount`` and ``Value`` rows; every value has a budget; ``0 <= loss <= ceiling``; and per value,
``oneshot_loss`` equals the sum of its one-shot releases' epsilons (docs/budget-rules.md#one-shot-losses-add-up).
"""
from __future__ import annotations

import numpy as np

from .codes import K_CEILING, K_ONESHOT, K_SCHEDULE
from .replay import Final, schedule_ceilings
from .report import Recorder, eps_text
from .tables import lookup


def check_budget_rows(rec: Recorder, e, f: Final, b, values, now_us: int) -> None:
    S = "Budgets and values"
    nb = b["value"].size
    pos, found = lookup(f.value, b["value"])
    rec.check(S, "every budget has ledger entries", ~found, nb,
              lambda i: f"budget of value {b['value'][i]} has no ledger entry")
    _, has_budget = lookup(b["value"], f.value)
    rec.check(S, "every value in the ledger has a budget row", ~has_budget, f.value.size,
              lambda i: f"value {f.value[i]} has ledger entries but no budget row")
    _, vb = lookup(b["value"], values["id"])
    rec.check(S, "every value has a budget row", ~vb, values["id"].size,
              lambda i: f"value {values['id'][i]} has no budget row")
    loss = b["chain"] + b["oneshot"]
    rec.check(S, "budget rows: 0 <= loss <= ceiling", (b["chain"] < 0) | (b["oneshot"] < 0) | (loss > b["ceiling"]),
              nb, lambda i: f"value {b['value'][i]}: loss {eps_text(loss[i])} (chain {eps_text(b['chain'][i])} "
                            f"+ one-shot {eps_text(b['oneshot'][i])}), ceiling {eps_text(b['ceiling'][i])}")
    i_b = np.flatnonzero(found)
    j = pos[i_b]
    wrong_loss = np.zeros(nb, dtype=bool)
    wrong_loss[i_b] = (b["chain"][i_b] != f.chain[j]) | (b["oneshot"][i_b] != f.oneshot[j])
    rec.check(S, "replayed final losses equal the budget rows", wrong_loss, i_b.size,
              lambda i: f"value {b['value'][i]}: budget row chain {eps_text(b['chain'][i])}, one-shot "
                        f"{eps_text(b['oneshot'][i])}; the ledger replays to chain {eps_text(f.chain[pos[i]])}, "
                        f"one-shot {eps_text(f.oneshot[pos[i]])}")
    sched_cols = ("sched_start", "sched_cap", "sched_start_at", "sched_end_at", "sched_shape", "sched_steps")
    wrong_policy = np.zeros(nb, dtype=bool)
    kinds = f.policy_kind[j]
    fixed, sched = kinds == K_CEILING, kinds == K_SCHEDULE
    same_sched = np.ones(i_b.size, dtype=bool)
    for c in sched_cols:
        same_sched &= b[c][i_b] == f.policy[c][j]
    ceil = b["ceiling"][i_b]
    allowed_now = np.full(i_b.size, -1, dtype=np.int64)
    if sched.any():
        s = np.flatnonzero(sched)
        allowed_now[s] = schedule_ceilings(b["sched_start"][i_b[s]], b["sched_cap"][i_b[s]],
                                           b["sched_start_at"][i_b[s]], b["sched_end_at"][i_b[s]],
                                           b["sched_shape"][i_b[s]], b["sched_steps"][i_b[s]], now_us)
    ok = (fixed & same_sched & (ceil == f.policy["ceiling"][j])) \
        | (sched & same_sched & (ceil >= f.ceiling[j]) & (ceil <= allowed_now))
    wrong_policy[i_b] = ~ok
    rec.check(S, "each budget's ceiling and schedule match its last policy event (and the schedule now)",
              wrong_policy, i_b.size,
              lambda i: f"value {b['value'][i]}: budget ceiling {eps_text(b['ceiling'][i])}, schedule "
                        f"{eps_text(b['sched_start'][i])} -> {eps_text(b['sched_cap'][i])}; last policy in the ledger: "
                        + ("fixed ceiling " + eps_text(f.policy['ceiling'][pos[i]])
                           if f.policy_kind[pos[i]] == K_CEILING else
                           f"schedule {eps_text(f.policy['sched_start'][pos[i]])} -> "
                           f"{eps_text(f.policy['sched_cap'][pos[i]])}, last recorded ceiling "
                           f"{eps_text(f.ceiling[pos[i]])}"))
    wrong_pause = np.zeros(nb, dtype=bool)
    wrong_pause[i_b] = (b["paused"][i_b] == 1) != f.paused[j]
    rec.check(S, "each budget's paused flag equals its last pause/resume entry", wrong_pause, i_b.size,
              lambda i: f"value {b['value'][i]}: paused={bool(b['paused'][i])} but the ledger says "
                        f"{'paused' if f.paused[pos[i]] else 'not paused'}")
    vpos, vfound = lookup(f.value, values["id"])
    raw_wrong = vfound & ((values["raw_deleted"] == 1) != f.raw_deleted[vpos])
    rec.check(S, "a value's raw datum is deleted exactly when the ledger records it", raw_wrong, int(vfound.sum()),
              lambda i: f"value {values['id'][i]}: raw deleted={bool(values['raw_deleted'][i])}, the ledger "
                        f"{'records' if f.raw_deleted[vpos[i]] else 'does not record'} a deletion")


def check_oneshot_losses(rec: Recorder, e, b) -> None:
    """Each budget's ``oneshot_loss`` is the sum of its value's one-shot releases' epsilons."""
    S = "Budgets and values"
    one = e["kind"] == K_ONESHOT
    vals, inv = np.unique(e["value"][one], return_inverse=True)
    sums = np.zeros(vals.size, dtype=np.int64)
    np.add.at(sums, inv, e["epsilon"][one])
    pos, found = lookup(vals, b["value"])
    total = np.where(found, sums[pos] if vals.size else 0, 0)
    rec.check(S, "each budget's oneshot_loss is the sum of its one-shot releases' epsilons", b["oneshot"] != total,
              b["value"].size, lambda i: f"value {b['value'][i]}: oneshot_loss {eps_text(b['oneshot'][i])}, one-shot "
                                         f"releases sum to {eps_text(total[i])}")
