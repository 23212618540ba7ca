"""One-shot releases and surveys: charged to ``oneshot_loss``, atomically (docs/budget-rules.md#budgets-and-ceilings).

The service; a request is parsed, charged and drawn by ``market.purchases.oneshot_specs`` and its values are read by
``market.purchases.eligibility``.

Mechanisms without gradual release draw afresh from the owner's sealed input at
every release, and each release adds its exact epsilon to the value's
``oneshot_loss`` (rule 4: sequential composition adds).  Two kinds of request
reuse ``Purchase`` (one idempotency claim, one API shape):

* **one-shot purchases** of a one-shot attribute (``Attribute.is_oneshot``):
  uRR / uRAP with the owners' PUM tags (categorical with a sensitive set:
  guarantee ``uldp``), RR3 (ternary: EWRR3 at ``p* = e^eps/(e^eps + 2)`` or
  RR3‡ with ``(eps1, eps2)``), LPP‡ (graph) and the optimal private sampler
  (distribution) -- guarantee ``ldp``.  The buyer gets every released output
  (``PurchaseChunk``, as chain purchases);
* **surveys** over a binary attribute (x = 1: the second label, membership of
  the sensitive group): Warner, Simmons, Christofides (guarantee ``ldp``) and
  improved Christofides (IC, guarantee ``per_report_non_collusion``: per-report
  eps only if respondents cannot see each other's cards or answers).  Every
  eligible owner answers exactly once, server-side from the sealed input; the
  buyer gets only the aggregate (``Purchase.result``); no report is stored.

**Charged epsilon.**  The exact level of the mechanism as released, computed in
``Decimal`` arithmetic at 40 digits and charged by ``oneshot_specs.ceil6``
(docs/budget-rules.md#one-shot-losses-add-up): uRR, uRAP, EWRR3, the
private sampler, Warner, Simmons and Christofides at their design points are
exactly the requested epsilon; RR3‡ and LPP‡ are ``max(eps2, eps1 + ln 2 -
ln(1 + e^-eps2))`` (docs/mechanisms-reference.md#rr3-and-the-graph-protocol-lpp, the exact level of the RR3‡
matrix: (1, 1) -> 1.379886, (1, 2) -> 2.0), never ``eps1 + eps2``; IC is the
realised deck's per-report ``ln(c3/c1)``, below the target (the deck is dealt
for the actual number of respondents by ``surveys.ic_deck_counts``, exactly).
Every draw samples integer cells built from the exact (Decimal) epsilons, whose
realised level is at most the charge (docs/mechanisms.md, "Exact sampling:
one-shot mechanisms"; ``mechanisms.exactness_oneshot`` computes it).

**Execution** is the one skeleton of every purchase, ``market.purchases.execution.purchase_execute``, with a
``market.purchases.releases.OneshotRelease``: one transaction with its locks in the global lock order
(``accounts.locks``); a value is included iff it is not paused or withdrawn, its raw input is present, and
``chain_loss + oneshot_loss + charged <= ceiling``, exactly, in integer micro-epsilons (rules 2, 4 and 7); the draws are
one vectorized call of the mechanism's record over the included values (secure default randomness; ``rng`` for tests);
the writes are set-based: budgets ``oneshot_loss += charged``, one ``oneshot_release`` ledger entry per value (with its
guarantee, inside the hash), money (every one-shot release is new loss, so no upgrade credit) and the outputs.
All or nothing (rule 6).
"""
from __future__ import annotations

from accounts import roles
from accounts.models import User
from ldpmarket.problems import PurchaseError
from market.models import Attribute, Purchase
from market.purchases.execution import claim_key
from market.purchases.oneshot_specs import Spec


def oneshot_claim(*, buyer: User, attribute: Attribute, spec: Spec, cohort: int | None,
                  idempotency_key: str) -> tuple[Purchase, bool]:
    """Claim ``idempotency_key`` for a one-shot purchase or survey; returns (purchase, created).

    A replay with the same request returns the same purchase; a different request is a conflict (409).
    """
    if not roles.can_buy(buyer):
        raise PurchaseError("Only buyers can purchase.")
    return claim_key(buyer=buyer, idempotency_key=idempotency_key, request_hash=spec.fingerprint(attribute.id, cohort),
                     attribute=attribute, epsilon=spec.purchase_epsilon, cohort=cohort, mechanism=spec.mechanism,
                     parameters=dict(spec.parameters), guarantee=str(spec.guarantee))
