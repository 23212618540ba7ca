"""The purchases against the ledger (docs/budget-rules.md#the-audit).

Each completed purchase has exactly ``included`` release entries, at the purchase's epsilon, for values of its
attribute, one per value; other purchases have none.  One-shot purchases and surveys
(docs/budget-rules.md#one-shot-losses-add-up): their releases are ``oneshot_release`` entries (chain purchases' are
``chain_release``) at the purchase's ``charged_epsilon``; every release's guarantee, and the purchase's, is the one
its mechanism gives (``audit.codes.MECHANISM_GUARANTEE``; none or ``ldp`` for chains); surveys store no outputs at
all (the buyer gets only the aggregate).
"""
from __future__ import annotations

import numpy as np

from .codes import (
    G_LDP,
    G_NONE,
    K_CHAIN,
    K_ONESHOT,
    KINDS,
    MECH_GRADUAL,
    MECHANISM_GUARANTEE,
    MECHANISMS,
    S_COMPLETED,
    SURVEYS,
)
from .report import Recorder, eps_text, guarantee_text, mechanism_text, status_text
from .tables import lookup


def check_purchases(rec: Recorder, e, p, values) -> None:
    S = "Purchases"
    release = (e["kind"] == K_CHAIN) | (e["kind"] == K_ONESHOT)
    r = np.flatnonzero(release)
    ppos, pfound = lookup(p["id"], e["purchase"][r])
    rec.check(S, "every release belongs to an existing purchase", ~pfound, r.size,
              lambda k: f"entry {e['id'][r[k]]} (value {e['value'][r[k]]}) releases for purchase "
                        f"{e['purchase'][r[k]]}, which does not exist")
    counts = np.zeros(p["id"].size, dtype=np.int64)
    np.add.at(counts, ppos[pfound], 1)
    completed = p["status"] == S_COMPLETED
    wrong = np.where(completed, counts != p["included"], counts != 0)
    rec.check(S, "each completed purchase has exactly `included` ledger entries; others have none", wrong,
              p["id"].size, lambda i: f"purchase {p['id'][i]} ({status_text(p['status'][i])}): included "
                                      f"{p['included'][i]}, ledger entries {counts[i]}")
    vpos, vfound = lookup(values["id"], e["value"][r])
    rf = np.flatnonzero(pfound)
    q = ppos[rf]
    bad = np.zeros(r.size, dtype=bool)
    chain_purchase = p["mechanism"][q] == MECH_GRADUAL
    bad[rf] = (chain_purchase & (e["epsilon"][r[rf]] != p["epsilon"][q])) | ~vfound[rf] \
        | (values["attribute"][vpos[rf]] != p["attribute"][q])
    rec.check(S, "each release is at its purchase's epsilon, for a value of its attribute", bad, rf.size,
              lambda k: f"entry {e['id'][r[k]]}: epsilon {eps_text(e['epsilon'][r[k]])}, value {e['value'][r[k]]}; "
                        f"purchase {p['id'][ppos[k]]} is at {eps_text(p['epsilon'][ppos[k]])} on attribute "
                        f"{p['attribute'][ppos[k]]}")
    pair = np.stack([e["purchase"][r], e["value"][r]], axis=1)
    order = np.lexsort((pair[:, 1], pair[:, 0]))
    sp = pair[order]
    dup = np.zeros(r.size, dtype=bool)
    if r.size > 1:
        dup[order[1:]] = (sp[1:] == sp[:-1]).all(axis=1)
    rec.check(S, "a purchase releases each value at most once", dup, r.size,
              lambda k: f"entry {e['id'][r[k]]}: value {e['value'][r[k]]} released twice in purchase "
                        f"{e['purchase'][r[k]]}")



def check_oneshot(rec: Recorder, e, p, chunks) -> None:
    """One-shot releases and surveys, and every purchase's and release's guarantee (module doc)."""
    S = "Purchases"
    release = (e["kind"] == K_CHAIN) | (e["kind"] == K_ONESHOT)
    r = np.flatnonzero(release)
    ppos, pfound = lookup(p["id"], e["purchase"][r])
    rf = np.flatnonzero(pfound)
    q = ppos[rf]
    mech = p["mechanism"][q]
    oneshot = mech != MECH_GRADUAL
    kind = e["kind"][r[rf]]
    wrong_kind = np.zeros(r.size, dtype=bool)
    wrong_kind[rf] = np.where(oneshot, kind != K_ONESHOT, kind != K_CHAIN)
    rec.check(S, "chain purchases release chain_release entries, one-shot purchases and surveys oneshot_release",
              wrong_kind, rf.size,
              lambda k: f"entry {e['id'][r[k]]} ({KINDS[e['kind'][r[k]]]}) for purchase {p['id'][ppos[k]]} "
                        f"({mechanism_text(p['mechanism'][ppos[k]])})")
    charged_bad = np.zeros(r.size, dtype=bool)
    charged_bad[rf] = oneshot & ((p["charged"][q] <= 0) | (e["epsilon"][r[rf]] != p["charged"][q]))
    rec.check(S, "each one-shot release is at its purchase's charged epsilon", charged_bad, int(oneshot.sum()),
              lambda k: f"entry {e['id'][r[k]]} (value {e['value'][r[k]]}): epsilon {eps_text(e['epsilon'][r[k]])}, "
                        f"purchase {p['id'][ppos[k]]} ({mechanism_text(p['mechanism'][ppos[k]])}) charged "
                        f"{eps_text(p['charged'][ppos[k]])}")
    known = (p["mechanism"] >= 0) & (p["mechanism"] < len(MECHANISMS))
    expected = np.where(known, MECHANISM_GUARANTEE[np.clip(p["mechanism"], 0, len(MECHANISMS) - 1)], -9)
    bad_purchase = ~known | (p["guarantee"] != expected) \
        | ((p["status"] == S_COMPLETED) & (p["mechanism"] != MECH_GRADUAL) & (p["charged"] <= 0))
    rec.check(S, "each purchase's guarantee is its mechanism's (and completed one-shot purchases record their "
                 "charged epsilon)", bad_purchase, p["id"].size,
              lambda i: f"purchase {p['id'][i]}: mechanism {mechanism_text(p['mechanism'][i])}, guarantee "
                        f"{guarantee_text(p['guarantee'][i])}, charged {eps_text(p['charged'][i])}")
    g = e["guarantee"][r[rf]]
    want = expected[q]
    wrong_g = np.zeros(r.size, dtype=bool)
    wrong_g[rf] = np.where(oneshot, g != want, (g != G_NONE) & (g != G_LDP))
    rec.check(S, "each release's guarantee matches its purchase's mechanism (improved Christofides: per-report, "
                 "non-collusion)", wrong_g, rf.size,
              lambda k: f"entry {e['id'][r[k]]} (value {e['value'][r[k]]}) records guarantee "
                        f"{guarantee_text(e['guarantee'][r[k]])}; purchase {p['id'][ppos[k]]} is "
                        f"{mechanism_text(p['mechanism'][ppos[k]])} ({guarantee_text(expected[ppos[k]])})")
    not_release = ~release & (e["guarantee"] != G_NONE)
    rec.check(S, "budget events carry no guarantee", not_release, int((~release).sum()),
              lambda i: f"entry {e['id'][i]} ({KINDS[e['kind'][i]] if 0 <= e['kind'][i] < len(KINDS) else '?'}) "
                        f"records guarantee {guarantee_text(e['guarantee'][i])}")
    cpos, cfound = lookup(p["id"], chunks["purchase"])
    stored = np.zeros(p["id"].size, dtype=np.int64)
    np.add.at(stored, cpos[cfound], chunks["count"][cfound])
    is_survey = np.isin(p["mechanism"], SURVEYS)
    rec.check(S, "surveys store no outputs (the buyer gets only the aggregate; improved Christofides reports are "
                 "never sold)", is_survey & (stored > 0), int(is_survey.sum()),
              lambda i: f"purchase {p['id'][i]} ({mechanism_text(p['mechanism'][i])}) stores {stored[i]} outputs")
