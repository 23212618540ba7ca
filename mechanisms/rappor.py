"""RAPPOR with gradual release instead of repeated noisy sampling,
docs/mechanisms-reference.md#rappor-with-gradual-release.

A client hashes its string into a Bloom filter of ``num_bits`` bits with
``num_hashes`` hash functions (the hash depends on the client's cohort), then
applies a *permanent* binary randomized response to every bit (paper Eq. 63):
keep the bit with probability ``alpha``, i.e. eps_alpha = ln(alpha/(1 - alpha)).

*Original RAPPOR* then reports, again and again, an *instantaneous* noisy
sample of the permanent bit (Eq. 64 with p = 1 - q = beta, eps_beta =
ln(beta/(1 - beta))).  After K samples one bit is (Eq. 65, Appendix E)

    eps_ns(K) = ln((E_a E_b^K + 1) / (E_a + E_b^K))        E_a = e^eps_alpha, E_b = e^eps_beta

which tends to eps_alpha; equivalently tanh(eps_ns/2) = tanh(eps_alpha/2) tanh(K eps_beta/2).  The
variance of the estimated share of users whose original bit is set (Eq. 68, Appendix F), for N users:

    beta(1-beta) / (N K (1-2beta)^2 (1-2alpha)^2) + alpha(1-alpha) / (N (1-2alpha)^2)

*Gradual release* instead relaxes each bit's randomized response along the same path eps_ns(1),
eps_ns(2), ... (Algorithm 1 with m = 2); the step-K output is an exact eps_ns(K) binary RR of the
original bit, with the optimal variance E/(N (E-1)^2), E = e^eps (Eq. 67).  Both variances hold for
any fixed population of bits.  At K = 1 the two coincide (one noisy sample of a permanent RR *is* a
binary RR at eps_ns(1)); for K >= 2 gradual release is strictly better (the paper's Fig. 1b).

Report-level privacy: changing the string changes at most 2 num_hashes bits of the Bloom filter, so a
report whose bits are each eps-LDP is ``2 num_hashes eps``-LDP (:func:`report_epsilon`).

Decoding: debias each bit's share per cohort, then fit the candidate strings' frequencies by
non-negative least squares against their Bloom patterns in every cohort (:func:`decode`).
"""
from __future__ import annotations

import hashlib
import math
import numbers
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import nnls
from scipy.special import expit, logit

from ._validation import check_eps, check_eps_array, check_increasing
from .relaxation import chain
from .rr import perturb

# ----------------------------------------------------------------------------------------------
# validation helpers local to RAPPOR
# ----------------------------------------------------------------------------------------------

def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def _check_int_array(values, name: str, minimum: int, maximum: int | None = None) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        floating = np.issubdtype(arr.dtype, np.floating)
        if not (floating and np.all(np.isfinite(arr)) and np.all(arr == np.floor(arr))):
            raise ValueError(f"{name} must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < minimum:
        raise ValueError(f"{name} must be >= {minimum}, found {arr.min()}")
    if maximum is not None and arr.size and arr.max() > maximum:
        raise ValueError(f"{name} must be <= {maximum}, found {arr.max()}")
    return arr


def _check_bits(bits, name: str = "bits") -> np.ndarray:
    """A 0/1 (or boolean) array of any non-empty rank, returned as bool."""
    arr = np.asarray(bits)
    if arr.ndim == 0:
        raise ValueError(f"{name} must be an array of bits, got a scalar")
    if arr.dtype == bool:
        return arr
    if arr.size and not np.isin(arr, (0, 1)).all():
        raise ValueError(f"{name} must contain only 0/1 or booleans")
    return arr.astype(bool)


def _check_keep(p, name: str) -> np.ndarray:
    """alpha or beta: a keep probability strictly between 1/2 and 1 (a finite, positive epsilon)."""
    try:
        arr = np.asarray(p, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in (0.5, 1), got {p!r}") from None
    if arr.size and not (np.all(arr > 0.5) and np.all(arr < 1.0)):
        raise ValueError(f"{name} must lie strictly between 0.5 and 1, got {p!r}")
    return arr


# ----------------------------------------------------------------------------------------------
# Bloom filter (client-side encoding)
# ----------------------------------------------------------------------------------------------

@lru_cache(maxsize=1 << 16)
def _positions(cohort: int, string: str, num_bits: int, num_hashes: int) -> tuple[int, ...]:
    """``num_hashes`` bit positions of ``string`` in ``cohort``: 8-byte words of SHAKE-256
    (a SHA-3 extendable-output hash) of ``f"{cohort}:{string}"``, each reduced mod ``num_bits``."""
    digest = hashlib.shake_256(f"{cohort}:{string}".encode("utf-8")).digest(8 * num_hashes)
    return tuple(int.from_bytes(digest[8 * j:8 * j + 8], "big") % num_bits for j in range(num_hashes))


def bloom_bits(strings, cohorts, num_bits, num_hashes) -> np.ndarray:
    """Bloom filters, an (n, num_bits) bool array: row i has bits ``_positions(cohorts[i], strings[i])`` set.

    ``cohorts`` is a non-negative integer per string (or one for all).  Hashing loops over the unique
    (cohort, string) pairs only; positions are cached across calls.  Two hashes may land on the same
    bit, as in RAPPOR.
    """
    num_bits = _check_int(num_bits, "num_bits", 1)
    num_hashes = _check_int(num_hashes, "num_hashes", 1)
    if isinstance(strings, str):
        raise ValueError("strings must be a sequence of strings, got a single string")
    strs = list(strings)
    for s in strs:
        if not isinstance(s, str):
            raise ValueError(f"strings must all be str, got {type(s).__name__}")
    n = len(strs)
    coh = _check_int_array(cohorts, "cohorts", 0)
    if coh.ndim == 0:
        coh = np.full(n, int(coh), dtype=np.int64)
    elif coh.shape != (n,):
        raise ValueError(f"cohorts must be one integer or one per string ({n}), got shape {coh.shape}")
    index: dict[tuple[int, str], int] = {}
    rows = np.empty(n, dtype=np.int64)
    for i, key in enumerate(zip(coh.tolist(), strs)):
        rows[i] = index.setdefault(key, len(index))
    pos = np.array([_positions(c, s, num_bits, num_hashes) for c, s in index], dtype=np.int64)
    out = np.zeros((n, num_bits), dtype=bool)
    if n:
        out[np.arange(n)[:, None], pos[rows]] = True
    return out


# ----------------------------------------------------------------------------------------------
# privacy of noisy sampling, parameter conversions, report-level accounting
# ----------------------------------------------------------------------------------------------

def alpha_from_eps(eps):
    """Keep probability of a binary RR at ``eps``: ``alpha = E/(E + 1)`` (Eq. 63)."""
    e = check_eps_array(eps, "eps")
    out = expit(e)
    return float(out) if out.ndim == 0 else out


def eps_from_alpha(alpha):
    """Inverse of :func:`alpha_from_eps`: ``eps = ln(alpha/(1 - alpha))``; alpha in [0.5, 1)."""
    try:
        a = np.asarray(alpha, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"alpha must be a number in [0.5, 1), got {alpha!r}") from None
    if a.size and not (np.all(a >= 0.5) and np.all(a < 1.0)):
        raise ValueError(f"alpha must lie in [0.5, 1) (a finite epsilon >= 0), got {alpha!r}")
    out = logit(a)
    return float(out) if out.ndim == 0 else out


def eps_ns(k, eps_alpha, eps_beta):
    """Eq. 65: bit-level epsilon after ``k`` noisy samplings (vectorized over ``k`` >= 0).

    ``ln((E_a E_b^k + 1)/(E_a + E_b^k))`` (= ``logaddexp(eps_a + k eps_b, 0) - logaddexp(eps_a, k eps_b)``)
    is evaluated as ``log1p(2 P / D)`` with ``P = t_a t_b`` and ``D = 1 - P = u_a + t_a u_b``, where
    ``t = tanh(x/2)`` and ``u = 1 - t = 2 expit(-x)`` at x = eps_alpha and x = k eps_beta: every term is
    a positive product or sum, so the result is accurate to a few ulps from 1e-300 to 700 and, unlike
    the difference of two logaddexp's, non-decreasing in k even in floating point.  0 at k = 0,
    strictly increasing when both epsilons are positive, tending to eps_alpha.
    """
    ea = check_eps(eps_alpha, "eps_alpha")
    eb = check_eps(eps_beta, "eps_beta")
    kb = _check_int_array(k, "k", 0) * eb
    ta, ua = math.tanh(ea / 2.0), 2.0 * float(expit(-ea))
    tb, ub = np.tanh(kb / 2.0), 2.0 * expit(-kb)
    out = np.log1p(2.0 * (ta * tb) / (ua + ta * ub))
    out = np.clip(out, 0.0, ea)  # the exact value lies in [0, eps_alpha]; clip a last-ulp excess
    return float(out) if out.ndim == 0 else out


def report_epsilon(bit_eps, num_hashes):
    """Report-level epsilon of a Bloom filter whose bits are each ``bit_eps``-LDP: ``2 num_hashes bit_eps``.

    Two strings' filters differ in at most 2 num_hashes bits, and the bits are perturbed independently.
    """
    e = check_eps_array(bit_eps, "bit_eps")
    h = _check_int(num_hashes, "num_hashes", 1)
    out = 2.0 * h * e
    return float(out) if out.ndim == 0 else out


# ----------------------------------------------------------------------------------------------
# original RAPPOR: permanent response + repeated noisy sampling
# ----------------------------------------------------------------------------------------------

def permanent_response(bits, eps_alpha, rng=None) -> np.ndarray:
    """Eq. 63 on every bit: keep with ``alpha = E_a/(E_a + 1)``, else flip.  Same shape, bool."""
    b = _check_bits(bits)
    e = check_eps(eps_alpha, "eps_alpha")
    flat = perturb(b.reshape(-1).astype(np.int64), e, 2, rng)
    return flat.reshape(b.shape).astype(bool)


def noisy_sampling(permanent, eps_beta, k, rng=None) -> np.ndarray:
    """Counts of ones among ``k`` instantaneous reports of every permanent bit (Eq. 64, p = 1 - q = beta).

    Each report keeps the permanent bit with ``beta = E_b/(E_b + 1)``, independently; the count is
    Binomial(k, beta) for a permanent 1 and Binomial(k, 1 - beta) for a 0.  Same shape, int64.
    """
    b = _check_bits(permanent, "permanent")
    e = check_eps(eps_beta, "eps_beta")
    k = _check_int(k, "k", 1)
    flat = b.reshape(-1).astype(np.int64)
    counts = np.zeros(flat.shape[0], dtype=np.int64)
    for _ in range(k):  # one vectorized draw per repetition
        counts += perturb(flat, e, 2, rng)
    return counts.reshape(b.shape)


def estimate_noisy_sampling(counts, k, alpha, beta) -> np.ndarray:
    """Estimated share of users whose *original* bit is set, per bit (Appendix F).

    Per user, ``B'_hat = (counts/k - (1 - beta)) / (2 beta - 1)`` (unbiased for the permanent bit);
    over users, ``B_hat = (mean B'_hat - (1 - alpha)) / (2 alpha - 1)``.  ``counts`` has users on axis 0.
    """
    k = _check_int(k, "k", 1)
    c = _check_int_array(counts, "counts", 0, k)
    if c.ndim == 0 or c.shape[0] == 0:
        raise ValueError("counts must have at least one user on axis 0")
    a, b = _check_keep(alpha, "alpha"), _check_keep(beta, "beta")
    if a.ndim or b.ndim:
        raise ValueError("alpha and beta must be scalars")
    a, b = float(a), float(b)
    b_perm = (c.mean(axis=0) / k - (1.0 - b)) / (2.0 * b - 1.0)
    return (b_perm - (1.0 - a)) / (2.0 * a - 1.0)


def noisy_sampling_variance(k, alpha, beta, n):
    """Eq. 68: ``beta(1-beta)/(n k (1-2beta)^2 (1-2alpha)^2) + alpha(1-alpha)/(n (1-2alpha)^2)``.

    Vectorized over ``k`` (and alpha, beta).  Exact for any fixed population of original bits.
    """
    kk = _check_int_array(k, "k", 1)
    a = _check_keep(alpha, "alpha")
    b = _check_keep(beta, "beta")
    n = _check_int(n, "n", 1)
    da, db = (1.0 - 2.0 * a) ** 2, (1.0 - 2.0 * b) ** 2
    out = b * (1.0 - b) / (n * kk * db * da) + a * (1.0 - a) / (n * da)
    return float(out) if np.ndim(out) == 0 else out


# ----------------------------------------------------------------------------------------------
# gradual release
# ----------------------------------------------------------------------------------------------

def gradual_release(bits, eps_path, rng=None) -> np.ndarray:
    """Algorithm 1 with m = 2 on every bit: outputs at each epsilon of ``eps_path`` (strictly increasing).

    Returns a bool array of shape ``bits.shape + (len(eps_path),)``; slice ``[..., i]`` is an exact
    ``eps_path[i]`` binary RR of the bits, and every prefix of a bit's outputs costs only its last epsilon.
    The natural path replacing K noisy samplings is ``eps_ns(1..K, eps_alpha, eps_beta)``.
    """
    b = _check_bits(bits)
    path = check_increasing(eps_path, "eps_path")
    out = chain(b.reshape(-1).astype(np.int64), eps_path, 2, rng)  # as given: a Decimal path stays exact
    return out.reshape(b.shape + (path.shape[0],)).astype(bool)


def relaxation_variance(eps, n):
    """Eq. 67: ``E/(n (E - 1)^2) = 1/(4 n sinh(eps/2)^2)``, the variance of the debiased share of a bit
    from n binary RR outputs at ``eps`` > 0 (exact for any fixed population of bits)."""
    e = check_eps_array(eps, "eps", positive=True)
    n = _check_int(n, "n", 1)
    out = 1.0 / (4.0 * n * np.sinh(e / 2.0) ** 2)
    return float(out) if out.ndim == 0 else out


# ----------------------------------------------------------------------------------------------
# decoding
# ----------------------------------------------------------------------------------------------

def bit_frequencies(reports, cohorts, eps, num_cohorts) -> np.ndarray:
    """Unbiased share of users with each *original* bit set, per cohort: (num_cohorts, num_bits).

    Each report bit ``y`` at bit-level ``eps`` (scalar, or one per report) is debiased on its own,
    ``z = (y - q)/(p - q)`` with ``p = E/(E + 1) = 1 - q``; within a cohort the z's are averaged with
    weights ``(p - q)^2`` (equal weights when eps is a scalar).  A cohort without reports gets 0.
    """
    y = _check_bits(reports, "reports")
    if y.ndim != 2:
        raise ValueError(f"reports must be an (n, num_bits) array, got shape {y.shape}")
    n = y.shape[0]
    num_cohorts = _check_int(num_cohorts, "num_cohorts", 1)
    coh = _check_int_array(cohorts, "cohorts", 0, num_cohorts - 1)
    if coh.shape != (n,):
        raise ValueError(f"cohorts must have one entry per report ({n}), got shape {coh.shape}")
    e = check_eps_array(eps, "eps", positive=True)
    if e.ndim not in (0, 1) or (e.ndim == 1 and e.shape != (n,)):
        raise ValueError(f"eps must be a scalar or one epsilon per report ({n}), got shape {e.shape}")
    e = np.broadcast_to(e, (n,))
    gap = np.tanh(e / 2.0)  # p - q = (E - 1)/(E + 1)
    q = (1.0 - gap) / 2.0
    z = (y - q[:, None]) / gap[:, None]
    w = gap ** 2
    num = np.zeros((num_cohorts, y.shape[1]))
    np.add.at(num, coh, w[:, None] * z)
    den = np.bincount(coh, weights=w, minlength=num_cohorts)
    out = np.zeros_like(num)
    has = den > 0
    out[has] = num[has] / den[has, None]
    return out


def candidate_patterns(candidates, num_cohorts, num_bits, num_hashes) -> np.ndarray:
    """Bloom patterns of every candidate in every cohort: bool (num_cohorts, len(candidates), num_bits)."""
    num_cohorts = _check_int(num_cohorts, "num_cohorts", 1)
    cands = list(candidates)
    strings = cands * num_cohorts
    cohorts = np.repeat(np.arange(num_cohorts), len(cands))
    return bloom_bits(strings, cohorts, num_bits, num_hashes).reshape(num_cohorts, len(cands), -1)


@dataclass(frozen=True)
class DecodeResult:
    """NNLS fit of the candidates: shares of the population, the share left to strings outside the
    candidate set (when fitted), and the residual norm of the (variance-scaled) fit."""

    frequencies: np.ndarray
    background: float
    residual: float


def decode_fit(bit_freqs, cohort_sizes, candidates, num_bits, num_hashes, *,
               background: bool = True) -> DecodeResult:
    """Fit candidate frequencies ``f >= 0`` to the cohorts' estimated bit shares
    (docs/mechanisms-reference.md#rappor-with-gradual-release).

    Model: ``E[count of bit j set in cohort c] = N_c sum_s f_s P[c, s, j]`` (P = Bloom patterns).  The
    stacked counts are fitted by NNLS with each cohort's rows scaled by 1/sqrt(N_c) (their variance is
    proportional to N_c), i.e. ``min || sqrt(N_c) (P f - bit_freqs) ||``.  With ``background``, one
    more column ``1 - (1 - 1/num_bits)^num_hashes`` on every row (a random string's expected bit share)
    absorbs the strings that are not candidates, so that decoys do not.
    """
    num_bits = _check_int(num_bits, "num_bits", 1)
    num_hashes = _check_int(num_hashes, "num_hashes", 1)
    bf = np.asarray(bit_freqs, dtype=np.float64)
    if bf.ndim != 2 or bf.shape[1] != num_bits:
        raise ValueError(f"bit_freqs must be a (num_cohorts, {num_bits}) array, got shape {bf.shape}")
    if not np.all(np.isfinite(bf)):
        raise ValueError("bit_freqs must be finite")
    num_cohorts = bf.shape[0]
    sizes = _check_int_array(cohort_sizes, "cohort_sizes", 0)
    if sizes.shape != (num_cohorts,):
        raise ValueError(
            f"cohort_sizes must have one entry per cohort ({num_cohorts}), got shape {sizes.shape}"
        )
    if sizes.sum() == 0:
        raise ValueError("cohort_sizes must not all be zero")
    cands = list(candidates)
    if not cands:
        raise ValueError("candidates must not be empty")
    patterns = candidate_patterns(cands, num_cohorts, num_bits, num_hashes).astype(np.float64)
    scale = np.sqrt(sizes / sizes.sum())[:, None]                      # (C, 1)
    A = (patterns * scale[:, :, None]).transpose(0, 2, 1).reshape(num_cohorts * num_bits, len(cands))
    if background:
        share = -math.expm1(num_hashes * math.log1p(-1.0 / num_bits)) if num_bits > 1 else 1.0
        A = np.hstack([A, np.broadcast_to(scale * share, (num_cohorts, num_bits)).reshape(-1, 1)])
    b = (bf * scale).reshape(-1)
    coef, resid = nnls(A, b)
    if background:
        return DecodeResult(frequencies=coef[:-1], background=float(coef[-1]), residual=float(resid))
    return DecodeResult(frequencies=coef, background=0.0, residual=float(resid))


def decode(bit_freqs, cohort_sizes, candidates, num_bits, num_hashes, *,
           background: bool = True) -> np.ndarray:
    """Candidate frequencies (shares of all users) by NNLS; see :func:`decode_fit`."""
    fit = decode_fit(bit_freqs, cohort_sizes, candidates, num_bits, num_hashes, background=background)
    return fit.frequencies
