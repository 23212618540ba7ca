"""The budget replay: each value's ledger entries re-run in ledger order (docs/budget-rules.md#the-audit).

Per value, its entries in ledger order, starting from a ceiling or schedule event with zero loss; each entry's
before-losses equal the previous entry's after-losses; a chain release sets ``chain = max(chain, e)``, a one-shot
release adds ``e``, other events change no loss; the ceiling in force at each entry is recomputed from the ledger's
own policy events (a fixed ceiling, or the schedule evaluated with ``accounts.schedule`` at the entry's time), and
every loss after an entry, and every recorded ceiling, is within it; under a schedule the recorded ceiling never
falls.  The replay's final state per value (:class:`Final`) is what ``audit.budgets`` compares with the rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accounts.epsilon import MICRO
from accounts.schedule import ceilings_micro

from .codes import K_CEILING, K_CHAIN, K_HELD, K_ONESHOT, K_PAUSE, K_RAW, K_RESUME, K_SCHEDULE, K_UPLOAD, KINDS, SHAPES
from .report import Recorder, eps_text, when_text


def _trunc_seconds(delta_us: np.ndarray) -> np.ndarray:
    """Whole seconds of a microsecond difference, truncated toward zero (as ``int(timedelta.total_seconds())``)."""
    return np.where(delta_us >= 0, delta_us // 1_000_000, -((-delta_us) // 1_000_000))


def schedule_ceilings(start, cap, start_at_us, end_at_us, shape, steps, t_us) -> np.ndarray:
    """Vectorized ``accounts.schedule.ceiling_micro`` (micro-epsilons) of schedules at times ``t_us``.

    Malformed schedules (end not after start) evaluate to their start (they are reported separately).
    """
    start, cap = np.asarray(start, np.int64), np.asarray(cap, np.int64)
    d = np.maximum(_trunc_seconds(np.asarray(end_at_us, np.int64) - np.asarray(start_at_us, np.int64)), 1)
    e = _trunc_seconds(np.asarray(t_us, np.int64) - np.asarray(start_at_us, np.int64))
    k = np.where(np.asarray(shape) == SHAPES.index("steps"), np.maximum(np.asarray(steps, np.int64), 1), 0)
    return ceilings_micro(start, cap, np.zeros_like(d), d, k, e)


@dataclass
class Final:
    value: np.ndarray  # value ids with ledger entries, sorted
    chain: np.ndarray
    oneshot: np.ndarray
    ceiling: np.ndarray  # last recorded ceiling
    policy_kind: np.ndarray  # K_CEILING / K_SCHEDULE, -1 when none
    policy: dict  # schedule fields and ceiling of the last policy event
    paused: np.ndarray
    raw_deleted: np.ndarray
    owner_held: np.ndarray  # the ledger records the value as held on its owner's device (docs/custody.md)
    upload: np.ndarray  # the owner's last recorded upload level (-1: none)


def check_replay(rec: Recorder, e) -> Final:
    S = "Budget replay"
    n = e["id"].size
    vo = np.argsort(e["value"], kind="stable")  # value-major, ledger order within a value
    v = {k: col[vo] for k, col in e.items()}
    pos = np.arange(n)
    new = np.ones(n, dtype=bool)
    if n:
        new[1:] = v["value"][1:] != v["value"][:-1]
    gstart = np.maximum.accumulate(np.where(new, pos, 0)) if n else pos
    kind = v["kind"]
    release = (kind == K_CHAIN) | (kind == K_ONESHOT)
    is_policy = (kind == K_CEILING) | (kind == K_SCHEDULE)
    loss_after = v["chain_after"] + v["oneshot_after"]

    def entry(i: int) -> str:
        k = int(kind[i])
        name = KINDS[k] if 0 <= k < len(KINDS) else f"kind {k}"
        return f"entry {v['id'][i]} (value {v['value'][i]}, {name}, block {v['block'][i]})"

    first_ok = is_policy & (v["chain_before"] == 0) & (v["oneshot_before"] == 0)
    rec.check(S, "each value's ledger starts with a ceiling or schedule event at zero loss", new & ~first_ok,
              int(new.sum()), lambda i: f"{entry(i)} is the value's first entry: chain_loss_before "
                                        f"{eps_text(v['chain_before'][i])}, oneshot_loss_before "
                                        f"{eps_text(v['oneshot_before'][i])}")
    cont = np.zeros(n, dtype=bool)
    cont[1:] = ~new[1:] & ((v["chain_before"][1:] != v["chain_after"][:-1])
                           | (v["oneshot_before"][1:] != v["oneshot_after"][:-1]))
    rec.check(S, "each entry's before-losses equal the previous entry's after-losses", cont, int((~new).sum()),
              lambda i: f"{entry(i)}: before (chain {eps_text(v['chain_before'][i])}, one-shot "
                        f"{eps_text(v['oneshot_before'][i])}) but the previous entry left (chain "
                        f"{eps_text(v['chain_after'][i - 1])}, one-shot {eps_text(v['oneshot_after'][i - 1])})")
    eps = v["epsilon"]
    chain_ok = (kind == K_CHAIN) & (eps > 0) & (v["chain_after"] == np.maximum(v["chain_before"], eps)) \
        & (v["oneshot_after"] == v["oneshot_before"])
    oneshot_ok = (kind == K_ONESHOT) & (eps > 0) & (v["oneshot_after"] == v["oneshot_before"] + eps) \
        & (v["chain_after"] == v["chain_before"])
    rec.check(S, "chain releases set chain_loss = max(chain_loss, epsilon); one-shot releases add epsilon",
              release & ~(chain_ok | oneshot_ok), int(release.sum()),
              lambda i: f"{entry(i)}: epsilon {eps_text(eps[i])}, chain {eps_text(v['chain_before'][i])} -> "
                        f"{eps_text(v['chain_after'][i])}, one-shot {eps_text(v['oneshot_before'][i])} -> "
                        f"{eps_text(v['oneshot_after'][i])}")
    other_ok = (v["chain_after"] == v["chain_before"]) & (v["oneshot_after"] == v["oneshot_before"]) \
        & np.where(kind == K_UPLOAD, eps > 0, eps == -1) & (v["purchase"] == -1) & (kind >= 0) & (kind < len(KINDS))
    rec.check(S, "budget events (ceiling, schedule, pause, resume, raw deletion, custody, owner uploads: these name "
                 "their upload level) change no loss and sell nothing",
              ~release & ~other_ok, int((~release).sum()),
              lambda i: f"{entry(i)}: epsilon {eps_text(eps[i])}, purchase {v['purchase'][i]}, chain "
                        f"{eps_text(v['chain_before'][i])} -> {eps_text(v['chain_after'][i])}, one-shot "
                        f"{eps_text(v['oneshot_before'][i])} -> {eps_text(v['oneshot_after'][i])}")

    # The policy in force at each entry: the value's latest ceiling/schedule event at or before it.
    lp = np.maximum.accumulate(np.where(is_policy, pos, -1)) if n else pos
    has = lp >= gstart
    p = np.where(has, lp, pos)
    fixed = has & (kind[p] == K_CEILING)
    sched = has & (kind[p] == K_SCHEDULE)
    in_force = np.where(fixed, v["ceiling"][p], -1)
    if sched.any():
        s = np.flatnonzero(sched)
        in_force[s] = schedule_ceilings(v["sched_start"][p[s]], v["sched_cap"][p[s]], v["sched_start_at"][p[s]],
                                        v["sched_end_at"][p[s]], v["sched_shape"][p[s]], v["sched_steps"][p[s]],
                                        v["created_at"][s])

    def policy(i: int) -> str:
        j = int(p[i])
        if not has[i]:
            return "no ceiling policy"
        if kind[j] == K_CEILING:
            return f"fixed ceiling {eps_text(v['ceiling'][j])} (entry {v['id'][j]})"
        return (f"schedule {eps_text(v['sched_start'][j])} -> {eps_text(v['sched_cap'][j])} from "
                f"{when_text(v['sched_start_at'][j])} to {when_text(v['sched_end_at'][j])} "
                f"({SHAPES[v['sched_shape'][j]] if 0 <= v['sched_shape'][j] < 3 else '?'}) "
                f"allowing {eps_text(in_force[i])} at {when_text(v['created_at'][i])} (entry {v['id'][j]})")

    well = np.ones(n, dtype=bool)
    pol_fixed = kind == K_CEILING
    pol_sched = kind == K_SCHEDULE
    no_sched = (v["sched_start"] == -1) & (v["sched_cap"] == -1) & (v["sched_start_at"] == -1) \
        & (v["sched_end_at"] == -1) & (v["sched_shape"] == 0) & (v["sched_steps"] == -1)
    well[pol_fixed] = (no_sched & (v["ceiling"] >= 0) & (v["ceiling"] <= 700 * MICRO))[pol_fixed]
    shape_ok = (((v["sched_shape"] == 1) & (v["sched_steps"] == -1))
                | ((v["sched_shape"] == 2) & (v["sched_steps"] >= 1)))
    sched_ok = (v["sched_start"] >= 0) & (v["sched_cap"] >= v["sched_start"]) & (v["sched_cap"] <= 700 * MICRO) \
        & (v["sched_start_at"] >= 0) & (v["sched_end_at"] - v["sched_start_at"] >= 1_000_000) & shape_ok
    well[pol_sched] = sched_ok[pol_sched]
    rec.check(S, "ceiling and schedule events are well formed", is_policy & ~well, int(is_policy.sum()),
              lambda i: f"{entry(i)}: ceiling {eps_text(v['ceiling'][i])}, schedule {eps_text(v['sched_start'][i])} -> "
                        f"{eps_text(v['sched_cap'][i])}, {when_text(v['sched_start_at'][i])} .. "
                        f"{when_text(v['sched_end_at'][i])}, shape {v['sched_shape'][i]}, steps {v['sched_steps'][i]}")
    rec.check(S, "a ceiling policy is in force at every entry", ~has, n,
              lambda i: f"{entry(i)} precedes every ceiling or schedule event of its value")
    over = has & (loss_after > in_force)
    rec.check(S, "loss after every entry <= the ceiling in force then (recomputed from the policy events)", over,
              int(has.sum()), lambda i: f"{entry(i)} at {when_text(v['created_at'][i])}: loss "
                                        f"{eps_text(loss_after[i])} exceeds the {policy(i)}")
    rec_bad = has & ((v["ceiling"] > in_force) | (fixed & (v["ceiling"] != in_force))
                     | (sched & (v["ceiling"] < v["sched_start"][p])))
    rec.check(S, "each recorded ceiling is the one in force (fixed) or within the schedule at that time", rec_bad,
              int(has.sum()),
              lambda i: f"{entry(i)} records ceiling {eps_text(v['ceiling'][i])}; in force: {policy(i)}")
    snapshot = has & ~release & ~is_policy
    same = np.ones(n, dtype=bool)
    for col in ("sched_start", "sched_cap", "sched_start_at", "sched_end_at", "sched_shape", "sched_steps"):
        same &= v[col] == v[col][p]
    rec.check(S, "pause, resume and raw-deletion entries record the policy in force", snapshot & ~same,
              int(snapshot.sum()), lambda i: f"{entry(i)} records a schedule different from the {policy(i)}")
    fall = np.zeros(n, dtype=bool)
    fall[1:] = ~new[1:] & (lp[1:] == lp[:-1]) & sched[1:] & (v["ceiling"][1:] < v["ceiling"][:-1])
    rec.check(S, "under a schedule the ceiling never falls (schedules only raise it)", fall, int(sched.sum()),
              lambda i: f"{entry(i)} records ceiling {eps_text(v['ceiling'][i])} after {eps_text(v['ceiling'][i - 1])} "
                        f"under the same schedule")

    # Final state per value.
    last = np.flatnonzero(np.append(new[1:], True)) if n else pos
    lpr = np.maximum.accumulate(np.where((kind == K_PAUSE) | (kind == K_RESUME), pos, -1)) if n else pos
    paused = (lpr[last] >= gstart[last]) & (kind[np.maximum(lpr[last], 0)] == K_PAUSE) if n else np.zeros(0, bool)
    raw_values = np.unique(v["value"][kind == K_RAW])
    up = np.maximum.accumulate(np.where(kind == K_UPLOAD, pos, -1)) if n else pos
    upload = np.where(up[last] >= gstart[last], eps[np.maximum(up[last], 0)], -1) if n else np.zeros(0, np.int64)
    lastp = p[last]
    return Final(
        value=v["value"][last], chain=v["chain_after"][last], oneshot=v["oneshot_after"][last],
        ceiling=v["ceiling"][last], policy_kind=np.where(has[last], kind[lastp], -1),
        policy={c: v[c][lastp] for c in ("ceiling", "sched_start", "sched_cap", "sched_start_at", "sched_end_at",
                                          "sched_shape", "sched_steps")},
        paused=paused, raw_deleted=np.isin(v["value"][last], raw_values),
        owner_held=np.isin(v["value"][last], np.unique(v["value"][kind == K_HELD])), upload=upload)
