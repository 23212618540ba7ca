"""Exact integer sampling: the "structured" distributions of the RR kernels, and general ones.

``draw_categorical`` / ``draw_iid`` (end of this module) sample any distribution by integer thresholds on
its cumulative sum, for the private sampler and the surveys.

All kernels of spec gradual-release.md (k-RR, a relaxation step, a bridge, a
tightening) have the same shape for a given row: one category ``first``
with probability ``p1``, optionally a second one ``second`` with ``p2``, and
every remaining category with the same probability ``r``.  One uniform word
``u`` in [0, 2**64) decides the outcome:

    [0, n*R)            -> the (u // R)-th remaining category, in increasing order
    [n*R, n*R + S)      -> second
    [n*R + S, 2**64)    -> first          (first takes the rounding remainder)

with ``R = floor(r * 2**64)``, ``S = floor(p2 * 2**64)`` and ``n`` the number
of remaining categories.  Each probability is realised as an integer multiple
of 2**-64, within ``(n + 2) * 2**-64`` of the float value; the caller makes
``first`` the most probable special category, so the remainder never lands on
a tiny probability.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .random import U64_MAX, threshold, words

#: Rows drawn per vectorized pass: large enough to amortise numpy's call
#: overhead, small enough that the temporaries stay in the CPU cache.
BLOCK = 1 << 14
#: Cells (rows x categories) per pass when drawing from general distributions.
_BLOCK_CELLS = 1 << 20
_TWO_64 = float(2**64)


@dataclass(frozen=True)
class Layout:
    """Integer thresholds of one structured distribution (see module docstring)."""

    n_others: int
    R: int  # block width per remaining category
    S: int  # width of the second special category (0 when there is none)

    @classmethod
    def of(cls, *, p_second: float, r: float, n_others: int) -> "Layout":
        R = threshold(min(max(r, 0.0), 1.0)) if n_others else 0
        S = threshold(min(max(p_second, 0.0), 1.0))
        if n_others * R + S > U64_MAX:  # float sums a hair above 1: keep first's remainder >= 1
            S = max(U64_MAX - n_others * R, 0)
        return cls(n_others=n_others, R=R, S=S)

    @property
    def others_end(self) -> int:
        return self.n_others * self.R

    @property
    def second_end(self) -> int:
        return self.n_others * self.R + self.S


def draw(rng, first: np.ndarray, second: np.ndarray, m: int, layout: Layout,
         cond: np.ndarray | None = None, layout_else: Layout | None = None) -> np.ndarray:
    """Draw one output per row.

    ``first`` and ``second`` are per-row categories (``second == first`` means
    there is no second special category; its ``S`` must then be 0).  With
    ``cond`` given, rows where ``cond`` is true use ``layout`` and the others
    ``layout_else``.  One word of randomness per row, one numpy pass.
    """
    n = first.shape[0]
    out = np.empty(n, dtype=np.int64)
    for start in range(0, n, BLOCK):  # cache-sized blocks; each block is one vectorized pass
        stop = min(start + BLOCK, n)
        c = None if cond is None else cond[start:stop]
        out[start:stop] = _draw_block(rng, first[start:stop], second[start:stop], m, layout, c, layout_else)
    return out


def _draw_block(rng, first, second, m, layout, cond, layout_else):
    u = words(rng, first.shape[0])

    def pick(attr):
        a = np.uint64(max(getattr(layout, attr), 1) if attr == "R" else getattr(layout, attr))
        if cond is None:
            return a
        b = np.uint64(max(getattr(layout_else, attr), 1) if attr == "R" else getattr(layout_else, attr))
        return np.where(cond, a, b)

    block, others_end, second_end = pick("R"), pick("others_end"), pick("second_end")
    k = (u // block).view(np.int64)  # rows outside the "others" region are overwritten below
    lo = np.minimum(first, second)
    hi = np.where(first == second, m, np.maximum(first, second))
    other = k + (k >= lo)
    other += other >= hi
    return np.where(u < others_end, other, np.where(u < second_end, second, first))


# ---------------------------------------------------------------- general distributions

def draw_categorical(rng, probs: np.ndarray) -> np.ndarray:
    """One category per row of ``probs`` (rows sum to 1) from one uniform 64-bit word each.

    Thresholds ``T_j = floor(cdf_j 2^64)``: the outcome is the number of ``T_j <= u``, so category j has
    probability ``(T_j - T_{j-1}) / 2^64`` (within 2^-52 of ``probs[j]``).  A cumulative sum that reached
    1 stands for ``T = 2^64``, which no word reaches; the last category takes the remainder.
    """
    probs = np.atleast_2d(probs)
    rows, n = probs.shape
    u = words(rng, rows)
    if rows == 1:
        return _draw_iid_words(probs[0], u)
    out = np.empty(rows, dtype=np.int64)
    step = max(1, _BLOCK_CELLS // n)
    for start in range(0, rows, step):            # cache-sized blocks, each one vectorised pass
        sl = slice(start, start + step)
        cdf = np.cumsum(probs[sl, :-1], axis=1)
        valid = cdf < 1.0                          # a prefix: the cdf is non-decreasing
        thresholds = np.floor(np.where(valid, cdf, 0.0) * _TWO_64).astype(np.uint64)
        out[sl] = (valid & (thresholds <= u[sl, None])).sum(axis=1)
    return out


def _draw_iid_words(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    cdf = np.cumsum(probs[:-1])
    cdf = cdf[cdf < 1.0]
    thresholds = np.floor(cdf * _TWO_64).astype(np.uint64)
    return np.searchsorted(thresholds, u, side="right").astype(np.int64)


def draw_iid(rng, probs: np.ndarray, size: int) -> np.ndarray:
    """``size`` independent categories from one distribution ``probs`` (thresholds as in
    :func:`draw_categorical`, one ``np.searchsorted`` over ``size`` words)."""
    return _draw_iid_words(probs, words(rng, size))
