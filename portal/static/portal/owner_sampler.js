// The server's gradual-release sampler for ONE value, bit for bit, in the owner's browser (docs/custody.md).
//
// Same integer laws as mechanisms/exactness.py and the same consumption of uniform 64-bit words as
// mechanisms/_sampling.py (draw_weighted) and mechanisms/random.py (uniform_below): fed the same words,
// krr/relax/chain return the server's outputs and use exactly as many words.  Randomness is
// crypto.getRandomValues (the OS CSPRNG) unless a word source is passed: a function returning the next
// word as a BigInt in [0, 2^64).  Hand-written, no build step, no dependencies.
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
