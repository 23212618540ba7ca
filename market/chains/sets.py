"""Many stored chains at once, as flat ragged arrays, and the output of each at one epsilon.

A ``ChainSet`` holds n chains as ``eps`` (total,) micro-epsilons and ``out``
(total, width) outputs, concatenated in row order, with ``offsets`` (n + 1,).
Looking up epsilon e in every chain is one cumulative count of the steps below
e (each chain is strictly increasing, so the first step >= e of a row is its
start plus its steps below e), so there is no Python loop over chains and no
composite key that could overflow int64 at many rows.

``at(e)`` returns, per chain, the output a purchase at e releases (spec
docs/architecture.md#the-path-of-a-chain-extension,
docs/mechanisms-reference.md#gradual-release-of-randomized-response):

* a stored step at e: that step's output;
* e between two stored steps lo < e < hi: ``bridge`` (needs no true value);
* e below the first step: ``tighten`` (needs no true value);
* e above the head: ``relax`` from the head (needs the true value; rows
  without one are reported and left out).

New points are inserted into the chains in order, so the next purchase at e,
by any buyer, finds them stored and gets the same output.  Rows sharing the
same (lo, hi) epsilons form one ``mechanisms`` call.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from market.chains.grow import draw_epsilon
from mechanisms import bridge, relax, tighten


@dataclass
class ChainSet:
    eps: np.ndarray  # (total,) int64 micro-epsilons
    out: np.ndarray  # (total, width) int64
    offsets: np.ndarray  # (n + 1,) int64

    @property
    def n(self) -> int:
        return self.offsets.size - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def head(self) -> np.ndarray:
        return self.eps[self.offsets[1:] - 1]


@dataclass
class Lookup:
    """Result of ``at``: per row the released outputs, and how each was obtained."""

    outputs: np.ndarray  # (n, width); rows not releasable hold -1
    stored: np.ndarray  # bool (n,): a stored step at e
    inserted: np.ndarray  # bool (n,): a new point was generated and inserted
    missing_input: np.ndarray  # bool (n,): e above the head but no true value to extend with


def at(chains: ChainSet, e: int, m: int, inputs: np.ndarray | None = None, rng=None,
       divisor: int = 1) -> tuple[Lookup, ChainSet]:
    """The output of every chain at micro-epsilon ``e``; returns the lookup and the chains with new points.

    ``inputs`` (n, width) are the true values, needed only for rows whose head
    is below e (rows with a negative input are treated as having none).
    """
    n, width = chains.n, chains.out.shape[1]
    start, end = chains.offsets[:-1], chains.offsets[1:]
    below_e = np.zeros(chains.eps.size + 1, dtype=np.int64)
    np.cumsum(chains.eps < e, out=below_e[1:])
    pos = start + (below_e[end] - below_e[start])  # global index of the first step >= e in each row
    inside = pos < end
    stored = inside & (chains.eps[np.minimum(pos, chains.eps.size - 1)] == e)
    below = inside & ~stored & (pos == start)
    between = inside & ~stored & (pos > start)
    above = ~inside
    outputs = np.full((n, width), -1, dtype=np.int64)
    outputs[stored] = chains.out[pos[stored]]

    new = np.full((n, width), -1, dtype=np.int64)
    e_draw = draw_epsilon(e, divisor)
    if between.any():
        idx = np.flatnonzero(between)
        lo_eps, hi_eps = chains.eps[pos[idx] - 1], chains.eps[pos[idx]]
        for lo_e, hi_e in _pairs(lo_eps, hi_eps):
            sel = idx[(lo_eps == lo_e) & (hi_eps == hi_e)]
            lo, hi = chains.out[pos[sel] - 1], chains.out[pos[sel]]
            new[sel] = bridge(lo.reshape(-1), hi.reshape(-1), draw_epsilon(lo_e, divisor), e_draw,
                              draw_epsilon(hi_e, divisor), m, rng).reshape(-1, width)
    if below.any():
        idx = np.flatnonzero(below)
        first_eps = chains.eps[pos[idx]]
        for f in np.unique(first_eps):
            sel = idx[first_eps == f]
            new[sel] = tighten(chains.out[pos[sel]].reshape(-1), draw_epsilon(f, divisor), e_draw, m,
                               rng).reshape(-1, width)
    missing = np.zeros(n, dtype=bool)
    if above.any():
        idx = np.flatnonzero(above)
        if inputs is None:
            missing[idx] = True
        else:
            has = (inputs[idx] >= 0).all(axis=1)
            missing[idx[~has]] = True
            idx = idx[has]
            heads = chains.eps[end[idx] - 1]
            for h in np.unique(heads):
                sel = idx[heads == h]
                new[sel] = relax(chains.out[end[sel] - 1].reshape(-1), inputs[sel].reshape(-1),
                                 draw_epsilon(h, divisor), e_draw, m, rng).reshape(-1, width)
    inserted = (between | below | above) & ~missing
    outputs[inserted] = new[inserted]
    return Lookup(outputs=outputs, stored=stored, inserted=inserted, missing_input=missing), \
        _insert(chains, pos, inserted, e, new)


def _pairs(lo: np.ndarray, hi: np.ndarray):
    pairs = np.unique(np.stack([lo, hi], axis=1), axis=0)
    return [(int(a), int(b)) for a, b in pairs]


def _insert(chains: ChainSet, pos: np.ndarray, inserted: np.ndarray, e: int, new: np.ndarray) -> ChainSet:
    """Insert (e, new[row]) at ``pos[row]`` for the inserted rows; one np.insert per array."""
    if not inserted.any():
        return chains
    idx = np.flatnonzero(inserted)
    at_pos = pos[idx]  # already sorted: rows ascending, positions within their rows
    eps = np.insert(chains.eps, at_pos, e)
    out = np.insert(chains.out, at_pos, new[idx], axis=0)
    added = np.zeros(chains.n + 1, dtype=np.int64)
    added[1:] = np.cumsum(inserted)
    return ChainSet(eps=eps, out=out, offsets=chains.offsets + added)
