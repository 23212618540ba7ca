// Numeric and string values in the portal's owner sampler (portal/static/portal/owner_sampler.js; docs/custody.md,
// issue 32): SHAKE-256 against Node's own, and chi-square tests with fixed seeds (a splitmix64 word source, so
// every run draws the same words) of the one-time discretization, a numeric value's chain and a string's batch of
// Bloom bit chains against their exact integer laws.  tests/portal/test_owner_sampler_js.py checks the same
// functions against the service's own code, word for word, in Chromium.
// Run: node --test tests/js/  (Node 20.19+, no packages).

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import * as s from "../../portal/static/portal/owner_sampler.js";

const ALPHA = 1e-7;   // as the Python statistical tests (tests/market/stats.py)
const MASK = (1n << 64n) - 1n;
const TWO_64 = 2 ** 64;

/** splitmix64 from `seed`: a reproducible word source (BigInts in [0, 2^64)), for tests only. */
function seeded(seed) {
  let x = BigInt(seed);
  return () => {
    x = (x + 0x9e3779b97f4a7c15n) & MASK;
    let z = x;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK;
    return z ^ (z >> 31n);
  };
}

// ------------------------------------------------------------------ chi-square

function logGamma(x) {   // Lanczos (g = 7, n = 9), relative error below 1e-13 for x > 0
  const c = [0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
    -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7];
  if (x < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x)) - logGamma(1 - x);
  x -= 1;
  let a = c[0];
  const t = x + 7.5;
  for (let i = 1; i < 9; i++) a += c[i] / (x + i);
  return 0.5 * Math.log(2 * Math.PI) + (x + 0.5) * Math.log(t) - t + Math.log(a);
}

/** The regularized upper incomplete gamma Q(a, x) (series below a + 1, continued fraction above). */
function gammaQ(a, x) {
  if (x <= 0) return 1;
  const front = Math.exp(-x + a * Math.log(x) - logGamma(a));
  if (x < a + 1) {
    let sum = 1 / a, term = sum;
    for (let n = 1; n < 1000; n++) {
      term *= x / (a + n);
      sum += term;
      if (Math.abs(term) < Math.abs(sum) * 1e-15) break;
    }
    return 1 - sum * front;
  }
  let b = x + 1 - a, c = 1e300, d = 1 / b, h = d;   // Lentz
  for (let i = 1; i < 1000; i++) {
    const an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (Math.abs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (Math.abs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const delta = d * c;
    h *= delta;
    if (Math.abs(delta - 1) < 1e-15) break;
  }
  return front * h;
}

/** Pooled chi-square of count rows against probability rows: {stat, df, p}. */
function chiSquare(counts, probs) {
  let stat = 0, cells = 0;
  counts.forEach((row, g) => {
    const n = row.reduce((a, b) => a + b, 0);
    row.forEach((c, k) => {
      const e = probs[g][k] * n;
      assert.ok(e >= 5, "too few expected counts for the chi-square approximation");
      stat += (c - e) ** 2 / e;
      cells += 1;
    });
  });
  const df = cells - counts.length;
  return { stat, df, p: gammaQ(df / 2, stat / 2) };
}

test("the chi-square tail is right (against known quantiles)", () => {
  // chi2.isf(alpha, df): 3.841 (0.05, 1), 23.685 (0.05, 14), 28.374 (1e-7, 1), 15.507 (0.05, 8)
  assert.ok(Math.abs(gammaQ(0.5, 3.841459 / 2) - 0.05) < 1e-6);
  assert.ok(Math.abs(gammaQ(7, 23.684791 / 2) - 0.05) < 1e-6);
  assert.ok(Math.abs(gammaQ(0.5, 28.373987 / 2) - 1e-7) < 1e-11);
  assert.ok(Math.abs(gammaQ(4, 15.507313 / 2) - 0.05) < 1e-6);
});

// ------------------------------------------------------------------ exact laws of the binary chains

const ratio = (a, b) => Number((a * 2n ** 53n) / b) / 2 ** 53;

/** P(output = 1 | true bit a) of binary k-RR at eps: keep / total, exactly as drawn. */
function krrOne(a, eps) {
  const c = s.krrCells(eps, 2);
  const keep = ratio(c.keep, c.total);
  return a === 1 ? keep : 1 - keep;
}

/** P(next output = 1 | previous output prev, true bit a) of the step epsFrom -> epsTo. */
function stepOne(prev, a, epsFrom, epsTo) {
  const { kept, moved } = s.stepWeights(epsFrom, epsTo, 2);
  const w = prev === a ? kept : moved;
  const total = w.first + w.second + BigInt(w.nOthers) * w.other;
  const pTrue = ratio(w.first, total);              // the next output is a with probability first / total
  return a === 1 ? pTrue : 1 - pTrue;
}

/** The law of a binary chain's outputs (o_0, ..., o_{L-1}) for true bit a: 2^L cells, o_0 the high bit. */
function chainLaw(a, epsilons) {
  const L = epsilons.length, law = [];
  for (let cell = 0; cell < 2 ** L; cell++) {
    let p = 1, prev = null;
    for (let i = 0; i < L; i++) {
      const o = (cell >> (L - 1 - i)) & 1;
      const one = prev === null ? krrOne(a, epsilons[i]) : stepOne(prev, a, epsilons[i - 1], epsilons[i]);
      p *= o ? one : 1 - one;
      prev = o;
    }
    law.push(p);
  }
  return law;
}

// ------------------------------------------------------------------ SHAKE-256 and the Bloom filter

describe("SHAKE-256 and the Bloom filter", () => {
  test("shake256 is Node's SHAKE-256 for every length around the rate (136 bytes)", () => {
    const words = seeded(1);
    for (const n of [0, 1, 7, 8, 9, 100, 134, 135, 136, 137, 271, 272, 273, 600]) {
      const input = Uint8Array.from({ length: n }, () => Number(words() & 0xffn));
      for (const out of [1, 8, 32, 136, 137, 300]) {
        const want = createHash("shake256", { outputLength: out }).update(input).digest("hex");
        assert.equal(Buffer.from(s.shake256(input, out)).toString("hex"), want, `${n} bytes in, ${out} out`);
      }
    }
  });

  test("the Bloom positions are the big-endian words of SHAKE-256 of '<cohort>:<string>' modulo num_bits", () => {
    for (const [cohort, text, bits, hashes] of [[0, "a", 8, 1], [3, "Schlüssel", 16, 2], [9, "日本語", 1000, 7]]) {
      const digest = createHash("shake256", { outputLength: 8 * hashes }).update(`${cohort}:${text}`, "utf8").digest();
      const want = Array.from({ length: hashes }, (_, j) => Number(digest.readBigUInt64BE(8 * j) % BigInt(bits)));
      assert.deepEqual(s.bloomPositions(cohort, text, bits, hashes), want);
      const filter = s.bloomBits(cohort, text, bits, hashes);
      assert.equal(filter.length, bits);
      assert.deepEqual([...new Set(want)].sort((x, y) => x - y), filter.flatMap((b, j) => (b ? [j] : [])));
    }
  });

  test("what the service refuses as a string value is refused", () => {
    assert.throws(() => s.checkText(""), RangeError);
    assert.throws(() => s.checkText("x".repeat(201)), RangeError);
    assert.equal(s.checkText("🙂".repeat(200)), "🙂".repeat(200), "200 characters, 400 UTF-16 units");
    assert.throws(() => s.checkText("a\uD800b"), RangeError, "a lone surrogate has no UTF-8");
    assert.throws(() => s.bloomBits(-1, "a", 8, 1), RangeError);
    assert.throws(() => s.bloomBits(0, "a", 0, 1), RangeError);
  });
});

// ------------------------------------------------------------------ numeric values

describe("numeric values: the one-time discretization", () => {
  test("z = 1 iff the word is below floor(p 2^64); always 1 at high, never at low; one word each", () => {
    const t = s.numericThreshold("37.5", "0", "100");
    assert.equal(t, BigInt(0.375 * TWO_64));
    for (const [u, z] of [[0n, 1], [t - 1n, 1], [t, 0], [MASK, 0]]) {
      let used = 0;
      assert.equal(s.discretize("37.5", "0", "100", () => { used += 1; return u; }), z);
      assert.equal(used, 1);
    }
    assert.equal(s.numericThreshold("100", "0", "100"), null);
    assert.equal(s.discretize("100", "0", "100", () => MASK), 1);
    assert.equal(s.discretize("0", "0", "100", () => 0n), 0);
    assert.throws(() => s.discretize("100.0000001", "0", "100"), RangeError);
    assert.throws(() => s.discretize("-1", "0", "100"), RangeError);
    assert.throws(() => s.discretize("1e3", "0", "10000"), RangeError);
    assert.throws(() => s.discretize("5", "10", "10"), RangeError);
  });

  test("z follows Bernoulli((x - low) / (high - low)) (chi-square, fixed seed) and detects a 2% shift", () => {
    const n = 100000;
    for (const [x, low, high, seed] of [["37.5", "0", "100", 11], ["-0.25", "-1", "1", 12], ["0.07", "0", "1", 13]]) {
      const words = seeded(seed);
      let ones = 0;
      for (let i = 0; i < n; i++) ones += s.discretize(x, low, high, words);
      const p = Number(s.numericThreshold(x, low, high)) / TWO_64;
      const got = chiSquare([[ones, n - ones]], [[p, 1 - p]]);
      assert.ok(got.p > ALPHA, `x = ${x}: chi2 = ${got.stat.toFixed(1)}, p = ${got.p.toExponential(2)}`);
      const wrong = chiSquare([[ones, n - ones]], [[p + 0.02, 1 - p - 0.02]]);
      assert.ok(wrong.p < ALPHA, `x = ${x}: a law 0.02 off is not rejected (p = ${wrong.p.toExponential(2)})`);
    }
  });

  test("a numeric value's chain: z once, then z's binary chain (the joint law of its outputs)", () => {
    const eps = ["0.5", "1", "2"], n = 40000, words = seeded(21);
    const p = Number(s.numericThreshold("30", "0", "100")) / TWO_64;
    const counts = new Array(8).fill(0);
    for (let i = 0; i < n; i++) {
      const z = s.discretize("30", "0", "100", words);
      const out = s.chain(z, eps, 2, words);
      counts[(out[0] << 2) | (out[1] << 1) | out[2]] += 1;
    }
    const [law0, law1] = [chainLaw(0, eps), chainLaw(1, eps)];
    const law = law0.map((q, k) => (1 - p) * q + p * law1[k]);
    const got = chiSquare([counts], [law]);
    assert.ok(got.p > ALPHA, `chi2 = ${got.stat.toFixed(1)}, df = ${got.df}, p = ${got.p.toExponential(2)}`);
    // a z drawn afresh for every epsilon (outputs independent given x) is another law, and rejected
    const fresh = [0, 1, 2, 3, 4, 5, 6, 7].map((cell) => eps.reduce((acc, e, i) => {
      const o = (cell >> (2 - i)) & 1;
      const one = (1 - p) * krrOne(0, e) + p * krrOne(1, e);
      return acc * (o ? one : 1 - one);
    }, 1));
    assert.ok(chiSquare([counts], [fresh]).p < ALPHA, "independent draws per epsilon are rejected");
  });
});

// ------------------------------------------------------------------ strings: the Bloom bits' chains

describe("strings: each Bloom bit's chain at epsilon / (2 num_hashes)", () => {
  test("drawEpsilon divides exactly, rounding down to 40 significant digits", () => {
    assert.equal(s.drawEpsilon("0.5", 4), "0.125");
    assert.equal(s.drawEpsilon("1", 3), `0.${"3".repeat(40)}`);
    assert.equal(s.drawEpsilon("2", 3), `0.${"6".repeat(40)}`, "down, not to nearest");
    assert.equal(s.drawEpsilon("30", 1), "30");
    assert.throws(() => s.drawEpsilon("1", 0), RangeError);
  });

  test("a string's chains: step-major (all bits per epsilon), one text of num_bits characters per epsilon", () => {
    const bits = [0, 1, 1, 0, 0, 0, 1, 0, 1, 1];
    const eps = ["0.5", "1", "1.5"], draw = eps.map((e) => s.drawEpsilon(e, 4));
    const out = s.bloomChains(bits, eps, 4, seeded(5));
    // the words of a pass, one per bit (no word here ties or is rejected): bit j's output at step i from word
    // i * bits.length + j, as the service's vectorized draws (market.chains.grow)
    const words = seeded(5), byStep = draw.map(() => bits.map(() => words()));
    const rows = bits.map((b, j) => {
      let i = 0;
      const next = () => byStep[i++][j];
      return s.chain(b, draw, 2, next);
    });
    assert.deepEqual(out, draw.map((_, i) => rows.map((r) => r[i]).join("")));
    for (const text of out) assert.match(text, /^[01]{10}$/);
    const more = s.bloomChains(bits, ["2", "2.5"], 4, seeded(6), "1.5", out[2]);
    const again = seeded(6), extWords = [0, 1].map(() => bits.map(() => again()));
    const ext = bits.map((b, j) => {
      let i = 0;
      return s.extend(b, draw[2], +out[2][j], ["0.5", "0.625"], 2, () => extWords[i++][j]);
    });
    assert.deepEqual(more, [0, 1].map((i) => ext.map((r) => r[i]).join("")));
    assert.throws(() => s.bloomChains(bits, ["1"], 4, seeded(1), "0.5", "01"), RangeError);
  });

  test("every bit's outputs follow the chain law at epsilon / 4 (chi-square, fixed seed), not at epsilon", () => {
    const bits = [1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0];
    const eps = ["0.5", "1", "1.5"], divisor = 4, n = 6000, words = seeded(7);
    const counts = [new Array(8).fill(0), new Array(8).fill(0)];   // by true bit, the 3 outputs as a cell
    for (let r = 0; r < n; r++) {
      const out = s.bloomChains(bits, eps, divisor, words);
      bits.forEach((a, j) => { counts[a][(+out[0][j] << 2) | (+out[1][j] << 1) | +out[2][j]] += 1; });
    }
    const drawn = eps.map((e) => s.drawEpsilon(e, divisor));
    const law = [chainLaw(0, drawn), chainLaw(1, drawn)];
    const got = chiSquare(counts, law);
    assert.ok(got.p > ALPHA, `chi2 = ${got.stat.toFixed(1)}, df = ${got.df}, p = ${got.p.toExponential(2)}`);
    const full = [chainLaw(0, eps), chainLaw(1, eps)];         // a device forgetting the divisor
    assert.ok(chiSquare(counts, full).p < ALPHA, "the law at the full epsilon is rejected");
  });
});

// ------------------------------------------------------------------ the shared vectors

// tests/data/custody_vectors.json: the server's own code on fixed inputs and words (tests/client/make_custody_vectors.py),
// also checked against the Python SDK (tests/client/) and, in Chromium, by tests/portal/test_owner_sampler_js.py.
const VECTORS = JSON.parse(readFileSync(new URL("../data/custody_vectors.json", import.meta.url), "utf8"));

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

describe("the shared custody vectors (numeric and string values)", () => {
  test("they hold every kind of case", () => {
    for (const key of ["discretize", "bloom", "numeric_chain", "string_chain", "string_extend"]) {
      assert.ok(VECTORS[key].length, key);
    }
  });

  test("discretize: the server's threshold and z from the same word", () => {
    const bad = [];
    for (const c of VECTORS.discretize) {
      const t = s.numericThreshold(c.x, c.low, c.high);
      const next = fixedWords(c.words);
      const z = s.discretize(c.x, c.low, c.high, next);
      if (String(t ?? 2n ** 64n) !== c.threshold || z !== c.z || next.used() !== c.words_used) bad.push({ c, t, z });
    }
    assert.deepEqual(bad.slice(0, 3), [], `${bad.length} of ${VECTORS.discretize.length} disagree`);
  });

  test("bloom: the server's Bloom filters", () => {
    for (const c of VECTORS.bloom) {
      assert.equal(s.bloomBits(c.cohort, c.string, c.num_bits, c.num_hashes).join(""), c.bits, JSON.stringify(c));
    }
  });

  test("numeric_chain: z, then its chain, from one word source", () => {
    for (const c of VECTORS.numeric_chain) {
      const next = fixedWords(c.words);
      const z = s.discretize(c.x, c.low, c.high, next);
      assert.equal(z, c.z);
      assert.deepEqual(s.chain(z, c.epsilons, 2, next), c.outputs);
      assert.equal(next.used(), c.words_used);
    }
  });

  test("string_chain and string_extend: the Bloom bits' chains, as uploaded", () => {
    for (const c of VECTORS.string_chain) {
      assert.equal(s.bloomBits(c.cohort, c.string, c.num_bits, c.num_hashes).join(""), c.bits);
      assert.equal(c.divisor, 2 * c.num_hashes);
      const next = fixedWords(c.words);
      assert.deepEqual(s.bloomChains([...c.bits].map(Number), c.epsilons, c.divisor, next), c.outputs);
      assert.equal(next.used(), c.words_used);
    }
    for (const c of VECTORS.string_extend) {
      const next = fixedWords(c.words);
      const got = s.bloomChains([...c.bits].map(Number), c.epsilons, c.divisor, next, c.head_epsilon, c.head_outputs);
      assert.deepEqual(got, c.outputs);
      assert.equal(next.used(), c.words_used);
    }
  });
});
