"""Small helpers shared by the benchmarks: timing, tables, JSON results with machine info.

Machines are shared and noisy (docs/quality-targets.md#performance): time with the best of N
repetitions (``time.perf_counter``, garbage collector paused like ``timeit``),
run the things being compared side by side in the same rounds, and report
ratios rather than absolute times.
"""
from __future__ import annotations

import datetime as _dt
import gc
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"


# --------------------------------------------------------------------------- timing

def _timed(fn: Callable[[], object]) -> float:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    finally:
        if was_enabled:
            gc.enable()


def best_of(fn: Callable[[], object], repeat: int = 5) -> float:
    """Smallest wall time in seconds of ``repeat`` calls of ``fn()``."""
    return min(_timed(fn) for _ in range(max(1, repeat)))


def race(cases: dict[str, Callable[[], object]], rounds: int = 5) -> dict[str, float]:
    """Best time of each case, the cases interleaved round by round.

    Every round runs every case once, so a burst of load from a neighbour
    hits all cases alike instead of only the ones that happened to run then.
    """
    best = {name: float("inf") for name in cases}
    for _ in range(max(1, rounds)):
        for name, fn in cases.items():
            best[name] = min(best[name], _timed(fn))
    return best


def per_call_seconds(loop: Callable[[Sequence[object]], object], inputs: Callable[[int], Sequence[object]], *,
                     min_time: float = 0.5, start: int = 20_000, cap: int = 2_000_000,
                     repeat: int = 3) -> tuple[float, int]:
    """Best seconds per call of a per-value Python API.

    ``loop(xs)`` makes one call per element of ``xs`` (write it as a list
    comprehension calling the API directly, so no extra wrapper is timed;
    the comprehension's own overhead, tens of ns, is included).  The number
    of calls starts at ``start`` and grows (up to ``cap``) until one loop
    lasts at least ``min_time``; then the best of ``repeat`` loops of that
    many calls is kept.  Returns ``(seconds_per_call, calls)``.
    """
    calls = start
    while True:
        xs = inputs(calls)
        elapsed = _timed(lambda: loop(xs))
        if elapsed >= min_time or calls >= cap:
            break
        calls = min(cap, max(calls * 2, int(calls * 1.2 * min_time / max(elapsed, 1e-9))))
    best = min(elapsed, best_of(lambda: loop(xs), repeat))
    return best / calls, calls


# --------------------------------------------------------------------------- formatting

def pow10(n: int) -> str:
    """``10^k`` when n is a power of ten, else n."""
    import math

    e = round(math.log10(n))
    return f"10^{e}" if 10**e == n else str(n)


def si(value: float, unit: str = "") -> str:
    """``12.3 M`` style: three significant digits and an SI prefix."""
    if value != value or value in (float("inf"), float("-inf")):
        return f"{value}{unit}"
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, title: str | None = None,
                align: str | None = None) -> None:
    """Print an aligned text table; ``align`` has one char per column, 'l' or 'r' (default: first l).

    A row shorter than ``headers`` ends with a note (e.g. "unavailable: ...")
    that spans the remaining columns and does not widen them.
    """
    cells = [[str(c) for c in row] for row in rows]
    full = [r for r in cells if len(r) == len(headers)]
    widths = [max([len(h)] + [len(r[i]) for r in full]) for i, h in enumerate(headers)]
    for r in cells:  # leading cells of short rows still count
        for i in range(len(r) - 1):
            widths[i] = max(widths[i], len(r[i]))
    align = align or "l" + "r" * (len(headers) - 1)

    def line(values: Sequence[str]) -> str:
        if len(values) < len(headers):
            return "  ".join([v.ljust(widths[i]) for i, v in enumerate(values[:-1])] + [values[-1]])
        out = [v.ljust(widths[i]) if align[i] == "l" else v.rjust(widths[i]) for i, v in enumerate(values)]
        return "  ".join(out).rstrip()

    if title:
        print(title)
    print(line(list(headers)))
    print(line(["-" * w for w in widths]))
    for row in cells:
        print(line(row))
    print(flush=True)


# --------------------------------------------------------------------------- machine and results

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for ln in fh:
                if ln.lower().startswith("model name"):
                    return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git_head() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent.parent,
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_info() -> dict:
    """CPU model, core counts, load, Python and numpy versions, date: what a figure depends on."""
    import numpy as np

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    try:
        load = list(os.getloadavg())
    except OSError:  # pragma: no cover
        load = None
    return {
        "cpu_model": _cpu_model(),
        "nproc": usable,
        "cpu_count": os.cpu_count(),
        "load_average": load,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "numpy": np.__version__,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_head": _git_head(),
    }


def load_text() -> str:
    """The machine's load averages now (1, 5, 15 minutes), for each round's line: a loaded machine moves ratios."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - not Unix
        return "?"


def print_machine(info: dict) -> None:
    load = info.get("load_average")
    load_s = " ".join(f"{x:.2f}" for x in load) if load else "?"
    print(f"machine: {info['cpu_model']}, nproc {info['nproc']}, load {load_s}; "
          f"Python {info['python']}, numpy {info['numpy']}; {info['date']}", flush=True)


def write_results(name: str, data: dict) -> Path:
    """Write ``data`` (plus machine info unless given) to ``benchmarks/results/<name>.json``."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    data = dict(data)
    payload = {"benchmark": name, "machine": data.pop("machine", None) or machine_info(), **data}
    path = RESULTS_DIR / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
