"""A purchase's estimate by the method the buyer asks for (docs/mechanisms-reference.md#consistent-estimates).

``unbiased`` (the default) is the estimate as computed from the outputs, with its standard errors and 95%
intervals.  ``norm_sub`` and ``ibu`` replace each frequency's ``estimate`` by a *consistent* one (non-negative,
summing to one): Norm-Sub of the unbiased estimates, or the maximum-likelihood estimate under the randomizer's
exact law (the iterative Bayesian update, ``mechanisms.consistency``).  Both are biased, so their rows carry no
standard error or interval (``null``); the unbiased columns ``projected`` and ``maximum_likelihood`` stay as they
are.  A binary or numeric attribute's mean follows its consistent frequencies; a string's Bloom bits are each
one binary frequency (Norm-Sub clips it to [0, 1]; IBU is its binary maximum likelihood).

Which purchases have which: chains (categorical, binary, numeric, strings, at one epsilon or many), OUE, OLH,
uRR, uRAP and RR3 have all three; LPP's graph estimates, private samples and surveys only ``unbiased``.
"""
from __future__ import annotations

import numpy as np

from ldpmarket.problems import EstimateMethodUnavailable
from market.models import Attribute
from mechanisms import consistency
from mechanisms.exactness import krr_cells

METHODS = ("unbiased", "norm_sub", "ibu")
CONSISTENT = ("norm_sub", "ibu")


def _biased_rows(rows: list[dict], values: np.ndarray) -> list[dict]:
    return [row | {"estimate": float(v), "standard_error": None, "ci95_low": None, "ci95_high": None}
            for row, v in zip(rows, values)]


def _biased_interval(value: float) -> dict:
    return {"estimate": value, "standard_error": None, "ci95_low": None, "ci95_high": None}


def _krr_groups(y: np.ndarray, eps, m: int) -> list[tuple[float, float, np.ndarray]]:
    """``(p, q, counts)`` of k-RR outputs per distinct epsilon, ``p`` and ``q`` from the sampler's integer cells
    (the realised law)."""
    eps_of = np.broadcast_to(np.asarray(eps, dtype=np.float64), y.shape)
    groups = []
    for e in np.unique(eps_of):
        cells = krr_cells(float(e), m)
        counts = np.bincount(y[eps_of == e], minlength=m).astype(np.float64)
        groups.append((cells.keep / cells.total, cells.flip / cells.total, counts))
    return groups


def _ibu_info(result: consistency.IbuResult) -> dict:
    return {"iterations": result.iterations, "converged": result.converged}


def _unavailable(what: str, method: str):
    return EstimateMethodUnavailable(
        f"The {method} estimate is not offered for {what}: only the unbiased one (method=unbiased). Consistent "
        "estimates exist for frequencies (docs/mechanisms-reference.md#consistent-estimates).")


def chain_estimate(attribute: Attribute, outputs: np.ndarray, eps, result: dict, *, method: str) -> dict:
    """``result`` (``selectors.estimate_outputs`` of chain outputs at ``eps``, one or one per output) by
    ``method``."""
    result = dict(result, method=method, iterations=None, converged=None)
    if method == "unbiased":
        return result
    outputs = np.asarray(outputs, dtype=np.int64).reshape(-1, attribute.width)
    kind = attribute.kind
    if kind == Attribute.Kind.STRING:
        bit_eps = np.asarray(eps, dtype=np.float64) / attribute.draw_divisor
        bits, steps, converged = [], 0, True
        for row, j in zip(result["bits"], range(attribute.width)):
            if method == "norm_sub":
                value = float(np.clip(row["estimate"], 0.0, 1.0))
            else:
                L, w = consistency.krr_likelihood(_krr_groups(outputs[:, j], bit_eps, 2))
                fit = consistency.ibu(L, w)
                value, steps, converged = float(fit.frequencies[1]), max(steps, fit.iterations), \
                    converged and fit.converged
            bits.append(row | _biased_interval(value))
        result["bits"] = bits
        if method == "ibu":
            result.update(iterations=steps, converged=converged)
        return result
    m = attribute.domain_size
    unbiased = np.array([row["estimate"] for row in result["frequencies"]])
    if method == "norm_sub":
        f = consistency.norm_sub(unbiased)
    else:
        L, w = consistency.krr_likelihood(_krr_groups(outputs[:, 0], eps, m))
        fit = consistency.ibu(L, w)
        f = fit.frequencies
        result.update(_ibu_info(fit))
    result["frequencies"] = _biased_rows(result["frequencies"], f)
    if kind == Attribute.Kind.BINARY:
        result["mean"] = _biased_interval(float(f[1]))
    elif kind == Attribute.Kind.NUMERIC:
        lo, hi = float(attribute.low), float(attribute.high)
        result["mean"] = _biased_interval(lo + (hi - lo) * float(f[1]))
    return result


def oneshot_estimate(record, shape, outputs: np.ndarray, charged, params: dict, result: dict, *,
                     method: str) -> dict:
    """``result`` (a one-shot mechanism's estimate) by ``method``: Norm-Sub of its unbiased frequencies, or IBU
    (the record's ``likelihood`` hook where its maximum-likelihood column is empty: OUE and OLH; the EM column
    its estimate already computes otherwise: uRR, uRAP, RR3)."""
    result = dict(result, method=method, iterations=None, converged=None)
    if method == "unbiased":
        return result
    rows = result.get("frequencies") or []
    if not rows or result.get("graph") is not None:
        raise _unavailable(f"{record.short} purchases", method)
    unbiased = np.array([row["estimate"] for row in rows])
    if method == "norm_sub":
        f = consistency.norm_sub(unbiased)
    elif rows[0].get("maximum_likelihood") is not None:
        f = np.array([row["maximum_likelihood"] for row in rows])
    elif record.likelihood is not None:
        L, w = record.likelihood(shape, outputs, charged, params)
        fit = consistency.ibu(L, w)
        f = fit.frequencies
        result.update(_ibu_info(fit))
        rows = [row | {"maximum_likelihood": float(v)} for row, v in zip(rows, f)]
    else:  # pragma: no cover - every frequency record has one or the other
        raise _unavailable(f"{record.short} purchases", method)
    result["frequencies"] = _biased_rows(rows, f)
    return result
