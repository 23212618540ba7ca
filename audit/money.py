"""The money checks (docs/money.md; docs/budget-rules.md#the-audit).

Every account's balance equals the sum of its entries and its last ``balance_after`` (each entry's
``balance_after`` is the running sum); per purchase the buyer's debit equals the price and equals the owners'
shares plus the platform fee; only owners whose values were released are paid; earnings and fees never appear
without a purchase.  Each top-up is one credit of its buyer's account by its amount, each payout request one debit
of its owner's earnings by its amount (and, if rejected, one credit back); every top-up and payout movement
belongs to its record, purchases' movements (kinds purchase, fee, earning) name their purchase and no other
movement does; and money is neither created nor lost: all balances add up to what came in (top-ups and other
deposits) less what was paid out.
"""
from __future__ import annotations

import numpy as np

from .codes import (
    A_BUYER,
    A_OWNER,
    A_PENDING,
    A_PLATFORM,
    ACCOUNT_KINDS,
    K_CHAIN,
    K_ONESHOT,
    M_ADJUST,
    M_EARNING,
    M_FEE,
    M_PAYOUT,
    M_PURCHASE,
    M_SETTLEMENT,
    M_TOPUP,
    MONEY_KINDS,
    P_REJECTED,
    PAYOUT_STATUSES,
    S_COMPLETED,
)
from .report import Recorder, money_text
from .tables import lookup


def check_money(rec: Recorder, e, p, values, a, m, payouts) -> None:
    S = "Money"
    na, nm = a["id"].size, m["id"].size
    apos, afound = lookup(a["id"], m["account"])
    rec.check(S, "every money entry belongs to an account", ~afound, nm,
              lambda i: f"money entry {m['id'][i]} names account {m['account'][i]}, which does not exist")
    # Replay each account: entries by (account, id); running sums.
    order = np.lexsort((m["id"], m["account"]))
    acc, amt, after = m["account"][order], m["amount"][order], m["balance_after"][order]
    new = np.ones(nm, dtype=bool)
    if nm:
        new[1:] = acc[1:] != acc[:-1]
    cs = np.cumsum(amt)
    gs = np.maximum.accumulate(np.where(new, np.arange(nm), 0)) if nm else np.zeros(0, dtype=np.int64)
    running = cs - (cs[gs] - amt[gs])  # the account's balance after each of its entries
    bad_run = np.zeros(nm, dtype=bool)
    bad_run[order] = running != after
    running_of = np.empty(nm, dtype=np.int64)
    running_of[order] = running
    rec.check(S, "each entry's balance_after is its account's running sum", bad_run, nm,
              lambda i: f"money entry {m['id'][i]} (account {m['account'][i]}): balance_after "
                        f"{money_text(m['balance_after'][i])}, running sum {money_text(running_of[i])}")
    total = np.zeros(na, dtype=np.int64)
    lastafter = np.full(na, 0, dtype=np.int64)
    has = np.zeros(na, dtype=bool)
    fo = afound[order]
    np.add.at(total, apos[order][fo], amt[fo])
    ends = np.flatnonzero(np.append(new[1:], True)) if nm else np.zeros(0, dtype=np.int64)
    ends = ends[fo[ends]] if nm else ends
    lastafter[apos[order][ends]] = after[ends]
    has[apos[order][ends]] = True
    rec.check(S, "each account's balance equals the sum of its entries", total != a["balance"], na,
              lambda i: f"account {a['id'][i]} ({ACCOUNT_KINDS[a['kind'][i]] if a['kind'][i] >= 0 else '?'}, user "
                        f"{a['user'][i]}): balance {money_text(a['balance'][i])}, entries sum to "
                        f"{money_text(total[i])}")
    rec.check(S, "each account's balance equals its last balance_after", has & (lastafter != a["balance"]), na,
              lambda i: f"account {a['id'][i]}: balance {money_text(a['balance'][i])}, last balance_after "
                        f"{money_text(lastafter[i])}")
    rec.check(S, "balances are never negative", (a["balance"] < 0), na,
              lambda i: f"account {a['id'][i]}: balance {money_text(a['balance'][i])}")

    kind = np.where(afound, a["kind"][apos], -1)
    user = np.where(afound, a["user"][apos], -2)
    with_p = m["purchase"] >= 0
    ppos, pfound = lookup(p["id"], m["purchase"])
    rec.check(S, "money entries name existing purchases", with_p & ~pfound, int(with_p.sum()),
              lambda i: f"money entry {m['id'][i]} names purchase {m['purchase'][i]}, which does not exist")
    returned = np.isin(m["id"], payouts["release"])  # a rejected payout credits the owner's earnings back
    settled = m["settlement"] >= 0
    unexplained = (~with_p & ((kind == A_OWNER) | (kind == A_PLATFORM) | (kind == A_PENDING)) & (m["amount"] > 0)
                   & ~returned & ~(settled & (kind == A_OWNER)))
    rec.check(S, "earnings and fees are credited only by purchases and settlements", unexplained,
              int((~with_p).sum()),
              lambda i: f"money entry {m['id'][i]}: {money_text(m['amount'][i])} credited to account {m['account'][i]} "
                        f"({ACCOUNT_KINDS[kind[i]]}) without a purchase")
    pm = np.flatnonzero(with_p & pfound)
    q = ppos[pm]
    buyer_side = kind[pm] == A_BUYER
    wrong_side = np.zeros(nm, dtype=bool)
    wrong_side[pm] = np.where(buyer_side, (m["amount"][pm] >= 0) | (user[pm] != p["buyer"][q]),
                              m["amount"][pm] <= 0)
    rec.check(S, "in a purchase only its buyer is debited, and owners and the platform are credited", wrong_side,
              pm.size, lambda i: f"money entry {m['id'][i]}: {money_text(m['amount'][i])} on account {m['account'][i]} "
                                 f"({ACCOUNT_KINDS[kind[i]] if kind[i] >= 0 else '?'}, user {user[i]}) in purchase "
                                 f"{m['purchase'][i]}")
    debit = np.zeros(p["id"].size, dtype=np.int64)
    credit = np.zeros(p["id"].size, dtype=np.int64)
    moved = np.zeros(p["id"].size, dtype=np.int64)
    np.add.at(debit, q[buyer_side], -m["amount"][pm][buyer_side])
    np.add.at(credit, q[~buyer_side], m["amount"][pm][~buyer_side])
    np.add.at(moved, q, 1)
    completed = p["status"] == S_COMPLETED
    bad_p = np.where(completed, (debit != p["price"]) | (credit != debit), moved != 0)
    rec.check(S, "per purchase: buyer debit = price = owners' shares + platform fee (none unless completed)", bad_p,
              p["id"].size, lambda i: f"purchase {p['id'][i]}: price {money_text(p['price'][i])}, buyer debited "
                                      f"{money_text(debit[i])}, owners and platform credited {money_text(credit[i])}, "
                                      f"{moved[i]} movements")
    # Owners paid in a purchase must have had a value released in it.
    release = (e["kind"] == K_CHAIN) | (e["kind"] == K_ONESHOT)
    vpos, vfound = lookup(values["id"], e["value"][release])
    sold_pairs = np.unique(e["purchase"][release][vfound] * (1 << 32) + values["owner"][vpos[vfound]])
    paid = np.flatnonzero(with_p & (kind == A_OWNER))
    pairs = m["purchase"][paid] * (1 << 32) + user[paid]
    unpaid = np.zeros(nm, dtype=bool)
    unpaid[paid] = ~np.isin(pairs, sold_pairs)
    rec.check(S, "only owners whose values a purchase released are paid by it", unpaid, paid.size,
              lambda i: f"money entry {m['id'][i]}: owner {user[i]} paid {money_text(m['amount'][i])} by purchase "
                        f"{m['purchase'][i]}, which released none of their values")


def check_topups_payouts(rec: Recorder, a, m, t, po) -> None:
    S = "Money"
    nm = m["id"].size
    apos, afound = lookup(a["id"], m["account"])
    kind = np.where(afound, a["kind"][apos], -1)
    user = np.where(afound, a["user"][apos], -2)

    def movement(entry_ids):
        """Position of each entry id among the entries, whether found, and its account kind, user and amount."""
        pos, found = lookup(m["id"], entry_ids)
        pick = lambda col, none: np.where(found, col[pos] if nm else none, none)  # noqa: E731
        return (found, pick(kind, -1), pick(user, -2), pick(m["amount"], 0), pick(m["kind"], -1),
                pick(m["account"], -1))

    found, akind, auser, amount, mkind, _ = movement(t["entry"])
    bad = ~found | (akind != A_BUYER) | (auser != t["buyer"]) | (amount != t["amount"]) | (mkind != M_TOPUP)
    rec.check(S, "each top-up is one credit of its buyer's account by its amount", bad, t["id"].size,
              lambda i: f"top-up {t['id'][i]} of {money_text(t['amount'][i])} to user {t['buyer'][i]}: its movement "
                        f"{t['entry'][i]} credits {money_text(amount[i])} to a "
                        f"{ACCOUNT_KINDS[akind[i]] if akind[i] >= 0 else 'missing'} account of user {auser[i]}")
    hfound, hkind, huser, hamount, hmkind, hacc = movement(po["hold"])
    rfound, rkind, ruser, ramount, rmkind, racc = movement(po["release"])
    rejected = po["status"] == P_REJECTED
    bad = (~hfound | (hkind != A_OWNER) | (huser != po["owner"]) | (hamount != -po["amount"]) | (hmkind != M_PAYOUT)
           | np.where(rejected, ~rfound | (racc != hacc) | (ramount != po["amount"]) | (rmkind != M_PAYOUT),
                      po["release"] >= 0))
    rec.check(S, "each payout holds its amount from its owner's earnings (and a rejected one returns it)", bad,
              po["id"].size,
              lambda i: f"payout {po['id'][i]} of {money_text(po['amount'][i])} for owner {po['owner'][i]} "
                        f"({PAYOUT_STATUSES[po['status'][i]] if po['status'][i] >= 0 else '?'}): hold "
                        f"{money_text(hamount[i])} on user {huser[i]}'s account, returned {money_text(ramount[i])}")
    recorded = np.concatenate([t["entry"], po["hold"], po["release"][po["release"] >= 0]])
    orphan = ((m["kind"] == M_TOPUP) | (m["kind"] == M_PAYOUT)) & ~np.isin(m["id"], recorded)
    rec.check(S, "every top-up and payout movement belongs to its top-up or payout request", orphan, nm,
              lambda i: f"money entry {m['id'][i]}: {money_text(m['amount'][i])} "
                        f"({MONEY_KINDS[m['kind'][i]] if m['kind'][i] >= 0 else '?'}) on account {m['account'][i]} "
                        f"without a record")
    with_p = m["purchase"] >= 0
    with_s = m["settlement"] >= 0
    of_sale = (m["kind"] == M_PURCHASE) | (m["kind"] == M_FEE) | (m["kind"] == M_EARNING) | (m["kind"] == M_SETTLEMENT)
    expected = np.select([kind == A_BUYER, kind == A_PLATFORM, (kind == A_OWNER) | (kind == A_PENDING)],
                         [M_PURCHASE, M_FEE, M_EARNING], -1)
    expected = np.where(with_s & (kind == A_PENDING), M_SETTLEMENT, expected)
    bad = ((m["kind"] < 0) | (of_sale != (with_p ^ with_s)) | ((with_p | with_s) & (m["kind"] != expected))
           | (with_s & (kind != A_OWNER) & (kind != A_PENDING)) | (with_p & (m["kind"] == M_SETTLEMENT)))
    rec.check(S, "purchases' and settlements' movements (purchase, fee, earning, settlement) name their purchase "
                 "or settlement, and only they do", bad, nm,
              lambda i: f"money entry {m['id'][i]}: kind "
                        f"{MONEY_KINDS[m['kind'][i]] if m['kind'][i] >= 0 else 'unknown'} on a "
                        f"{ACCOUNT_KINDS[kind[i]] if kind[i] >= 0 else '?'} account, purchase "
                        f"{m['purchase'][i] if with_p[i] else 'none'}, settlement "
                        f"{m['settlement'][i] if with_s[i] else 'none'}")
    inflow = int(m["amount"][(m["kind"] == M_TOPUP) | (m["kind"] == M_ADJUST)].sum())
    outflow = -int(m["amount"][m["kind"] == M_PAYOUT].sum())
    held = int(a["balance"].sum())
    rec.check(S, "money is neither created nor lost: balances = top-ups and deposits - payouts",
              np.array([held != inflow - outflow]), 1,
              lambda i: f"balances add up to {money_text(held)}; top-ups and deposits {money_text(inflow)} less "
                        f"payouts {money_text(outflow)} make {money_text(inflow - outflow)}")


def check_settlements(rec: Recorder, p, values, a, m, st, rv) -> None:
    """Owners' earnings from the compact ledger and their settlement (docs/money.md#settlement): each release's
    owner is its value's owner; each purchase credits its attribute's pending account exactly the earnings its
    ledger rows record; each attribute's settlements cover its release rows in order without gap or overlap; each
    credits every owner exactly their values' earnings in the rows it covers and debits the pending account their
    total; and each pending account holds exactly the earnings not settled yet."""
    S = "Money"
    nm, nv = m["id"].size, rv["row"].size
    vpos, vfound = lookup(values["id"], rv["value"])
    bad = ~vfound | (np.where(vfound, values["owner"][vpos] if values["id"].size else -1, -1) != rv["owner"])
    rec.check(S, "each released value's owner in the ledger is the value's owner", bad, nv,
              lambda i: f"release row {rv['row'][i]}: value {rv['value'][i]} recorded as owned by {rv['owner'][i]}")
    recorded = rv["earning"] >= 0
    rec.check(S, "recorded earnings are never negative", rv["earning"] < -1, nv,
              lambda i: f"release row {rv['row'][i]}: value {rv['value'][i]} earned {money_text(rv['earning'][i])}")
    apos, afound = lookup(a["id"], m["account"])
    kind = np.where(afound, a["kind"][apos], -1)
    shard_of = np.where(afound, a["shard"][apos], -1)
    user = np.where(afound, a["user"][apos], -2)

    # Per purchase: credit to the pending account = the recorded earnings of its values.
    pids = p["id"]
    credited = np.zeros(pids.size, dtype=np.int64)
    earned = np.zeros(pids.size, dtype=np.int64)
    has_record = np.zeros(pids.size, dtype=bool)
    pend = (kind == A_PENDING) & (m["purchase"] >= 0)
    q, qf = lookup(pids, m["purchase"][pend])
    np.add.at(credited, q[qf], m["amount"][pend][qf])
    r, rf = lookup(pids, rv["purchase"][recorded])
    np.add.at(earned, r[rf], rv["earning"][recorded][rf])
    has_record[r[rf]] = True
    bad = (has_record | (credited != 0)) & (credited != earned)
    rec.check(S, "per purchase: the owners' pending credit equals the earnings its ledger rows record", bad,
              pids.size, lambda i: f"purchase {pids[i]}: pending account credited {money_text(credited[i])}, ledger "
                                   f"records {money_text(earned[i])} of earnings")
    # A purchase credits its own attribute's pending account.
    wrong = np.zeros(nm, dtype=bool)
    ppos, pfound = lookup(pids, m["purchase"])
    attribute_of = np.where(pfound, p["attribute"][ppos], -1) if pids.size else np.full(nm, -1)
    wrong[pend] = ~pfound[pend] | (shard_of[pend] != attribute_of[pend])
    rec.check(S, "a purchase credits the pending account of its own attribute", wrong, int(pend.sum()),
              lambda i: f"money entry {m['id'][i]}: purchase {m['purchase'][i]} credits the pending account of "
                        f"attribute {shard_of[i]}")

    # Settlements follow each other per shard.
    ns = st["id"].size
    order = np.lexsort((st["after"], st["shard"]))
    gap = np.zeros(ns, dtype=bool)
    if ns:
        sh, af, th = st["shard"][order], st["after"][order], st["through"][order]
        first = np.ones(ns, dtype=bool)
        first[1:] = sh[1:] != sh[:-1]
        prev_through = np.where(first, 0, np.roll(th, 1))
        gap[order] = (af != prev_through) | (th <= af)
    rec.check(S, "each attribute's settlements follow each other without gap or overlap", gap, ns,
              lambda i: f"settlement {st['id'][i]} of attribute {st['shard'][i]} covers release rows "
                        f"({st['after'][i]}, {st['through'][i]}]")
    # Expected credits per (settlement, owner) from the release rows.
    # Each value's settlement: the first of its shard's settlements ending at or after its row (one searchsorted
    # over (shard, through) keys), if that settlement starts before the row.
    shift = 1 << 40
    spos = np.full(nv, -1, dtype=np.int64)
    if ns:
        by_end = np.lexsort((st["through"], st["shard"]))
        k = np.searchsorted(st["shard"][by_end] * shift + st["through"][by_end], rv["shard"] * shift + rv["row"])
        cand = by_end[np.minimum(k, ns - 1)]
        inside = (k < ns) & (st["shard"][cand] == rv["shard"]) & (st["after"][cand] < rv["row"])
        spos = np.where(inside, cand, -1)
    use = recorded & (spos >= 0) & (rv["earning"] > 0)
    key_want = spos[use] * (1 << 40) + rv["owner"][use]
    kw, inv = np.unique(key_want, return_inverse=True)
    want = np.bincount(inv, weights=rv["earning"][use], minlength=kw.size).astype(np.int64)
    cred = (m["settlement"] >= 0) & (kind == A_OWNER)
    s_of, s_found = lookup(st["id"], m["settlement"][cred])
    key_got = np.where(s_found, s_of, -1) * (1 << 40) + user[cred]
    kg, ginv = np.unique(key_got, return_inverse=True)
    got = np.bincount(ginv, weights=m["amount"][cred], minlength=kg.size).astype(np.int64)
    keys = np.union1d(kw, kg)
    w = np.zeros(keys.size, dtype=np.int64)
    g = np.zeros(keys.size, dtype=np.int64)
    w[np.searchsorted(keys, kw)] = want
    g[np.searchsorted(keys, kg)] = got
    bad = w != g
    rec.check(S, "each settlement credits every owner exactly their values' earnings in the rows it covers", bad,
              keys.size, lambda i: f"settlement {st['id'][keys[i] >> 40] if keys[i] >= 0 else '?'}, owner "
                                   f"{keys[i] & ((1 << 40) - 1)}: credited {money_text(g[i])}, earned "
                                   f"{money_text(w[i])}")
    debit = np.zeros(ns, dtype=np.int64)
    deb = (m["settlement"] >= 0) & (kind == A_PENDING)
    d_of, d_found = lookup(st["id"], m["settlement"][deb])
    np.add.at(debit, d_of[d_found], -m["amount"][deb][d_found])
    total = np.zeros(ns, dtype=np.int64)
    c_of, c_found = lookup(st["id"], m["settlement"][cred])
    np.add.at(total, c_of[c_found], m["amount"][cred][c_found])
    bad = (debit != st["amount"]) | (total != st["amount"])
    rec.check(S, "each settlement debits its attribute's pending account what it credits the owners", bad, ns,
              lambda i: f"settlement {st['id'][i]}: amount {money_text(st['amount'][i])}, pending debited "
                        f"{money_text(debit[i])}, owners credited {money_text(total[i])}")
    # Each pending account holds its shard's unsettled earnings.
    pa = np.flatnonzero(a["kind"] == A_PENDING)
    settled_shards, of_shard = np.unique(st["shard"], return_inverse=True)
    last = np.zeros(settled_shards.size, dtype=np.int64)  # each shard's last settled release row
    np.maximum.at(last, of_shard, st["through"])
    pos, found = lookup(settled_shards, rv["shard"])
    open_rows = recorded & (rv["row"] > np.where(found, last[pos] if last.size else 0, 0))
    shards, of_value = np.unique(rv["shard"][open_rows], return_inverse=True)
    unsettled = np.bincount(of_value, weights=rv["earning"][open_rows], minlength=shards.size).astype(np.int64)
    pos, found = lookup(shards, a["shard"][pa])
    held = np.where(found, unsettled[pos] if unsettled.size else 0, 0)
    rec.check(S, "each attribute's pending account holds exactly its earnings not settled yet",
              held != a["balance"][pa], pa.size,
              lambda k: f"pending account {a['id'][pa[k]]} of attribute {a['shard'][pa[k]]}: balance "
                        f"{money_text(a['balance'][pa[k]])}, unsettled earnings {money_text(held[k])}")
