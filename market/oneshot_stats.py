"""Predicted errors (quotes) and estimates (completed purchases) of the one-shot mechanisms and surveys.

Pure reads over ``mechanisms`` (docs/mechanisms-reference.md#utility-optimized-ldp-urr-urap-pum, docs/mechanisms-reference.md#rr3-and-the-graph-protocol-lpp, docs/mechanisms-reference.md#private-sampling-with-a-public-prior,
docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides); nothing here touches the database.  A prediction is a function of
(mechanism, parameters, number of values) only, so a quote reveals nothing
about the data.

* uRR / uRAP (with PUM, over the extended domain: the labels, then one bot
  ``⊥tag`` per tag): each coordinate's estimate is ``(m_hat - a)/b`` with
  ``m`` the share of outputs equal to (uRR) or with the bit of (uRAP) that
  value, so ``Var = m(1-m)/(n b^2)``; the quote adds the exact expected squared
  l2 loss (``mechanisms.uldp.expected_l2``, Props. 15/18);
* RR3, the private sampler: matrix mechanisms, ``pi_hat = (counts/n) inv(P)``
  with covariance ``(C.T diag(t) C - outer(pi, pi))/n`` (``mechanisms.rr3``);
  the private sampler's target is the owners' average distribution;
* LPP‡: per item degree and weight (``mechanisms.rr3.graph_estimates``); the quote gives their
  standard errors per item (``mechanisms.rr3.lpp_item_covariance``: the owners who sample an item are a
  random sample of all of them);
* surveys: the closed-form census variances of ``mechanisms.surveys``.
"""
from __future__ import annotations

import math

import numpy as np

from ldpmarket.problems import TooFewRespondents
from mechanisms import estimators, private_sampling, rr3, surveys, uldp

from . import domain
from .domain import PredictedError
from .models import Attribute, Purchase
from .oneshot_specs import M, Spec, ic_deck, rr3_matrix, spec_of

Z95 = 1.959963984540054


# ----------------------------------------------------------------------------------------------- domains

def extended_labels(attribute: Attribute) -> list[str]:
    """uRR/uRAP outputs: the labels, then one bot per PUM tag (a value its owner tagged is released as it)."""
    return list(attribute.labels) + [f"⊥{tag}" for tag in attribute.pum_tags]


def extended_sensitive(attribute: Attribute) -> np.ndarray:
    k = len(attribute.labels)
    return np.concatenate([domain.sensitive_indices(attribute),
                           np.arange(k, k + len(attribute.pum_tags), dtype=np.int64)])


def output_labels(attribute: Attribute) -> list[str] | None:
    """Names of a one-shot attribute's single outputs (uRR, RR3, private sample); ``None`` for vectors."""
    if attribute.mechanism == Attribute.Mechanism.URR:
        return extended_labels(attribute)
    if attribute.mechanism in (Attribute.Mechanism.RR3, Attribute.Mechanism.PRIVATE_SAMPLE):
        return domain.labels_of(attribute)
    return None


def urap_terms(eps: float, theta: float | None) -> tuple[float, float, float]:
    """``(theta, d1, d2)`` of uRAP (docs/mechanisms-reference.md#utility-optimized-ldp-urr-urap-pum Def. 4), overflow-free: ``theta = h/(h+1)`` by default,
    ``d1 = theta/((1-theta) e + theta)``, ``d2 = ((1-theta) e + theta)/e``."""
    if theta is None:
        theta, t = 1.0 / (1.0 + math.exp(-eps / 2.0)), 1.0 / (1.0 + math.exp(eps / 2.0))
    else:
        t = 1.0 - theta
    z = math.exp(-eps)
    d2 = t + theta * z
    return theta, theta * z / d2, d2


def _linear_terms(attribute: Attribute, spec: Spec) -> tuple[np.ndarray, np.ndarray]:
    """Per extended coordinate ``(a, b)``: the output share is ``m = a + b p``, the estimate ``(m_hat - a)/b``."""
    K = len(attribute.labels) + len(attribute.pum_tags)
    S = extended_sensitive(attribute)
    mask = np.zeros(K, dtype=bool)
    mask[S] = True
    eps = float(spec.charged)
    if spec.mechanism == M.URR:
        Q = uldp.urr_matrix(K, S, eps)
        y = np.arange(K)
        a = Q[(y + 1) % K, y]  # every other input gives the same mass (c2 on S, 0 on N)
        return a, Q[y, y] - a
    theta, d1, d2 = urap_terms(eps, spec.value("theta") if "theta" in spec.parameters else None)
    return np.where(mask, d1, 0.0), np.where(mask, theta - d1, 1.0 - d2)


def _theta(spec: Spec):
    return spec.value("theta") if "theta" in spec.parameters else None


# ------------------------------------------------------------------------------------------- predictions

def predicted(attribute: Attribute, spec: Spec, n: int) -> PredictedError | None:
    """The standard errors a request over ``n`` values would give (``None`` when n = 0 or no closed form)."""
    if n <= 0:
        return None
    if spec.is_survey:
        return _predicted_survey(spec, n)
    mech = spec.mechanism
    if mech in (M.URR, M.URAP):
        labels = extended_labels(attribute)
        a, b = _linear_terms(attribute, spec)
        k = len(attribute.labels)
        p = np.zeros(len(labels))
        p[:k] = 1.0 / k  # a population spread uniformly over the labels (nobody tagged)
        m = a + b * p
        se = np.sqrt(m * (1 - m) / (n * b * b))
        worst_m = np.clip(0.5, a, a + b)
        worst = float(np.sqrt(worst_m * (1 - worst_m) / (n * b * b)).max())
        l2 = uldp.expected_l2(p, extended_sensitive(attribute), float(spec.charged), n, mech, _theta(spec))
        per = [{"label": label, "standard_error": float(se[i]), "worst_case_standard_error": float(
            math.sqrt(worst_m[i] * (1 - worst_m[i]) / (n * b[i] * b[i])))} for i, label in enumerate(labels)]
        return PredictedError("frequency", float(se[0]), worst, per, expected_l2=float(l2))
    if mech == M.RR3:
        P = rr3_matrix(spec)
        labels = domain.labels_of(attribute)
        cov = rr3.estimator_covariance(np.full(3, 1.0 / 3), P, n)
        se = np.sqrt(np.diag(cov))
        # the worst case over every population: the per-state variance on a grid of the simplex (step 1/50)
        inv = np.linalg.inv(P)
        var = ((SIMPLEX3 @ P) @ (inv * inv) - SIMPLEX3 * SIMPLEX3) / n
        worst = np.sqrt(np.maximum(var, 0).max(axis=0))
        per = [{"label": label, "standard_error": float(se[i]), "worst_case_standard_error": float(worst[i])}
               for i, label in enumerate(labels)]
        return PredictedError("frequency", float(se[0]), float(worst.max()), per, covariance=cov.tolist())
    if mech == M.PRIVATE_SAMPLE:
        q = domain.prior_of(attribute)
        K = private_sampling.optimal_kernel(q, float(spec.charged))
        try:
            cov = rr3.estimator_covariance(q, K, n)
        except ValueError:  # a kernel too close to singular: no unbiased estimator to predict
            return None
        se = np.sqrt(np.maximum(np.diag(cov), 0))
        per = [{"label": label, "standard_error": float(se[i]), "worst_case_standard_error": None}
               for i, label in enumerate(domain.labels_of(attribute))]
        return PredictedError("mean_distribution", float(se.max()), None, per)
    if mech == M.LPP:
        return _predicted_lpp(attribute, spec, n)
    return None


#: A grid of the 3-simplex (step 1/50): the populations a worst case is taken over.
SIMPLEX3 = np.array([(i, j, 50 - i - j) for i in range(51) for j in range(51 - i)], dtype=np.float64) / 50


def _predicted_lpp(attribute: Attribute, spec: Spec, n: int) -> PredictedError:
    """Per item, the standard errors of its degree and weight (``mechanisms.rr3.lpp_item_covariance``).

    The typical case: every item has a third of the owners with no edge, a third at +1, a third at -1.
    The worst case drops the finite-population term (a covariance, so dropping it only adds variance,
    whatever the weights) and takes the largest ``E[1/N] A`` over the simplex grid: an upper bound for
    every population, fractional weights included.
    """
    eps1, eps2, items = spec.value("eps1"), spec.value("eps2"), attribute.num_items
    se = np.sqrt(np.diag(rr3.lpp_item_covariance(np.full(3, 1.0 / 3), n, items, eps1, eps2)))
    P = rr3.rr3_ddagger(1.0 / (1.0 + math.exp(-eps1)), 1.0 / (1.0 + math.exp(-eps2)))
    C = np.linalg.inv(P)
    t = SIMPLEX3 @ P
    worst = []
    for row in ((-1.0, 0.0, 0.0), (0.0, 1.0, -1.0)):  # degree = n (1 - pi_0), weight = n (pi_1 - pi_2)
        v = C @ np.array(row)
        var = t @ (v * v) - (SIMPLEX3 @ np.array(row)) ** 2
        worst.append(n * math.sqrt(rr3.inverse_sample_size(n, items) * max(float(var.max()), 0.0)))
    per = [{"label": "degree of an item", "standard_error": float(se[0]), "worst_case_standard_error": worst[0]},
           {"label": "weight of an item", "standard_error": float(se[1]), "worst_case_standard_error": worst[1]}]
    return PredictedError("item_degree_weight", float(se[0]), worst[0], per)


def survey_variance(spec: Spec, n: int, pi: float) -> float:
    eps = float(spec.epsilon)
    if spec.mechanism == M.WARNER:
        return surveys.warner_variance(surveys.warner_probability(eps), n)
    if spec.mechanism == M.SIMMONS:
        pi_b = spec.value("pi_b")
        return surveys.simmons_variance(surveys.simmons_probability(eps, pi_b), pi_b, pi, n)
    if spec.mechanism == M.CHRISTOFIDES:
        return surveys.christofides_variance(surveys.christofides_optimal_probs(eps, spec.value("p2")), n)
    return surveys.improved_christofides_variance(ic_deck(n, spec.epsilon, spec.value("p2")), pi)


def _predicted_survey(spec: Spec, n: int) -> PredictedError | None:
    try:
        half = survey_variance(spec, n, 0.5)
        ends = [survey_variance(spec, n, pi) for pi in (0.0, 1.0)]
    except (TooFewRespondents, ValueError):
        return None
    worst = max([half, *ends])
    return PredictedError("proportion", math.sqrt(half), math.sqrt(worst), [], variance=half)


# --------------------------------------------------------------------------------------------- estimates

def _interval(value: float, se: float) -> dict:
    return {"estimate": value, "standard_error": se, "ci95_low": value - Z95 * se, "ci95_high": value + Z95 * se}


def em_matrix(counts: np.ndarray, P: np.ndarray, *, tol: float = 1e-10, max_iter: int = 5000) -> np.ndarray:
    """Maximum likelihood of the input distribution from output counts of a matrix mechanism, on the simplex
    (EM: ``p <- p * (P @ (c / (p @ P)))``, which never decreases the likelihood)."""
    c = counts / counts.sum()
    p = np.full(P.shape[0], 1.0 / P.shape[0])
    for _ in range(max_iter):
        t = p @ P
        ratio = np.divide(c, t, out=np.zeros_like(c), where=t > 0)
        new = p * (P @ ratio)
        new /= new.sum()
        if np.max(np.abs(new - p)) <= tol:
            return new
        p = new
    return p


def _frequencies(labels, p_hat, se, ml) -> list[dict]:
    projected = estimators.project_simplex(p_hat)
    return [{"label": label, "estimate": float(p_hat[i]), "standard_error": float(se[i]),
             "ci95_low": float(p_hat[i] - Z95 * se[i]), "ci95_high": float(p_hat[i] + Z95 * se[i]),
             "projected": float(projected[i]), "maximum_likelihood": float(ml[i])} for i, label in enumerate(labels)]


def estimate(purchase: Purchase, outputs: np.ndarray) -> dict:
    """Estimates from a completed one-shot purchase's outputs ((n, width) ints), shaped like ``selectors``'."""
    attribute = purchase.attribute
    spec = spec_of(purchase)
    eps = float(purchase.charged_epsilon)
    n = int(outputs.shape[0])
    result = {"n": n, "epsilons": [{"epsilon": eps, "count": n}], "frequencies": [], "mean": None, "bits": [],
              "graph": None, "mechanism": purchase.mechanism, "guarantee": purchase.guarantee}
    mech = purchase.mechanism
    if mech in (M.URR, M.URAP):
        labels = extended_labels(attribute)
        S = extended_sensitive(attribute)
        a, b = _linear_terms(attribute, spec)
        if mech == M.URR:
            y = outputs[:, 0]
            m_hat = np.bincount(y, minlength=len(labels)) / n
            p_hat = uldp.urr_estimate(y, len(labels), S, eps)
            reports = y
        else:
            m_hat = outputs.mean(axis=0)
            p_hat = uldp.urap_estimate(outputs.astype(bool), S, eps, _theta(spec))
            reports = outputs.astype(bool)
        se = np.sqrt(np.maximum(m_hat * (1 - m_hat), 0) / (n * b * b))
        try:
            ml = uldp.em_estimate(reports, len(labels), S, eps, theta=_theta(spec) if mech == M.URAP else None,
                                  max_iter=2000).p
        except (ValueError, MemoryError):
            ml = estimators.project_simplex(p_hat)
        result["frequencies"] = _frequencies(labels, p_hat, se, ml)
        return result
    if mech in (M.RR3, M.PRIVATE_SAMPLE):
        labels = domain.labels_of(attribute)
        P = rr3_matrix(spec) if mech == M.RR3 else private_sampling.optimal_kernel(domain.prior_of(attribute), eps)
        counts = np.bincount(outputs[:, 0], minlength=len(labels)).astype(np.float64)
        try:
            p_hat = rr3.estimate(counts, P)
            cov = rr3.estimator_covariance(estimators.project_simplex(p_hat), P, n)
            se = np.sqrt(np.maximum(np.diag(cov), 0))
        except ValueError:  # a (nearly) singular kernel: no unbiased estimator; report the ML estimate only
            p_hat = em_matrix(counts, P)
            se = np.full(len(labels), np.nan)
        result["frequencies"] = _frequencies(labels, p_hat, np.nan_to_num(se, nan=0.0), em_matrix(counts, P))
        return result
    if mech == M.LPP:
        args = (outputs, n, attribute.num_items, spec.value("eps1"), spec.value("eps2"))
        g = rr3.graph_estimates(*args)
        se_degree, se_weight = rr3.lpp_standard_errors(*args)
        names = domain.labels_of(attribute)
        clean = lambda v: None if not math.isfinite(float(v)) else float(v)  # noqa: E731

        def item(j: int) -> dict:
            row = {"item": names[j], "samples": int(g.samples[j]), "mean_weight": clean(g.mean_weight[j])}
            for name, value, se in (("degree", g.degree[j], se_degree[j]), ("weight", g.weight[j], se_weight[j])):
                row |= {name: clean(value), f"{name}_standard_error": clean(se),
                        f"{name}_ci95_low": clean(value - Z95 * se), f"{name}_ci95_high": clean(value + Z95 * se)}
            return row

        result["graph"] = {
            "items": [item(j) for j in range(attribute.num_items)],
            "users": n, "total_degree": clean(g.total_degree), "total_weight": clean(g.total_weight),
            "vertex_pairs": int(g.vertex_pairs),
            "average_degree_over_vertex_pairs": clean(g.average_degree_over_vertex_pairs),
            "average_weight_over_vertex_pairs": clean(g.average_weight_over_vertex_pairs)}
        return result
    raise ValueError(f"no estimate for {mech}")  # pragma: no cover - surveys carry their result
