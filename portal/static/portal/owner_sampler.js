// The server's gradual-release sampler for ONE value, bit for bit, in the owner's browser (docs/custody.md).
//
// Same integer laws as mechanisms/exactness.py and the same consumption of uniform 64-bit words as
// mechanisms/_sampling.py (draw_weighted) and mechanisms/random.py (uniform_below): fed the same words,
// krr/relax/chain return the server's outputs and use exactly as many words.  Randomness is
// crypto.getRandomValues (the OS CSPRNG) unless a word source is passed: a function returning the next
// word as a BigInt in [0, 2^64).  Hand-written, no build step, no dependencies.
//
// Numeric and string values (docs/custody.md): discretize (mechanisms.numeric.discretize of one number, one
// word), bloomBits (mechanisms.rappor.bloom_bits, with its own SHAKE-256) and bloomChains (a binary chain per
// Bloom bit, all bits step by step as the service's batched growth draws them, each output at drawEpsilon(eps,
// 2 num_hashes), market.chains.grow.draw_epsilon), as the Python SDK (ldpmarket_client.sampler) and
// tests/data/custody_vectors.json.
//
// Laws (docs/mechanisms.md, "Exact sampling"):
//   k-RR at eps over m labels: each other label gets flip = ceil(2^64 / (L + m - 1)) cells of 2^-64 and the
//   true label keep = 2^64 - (m - 1) flip, where L = exp_lower(eps, 60 digits) < e^eps on the server
//   (Python decimal).  eps = 0: exactly uniform (keep = flip = 1 of m).  An eps so small that keep < flip is
//   refused (RangeError), as on the server: its realised level would be ln(flip / keep) > eps.
//   Relaxation step lo -> hi with cells (K_lo, R_lo), (K_hi, R_hi) over a common total, D = K_hi - R_hi,
//   stay = K_lo - R_hi, move = R_lo - R_hi:
//     kept  (previous output = a):      a: K_hi stay,  each of the m - 1 others: R_hi move
//     moved (previous output = b != a): a: K_hi move,  b: R_hi stay,  each of the m - 2 others: R_hi move
//
// exp_lower in integers: e^eps for eps = p/q is bracketed by rationals lo <= e^eps <= hi (Taylor series,
// exact BigInt sums, tail bound below), hi/lo - 1 <= 2e-75.  The server's L satisfies
// e^eps (1 - 1e-58) < L < e^eps (it is e^eps correctly rounded to 70 digits, one unit lower, floored to 60
// digits, one unit lower: less than 2 units of the 60th digit, i.e. below 2e-59 relative).  flip is a
// decreasing function of L, so ceil(2^64 / (hi + m - 1)) <= flip <= ceil(2^64 / (lo (1 - 1e-58) + m - 1));
// when both ends agree (always, unless 2^64 / (L + m - 1) lies within ~1e-39 of an integer) that is the
// server's flip, proven; otherwise krrCells throws rather than guess.

const TWO_64 = 1n << 64n;
const U64_MAX = TWO_64 - 1n;
/** Largest epsilon the samplers honour (mechanisms.exactness.SAMPLER_EPS_MAX). */
export const SAMPLER_EPS_MAX = 30n;
const MARGIN = 10n ** 58n;        // the server's L is above e^eps (1 - 1/MARGIN)
const TAIL = 10n ** 75n;          // relative width of our own bracket of e^eps

// ------------------------------------------------------------------ epsilons as exact rationals

function gcd(a, b) {
  while (b) [a, b] = [b, a % b];
  return a;
}

/** An epsilon given as a decimal string ("0.5", "2", "1.000001") as an exact reduced fraction {p, q}. */
export function parseEpsilon(text) {
  const s = String(text).trim();
  const m = /^(\d+)(?:\.(\d+))?$/.exec(s);
  if (!m) throw new RangeError(`an epsilon must be a non-negative decimal string, got ${JSON.stringify(text)}`);
  const frac = m[2] || "";
  let p = BigInt(m[1] + frac);
  let q = 10n ** BigInt(frac.length);
  const g = gcd(p, q);
  if (g > 1n) { p /= g; q /= g; }
  if (p > SAMPLER_EPS_MAX * q) throw new RangeError(`an epsilon must be at most ${SAMPLER_EPS_MAX}, got ${s}`);
  return { p, q };
}

function canonical(text) {
  const { p, q } = parseEpsilon(text);
  return `${p}/${q}`;
}

/** -1, 0 or 1 as the epsilon a is below, equal to or above b (decimal strings, compared exactly). */
export function compareEpsilons(a, b) {
  const x = parseEpsilon(a), y = parseEpsilon(b);
  const l = x.p * y.q, r = y.p * x.q;
  return l < r ? -1 : l > r ? 1 : 0;
}

function checkM(m) {
  if (!Number.isInteger(m) || m < 2) throw new RangeError(`m (the domain size) must be an integer >= 2, got ${m}`);
  return m;
}

function checkLabel(v, m, name) {
  if (!Number.isInteger(v) || v < 0 || v >= m) {
    throw new RangeError(`${name} must be an integer in 0..${m - 1}, got ${v}`);
  }
  return v;
}

// ------------------------------------------------------------------ e^(p/q) between two rationals

/**
 * Rationals lo = S_N and hi = S_N + 2 t_{N+1} with lo <= e^x <= hi for x = p/q >= 0, where
 * S_N = sum_{j<=N} x^j / j! (exact, by Horner) and t_j = x^j / j!.  N is the first index with
 * N + 2 >= 2x, so the tail sum_{j>N} t_j <= t_{N+1} / (1 - x/(N+2)) <= 2 t_{N+1}, and with
 * 2 t_{N+1} <= 1e-75 <= 1e-75 S_N (S_N >= 1).  Returns [[loNum, loDen], [hiNum, hiDen]].
 */
export function expBounds(p, q) {
  let tn = 1n, td = 1n, j = 0n;   // t_j = tn / td
  for (;;) {
    j += 1n;
    tn *= p;
    td *= q * j;
    // j = N + 1: stop when N + 2 = j + 1 >= 2x and 2 t_{N+1} <= 1e-75
    if (q * (j + 1n) >= 2n * p && 2n * tn * TAIL <= td) break;
  }
  const N = j - 1n;
  let num = 1n, den = 1n;         // Horner: r = 1 + (x / k) r for k = N .. 1
  for (let k = N; k >= 1n; k -= 1n) {
    const d = q * k * den;
    num = d + p * num;
    den = d;
  }
  return [[num, den], [num * td + 2n * tn * den, den * td]];
}

// ------------------------------------------------------------------ the integer laws

function ceilDiv(a, b) {
  return (a + b - 1n) / b;   // a, b > 0
}

const cellsCache = new Map();

/**
 * k-RR at eps over m labels in integer cells: {keep, flip, total} (BigInt), as mechanisms.exactness.krr_cells.
 * Throws a RangeError, as the server refuses it, for an eps so small that keep < flip (the true value would
 * get fewer cells than each other label: exp_lower(eps) < 1 + r/q with q = floor(2^64 / m), r = 2^64 mod m,
 * below about m^2 / 2^64; never for m a power of two down to about 1e-58).  Throws an Error if the bracket of
 * e^eps cannot decide the server's ceiling (see the header; never seen in practice).
 */
export function krrCells(eps, m) {
  checkM(m);
  const key = `${canonical(eps)}|${m}`;
  let cells = cellsCache.get(key);
  if (cells) return cells;
  const { p, q } = parseEpsilon(eps);
  const m1 = BigInt(m - 1);
  if (p === 0n) {
    cells = { keep: 1n, flip: 1n, total: BigInt(m) };
  } else {
    const [[ln, ld], [hn, hd]] = expBounds(p, q);
    // flip(L) = ceil(2^64 / (L + m - 1)) = ceil(2^64 den / (num + (m - 1) den)), decreasing in L
    const low = ceilDiv(TWO_64 * hd, hn + m1 * hd);                       // at L = hi
    const ln2 = ln * (MARGIN - 1n), ld2 = ld * MARGIN;                  // lo (1 - 1e-58)
    const high = ceilDiv(TWO_64 * ld2, ln2 + m1 * ld2);
    if (low !== high) throw new Error(`cannot decide the k-RR cells at eps ${eps}, m ${m} (flip ${low} or ${high})`);
    const keep = TWO_64 - m1 * low;
    if (keep < low) {
      // the true value would get fewer cells than each other label: a level ln(flip / keep) above eps (the
      // header; mechanisms.exactness.krr_cells refuses it too)
      const q = TWO_64 / BigInt(m), r = TWO_64 % BigInt(m);
      const least = r ? Math.log1p(Number(r) / Number(q)) : 1.5e-59;
      throw new RangeError(`eps = ${eps} is too small for k-RR over ${m} values to be realised with 64-bit ` +
                           "thresholds: its cells would give the true value fewer units than each other value " +
                           `(the smallest epsilon for m = ${m} is about ${least.toPrecision(3)}; ` +
                           "docs/mechanisms.md, 'Exact sampling')");
    }
    cells = { keep, flip: low, total: TWO_64 };
  }
  cellsCache.set(key, cells);
  return cells;
}

const stepCache = new Map();

/**
 * The relaxation step epsFrom -> epsTo in integers, as mechanisms.exactness.step_weights: {kept, moved}, each a
 * row law {first, second, other, nOthers} (BigInt weights; nOthers a Number).  kept: previous output = the true
 * value a (first = a); moved: previous output b != a (first = a, second = b).
 */
export function stepWeights(epsFrom, epsTo, m) {
  checkM(m);
  if (compareEpsilons(epsTo, epsFrom) <= 0) {
    throw new RangeError(`eps_to must be greater than eps_from for a relaxation step, got ${epsFrom} -> ${epsTo}`);
  }
  const key = `${canonical(epsFrom)}|${canonical(epsTo)}|${m}`;
  let step = stepCache.get(key);
  if (step) return step;
  const lo = krrCells(epsFrom, m), hi = krrCells(epsTo, m);
  // one common total (both 2^64 unless eps_from = 0)
  const [fLo, fHi] = lo.total === hi.total ? [1n, 1n] : [hi.total, lo.total];
  const kLo = lo.keep * fLo, rLo = lo.flip * fLo, kHi = hi.keep * fHi, rHi = hi.flip * fHi;
  const d = kHi - rHi, stay = kLo - rHi, move = rLo - rHi;
  if (d <= 0n || stay < 0n || move < 0n) {
    throw new Error("the lower epsilon's law is not a degradation of the higher one's");
  }
  step = {
    kept: { first: kHi * stay, second: 0n, other: rHi * move, nOthers: m - 1 },
    moved: { first: kHi * move, second: rHi * stay, other: rHi * move, nOthers: m - 2 },
  };
  stepCache.set(key, step);
  return step;
}

// ------------------------------------------------------------------ words

/** A word source reading the OS CSPRNG (crypto.getRandomValues) 256 words at a time. */
export function secureWords() {
  const buf = new BigUint64Array(256);
  let i = buf.length;
  return () => {
    if (i === buf.length) { crypto.getRandomValues(buf); i = 0; }
    return buf[i++];
  };
}

function wordFrom(nextWord) {
  const w = nextWord();
  if (typeof w !== "bigint" || w < 0n || w > U64_MAX) {
    throw new RangeError(`a word must be a BigInt in [0, 2^64), got ${w}`);
  }
  return w;
}

// ------------------------------------------------------------------ drawing one row (mechanisms/_sampling.py)

function bitLength(n) {
  return n.toString(2).length;
}

const cutCache = new WeakMap();

// draw_weighted's _Cut: U uniform on [0, 2^bits), bits = bitlength(total) + 64, scale = floor(2^bits / total);
// thresholds (others end, second end, total scale); each threshold's top 64-bit word, and whether a top word
// equal to it leaves U undecided (a threshold of 2^bits is capped at 2^64 - 1, undecided).
function cutOf(w) {
  let cut = cutCache.get(w);
  if (cut) return cut;
  const total = w.first + w.second + BigInt(w.nOthers) * w.other;
  const bits = bitLength(total) + 64;
  const shift = BigInt(bits - 64);
  const scale = (1n << BigInt(bits)) / total;
  const othersEnd = BigInt(w.nOthers) * w.other * scale;
  const thresholds = [othersEnd, othersEnd + w.second * scale, total * scale];
  const low = (1n << shift) - 1n;
  const tops = thresholds.map((t) => {
    const top = t >> shift;
    return top > U64_MAX ? [U64_MAX, true] : [top, (t & low) !== 0n];
  });
  const width = w.other * scale;
  // the others' width in whole top words (k-RR: total 2^64), or 0
  const topWidth = width % (1n << shift) === 0n ? width >> shift : 0n;
  cut = { bits, shift, thresholds, tops, topWidth };
  cutCache.set(w, cut);
  return cut;
}

// The region of one row, 0 (others), 1 (second) or 2 (first), and U's top word: one word, more only when it
// equals an undecided threshold's top word (then ceil((bits - 64) / 64) words make U's low bits exactly, as
// _big_uniform), redrawn from scratch when U falls above total * scale (_regions, draw_weighted).
function region(cut, nextWord) {
  for (;;) {
    const u = wordFrom(nextWord);
    let r = 0, tied = false;
    for (const [top, open] of cut.tops) {
      if (u >= top) r += 1;
      if (u === top && open) tied = true;
    }
    if (tied) {
      const rest = cut.bits - 64, n = Math.ceil(rest / 64);
      let v = 0n;
      for (let i = 0; i < n; i++) v = (v << 64n) | wordFrom(nextWord);
      const big = (u << cut.shift) | (v >> BigInt(64 * n - rest));
      r = cut.thresholds.findIndex((t) => big < t);
      if (r < 0) r = 3;
    }
    if (r !== 3) return [r, u];
  }
}

// uniform_below: u // floor((2^64 - 1) / k), the top partial block rejected; exactly uniform on 0..k-1.
function uniformBelow(k, nextWord) {
  const kk = BigInt(k), block = U64_MAX / kk;
  for (;;) {
    const q = wordFrom(nextWord) / block;
    if (q < kk) return Number(q);
  }
}

// One output from row law w: first (region 2), second (region 1) or the k-th remaining label in increasing
// order (region 0), k from U's top word when the law alone is drawn and its widths allow it exactly
// (useTopWidth: k-RR), else a separate uniform draw (when more than one remains).
function drawRow(w, first, second, m, nextWord, useTopWidth) {
  const cut = cutOf(w);
  const [r, u] = region(cut, nextWord);
  if (r === 2) return first;
  if (r === 1) return second;
  let k;
  if (useTopWidth && cut.topWidth > 0n) k = Number(u / cut.topWidth);
  else if (w.nOthers > 1) k = uniformBelow(w.nOthers, nextWord);
  else k = 0;
  const lo = Math.min(first, second), hi = first === second ? m : Math.max(first, second);
  let other = k + (k >= lo ? 1 : 0);
  other += other >= hi ? 1 : 0;
  return other;
}

// ------------------------------------------------------------------ one value's rows in one batch

/** Rows per vectorized pass of the server's draw_weighted (mechanisms._sampling.BLOCK). */
const BLOCK = 1 << 14;

// The region of a row whose top word is u (the server's _regions for one row): 0, 1, 2 or 3 (rejected); further
// words only when u equals an undecided threshold's top word.
function regionOf(cut, u, nextWord) {
  let r = 0, tied = false;
  for (const [top, open] of cut.tops) {
    if (u >= top) r += 1;
    if (u === top && open) tied = true;
  }
  if (!tied) return r;
  const rest = cut.bits - 64, n = Math.ceil(rest / 64);
  let v = 0n;
  for (let i = 0; i < n; i++) v = (v << 64n) | wordFrom(nextWord);
  const big = (u << cut.shift) | (v >> BigInt(64 * n - rest));
  r = cut.thresholds.findIndex((t) => big < t);
  return r < 0 ? 3 : r;
}

// The vectorized uniform_below (mechanisms/random.py): one word per entry of ks, then one per rejected entry, in
// order, until none is left.
function uniformBelowBatch(ks, nextWord) {
  const out = new Array(ks.length).fill(0);
  let todo = ks.map((_, i) => i);
  while (todo.length) {
    const got = todo.map(() => wordFrom(nextWord));
    const left = [];
    todo.forEach((i, j) => {
      const kk = BigInt(ks[i]), q = got[j] / (U64_MAX / kk);
      if (q < kk) out[i] = Number(q);
      else left.push(i);
    });
    todo = left;
  }
  return out;
}

function drawBlock(rows, m, nextWord, useTopWidth) {
  const n = rows.length, cuts = rows.map((r) => cutOf(r.w));
  const u = new Array(n).fill(0n), region = new Array(n).fill(3);
  let todo = rows.map((_, i) => i);
  while (todo.length) {   // a word per row, then the tied rows' low bits in row order; the rejected rows again
    for (const i of todo) u[i] = wordFrom(nextWord);
    for (const i of todo) region[i] = regionOf(cuts[i], u[i], nextWord);
    todo = todo.filter((i) => region[i] === 3);
  }
  const out = rows.map((r, i) => (region[i] === 2 ? r.first : r.second));
  const others = [];
  region.forEach((r, i) => { if (r === 0) others.push(i); });
  if (!others.length) return out;
  const ks = others.map((i) => rows[i].w.nOthers);
  let picks;
  if (useTopWidth && cuts[0].topWidth > 0n) picks = others.map((i) => Number(u[i] / cuts[0].topWidth));
  else if (Math.max(...ks) > 1) picks = uniformBelowBatch(ks, nextWord);
  else picks = others.map(() => 0);
  others.forEach((i, j) => {
    const { first, second } = rows[i], k = picks[j];
    const lo = Math.min(first, second), hi = first === second ? m : Math.max(first, second);
    let other = k + (k >= lo ? 1 : 0);
    other += other >= hi ? 1 : 0;
    out[i] = other;
  });
  return out;
}

// One label per row {w, first, second}, consuming words as the server's draw_weighted does for these rows in one
// call (per block of BLOCK rows): a word per row, the tied rows' further words in row order, the rejected rows
// again (a word each, then their ties), then the other labels' uniforms (useTopWidth: one law, k-RR).
function drawRows(rows, m, nextWord, useTopWidth) {
  const out = [];
  for (let start = 0; start < rows.length; start += BLOCK) {
    out.push(...drawBlock(rows.slice(start, start + BLOCK), m, nextWord, useTopWidth));
  }
  return out;
}

// k-RR of every value in one batch (mechanisms.rr.perturb of the vector).
function krrRows(values, eps, m, nextWord) {
  const c = krrCells(eps, m);
  if (c.keep === c.flip) return uniformBelowBatch(values.map(() => m), nextWord);
  const w = { first: c.keep, second: 0n, other: c.flip, nOthers: m - 1 };
  return drawRows(values.map((v) => ({ w, first: v, second: v })), m, nextWord, true);
}

// One relaxation step of every value in one batch (mechanisms.relaxation.relax of the vector).
function relaxRows(prev, values, epsFrom, epsTo, m, nextWord) {
  const { kept, moved } = stepWeights(epsFrom, epsTo, m);
  return drawRows(values.map((a, i) => ({ w: prev[i] === a ? kept : moved, first: a, second: prev[i] })), m,
                  nextWord, false);
}

// ------------------------------------------------------------------ the mechanisms

/** k-RR of one label (mechanisms.rr.perturb): keep/flip cells above; eps = 0 exactly uniform. */
export function krr(value, eps, m, nextWord = secureWords()) {
  checkM(m);
  checkLabel(value, m, "value");
  const c = krrCells(eps, m);
  if (c.keep === c.flip) return uniformBelow(m, nextWord);
  return drawRow({ first: c.keep, second: 0n, other: c.flip, nOthers: m - 1 }, value, value, m, nextWord, true);
}

/** One relaxation step (mechanisms.relaxation.relax): the output at epsTo given prev, the output at epsFrom. */
export function relax(prev, value, epsFrom, epsTo, m, nextWord = secureWords()) {
  checkM(m);
  checkLabel(value, m, "value");
  checkLabel(prev, m, "previous");
  const { kept, moved } = stepWeights(epsFrom, epsTo, m);
  return drawRow(prev === value ? kept : moved, value, prev, m, nextWord, false);
}

/** A forward chain (mechanisms.relaxation.chain): k-RR at epsilons[0], then one step per further epsilon. */
export function chain(value, epsilons, m, nextWord = secureWords()) {
  if (!epsilons.length) throw new RangeError("epsilons must not be empty");
  const out = [krr(value, epsilons[0], m, nextWord)];
  for (let i = 1; i < epsilons.length; i++) {
    out.push(relax(out[i - 1], value, epsilons[i - 1], epsilons[i], m, nextWord));
  }
  return out;
}

/** Continue a chain from its head (headEps, headOutput) through epsilons, each above the one before. */
export function extend(value, headEps, headOutput, epsilons, m, nextWord = secureWords()) {
  const out = [];
  let eps = headEps, prev = headOutput;
  for (const e of epsilons) {
    prev = relax(prev, value, eps, e, m, nextWord);
    out.push(prev);
    eps = e;
  }
  return out;
}

// ------------------------------------------------------------------ numeric values (mechanisms/numeric.py)

// A plain ASCII decimal, "-" allowed (ldpmarket.numbers, signed): "12", "-0.5", ".5".
const SIGNED_DECIMAL = /^-?(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)$/;

function plainDecimal(text, name) {
  const s = String(text).trim();
  if (!SIGNED_DECIMAL.test(s)) throw new RangeError(`${name} must be a plain decimal number, got ${JSON.stringify(text)}`);
  return s;
}

// a plain decimal as an exact fraction num / 10^k (BigInt num, k), for exact comparisons
function decimalFraction(s) {
  const neg = s.startsWith("-"), body = neg ? s.slice(1) : s;
  const [whole, frac = ""] = body.split(".");
  const num = BigInt((whole || "0") + frac);
  return { num: neg ? -num : num, k: frac.length };
}

function compareDecimals(a, b) {
  const x = decimalFraction(a), y = decimalFraction(b), k = Math.max(x.k, y.k);
  const l = x.num * 10n ** BigInt(k - x.k), r = y.num * 10n ** BigInt(k - y.k);
  return l < r ? -1 : l > r ? 1 : 0;
}

function finiteNumber(s, name) {
  const x = Number(s);     // correctly rounded, as Python's float(Decimal(s))
  if (!Number.isFinite(x)) throw new RangeError(`${name} must be finite, got ${s}`);
  return x;
}

/**
 * The threshold of the one-time discretization of x in [low, high] (mechanisms.numeric.discretize): p =
 * (x - low) / (high - low) in float64, clipped to [0, 1]; T = floor(p 2^64) (exact: scaling by a power of two),
 * or null for p = 1 (always high).  x, low and high are decimal strings, read as float64 as the server reads them.
 */
export function numericThreshold(x, low, high) {
  const [ls, hs, xs] = [plainDecimal(low, "low"), plainDecimal(high, "high"), plainDecimal(x, "the value")];
  const lo = finiteNumber(ls, "low"), hi = finiteNumber(hs, "high"), v = finiteNumber(xs, "the value");
  if (!(lo < hi) || !Number.isFinite(hi - lo)) throw new RangeError(`low must be less than high, got ${low}, ${high}`);
  // exactly, as the portal's form checks the decimal (then the floats are in range too: rounding is monotone)
  if (compareDecimals(xs, ls) < 0 || compareDecimals(xs, hs) > 0) {
    throw new RangeError(`the value must lie between ${ls} and ${hs}, got ${xs}`);
  }
  const p = Math.min(Math.max((v - lo) / (hi - lo), 0), 1);
  return p < 1 ? BigInt(Math.floor(p * 2 ** 64)) : null;
}

/**
 * z for x in [low, high], drawn once (mechanisms.numeric.discretize): 1 (high) with probability (x - low) /
 * (high - low), else 0 (low), from exactly one word u: z = 1 iff u < floor(p 2^64), always 1 at x = high.
 * Keep z, never x's second draw: a second z would leak more about x (docs/custody.md).
 */
export function discretize(x, low, high, nextWord = secureWords()) {
  const t = numericThreshold(x, low, high);
  const u = wordFrom(nextWord);
  return t === null || u < t ? 1 : 0;
}

// ------------------------------------------------------------------ strings: the epsilon of each bit

const DRAW_DIGITS = 40n;   // market.chains.grow.draw_epsilon: Context(prec=40, rounding=ROUND_FLOOR)

/**
 * The epsilon each output is drawn at for a release at `eps` (a decimal string with at most 6 decimals) when
 * divided by `divisor` (Attribute.draw_divisor: 2 num_hashes for strings): eps / divisor rounded down to 40
 * significant digits, as market.chains.grow.draw_epsilon, as a plain decimal string.
 */
export function drawEpsilon(eps, divisor) {
  if (!Number.isInteger(divisor) || divisor < 1) throw new RangeError(`divisor must be an integer >= 1, got ${divisor}`);
  const { p, q } = parseEpsilon(eps);
  if (p === 0n) return "0";
  const den = q * BigInt(divisor);
  const least = 10n ** (DRAW_DIGITS - 1n);
  let k = 0n, n = p / den;
  while (n < least) { k += 1n; n = (p * 10n ** k) / den; }   // floor(eps / divisor * 10^k), 40 digits
  if (k === 0n) return String(n);
  const digits = n.toString().padStart(Number(k) + 1, "0");
  const whole = digits.slice(0, digits.length - Number(k)), frac = digits.slice(digits.length - Number(k));
  const trimmed = frac.replace(/0+$/, "");
  return trimmed ? `${whole}.${trimmed}` : whole;
}

// ------------------------------------------------------------------ strings: SHAKE-256 and the Bloom filter

const MASK = U64_MAX;
const KECCAK_RC = [
  0x0000000000000001n, 0x0000000000008082n, 0x800000000000808An, 0x8000000080008000n, 0x000000000000808Bn,
  0x0000000080000001n, 0x8000000080008081n, 0x8000000000008009n, 0x000000000000008An, 0x0000000000000088n,
  0x0000000080008009n, 0x000000008000000An, 0x000000008000808Bn, 0x800000000000008Bn, 0x8000000000008089n,
  0x8000000000008003n, 0x8000000000008002n, 0x8000000000000080n, 0x000000000000800An, 0x800000008000000An,
  0x8000000080008081n, 0x8000000000008080n, 0x0000000080000001n, 0x8000000080008008n,
];
// rotation offsets of lane x + 5 y
const KECCAK_ROT = [0, 1, 62, 28, 27, 36, 44, 6, 55, 20, 3, 10, 43, 25, 39, 41, 45, 15, 21, 8, 18, 2, 61, 56, 14]
  .map(BigInt);

function rotl(v, n) {
  return n === 0n ? v : ((v << n) | (v >> (64n - n))) & MASK;
}

function keccakF(s) {
  const c = new Array(5), b = new Array(25);
  for (const rc of KECCAK_RC) {
    for (let x = 0; x < 5; x++) c[x] = s[x] ^ s[x + 5] ^ s[x + 10] ^ s[x + 15] ^ s[x + 20];
    for (let x = 0; x < 5; x++) {
      const d = c[(x + 4) % 5] ^ rotl(c[(x + 1) % 5], 1n);
      for (let y = 0; y < 25; y += 5) s[x + y] ^= d;
    }
    for (let x = 0; x < 5; x++) {
      for (let y = 0; y < 5; y++) b[y + 5 * ((2 * x + 3 * y) % 5)] = rotl(s[x + 5 * y], KECCAK_ROT[x + 5 * y]);
    }
    for (let y = 0; y < 25; y += 5) {
      for (let x = 0; x < 5; x++) s[x + y] = b[x + y] ^ ((b[((x + 1) % 5) + y] ^ MASK) & b[((x + 2) % 5) + y]);
    }
    s[0] ^= rc;
  }
}

/** SHAKE-256 (FIPS 202) of `bytes` (a Uint8Array): `length` bytes of output, a Uint8Array. */
export function shake256(bytes, length) {
  const rate = 136;
  const padded = new Uint8Array(Math.floor(bytes.length / rate) * rate + rate);
  padded.set(bytes);
  padded[bytes.length] ^= 0x1f;
  padded[padded.length - 1] ^= 0x80;
  const s = new Array(25).fill(0n);
  const lane = (buf, at) => {
    let v = 0n;
    for (let i = 7; i >= 0; i--) v = (v << 8n) | BigInt(buf[at + i]);
    return v;
  };
  for (let off = 0; off < padded.length; off += rate) {
    for (let i = 0; i < rate / 8; i++) s[i] ^= lane(padded, off + 8 * i);
    keccakF(s);
  }
  const out = new Uint8Array(length);
  for (let n = 0; ; ) {
    for (let i = 0; i < rate / 8 && n < length; i++) {
      let v = s[i];
      for (let j = 0; j < 8 && n < length; j++, v >>= 8n) out[n++] = Number(v & 0xffn);
    }
    if (n >= length) return out;
    keccakF(s);
  }
}

function checkCount(v, name, least) {
  if (!Number.isInteger(v) || v < least) throw new RangeError(`${name} must be an integer >= ${least}, got ${v}`);
  return v;
}

/** The longest string the service takes (market.values.inputs.MAX_STRING), in characters (code points). */
export const MAX_STRING = 200;

/** `string` if the service takes it as a string value (non-empty, at most MAX_STRING characters, valid text). */
export function checkText(string) {
  if (typeof string !== "string" || !string || [...string].length > MAX_STRING) {
    throw new RangeError(`the value must be a non-empty text of at most ${MAX_STRING} characters`);
  }
  if (/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?:^|[^\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(string)) {
    throw new RangeError("the value must be valid text (a lone surrogate has no UTF-8 encoding)");
  }
  return string;
}

/**
 * The `numHashes` Bloom positions of `string` in `cohort` (mechanisms.rappor._positions): the 8-byte big-endian
 * words of SHAKE-256 of "<cohort>:<string>" (UTF-8), each modulo numBits.
 */
export function bloomPositions(cohort, string, numBits, numHashes) {
  checkCount(cohort, "cohort", 0);
  checkCount(numBits, "numBits", 1);
  checkCount(numHashes, "numHashes", 1);
  const digest = shake256(new TextEncoder().encode(`${cohort}:${checkText(string)}`), 8 * numHashes);
  const out = [];
  for (let j = 0; j < numHashes; j++) {
    let v = 0n;
    for (let i = 0; i < 8; i++) v = (v << 8n) | BigInt(digest[8 * j + i]);
    out.push(Number(v % BigInt(numBits)));
  }
  return out;
}

/** The Bloom filter of `string` in `cohort` (mechanisms.rappor.bloom_bits): numBits bits 0/1, an array. */
export function bloomBits(cohort, string, numBits, numHashes) {
  const bits = new Array(numBits).fill(0);
  for (const j of bloomPositions(cohort, string, numBits, numHashes)) bits[j] = 1;
  return bits;
}

// ------------------------------------------------------------------ strings: the Bloom bits' chains

/**
 * A string's upload (docs/custody.md#uploads): a binary chain per Bloom bit through the release epsilons, every
 * output drawn at drawEpsilon(eps, divisor), from one word source; per epsilon a text of bits.length characters
 * "0"/"1".  Step-major, as the service grows a value's chains (market.chains.grow: mechanisms.chain of the whole
 * bit vector): every bit's k-RR at the first epsilon in one batch, then one batch of relaxation steps per further
 * epsilon, so the same words give the service's outputs (the SDK's ldpmarket_client.sampler.bits_chain;
 * tests/data/custody_vectors.json).  With head (a release epsilon) and headOutput (its text), continues the chains
 * from there: one batch of steps, all bits, per epsilon (extend_bits_chain).
 */
export function bloomChains(bits, epsilons, divisor, nextWord = secureWords(), head = null, headOutput = null) {
  if (!Array.isArray(bits) || !bits.length) throw new RangeError("bits must be a non-empty array");
  if (!epsilons.length) throw new RangeError("epsilons must not be empty");
  bits.forEach((b) => checkLabel(b, 2, "a bit"));
  const draw = epsilons.map((e) => drawEpsilon(e, divisor));
  const steps = [];
  let prev, from;
  if (head === null) {
    prev = krrRows(bits, draw[0], 2, nextWord);
    steps.push(prev);
    from = draw[0];
  } else {
    prev = [...String(headOutput)].map(Number);
    if (prev.length !== bits.length) throw new RangeError("the head's output must have one character per bit");
    prev.forEach((h) => checkLabel(h, 2, "a head output"));
    from = drawEpsilon(head, divisor);
  }
  for (const e of head === null ? draw.slice(1) : draw) {
    prev = relaxRows(prev, bits, from, e, 2, nextWord);
    steps.push(prev);
    from = e;
  }
  return steps.map((row) => row.join(""));
}
