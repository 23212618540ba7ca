"""One-shot mechanisms as sold: the request's parameters, the exact epsilon charged, the draw and the survey design
(docs/budget-rules.md#one-shot-losses-add-up, docs/mechanisms.md#the-mechanism-registry).

Domain rules, no database writes, the same for every mechanism: what differs is the mechanism's record in
``mechanisms.registry``.  :func:`parse_spec` turns a request into a :class:`Spec` whose ``charged`` epsilon is
the record's exact level charged by :func:`ceil6` (docs/budget-rules.md#one-shot-losses-add-up); :func:`draw` and
:func:`run_survey` are one vectorized call of the record's hooks over the included values.  ``market.purchases.oneshot``
executes a purchase with them.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal, InvalidOperation

import numpy as np

from accounts.epsilon import MAX_EPSILON, MAX_SALE_EPSILON, QUANTUM, EpsilonError, parse
from accounts.models import LedgerEntry
from ldpmarket.problems import ParameterError, TooFewRespondents
from market.models import SURVEY_MECHANISMS, Attribute, Purchase
from market.values import inputs as domain
from mechanisms import registry, surveys

M = Purchase.Mechanism


G = LedgerEntry.Guarantee


GUARANTEE_LABELS = {G.LDP: "epsilon-LDP", G.ULDP: "epsilon-ULDP (utility-optimized LDP: values outside the "
                                                  "sensitive set may be revealed)",
                    G.PER_REPORT: surveys.LABEL_PER_REPORT, G.NONE: ""}


RR3_FAMILIES = tuple(f.family for f in registry.RR3.forms)
PARAMETERS = registry.PARAMETERS


def guarantee_label(guarantee: str) -> str:
    return GUARANTEE_LABELS.get(guarantee, guarantee)


def ceil6(d: Decimal) -> Decimal:
    """The charge of an exact level ``d``: the one implementation of docs/budget-rules.md#one-shot-losses-add-up
    (``ROUND_CEILING`` to the 6 places epsilons are stored with, so the market never under-charges)."""
    return d.quantize(QUANTUM, rounding=ROUND_CEILING)


def ic_deck(N: int, epsilon: Decimal, p2: float) -> np.ndarray:
    """``registry.ic_deck``: an IC deck for N respondents whose per-report level is at most the target."""
    try:
        return registry.ic_deck(N, epsilon, p2)
    except registry.TooFew as exc:
        raise TooFewRespondents(str(exc)) from None


@dataclass(frozen=True)
class Spec:
    """A validated one-shot or survey request: what to run and what each release costs.

    ``charged`` is the epsilon charged per released value (:func:`ceil6` of the exact level);
    for IC it is the target (an upper bound) until the deck is dealt.
    ``parameters`` are the request's mechanism parameters as canonical text.
    """

    mechanism: str
    epsilon: Decimal | None
    charged: Decimal
    parameters: dict = field(default_factory=dict)

    @property
    def record(self) -> registry.Mechanism:
        return registry.get(self.mechanism)

    @property
    def guarantee(self) -> str:
        return self.record.guarantee

    @property
    def is_survey(self) -> bool:
        return self.record.is_survey

    @property
    def purchase_epsilon(self) -> Decimal:
        """``Purchase.epsilon``: the requested epsilon, or the charged level for two-parameter mechanisms."""
        return self.epsilon if self.epsilon is not None else self.charged

    def fingerprint(self, attribute_id: int, cohort) -> str:
        body = json.dumps({"attribute": attribute_id, "epsilon": None if self.epsilon is None else str(self.epsilon),
                           "cohort": cohort, "mechanism": self.mechanism, "parameters": self.parameters},
                          sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()

    def value(self, name: str) -> float:
        return float(self.parameters[name])


def _eps(value, name: str) -> Decimal:
    try:
        return parse(value, name=name, allow_zero=False, limit=MAX_SALE_EPSILON)
    except EpsilonError as exc:
        raise ParameterError(name, str(exc)) from None


def _probability(value, name: str, *, lo_open: bool, hi_open: bool) -> Decimal:
    try:
        d = value if isinstance(value, Decimal) else Decimal(str(value).strip())
    except (InvalidOperation, ValueError, TypeError):
        raise ParameterError(name, f"{name} must be a number") from None
    interval = ("(" if lo_open else "[") + "0, 1" + (")" if hi_open else "]")
    if isinstance(value, bool) or not d.is_finite() or d < 0 or d > 1 or (lo_open and d == 0) or (hi_open and d == 1):
        raise ParameterError(name, f"{name} must be a number in {interval}")
    if d != d.quantize(QUANTUM):
        raise ParameterError(name, f"{name} may have at most 6 decimal places")
    return d.quantize(QUANTUM)


def _refuse(given: dict, allowed: set, why: str) -> None:
    extra = sorted(k for k, v in given.items() if v is not None and k not in allowed)
    if extra:
        raise ParameterError(extra[0], f"{extra[0]} does not apply here: {why}")


def parse_spec(attribute: Attribute, *, epsilon=None, mechanism: str | None = None, family=None, eps1=None,
               eps2=None, theta=None, pi_b=None, p2=None) -> Spec | None:
    """The one-shot or survey request on ``attribute``, validated; ``None`` for a chain purchase.

    Raises ``ParameterError`` (a 400 naming the field) for a parameter that is
    missing, out of range, or does not apply to the attribute's mechanism.
    """
    given = {"epsilon": epsilon, "family": family, "eps1": eps1, "eps2": eps2, "theta": theta, "pi_b": pi_b,
             "p2": p2}
    if mechanism is not None and mechanism != attribute.mechanism:
        if mechanism not in SURVEY_MECHANISMS:
            raise ParameterError("mechanism", f"{mechanism!r} is not a survey mechanism "
                                              f"({', '.join(SURVEY_MECHANISMS)}); leave it out to buy the "
                                              f"attribute's own mechanism, {attribute.mechanism}")
        record = registry.get(mechanism)
        if attribute.kind not in record.kinds:
            raise ParameterError("attribute", f"a survey asks one yes/no question: attribute {attribute.id} is "
                                              f"{attribute.kind}, choose a binary attribute")
        return _spec(attribute, record, given)
    record = attribute.record
    if record.is_chain:
        _refuse(given, {"epsilon"}, f"attribute {attribute.id} is sold from gradual-release chains at one epsilon")
        return None
    try:
        domain.check_attribute(attribute)
    except domain.InvalidAttribute as exc:
        raise ParameterError("attribute", f"attribute {attribute.id} is not configured for sale: {exc}") from None
    return _spec(attribute, record, given)


def _spec(attribute: Attribute, record: registry.Mechanism, given: dict) -> Spec:
    """The request in the form it asks for (``registry.Mechanism.form_for``), parsed, charged and honoured."""
    try:
        form = record.form_for(given)
    except registry.Refused as exc:
        raise ParameterError(exc.field, str(exc)) from None
    _refuse(given, {*form.required, *form.optional} | ({"family"} if form.family else set()), form.takes)
    values: dict[str, Decimal] = {}
    for name in (*form.required, *form.optional):
        param = registry.PARAMS[name]
        if given[name] is None:
            if name in form.required:
                message = param.required
                if name == "epsilon" and form.family:
                    message = f"This field is required for family {form.family}."
                raise ParameterError(name, message)
            continue
        values[name] = (_eps(given[name], name) if param.kind == "epsilon" else
                        _probability(given[name], name, lo_open=param.lo_open, hi_open=param.hi_open))
    epsilon = values.pop("epsilon", None)
    params = ({"family": form.family} if form.family else {}) | {k: str(v) for k, v in values.items()}
    if form.level is not None:
        charged = ceil6(form.level(params))
        if charged > MAX_EPSILON:
            first = form.required[0]
            raise ParameterError(first, f"the exact epsilon of ({', '.join(params[p] for p in form.required)}) is "
                                        f"{charged}, above the most any value can spend ({MAX_EPSILON})")
    else:
        charged = epsilon
    return _honoured(attribute, Spec(record.code, epsilon, charged, params))


def _honoured(attribute: Attribute, spec: Spec) -> Spec:
    """``spec`` if its sampler can realise it honestly, else a 400 naming the limit.

    The samplers build integer cells from the exact epsilons and refuse (``ValueError``, naming the largest
    epsilon they honour) one whose cells would need a probability below 2^-64 -- about 44.36 for uRR, EWRR3,
    the private sampler and Warner, 43.67 for RR3‡ / LPP‡, 88.03 for uRAP (docs/mechanisms.md, "Exact
    sampling: one-shot mechanisms").  The improved Christofides deck is sized at execution (too few
    respondents: ``TooFewRespondents``)."""
    honour = spec.record.honour
    if honour is None:
        return spec
    try:
        honour(attribute.shape, spec.charged, spec.parameters)
    except registry.Refused as exc:
        raise ParameterError(exc.field, f"The sampler cannot honour this epsilon: {exc}.") from None
    except ValueError as exc:
        raise ParameterError("epsilon", f"The sampler cannot honour this epsilon: {exc}.") from None
    return spec


def spec_of(purchase: Purchase) -> Spec:
    """The spec a one-shot purchase or survey was claimed with (its stored mechanism and parameters)."""
    p = purchase.parameters or {}
    record = registry.get(purchase.mechanism)
    given = {k: None for k in ("epsilon", *PARAMETERS)} | {k: p[k] for k in PARAMETERS if k in p}
    form = record.form_for(given)
    given["epsilon"] = purchase.epsilon if "epsilon" in form.required else None
    return _spec(purchase.attribute, record, given)


def draw(attribute: Attribute, spec: Spec, payload: np.ndarray, rng=None) -> np.ndarray:
    """One vectorized mechanism call over the included values' payloads: (n, width) int outputs.

    The epsilons go to the mechanisms as exact Decimals: their samplers build integer cells whose realised
    level is at most that exact value (docs/mechanisms.md, "Exact sampling: one-shot mechanisms")."""
    record = spec.record
    x = domain.oneshot_inputs(attribute, payload)
    tags = domain.pum_tags_of(payload) if record.uses_sensitive else None
    return record.draw(attribute.shape, x, tags, spec.charged, spec.parameters, rng)


#: Bytes of opened inputs or drawn outputs (as int64) one draw batch may hold.
DRAW_BATCH_BYTES = 64 * 2**20


def draw_batch(attribute: Attribute) -> int:
    """Values per draw batch: ``DRAW_BATCH_BYTES`` over the wider of a value's input and its int64 outputs."""
    return max(1, DRAW_BATCH_BYTES // max(domain.payload_bytes(attribute), 8 * attribute.width, 1))


def survey_design(spec: Spec, N: int):
    """``(design, charged)``: the device for N respondents and the epsilon each report costs (:func:`ceil6`).

    Warner, Simmons and Christofides use the exact devices of ``mechanisms.surveys`` (integer cells built
    from the exact epsilon: realised per-report level at most the charge); the improved Christofides deck is
    dealt for N and costs its own level (at most the target).  The estimators and variances use the devices'
    realised probabilities."""
    try:
        design, level = spec.record.design(spec.epsilon, spec.parameters, N)
    except registry.TooFew as exc:
        raise TooFewRespondents(str(exc)) from None
    return design, ceil6(Decimal(level))


def run_survey(spec: Spec, design: dict, x: np.ndarray, rng=None) -> dict:
    """Every respondent answers once; returns only the aggregate (estimate, closed-form variance, N): the
    individual reports never leave the record's ``run``."""
    return spec.record.run(design, spec.parameters, x, rng)
