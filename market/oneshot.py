"""One-shot releases and surveys: charged to ``oneshot_loss``, atomically (docs/budget-rules.md#budgets-and-ceilings).

The service; a request is parsed, charged and drawn by ``market.oneshot_specs`` and its values are read by
``market.eligible``.

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
``Decimal`` arithmetic at 40 digits and **rounded up** to 6 decimal places
(``ROUND_CEILING``), so the market never under-charges: uRR, uRAP, EWRR3, the
private sampler, Warner, Simmons and Christofides at their design points are
exactly the requested epsilon; RR3‡ and LPP‡ are ``max(eps2, eps1 + ln 2 -
ln(1 + e^-eps2))`` (docs/mechanisms-reference.md#rr3-and-the-graph-protocol-lpp, the exact level of the RR3‡
matrix: (1, 1) -> 1.379886, (1, 2) -> 2.0), never ``eps1 + eps2``; IC is the
realised deck's per-report ``ln(c3/c1)``, below the target (the deck is dealt
for the actual number of respondents by ``surveys.ic_deck_counts``, exactly).
Every draw samples integer cells built from the exact (Decimal) epsilons, whose
realised level is at most the charge (docs/mechanisms.md, "Exact sampling:
one-shot mechanisms"; ``mechanisms.exactness_oneshot`` computes it).

**Execution** (:func:`oneshot_execute`) is one transaction with the locks in the
global order of ``market.purchases.purchase_execute`` -- the purchase row,
budgets by value id (``FOR UPDATE``), money accounts (``purchases.lock_payment``),
the ledger head last (``ledger.append``) -- so one-shot purchases, chain
purchases, surveys and budget changes never deadlock.  A value is included iff it
is not paused or withdrawn, its raw input is present, and ``chain_loss +
oneshot_loss + charged <= ceiling``, exactly, in integer micro-epsilons (rules 2,
4 and 7).  The draws are one vectorized ``mechanisms`` call over the included
values (secure default randomness; ``rng`` for tests).  The writes are
set-based: budgets ``oneshot_loss += charged``, one ``oneshot_release`` ledger
entry per value (with its guarantee, inside the hash), money
(``purchases._move_money``: every one-shot release is new loss, so no upgrade
credit: each value costs the policy price at the charged epsilon) and the
outputs (``purchases._write_chunks``; uRAP stores bit vectors of width
``k + kappa``, LPP ``(item, state)``).  All or nothing (rule 6).
"""
from __future__ import annotations

import numpy as np
from django.db import transaction
from django.utils import timezone

from accounts import ledger, roles
from accounts.epsilon import from_micro, to_micro
from accounts.models import BudgetAccount, LedgerEntry, User
from ldpmarket import storage
from ldpmarket.problems import PurchaseError, TooFewRespondents

from . import domain, sealing
from .eligible import Pool, pool
from .models import Attribute, Purchase
from .oneshot_specs import M, Spec, draw, draw_batch, guarantee_label, run_survey, spec_of, survey_design
from .pricing import PolicyError, PricePolicy, units_to_decimal
from .purchases import _move_money, _write_chunks, claim_key, lock_payment, purchase_execute

# ================================================================================================ exact levels


# ============================================================================================= requests (specs)


# ================================================================================================== claiming

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


# ============================================================================================= the candidates


# ================================================================================================== drawing


def _open(attribute: Attribute, cand, rows: np.ndarray) -> np.ndarray:
    """The sealed inputs of ``cand``'s ``rows``, opened in one call."""
    return sealing.open_inputs([bytes(cand.sealed[i]) for i in rows], cand.owner_ids[rows],
                               [attribute.id] * rows.size, domain.payload_bytes(attribute))


# ================================================================================================ executing

def oneshot_execute(*, purchase_id: int, rng=None, progress=None, max_price=None) -> Purchase:
    """Run a claimed one-shot purchase or survey in one transaction (idempotent: a completed one is returned).

    ``progress(done, total)`` as ``purchase_execute``; ``max_price`` refuses, under the locks, a purchase that
    would cost more (a quote's price guard).  See the module docstring for the rules.
    """
    with transaction.atomic():
        purchase = (Purchase.objects.select_for_update(of=("self",)).select_related("attribute", "buyer")
                    .get(id=purchase_id))
        if purchase.status == Purchase.Status.COMPLETED:
            return purchase
        if not purchase.is_oneshot:
            raise PurchaseError("This is a chain purchase: run it with market.purchases.purchase_execute.")
        attribute, buyer = purchase.attribute, purchase.buyer
        spec = spec_of(purchase)
        try:
            policy = PricePolicy.parse(attribute.price_policy)
        except PolicyError as exc:
            raise PurchaseError(f"This attribute's price policy is invalid: {exc}") from None
        cand = pool(attribute, purchase.cohort, to_micro(spec.charged), lock=True, inputs=True)
        total_steps = 2 * int(cand.value_ids.size)
        inc = np.flatnonzero(cand.eligible)
        parameters = dict(purchase.parameters or {})
        charged = spec.charged
        result = None
        outputs = None
        if spec.is_survey:
            if inc.size == 0:
                raise TooFewRespondents("No owner can answer this survey now: see the quote for why.")
            design, charged = survey_design(spec, int(inc.size))
            if "counts" in design:
                parameters["deck"] = [int(c) for c in design["counts"]]
            x = domain.from_payload(attribute, _open(attribute, cand, inc)).reshape(-1)
            result = {**run_survey(spec, design, x, rng), "mechanism": str(spec.mechanism), "epsilon": str(charged),
                      "guarantee": str(spec.guarantee), "guarantee_label": guarantee_label(spec.guarantee)}
        elif inc.size:
            # In bounded batches (one vectorized draw each): a graph's or distribution's inputs and a uRAP
            # report are wide, so opening every input at once would take memory in proportion to n * width.
            outputs = np.empty((inc.size, attribute.width), dtype=np.int16)
            for start in range(0, inc.size, draw_batch(attribute)):
                part = inc[start:start + draw_batch(attribute)]
                outputs[start:start + part.size] = draw(attribute, spec, _open(attribute, cand, part), rng)
        if progress:
            progress(total_steps // 2, total_steps)
        e = to_micro(charged)
        if e > to_micro(spec.charged):  # pragma: no cover - ic_deck guarantees the realised level <= target
            raise PurchaseError("The realised epsilon exceeds what the values were checked for.")

        unit = int(policy.units(np.array([e]))[0])
        charge = np.full(inc.size, unit, dtype=np.int64)
        owner_share = policy.owner_units(charge)
        owners = cand.owner_ids[inc]
        accounts = lock_payment(buyer, owners, charge, owner_share, max_price)

        now = timezone.now()
        after = cand.oneshot_loss[inc] + e
        storage.update_rows(BudgetAccount._meta.db_table, "value_id", ["oneshot_loss", "updated_at"],
                         zip(cand.value_ids[inc].tolist(), _decimals(after), [now] * inc.size),
                         types={"value_id": "bigint", "oneshot_loss": "numeric(12,6)", "updated_at": "timestamptz"})
        if inc.size:
            ledger.append(_release_rows(cand, inc, e, purchase.id, spec.guarantee))
        _move_money(purchase, accounts, owners, charge, owner_share)
        if outputs is not None:
            _write_chunks(purchase, cand.value_ids[inc], outputs)

        if progress:
            progress(total_steps, total_steps)
        excluded = cand.excluded()
        purchase.candidates = int(cand.value_ids.size)
        purchase.included = int(inc.size)
        purchase.excluded_ceiling = excluded["ceiling"]
        purchase.excluded_budget = excluded["budget"]
        purchase.excluded_paused = excluded["paused"]
        purchase.excluded_withdrawn = excluded["withdrawn"]
        purchase.excluded_no_raw = excluded["no_raw"]
        purchase.new_points = 0
        purchase.price = units_to_decimal(int(charge.sum()))
        purchase.charged_epsilon = charged
        purchase.parameters = parameters
        purchase.result = result
        purchase.status = Purchase.Status.COMPLETED
        purchase.completed_at = now
        purchase.error = ""
        purchase.save()
    return purchase


def _decimals(micros: np.ndarray) -> list:
    distinct, inverse = np.unique(micros, return_inverse=True)
    table = [from_micro(int(v)) for v in distinct.tolist()]
    return [table[i] for i in inverse.reshape(-1).tolist()]


def _release_rows(cand: Pool, inc: np.ndarray, e: int, purchase_id: int, guarantee: str) -> ledger.Rows:
    rows = ledger.Rows.empty(inc.size)
    rec = rows.records
    rec["value"] = cand.value_ids[inc]
    rec["kind"] = ledger.KINDS.index(LedgerEntry.Kind.ONESHOT_RELEASE)
    rec["epsilon"] = e
    rec["reference"] = purchase_id
    rec["chain_before"] = rec["chain_after"] = cand.chain_loss[inc]
    rec["oneshot_before"] = cand.oneshot_loss[inc]
    rec["oneshot_after"] = cand.oneshot_loss[inc] + e
    rec["ceiling"] = cand.ceiling[inc]
    rec["guarantee"] = ledger.GUARANTEES.index(guarantee)
    return rows


def execute(*, purchase_id: int, rng=None, progress=None, max_price=None) -> Purchase:
    """Run any claimed purchase: one-shot and surveys here, chain purchases with ``purchases.purchase_execute``."""

    mechanism = Purchase.objects.filter(id=purchase_id).values_list("mechanism", flat=True).first()
    if mechanism is not None and mechanism != M.GRADUAL_RR:
        return oneshot_execute(purchase_id=purchase_id, rng=rng, progress=progress, max_price=max_price)
    return purchase_execute(purchase_id=purchase_id, rng=rng, progress=progress, max_price=max_price)
