"""Exact integer sampling: the "structured" distributions of the RR kernels, and general ones.

``draw_categorical`` / ``draw_iid`` (end of this module) sample any distribution by integer thresholds on
its cumulative sum, for the private sampler and the surveys.

All kernels of docs/mechanisms-reference.md (k-RR, a relaxation step, a bridge, a
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
#
# Safe rounding (docs/mechanisms.md, "Exact sampling: one-shot mechanisms"): a row of probabilities becomes
# integer cells summing to exactly 2^64; every positive cell except the row's largest is rounded UP
# (``ceil(p 2^64)``), the largest takes the remainder, and a zero stays zero.  So no small cell shrinks
# (a tiny probability never becomes 0) and only the largest cell of a row moves down.  Mechanisms with a
# privacy level to honour build their cells exactly (``mechanisms._exact``) and sample them through
# :class:`CellTable`; the float entry points below are for distributions whose rounding is not
# privacy-relevant (an owner's own distribution before the kernel) or legacy callers.

_CELL_TOTAL = U64_MAX + 1           # 2^64 as a Python int
_FLOAT_TOTAL = float(_CELL_TOTAL)


def safe_cells(probs) -> list[int]:
    """One row of float probabilities as integer cells summing to 2^64 (safe rounding, see above).

    ``ceil(p 2^64)`` is exact in double precision (scaling by a power of two); the largest entry (the
    first one on a tie) takes ``2^64`` minus the others.  Raises ``ValueError`` if the row does not sum to
    about 1 or has a negative entry."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or p.size < 1 or not np.all(np.isfinite(p)) or (p < 0).any():
        raise ValueError("a row of cells needs finite non-negative probabilities")
    top = int(np.argmax(p))
    cells = [0 if v == 0 else -int(-float(v) * _FLOAT_TOTAL // 1) for v in p.tolist()]  # ceil, exact ints
    cells[top] = 0
    rest = _CELL_TOTAL - sum(cells)
    if rest <= 0 or abs(p.sum() - 1.0) > 1e-9:
        raise ValueError(f"probabilities must sum to 1, got {p.sum()!r}")
    cells[top] = rest
    return cells


def _safe_cells_block(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised :func:`safe_cells` for a (rows, n) block, as ``(bounds, valid)``: the cumulative sums
    ``B_j = c_0 + ... + c_j`` (uint64, j < n - 1) and whether ``B_j < 2^64`` (a positive cell follows).
    The outcome of a word ``u`` is the number of valid ``B_j <= u``."""
    rows, n = probs.shape
    top = np.argmax(probs, axis=1)
    scaled = probs * _FLOAT_TOTAL
    small = np.where(scaled < _FLOAT_TOTAL, np.ceil(scaled), 0.0)   # p = 1 (only at the top) never counts
    small[np.arange(rows), top] = 0.0
    cells = small.astype(np.uint64)
    # the others' sum is below 2^64 (they are at most 1 - p_top <= 1 - 1/n, plus n units): no wrap-around
    others = cells.sum(axis=1, dtype=np.uint64)
    cells[np.arange(rows), top] = np.uint64(U64_MAX) - others + np.uint64(1)   # 2^64 - others, in uint64
    # a point mass's top cell is 2^64, stored as 0 (mod 2^64): the cumulative sums below are exact modulo
    # 2^64 and are only compared while they are below 2^64, i.e. while a positive cell follows
    bounds = np.cumsum(cells[:, :-1], axis=1, dtype=np.uint64)
    positive = cells > 0
    positive[np.arange(rows), top] = True
    positive_after = np.cumsum(positive[:, ::-1], axis=1)[:, ::-1][:, 1:] > 0
    return bounds, positive_after


def draw_categorical(rng, probs: np.ndarray) -> np.ndarray:
    """One category per row of ``probs`` (rows sum to 1) from one uniform 64-bit word each.

    The cells are :func:`safe_cells` of each row: category j has probability exactly ``c_j / 2^64``,
    zero stays zero, a positive probability is at least ``2^-64``.  The outcome of ``u`` is the number of
    cumulative sums ``B_j <= u`` (cumulative sums that reached 2^64 -- only zero cells after them -- are
    skipped).  Cache-sized blocks, each one vectorised pass."""
    probs = np.atleast_2d(np.asarray(probs, dtype=np.float64))
    rows, n = probs.shape
    u = words(rng, rows)
    out = np.empty(rows, dtype=np.int64)
    step = max(1, _BLOCK_CELLS // n)
    for start in range(0, rows, step):
        sl = slice(start, start + step)
        bounds, valid = _safe_cells_block(probs[sl])
        out[sl] = (valid & (bounds <= u[sl, None])).sum(axis=1)
    return out


def draw_iid(rng, probs: np.ndarray, size: int) -> np.ndarray:
    """``size`` independent categories from one distribution ``probs`` (its :func:`safe_cells`), one
    ``np.searchsorted`` over ``size`` words."""
    bounds, valid = _safe_cells_block(np.asarray(probs, dtype=np.float64)[None, :])
    return np.searchsorted(bounds[0][valid[0]], words(rng, size), side="right").astype(np.int64)


class CellTable:
    """Integer cells of a mechanism with finitely many rows (inputs) and outputs: row ``r`` gives output
    ``j`` with probability exactly ``cells[r][j] / 2^64`` (every row sums to exactly 2^64).

    The sampler keeps, per row, an output ``order`` with the largest cell last and the cumulative
    ``bounds`` of the others (all below 2^64, so they fit a uint64 word); one word ``u`` gives output
    ``order[r, #(bounds[r] <= u)]`` -- zero cells are skipped because their bound repeats.
    :meth:`cells` rebuilds the exact Python integers from these same arrays, so a level computed from
    them is the level of what :meth:`draw` samples.
    """

    __slots__ = ("order", "bounds")

    def __init__(self, order: np.ndarray, bounds: np.ndarray):
        self.order, self.bounds = order, bounds

    @classmethod
    def from_rows(cls, rows) -> "CellTable":
        """From rows of non-negative Python integers, each summing to exactly 2^64."""
        rows = [[int(c) for c in row] for row in rows]
        width = len(rows[0]) if rows else 0
        if not rows or width < 1 or any(len(r) != width for r in rows):
            raise ValueError("cells must be a non-empty rectangular table")
        order = np.empty((len(rows), width), dtype=np.int64)
        bounds = np.empty((len(rows), width - 1), dtype=np.uint64)
        for i, row in enumerate(rows):  # once per row of a small table (inputs), never per value
            if min(row) < 0 or sum(row) != _CELL_TOTAL:
                raise ValueError(f"row {i} of the cells must be non-negative integers summing to 2^64")
            top = max(range(width), key=lambda j: (row[j], -j))
            rest = [j for j in range(width) if j != top]
            order[i] = rest + [top]
            acc = 0
            for col, j in enumerate(rest):
                acc += row[j]
                bounds[i, col] = acc
        return cls(order, bounds)

    @classmethod
    def from_array(cls, cells: np.ndarray) -> "CellTable":
        """From a (rows, n) uint64 array whose rows sum to exactly 2^64 (checked exactly), n >= 2."""
        cells = np.asarray(cells)
        if cells.dtype != np.uint64 or cells.ndim != 2 or cells.shape[1] < 2:
            raise ValueError("cells must be a two-dimensional uint64 array with at least 2 columns")
        if cells.shape[1] >= 1 << 32:  # pragma: no cover - the split sums below must not wrap
            raise ValueError("too many columns")
        hi = (cells >> np.uint64(32)).sum(axis=1, dtype=np.uint64).tolist()
        lo = (cells & np.uint64(0xFFFFFFFF)).sum(axis=1, dtype=np.uint64).tolist()
        if any((high << 32) + low != _CELL_TOTAL for high, low in zip(hi, lo)):
            raise ValueError("every row of the cells must sum to exactly 2^64")
        rows = cells.shape[0]
        top = np.argmax(cells, axis=1)
        n = cells.shape[1]
        idx = np.tile(np.arange(n), (rows, 1))
        keep = idx != top[:, None]
        order = np.empty((rows, n), dtype=np.int64)
        order[:, :-1] = idx[keep].reshape(rows, n - 1)
        order[:, -1] = top
        rest = np.take_along_axis(cells, order[:, :-1], axis=1)
        return cls(order, np.cumsum(rest, axis=1, dtype=np.uint64))  # < 2^64: the top cell is positive

    @property
    def shape(self) -> tuple[int, int]:
        return self.order.shape

    def cells(self) -> list[list[int]]:
        """The exact cells as Python integers, ``cells[r][j]``, rebuilt from the sampler's arrays."""
        out = []
        for order, bounds in zip(self.order.tolist(), self.bounds.tolist()):
            edges = [0, *bounds, _CELL_TOTAL]
            row = [0] * len(order)
            for k, j in enumerate(order):
                row[j] = edges[k + 1] - edges[k]
            out.append(row)
        return out

    def draw(self, rng, rows: np.ndarray) -> np.ndarray:
        """One output per entry of ``rows`` (row indices), one uniform word each, one numpy pass per block."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty(rows.size, dtype=np.int64)
        step = max(1, _BLOCK_CELLS // max(self.bounds.shape[1], 1))
        for start in range(0, rows.size, step):
            r = rows[start:start + step]
            u = words(rng, r.size)
            rank = (u[:, None] >= self.bounds[r]).sum(axis=1)
            out[start:start + r.size] = self.order[r, rank]
        return out
