"""What a purchase releases, between the locks of the one execution skeleton
(``market.purchases.execution.purchase_execute``, docs/architecture.md#the-path-of-a-purchase).

A release reads and locks its values, computes their outputs, prices them, and writes what is its own; the
skeleton takes the locks around it in the global lock order (``accounts.locks``), moves the money, stores the outputs
and appends the ledger entries.  Two kinds:

* :class:`ChainRelease` (gradual release, rules 2, 3 and 7): each included value's output at e from its chain
  (stored, bridged, tightened or extended: ``market.chains.sets``), new points stored in its block
  (``market.chains.store``: at most one sealed row per block); ``chain_loss = max(
  chain_loss, e)``; priced with upgrade credit from the buyer's holdings, which it raises to e.
* :class:`OneshotRelease` (one-shot mechanisms and surveys, rules 4 and 7): a fresh draw from each value's sealed
  input, by its mechanism's record (``mechanisms.registry``), charged its exact level by
  ``market.purchases.oneshot_specs.ceil6``; ``oneshot_loss += charged``; every value costs the policy price at the
  charged epsilon (each release is new loss: no upgrade credit).  A survey releases only its aggregate
  (``Purchase.result``): every eligible owner answers exactly once, server-side, and no report is stored.

A value is included only if it is not paused or withdrawn, its raw input is there when it is needed, and its
losses after the release stay within its ceiling, exactly, in integer micro-epsilons
(docs/budget-rules.md#budgets-and-ceilings).
"""
from __future__ import annotations

import numpy as np

from accounts.epsilon import from_micro, to_micro
from accounts.ledger import hashchain as ledger
from accounts.models import BudgetAccount, LedgerEntry
from ldpmarket import storage
from ldpmarket.problems import PurchaseConflict, PurchaseError, TooFewRespondents
from market.chains import sets, store
from market.models import Purchase, Value
from market.purchases.eligibility import candidates, held_epsilons, pool
from market.purchases.oneshot_specs import draw, draw_batch, guarantee_label, run_survey, spec_of, survey_design
from market.purchases.pricing import PricePolicy
from market.values import inputs as domain
from market.values import sealing


class _Release:
    """What both releases share: ``cand`` (the candidates read under their locks), ``inc`` (indices into it of
    the released values) and ``e`` (the epsilon released, in micro-epsilons), set by ``read``."""

    purchase: Purchase
    cand: object
    inc: np.ndarray
    e: int

    @property
    def candidates(self) -> int:
        return int(self.cand.value_ids.size)

    @property
    def value_ids(self) -> np.ndarray:
        return self.cand.value_ids[self.inc]

    @property
    def owner_ids(self) -> np.ndarray:
        return self.cand.owner_ids[self.inc]

    def _ledger_rows(self, kind: str) -> ledger.Rows:
        """One entry per released value: its value, the release, the purchase, the losses before (after: the
        caller's) and the ceiling in force."""
        rows = ledger.Rows.empty(self.inc.size)
        rec = rows.records
        rec["value"] = self.value_ids
        rec["kind"] = ledger.KINDS.index(kind)
        rec["epsilon"] = self.e
        rec["reference"] = self.purchase.id
        rec["chain_before"] = self.cand.chain_loss[self.inc]
        rec["oneshot_before"] = self.cand.oneshot_loss[self.inc]
        rec["ceiling"] = self.cand.ceiling[self.inc]
        rows.owner = self.owner_ids
        rows.chain_block = self.cand.block_ids[self.inc]
        return rows


class ChainRelease(_Release):
    """A gradual-release purchase at ``purchase.epsilon`` (module docstring)."""

    def __init__(self, purchase: Purchase, rng=None):
        self.purchase, self.attribute = purchase, purchase.attribute
        self.e = to_micro(purchase.epsilon)
        self.rng = rng

    def read(self) -> None:
        """Lock the budgets by value id, then the attribute's chains (``store.lock``); take each eligible
        value's output at e from its chain's neighbours of e (``store.neighbours``)."""
        attribute, purchase, e = self.attribute, self.purchase, self.e
        m = attribute.domain_size
        cand = self.cand = candidates(attribute, purchase.cohort, e, lock=True)
        store.lock(attribute.id)
        elig = np.flatnonzero(cand.eligible & (cand.block_ids >= 0))
        self.blocks = store.read(cand.block_ids[elig])
        held = np.flatnonzero(cand.owner_held[elig])
        if held.size:  # owner-held values whose device has uploaded nothing yet have no chain: awaiting the owner
            empty = store.heads_of(self.blocks, cand.block_ids[elig[held]], cand.slots[elig[held]]) == 0
            self.not_uploaded = int(empty.sum())
            elig = np.delete(elig, held[empty])
        else:
            self.not_uploaded = 0
        chains = store.neighbours(attribute, self.blocks, cand.block_ids[elig], cand.slots[elig], e)
        if (chains.lengths == 0).any():
            raise PurchaseConflict("A value was added while this purchase read its values; retry.")
        inputs = _inputs_for_extension(attribute, cand, elig, chains, e)
        self.lookup, _ = sets.at(chains, e, m, inputs, self.rng, attribute.draw_divisor)
        self.elig = elig
        ok = ~self.lookup.missing_input
        self.inc = elig[ok]  # indices into cand of the released values
        self.outputs = self.lookup.outputs[ok]

    def charge(self, policy: PricePolicy) -> np.ndarray:
        """Per included value, in money units: the policy price at e less the buyer's upgrade credit."""
        self.held = held_epsilons(self.purchase.buyer_id, self.attribute, self.value_ids)
        return policy.charge_units(self.e, self.held)

    def write(self, now) -> None:
        """The new chain points and the raised chain losses (the buyer's holdings are derived from the purchase's
        outputs: ``eligible.held_epsilons``)."""
        cand, e = self.cand, self.e
        new = self.elig[self.lookup.inserted]
        store.store(self.attribute, self.blocks, cand.block_ids[new], cand.slots[new], np.full(new.size, e),
                         self.lookup.outputs[self.lookup.inserted])
        _raise_chain_loss(cand.value_ids[self.inc[cand.chain_loss[self.inc] < e]], e, now)

    def ledger_rows(self) -> ledger.Rows:
        rows = self._ledger_rows(LedgerEntry.Kind.CHAIN_RELEASE)
        rec = rows.records
        rec["chain_after"] = np.maximum(rec["chain_before"], self.e)
        rec["oneshot_after"] = rec["oneshot_before"]
        return rows

    def record(self, purchase: Purchase) -> None:
        cand = self.cand
        purchase.excluded_ceiling, purchase.excluded_budget = cand.excluded_over()
        purchase.excluded_paused = int((cand.paused & ~cand.withdrawn).sum())
        purchase.excluded_withdrawn = int(cand.withdrawn.sum())
        missing = self.lookup.missing_input
        held = self.cand.owner_held[self.elig]
        purchase.excluded_no_raw = int((missing & ~held).sum())
        purchase.excluded_awaiting_owner = int((missing & held).sum()) + self.not_uploaded
        purchase.new_points = int(self.lookup.inserted.sum())


class OneshotRelease(_Release):
    """A one-shot purchase or a survey (module docstring)."""

    def __init__(self, purchase: Purchase, rng=None):
        self.purchase, self.attribute = purchase, purchase.attribute
        self.spec = spec_of(purchase)
        self.rng = rng

    def read(self) -> None:
        """Lock the budgets by value id; draw every included value's output (or run the survey)."""
        attribute, spec = self.attribute, self.spec
        cand = self.cand = pool(attribute, self.purchase.cohort, to_micro(spec.charged), lock=True, inputs=True)
        inc = self.inc = np.flatnonzero(cand.eligible)
        self.parameters = dict(self.purchase.parameters or {})
        charged, self.result, self.outputs = spec.charged, None, None
        if spec.is_survey:
            if inc.size == 0:
                raise TooFewRespondents("No owner can answer this survey now: see the quote for why.")
            design, charged = survey_design(spec, int(inc.size))
            if "counts" in design:
                self.parameters["deck"] = [int(c) for c in design["counts"]]
            x = domain.from_payload(attribute, _open(attribute, cand, inc)).reshape(-1)
            self.result = {**run_survey(spec, design, x, self.rng), "mechanism": str(spec.mechanism),
                           "epsilon": str(charged), "guarantee": str(spec.guarantee),
                           "guarantee_label": guarantee_label(spec.guarantee)}
        elif inc.size:
            # In bounded batches (one vectorized draw each): a graph's or distribution's inputs and a uRAP or OUE
            # report are wide, so opening every input at once would take memory in proportion to n * width.
            self.outputs = np.empty((inc.size, attribute.width), dtype=np.int16)
            batch = draw_batch(attribute)
            for start in range(0, inc.size, batch):
                part = inc[start:start + batch]
                self.outputs[start:start + part.size] = draw(attribute, spec, _open(attribute, cand, part), self.rng)
        self.charged = charged
        self.e = to_micro(charged)
        if self.e > to_micro(spec.charged):  # pragma: no cover - ic_deck guarantees the realised level <= target
            raise PurchaseError("The realised epsilon exceeds what the values were checked for.")

    def charge(self, policy: PricePolicy) -> np.ndarray:
        """Per included value, in money units: the policy price at the charged epsilon (no upgrade credit)."""
        unit = int(policy.units(np.array([self.e]))[0])
        return np.full(self.inc.size, unit, dtype=np.int64)

    def write(self, now) -> None:
        """``oneshot_loss += charged`` for every included value."""
        after = self.cand.oneshot_loss[self.inc] + self.e
        storage.update_rows(BudgetAccount._meta.db_table, "value_id", ["oneshot_loss", "updated_at"],
                            zip(self.value_ids.tolist(), _decimals(after), [now] * self.inc.size),
                            types={"value_id": "bigint", "oneshot_loss": "numeric(12,6)",
                                   "updated_at": "timestamptz"})

    def ledger_rows(self) -> ledger.Rows:
        rows = self._ledger_rows(LedgerEntry.Kind.ONESHOT_RELEASE)
        rec = rows.records
        rec["chain_after"] = rec["chain_before"]
        rec["oneshot_after"] = rec["oneshot_before"] + self.e
        rec["guarantee"] = ledger.GUARANTEES.index(self.spec.guarantee)
        return rows

    def record(self, purchase: Purchase) -> None:
        excluded = self.cand.excluded()
        purchase.excluded_ceiling = excluded["ceiling"]
        purchase.excluded_budget = excluded["budget"]
        purchase.excluded_paused = excluded["paused"]
        purchase.excluded_withdrawn = excluded["withdrawn"]
        purchase.excluded_no_raw = excluded["no_raw"]
        purchase.new_points = 0
        purchase.charged_epsilon = self.charged
        purchase.parameters = self.parameters
        purchase.result = self.result


def release_of(purchase: Purchase, rng=None) -> ChainRelease | OneshotRelease:
    """The release a purchase makes: from chains, or one-shot (its mechanism's record says which)."""
    return OneshotRelease(purchase, rng) if purchase.is_oneshot else ChainRelease(purchase, rng)


# ----------------------------------------------------------------------------------------------- helpers

def _raise_chain_loss(value_ids: np.ndarray, e: int, now) -> None:
    """``chain_loss = e`` for the released values whose chain loss was below e (rule 3): one statement."""
    storage.set_where_in(BudgetAccount._meta.db_table, "value_id", value_ids,
                         {"chain_loss": from_micro(e), "updated_at": now}, alias="b")


def _open(attribute, cand, rows: np.ndarray) -> np.ndarray:
    """The sealed inputs of ``cand``'s ``rows``, opened in one call."""
    return sealing.open_inputs([bytes(cand.sealed[i]) for i in rows], cand.owner_ids[rows],
                               [attribute.id] * rows.size, domain.payload_bytes(attribute), cand.key_ids[rows])


def _decimals(micros: np.ndarray) -> list:
    distinct, inverse = np.unique(micros, return_inverse=True)
    table = [from_micro(int(v)) for v in distinct.tolist()]
    return [table[i] for i in inverse.reshape(-1).tolist()]


def _inputs_for_extension(attribute, cand, elig, chains, e) -> np.ndarray | None:
    """True inputs (opened in one call) for the rows whose head is below e; -1 where the raw value is gone.
    Read under the budget locks (deleting a raw value locks its budget row first)."""
    need = np.flatnonzero(chains.head() < e)
    if need.size == 0:
        return None
    inputs = np.full((elig.size, attribute.width), -1, dtype=np.int64)
    ids = cand.value_ids[elig[need]]
    sealed = {v: (s, k) for v, s, k in Value.objects.filter(id__in=ids.tolist(), input_sealed__isnull=False)
              .values_list("id", "input_sealed", "value_key_id")}
    have = np.fromiter((int(v) in sealed for v in ids.tolist()), dtype=bool, count=ids.size)
    rows = need[have]
    if rows.size:
        got = [sealed[int(v)] for v in ids[have].tolist()]
        payload = sealing.open_inputs([bytes(s) for s, _ in got], cand.owner_ids[elig][rows],
                                      [attribute.id] * rows.size, domain.payload_bytes(attribute), [k for _, k in got])
        inputs[rows] = domain.from_payload(attribute, payload)
    return inputs
