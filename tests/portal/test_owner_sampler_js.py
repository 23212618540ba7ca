"""The browser's sampler (``portal/static/portal/owner_sampler.js``) is the server's, bit for bit (docs/custody.md).

Chromium loads the module from the live server's static files and runs it:

* every law, step and case of the shared vectors (``tests/data/sampler_vectors.json``, made from the server's
  mechanisms with fixed 64-bit words) agrees: the same integer cells, the same outputs from the same words and
  the same number of words used;
* 10^5 draws with ``crypto.getRandomValues`` per law follow the exact law (chi-square, ``ALPHA = 1e-7`` as the
  other statistical tests; not seeded, the browser's CSPRNG): k-RR marginals at several epsilons and domain
  sizes (eps 0 included, the uniform path), and the joint law of one relaxation step; a power computation
  states which wrong laws these sample sizes detect;
* epsilons too small for 64-bit cells (``tests/data/sampler_smallest_eps.json``) are refused as the server
  refuses them, and the others get the server's cells.

The same vectors run in Node without a browser (``tests/js/owner_sampler.test.mjs``, ``node --test``); the cases
of ``sampler_smallest_eps.json`` are checked against the server here.  The browser tests are skipped, saying why,
without Playwright or ``/usr/bin/chromium``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.market.stats import ALPHA, chi_square, independent_pair_laws, marginal_laws, pair_law, power
from tests.portal import test_browser
from tests.portal.test_browser import CHROMIUM, sync_playwright

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
browser_page = test_browser.browser_page  # the fixture: a real Chromium page, CSP violations fail
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "owner-sampler"
VECTORS = Path(__file__).resolve().parents[1] / "data" / "sampler_vectors.json"
SMALLEST = Path(__file__).resolve().parents[1] / "data" / "sampler_smallest_eps.json"
MODULE = "/static/portal/owner_sampler.js"
DRAWS = 100_000

BROWSER_MARKS = [
    pytest.mark.skipif(sync_playwright is None,
                       reason="Playwright for Python is not installed (pip install playwright)"),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install -y chromium)"),
]


def needs_chromium(test):
    """The browser tests: skipped, saying why, without Playwright or Chromium (the others run everywhere)."""
    for mark in reversed(BROWSER_MARKS):
        test = mark(test)
    return test

# Runs in the page: every law, step and case of the vectors through the module; returns the disagreements.
CHECK_VECTORS = """async ([url, vectors]) => {
  const s = await import(url);
  const bad = [];
  const text = (r) => ({first: String(r.first), second: String(r.second), other: String(r.other), n_others: r.nOthers});
  for (const law of vectors.laws) {
    const c = s.krrCells(law.eps, law.m);
    const got = {keep: String(c.keep), flip: String(c.flip), total: String(c.total)};
    if (got.keep !== law.keep || got.flip !== law.flip || got.total !== law.total) bad.push({law, got});
  }
  for (const step of vectors.steps) {
    const w = s.stepWeights(step.eps_from, step.eps_to, step.m);
    const got = {kept: text(w.kept), moved: text(w.moved)};
    if (JSON.stringify(got) !== JSON.stringify({kept: step.kept, moved: step.moved})) bad.push({step, got});
  }
  for (const c of vectors.cases) {
    const words = c.words.map(BigInt);
    let used = 0;
    const next = () => {
      if (used >= words.length) throw new Error("the case ran out of words");
      return words[used++];
    };
    let output;
    try {
      output = c.op === "krr" ? s.krr(c.value, c.eps, c.m, next)
                              : s.relax(c.previous, c.value, c.eps_from, c.eps_to, c.m, next);
    } catch (e) {
      output = String(e);
    }
    if (output !== c.output || used !== c.words_used) bad.push({case: c, output, words_used: used});
  }
  return {bad: bad.slice(0, 10), count: bad.length};
}"""

# Runs in the page: n chains of value i % m through the epsilons with the default (crypto) words; returns the
# counts of (value, output at i, output at j) as a flat list, m * m * m.
DRAW_PAIRS = """async ([url, eps, m, n, i, j]) => {
  const s = await import(url);
  const counts = new Array(m * m * m).fill(0);
  const words = s.secureWords();
  for (let r = 0; r < n; r++) {
    const a = r % m;
    const out = eps.length === 1 ? [s.krr(a, eps[0], m, words)] : s.chain(a, eps, m, words);
    counts[(a * m + out[i]) * m + out[j]] += 1;
  }
  return counts;
}"""


def open_module_origin(page, base) -> None:
    """Any page of the live server's origin, from which the module is imported (the module itself: no database)."""
    response = page.goto(f"{base}{MODULE}")
    assert response.ok, response.status
    assert "javascript" in response.headers["content-type"]


@needs_chromium
def test_the_javascript_sampler_agrees_with_every_shared_vector(live_server, browser_page):
    vectors = json.loads(VECTORS.read_text())
    assert vectors["laws"] and vectors["steps"] and vectors["cases"]
    assert {c["op"] for c in vectors["cases"]} == {"krr", "relax"}
    assert max(c["words_used"] for c in vectors["cases"]) > 1, "the vectors exercise ties (more than one word)"
    open_module_origin(browser_page, live_server.url)
    result = browser_page.evaluate(CHECK_VECTORS, [MODULE, vectors])
    assert result["count"] == 0, f"{result['count']} disagreements, the first: {json.dumps(result['bad'], indent=1)}"


@needs_chromium
def test_the_javascript_sampler_refuses_what_the_server_refuses(live_server, browser_page):
    open_module_origin(browser_page, live_server.url)
    errors = browser_page.evaluate("""async (url) => {
      const s = await import(url);
      const attempt = (f) => { try { f(); return null; } catch (e) { return e.name; } };
      return [
        attempt(() => s.krrCells("30.000001", 3)),        // above SAMPLER_EPS_MAX
        attempt(() => s.krrCells("-1", 3)),
        attempt(() => s.krrCells("1e3", 3)),               // decimal strings only
        attempt(() => s.krrCells("1", 1)),                 // m >= 2
        attempt(() => s.stepWeights("1", "1", 3)),         // a step goes up
        attempt(() => s.krr(3, "1", 3)),                   // a label of the domain
        attempt(() => s.krr(0, "1", 3, () => 1n << 64n)),  // words are 64-bit
        attempt(() => s.krrCells("30", 3)),
      ];
    }""", MODULE)
    assert errors == ["RangeError"] * 7 + [None]
    # around the smallest epsilon 64-bit cells realise: refused below it, the server's cells above
    cases = json.loads(SMALLEST.read_text())["cases"]
    got = browser_page.evaluate("""async ([url, cases]) => {
      const s = await import(url);
      return cases.map(([eps, m]) => {
        try {
          const c = s.krrCells(eps, m);
          return [String(c.keep), String(c.flip)];
        } catch (e) {
          return e.name;
        }
      });
    }""", [MODULE, cases])
    assert got == [expected or "RangeError" for _, _, expected in cases]


def test_the_smallest_epsilon_cases_are_the_servers():
    """``tests/data/sampler_smallest_eps.json`` (read by Node's tests and the one above) states what
    ``mechanisms.exactness.krr_cells`` answers: refused (keep < flip) below the smallest epsilon, else its cells."""
    from decimal import Decimal

    from mechanisms.exactness import krr_cells

    cases = json.loads(SMALLEST.read_text())["cases"]
    assert any(expected is None for *_, expected in cases) and any(expected for *_, expected in cases)
    for eps, m, expected in cases:
        if expected is None:
            with pytest.raises(ValueError, match="too small for k-RR"):
                krr_cells(Decimal(eps), m)
        else:
            c = krr_cells(Decimal(eps), m)
            assert [str(c.keep), str(c.flip)] == expected, (eps, m)


def _pairs(page, eps: list[str], m: int, i: int, j: int) -> np.ndarray:
    counts = page.evaluate(DRAW_PAIRS, [MODULE, eps, m, DRAWS, i, j])
    return np.array(counts, dtype=np.int64).reshape(m, m, m)


@pytest.mark.slow
@needs_chromium
def test_the_javascript_sampler_draws_the_exact_laws_with_the_browsers_csprng(live_server, browser_page):
    page = browser_page
    open_module_origin(page, live_server.url)
    # k-RR marginals: each group (true value) has about DRAWS / m draws
    for eps, m, wrong_eps in [("0", 3, 0.1), ("0.5", 2, 0.6), ("1.3", 4, 1.4), ("2.75", 7, 2.85), ("6", 16, 6.5)]:
        counts = _pairs(page, [eps], m, 0, 0)
        table = np.einsum("acc->ac", counts)           # the output, by true value
        law = marginal_laws(float(eps), m)
        stat, df, p = chi_square(table, law)
        assert p > ALPHA, f"k-RR at {eps}, m = {m}: chi2 = {stat:.1f}, df = {df}, p = {p:.2e}"
        got = power(table.sum(axis=1), law, marginal_laws(wrong_eps, m))
        assert got > 0.999, f"k-RR at {eps}, m = {m}: power {got:.4f} against eps {wrong_eps}"
    # one relaxation step: the pair (output at 0.5, output at 1.3), m = 4
    eps, m = ["0.5", "1.3"], 4
    counts = _pairs(page, eps, m, 0, 1).reshape(m, m * m)
    law = np.array([pair_law([float(e) for e in eps], m, a, 0, 1) for a in range(m)])
    stat, df, p = chi_square(counts, law)
    assert p > ALPHA, f"relaxation 0.5 -> 1.3, m = 4: chi2 = {stat:.1f}, df = {df}, p = {p:.2e}"
    wrong = independent_pair_laws(0.5, 1.3, m)   # a step that ignores the previous output
    assert power(counts.sum(axis=1), law, wrong) > 1 - 1e-9
    assert chi_square(counts, wrong)[2] < ALPHA, "the data reject a step that ignores the previous output"
