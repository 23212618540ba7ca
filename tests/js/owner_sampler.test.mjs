// The portal's owner sampler (portal/static/portal/owner_sampler.js: pure, no DOM) in Node: every law, step and
// case of the shared vectors tests/data/sampler_vectors.json (the server's mechanisms on fixed 64-bit words;
// tests/client/make_sampler_vectors.py) is drawn bit for bit, and what the server refuses is refused.
// tests/portal/test_owner_sampler_js.py runs the same vectors in Chromium, with the browser's CSPRNG.
// Run: node --test tests/js/  (Node 20.19+, no packages).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import * as s from "../../portal/static/portal/owner_sampler.js";

const VECTORS = JSON.parse(readFileSync(new URL("../data/sampler_vectors.json", import.meta.url), "utf8"));

/** A word source handing out `words` (decimal strings) in order; `used()` counts the words taken. */
function fixedWords(words) {
  const list = words.map(BigInt);
  let used = 0;
  const next = () => {
    if (used >= list.length) throw new Error("the case ran out of words");
    return list[used++];
  };
  next.used = () => used;
  return next;
}

const row = (r) => ({
  first: String(r.first), second: String(r.second), other: String(r.other), n_others: r.nOthers,
});

describe("the shared sampler vectors", () => {
  test("the vectors hold laws, steps and both operations, ties included", () => {
    assert.ok(VECTORS.laws.length && VECTORS.steps.length && VECTORS.cases.length);
    assert.deepEqual(new Set(VECTORS.cases.map((c) => c.op)), new Set(["krr", "relax"]));
    assert.ok(Math.max(...VECTORS.cases.map((c) => c.words_used)) > 1, "a case reads more than one word");
  });

  test("every k-RR law: the server's integer cells", () => {
    const bad = [];
    for (const law of VECTORS.laws) {
      const c = s.krrCells(law.eps, law.m);
      const got = { keep: String(c.keep), flip: String(c.flip), total: String(c.total) };
      if (got.keep !== law.keep || got.flip !== law.flip || got.total !== law.total) bad.push({ law, got });
    }
    assert.deepEqual(bad, []);
  });

  test("every relaxation step: the server's integer rows", () => {
    const bad = [];
    for (const step of VECTORS.steps) {
      const w = s.stepWeights(step.eps_from, step.eps_to, step.m);
      const got = { kept: row(w.kept), moved: row(w.moved) };
      if (JSON.stringify(got) !== JSON.stringify({ kept: step.kept, moved: step.moved })) bad.push({ step, got });
    }
    assert.deepEqual(bad, []);
  });

  test("every case: the server's output from the same words, and as many words", () => {
    const bad = [];
    for (const c of VECTORS.cases) {
      const next = fixedWords(c.words);
      let output;
      try {
        output = c.op === "krr" ? s.krr(c.value, c.eps, c.m, next)
          : s.relax(c.previous, c.value, c.eps_from, c.eps_to, c.m, next);
      } catch (e) {
        output = String(e);
      }
      if (output !== c.output || next.used() !== c.words_used) bad.push({ case: c, output, used: next.used() });
    }
    assert.deepEqual(bad.slice(0, 5), [], `${bad.length} of ${VECTORS.cases.length} cases disagree`);
  });

  test("a chain is k-RR at its first epsilon, then one step per further epsilon, from one word source", () => {
    // the cases' words, concatenated: chain() reads them in the order krr() then relax() do
    const krr = VECTORS.cases.find((c) => c.op === "krr" && c.m === 4 && c.eps !== "0");
    const words = [...krr.words.slice(0, krr.words_used), ...Array(16).fill(String(2n ** 63n))];
    const first = s.krr(krr.value, krr.eps, 4, fixedWords(words));
    const next = fixedWords(words);
    const out = s.chain(krr.value, [krr.eps, "20", "30"], 4, next);
    assert.equal(out[0], first);
    assert.equal(out.length, 3);
    const again = s.extend(krr.value, krr.eps, out[0], ["20", "30"], 4, fixedWords(words.slice(krr.words_used)));
    assert.deepEqual(again, out.slice(1));
  });
});

describe("refusals", () => {
  const name = (f) => {
    try {
      f();
      return null;
    } catch (e) {
      return e.name;
    }
  };

  test("what the server refuses (as tests/portal/test_owner_sampler_js.py in Chromium)", () => {
    assert.deepEqual([
      name(() => s.krrCells("30.000001", 3)),        // above SAMPLER_EPS_MAX
      name(() => s.krrCells("-1", 3)),
      name(() => s.krrCells("1e3", 3)),               // decimal strings only
      name(() => s.krrCells("1", 1)),                 // m >= 2
      name(() => s.stepWeights("1", "1", 3)),         // a step goes up
      name(() => s.krr(3, "1", 3)),                   // a label of the domain
      name(() => s.krr(0, "1", 3, () => 1n << 64n)),  // words are 64-bit
      name(() => s.relax(0, 3, "1", "2", 3)),
      name(() => s.chain(0, [], 3)),
      name(() => s.krrCells("30", 3)),
    ], [...Array(9).fill("RangeError"), null]);
  });

  // Epsilons around the smallest one k-RR over m labels can realise with 64-bit cells, ln(1 + r/q) with
  // q = floor(2^64 / m), r = 2^64 mod m: tests/data/sampler_smallest_eps.json, the server's answers
  // (tests/portal/test_owner_sampler_js.py checks them against mechanisms.exactness.krr_cells).
  const SMALLEST = JSON.parse(readFileSync(new URL("../data/sampler_smallest_eps.json", import.meta.url),
                                          "utf8")).cases;

  test("an epsilon too small for 64-bit cells is refused as on the server", () => {
    assert.ok(SMALLEST.some((c) => c[2] === null) && SMALLEST.some((c) => c[2] !== null && c[1] % 2));
    for (const [eps, m, expected] of SMALLEST) {
      if (expected === null) {
        const refusal = (e) => e instanceof RangeError && /too small for k-RR over/.test(e.message)
          && e.message.includes(`m = ${m} is about`);
        assert.throws(() => s.krrCells(eps, m), refusal, `eps ${eps}, m ${m}`);
        assert.throws(() => s.krr(0, eps, m, () => 0n), RangeError);
        assert.throws(() => s.stepWeights(eps, "1", m), RangeError);
      } else {
        const c = s.krrCells(eps, m);
        assert.deepEqual([String(c.keep), String(c.flip)], expected, `eps ${eps}, m ${m}`);
        assert.ok(c.keep >= c.flip);
        assert.equal(c.keep + BigInt(m - 1) * c.flip, 2n ** 64n);
      }
    }
  });

  test("the refusal's message states the smallest epsilon", () => {
    assert.throws(() => s.krrCells("0.00000000000001", 1000), /smallest epsilon for m = 1000 is about 3\.34e-14/);
  });
});

describe("words", () => {
  test("secureWords: 64-bit BigInts from the CSPRNG", () => {
    const next = s.secureWords();
    const seen = new Set();
    for (let i = 0; i < 600; i++) {         // past the 256-word buffer, twice
      const w = next();
      assert.equal(typeof w, "bigint");
      assert.ok(w >= 0n && w < 2n ** 64n);
      seen.add(w);
    }
    assert.equal(seen.size, 600);
  });

  test("k-RR and chains with the default source stay in the domain", () => {
    for (let i = 0; i < 200; i++) {
      const out = s.chain(i % 5, ["0", "0.5", "1.25"], 5);
      assert.equal(out.length, 3);
      for (const o of out) assert.ok(Number.isInteger(o) && o >= 0 && o < 5);
    }
  });
});

describe("epsilons", () => {
  test("parseEpsilon and compareEpsilons are exact", () => {
    assert.deepEqual(s.parseEpsilon("0.50"), { p: 1n, q: 2n });
    assert.deepEqual(s.parseEpsilon(" 2 "), { p: 2n, q: 1n });
    assert.equal(s.compareEpsilons("1.000001", "1.0000010"), 0);
    assert.equal(s.compareEpsilons("0.1", "0.10000000000000000001"), -1);
    assert.equal(s.compareEpsilons("3", "2.999999"), 1);
  });

  test("expBounds brackets e^x tightly", () => {
    for (const [p, q] of [[1n, 1n], [1n, 2n], [30n, 1n], [1n, 1000000n]]) {
      const [[ln, ld], [hn, hd]] = s.expBounds(p, q);
      const x = Number(p) / Number(q);
      assert.ok(ln * hd < hn * ld, "lo < hi");
      assert.ok(Math.abs(Number(ln * 10n ** 15n / ld) / 1e15 / Math.exp(x) - 1) < 1e-12, `e^${x}`);
      assert.ok((hn * ld - ln * hd) * 10n ** 74n <= ln * hd, "hi / lo - 1 <= 1e-74");
    }
  });
});
