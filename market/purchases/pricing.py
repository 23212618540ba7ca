"""Price policies: price per value as a non-decreasing function of epsilon
(docs/architecture.md#the-path-of-a-purchase).

A policy is a piecewise-linear curve through points ``(epsilon, price)``
starting at epsilon 0, constant after its last point, and an owner share in
(0, 1]; the platform keeps the rest.  Money is exact: prices are rounded to
4 decimal places (rounding a non-decreasing function keeps it non-decreasing)
and handled as integer ten-thousandths in numpy.  Upgrading a value already
held at e1 to e2 costs ``price(e2) - price(e1)`` (0 when e2 <= e1): since all
outputs of a value come from one chain, a buyer holding e1 and buying e2 learns
exactly what an e2 purchase alone gives, so a monotone price is arbitrage-free.
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_FLOOR, ROUND_HALF_UP, Decimal, InvalidOperation

import numpy as np

from accounts.epsilon import MICRO, from_micro, parse
from accounts.money.units import UNIT, UNITS
from ldpmarket.problems import PolicyError

DEFAULT_POLICY = {"points": [["0", "0"], ["1", "0.01"], ["10", "0.05"]], "owner_share": "0.8"}


@dataclass(frozen=True)
class PricePolicy:
    points: tuple[tuple[Decimal, Decimal], ...]
    owner_share: Decimal

    @classmethod
    def parse(cls, data: dict | None) -> "PricePolicy":
        """Validate a policy: epsilons strictly increasing from 0, prices non-negative and non-decreasing."""
        data = data or DEFAULT_POLICY
        try:
            raw = data["points"]
            points = tuple((parse(e, name="price point epsilon"), Decimal(str(p))) for e, p in raw)
            share = Decimal(str(data.get("owner_share", DEFAULT_POLICY["owner_share"])))
        except (KeyError, TypeError, ValueError, InvalidOperation) as exc:
            raise PolicyError("a price policy needs points [[epsilon, price], ...] and an owner_share: "
                              f"{exc}") from None
        if not points or points[0][0] != 0:
            raise PolicyError("the first price point must be at epsilon 0")
        if any(b[0] <= a[0] for a, b in zip(points, points[1:])):
            raise PolicyError("price point epsilons must be strictly increasing")
        if any(not p.is_finite() or p < 0 for _, p in points):
            raise PolicyError("prices must be non-negative numbers")
        if any(b[1] < a[1] for a, b in zip(points, points[1:])):
            raise PolicyError("prices must not decrease as epsilon grows (that would allow arbitrage)")
        if not (share.is_finite() and 0 < share <= 1):
            raise PolicyError("owner_share must be in (0, 1]")
        return cls(points=points, owner_share=share)

    def as_json(self) -> dict:
        return {"points": [[str(e), str(p)] for e, p in self.points], "owner_share": str(self.owner_share)}

    def price(self, epsilon) -> Decimal:
        """Price of one value at ``epsilon``, exact to 4 decimal places."""
        e = epsilon if isinstance(epsilon, Decimal) else Decimal(str(epsilon))
        if e <= 0:
            return Decimal(0).quantize(UNIT)
        for (e0, p0), (e1, p1) in zip(self.points, self.points[1:]):
            if e <= e1:
                return (p0 + (p1 - p0) * (e - e0) / (e1 - e0)).quantize(UNIT, rounding=ROUND_HALF_UP)
        return self.points[-1][1].quantize(UNIT, rounding=ROUND_HALF_UP)

    def units(self, eps_micro: np.ndarray) -> np.ndarray:
        """``price`` in integer ten-thousandths for an array of micro-epsilons (evaluated once per distinct value)."""
        eps_micro = np.asarray(eps_micro, dtype=np.int64)
        distinct, inverse = np.unique(eps_micro, return_inverse=True)
        table = np.array([int(self.price(from_micro(int(e))) * UNITS) for e in distinct], dtype=np.int64)
        return table[inverse.reshape(-1)] if distinct.size else np.zeros(0, dtype=np.int64)

    def charge_units(self, e_micro: int, held_micro: np.ndarray) -> np.ndarray:
        """What each value costs at ``e_micro`` given the buyer's held epsilons (0 = none): upgrade credit."""
        now = self.units(np.array([e_micro]))[0]
        return np.maximum(now - self.units(np.minimum(held_micro, e_micro)), 0)

    def owner_units(self, paid_units: np.ndarray) -> np.ndarray:
        """Owners' shares, rounded down; the platform fee is the rest, so every payment adds up exactly."""
        share = int((self.owner_share * UNITS).to_integral_value(rounding=ROUND_FLOOR))
        return (np.asarray(paid_units, dtype=np.int64) * share) // UNITS



def epsilon_micro(e: Decimal) -> int:
    return int(e * MICRO)
