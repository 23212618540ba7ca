"""ldpmarket's benchmarks (docs/quality-targets.md#performance).

Run them all with ``python -m benchmarks`` (or ``make bench``), a subset with
``python -m benchmarks e1``.  Each benchmark module defines ``main()``, prints
a table of figures measured side by side in one run (ratios, best-of-N
repetitions, because the machines are shared and noisy) and writes its
numbers to ``benchmarks/results/<module>.json``.  A new benchmark is added by
registering its module name in ``benchmarks.__main__.BENCHMARKS``.
"""
