"""Reads for the buyer API (docs/architecture.md#the-path-of-a-purchase): catalog histograms, quotes, outputs,
estimates, progress.

Nothing here writes to the database.  What a buyer can learn from these reads:

* the catalog: per attribute, how many values could be sold at each grid
  epsilon (a histogram of ceilings) -- never a raw value, an owner, or a value id;
* a quote: how many values a purchase would include and why others are left
  out, its price, and the standard error it would give -- the predicted error
  is a function of (mechanism, epsilon, included count) only, so a quote
  reveals nothing about the data;
* a completed purchase's outputs (under buyer-specific pseudonyms) and the
  estimates computed from them.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from statistics import NormalDist

import numpy as np
from django.conf import settings
from django.core.cache import cache
from django.db.models import BigIntegerField, Case, Count, ExpressionWrapper, F, Q, Value, When
from django.db.models.functions import Greatest
from django.utils import timezone

from accounts.epsilon import from_micro, to_micro
from accounts.models import BudgetAccount
from accounts.money.units import units_to_decimal
from ldpmarket import problems
from market.chains import store
from market.purchases import eligibility as eligible
from market.purchases import oneshot_specs, oneshot_stats
from market.purchases.eligibility import candidates, held_epsilons, micro
from market.purchases.pricing import PricePolicy
from market.values import inputs as domain
from market.values import sealing
from market.values.inputs import PredictedError
from mechanisms import estimators

from .models import Attribute, ChainBlock, Purchase, PurchaseChunk
from .models import Value as StoredValue

logger = logging.getLogger(__name__)

#: At most this many histogram buckets per attribute (every k-th grid point when the grid is longer).
MAX_BUCKETS = 100
Z95 = NormalDist().inv_cdf(0.975)


# ------------------------------------------------------------------------------------------------ catalog

def grid_points(attribute: Attribute) -> np.ndarray:
    """The attribute's positive grid epsilons (micro), thinned to at most ``MAX_BUCKETS`` evenly spaced points."""
    start, step, stop = to_micro(attribute.grid_start), to_micro(attribute.grid_step), to_micro(attribute.grid_stop)
    count = (stop - start) // step + 1
    stride = max(1, math.ceil(count / MAX_BUCKETS))
    points = start + step * np.arange(0, count, stride, dtype=np.int64)
    return points[points > 0]


def ceiling_histograms(attributes) -> dict[int, list[tuple[Decimal, int]]]:
    """``{attribute id: [(epsilon, values available at it), ...]}`` at each attribute's grid points.

    A value is available at e when a purchase at e would include it, by the rule of
    ``market.purchases.eligibility.candidates`` and ``quote``: not paused or withdrawn, ``e + oneshot_loss <=
    ceiling``, and, when the service holds no input for it (its raw datum deleted, or held on its owner's device,
    docs/custody.md#purchases), ``e <= head``: above its chain's head it is left out as ``no_raw`` or
    ``awaiting_owner``.  For one-shot attributes (e: the charged epsilon) ``e + chain_loss + oneshot_loss <=
    ceiling`` and the raw value present.  One grouped query counts the values per limit for all the attributes;
    one more reads the values without an input (their heads are in their blocks' ``heads``, read below), and the
    counts per distinct limit are summed in numpy.
    """
    attributes = list(attributes)
    if not attributes:
        return {}
    big = BigIntegerField()
    headroom = ExpressionWrapper(micro("ceiling") - micro("oneshot_loss"), output_field=big)
    oneshot = ~Q(value__attribute__mechanism=Attribute.Mechanism.GRADUAL_RR)
    deleted = Q(value__raw_deleted_at__isnull=False)
    no_input = deleted | Q(value__custody=StoredValue.Custody.OWNER)  # the service cannot grow the chain
    # One-shot attributes: e + chain_loss + oneshot_loss <= ceiling, and never without the raw value.  Chain
    # values without an input: also e <= head (their heads are in their blocks: read below).
    limit = Case(When(oneshot & deleted, then=Value(-1, output_field=big)),
                 When(oneshot, then=ExpressionWrapper(headroom - micro("chain_loss"), output_field=big)),
                 default=headroom, output_field=big)
    active = (BudgetAccount.objects
              .filter(value__attribute__in=[a.id for a in attributes], paused=False, value__withdrawn_at__isnull=True))
    rows = (active.exclude(~oneshot & no_input).annotate(limit=limit).values("value__attribute_id", "limit")
            .annotate(n=Count("value_id")).order_by())
    pairs = [(int(row["value__attribute_id"]), int(row["limit"]), int(row["n"])) for row in rows]
    attribute_ids = np.array([p[0] for p in pairs], dtype=np.int64)
    limits = np.array([p[1] for p in pairs], dtype=np.int64)
    counts = np.array([p[2] for p in pairs], dtype=np.int64)
    frozen = list(active.filter(~oneshot & no_input).annotate(limit=headroom)
                  .values_list("value__attribute_id", "limit", "value__block_id", "value__slot"))
    if frozen:
        a, lim, b, k = (np.array([-1 if x is None else x for x in c], dtype=np.int64) for c in zip(*frozen))
        lim = np.minimum(lim, _heads(b, k))  # a value with no chain yet (no block, or head 0) is available nowhere
        attribute_ids = np.concatenate([attribute_ids, a])
        limits = np.concatenate([limits, lim])
        counts = np.concatenate([counts, np.ones(a.size, dtype=np.int64)])
    out = {}
    for attribute in attributes:
        points = grid_points(attribute)
        mine = attribute_ids == attribute.id
        order = np.argsort(limits[mine], kind="stable")
        lims, tail = limits[mine][order], np.concatenate([np.cumsum(counts[mine][order][::-1])[::-1], [0]])
        available = tail[np.searchsorted(lims, points, side="left")]
        out[attribute.id] = [(from_micro(int(e)), int(a)) for e, a in zip(points.tolist(), available.tolist())]
    return out


def _heads(block_ids: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Each (block, slot)'s chain head in micro-epsilons (0: no chain, or no block), from the blocks' ``heads``
    alone (docs/architecture.md#chains-in-blocks): one query, no chain point read, placed by numpy."""
    heads = np.zeros(block_ids.size, dtype=np.int64)
    has = block_ids >= 0
    ids = np.unique(block_ids[has])
    if ids.size == 0:
        return heads
    rows = sorted(ChainBlock.objects.filter(id__in=ids.tolist()).values_list("id", "heads"))
    found = np.array([r[0] for r in rows], dtype=np.int64)
    every = np.concatenate([np.frombuffer(bytes(r[1]), dtype=store.HEAD).astype(np.int64) for r in rows])
    offsets = np.concatenate([[0], np.cumsum([len(r[1]) // store.HEAD.itemsize for r in rows])[:-1]]).astype(np.int64)
    at = np.searchsorted(found, block_ids[has])
    heads[has] = every[offsets[at] + slots[has]]
    return heads


#: Buckets of the catalog's default (summary) histogram; ``?histogram=full`` gives every bucket.
SUMMARY_BUCKETS = 5


def histogram_summary(histogram: list[tuple[Decimal, int]]) -> list[tuple[Decimal, int]]:
    """At most ``SUMMARY_BUCKETS`` buckets of ``histogram``, evenly spaced over it, the first and last included."""
    if len(histogram) <= SUMMARY_BUCKETS:
        return list(histogram)
    picks = np.unique(np.linspace(0, len(histogram) - 1, SUMMARY_BUCKETS).round().astype(int))
    return [histogram[i] for i in picks.tolist()]


def availability(histogram: list[tuple[Decimal, int]]) -> dict:
    """What is for sale, in two numbers: values available at the grid's first epsilon, and the largest grid
    epsilon at which any value is (with how many)."""
    top = [(e, n) for e, n in histogram if n > 0]
    return {"values": histogram[0][1] if histogram else 0,
            "max_epsilon": top[-1][0] if top else None, "at_max_epsilon": top[-1][1] if top else 0}


def price_policy_or_none(attribute: Attribute) -> PricePolicy | None:
    try:
        return PricePolicy.parse(attribute.price_policy)
    except ValueError:
        return None


# -------------------------------------------------------------------------------------------- predictions

def predicted_error(attribute: Attribute, epsilon: Decimal, n: int) -> PredictedError | None:
    """The standard error of the estimate from ``n`` outputs at ``epsilon`` (``None`` when n = 0).

    Categorical (m labels): the variance of the unbiased frequency for the
    values actually included (a fixed population: only the randomized response
    is random), ``[f p(1-p) + (1-f) q(1-q)] / (n (p-q)^2)``, at the uniform
    population f = 1/m, and its worst case over f in [0, 1] (linear in f, so
    at f = 0 or 1).  Binary and string bits (m = 2): ``pq / (n (p-q)^2)``,
    the same for every f.  Numeric: the mean's standard error including the
    discretization, ``(h - l) sqrt(t(1-t)/n) / (p - q)`` at ``t = 1/2``, which is
    exact for a uniformly spread population and an upper bound for any other.
    """
    if n <= 0:
        return None
    eps = float(epsilon) / attribute.draw_divisor  # the epsilon each output is drawn at
    kind = attribute.kind
    if kind == Attribute.Kind.NUMERIC:
        low, high = float(attribute.low), float(attribute.high)
        se = math.sqrt(estimators.mean_variance((low + high) / 2, eps, low, high, n))
        return PredictedError("mean", se, se)
    m = attribute.domain_size
    uniform = np.sqrt(estimators.frequency_variance_fixed(np.full(m, 1.0 / m), eps, m, n))
    extremes = np.sqrt(estimators.frequency_variance_fixed(np.eye(m)[0], eps, m, n))  # f = 1 and f = 0
    worst = float(extremes.max())
    if kind == Attribute.Kind.STRING:
        return PredictedError("bit_frequency", float(uniform[0]), worst)
    labels = domain.labels_of(attribute)
    per = [{"label": label, "standard_error": float(uniform[i]), "worst_case_standard_error": worst}
           for i, label in enumerate(labels)]
    return PredictedError("mean" if kind == Attribute.Kind.BINARY else "frequency", float(uniform[0]), worst, per)


# ------------------------------------------------------------------------------------------------- quotes

@dataclass
class Quote:
    attribute: Attribute
    epsilon: Decimal
    cohort: int | None
    candidates: int
    included: int
    excluded_ceiling: int
    excluded_paused: int
    excluded_withdrawn: int
    excluded_no_raw: int
    price: Decimal
    list_price: Decimal
    price_per_value: Decimal
    predicted: PredictedError | None
    expires_at: datetime
    token: str = ""
    mechanism: str = Purchase.Mechanism.GRADUAL_RR
    excluded_budget: int = 0  # ceiling not below the epsilon, but too little of it left (already spent)
    excluded_awaiting_owner: int = 0  # owner-held values whose uploaded chain stops below the epsilon
    charged_epsilon: Decimal | None = None
    guarantee: str = ""
    parameters: dict = field(default_factory=dict)

    @property
    def upgrade_credit(self) -> Decimal:
        return self.list_price - self.price


def excluded_counts(obj) -> dict[str, int]:
    """The values a quote or purchase (``Quote`` or ``Purchase``: the same ``excluded_*`` fields) left out, by
    reason (docs/custody.md#purchases for ``awaiting_owner``)."""
    return {"ceiling": obj.excluded_ceiling, "budget": obj.excluded_budget, "paused": obj.excluded_paused,
            "withdrawn": obj.excluded_withdrawn, "no_raw": obj.excluded_no_raw,
            "awaiting_owner": obj.excluded_awaiting_owner}


def _no_raw(cand, e_micro: int) -> np.ndarray:
    """Which candidates the service holds no input for (the raw datum deleted, or held by the owner's device) and
    whose chain stops below e (the service cannot extend it); their heads are read from their blocks
    (``market.chains.store``)."""
    out = np.zeros(cand.value_ids.size, dtype=bool)
    sel = np.flatnonzero(~cand.has_raw & (cand.block_ids >= 0))
    if sel.size:
        b, k = cand.block_ids[sel], cand.slots[sel]
        out[sel] = store.heads_of(store.read(b), b, k) < e_micro
    return out


def quote(*, buyer_id: int, attribute: Attribute, epsilon: Decimal, cohort: int | None,
          policy: PricePolicy) -> Quote:
    """What a purchase of ``attribute`` at ``epsilon`` would include and cost this buyer now (no locks); the
    signed token is added by ``market.purchases.quotes.quote_issue``."""
    e = to_micro(epsilon)
    cand = candidates(attribute, cohort, e, lock=False)
    eligible = cand.eligible
    stuck = eligible & _no_raw(cand, e)
    no_raw, awaiting = stuck & ~cand.owner_held, stuck & cand.owner_held
    included_ids = cand.value_ids[eligible & ~stuck]
    n = int(included_ids.size)
    charge = policy.charge_units(e, held_epsilons(buyer_id, attribute, included_ids))
    per_value = units_to_decimal(int(policy.units(np.array([e]))[0]))
    expires = timezone.now() + timedelta(seconds=settings.LDP_QUOTE_TTL_SECONDS)
    q = Quote(
        attribute=attribute, epsilon=epsilon, cohort=cohort, candidates=int(cand.value_ids.size), included=n,
        excluded_ceiling=cand.excluded_over()[0], excluded_budget=cand.excluded_over()[1],
        excluded_paused=int((cand.paused & ~cand.withdrawn).sum()), excluded_withdrawn=int(cand.withdrawn.sum()),
        excluded_no_raw=int(no_raw.sum()), excluded_awaiting_owner=int(awaiting.sum()),
        price=units_to_decimal(int(charge.sum())),
        list_price=per_value * n, price_per_value=per_value, predicted=predicted_error(attribute, epsilon, n),
        expires_at=expires)
    return q


def oneshot_quote(*, buyer_id: int, attribute: Attribute, spec, cohort: int | None, policy: PricePolicy) -> Quote:
    """What a one-shot purchase or survey (``market.purchases.oneshot_specs.Spec``) would include, cost and charge now
    (no locks).

    Every included value costs the policy price at the charged epsilon (each release is new loss: no upgrade
    credit).  For an improved Christofides survey the charged epsilon is the per-report level of the deck
    dealt to the values included now.
    """
    p = eligible.pool(attribute, cohort, to_micro(spec.charged), lock=False, inputs=False)
    n = int(p.eligible.sum())
    charged = spec.charged
    if spec.is_survey and n:  # the design for the values included now (an IC deck costs its own level)
        try:
            _, charged = oneshot_specs.survey_design(spec, n)
        except problems.TooFewRespondents:
            n = 0
    per_value = units_to_decimal(int(policy.units(np.array([to_micro(charged)]))[0]))
    excluded = p.excluded()
    q = Quote(
        attribute=attribute, epsilon=spec.purchase_epsilon, cohort=cohort, candidates=int(p.value_ids.size),
        included=n, excluded_ceiling=excluded["ceiling"], excluded_budget=excluded["budget"],
        excluded_paused=excluded["paused"],
        excluded_withdrawn=excluded["withdrawn"], excluded_no_raw=excluded["no_raw"], price=per_value * n,
        list_price=per_value * n, price_per_value=per_value, predicted=oneshot_stats.predicted(attribute, spec, n),
        expires_at=timezone.now() + timedelta(seconds=settings.LDP_QUOTE_TTL_SECONDS), mechanism=spec.mechanism,
        charged_epsilon=charged, guarantee=spec.guarantee, parameters=dict(spec.parameters))
    return q


# ------------------------------------------------------------------------------------------------ outputs

def chunk_layout(purchase: Purchase) -> tuple[np.ndarray, np.ndarray]:
    """``(seqs, starts)``: the purchase's chunks in order and the row index where each starts (plus the total)."""
    rows = list(PurchaseChunk.objects.filter(purchase=purchase).order_by("seq").values_list("seq", "count"))
    seqs = np.array([r[0] for r in rows], dtype=np.int64)
    starts = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([r[1] for r in rows], out=starts[1:])
    return seqs, starts


def open_chunk(purchase_id: int, seq: int, value_ids: bytes, sealed: bytes, width: int,
               key_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``(value ids, outputs (n, width))`` of one stored chunk, its outputs opened under the row's key
    ``key_id`` (``sealing.open_released``)."""
    ids = np.frombuffer(bytes(value_ids), dtype="<i8").astype(np.int64)
    out = sealing.open_released(sealed, purchase_id=purchase_id, seq=seq, value_ids=bytes(value_ids), key_id=key_id)
    return ids, np.frombuffer(out, dtype="<i2").astype(np.int64).reshape(ids.size, width)


def iter_chunks(purchase: Purchase, seqs=None):
    """``(value_ids, outputs (n, width))`` of each chunk in order, one chunk in memory at a time."""
    width = purchase.attribute.width
    qs = PurchaseChunk.objects.filter(purchase=purchase).order_by("seq")
    if seqs is not None:
        qs = qs.filter(seq__in=list(seqs))
    for seq in qs.values_list("seq", flat=True):
        ids, out, key_id = PurchaseChunk.objects.filter(purchase=purchase, seq=seq).values_list(
            "value_ids", "outputs", "value_key_id").get()
        yield open_chunk(purchase.id, seq, ids, out, width, key_id)


def output_rows(purchase: Purchase, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start:stop`` of the purchase's outputs (reading only the chunks they fall in)."""
    seqs, starts = chunk_layout(purchase)
    stop = min(stop, int(starts[-1]))
    width = purchase.attribute.width
    if start >= stop:
        return np.zeros(0, dtype=np.int64), np.zeros((0, width), dtype=np.int64)
    first = int(np.searchsorted(starts, start, side="right")) - 1
    last = int(np.searchsorted(starts, stop, side="left"))
    parts = list(iter_chunks(purchase, seqs[first:last]))
    ids = np.concatenate([p[0] for p in parts])
    out = np.concatenate([p[1] for p in parts])
    offset = start - int(starts[first])
    return ids[offset:offset + stop - start], out[offset:offset + stop - start]


def output_labels(attribute: Attribute) -> list[str] | None:
    """Output names for single-output kinds (categorical, binary, numeric; uRR with its PUM bots, RR3, private
    samples); ``None`` for vectors (strings' and uRAP's bit lists, LPP's (item, state) reports)."""
    if attribute.is_oneshot:
        return oneshot_stats.output_labels(attribute)
    if attribute.kind == Attribute.Kind.NUMERIC:
        return ["low", "high"]
    if attribute.kind == Attribute.Kind.STRING:
        return None
    return domain.labels_of(attribute)


def all_outputs(purchase: Purchase) -> tuple[np.ndarray, np.ndarray]:
    parts = list(iter_chunks(purchase))
    width = purchase.attribute.width
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros((0, width), dtype=np.int64)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


# ---------------------------------------------------------------------------------------------- estimates

def _interval(value: float, se: float) -> dict:
    return {"estimate": value, "standard_error": se, "ci95_low": value - Z95 * se, "ci95_high": value + Z95 * se}


def _eps_groups(eps) -> tuple[float | np.ndarray, list[dict]]:
    """A scalar epsilon when all outputs share one (the estimators' scalar path), else the per-output array."""
    if np.ndim(eps) == 0:
        return float(eps), []
    arr = np.asarray(eps, dtype=np.float64)
    distinct, counts = np.unique(arr, return_counts=True)
    groups = [{"epsilon": float(e), "count": int(c)} for e, c in zip(distinct.tolist(), counts.tolist())]
    return (float(distinct[0]) if distinct.size == 1 else arr), groups


def estimate_outputs(attribute: Attribute, outputs: np.ndarray, eps) -> dict:
    """Unbiased estimates with standard errors and 95% intervals from outputs at one or many epsilons.

    ``outputs`` is (n, width); ``eps`` a number, or one epsilon per output (for
    outputs pooled from purchases at different epsilons: each output is
    debiased at its own epsilon and weighted by ``(p - q)^2``, spec
    docs/mechanisms-reference.md#estimation).  Categorical and binary: every category's
    frequency (``mechanisms.estimators.confidence_intervals``) with the
    simplex projection and the maximum-likelihood estimate alongside; binary
    and numeric: the mean; strings: every Bloom bit's frequency.
    """
    outputs = np.asarray(outputs, dtype=np.int64).reshape(-1, attribute.width)
    n = int(outputs.shape[0])
    eps_used, groups = _eps_groups(eps)
    if not groups:
        groups = [{"epsilon": float(eps_used), "count": n}]
    result = {"n": n, "epsilons": groups, "frequencies": [], "mean": None, "bits": []}
    kind = attribute.kind
    var_n = n if np.ndim(eps_used) == 0 else None
    if kind in (Attribute.Kind.CATEGORICAL, Attribute.Kind.BINARY, Attribute.Kind.NUMERIC):
        m = attribute.domain_size
        y = outputs[:, 0]
        f_hat, low, high = estimators.confidence_intervals(y, eps_used, m)
        se = np.sqrt(estimators.frequency_variance(f_hat, eps_used, m, var_n))
        projected = estimators.project_simplex(f_hat)
        ml = estimators.em_frequencies(y, eps_used, m)
        labels = output_labels(attribute)
        result["frequencies"] = [
            {"label": labels[i], "estimate": float(f_hat[i]), "standard_error": float(se[i]),
             "ci95_low": float(low[i]), "ci95_high": float(high[i]), "projected": float(projected[i]),
             "maximum_likelihood": float(ml[i])} for i in range(m)]
        if kind == Attribute.Kind.BINARY:
            result["mean"] = _interval(float(f_hat[1]), float(se[1]))
        elif kind == Attribute.Kind.NUMERIC:
            lo, hi = float(attribute.low), float(attribute.high)
            mean = estimators.mean(y, eps_used, lo, hi)
            result["mean"] = _interval(mean, (hi - lo) * float(se[1]))
    elif kind == Attribute.Kind.STRING:
        bit_eps = np.asarray(eps_used, dtype=np.float64) / attribute.draw_divisor  # each bit's epsilon
        for j in range(attribute.width):
            f_hat, low, high = estimators.confidence_intervals(outputs[:, j], bit_eps, 2)
            se = np.sqrt(estimators.frequency_variance(f_hat, bit_eps, 2, var_n))
            result["bits"].append({"bit": j, "estimate": float(f_hat[1]), "standard_error": float(se[1]),
                                   "ci95_low": float(low[1]), "ci95_high": float(high[1])})
    return result


# ----------------------------------------------------------------------------------------------- progress

def progress_key(purchase_id: int) -> str:
    return f"purchase-progress:{purchase_id}"


def progress_get(purchase_id: int) -> dict | None:
    """A purchase's progress, or None (none recorded, or the cache is unreachable)."""
    try:
        return cache.get(progress_key(purchase_id))
    except Exception:  # noqa: BLE001 - progress is informative only
        logger.warning("could not read the progress of purchase %s", purchase_id, exc_info=True)
        return None


def request_size(purchase: Purchase) -> tuple[int, int]:
    """``(candidates, eligible)`` of a claimed purchase of any mechanism, now, without locks."""
    if purchase.is_oneshot:
        return eligible.eligible_count(purchase.attribute, purchase.cohort, oneshot_specs.spec_of(purchase))
    return eligible_count(purchase.attribute, purchase.cohort, purchase.epsilon)


def eligible_count(attribute: Attribute, cohort: int | None, epsilon: Decimal) -> tuple[int, int]:
    """``(candidates, eligible)`` now, without locks, counted in SQL: sizes a purchase (sync or Celery) and its
    progress.  Eligible is ``eligible.candidates(...).eligible`` (not paused, not withdrawn,
    ``max(chain_loss, e) + oneshot_loss <= ceiling``, exactly, in micro-epsilons)."""
    e = to_micro(epsilon)
    big = BigIntegerField()
    qs = BudgetAccount.objects.filter(value__attribute=attribute)
    if cohort is not None:
        qs = qs.filter(value__cohort=cohort)
    need = ExpressionWrapper(Greatest(micro("chain_loss"), Value(e, output_field=big), output_field=big)
                             + micro("oneshot_loss"), output_field=big)
    counts = qs.annotate(ceiling_micro=micro("ceiling"), need_micro=need).aggregate(
        candidates=Count("value_id"),
        eligible=Count("value_id", filter=Q(paused=False, value__withdrawn_at__isnull=True,
                                            ceiling_micro__gte=F("need_micro"))))
    return int(counts["candidates"]), int(counts["eligible"])
