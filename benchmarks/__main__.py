"""Run the benchmarks: ``python -m benchmarks [NAME ...]``.

With no name every registered benchmark runs, in the order of ``BENCHMARKS``.
A name selects a module by its full name (``e1_engine``) or by the part before
its first underscore (``e1``).  ``--list`` prints the registered names.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback

#: Benchmark modules of this package, in the order they run.  Each defines
#: ``main()``.  To add one, write ``benchmarks/<name>.py`` and list it here.
BENCHMARKS: list[str] = [
    "e1_engine",
    "e2_extension",
    "e3_purchase",
    "e4_api",
    "e5_parallel",
    "e6_receipts",
    "e7_witnesses",
    "e8_rotation",
    "e9_metrics",
    "paper_experiments",
    "uldp_reproduction",
    "rr3_reproduction",
    "private_sampling_reproduction",
    "surveys_reproduction",
    "consistency_estimates",
]


def _short(name: str) -> str:
    return name.split("_", 1)[0]


def select(names: list[str]) -> list[str]:
    """The registered modules that ``names`` designate, in registration order."""
    if not names:
        return list(BENCHMARKS)
    chosen: list[str] = []
    for wanted in names:
        hits = [b for b in BENCHMARKS if wanted in (b, _short(b))]
        if not hits:
            raise SystemExit(f"unknown benchmark {wanted!r}; registered: {', '.join(BENCHMARKS)}")
        chosen.extend(h for h in hits if h not in chosen)
    return [b for b in BENCHMARKS if b in chosen]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all), e.g. e1 or e1_engine")
    parser.add_argument("--list", action="store_true", help="print the registered benchmarks and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(BENCHMARKS))
        return 0
    failed = []
    for name in select(args.names):
        start = time.perf_counter()
        print(f"=== benchmarks.{name} ===", flush=True)
        try:
            module = importlib.import_module(f"{__package__ or 'benchmarks'}.{name}")
            entry = getattr(module, "main", None)
            if not callable(entry):
                print(f"benchmarks.{name} defines no main(); skipped")
                continue
            entry()
        except Exception:  # report, go on with the other benchmarks, fail at the end
            traceback.print_exc()
            failed.append(name)
        print(f"=== benchmarks.{name}: {time.perf_counter() - start:.1f} s ===\n", flush=True)
    if failed:
        print(f"benchmarks that raised: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
