"""The mechanism registry: one record per mechanism, the one place its facts live
(docs/mechanisms.md#the-mechanism-registry).

A :class:`Mechanism` record says what the market needs of a mechanism: its code (stored in the database) and
its number (the budget audit's code for it), its role (a gradual-release chain, a one-shot release, or a survey
that sells only an aggregate), the attribute kinds it fits, the guarantee its releases carry, the parameters a
buyer gives (:class:`Form`), the exact privacy level they cost (one implementation, beside the mechanism's
mathematics, rounded up by the market), and the hooks that check a request can be sampled honestly, draw a
release, predict a quote's errors and estimate from the outputs; and its owner- and auditor-facing wording.

Everything else derives from the records: the models' choices and CHECK constraints, the API's choices, the
request parsing and charging (``market.oneshot_specs``), quotes and estimates (``market.oneshot_stats``), the
budget audit's mechanism table (``audit.codes``) and the portal's wording.  Adding a mechanism is its
mathematics in its own module, one section here, and a migration for the new choice.

Pure: numpy and Decimal only, no Django.  Hooks take a :class:`~mechanisms.release_stats.Shape` (an
attribute's public facts), the exact (Decimal) epsilon charged and the request's canonical parameters (a dict
of text, as stored with the purchase).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Callable

import numpy as np

from . import consistency, estimators, olh, oue, private_sampling, rr3, surveys, uldp
from .release_stats import SIMPLEX3, Z95, PredictedError, Shape, em_matrix, frequencies, per_label

CHAIN, ONESHOT, SURVEY = "chain", "oneshot", "survey"
#: The guarantees a release carries, as the ledger stores them (``accounts.models.LedgerEntry.Guarantee``).
NONE, LDP, ULDP, PER_REPORT = "", "ldp", "uldp", "per_report_non_collusion"

#: The attribute kinds (``market.models.Attribute.Kind``).
CATEGORICAL, BINARY, NUMERIC, STRING = "categorical", "binary", "numeric", "string"
TERNARY, GRAPH, DISTRIBUTION = "ternary", "graph", "distribution"


class Refused(ValueError):
    """A request its sampler cannot honour, naming the parameter (``field``) at fault."""

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


class TooFew(ValueError):
    """Too few respondents for a survey's design (an improved Christofides deck)."""


# ------------------------------------------------------------------------------------------ parameters

@dataclass(frozen=True)
class Param:
    """A request parameter: an epsilon (``epsilon``, ``eps1``, ``eps2``), a probability in an interval whose ends
    are open or closed, or a choice (``family``).  ``required`` is what a missing one is told."""

    name: str
    kind: str
    lo_open: bool = True
    hi_open: bool = True
    required: str = "This field is required."


PARAMS = {p.name: p for p in (
    Param("epsilon", "epsilon"), Param("eps1", "epsilon"), Param("eps2", "epsilon"),
    Param("theta", "probability"), Param("family", "choice"),
    Param("pi_b", "probability", required="This field is required for a Simmons survey: the probability that "
                                          "the unrelated question is answered yes."),
    Param("p2", "probability", lo_open=False, required="This field is required: the share of middle cards (2), "
                                                       "in [0, 1)."),
)}
#: Every mechanism parameter a request may carry besides ``epsilon`` (``Purchase.parameters`` keys).
PARAMETERS = ("family", "eps1", "eps2", "theta", "pi_b", "p2")


@dataclass(frozen=True)
class Form:
    """One way of asking for a mechanism: the parameters it needs and accepts, the ``family`` value naming it
    (RR3's two families), and ``level``, the exact level (to 40 digits) of a form priced by two epsilons; a form
    with ``epsilon`` costs that epsilon (its sampler realises at most it).  ``takes`` says what it takes, for
    the 400 a stray parameter gets."""

    required: tuple[str, ...]
    takes: str
    optional: tuple[str, ...] = ()
    family: str | None = None
    level: Callable[[dict], Decimal] | None = None


def _d(params: dict, name: str) -> Decimal:
    return Decimal(params[name])


def _f(params: dict, name: str) -> float:
    return float(params[name])


def _opt(params: dict, name: str) -> float | None:
    return float(params[name]) if name in params else None


def two_epsilon_level(params: dict) -> Decimal:
    """RR3‡ and LPP‡ cost ``rr3.lpp_level(eps1, eps2)``, less than ``eps1 + eps2``."""
    return rr3.lpp_level(_d(params, "eps1"), _d(params, "eps2"))


# ------------------------------------------------------------------------------------------ the record

def _one(shape: Shape) -> int:
    return 1


def _no_labels(shape: Shape) -> list[str] | None:
    return None


@dataclass(frozen=True)
class Mechanism:
    """One mechanism as the market sells it (module docstring).

    ``title`` names it for staff and auditors (admin, API choices), ``short`` in a purchase's list, and
    ``owner_name``/``owner_explained`` on the owner's pages.  ``number`` is its code in the budget audit: never
    reuse or reorder one.  Hooks (``None`` where the role has none):

    * ``honour(shape, charged, params)``: raise :class:`Refused` unless the sampler's integer cells exist;
    * ``draw(shape, inputs, tags, charged, params, rng)``: (n, width) int64 outputs, one vectorized call;
    * ``predict(shape, charged, params, n)``: a :class:`PredictedError` (or ``None``: no closed form);
    * ``estimate(shape, outputs, charged, params)``: the estimate's fields (frequencies, graph...);
    * ``likelihood(shape, outputs, charged, params)``: ``(likelihood, weights)`` of the reports under the exact
      law, for IBU (``mechanisms.consistency``), where the estimate leaves its maximum-likelihood column empty;
    * surveys: ``design(epsilon, params, N)`` -> ``(design, charged)``, ``run(design, params, x, rng)`` -> the
      aggregate, ``variance(epsilon, params, n, pi)``.
    """

    code: str
    number: int
    role: str
    kinds: tuple[str, ...]
    guarantee: str
    title: str
    short: str
    owner_name: str
    owner_explained: str = ""
    forms: tuple[Form, ...] = ()
    uses_sensitive: bool = False  # uRR/uRAP: a sensitive set and PUM tags; the payload carries a PUM tag
    bit_vector: bool = False  # outputs are bit vectors (CSV as a string of bits)
    width: Callable[[Shape], int] = _one
    output_labels: Callable[[Shape], list[str] | None] = _no_labels
    format_outputs: Callable[[Shape, np.ndarray], list] | None = None
    honour: Callable | None = None
    draw: Callable | None = None
    predict: Callable | None = None
    estimate: Callable | None = None
    likelihood: Callable | None = None
    design: Callable | None = None
    run: Callable | None = None
    variance: Callable | None = None
    notes: dict = field(default_factory=dict)

    @property
    def is_chain(self) -> bool:
        return self.role == CHAIN

    @property
    def is_oneshot(self) -> bool:
        """Every release is a fresh draw charged to the value's ``oneshot_loss`` (surveys included)."""
        return self.role != CHAIN

    @property
    def is_survey(self) -> bool:
        return self.role == SURVEY

    def form_for(self, given: dict) -> Form:
        """The form a request asks for: the one its ``family`` names, else the first whose own parameters it
        gives, else the first.  Raises :class:`Refused` for an unknown family."""
        family = given.get("family")
        if family is not None:
            for form in self.forms:
                if form.family is not None and form.family == family:
                    return form
            families = ", ".join(f.family for f in self.forms if f.family)
            raise Refused("family", f"family must be one of {families}")
        first = self.forms[0]
        for form in self.forms[1:]:
            if any(given.get(p) is not None for p in form.required if p not in first.required):
                return form
        return first


# ============================================================================ gradual release (chains)

GRADUAL_RR = Mechanism(
    code="gradual_rr", number=0, role=CHAIN, kinds=(CATEGORICAL, BINARY, NUMERIC, STRING), guarantee=NONE,
    title="Gradual-release randomized response", short="Gradual-release randomized response (chain)",
    owner_name="Chain of randomized answers (gradual release)",
    owner_explained="Buyers get randomized versions of your value from one stored chain. All buyers together "
                    "learn no more than the highest ε ever sold, so only the highest ε counts: selling again at "
                    "the same or a lower ε costs you nothing.")


# ===================================================================================== uRR and uRAP

def _pum_inputs(shape: Shape, x: np.ndarray, tags: np.ndarray):
    """PUM pre-processing (docs/mechanisms-reference.md#utility-optimized-ldp-urr-urap-pum): the common
    mechanism's inputs over ``k + kappa`` values and its sensitive set extended by the bots.  Without tags
    (kappa = 0) the inputs are unchanged."""
    kappa = len(shape.pum_tags)
    tags = np.where((tags >= 0) & (tags < kappa), tags, -1)
    return uldp.pum_preprocess(x, shape.m, np.asarray(shape.sensitive, dtype=np.int64), tags, kappa)


def urap_terms(eps: float, theta: float | None) -> tuple[float, float, float]:
    """``(theta, d1, d2)`` of uRAP (docs/mechanisms-reference.md#utility-optimized-ldp-urr-urap-pum Def. 4),
    overflow-free: ``theta = h/(h+1)`` by default, ``d1 = theta/((1-theta) e + theta)``, ``d2 = ((1-theta) e +
    theta)/e``."""
    if theta is None:
        theta, t = 1.0 / (1.0 + math.exp(-eps / 2.0)), 1.0 / (1.0 + math.exp(eps / 2.0))
    else:
        t = 1.0 - theta
    z = math.exp(-eps)
    d2 = t + theta * z
    return theta, theta * z / d2, d2


def uldp_linear_terms(shape: Shape, code: str, charged, params: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per extended coordinate ``(a, b)``: the output share is ``m = a + b p``, the estimate ``(m_hat - a)/b``."""
    K = len(shape.labels) + len(shape.pum_tags)
    S = shape.extended_sensitive
    mask = np.zeros(K, dtype=bool)
    mask[S] = True
    eps = float(charged)
    if code == "urr":
        Q = uldp.urr_matrix(K, S, eps)
        y = np.arange(K)
        a = Q[(y + 1) % K, y]  # every other input gives the same mass (c2 on S, 0 on N)
        return a, Q[y, y] - a
    theta, d1, d2 = urap_terms(eps, _opt(params, "theta"))
    return np.where(mask, d1, 0.0), np.where(mask, theta - d1, 1.0 - d2)


def _uldp_predict(code: str):
    def predict(shape: Shape, charged, params: dict, n: int) -> PredictedError:
        """Each coordinate's ``Var = m(1-m)/(n b^2)`` at a population spread uniformly over the labels, its worst
        case at ``m`` nearest 1/2, and the exact expected squared l2 loss (``uldp.expected_l2``, Props. 15/18)."""
        labels = shape.extended_labels
        a, b = uldp_linear_terms(shape, code, charged, params)
        k = shape.m
        p = np.zeros(len(labels))
        p[:k] = 1.0 / k
        m = a + b * p
        se = np.sqrt(m * (1 - m) / (n * b * b))
        worst_m = np.clip(0.5, a, a + b)
        worst = np.sqrt(worst_m * (1 - worst_m) / (n * b * b))
        l2 = uldp.expected_l2(p, shape.extended_sensitive, float(charged), n, code, _opt(params, "theta"))
        return PredictedError("frequency", float(se[0]), float(worst.max()), per_label(labels, se, worst),
                              expected_l2=float(l2))
    return predict


def _uldp_estimate(code: str):
    def estimate(shape: Shape, outputs: np.ndarray, charged, params: dict) -> dict:
        """``(m_hat - a)/b`` per extended coordinate with ``se = sqrt(m_hat(1 - m_hat)/(n b^2))``, and EM's
        maximum likelihood (``uldp.em_estimate``)."""
        labels = shape.extended_labels
        S = shape.extended_sensitive
        eps = float(charged)
        n = outputs.shape[0]
        _, b = uldp_linear_terms(shape, code, charged, params)
        theta = _opt(params, "theta")
        if code == "urr":
            reports = outputs[:, 0]
            m_hat = np.bincount(reports, minlength=len(labels)) / n
            p_hat = uldp.urr_estimate(reports, len(labels), S, eps)
        else:
            reports = outputs.astype(bool)
            m_hat = outputs.mean(axis=0)
            p_hat = uldp.urap_estimate(reports, S, eps, theta)
        se = np.sqrt(np.maximum(m_hat * (1 - m_hat), 0) / (n * b * b))
        try:
            ml = uldp.em_estimate(reports, len(labels), S, eps, theta=theta if code == "urap" else None,
                                  max_iter=2000).p
        except (ValueError, MemoryError):
            ml = estimators.project_simplex(p_hat)
        return {"frequencies": frequencies(labels, p_hat, se, ml)}
    return estimate


def _urr_honour(shape: Shape, charged, params: dict) -> None:
    uldp.urr_cells(len(shape.sensitive) + len(shape.pum_tags), charged)


def _urr_draw(shape: Shape, x, tags, charged, params: dict, rng) -> np.ndarray:
    z = _pum_inputs(shape, x, tags)
    return uldp.urr_perturb(z.values, z.k, z.sensitive, charged, rng).reshape(-1, 1)


def _urap_honour(shape: Shape, charged, params: dict) -> None:
    uldp.urap_cells(charged, _d(params, "theta") if "theta" in params else None)


def _urap_draw(shape: Shape, x, tags, charged, params: dict, rng) -> np.ndarray:
    z = _pum_inputs(shape, x, tags)
    return uldp.urap_perturb(z.values, z.k, z.sensitive, charged, rng, _opt(params, "theta")).astype(np.int64)


def _extended_labels(shape: Shape) -> list[str]:
    return shape.extended_labels


URR = Mechanism(
    code="urr", number=1, role=ONESHOT, kinds=(CATEGORICAL,), guarantee=ULDP, uses_sensitive=True,
    title="Utility-optimized randomized response (uRR, one-shot)", short="uRR",
    owner_name="Randomized answer that always protects sensitive answers (uRR)",
    owner_explained="Each sale sends one randomized answer. Answers the question marks as sensitive are always "
                    "protected at the sale's ε; any other answer may be passed on exactly, because it is not "
                    "considered sensitive. If your answer is sensitive for you personally, tag it on the value page "
                    "and it is sent as a protected symbol instead.",
    forms=(Form(("epsilon",), "the urr mechanism takes only epsilon"),),
    output_labels=_extended_labels, honour=_urr_honour, draw=_urr_draw,
    predict=_uldp_predict("urr"), estimate=_uldp_estimate("urr"))

URAP = Mechanism(
    code="urap", number=2, role=ONESHOT, kinds=(CATEGORICAL,), guarantee=ULDP, uses_sensitive=True,
    bit_vector=True, title="Utility-optimized RAPPOR (uRAP, one-shot)", short="uRAP",
    owner_name="Randomized pattern of bits that always protects sensitive answers (uRAP)",
    owner_explained="Each sale sends a randomized pattern of bits, one bit per possible answer. Answers the "
                    "question marks as sensitive are always protected at the sale's ε; any other answer may be "
                    "passed on exactly, because it is not considered sensitive. If your answer is sensitive for "
                    "you personally, tag it on the value page and it is sent as a protected symbol instead.",
    forms=(Form(("epsilon",), "the urap mechanism takes only epsilon and theta", optional=("theta",)),),
    width=lambda shape: shape.m + len(shape.pum_tags), honour=_urap_honour, draw=_urap_draw,
    predict=_uldp_predict("urap"), estimate=_uldp_estimate("urap"))


# ============================================================================== RR3 (EWRR3 and RR3‡)

def rr3_cells(charged, params: dict):
    """The integer cells the RR3 draw samples: EWRR3 at exactly the charged epsilon, or RR3‡ at the exact
    ``(eps1, eps2)`` (realised level at most ``rr3.lpp_level``, so at most the charge)."""
    if params.get("family") == "rr3_ddagger":
        return rr3.rr3_ddagger_cells(_d(params, "eps1"), _d(params, "eps2"))
    return rr3.ewrr_cells(3, charged)


def rr3_matrix(charged, params: dict) -> np.ndarray:
    """EWRR3 at ``p* = e^eps/(e^eps + 2)`` (exactly eps-LDP), or RR3‡ at ``p_i = e^eps_i/(e^eps_i + 1)``."""
    if params.get("family") == "rr3_ddagger":
        keep = lambda e: 1.0 / (1.0 + math.exp(-e))  # noqa: E731
        return rr3.rr3_ddagger(keep(_f(params, "eps1")), keep(_f(params, "eps2")))
    return rr3.ewrr_matrix(3, 1.0 / (1.0 + 2.0 * math.exp(-float(charged))))


def _matrix_estimate(shape: Shape, P: np.ndarray, outputs: np.ndarray) -> dict:
    """``pi_hat = (counts/n) inv(P)`` with covariance ``(C.T diag(t) C - outer(pi, pi))/n`` at the projected
    estimate; a (nearly) singular ``P`` has no unbiased estimator: the ML estimate only."""
    labels = list(shape.labels)
    n = outputs.shape[0]
    counts = np.bincount(outputs[:, 0], minlength=len(labels)).astype(np.float64)
    try:
        p_hat = rr3.estimate(counts, P)
        cov = rr3.estimator_covariance(estimators.project_simplex(p_hat), P, n)
        se = np.sqrt(np.maximum(np.diag(cov), 0))
    except ValueError:
        p_hat = em_matrix(counts, P)
        se = np.full(len(labels), np.nan)
    return {"frequencies": frequencies(labels, p_hat, np.nan_to_num(se, nan=0.0), em_matrix(counts, P))}


def _rr3_predict(shape: Shape, charged, params: dict, n: int) -> PredictedError:
    """The covariance at a uniform population, and each state's worst case over the simplex grid."""
    P = rr3_matrix(charged, params)
    cov = rr3.estimator_covariance(np.full(3, 1.0 / 3), P, n)
    se = np.sqrt(np.diag(cov))
    inv = np.linalg.inv(P)
    var = ((SIMPLEX3 @ P) @ (inv * inv) - SIMPLEX3 * SIMPLEX3) / n
    worst = np.sqrt(np.maximum(var, 0).max(axis=0))
    return PredictedError("frequency", float(se[0]), float(worst.max()), per_label(shape.labels, se, worst),
                          covariance=cov.tolist())


def _rr3_honour(shape: Shape, charged, params: dict) -> None:
    try:
        rr3_cells(charged, params)
    except ValueError as exc:
        ddagger = params.get("family") == "rr3_ddagger"
        raise Refused(("eps2" if str(exc).startswith("eps2") else "eps1") if ddagger else "epsilon",
                      str(exc)) from None


def _labels(shape: Shape) -> list[str]:
    return list(shape.labels)


RR3 = Mechanism(
    code="rr3", number=3, role=ONESHOT, kinds=(TERNARY,), guarantee=LDP,
    title="Three-element randomized response (EWRR3 or RR3‡, one-shot)", short="RR3 family",
    owner_name="Randomized choice among three answers (RR3)",
    owner_explained="Each sale reports one of the three answers, randomized: your true answer is more likely to be "
                    "reported the higher the ε. The ε charged is exactly the protection the sale gives (when a "
                    "buyer sets two separate levels, it is less than their sum).",
    forms=(Form(("epsilon",), "EWRR3 takes epsilon only (RR3‡ takes eps1 and eps2)", family="ewrr3"),
           Form(("eps1", "eps2"), "RR3‡ takes eps1 and eps2 (its charged epsilon is their exact level, not their "
                                  "sum)", family="rr3_ddagger", level=two_epsilon_level)),
    output_labels=_labels, honour=_rr3_honour,
    draw=lambda shape, x, tags, charged, params, rng: rr3.perturb(x, rr3_cells(charged, params), rng).reshape(-1, 1),
    predict=_rr3_predict,
    estimate=lambda shape, outputs, charged, params: _matrix_estimate(shape, rr3_matrix(charged, params), outputs))


# ========================================================================================= LPP‡ (graphs)

GRAPH_STATES = ["none", "+1", "-1"]  # LPP report states 0, 1, 2


def _lpp_predict(shape: Shape, charged, params: dict, n: int) -> PredictedError:
    """Per item, the standard errors of its degree and weight (``rr3.lpp_item_covariance``).

    The typical case: every item has a third of the owners with no edge, a third at +1, a third at -1.
    The worst case drops the finite-population term (a covariance, so dropping it only adds variance,
    whatever the weights) and takes the largest ``E[1/N] A`` over the simplex grid: an upper bound for
    every population, fractional weights included.
    """
    eps1, eps2, items = _f(params, "eps1"), _f(params, "eps2"), shape.num_items
    se = np.sqrt(np.diag(rr3.lpp_item_covariance(np.full(3, 1.0 / 3), n, items, eps1, eps2)))
    P = rr3.rr3_ddagger(1.0 / (1.0 + math.exp(-eps1)), 1.0 / (1.0 + math.exp(-eps2)))
    C = np.linalg.inv(P)
    t = SIMPLEX3 @ P
    worst = []
    for row in ((-1.0, 0.0, 0.0), (0.0, 1.0, -1.0)):  # degree = n (1 - pi_0), weight = n (pi_1 - pi_2)
        v = C @ np.array(row)
        var = t @ (v * v) - (SIMPLEX3 @ np.array(row)) ** 2
        worst.append(n * math.sqrt(rr3.inverse_sample_size(n, items) * max(float(var.max()), 0.0)))
    return PredictedError("item_degree_weight", float(se[0]), worst[0],
                          per_label(["degree of an item", "weight of an item"], se, worst))


def _lpp_estimate(shape: Shape, outputs: np.ndarray, charged, params: dict) -> dict:
    """Per item its degree and weight with standard errors (``rr3.graph_estimates``, ``lpp_standard_errors``)."""
    n = outputs.shape[0]
    args = (outputs, n, shape.num_items, _f(params, "eps1"), _f(params, "eps2"))
    g = rr3.graph_estimates(*args)
    se_degree, se_weight = rr3.lpp_standard_errors(*args)
    names = list(shape.labels)

    def clean(v) -> float | None:
        return None if not math.isfinite(float(v)) else float(v)

    def item(j: int) -> dict:
        row = {"item": names[j], "samples": int(g.samples[j]), "mean_weight": clean(g.mean_weight[j])}
        for name, value, se in (("degree", g.degree[j], se_degree[j]), ("weight", g.weight[j], se_weight[j])):
            row |= {name: clean(value), f"{name}_standard_error": clean(se),
                    f"{name}_ci95_low": clean(value - Z95 * se), f"{name}_ci95_high": clean(value + Z95 * se)}
        return row

    return {"graph": {
        "items": [item(j) for j in range(shape.num_items)],
        "users": n, "total_degree": clean(g.total_degree), "total_weight": clean(g.total_weight),
        "vertex_pairs": int(g.vertex_pairs),
        "average_degree_over_vertex_pairs": clean(g.average_degree_over_vertex_pairs),
        "average_weight_over_vertex_pairs": clean(g.average_weight_over_vertex_pairs)}}


def _lpp_format(shape: Shape, out: np.ndarray) -> list[str]:
    """(item, state) reports as ``"item:state"``."""
    items = np.asarray(shape.labels, dtype=object)
    states = np.asarray(GRAPH_STATES, dtype=object)
    return [f"{i}:{st}" for i, st in zip(items[out[:, 0]].tolist(), states[out[:, 1]].tolist())]


def _lpp_honour(shape: Shape, charged, params: dict) -> None:
    try:
        rr3.rr3_ddagger_cells(_d(params, "eps1"), _d(params, "eps2"))
    except ValueError as exc:
        raise Refused("eps2" if str(exc).startswith("eps2") else "eps1", str(exc)) from None


LPP = Mechanism(
    code="lpp", number=4, role=ONESHOT, kinds=(GRAPH,), guarantee=LDP,
    title="Bipartite-graph protocol LPP‡ (one-shot)", short="LPP‡",
    owner_name="Randomized report about one of your links (LPP)",
    owner_explained="Each sale picks one item at random and reports whether you have a link to it and, if so, "
                    "whether it is positive or negative, both randomized. A weight w becomes +1 with probability "
                    "(1 + w)/2, otherwise −1. The ε charged is exactly the protection of the two randomization "
                    "levels together, less than their sum.",
    forms=(Form(("eps1", "eps2"), "LPP‡ takes eps1 (edge or not) and eps2 (the edge's sign)",
                level=two_epsilon_level),),
    width=lambda shape: 2, format_outputs=_lpp_format, honour=_lpp_honour,
    draw=lambda shape, w, tags, charged, params, rng: rr3.lpp_report(w, shape.num_items, _d(params, "eps1"),
                                                                     _d(params, "eps2"), rng),
    predict=_lpp_predict, estimate=_lpp_estimate)


# ================================================================================= private sampling

def _private_predict(shape: Shape, charged, params: dict, n: int) -> PredictedError | None:
    """The estimator's covariance at the prior (a kernel too close to singular: no unbiased estimator)."""
    q = shape.prior_array
    K = private_sampling.optimal_kernel(q, float(charged))
    try:
        cov = rr3.estimator_covariance(q, K, n)
    except ValueError:
        return None
    se = np.sqrt(np.maximum(np.diag(cov), 0))
    return PredictedError("mean_distribution", float(se.max()), None, per_label(shape.labels, se, None))


PRIVATE_SAMPLE = Mechanism(
    code="private_sample", number=5, role=ONESHOT, kinds=(DISTRIBUTION,), guarantee=LDP,
    title="Optimal private sampling with a public prior (one-shot)", short="Private sample",
    owner_name="Private sample of your distribution",
    owner_explained="Each sale releases one label drawn from your distribution, randomized so that it is protected "
                    "at the sale's ε, using a public starting guess (the prior). Buyers never see your "
                    "probabilities.",
    forms=(Form(("epsilon",), "the private_sample mechanism takes only epsilon"),),
    output_labels=_labels,
    honour=lambda shape, charged, params: private_sampling.kernel_cells(shape.prior_array, charged),
    draw=lambda shape, p, tags, charged, params, rng: np.asarray(
        private_sampling.sample(p, shape.prior_array, charged, rng), dtype=np.int64).reshape(-1, 1),
    predict=_private_predict,
    estimate=lambda shape, outputs, charged, params: _matrix_estimate(
        shape, private_sampling.optimal_kernel(shape.prior_array, float(charged)), outputs))


# ============================================================================================ surveys

def ic_deck(N: int, epsilon, p2: float) -> np.ndarray:
    """``surveys.ic_deck_counts`` for N respondents, checked exactly: its per-report level
    (``surveys.deck_level``) is at most the target.  Raises :class:`TooFew`."""
    try:
        counts = surveys.ic_deck_counts(N, epsilon, p2)
    except ValueError as exc:
        raise TooFew(f"An improved Christofides survey needs more respondents at this epsilon and p2: {exc}.") \
            from None
    while surveys.deck_level(counts) > Decimal(epsilon):  # a float rounding: move a card from 3 to 1
        counts = counts + np.array([1, 0, -1])
        if not counts[2] > counts[0]:
            raise TooFew(f"{N} respondents are too few for an informative deck at epsilon {epsilon}.")
    return counts


def _aggregate(est, var, N: int, note: str) -> dict:
    se = math.sqrt(max(var, 0.0))
    return {"estimate": float(est), "variance": float(var), "standard_error": se, "ci95_low": float(est) - Z95 * se,
            "ci95_high": float(est) + Z95 * se, "n": N, "variance_note": note}


def _warner_run(design: dict, params: dict, x, rng) -> dict:
    device = design["device"]
    reports = surveys.warner_perturb(x, device, rng)
    est = surveys.warner_estimate(reports, device.p)
    return _aggregate(est, surveys.warner_variance(device.p, x.size), x.size,
                      "census variance p(1-p)/(N(2p-1)^2); it does not depend on the proportion")


def _simmons_run(design: dict, params: dict, x, rng) -> dict:
    device = design["device"]
    reports = surveys.simmons_perturb(x, device, rng=rng)
    est = surveys.simmons_estimate(reports, device.p, device.pi_b)
    var = surveys.simmons_variance(device.p, device.pi_b, min(max(est, 0.0), 1.0), x.size)
    return _aggregate(est, var, x.size, "census variance (eq. 2) at the estimate clipped to [0, 1]")


def _christofides_run(design: dict, params: dict, x, rng) -> dict:
    cards = design["cards"]
    reports = surveys.christofides_perturb(x, cards, rng)
    est = surveys.christofides_estimate(reports, cards.probs)
    return _aggregate(est, surveys.christofides_variance(cards.probs, x.size), x.size,
                      "census variance VarY/(N D^2); it does not depend on the proportion")


def _ic_run(design: dict, params: dict, x, rng) -> dict:
    reports = surveys.improved_christofides_deal(x, design["counts"], rng)
    est = surveys.improved_christofides_estimate(reports, design["counts"])
    var = surveys.improved_christofides_variance(design["counts"], min(max(est, 0.0), 1.0))
    return _aggregate(est, var, x.size, "census variance 4 pi(1-pi) VarY/((N-1) D^2) at the estimate clipped to "
                                        "[0, 1]; valid only because every dealt respondent answered exactly once")


def _ic_design(epsilon, params: dict, N: int):
    counts = ic_deck(N, epsilon, _f(params, "p2"))
    return {"counts": counts}, surveys.deck_level(counts)


def _survey(code: str, number: int, guarantee: str, short: str, owner_name: str, takes: str, optional=(),
            *, honour, design, run, variance) -> Mechanism:
    required = ("epsilon", *optional)

    def predict(shape: Shape, charged, params: dict, n: int) -> PredictedError | None:
        """The closed-form census variance at a proportion of 1/2, its worst case over 0, 1/2 and 1."""
        try:
            half = variance(charged, params, n, 0.5)
            ends = [variance(charged, params, n, pi) for pi in (0.0, 1.0)]
        except ValueError:
            return None
        return PredictedError("proportion", math.sqrt(half), math.sqrt(max([half, *ends])), [], variance=half)

    return Mechanism(code=code, number=number, role=SURVEY, kinds=(BINARY,), guarantee=guarantee, title=short,
                     short=short, owner_name=owner_name, forms=(Form(required, takes),), honour=honour,
                     design=design, run=run, variance=variance, predict=predict)


WARNER = _survey(
    "warner", 6, LDP, "Warner survey", "Yes/no survey, Warner's method", "the warner survey takes epsilon",
    honour=lambda shape, eps, params: surveys.warner_device(eps),
    design=lambda eps, params, N: ({"device": surveys.warner_device(eps)}, eps), run=_warner_run,
    variance=lambda eps, params, n, pi: surveys.warner_variance(surveys.warner_probability(float(eps)), n))
SIMMONS = _survey(
    "simmons", 7, LDP, "Simmons survey", "Yes/no survey, Simmons' method", "the simmons survey takes epsilon and pi_b",
    ("pi_b",),
    honour=lambda shape, eps, params: surveys.simmons_device(eps, _d(params, "pi_b")),
    design=lambda eps, params, N: ({"device": surveys.simmons_device(eps, _d(params, "pi_b"))}, eps),
    run=_simmons_run,
    variance=lambda eps, params, n, pi: surveys.simmons_variance(
        surveys.simmons_probability(float(eps), _f(params, "pi_b")), _f(params, "pi_b"), pi, n))
CHRISTOFIDES = _survey(
    "christofides", 8, LDP, "Christofides survey", "Yes/no survey, Christofides' method",
    "the christofides survey takes epsilon and p2", ("p2",),
    honour=lambda shape, eps, params: surveys.christofides_cards(eps, _d(params, "p2")),
    design=lambda eps, params, N: ({"cards": surveys.christofides_cards(eps, _d(params, "p2"))}, eps),
    run=_christofides_run,
    variance=lambda eps, params, n, pi: surveys.christofides_variance(
        surveys.christofides_optimal_probs(float(eps), _f(params, "p2")), n))
IMPROVED_CHRISTOFIDES = _survey(
    "improved_christofides", 9, PER_REPORT, "Improved Christofides survey",
    "Yes/no survey, improved Christofides method", "the improved_christofides survey takes epsilon and p2", ("p2",),
    honour=None, design=_ic_design, run=_ic_run,
    variance=lambda eps, params, n, pi: surveys.improved_christofides_variance(ic_deck(n, eps, _f(params, "p2")),
                                                                              pi))


# ================================================================================ OUE and OLH (Wang et al. 2017)

def _frequency_predict(variance) -> Callable:
    def predict(shape: Shape, charged, params: dict, n: int) -> PredictedError:
        """``variance(eps, n, f)`` at a population spread uniformly (``f = 1/m``) and at its worst, ``f = 1``
        (the variance is linear in ``f`` and ``p (1 - p) >= q (1 - q)``)."""
        m = shape.m
        se = np.full(m, math.sqrt(float(variance(charged, n, 1.0 / m))))
        worst = np.full(m, math.sqrt(float(variance(charged, n, 1.0))))
        return PredictedError("frequency", float(se[0]), float(worst[0]), per_label(shape.labels, se, worst))
    return predict


def _frequency_estimate(shape: Shape, p_hat: np.ndarray, variance, charged, n: int) -> dict:
    """Unbiased frequencies with standard errors at the estimate clipped to [0, 1], and their projection on the
    simplex; the maximum-likelihood column is left empty (IBU over every report costs reports x values: it is
    computed when asked for, from the ``likelihood`` hook)."""
    se = np.sqrt(np.maximum(variance(charged, n, np.clip(p_hat, 0.0, 1.0)), 0.0))
    return {"frequencies": frequencies(shape.labels, p_hat, se, None)}


def _oue_likelihood(shape: Shape, outputs: np.ndarray, charged, params: dict):
    """OUE's exact law for IBU: ``p = 1/2`` on the report's value's bit, the realised ``q`` elsewhere."""
    p, q = oue.probabilities(charged)
    return consistency.unary_likelihood(outputs, p, q)


def _olh_likelihood(shape: Shape, outputs: np.ndarray, charged, params: dict):
    """OLH's exact law for IBU: the realised keep probability ``p`` on the values hashing to the report's
    bucket, ``(1 - p)/(g - 1)`` on the others."""
    seeds, buckets = olh_unpack(outputs)
    g = olh.olh_g(charged)
    p, _ = olh.probabilities(charged)
    return consistency.support_likelihood(olh.support_matrix(seeds, buckets, shape.m, g), p, (1 - p) / (g - 1))


def _oue_honour(shape: Shape, charged, params: dict) -> None:
    oue.other_threshold(charged)


OUE = Mechanism(
    code="oue", number=10, role=ONESHOT, kinds=(CATEGORICAL,), guarantee=LDP, bit_vector=True,
    title="Optimized unary encoding (OUE, one-shot)", short="OUE",
    owner_name="Randomized pattern of bits, one per possible answer (OUE)",
    owner_explained="Each sale sends one bit per possible answer: the bit of your answer is a fair coin, every "
                    "other bit is set at random with a small probability, so your answer is protected at the "
                    "sale's ε.",
    forms=(Form(("epsilon",), "the oue mechanism takes only epsilon"),),
    width=lambda shape: shape.m, honour=_oue_honour,
    draw=lambda shape, x, tags, charged, params, rng: oue.oue_perturb(x, charged, shape.m, rng).astype(np.int64),
    predict=_frequency_predict(oue.oue_variance),
    estimate=lambda shape, outputs, charged, params: _frequency_estimate(
        shape, oue.oue_estimate(outputs, charged), oue.oue_variance, charged, outputs.shape[0]),
    likelihood=_oue_likelihood)

#: An OLH output is stored as five 16-bit words: the seed ``a 2^32 + b`` (four words, low first) and the bucket.
OLH_WIDTH = 5
#: The largest bucket count stored (a bucket fits a signed 16-bit word): ``g <= 32767``, epsilon below 10.397.
OLH_MAX_G = 32767


def olh_pack(seeds: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    """(n, 5) int64 of 16-bit words: the seed's four words (low first), then the bucket."""
    s = np.asarray(seeds, dtype=np.uint64)
    words = [((s >> np.uint64(16 * j)) & np.uint64(0xFFFF)).astype(np.int64) for j in range(4)]
    return np.column_stack([*words, np.asarray(buckets, dtype=np.int64)])


def olh_unpack(outputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(seeds, buckets)`` from :func:`olh_pack`'s words (stored as signed 16-bit: masked back)."""
    w = np.asarray(outputs, dtype=np.int64) & 0xFFFF
    seeds = np.zeros(w.shape[0], dtype=np.uint64)
    for j in range(4):
        seeds |= w[:, j].astype(np.uint64) << np.uint64(16 * j)
    return seeds, w[:, 4]


def _olh_honour(shape: Shape, charged, params: dict) -> None:
    g = olh.olh_g(charged)
    if g > OLH_MAX_G:
        raise Refused("epsilon", f"OLH stores each report's bucket in 16 bits, so epsilon must give at most "
                                 f"{OLH_MAX_G} buckets (epsilon at most 10.397); {charged} gives {g}")


def _olh_draw(shape: Shape, x, tags, charged, params: dict, rng) -> np.ndarray:
    seeds, buckets = olh.olh_perturb(x, charged, shape.m, rng)
    return olh_pack(seeds, buckets)


def _olh_format(shape: Shape, out: np.ndarray) -> list[str]:
    """``"seed:bucket"``: the buyer re-hashes with ``h(v) = ((a v + b) mod (2^31 - 1)) mod g``, ``seed = a 2^32 +
    b`` and ``g = round(e^eps) + 1`` (docs/mechanisms-reference.md#oue-and-olh)."""
    seeds, buckets = olh_unpack(out)
    return [f"{s}:{y}" for s, y in zip(seeds.tolist(), buckets.tolist())]


def _olh_estimate(shape: Shape, outputs: np.ndarray, charged, params: dict) -> dict:
    seeds, buckets = olh_unpack(outputs)
    return _frequency_estimate(shape, olh.olh_estimate(seeds, buckets, charged, shape.m), olh.olh_variance, charged,
                               outputs.shape[0])


OLH = Mechanism(
    code="olh", number=11, role=ONESHOT, kinds=(CATEGORICAL,), guarantee=LDP,
    title="Optimal local hashing (OLH, one-shot)", short="OLH",
    owner_name="Randomized answer hashed into a few buckets (OLH)",
    owner_explained="Each sale hashes your answer into one of a few buckets with a hash chosen at random for that "
                    "sale, then randomizes the bucket, so your answer is protected at the sale's ε. It suits "
                    "questions with many possible answers.",
    forms=(Form(("epsilon",), "the olh mechanism takes only epsilon"),),
    width=lambda shape: OLH_WIDTH, format_outputs=_olh_format, honour=_olh_honour, draw=_olh_draw,
    predict=_frequency_predict(olh.olh_variance), estimate=_olh_estimate, likelihood=_olh_likelihood)


# ============================================================================================ the table

#: Every mechanism, in audit-number order.
RECORDS: tuple[Mechanism, ...] = (GRADUAL_RR, URR, URAP, RR3, LPP, PRIVATE_SAMPLE, WARNER, SIMMONS, CHRISTOFIDES,
                                  IMPROVED_CHRISTOFIDES, OUE, OLH)
REGISTRY: dict[str, Mechanism] = {r.code: r for r in RECORDS}
assert [r.number for r in RECORDS] == list(range(len(RECORDS))), "audit numbers are the records' positions"

#: Mechanisms an attribute may have (chains and one-shot), and the surveys a buyer may commission.
ATTRIBUTE_MECHANISMS = tuple(r for r in RECORDS if r.role != SURVEY)
SURVEY_CODES = tuple(r.code for r in RECORDS if r.role == SURVEY)
ONESHOT_CODES = tuple(r.code for r in RECORDS if r.role == ONESHOT)
SENSITIVE_CODES = tuple(r.code for r in RECORDS if r.uses_sensitive)


def get(code: str) -> Mechanism:
    """The record of ``code`` (``KeyError`` for an unknown one)."""
    return REGISTRY[code]
