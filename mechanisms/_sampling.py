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

with ``R = ceil(r * 2**64)``, ``S = ceil(p2 * 2**64)`` and ``n`` the number
of remaining categories: the small cells round up and ``first``, which the
caller makes the most probable category, takes the remainder.  Each
probability is realised as an integer multiple of 2**-64, within
``(n + 2) * 2**-64`` of the float value.

The gradual-release samplers (k-RR, relaxation, bridge, tighten) do not use
these float layouts: they draw from exact integer weights with
:func:`draw_weighted` (laws in ``mechanisms.exactness``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .random import U64_MAX, threshold_up, uniform_below, words

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
        R = threshold_up(min(max(r, 0.0), 1.0)) if n_others else 0
        S = threshold_up(min(max(p_second, 0.0), 1.0))
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


# ---------------------------------------------------------------- exact integer weights

@dataclass(frozen=True)
class _Cut:
    """The thresholds of one integer-weight row law, scaled to ``bits`` bits (see :func:`draw_weighted`)."""

    bits: int
    thresholds: tuple[int, int, int]  # ends of the others, second and first regions; U >= the last: reject

    @classmethod
    def of(cls, w) -> "_Cut":
        total = w.total
        bits = total.bit_length() + 64
        scale = (1 << bits) // total       # >= 2^64, so a rejection has probability below 2^-63
        others_end = w.n_others * w.other * scale
        second_end = others_end + w.second * scale
        return cls(bits=bits, thresholds=(others_end, second_end, total * scale))

    def top_words(self) -> list[tuple[int, bool]]:
        """Each threshold's top 64 bits and whether a top word equal to them leaves U undecided (the low bits
        are not zero).  A threshold of 2^bits, which every U is below, is capped at 2^64 - 1 and undecided
        there, so the exact slow path settles that word."""
        shift = self.bits - 64
        out = []
        for t in self.thresholds:
            top = t >> shift
            out.append((U64_MAX, True) if top > U64_MAX else (top, bool(t & ((1 << shift) - 1))))
        return out


def _region_of(u: int, cut: _Cut) -> int:
    """0 (others), 1 (second), 2 (first) or 3 (reject) for one exact U of ``cut.bits`` bits."""
    for i, t in enumerate(cut.thresholds):
        if u < t:
            return i
    return 3


def _big_uniform(rng, bits: int) -> int:
    """One exact integer uniform in [0, 2^bits) (rare slow path of :func:`draw_weighted`)."""
    n = -(-bits // 64)
    value = 0
    for w in words(rng, n):
        value = (value << 64) | int(w)
    return value >> (64 * n - bits)


def _regions(rng, u: np.ndarray, cuts: list[_Cut], which: np.ndarray | None) -> np.ndarray:
    """Region of every row from U's top word ``u``; a row whose word equals a threshold's top word is
    settled exactly from the rest of U (probability at most 3 * 2^-64 per row)."""
    tops = [c.top_words() for c in cuts]
    region = np.zeros(u.shape, np.int8)
    tied = np.zeros(u.shape, bool)
    for j in range(3):
        (top_a, open_a), (top_b, open_b) = tops[0][j], tops[-1][j]
        bound = np.uint64(top_a) if which is None else np.where(which, np.uint64(top_a), np.uint64(top_b))
        region += u >= bound
        if open_a or (which is not None and open_b):
            tied |= (u == bound) & (open_a if which is None else np.where(which, open_a, open_b))
    for i in np.flatnonzero(tied):
        cut = cuts[0] if which is None or which[i] else cuts[1]
        rest_bits = cut.bits - 64
        region[i] = _region_of((int(u[i]) << rest_bits) | _big_uniform(rng, rest_bits), cut)
    return region


def draw_weighted(rng, first: np.ndarray, second: np.ndarray, m: int, weights,
                  cond: np.ndarray | None = None, weights_else=None) -> np.ndarray:
    """One output per row from exact integer weights (``mechanisms.exactness.RowWeights``).

    Row law: ``first`` with ``weights.first / total``, ``second`` (when it differs from ``first``) with
    ``weights.second / total``, each of the ``n_others`` remaining categories with ``weights.other / total``;
    rows where ``cond`` is false use ``weights_else``.  Exact: U is uniform on ``[0, 2^bits)`` with
    ``bits = bitlength(total) + 64``, compared with the thresholds ``w * floor(2^bits / total)`` and redrawn
    above ``total * floor(2^bits / total)`` (probability below 2^-63).  Only U's top 64-bit word is drawn
    unless it equals a threshold's top word; which remaining category is taken is read from the top word
    when the widths allow it exactly (totals of 2^64), else a separate exact uniform draw.  So every
    probability is exactly the weight over the total.
    """
    n = first.shape[0]
    out = np.empty(n, dtype=np.int64)
    cuts = [_Cut.of(weights)] + ([] if cond is None else [_Cut.of(weights_else)])
    n_others = (weights.n_others, None if cond is None else weights_else.n_others)
    # One law whose others' width is a whole number of top words (totals of 2^64, as k-RR's): the top word
    # alone names the other value, floor(U / width) = top // (width >> (bits - 64)); no second word.
    width = weights.other * ((1 << cuts[0].bits) // weights.total)
    top_width = width >> (cuts[0].bits - 64) if cond is None and width % (1 << (cuts[0].bits - 64)) == 0 else 0
    for start in range(0, n, BLOCK):
        stop = min(start + BLOCK, n)
        f, sec = first[start:stop], second[start:stop]
        which = None if cond is None else np.asarray(cond[start:stop], bool)
        region = np.full(stop - start, 3, dtype=np.int8)
        u = np.empty(stop - start, dtype=np.uint64)
        todo = np.arange(stop - start)
        while todo.size:                       # redraw the (vanishingly rare) rejected rows
            u[todo] = words(rng, todo.size)
            region[todo] = _regions(rng, u[todo], cuts, None if which is None else which[todo])
            todo = todo[region[todo] == 3]
        res = np.where(region == 2, f, sec)
        others = np.flatnonzero(region == 0)
        if others.size:
            k_others = n_others[0] if which is None else np.where(which[others], n_others[0], n_others[1])
            if top_width:
                k = (u[others] // np.uint64(top_width)).view(np.int64)
            elif np.max(k_others) > 1:
                k = uniform_below(rng, k_others, others.size)
            else:
                k = np.zeros(others.size, np.int64)
            fo, so = f[others], sec[others]
            lo = np.minimum(fo, so)
            hi = np.where(fo == so, m, np.maximum(fo, so))
            other = k + (k >= lo)
            other += other >= hi
            res[others] = other
        out[start:stop] = res
    return out


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
