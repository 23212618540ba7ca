"""Stored chains: encoding, and growing them along the attribute's epsilon grid
(docs/architecture.md#the-path-of-a-chain-extension).

Chains are stored in blocks (``market.chains.store``, docs/architecture.md#chains-in-blocks): per block and
epsilon, the int16 outputs of its slots (``width`` each).  Growth is vectorized: rows
are advanced one grid step at a time, and the rows that share the same
(current head, next grid point) make one ``mechanisms.relax`` call, so a batch
of n values costs one numpy pass per grid step, never a Python loop per value.
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_FLOOR, Context, Decimal

import numpy as np

from accounts.epsilon import MICRO, to_micro
from market.models import Attribute
from mechanisms import chain as mechanisms_chain
from mechanisms import relax

OUT = np.dtype("<i2")
EPS = np.dtype("<i8")


@dataclass(frozen=True)
class Grid:
    """The attribute's grid in micro-epsilons: ``start + k * step <= stop``."""

    start: int
    step: int
    stop: int

    @classmethod
    def of(cls, attribute: Attribute) -> "Grid":
        return cls(to_micro(attribute.grid_start), to_micro(attribute.grid_step), to_micro(attribute.grid_stop))

    def last_point_upto(self, limit: np.ndarray) -> np.ndarray:
        """Largest grid point <= min(limit, stop); the first point when limit is below it."""
        lim = np.minimum(np.asarray(limit, np.int64), self.stop)
        k = np.maximum((lim - self.start) // self.step, 0)
        return self.start + k * self.step

    def next_point_after(self, eps: np.ndarray) -> np.ndarray:
        eps = np.asarray(eps, np.int64)
        k = np.where(eps >= self.start, (eps - self.start) // self.step + 1, 0)
        return self.start + k * self.step


_DRAW = Context(prec=40, rounding=ROUND_FLOOR)


def draw_epsilon(eps_micro: int, divisor: int = 1) -> Decimal:
    """The epsilon each output is drawn at for a release at ``eps_micro``: exact, rounded down when divided
    (``Attribute.draw_divisor``: strings' bits are drawn at epsilon / (2 num_hashes))."""
    return _DRAW.divide(Decimal(int(eps_micro)), MICRO * divisor)


def decode(epsilons: bytes, outputs: bytes, width: int) -> tuple[np.ndarray, np.ndarray]:
    """A chain given as little-endian micro-epsilons (int64) and outputs (int16, ``width`` per step)."""
    eps = np.frombuffer(bytes(epsilons), dtype=EPS).astype(np.int64)
    return eps, np.frombuffer(bytes(outputs), dtype=OUT).astype(np.int64).reshape(eps.size, width)


def generate(inputs: np.ndarray, eps_micro: np.ndarray, m: int, rng=None, divisor: int = 1) -> np.ndarray:
    """Fresh chains through the given grid points: (n, L, width) outputs, one numpy pass per step, each output
    drawn at ``draw_epsilon(point, divisor)``."""
    n, width = inputs.shape
    rows = mechanisms_chain(inputs.reshape(-1), [draw_epsilon(e, divisor) for e in eps_micro], m, rng)
    return rows.reshape(n, width, -1).transpose(0, 2, 1)


@dataclass
class Growth:
    """New steps for a batch: ``eps[i, :count[i]]`` and ``out[i, :count[i]]`` append to row i."""

    eps: np.ndarray  # (n, S) int64 micro-epsilons, -1 padding
    out: np.ndarray  # (n, S, width) int64
    count: np.ndarray  # (n,)


def grow(inputs: np.ndarray, head: np.ndarray, head_output: np.ndarray, target: np.ndarray, grid: Grid, m: int,
         rng=None, divisor: int = 1) -> Growth:
    """Advance every row from ``head`` along the grid up to ``target`` (a grid point, or <= head: no growth).

    Each iteration moves every unfinished row to its next grid point; rows that
    share a current head form one ``relax`` call (usually one group per step).
    """
    n, width = inputs.shape
    cur = np.asarray(head, np.int64).copy()
    last = np.asarray(head_output, np.int64).reshape(n, width).copy()
    target = np.asarray(target, np.int64)
    steps = np.maximum((target - cur + grid.step - 1) // grid.step, 0)  # an upper bound on the steps needed
    S = int(steps.max()) if n else 0
    eps = np.full((n, S), -1, dtype=np.int64)
    out = np.zeros((n, S, width), dtype=np.int64)
    count = np.zeros(n, dtype=np.int64)
    while True:
        active = np.flatnonzero(cur < target)
        if active.size == 0:
            break
        for h in np.unique(cur[active]):
            rows = active[cur[active] == h]
            to = int(grid.next_point_after(np.array([h]))[0])
            new = relax(last[rows].reshape(-1), inputs[rows].reshape(-1), draw_epsilon(h, divisor),
                        draw_epsilon(to, divisor), m, rng)
            new = new.reshape(rows.size, width)
            pos = count[rows]
            eps[rows, pos] = to
            out[rows, pos] = new
            last[rows] = new
            cur[rows] = to
            count[rows] += 1
    return Growth(eps=eps, out=out, count=count)
