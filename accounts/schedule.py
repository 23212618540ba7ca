"""Release schedules: the ceiling a schedule allows at time t, in exact integer arithmetic.

With ``s`` and ``c`` the start and cap in micro-epsilons, ``d`` the duration
and ``e`` the elapsed time in whole seconds (clamped to [0, d]):

    linear:        ceiling(t) = s + floor((c - s) e / d)
    steps (k):     ceiling(t) = s + floor((c - s) floor(k e / d) / k)

Both never exceed the exact rational schedule, only ever rise with t, and are
computed identically for one account (Python ints) and for many (numpy int64:
``(c - s) e`` stays below 7e8 * 3e9 < 2**63 for epsilons up to 700 and
schedules up to 95 years).
"""
from __future__ import annotations

from datetime import datetime

import numpy as np


def ceiling_micro(start: int, cap: int, start_at: datetime, end_at: datetime, shape: str, steps: int | None,
                  now: datetime) -> int:
    d = int((end_at - start_at).total_seconds())
    e = min(max(int((now - start_at).total_seconds()), 0), d)
    if shape == "steps":
        return start + ((cap - start) * ((steps * e) // d)) // steps
    return start + ((cap - start) * e) // d


def ceilings_micro(start, cap, start_s, end_s, steps, now_s: int) -> np.ndarray:
    """Vectorized ``ceiling_micro``: times in whole seconds since the epoch; ``steps`` 0 means linear."""
    start, cap = np.asarray(start, np.int64), np.asarray(cap, np.int64)
    start_s, end_s, steps = np.asarray(start_s, np.int64), np.asarray(end_s, np.int64), np.asarray(steps, np.int64)
    d = end_s - start_s
    e = np.clip(now_s - start_s, 0, d)
    stepped = np.where(steps > 0, (np.maximum(steps, 1) * e) // d, 0)
    return np.where(steps > 0, start + ((cap - start) * stepped) // np.maximum(steps, 1),
                    start + ((cap - start) * e) // d)
