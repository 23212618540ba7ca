"""What every one-shot mechanism's predictions and estimates share (docs/mechanisms.md#the-mechanism-registry).

:class:`Shape` is what a mechanism knows of an attribute (public facts only, never an owner's data);
:class:`PredictedError` is a quote's prediction, a function of (mechanism, parameters, n) only, so a quote
reveals nothing about the data.  The helpers turn estimates and standard errors into the rows the API returns.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import estimators

Z95 = 1.959963984540054

#: A grid of the 3-simplex (step 1/50): the populations a worst case is taken over.
SIMPLEX3 = np.array([(i, j, 50 - i - j) for i in range(51) for j in range(51 - i)], dtype=np.float64) / 50


@dataclass(frozen=True)
class Shape:
    """The public facts of an attribute a mechanism reads: its kind, the names of its domain (``labels``: the
    categories, the three states, the graph's items), a uRR/uRAP attribute's sensitive label indices and PUM
    tags, a graph's item count and a distribution attribute's prior."""

    kind: str
    labels: tuple[str, ...]
    sensitive: tuple[int, ...] = ()
    pum_tags: tuple[str, ...] = ()
    num_items: int | None = None
    prior: tuple[float, ...] = ()

    @property
    def m(self) -> int:
        return len(self.labels)

    @property
    def prior_array(self) -> np.ndarray:
        q = np.asarray(self.prior, dtype=np.float64)
        return q / q.sum()

    @property
    def extended_labels(self) -> list[str]:
        """uRR/uRAP outputs: the labels, then one bot per PUM tag (a value its owner tagged is released as it)."""
        return list(self.labels) + [f"⊥{tag}" for tag in self.pum_tags]

    @property
    def extended_sensitive(self) -> np.ndarray:
        k = len(self.labels)
        return np.concatenate([np.asarray(self.sensitive, dtype=np.int64),
                               np.arange(k, k + len(self.pum_tags), dtype=np.int64)])


@dataclass
class PredictedError:
    """Standard errors a purchase would give, from (mechanism, epsilon, n) only.

    ``target`` is what is estimated: ``frequency`` (each category's share),
    ``mean`` (binary: the share of the second label; numeric: the mean), or
    ``bit_frequency`` (each Bloom bit's share, strings); for one-shot mechanisms
    and surveys also ``mean_distribution``, ``proportion`` and
    ``item_degree_weight`` (LPP: one row each for an item's degree and weight).
    """

    target: str
    standard_error: float
    worst_case_standard_error: float | None
    per_category: list[dict] = field(default_factory=list)
    expected_l2: float | None = None  # uRR/uRAP: the exact expected squared l2 loss (uniform population)
    variance: float | None = None  # surveys: the estimate's variance (at a proportion of 1/2)
    covariance: list[list[float]] | None = None  # RR3: the estimator's covariance (uniform population)


def per_label(labels, se, worst) -> list[dict]:
    """A prediction's rows: each label's standard error and worst-case standard error (``None``: none)."""
    return [{"label": label, "standard_error": float(se[i]),
             "worst_case_standard_error": None if worst is None else float(worst[i])}
            for i, label in enumerate(labels)]


def frequencies(labels, p_hat, se, ml) -> list[dict]:
    """An estimate's rows: each label's unbiased estimate, its standard error and 95% interval, its projection
    on the simplex (Norm-Sub) and the maximum-likelihood estimate (``ml=None``: not computed, e.g. OUE and OLH's
    IBU, which is computed when asked for: docs/mechanisms-reference.md#consistent-estimates)."""
    projected = estimators.project_simplex(p_hat)
    return [{"label": label, "estimate": float(p_hat[i]), "standard_error": float(se[i]),
             "ci95_low": float(p_hat[i] - Z95 * se[i]), "ci95_high": float(p_hat[i] + Z95 * se[i]),
             "projected": float(projected[i]), "maximum_likelihood": None if ml is None else float(ml[i])}
            for i, label in enumerate(labels)]


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


def empty_result(n: int, eps: float, code: str, guarantee: str) -> dict:
    """The estimate every one-shot purchase starts from (shaped like a chain purchase's)."""
    return {"n": n, "epsilons": [{"epsilon": eps, "count": n}], "frequencies": [], "mean": None, "bits": [],
            "graph": None, "mechanism": code, "guarantee": guarantee}
