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
  refuses them, and the others get the server's cells;
* numeric and string values (issue 32): the one-time discretization, the Bloom filter's hashes, the per-bit
  epsilons and the Bloom bits' chains agree with the service's own functions on fixed words (ties and rejections
  included) and with ``tests/data/custody_vectors.json``; with the browser's CSPRNG they follow the exact laws.

The same vectors run in Node without a browser (``tests/js/owner_sampler.test.mjs``, ``node --test``); the cases
of ``sampler_smallest_eps.json`` are checked against the server here.  The browser tests are skipped, saying why,
without Playwright or ``/usr/bin/chromium``.
"""
from __future__ import annotations

import json
import os
from decimal import Decimal
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
CUSTODY_VECTORS = Path(__file__).resolve().parents[1] / "data" / "custody_vectors.json"
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


# ---------------------------------------------------------------------------------------------------------------
# Numeric and string values (issue 32, docs/custody.md): the browser's discretization, Bloom filter, per-bit
# epsilons and batch of bit chains against the service's own functions, computed here from fixed words.
# ---------------------------------------------------------------------------------------------------------------

class _FixedWords:
    """A word source (``words(n)``) handing out a fixed list in order; ``used`` counts the words taken."""

    def __init__(self, words):
        self._list = [int(w) for w in words]
        self.used = 0

    def words(self, n):
        assert self.used + n <= len(self._list), "the case ran out of words"
        out = np.array(self._list[self.used:self.used + n], dtype=np.uint64)
        self.used += n
        return out


def _server_kinds_cases(seed: int = 32) -> dict:
    """The service's answers on fixed words: ``mechanisms.numeric.discretize`` (one value, words on both sides of
    its threshold), ``_positions`` (the Bloom filter's hashes), ``market.chains.grow.draw_epsilon`` and
    ``mechanisms.relaxation.chain`` of the whole Bloom bit vector (step-major, as ``market.chains.grow`` draws a
    value's chains, the SDK and ``tests/data/custody_vectors.json``), with words at the top that make draws tie and
    be rejected."""
    from market.chains.grow import draw_epsilon
    from mechanisms.numeric import discretize
    from mechanisms.rappor import _positions
    from mechanisms.relaxation import chain

    rng = np.random.default_rng(seed)
    top = (1 << 64) - 1
    numeric = []
    for x, low, high in [("0", "0", "100"), ("100", "0", "100"), ("37.5", "0", "100"), ("-0.3", "-1", "1"),
                         ("0.1", "0", "0.3"), ("0.000000001", "0", "1"), ("99.999999", "0", "100"),
                         ("7.37", "0", "24")]:
        p = (float(x) - float(low)) / (float(high) - float(low))
        t = int(p * 2**64) if p < 1 else 0
        for u in sorted({0, top, max(t - 1, 0), t, min(t + 1, top), int(rng.integers(0, top, dtype=np.uint64))}):
            z = int(discretize(np.array([float(x)]), float(low), float(high), _FixedWords([u]))[0])
            numeric.append({"x": x, "low": low, "high": high, "words": [str(u)], "z": z, "words_used": 1})
    strings = ["a", "hello", "Schlüsselwörter", "日本語のテキスト", "emoji 🙂 ok", "x" * 200, "  spaced  ", "0:1"]
    bloom = [{"cohort": c, "string": s, "num_bits": b, "num_hashes": h, "positions": list(_positions(c, s, b, h))}
             for s in strings for c, b, h in [(0, 8, 1), (3, 16, 2), (17, 128, 4), (1, 1000, 7)]]
    draw = [{"eps": format(Decimal(micro) / 10**6, "f"), "divisor": d, "draw": format(draw_epsilon(micro, d), "f")}
            for micro in (1, 100_000, 500_000, 1_234_567, 30_000_000) for d in (1, 2, 3, 4, 6, 14, 200)]
    chains = []
    for k in range(40):
        n, divisor = int(rng.integers(1, 40)), int(rng.integers(1, 8))
        bits = rng.integers(0, 2, n).tolist()
        micros = np.sort(rng.choice(np.arange(1, 3_000_000), 3, replace=False))
        eps = [format(Decimal(int(e)) / 10**6, "f") for e in micros]
        words = rng.integers(0, top, 6 * n + 40, dtype=np.uint64, endpoint=True).tolist()
        if k % 4 == 0:  # words at the top: rejected draws and ties, settled by further words
            words[::5] = [top] * len(words[::5])
        src = _FixedWords(words)
        rows = chain(np.array(bits), [draw_epsilon(int(e), divisor) for e in micros], 2, src)
        chains.append({"bits": bits, "epsilons": eps, "divisor": divisor, "words": [str(w) for w in words],
                       "outputs": ["".join(str(int(r[j])) for r in rows) for j in range(3)],
                       "words_used": src.used})
    return {"numeric": numeric, "bloom": bloom, "draw": draw, "chains": chains}


def _shared_kinds_cases() -> dict:
    """``tests/data/custody_vectors.json`` (made by the server's code, checked against the SDK in tests/client/)
    in the shapes of ``_server_kinds_cases``."""
    v = json.loads(CUSTODY_VECTORS.read_text())
    bits = lambda text: [int(c) for c in text]  # noqa: E731
    return {
        "numeric": v["discretize"] + [{**c, "chain": c["epsilons"]} for c in v["numeric_chain"]],
        "bloom_bits": v["bloom"],
        "chains": [{**c, "bits": bits(c["bits"])} for c in v["string_chain"]]
                  + [{**c, "bits": bits(c["bits"])} for c in v["string_extend"]],
    }


CHECK_KINDS = """async ([url, cases]) => {
  const s = await import(url);
  const bad = [];
  const fixed = (list) => { const w = list.map(BigInt); let i = 0;
    const next = () => { if (i >= w.length) throw new Error("ran out of words"); return w[i++]; };
    next.used = () => i; return next; };
  for (const c of cases.numeric || []) {
    const next = fixed(c.words);
    const z = s.discretize(c.x, c.low, c.high, next);
    const outputs = c.chain ? s.chain(z, c.chain, 2, next) : undefined;
    if (z !== c.z || next.used() !== c.words_used || JSON.stringify(outputs) !== JSON.stringify(c.outputs)) {
      bad.push({numeric: c, z, outputs, used: next.used()});
    }
  }
  for (const c of cases.bloom || []) {
    const got = s.bloomPositions(c.cohort, c.string, c.num_bits, c.num_hashes);
    if (JSON.stringify(got) !== JSON.stringify(c.positions)) bad.push({bloom: c, got});
  }
  for (const c of cases.bloom_bits || []) {
    const got = s.bloomBits(c.cohort, c.string, c.num_bits, c.num_hashes).join("");
    if (got !== c.bits) bad.push({bloom_bits: c, got});
  }
  for (const c of cases.draw || []) {
    const got = s.drawEpsilon(c.eps, c.divisor);
    if (s.compareEpsilons(got, c.draw) !== 0) bad.push({draw: c, got});
  }
  for (const c of cases.chains || []) {
    const next = fixed(c.words);
    const got = c.head_epsilon ? s.bloomChains(c.bits, c.epsilons, c.divisor, next, c.head_epsilon, c.head_outputs)
                               : s.bloomChains(c.bits, c.epsilons, c.divisor, next);
    if (JSON.stringify(got) !== JSON.stringify(c.outputs) || next.used() !== c.words_used) {
      bad.push({chain: c.outputs, got, used: next.used(), words_used: c.words_used});
    }
  }
  return {bad: bad.slice(0, 10), count: bad.length};
}"""


@needs_chromium
def test_the_javascript_numeric_and_string_sampling_is_the_servers(live_server, browser_page):
    cases = _server_kinds_cases()
    assert any(c["z"] == 1 for c in cases["numeric"]) and any(c["z"] == 0 for c in cases["numeric"])
    assert any(c["words_used"] > 3 * len(c["bits"]) for c in cases["chains"]), "ties and rejections exercised"
    open_module_origin(browser_page, live_server.url)
    shared = _shared_kinds_cases()
    assert all(shared.values()) and any(c.get("head_epsilon") for c in shared["chains"])
    for name, these in (("the service's code", cases), ("custody_vectors.json", shared)):
        result = browser_page.evaluate(CHECK_KINDS, [MODULE, these])
        assert result["count"] == 0, (f"{name}: {result['count']} disagreements, the first: "
                                      f"{json.dumps(result['bad'], indent=1)}")


# Runs in the page with the browser's CSPRNG: n numeric values x (each discretized once, then z's chain) and n
# strings' Bloom bit chains; returns the counts of the three outputs (a cell 0..7), by z for numbers (z is known
# here, in the test) and by true bit for strings.
DRAW_KINDS = """async ([url, n, x, low, high, eps, bits, divisor]) => {
  const s = await import(url);
  const words = s.secureWords();
  const numeric = [new Array(8).fill(0), new Array(8).fill(0)], strings = [new Array(8).fill(0), new Array(8).fill(0)];
  for (let r = 0; r < n; r++) {
    const z = s.discretize(x, low, high, words);
    const o = s.chain(z, eps, 2, words);
    numeric[z][(o[0] << 2) | (o[1] << 1) | o[2]] += 1;
  }
  for (let r = 0; r < n / 8; r++) {
    const t = s.bloomChains(bits, eps, divisor, words);
    bits.forEach((a, j) => { strings[a][(+t[0][j] << 2) | (+t[1][j] << 1) | +t[2][j]] += 1; });
  }
  return {numeric, strings};
}"""


@pytest.mark.slow
@needs_chromium
def test_the_javascript_numeric_and_string_chains_follow_the_exact_laws_with_the_browsers_csprng(
        live_server, browser_page):
    """Issue 32: z is 1 with probability (x - low)/(high - low) and z's chain follows the binary chain law; a
    string's bits follow the chain law at epsilon / divisor (chi-square at ``ALPHA``; not seeded: the browser's
    CSPRNG), and the data reject a device that forgot the divisor."""
    from tests.mechanisms.test_exact import joint_law

    open_module_origin(browser_page, live_server.url)
    eps, divisor = ["0.5", "1", "2"], 4
    bits = [1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0]
    got = browser_page.evaluate(DRAW_KINDS, [MODULE, DRAWS, "30", "0", "100", eps, bits, divisor])
    numeric, strings = np.array(got["numeric"]), np.array(got["strings"])
    # z ~ Bernoulli(0.3), then each z's chain
    ones = int(numeric[1].sum())
    stat, df, p = chi_square(np.array([[DRAWS - ones, ones]]), np.array([[0.7, 0.3]]))
    assert p > ALPHA, f"z: chi2 = {stat:.1f}, p = {p:.2e}"
    law = np.array([joint_law([float(e) for e in eps], 2, a).reshape(-1) for a in (0, 1)])
    stat, df, p = chi_square(numeric, law)
    assert p > ALPHA, f"numeric chains: chi2 = {stat:.1f}, df = {df}, p = {p:.2e}"
    drawn = [float(Decimal(e) / divisor) for e in eps]
    law = np.array([joint_law(drawn, 2, a).reshape(-1) for a in (0, 1)])
    stat, df, p = chi_square(strings, law)
    assert p > ALPHA, f"string bits: chi2 = {stat:.1f}, df = {df}, p = {p:.2e}"
    full = np.array([joint_law([float(e) for e in eps], 2, a).reshape(-1) for a in (0, 1)])
    assert power(strings.sum(axis=1), law, full) > 0.999
    assert chi_square(strings, full)[2] < ALPHA, "the data reject bits drawn at the full epsilon"
