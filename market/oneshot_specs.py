"""One-shot mechanisms as sold: the request's parameters, the exact epsilon charged, the draw and the survey design
(docs/budget-rules.md#one-shot-losses-add-up, docs/mechanisms-reference.md).

Domain rules, no database writes: :func:`parse_spec` turns a request into a :class:`Spec` whose ``charged``
epsilon is the mechanism's exact level rounded up to 6 places (``ROUND_CEILING``: never under-charged);
:func:`draw` and :func:`run_survey` are one vectorized ``mechanisms`` call over the included values.
``market.oneshot`` executes a purchase with them.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Context, Decimal, InvalidOperation

import numpy as np

from accounts.epsilon import MAX_EPSILON, MAX_SALE_EPSILON, QUANTUM, EpsilonError, parse
from accounts.models import LedgerEntry
from ldpmarket.problems import ParameterError, PurchaseError, TooFewRespondents
from mechanisms import private_sampling, rr3, surveys, uldp

from . import domain
from .models import SURVEY_MECHANISMS, Attribute, Purchase

M = Purchase.Mechanism


G = LedgerEntry.Guarantee


GUARANTEE_OF = {M.URR: G.ULDP, M.URAP: G.ULDP, M.RR3: G.LDP, M.LPP: G.LDP, M.PRIVATE_SAMPLE: G.LDP,
                M.WARNER: G.LDP, M.SIMMONS: G.LDP, M.CHRISTOFIDES: G.LDP, M.IMPROVED_CHRISTOFIDES: G.PER_REPORT}


GUARANTEE_LABELS = {G.LDP: "epsilon-LDP", G.ULDP: "epsilon-ULDP (utility-optimized LDP: values outside the "
                                                  "sensitive set may be revealed)",
                    G.PER_REPORT: surveys.LABEL_PER_REPORT, G.NONE: ""}


RR3_FAMILIES = ("ewrr3", "rr3_ddagger")
PARAMETERS = ("family", "eps1", "eps2", "theta", "pi_b", "p2")


_CTX = Context(prec=40)


def guarantee_label(guarantee: str) -> str:
    return GUARANTEE_LABELS.get(guarantee, guarantee)


def ceil6(d: Decimal) -> Decimal:
    """``d`` rounded up to 6 decimal places (the market never under-charges)."""
    return d.quantize(QUANTUM, rounding=ROUND_CEILING)


def lpp_level(eps1: Decimal, eps2: Decimal) -> Decimal:
    """The exact LDP level of RR3‡ / LPP‡ at ``p1 = e^eps1/(e^eps1+1)``, ``p2 = e^eps2/(e^eps2+1)`` in 40-digit
    decimals: ``max(eps2, eps1 + ln 2 - ln(1 + e^-eps2))`` (docs/mechanisms-reference.md#rr3-and-the-graph-protocol-lpp; ``mechanisms.rr3.lpp_epsilon``)."""
    second = _CTX.add(_CTX.subtract(eps1, _CTX.ln(_CTX.add(Decimal(1), _CTX.exp(-eps2)))), _CTX.ln(Decimal(2)))
    return max(Decimal(eps2), second)


def deck_level(counts) -> Decimal:
    """The per-report level ``max_k ln(c_{L+1-k}/c_k)`` of an IC deck, in 40-digit decimals (L = 3: ln(c3/c1))."""
    c = [int(x) for x in counts]
    return max(_CTX.ln(_CTX.divide(Decimal(c[-1 - i]), Decimal(c[i]))) for i in range(len(c)) if c[i] and c[-1 - i])


def ic_deck(N: int, epsilon: Decimal, p2: float) -> np.ndarray:
    """``surveys.ic_deck_counts`` for N respondents, checked exactly: its per-report level is at most the target."""
    try:
        counts = surveys.ic_deck_counts(N, epsilon, p2)   # exact: the realised per-report level is below epsilon
    except ValueError as exc:
        raise TooFewRespondents(f"An improved Christofides survey needs more respondents at this epsilon and p2: "
                                f"{exc}.") from None
    while deck_level(counts) > epsilon:  # float rounding in ic_deck_counts: move a card from 3 to 1
        counts = counts + np.array([1, 0, -1])
        if not counts[2] > counts[0]:
            raise TooFewRespondents(f"{N} respondents are too few for an informative deck at epsilon {epsilon}.")
    return counts


@dataclass(frozen=True)
class Spec:
    """A validated one-shot or survey request: what to run and what each release costs.

    ``charged`` is the exact epsilon charged per released value, rounded up;
    for IC it is the target (an upper bound) until the deck is dealt.
    ``parameters`` are the request's mechanism parameters as canonical text.
    """

    mechanism: str
    epsilon: Decimal | None
    charged: Decimal
    parameters: dict = field(default_factory=dict)

    @property
    def guarantee(self) -> str:
        return GUARANTEE_OF[self.mechanism]

    @property
    def is_survey(self) -> bool:
        return self.mechanism in SURVEY_MECHANISMS

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
        return _survey_spec(attribute, mechanism, given)
    mech = attribute.mechanism
    if not attribute.is_oneshot:
        _refuse(given, {"epsilon"}, f"attribute {attribute.id} is sold from gradual-release chains at one epsilon")
        return None
    try:
        domain.check_attribute(attribute)
    except domain.InvalidAttribute as exc:
        raise ParameterError("attribute", f"attribute {attribute.id} is not configured for sale: {exc}") from None
    if mech in (M.URR, M.URAP, M.PRIVATE_SAMPLE):
        _refuse(given, {"epsilon", "theta"} if mech == M.URAP else {"epsilon"},
                f"the {mech} mechanism takes only epsilon" + (" and theta" if mech == M.URAP else ""))
        if epsilon is None:
            raise ParameterError("epsilon", "This field is required.")
        e = _eps(epsilon, "epsilon")
        params = {}
        if mech == M.URAP and theta is not None:
            params["theta"] = str(_probability(theta, "theta", lo_open=True, hi_open=True))
        return _honoured(attribute, Spec(mech, e, e, params))
    if mech == M.RR3:
        fam = family or ("rr3_ddagger" if eps1 is not None or eps2 is not None else "ewrr3")
        if fam not in RR3_FAMILIES:
            raise ParameterError("family", f"family must be one of {', '.join(RR3_FAMILIES)}")
        if fam == "ewrr3":
            _refuse(given, {"epsilon", "family"}, "EWRR3 takes epsilon only (RR3‡ takes eps1 and eps2)")
            if epsilon is None:
                raise ParameterError("epsilon", "This field is required for family ewrr3.")
            e = _eps(epsilon, "epsilon")
            return _honoured(attribute, Spec(mech, e, e, {"family": fam}))
        _refuse(given, {"family", "eps1", "eps2"}, "RR3‡ takes eps1 and eps2 (its charged epsilon is their exact "
                                                   "level, not their sum)")
        return _honoured(attribute, _two_parameter(mech, eps1, eps2, {"family": fam}))
    if mech == M.LPP:
        _refuse(given, {"eps1", "eps2"}, "LPP‡ takes eps1 (edge or not) and eps2 (the edge's sign)")
        return _honoured(attribute, _two_parameter(mech, eps1, eps2, {}))
    raise ParameterError("attribute", f"attribute {attribute.id} has no one-shot mechanism")  # pragma: no cover


def _two_parameter(mech: str, eps1, eps2, params: dict) -> Spec:
    for name, v in (("eps1", eps1), ("eps2", eps2)):
        if v is None:
            raise ParameterError(name, "This field is required.")
    e1, e2 = _eps(eps1, "eps1"), _eps(eps2, "eps2")
    charged = ceil6(lpp_level(e1, e2))
    if charged > MAX_EPSILON:
        raise ParameterError("eps1", f"the exact epsilon of ({e1}, {e2}) is {charged}, above the most any value "
                                     f"can spend ({MAX_EPSILON})")
    return Spec(mech, None, charged, {**params, "eps1": str(e1), "eps2": str(e2)})


def _survey_spec(attribute: Attribute, mechanism: str, given: dict) -> Spec:
    if attribute.kind != Attribute.Kind.BINARY:
        raise ParameterError("attribute", f"a survey asks one yes/no question: attribute {attribute.id} is "
                                          f"{attribute.kind}, choose a binary attribute")
    allowed = {"epsilon"} | {M.SIMMONS: {"pi_b"}, M.CHRISTOFIDES: {"p2"},
                             M.IMPROVED_CHRISTOFIDES: {"p2"}}.get(mechanism, set())
    _refuse(given, allowed, f"the {mechanism} survey takes epsilon"
                            + {M.SIMMONS: " and pi_b", M.CHRISTOFIDES: " and p2",
                               M.IMPROVED_CHRISTOFIDES: " and p2"}.get(mechanism, ""))
    if given["epsilon"] is None:
        raise ParameterError("epsilon", "This field is required.")
    e = _eps(given["epsilon"], "epsilon")
    params = {}
    if mechanism == M.SIMMONS:
        if given["pi_b"] is None:
            raise ParameterError("pi_b", "This field is required for a Simmons survey: the probability that the "
                                         "unrelated question is answered yes.")
        params["pi_b"] = str(_probability(given["pi_b"], "pi_b", lo_open=True, hi_open=True))
    if mechanism in (M.CHRISTOFIDES, M.IMPROVED_CHRISTOFIDES):
        if given["p2"] is None:
            raise ParameterError("p2", "This field is required: the share of middle cards (2), in [0, 1).")
        params["p2"] = str(_probability(given["p2"], "p2", lo_open=False, hi_open=True))
    return _honoured(attribute, Spec(mechanism, e, e, params))


def _honoured(attribute: Attribute, spec: Spec) -> Spec:
    """``spec`` if its sampler can realise it honestly, else a 400 naming the limit.

    The samplers build integer cells from the exact epsilons and refuse (``ValueError``, naming the largest
    epsilon they honour) one whose cells would need a probability below 2^-64 -- about 44.36 for uRR, EWRR3,
    the private sampler and Warner, 43.67 for RR3‡ / LPP‡, 88.03 for uRAP (docs/mechanisms.md, "Exact
    sampling: one-shot mechanisms").  The improved Christofides deck is sized at execution (too few
    respondents: ``TooFewRespondents``)."""
    mech = spec.mechanism
    field_name = "epsilon"
    try:
        if mech == M.URR:
            uldp.urr_cells(len(attribute.sensitive) + len(attribute.pum_tags), spec.charged)
        elif mech == M.URAP:
            uldp.urap_cells(spec.charged, Decimal(spec.parameters["theta"]) if "theta" in spec.parameters else None)
        elif mech == M.PRIVATE_SAMPLE:
            private_sampling.kernel_cells(domain.prior_of(attribute), spec.charged)
        elif mech == M.RR3 and spec.parameters.get("family") != "rr3_ddagger":
            rr3_cells(spec)
        elif mech in (M.RR3, M.LPP):
            field_name = "eps1"
            rr3.rr3_ddagger_cells(Decimal(spec.parameters["eps1"]), Decimal(spec.parameters["eps2"]))
        elif mech == M.WARNER:
            surveys.warner_device(spec.epsilon)
        elif mech == M.SIMMONS:
            surveys.simmons_device(spec.epsilon, Decimal(spec.parameters["pi_b"]))
        elif mech == M.CHRISTOFIDES:
            surveys.christofides_cards(spec.epsilon, Decimal(spec.parameters["p2"]))
    except ValueError as exc:
        if field_name == "eps1" and str(exc).startswith("eps2"):
            field_name = "eps2"
        raise ParameterError(field_name, f"The sampler cannot honour this epsilon: {exc}.") from None
    return spec


def spec_of(purchase: Purchase) -> Spec:
    """The spec a one-shot purchase or survey was claimed with (its stored mechanism and parameters)."""
    p = purchase.parameters or {}
    kwargs = {k: p[k] for k in PARAMETERS if k in p}
    attribute = purchase.attribute
    if purchase.mechanism in (M.LPP,) or p.get("family") == "rr3_ddagger":
        epsilon = None
    else:
        epsilon = purchase.epsilon
    if purchase.mechanism in SURVEY_MECHANISMS:
        return _survey_spec(attribute, purchase.mechanism, {"epsilon": epsilon, "family": None, "eps1": None,
                                                            "eps2": None, "theta": None, **kwargs})
    return parse_spec(attribute, epsilon=epsilon, **kwargs)


def _pum(attribute: Attribute, x: np.ndarray, tags: np.ndarray):
    """PUM pre-processing (docs/mechanisms-reference.md#utility-optimized-ldp-urr-urap-pum): the common mechanism's inputs over ``k + kappa`` values and its
    sensitive set extended by the bots.  Without tags (kappa = 0) the inputs are unchanged."""
    k = len(attribute.labels)
    kappa = len(attribute.pum_tags)
    tags = np.where((tags >= 0) & (tags < kappa), tags, -1)
    return uldp.pum_preprocess(x, k, domain.sensitive_indices(attribute), tags, kappa)


def draw(attribute: Attribute, spec: Spec, payload: np.ndarray, rng=None) -> np.ndarray:
    """One vectorized mechanism call over the included values' payloads: (n, width) int outputs.

    The epsilons go to the mechanisms as exact Decimals: their samplers build integer cells whose realised
    level is at most that exact value (docs/mechanisms.md, "Exact sampling: one-shot mechanisms")."""
    eps = spec.charged
    mech = spec.mechanism
    n = payload.shape[0]
    if mech in (M.URR, M.URAP):
        x = domain.oneshot_inputs(attribute, payload)
        z = _pum(attribute, x, domain.pum_tags_of(payload))
        if mech == M.URR:
            return uldp.urr_perturb(z.values, z.k, z.sensitive, eps, rng).reshape(n, 1)
        theta = spec.value("theta") if "theta" in spec.parameters else None
        return uldp.urap_perturb(z.values, z.k, z.sensitive, eps, rng, theta).astype(np.int64)
    if mech == M.RR3:
        x = domain.oneshot_inputs(attribute, payload)
        return rr3.perturb(x, rr3_cells(spec), rng).reshape(n, 1)
    if mech == M.LPP:
        w = domain.oneshot_inputs(attribute, payload)
        return rr3.lpp_report(w, attribute.num_items, Decimal(spec.parameters["eps1"]),
                              Decimal(spec.parameters["eps2"]), rng)
    if mech == M.PRIVATE_SAMPLE:
        p = domain.oneshot_inputs(attribute, payload)
        return np.asarray(private_sampling.sample(p, domain.prior_of(attribute), eps, rng),
                          dtype=np.int64).reshape(n, 1)
    raise PurchaseError(f"{mech} is not a one-shot purchase mechanism")  # pragma: no cover


#: Bytes of opened inputs or drawn outputs (as int64) one draw batch may hold.
DRAW_BATCH_BYTES = 64 * 2**20


def draw_batch(attribute: Attribute) -> int:
    """Values per draw batch: ``DRAW_BATCH_BYTES`` over the wider of a value's input and its int64 outputs."""
    return max(1, DRAW_BATCH_BYTES // max(domain.payload_bytes(attribute), 8 * attribute.width, 1))


def rr3_cells(spec: Spec):
    """The integer cells the RR3 draw samples: EWRR3 at exactly the charged epsilon, or RR3‡ at the exact
    ``(eps1, eps2)`` (realised level at most ``lpp_level``, so at most the charge)."""
    if spec.parameters.get("family") == "rr3_ddagger":
        return rr3.rr3_ddagger_cells(Decimal(spec.parameters["eps1"]), Decimal(spec.parameters["eps2"]))
    return rr3.ewrr_cells(3, spec.charged)


def rr3_matrix(spec: Spec) -> np.ndarray:
    """EWRR3 at ``p* = e^eps/(e^eps + 2)`` (exactly eps-LDP), or RR3‡ at ``p_i = e^eps_i/(e^eps_i + 1)``."""
    if spec.parameters.get("family") == "rr3_ddagger":
        keep = lambda e: 1.0 / (1.0 + math.exp(-e))  # noqa: E731
        return rr3.rr3_ddagger(keep(spec.value("eps1")), keep(spec.value("eps2")))
    return rr3.ewrr_matrix(3, 1.0 / (1.0 + 2.0 * math.exp(-float(spec.charged))))


def survey_design(spec: Spec, N: int):
    """``(design, charged)``: the device for N respondents and the exact epsilon each report costs.

    Warner, Simmons and Christofides use the exact devices of ``mechanisms.surveys`` (integer cells built
    from the exact epsilon: realised per-report level at most the charge); the estimators and variances use
    the devices' realised probabilities."""
    if spec.mechanism == M.WARNER:
        return {"device": surveys.warner_device(spec.epsilon)}, spec.epsilon
    if spec.mechanism == M.SIMMONS:
        return {"device": surveys.simmons_device(spec.epsilon, Decimal(spec.parameters["pi_b"]))}, spec.epsilon
    if spec.mechanism == M.CHRISTOFIDES:
        return {"cards": surveys.christofides_cards(spec.epsilon, Decimal(spec.parameters["p2"]))}, spec.epsilon
    counts = ic_deck(N, spec.epsilon, spec.value("p2"))
    return {"counts": counts}, ceil6(deck_level(counts))


def run_survey(spec: Spec, design: dict, x: np.ndarray, rng=None) -> dict:
    """Every respondent answers once; returns only the aggregate (estimate, closed-form variance, N)."""
    N = int(x.size)
    mech = spec.mechanism
    if mech == M.WARNER:
        device = design["device"]
        reports = surveys.warner_perturb(x, device, rng)
        est = surveys.warner_estimate(reports, device.p)
        var = surveys.warner_variance(device.p, N)
        note = "census variance p(1-p)/(N(2p-1)^2); it does not depend on the proportion"
    elif mech == M.SIMMONS:
        device = design["device"]
        reports = surveys.simmons_perturb(x, device, rng=rng)
        est = surveys.simmons_estimate(reports, device.p, device.pi_b)
        var = surveys.simmons_variance(device.p, device.pi_b, min(max(est, 0.0), 1.0), N)
        note = "census variance (eq. 2) at the estimate clipped to [0, 1]"
    elif mech == M.CHRISTOFIDES:
        cards = design["cards"]
        reports = surveys.christofides_perturb(x, cards, rng)
        est = surveys.christofides_estimate(reports, cards.probs)
        var = surveys.christofides_variance(cards.probs, N)
        note = "census variance VarY/(N D^2); it does not depend on the proportion"
    else:
        reports = surveys.improved_christofides_deal(x, design["counts"], rng)
        est = surveys.improved_christofides_estimate(reports, design["counts"])
        var = surveys.improved_christofides_variance(design["counts"], min(max(est, 0.0), 1.0))
        note = ("census variance 4 pi(1-pi) VarY/((N-1) D^2) at the estimate clipped to [0, 1]; valid only "
                "because every dealt respondent answered exactly once")
    del reports  # the individual reports never leave this function
    se = math.sqrt(max(var, 0.0))
    z = 1.959963984540054
    return {"estimate": float(est), "variance": float(var), "standard_error": se, "ci95_low": float(est) - z * se,
            "ci95_high": float(est) + z * se, "n": N, "variance_note": note}
