"""Estimators for k-RR outputs, docs/mechanisms-reference.md#estimation.

With ``E = e^eps``, ``p = E/(E + m - 1)`` (keep) and ``q = 1/(E + m - 1)``
(each other value), every formula is evaluated in the stable forms of
``rr.py``: with ``x = e^-eps``, ``A = -expm1(-eps)``, ``B = 1 + (m - 1) x``,

    p = 1/B,  q = x/B,  p - q = A/B,  1 - p = (m - 1) x / B,  1 - q = (1 + (m - 2) x) / B.

**Frequencies** (Eq. 6/7).  At one eps, ``f_hat(v) = (count(v)/n - q)/(p - q)``,
unbiased.  With per-output epsilons (section 4, "Heterogeneous epsilons")
each output is debiased on its own, ``z_i = (1[y_i = v] - q_i)/(p_i - q_i)``,
and ``f_hat = sum_i w_i z_i`` with ``w_i ∝ (p_i - q_i)^2``, ``sum w_i = 1``.
Outputs sharing an epsilon are grouped: ``f_hat`` is the average of the
per-group estimates weighted by ``n_g (p_g - q_g)^2``; cost O(n + U m) for U
distinct epsilons.  eps = 0 carries no information and is rejected.

**Variance** (Appendix G), two sampling models for true frequency ``f``:

* iid (:func:`frequency_variance`): each value is drawn independently with
  ``Pr(x = v) = f``; an output equals v w.p. ``t = f p + (1 - f) q``, so
  ``Var = t(1 - t) / (n (p - q)^2)`` (per output: ``sum w_i^2 t_i(1 - t_i)/(p_i - q_i)^2``).
  For m = 2 and f in {0, 1} this is Eq. (67), ``E / (n (E - 1)^2)``.
* fixed population (:func:`frequency_variance_fixed`): exactly ``f n`` values
  equal v; only the randomized response is random:
  ``Var = [f p(1 - p) + (1 - f) q(1 - q)] / (n (p - q)^2)``.

They differ by the sampling variance of the population itself:
``t(1 - t) = f p(1 - p) + (1 - f) q(1 - q) + f(1 - f)(p - q)^2``, i.e.
``Var_iid = Var_fixed + f(1 - f)/n``.  They agree at f in {0, 1}.

**Post-processing** (section 4, offered alongside the unbiased estimate):
Euclidean projection onto the simplex, and the maximum-likelihood estimate (the fixed
point of EM, computed from its KKT conditions: see :func:`em_frequencies`).

**Mean** (section 5, Eq. 70): ``mean_hat = l + (h - l)((E + 1) lambda_h - 1)/(E - 1)``,
which is ``l + (h - l) f_hat(high)`` for the binary (m = 2) estimator above.
"""
from __future__ import annotations

import math
import numbers
from statistics import NormalDist

import numpy as np

from ._validation import check_eps, check_eps_array, check_m, check_values
from .numeric import check_bounds

# ---------------------------------------------------------------------------------------------- validation

def _check_estimation_eps(eps, n_outputs: int | None):
    """Scalar eps -> float; per-output eps -> 1-D array of length ``n_outputs`` (when given). All > 0."""
    if isinstance(eps, np.ndarray) and eps.ndim == 0:
        eps = eps.item()
    if np.ndim(eps) == 0:
        return check_eps(eps, positive=True)
    arr = check_eps_array(eps, positive=True)
    if arr.ndim != 1:
        raise ValueError(f"eps must be a number or a one-dimensional per-output array, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError("eps must not be an empty array")
    if n_outputs is not None and arr.shape[0] != n_outputs:
        raise ValueError(f"outputs and eps must have the same shape, got ({n_outputs},) and {arr.shape}")
    return arr


def _check_outputs(outputs, m: int, name: str = "outputs") -> np.ndarray:
    y = check_values(outputs, m, name)
    if y.size == 0:
        raise ValueError(f"{name} must not be empty: there is nothing to estimate from")
    return y


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"n (the number of outputs) must be a positive integer, got {n!r}")
    return int(n)


def _check_frequencies(frequencies, m: int, name: str = "frequencies") -> np.ndarray:
    try:
        f = np.asarray(frequencies, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numbers, got {frequencies!r}") from None
    if f.shape != (m,):
        raise ValueError(f"{name} must have shape ({m},) for m = {m}, got {f.shape}")
    if not np.all(np.isfinite(f)):
        raise ValueError(f"{name} must be finite numbers, found {f[~np.isfinite(f)][0]}")
    return f


# --------------------------------------------------------------------------------------------- k-RR terms

def _terms(eps_u: np.ndarray, m: int):
    """``(x, A, B)`` of the module docstring for an array of epsilons."""
    x = np.exp(-eps_u)
    return x, -np.expm1(-eps_u), 1.0 + (m - 1) * x


def _groups(y: np.ndarray | None, eps, m: int, n: int | None = None):
    """Distinct epsilons ``eps_u`` (U,) and per-group output counts (U, m) or group sizes (U,)."""
    if isinstance(eps, float):
        eps_u = np.array([eps])
        if y is None:
            return eps_u, np.array([n])
        return eps_u, np.bincount(y, minlength=m)[None, :]
    eps_u, inv = np.unique(eps, return_inverse=True)
    if y is None:
        return eps_u, np.bincount(inv, minlength=eps_u.size)
    return eps_u, np.bincount(inv * m + y, minlength=eps_u.size * m).reshape(eps_u.size, m)


def _group_weights(eps_u: np.ndarray, n_g: np.ndarray, m: int) -> np.ndarray:
    """``W_g ∝ n_g (p_g - q_g)^2``, normalised; computed relative to the largest p - q (no underflow)."""
    _, A, B = _terms(eps_u, m)
    d = A / B
    w = n_g * (d / d.max()) ** 2
    return w / w.sum()


# ------------------------------------------------------------------------------------------- frequencies

def frequencies(outputs, eps, m) -> np.ndarray:
    """Unbiased frequency of every value 0..m-1 from k-RR outputs (section 4; scalar or per-output eps).

    Each group of outputs sharing an epsilon gives ``f_g = (c_g/n_g - q_g)/(p_g - q_g)``
    ``= (B c_g/n_g - x)/A``; these are averaged with weights ``∝ n_g (p_g - q_g)^2``,
    which equals ``sum_i w_i z_i`` with ``w_i ∝ (p_i - q_i)^2``.  Entries may be
    negative or exceed 1; they always sum to 1.
    """
    m = check_m(m)
    y = _check_outputs(outputs, m)
    eps = _check_estimation_eps(eps, y.shape[0])
    eps_u, counts = _groups(y, eps, m)
    n_g = counts.sum(axis=1)
    W = _group_weights(eps_u, n_g, m)
    keep = W > 0  # groups whose weight underflowed contribute exactly nothing
    x, A, B = _terms(eps_u[keep], m)
    f_g = (B[:, None] * (counts[keep] / n_g[keep, None]) - x[:, None]) / A[:, None]
    return W[keep] @ f_g


def _variance(f, eps, m: int, n, fixed: bool) -> np.ndarray:
    """Shared body of the two variance functions: ``sum_g W_g^2 V_g``, ``V_g = num / (n_g A_g^2)``."""
    f = np.clip(f, 0.0, 1.0)[None, :]
    if isinstance(eps, float):
        eps_u, n_g = _groups(None, eps, m, _check_n(n))
        W = np.ones(1)
    else:
        if n is not None and _check_n(n) != eps.shape[0]:
            raise ValueError(
                f"n must equal the number of per-output epsilons, got n = {n} and {eps.shape[0]} epsilons")
        eps_u, n_g = _groups(None, eps, m)
        W = _group_weights(eps_u, n_g, m)
    keep = W > 0
    x, A, _ = _terms(eps_u[keep], m)
    x, A = x[:, None], A[:, None]
    if fixed:  # B^2 [f p(1 - p) + (1 - f) q(1 - q)]
        num = f * (m - 1) * x + (1 - f) * x * (1 + (m - 2) * x)
    else:  # B^2 t(1 - t), with B t = f + (1 - f) x and B (1 - t) = f (m - 1) x + (1 - f)(1 + (m - 2) x)
        num = (f + (1 - f) * x) * (f * (m - 1) * x + (1 - f) * (1 + (m - 2) * x))
    V = (num / A) / A / n_g[keep, None]
    return (W[keep, None] ** 2 * V).sum(axis=0)


def frequency_variance(frequencies, eps, m, n=None) -> np.ndarray:
    """Variance of :func:`frequencies` when each value is drawn iid with the given frequencies.

    Scalar eps: ``t(1 - t) / (n (p - q)^2)``, ``t = f p + (1 - f) q`` (Appendix G).
    Per-output eps array (``n`` defaults to its length):
    ``sum_i w_i^2 t_i(1 - t_i)/(p_i - q_i)^2`` with the weights of :func:`frequencies`.
    ``frequencies`` are clipped to [0, 1], so a plug-in estimate may be passed.
    """
    m = check_m(m)
    f = _check_frequencies(frequencies, m)
    eps = _check_estimation_eps(eps, None)
    if isinstance(eps, float) and n is None:
        raise ValueError("n (the number of outputs) is required when eps is a single number")
    return _variance(f, eps, m, n, fixed=False)


def frequency_variance_fixed(true_counts_or_frequencies, eps, m, n) -> np.ndarray:
    """Variance of :func:`frequencies` for a fixed population: exactly ``f n`` of the n values equal v.

    ``[f p(1 - p) + (1 - f) q(1 - q)] / (n (p - q)^2)``, smaller than the iid
    variance by ``f(1 - f)/n`` (module docstring).  Integer input is read as
    counts (non-negative, summing to ``n``); float input as frequencies
    (clipped to [0, 1]).  Scalar eps only: with per-output epsilons the
    variance depends on which individuals hold v, not only on how many.
    """
    m = check_m(m)
    n = _check_n(n)
    arr = np.asarray(true_counts_or_frequencies)
    if np.issubdtype(arr.dtype, np.integer):
        if arr.shape != (m,):
            raise ValueError(f"true_counts must have shape ({m},) for m = {m}, got {arr.shape}")
        if (arr < 0).any() or int(arr.sum()) != n:
            raise ValueError(
                f"integer input is read as true counts: they must be >= 0 and sum to n = {n}, got sum "
                f"{int(arr.sum())} (pass floats for frequencies)"
            )
        f = arr / n
    else:
        f = _check_frequencies(arr, m, "true_counts_or_frequencies")
    if np.ndim(eps) != 0:
        raise ValueError("frequency_variance_fixed needs a single eps: with per-output epsilons the variance "
                         "depends on which individuals hold each value")
    eps = _check_estimation_eps(eps, None)
    return _variance(f, eps, m, n, fixed=True)


def confidence_intervals(outputs, eps, m, level=0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(f_hat, lower, upper)``: ``f_hat ± z sqrt(Var)``, normal approximation (section 4).

    ``Var`` is :func:`frequency_variance` at the plug-in ``f_hat`` clipped to
    [0, 1]; ``z = Phi^-1((1 + level)/2)``.  The bounds are not clipped.
    """
    if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must be a number strictly between 0 and 1, got {level!r}")
    f_hat = frequencies(outputs, eps, m)
    n = int(np.asarray(outputs).shape[0])
    half = NormalDist().inv_cdf((1.0 + float(level)) / 2.0) * np.sqrt(frequency_variance(f_hat, eps, m, n))
    return f_hat, f_hat - half, f_hat + half


# ------------------------------------------------------------------------------------- post-processing

def project_simplex(v) -> np.ndarray:
    """Euclidean projection of ``v`` onto ``{w >= 0, sum w = 1}`` (Duchi et al. 2008, sort-based).

    With ``u`` sorted decreasingly, ``rho = max{j : u_j > (sum_{i<=j} u_i - 1)/j}``,
    ``theta = (sum_{i<=rho} u_i - 1)/rho`` and ``w = max(v - theta, 0)``.
    """
    try:
        v = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"v must be numbers, got {v!r}") from None
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"v must be a non-empty one-dimensional array, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError("v must be finite numbers")
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    j = np.arange(1, v.size + 1)
    rho = np.nonzero(u * j > css)[0][-1]  # j = 1 always qualifies: u_1 > u_1 - 1
    theta = css[rho] / (rho + 1)
    return np.maximum(v - theta, 0.0)


#: Smallest ``k = 1/(e^eps - 1)`` used by :func:`em_frequencies`: epsilons above ~460 are treated as 460,
#: a change in any likelihood of ``e^-460 ~ 1e-200``, so that no ratio over- or underflows.
_K_MIN = 1e-200


def em_frequencies(outputs, eps, m, max_iter=1000, tol=1e-10) -> np.ndarray:
    """Maximum-likelihood frequencies on the simplex (the EM fixed point; scalar or per-output eps).

    With ``c_gy`` outputs equal to y at eps_g and ``k_g = 1/(e^eps_g - 1)``, an
    output's likelihood is ``∝ f_y + k_g``, so the log-likelihood is separable,
    ``L(f) = sum_y phi_y(f_y)``, ``phi_y(s) = sum_g c_gy log(s + k_g)``, and concave.
    EM (``f_x <- f_x dL/df_x / n`` for the homogeneous form of L) converges to
    its maximum but only sublinearly when the maximum lies on the boundary of
    the simplex and eps is small (thousands of iterations, typical of k-RR
    with empty categories), so the fixed point is computed from its KKT
    conditions instead:

        f_y > 0:  phi_y'(f_y) = lambda,    f_y = 0:  phi_y'(0) <= lambda,    sum_y f_y = 1.

    With ``mu = 1/lambda`` and ``H_y = 1/phi_y'`` (a weighted harmonic mean of
    ``s + k_g``, hence concave increasing), ``f_y(mu)`` solves ``H_y(f_y) = mu``
    (Newton from 0, monotone; exact in one step for a single eps) and
    ``S(mu) = sum_y f_y(mu)`` is convex increasing, so Newton on ``S(mu) = 1``
    from the right is monotone too (safeguarded by bisection).  Each evaluation
    is O(U m); ``max_iter`` bounds both Newton loops, ``tol`` is the accepted
    ``|S - 1|`` before the final normalisation.
    """
    m = check_m(m)
    y = _check_outputs(outputs, m)
    eps = _check_estimation_eps(eps, y.shape[0])
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not (math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive finite number, got {tol!r}")
    eps_u, counts = _groups(y, eps, m)
    seen = counts.sum(axis=0) > 0  # values never output get f = 0 (phi_y' = 0 < lambda)
    c = counts[:, seen].astype(np.float64)
    k = np.maximum(1.0 / np.expm1(eps_u), _K_MIN)[:, None]
    k_min = np.where(c > 0, k, np.inf).min(axis=0)  # per value, so that rho below is 1 somewhere

    def harmonic(s):
        """``H_y(s)`` and ``H_y'(s)``, with ``rho_g = (s + k_min)/(s + k_g) <= 1`` (no overflow)."""
        rho = (s + k_min) / (s + k)
        c_rho = (c * rho).sum(axis=0)
        return (s + k_min) / c_rho, (c * rho * rho).sum(axis=0) / (c_rho * c_rho)

    h0, _ = harmonic(np.zeros(c.shape[1]))

    def solve(mu):
        """``f_y(mu)`` for every value and ``dS/dmu``."""
        s = np.zeros(c.shape[1])
        active = h0 < mu
        for _ in range(max_iter):
            h, dh = harmonic(s)
            step = np.where(active, np.maximum(mu - h, 0.0) / dh, 0.0)
            s += step
            if np.all(step <= 1e-15 * s):
                break
        _, dh = harmonic(s)
        return s, float((1.0 / dh[active]).sum())

    mu_lo, mu_hi = float(h0.min()), float(harmonic(np.ones(c.shape[1]))[0].min())  # S = 0 and S >= 1
    mu = mu_hi
    for _ in range(max_iter):
        s, slope = solve(mu)
        total = s.sum()
        if abs(total - 1.0) <= tol:
            break
        if total > 1.0:
            mu_hi = mu
        else:
            mu_lo = mu
        new = mu - (total - 1.0) / slope if slope > 0 else mu_lo
        if not mu_lo < new < mu_hi:
            new = 0.5 * (mu_lo + mu_hi)
        if new == mu:
            break
        mu = new
    f = np.zeros(m)
    f[seen] = s / total
    return f


# ------------------------------------------------------------------------------------------------- mean

def mean(outputs_are_high, eps, low, high) -> float:
    """Unbiased mean of bounded numeric values from binary outputs of their discretized ``z`` (Eq. 70).

    Scalar eps: ``l + (h - l)((E + 1) lambda_h - 1)/(E - 1)``, ``lambda_h`` the
    share of outputs equal to ``h``; per-output eps: ``l + (h - l) f_hat(high)``
    of the binary :func:`frequencies` (identical for a scalar eps).
    """
    low, high = check_bounds(low, high)
    z = _check_outputs(outputs_are_high, 2, "outputs_are_high")
    return float(low + (high - low) * frequencies(z, eps, 2)[1])


def mean_variance(true_mean, eps, low, high, n=None) -> float:
    """Variance of :func:`mean` when the values are drawn iid with mean ``true_mean``.

    Then each stored ``z`` is high independently w.p. ``f = (mean - l)/(h - l)``
    and the variance is ``(h - l)^2`` times the binary :func:`frequency_variance`
    at ``f`` (clipped to [0, 1]).  For a fixed population of values, each
    discretized afresh, it is an upper bound: ``sum_i t_i(1 - t_i) <= n t(1 - t)``
    by concavity (equality when all values are equal).
    """
    low, high = check_bounds(low, high)
    if isinstance(true_mean, bool) or not isinstance(true_mean, numbers.Real) or not math.isfinite(true_mean):
        raise ValueError(f"true_mean must be a finite real number, got {true_mean!r}")
    f = (float(true_mean) - low) / (high - low)
    return float((high - low) ** 2 * frequency_variance(np.array([1.0 - f, f]), eps, 2, n)[1])
