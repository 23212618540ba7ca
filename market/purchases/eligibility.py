"""The values a purchase could include, read in one set-based query (docs/budget-rules.md#budgets-and-ceilings).

A selector: it only reads (``lock=True`` reads the budget rows ``FOR UPDATE``, in value-id order: ``accounts.locks``).
:func:`candidates` is the chain purchase's view of every value of an attribute (budgets, chain heads, what the buyer
already holds); :func:`pool` the one-shot purchase's, with the sealed inputs when the draw needs them.  Both are numpy
columns, never Python rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from django.db import connection
from django.db.models import BigIntegerField, F
from django.db.models.functions import Cast, Round

from accounts.epsilon import MICRO, to_micro
from accounts.locks import Lock
from accounts.locks import take as take_lock
from accounts.models import BudgetAccount
from market.chains import pgcopy
from market.models import Attribute, Purchase, PurchaseChunk, Value
from market.purchases.oneshot_specs import Spec


def micro(field: str):
    """An exact micro-epsilon (or money-unit) integer computed in SQL from a NUMERIC column."""
    return Cast(Round(F(field) * MICRO), BigIntegerField())


@dataclass
class Candidates:
    """The attribute's values (in value-id order) with their budgets, and which of them can be sold at e."""

    value_ids: np.ndarray
    owner_ids: np.ndarray
    ceiling: np.ndarray
    chain_loss: np.ndarray
    oneshot_loss: np.ndarray
    paused: np.ndarray
    withdrawn: np.ndarray
    over: np.ndarray  # max(chain_loss, e) + oneshot_loss > ceiling
    has_raw: np.ndarray  # the service holds the raw value (and so the mechanism's input)
    below: np.ndarray  # the ceiling alone is below e; an ``over`` value that is not ``below`` lacks remaining budget
    block_ids: np.ndarray  # the chain block of each value (-1: none, a one-shot attribute)
    slots: np.ndarray  # its slot in the block (-1: none)
    owner_held: np.ndarray  # the owner's device holds the value (docs/custody.md): sold up to its upload level

    def excluded_over(self) -> tuple[int, int]:
        """``(ceiling below e, remaining budget too small)`` among the values neither paused nor withdrawn that
        are ``over``: the ceiling is below the epsilon itself, or it is not but what was already spent leaves too
        little (docs/budget-rules.md#budgets-and-ceilings)."""
        active = self.over & ~self.paused & ~self.withdrawn
        return int((active & self.below).sum()), int((active & ~self.below).sum())

    @property
    def eligible(self) -> np.ndarray:
        return ~self.paused & ~self.withdrawn & ~self.over


def _budgets(attribute: Attribute, cohort: int | None):
    qs = BudgetAccount.objects.filter(value__attribute=attribute)
    return qs.filter(value__cohort=cohort) if cohort is not None else qs


#: Binary COPY layout of ``_CANDIDATES_SQL``'s rows.
_CANDIDATE_LAYOUT = [("value_id", ">i8"), ("owner_id", ">i8"), ("ceiling", ">i8"), ("chain_loss", ">i8"),
                     ("oneshot_loss", ">i8"), ("paused", "?"), ("withdrawn", "?"), ("has_raw", "?"),
                     ("block_id", ">i8"), ("slot", ">i8"), ("owner_held", "?")]


def _candidates_copy(attribute: Attribute, cohort: int | None, lock: bool) -> np.ndarray:
    """PostgreSQL: the rows of ``candidates`` by one binary ``COPY (SELECT ... FOR UPDATE)``, parsed by numpy."""
    budget, value = BudgetAccount._meta.db_table, Value._meta.db_table
    where = "v.attribute_id = %(attribute)s" + (" AND v.cohort = %(cohort)s" if cohort is not None else "")
    query = (f"SELECT b.value_id, v.owner_id, round(b.ceiling * {MICRO})::bigint, "
             f"round(b.chain_loss * {MICRO})::bigint, round(b.oneshot_loss * {MICRO})::bigint, b.paused, "
             f"v.withdrawn_at IS NOT NULL, v.input_sealed IS NOT NULL, coalesce(v.block_id, -1), "
             f"coalesce(v.slot, -1)::bigint, v.custody = 'owner' "
             f"FROM {budget} b JOIN {value} v ON v.id = b.value_id "
             f"WHERE {where} ORDER BY b.value_id" + (" FOR UPDATE OF b" if lock else ""))
    with connection.cursor() as cur:
        data = pgcopy.copy_out(cur.cursor, query, {"attribute": attribute.id, "cohort": cohort})
    return pgcopy.parse_rows(data, _CANDIDATE_LAYOUT)


def candidates(attribute: Attribute, cohort: int | None, e_micro: int, *, lock: bool) -> Candidates:
    """The attribute's (cohort's) values with their budgets in value-id order, locked (``lock``) in that order."""
    if lock:
        take_lock(Lock.BUDGETS)
    if pgcopy.enabled():
        rows = _candidates_copy(attribute, cohort, lock)
        col = lambda name: rows[name].astype(np.int64)  # noqa: E731
        ceiling, chain_loss, oneshot = col("ceiling"), col("chain_loss"), col("oneshot_loss")
        return Candidates(value_ids=col("value_id"), owner_ids=col("owner_id"), ceiling=ceiling,
                          chain_loss=chain_loss, oneshot_loss=oneshot, paused=rows["paused"].copy(),
                          withdrawn=rows["withdrawn"].copy(), has_raw=rows["has_raw"].copy(),
                          over=np.maximum(chain_loss, e_micro) + oneshot > ceiling, below=e_micro > ceiling,
                          block_ids=col("block_id"), slots=col("slot"), owner_held=rows["owner_held"].copy())
    qs = _budgets(attribute, cohort)
    if lock:
        qs = qs.select_for_update(of=("self",))
    rows = list(qs.order_by("value_id").values_list(
        "value_id", "value__owner_id", micro("ceiling"), micro("chain_loss"), micro("oneshot_loss"), "paused",
        "value__withdrawn_at", "value__raw_deleted_at", "value__block_id", "value__slot", "value__custody"))
    n = len(rows)
    cols = list(zip(*rows)) if n else [()] * 11
    as_int = lambda c: np.fromiter(c, dtype=np.int64, count=n)  # noqa: E731
    ceiling, chain_loss, oneshot = as_int(cols[2]), as_int(cols[3]), as_int(cols[4])
    return Candidates(
        value_ids=as_int(cols[0]), owner_ids=as_int(cols[1]), ceiling=ceiling, chain_loss=chain_loss,
        oneshot_loss=oneshot, paused=np.fromiter(cols[5], dtype=bool, count=n),
        withdrawn=np.fromiter((w is not None for w in cols[6]), dtype=bool, count=n),
        has_raw=np.fromiter((d is None and c == "service" for d, c in zip(cols[7], cols[10])), dtype=bool,
                            count=n),
        over=np.maximum(chain_loss, e_micro) + oneshot > ceiling, below=e_micro > ceiling,
        block_ids=np.fromiter((-1 if b is None else b for b in cols[8]), dtype=np.int64, count=n),
        slots=np.fromiter((-1 if k is None else k for k in cols[9]), dtype=np.int64, count=n),
        owner_held=np.fromiter((c == "owner" for c in cols[10]), dtype=bool, count=n))


def held_epsilons(buyer_id: int, attribute, value_ids: np.ndarray) -> np.ndarray:
    """The highest epsilon (micro, 0 when none) at which the buyer already bought each value: the basis of upgrade
    credit (docs/budget-rules.md#chain-loss-the-maximum-released-epsilon).  Derived from the buyer's completed
    chain purchases of the attribute, their epsilons and their released value ids (the output chunks): one
    vectorized max over them, nothing written per value (docs/architecture.md#chains-in-blocks)."""
    value_ids = np.asarray(value_ids, dtype=np.int64)
    held = np.zeros(value_ids.size, dtype=np.int64)
    rows = list(PurchaseChunk.objects.filter(
        purchase__buyer_id=buyer_id, purchase__attribute=attribute, purchase__status=Purchase.Status.COMPLETED,
        purchase__mechanism=Purchase.Mechanism.GRADUAL_RR).values_list(micro("purchase__epsilon"), "value_ids"))
    if not rows or value_ids.size == 0:
        return held
    ids = np.concatenate([np.frombuffer(bytes(blob), dtype="<i8") for _, blob in rows]).astype(np.int64)
    eps = np.concatenate([np.full(len(blob) // 8, e, dtype=np.int64) for e, blob in rows])
    order = np.lexsort((eps, ids))  # by value, then epsilon: the last of each value is its highest
    ids, eps = ids[order], eps[order]
    last = np.append(ids[1:] != ids[:-1], True)
    ids, eps = ids[last], eps[last]
    pos = np.clip(np.searchsorted(ids, value_ids), 0, ids.size - 1)
    hit = ids[pos] == value_ids
    held[hit] = eps[pos[hit]]
    return held


@dataclass
class Pool(Candidates):
    """The candidates of a one-shot release charging each value ``charged``: ``over`` is
    ``chain_loss + oneshot_loss + charged > ceiling`` (rules 2 and 4), a value without its raw datum
    cannot be drawn from, and ``sealed`` holds the eligible values' sealed inputs by row, ``key_ids`` the ids of the
    value keys that sealed them (``market.values.sealing``)."""

    sealed: list = field(default_factory=list)
    key_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def eligible(self) -> np.ndarray:
        return super().eligible & self.has_raw

    def excluded(self) -> dict:
        active = ~self.paused & ~self.withdrawn
        ceiling, budget = self.excluded_over()
        return {"ceiling": ceiling, "budget": budget, "paused": int((self.paused & ~self.withdrawn).sum()),
                "withdrawn": int(self.withdrawn.sum()), "no_raw": int((~self.over & active & ~self.has_raw).sum())}


def pool(attribute: Attribute, cohort: int | None, charged_micro: int, *, lock: bool, inputs: bool) -> Pool:
    """The candidates as ``purchases.candidates`` reads them (``lock``: their budget rows ``FOR UPDATE`` in
    value-id order), and with ``inputs`` the sealed inputs of those that can be charged, aligned by row."""
    c = candidates(attribute, cohort, 0, lock=lock)
    p = Pool(**{**vars(c), "over": c.chain_loss + c.oneshot_loss + int(charged_micro) > c.ceiling,
                "below": int(charged_micro) > c.ceiling})
    if inputs:
        # Read under the budget locks (deleting a raw value locks its budget row too): one query over the
        # attribute's values that hold one, placed by value id.
        values = Value.objects.filter(attribute=attribute, input_sealed__isnull=False)
        if cohort is not None:
            values = values.filter(cohort=cohort)
        rows = list(values.order_by("id").values_list("id", "input_sealed", "value_key_id"))
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        at = np.minimum(np.searchsorted(c.value_ids, ids), max(c.value_ids.size - 1, 0))
        hit = (c.value_ids[at] == ids) & p.eligible[at] if c.value_ids.size else np.zeros(ids.size, dtype=bool)
        p.sealed = [None] * c.value_ids.size
        p.key_ids = np.zeros(c.value_ids.size, dtype=np.int64)
        for k in np.flatnonzero(hit).tolist():
            p.sealed[at[k]] = rows[k][1]
            p.key_ids[at[k]] = rows[k][2]
    return p


def eligible_count(attribute: Attribute, cohort: int | None, spec: Spec) -> tuple[int, int]:
    """``(candidates, eligible)`` now, without locks (sizes a request: in this request or in Celery)."""
    p = pool(attribute, cohort, to_micro(spec.charged), lock=False, inputs=False)
    return int(p.value_ids.size), int(p.eligible.sum())
