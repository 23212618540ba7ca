"""The owner-side sampler: gradual release of k-ary randomized response on the owner's device.

An owner-held value (docs/custody.md) never leaves its owner's machine: the device draws the chain itself
and uploads only epsilons and outputs.  This module is a standard-library port of the server's exact
sampler (``mechanisms.rr.perturb``, ``mechanisms.relaxation.relax``, ``mechanisms._sampling.draw_weighted``;
docs/mechanisms.md, "Exact sampling") that, for one value, draws **bit for bit** what the server would
draw from the same 64-bit words: the same integer laws and the same consumption of words.  The shared test
vectors ``tests/data/sampler_vectors.json`` (made by the server's own code) pin this down, for this port
and the portal's JavaScript one.

**The laws, in integers.**  Let ``a`` be the true value among ``m`` labels.

* k-RR at ``eps > 0`` (:func:`krr_cells`): ``E_lo = exp_lower(eps)`` is a rational lower bound of ``e^eps``
  (the decimal module's correctly rounded ``exp`` at 70 digits, moved one unit down and cut down to 60
  significant digits, one more unit off); each other value gets ``flip = ceil(2^64 / (E_lo + m - 1))``
  cells of ``2^-64`` and ``a`` the rest, ``keep = 2^64 - (m - 1) flip``.  Rounding the small cells up
  makes ``keep / flip <= e^eps`` strictly.  At ``eps = 0`` the law is uniform (``keep = flip = 1`` of ``m``).
* One relaxation step ``eps_from -> eps_to`` (:func:`step_weights`), with the two marginals ``(K_lo, R_lo)``
  and ``(K_hi, R_hi)`` over one common total and ``S = K_lo - R_hi``, ``T = R_lo - R_hi``:

      previous = a  ("kept"):   w(a) = K_hi S,  each of the m - 1 others  w = R_hi T
      previous = b != a ("moved"): w(a) = K_hi T,  w(b) = R_hi S,  each of the m - 2 others  w = R_hi T

  the Bayes reversal of a value-free backward kernel, so a chain's likelihood ratio is that of its last
  output: at most ``e^eps`` of its last epsilon, however many steps.

**Drawing a row** (:func:`draw_weighted`, one row of the server's function).  A law with weights
``first``, ``second``, ``n_others`` times ``other`` and total ``W`` is drawn from an exact uniform ``U`` on
``[0, 2^bits)``, ``bits = bitlength(W) + 64``, compared with the thresholds ``n_others other s``,
``+ second s`` and ``W s`` where ``s = floor(2^bits / W)``: below the first, one of the others; then
``second``; then ``first``; at or above ``W s`` the draw is rejected and redrawn (probability below
``2^-63``).  Only ``U``'s top word is drawn unless it equals a threshold's top word with non-zero low bits
(or ``2^64 - 1`` for a threshold of ``2^bits``); then the ``bits - 64`` low bits are drawn from
``ceil((bits - 64) / 64)`` further words (the top bits of their concatenation).  Which other value is taken
is ``top word // top_width`` when the others' width is a whole number of top words (k-RR, whose total is
``2^64``: ``top_width = flip``), else a separate :func:`uniform_below` draw (``u // floor((2^64 - 1) / k)``,
redrawn when ``>= k``), or 0 when there is one other value; the others are the labels other than ``first``
and ``second`` in increasing order.

**Numeric and string values** (docs/custody.md).  A number ``x`` in ``[low, high]`` is discretized once
(:func:`discretize`, the server's ``mechanisms.numeric.discretize`` for one value): ``p = (x - low)/(high - low)``
in binary64 clipped to ``[0, 1]``, ``T = floor(p 2^64)``, and from one word ``u``: ``z = 1`` (high) iff ``u < T``,
always 1 at ``p = 1``; the device keeps ``z`` and draws the binary chain of ``z``.  A string is hashed into its
Bloom filter (:func:`bloom_bits`, the server's ``mechanisms.rappor.bloom_bits``: SHAKE-256 of
``"<cohort>:<string>"``, 8-byte big-endian words modulo ``num_bits``) and each bit gets its own binary chain,
every output drawn at ``epsilon / draw_divisor`` (:func:`draw_epsilon`, 40 digits rounded down, the server's
``market.chains.grow.draw_epsilon``) (:func:`bits_chain`, :func:`extend_bits_chain`).  The bits are drawn
step-major, as the server grows one value's ``num_bits`` rows in one vectorized call per epsilon
(:func:`_draw_rows`: one word per row, then the tied rows' further words, then the rejected rows again).

Randomness: ``words`` is any object with a ``words(n)`` method returning ``n`` integers in ``[0, 2^64)``;
the default is :class:`OSWords`, the operating system's CSPRNG (``os.urandom``), as docs/custody.md asks.
"""
from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Context, Decimal, InvalidOperation
from fractions import Fraction
from functools import lru_cache

TWO_64 = 1 << 64
U64_MAX = TWO_64 - 1
#: Cells of a k-RR law are units of 2^-64 of this total.
TOTAL = TWO_64
#: Largest epsilon the samplers honour (the server's ``mechanisms.exactness.SAMPLER_EPS_MAX``).
SAMPLER_EPS_MAX = 30
#: Significant digits of the lower bound of e^eps the k-RR cells are built from (the server's ``_DIGITS``).
CELL_DIGITS = 60

__all__ = ["OSWords", "Marginal", "RowWeights", "exp_lower", "exact_epsilon", "krr_cells", "step_weights",
           "uniform_below", "draw_weighted", "krr", "relax", "chain", "extend_chain", "discretize", "bloom_bits",
           "draw_epsilon", "bits_chain", "extend_bits_chain"]


# ---------------------------------------------------------------- randomness

class OSWords:
    """Uniform 64-bit words straight from the operating system's CSPRNG (``os.urandom``)."""

    def words(self, n: int) -> list[int]:
        data = os.urandom(8 * n)
        return [int.from_bytes(data[8 * i:8 * i + 8], "little") for i in range(n)]


_OS = OSWords()


def _take(source, n: int) -> list[int]:
    """``n`` words from ``source`` (``None``: the OS CSPRNG), as Python ints in [0, 2^64)."""
    got = [int(w) for w in (source or _OS).words(n)]
    if len(got) != n or any(not 0 <= w <= U64_MAX for w in got):
        raise ValueError(f"a word source must return {n} integers in [0, 2^64)")
    return got


# ---------------------------------------------------------------- exact epsilons and e^eps

def exact_epsilon(eps) -> Decimal:
    """An epsilon as an exact Decimal in ``[0, SAMPLER_EPS_MAX]``: a Decimal, int or decimal string as it is;
    a float as the smaller of its binary value and its shortest decimal (as the server takes it)."""
    if isinstance(eps, bool):
        raise ValueError(f"an epsilon must be a number, got {eps!r}")
    if isinstance(eps, Decimal):
        d = eps
    elif isinstance(eps, int):
        d = Decimal(eps)
    elif isinstance(eps, float):
        d = min(Decimal(eps), Decimal(repr(eps)))
    elif isinstance(eps, str):
        try:
            d = Decimal(eps.strip())
        except InvalidOperation:
            raise ValueError(f"an epsilon must be a decimal number, got {eps!r}") from None
    else:
        raise ValueError(f"an epsilon must be a Decimal, int or decimal string, got {eps!r}")
    if not d.is_finite() or d < 0 or d > SAMPLER_EPS_MAX:
        raise ValueError(f"an epsilon must lie in [0, {SAMPLER_EPS_MAX}] (docs/mechanisms.md, 'Exact sampling'), "
                         f"got {eps!r}")
    return d


def exp_lower(x: Decimal, digits: int = CELL_DIGITS) -> Fraction:
    """A rational ``L < e^x`` within about ``10^(1 - digits)`` relative; exactly 1 for ``x = 0``.

    The decimal module's ``exp`` is correctly rounded at ``digits + 10`` digits; one unit in the last place
    down puts it strictly below ``e^x``; it is then cut to ``digits`` digits rounding down and one more unit
    is taken off (the server's ``mechanisms._exact.exp_lower``, digit for digit)."""
    x = Decimal(x)
    if x == 0:
        return Fraction(1)
    ctx = Context(prec=digits + 10)
    e = ctx.next_minus(ctx.exp(x))
    cut = Context(prec=digits, rounding=ROUND_FLOOR)
    return Fraction(cut.next_minus(cut.plus(e)))


# ---------------------------------------------------------------- the integer laws

@dataclass(frozen=True)
class Marginal:
    """k-RR in integer cells: ``keep`` for the true value, ``flip`` for each other value, of ``total``."""

    keep: int
    flip: int
    total: int


@dataclass(frozen=True)
class RowWeights:
    """One row's law in integers: ``first``, ``second`` and each of ``n_others`` remaining labels ``other``."""

    first: int
    second: int
    other: int
    n_others: int

    @property
    def total(self) -> int:
        return self.first + self.second + self.n_others * self.other


def _check_m(m) -> int:
    if isinstance(m, bool) or not isinstance(m, int) or m < 2:
        raise ValueError(f"m (the number of labels) must be an integer of at least 2, got {m!r}")
    return m


def _check_label(x, m: int, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < m:
        raise ValueError(f"{name} must be a label index in 0..{m - 1}, got {x!r}")
    return x


@lru_cache(maxsize=4096)
def _krr_cells(eps: Decimal, m: int) -> Marginal:
    if eps == 0:
        return Marginal(keep=1, flip=1, total=m)
    x = Fraction(TOTAL) / (exp_lower(eps) + (m - 1))
    flip = -((-x.numerator) // x.denominator)  # ceil: the small cells round up
    keep = TOTAL - (m - 1) * flip
    if keep < flip:  # the level would be ln(flip / keep) > eps: refused, as the server refuses it
        raise ValueError(f"eps = {eps} is too small for k-RR over {m} values to be realised with 64-bit "
                         "thresholds: its cells would give the true value fewer units than each other value "
                         "(docs/mechanisms.md, 'Exact sampling')")
    return Marginal(keep=keep, flip=flip, total=TOTAL)


def krr_cells(eps, m: int) -> Marginal:
    """The integer law of k-RR at ``eps`` over ``m`` labels (module docstring; docs/mechanisms.md, "Exact
    sampling"): ``flip = ceil(2^64 / (exp_lower(eps) + m - 1))``, ``keep = 2^64 - (m - 1) flip``; uniform
    (``1, 1`` of ``m``) at ``eps = 0``.  An eps so small that ``keep < flip`` (the true value would get fewer
    cells than the others, a level ``ln(flip / keep)`` above eps: ``exp_lower(eps) < 1 + r/q`` with
    ``q, r = divmod(2^64, m)``, below about ``m^2 / 2^64``) raises ``ValueError``, as on the server."""
    return _krr_cells(exact_epsilon(eps), _check_m(m))


def _common(lo: Marginal, hi: Marginal) -> tuple[int, int, int, int]:
    """``(K_lo, R_lo, K_hi, R_hi)`` over one common total (cross-multiplied when one of them is uniform)."""
    f_lo, f_hi = hi.total, lo.total
    if lo.total == hi.total:
        f_lo = f_hi = 1
    return lo.keep * f_lo, lo.flip * f_lo, hi.keep * f_hi, hi.flip * f_hi


@lru_cache(maxsize=4096)
def _step(e_lo: Decimal, e_hi: Decimal, m: int) -> tuple[RowWeights, RowWeights]:
    k_lo, r_lo, k_hi, r_hi = _common(_krr_cells(e_lo, m), _krr_cells(e_hi, m))
    stay, move = k_lo - r_hi, r_lo - r_hi
    if k_hi - r_hi <= 0 or stay < 0 or move < 0:  # pragma: no cover - k-RR cells are monotone in eps
        raise ValueError("the lower epsilon's law is not a degradation of the higher one's")
    kept = RowWeights(first=k_hi * stay, second=0, other=r_hi * move, n_others=m - 1)
    moved = RowWeights(first=k_hi * move, second=r_hi * stay, other=r_hi * move, n_others=m - 2)
    return kept, moved


def step_weights(eps_from, eps_to, m: int) -> tuple[RowWeights, RowWeights]:
    """The relaxation step ``eps_from -> eps_to`` in integers, ``(kept, moved)`` (module docstring).

    ``kept`` is the row where the previous output is the true value a (``first`` = a); ``moved`` the row where
    it is b != a (``first`` = a, ``second`` = b)."""
    e1, e2 = exact_epsilon(eps_from), exact_epsilon(eps_to)
    if not e2 > e1:
        raise ValueError(f"a relaxation step needs eps_to > eps_from, got {e1} -> {e2}")
    return _step(e1, e2, _check_m(m))


# ---------------------------------------------------------------- drawing one row

def uniform_below(k: int, words=None) -> int:
    """A uniform integer in ``0..k-1``: ``u // floor((2^64 - 1) / k)`` of one word, redrawn when ``>= k``."""
    block = U64_MAX // k
    while True:
        q = _take(words, 1)[0] // block
        if q < k:
            return q


@lru_cache(maxsize=4096)
def _cut(w: RowWeights) -> tuple[int, tuple[int, int, int]]:
    """``(bits, thresholds)`` of a row law: the ends of the others, second and first regions of ``U``."""
    total = w.total
    bits = total.bit_length() + 64
    scale = (1 << bits) // total  # >= 2^64: a rejection has probability below 2^-63
    others_end = w.n_others * w.other * scale
    second_end = others_end + w.second * scale
    return bits, (others_end, second_end, total * scale)


@lru_cache(maxsize=4096)
def _top_words(bits: int, thresholds: tuple[int, int, int]) -> tuple[tuple[int, bool], ...]:
    """Each threshold's top word and whether a top word equal to it leaves ``U`` undecided (a threshold of
    ``2^bits`` is capped at ``2^64 - 1`` and undecided there)."""
    shift = bits - 64
    out = []
    for t in thresholds:
        top = t >> shift
        out.append((U64_MAX, True) if top > U64_MAX else (top, bool(t & ((1 << shift) - 1))))
    return tuple(out)


def _big_uniform(bits: int, words) -> int:
    """An exact uniform integer in ``[0, 2^bits)``: the top ``bits`` bits of ``ceil(bits / 64)`` words."""
    n = -(-bits // 64)
    value = 0
    for w in _take(words, n):
        value = (value << 64) | w
    return value >> (64 * n - bits)


def draw_weighted(first: int, second: int, m: int, weights: RowWeights, words=None, *,
                  others_from_top: bool = False) -> int:
    """One label from a row law in integers (module docstring, "Drawing a row").

    ``first`` gets ``weights.first``, ``second`` (when it differs from ``first``) ``weights.second``, and each
    of the other labels ``weights.other``, of ``weights.total``.  ``others_from_top`` is the server's
    single-law case (k-RR): the other label is read from the top word when the others' width is a whole
    number of top words; a relaxation step (two laws, selected per row) always draws it separately."""
    bits, thresholds = _cut(weights)
    tops = _top_words(bits, thresholds)
    while True:
        u = _take(words, 1)[0]
        region = sum(u >= top for top, _ in tops)
        if any(u == top and undecided for top, undecided in tops):
            rest = bits - 64
            full = (u << rest) | _big_uniform(rest, words)
            region = next((i for i, t in enumerate(thresholds) if full < t), 3)
        if region != 3:  # 3: at or above total * scale, rejected and redrawn
            break
    if region == 2:
        return first
    if region == 1:
        return second
    shift = bits - 64
    width = weights.other * ((1 << bits) // weights.total)
    if others_from_top and width % (1 << shift) == 0:
        k = u // (width >> shift)
    elif weights.n_others > 1:
        k = uniform_below(weights.n_others, words)
    else:
        k = 0
    lo = min(first, second)
    hi = m if first == second else max(first, second)
    other = k + (k >= lo)
    return other + (other >= hi)


# ---------------------------------------------------------------- the mechanisms

def krr(value: int, eps, m: int, words=None) -> int:
    """k-RR of ``value`` at ``eps`` (the server's ``mechanisms.rr.perturb`` for one value): ``value`` with
    ``keep / 2^64``, each other label with ``flip / 2^64`` (:func:`krr_cells`); uniform at ``eps = 0``."""
    cells = krr_cells(eps, m)
    value = _check_label(value, m, "value")
    if cells.keep == cells.flip:
        return uniform_below(m, words)
    w = RowWeights(first=cells.keep, second=0, other=cells.flip, n_others=m - 1)
    return draw_weighted(value, value, m, w, words, others_from_top=True)


def relax(previous: int, value: int, eps_from, eps_to, m: int, words=None) -> int:
    """One relaxation step (the server's ``mechanisms.relaxation.relax`` for one value): the output at
    ``eps_to`` given the ``previous`` output at ``eps_from`` and the true ``value`` (:func:`step_weights`).

    Needs the true value; the pair (previous, result) is exactly ``eps_to``-LDP and the result is distributed
    as an ``eps_to`` k-RR of ``value``."""
    kept, moved = step_weights(eps_from, eps_to, m)
    previous = _check_label(previous, m, "previous")
    value = _check_label(value, m, "value")
    return draw_weighted(value, previous, m, kept if previous == value else moved, words)


def extend_chain(value: int, head_epsilon, head_output: int, epsilons, m: int, words=None) -> list[int]:
    """Continue a chain whose last output ``head_output`` was drawn at ``head_epsilon``: one relaxation step
    per epsilon of ``epsilons`` (strictly increasing, above the head); the new outputs."""
    out, prev, e_prev = [], head_output, exact_epsilon(head_epsilon)
    for eps in epsilons:
        e = exact_epsilon(eps)
        if not e > e_prev:
            raise ValueError(f"epsilons must be strictly increasing above the head, got {e} after {e_prev}")
        prev = relax(prev, value, e_prev, e, m, words)
        out.append(prev)
        e_prev = e
    return out


def chain(value: int, epsilons, m: int, words=None) -> list[int]:
    """A gradual-release chain of ``value`` (the server's ``mechanisms.chain`` for one value): k-RR at
    ``epsilons[0]``, then one relaxation step per further epsilon; every prefix is ``epsilons[i]``-LDP and
    output ``i`` is an ``epsilons[i]`` k-RR of ``value`` (docs/custody.md)."""
    eps = [exact_epsilon(e) for e in epsilons]
    if not eps:
        raise ValueError("epsilons must not be empty")
    first = krr(value, eps[0], m, words)
    return [first] + extend_chain(value, eps[0], first, eps[1:], m, words)


# ---------------------------------------------------------------- numeric and string values

_DRAW = Context(prec=40, rounding=ROUND_FLOOR)


def draw_epsilon(eps, divisor: int = 1) -> Decimal:
    """The epsilon each output is drawn at for a release at ``eps`` (a decimal with at most 6 places): ``eps /
    divisor`` at 40 digits rounded down (the server's ``market.chains.grow.draw_epsilon``)."""
    if isinstance(divisor, bool) or not isinstance(divisor, int) or divisor < 1:
        raise ValueError(f"divisor must be a positive integer, got {divisor!r}")
    micro = exact_epsilon(eps).scaleb(6)
    if micro != micro.to_integral_value():
        raise ValueError(f"a release epsilon has at most 6 decimal places, got {eps!r}")
    return _DRAW.divide(Decimal(int(micro)), 10 ** 6 * divisor)


def discretize(x, low, high, words=None) -> int:
    """``z`` of a number ``x`` in ``[low, high]``: 1 (high) with probability ``(x - low)/(high - low)``, else 0
    (the server's ``mechanisms.numeric.discretize`` for one value, bit for bit: module docstring).  Always takes
    one word.  ``x``, ``low`` and ``high`` are read as binary64 (decimal strings rounded correctly)."""
    xs, lo, hi = (float(Decimal(str(v).strip())) if isinstance(v, (str, Decimal)) else float(v)
                  for v in (x, low, high))
    if not all(math.isfinite(v) for v in (xs, lo, hi)) or not lo < hi or not math.isfinite(hi - lo):
        raise ValueError(f"need finite bounds low < high, got {low!r}, {high!r}")
    if not lo <= xs <= hi:
        raise ValueError(f"the value must lie in [{low}, {high}], got {x!r}")
    p = min(max((xs - lo) / (hi - lo), 0.0), 1.0)
    u = _take(words, 1)[0]
    if p >= 1.0:
        return 1
    return int(u < int(math.floor(p * 18446744073709551616.0)))


def bloom_bits(string: str, cohort: int, num_bits: int, num_hashes: int) -> list[int]:
    """The Bloom filter of ``string`` in ``cohort``: ``num_bits`` bits (0/1), set at the ``num_hashes`` positions
    given by 8-byte big-endian words of SHAKE-256 of ``f"{cohort}:{string}"`` (UTF-8), each modulo ``num_bits``
    (the server's ``mechanisms.rappor.bloom_bits``)."""
    for name, v, least in (("cohort", cohort, 0), ("num_bits", num_bits, 1), ("num_hashes", num_hashes, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise ValueError(f"{name} must be an integer of at least {least}, got {v!r}")
    if not isinstance(string, str):
        raise ValueError(f"the value must be a text, got {string!r}")
    digest = hashlib.shake_256(f"{cohort}:{string}".encode("utf-8")).digest(8 * num_hashes)
    bits = [0] * num_bits
    for j in range(num_hashes):
        bits[int.from_bytes(digest[8 * j:8 * j + 8], "big") % num_bits] = 1
    return bits


# ---------------------------------------------------------------- one value's rows in one batch

#: Rows per vectorized pass of the server's ``draw_weighted`` (``mechanisms._sampling.BLOCK``).
BLOCK = 1 << 14


def _region(u: int, bits: int, thresholds, words) -> int:
    """The region (0 others, 1 second, 2 first, 3 rejected) of a row whose top word is ``u``: further words only
    when ``u`` equals an undecided threshold's top word (the server's ``_regions`` for one row)."""
    tops = _top_words(bits, thresholds)
    if any(u == top and undecided for top, undecided in tops):
        rest = bits - 64
        full = (u << rest) | _big_uniform(rest, words)
        return next((i for i, t in enumerate(thresholds) if full < t), 3)
    return sum(u >= top for top, _ in tops)


def _uniform_below_batch(ks: list[int], words) -> list[int]:
    """Uniforms in ``0..k-1``, one per entry of ``ks``, as the server's vectorized ``uniform_below``: one word per
    entry, then one word per rejected entry, in order, until none is left."""
    out = [0] * len(ks)
    todo = list(range(len(ks)))
    while todo:
        got = _take(words, len(todo))
        left = []
        for i, u in zip(todo, got):
            q = u // (U64_MAX // ks[i])
            if q < ks[i]:
                out[i] = q
            else:
                left.append(i)
        todo = left
    return out


def _draw_block(rows, m: int, words, others_from_top: bool) -> list[int]:
    n = len(rows)
    cuts = [_cut(w) for _, _, w in rows]
    u, region = [0] * n, [3] * n
    todo = list(range(n))
    while todo:  # one word per row, then the tied rows' low bits in row order; rejected rows are redrawn together
        for i, w in zip(todo, _take(words, len(todo))):
            u[i] = w
        for i in todo:
            region[i] = _region(u[i], *cuts[i], words)
        todo = [i for i in todo if region[i] == 3]
    out = [first if r == 2 else second for (first, second, _), r in zip(rows, region)]
    others = [i for i in range(n) if region[i] == 0]
    if not others:
        return out
    w0 = rows[0][2]
    bits = cuts[0][0]
    width = w0.other * ((1 << bits) // w0.total)
    top_width = width >> (bits - 64) if others_from_top and width % (1 << (bits - 64)) == 0 else 0
    ks = [rows[i][2].n_others for i in others]
    if top_width:
        picks = [u[i] // top_width for i in others]
    elif max(ks) > 1:
        picks = _uniform_below_batch(ks, words)
    else:
        picks = [0] * len(others)
    for i, k in zip(others, picks):
        first, second, _ = rows[i]
        lo = min(first, second)
        hi = m if first == second else max(first, second)
        other = k + (k >= lo)
        out[i] = other + (other >= hi)
    return out


def _draw_rows(rows, m: int, words, *, others_from_top: bool = False) -> list[int]:
    """One label per row ``(first, second, weights)``, consuming words as the server's ``draw_weighted`` does for
    these rows in one call: per block of :data:`BLOCK` rows, one word per row, then the tied rows' further words
    in row order, then the rejected rows again (one word each, then their ties), then the other labels' uniforms
    (one word per row drawing one, its rejected ones redrawn together).  ``others_from_top``: one law for all
    rows (k-RR), the other label read from the top word when its width allows it."""
    out: list[int] = []
    for start in range(0, len(rows), BLOCK):
        out += _draw_block(rows[start:start + BLOCK], m, words, others_from_top)
    return out


def _krr_rows(values: list[int], eps, m: int, words) -> list[int]:
    """k-RR of every value in one batch (the server's ``mechanisms.rr.perturb`` of the vector)."""
    cells = krr_cells(eps, m)
    if cells.keep == cells.flip:
        return _uniform_below_batch([m] * len(values), words)
    w = RowWeights(first=cells.keep, second=0, other=cells.flip, n_others=m - 1)
    return _draw_rows([(v, v, w) for v in values], m, words, others_from_top=True)


def _relax_rows(previous: list[int], values: list[int], eps_from, eps_to, m: int, words) -> list[int]:
    """One relaxation step of every value in one batch (the server's ``mechanisms.relaxation.relax`` of the
    vector)."""
    kept, moved = step_weights(eps_from, eps_to, m)
    return _draw_rows([(a, p, kept if p == a else moved) for p, a in zip(previous, values)], m, words)


def _extend_rows(values: list[int], head, heads: list[int], eps: list[Decimal], m: int, words) -> list[list[int]]:
    out, prev, e_prev = [], heads, head
    for e in eps:
        if not e > e_prev:
            raise ValueError(f"epsilons must be strictly increasing above the head, got {e} after {e_prev}")
        prev = _relax_rows(prev, values, e_prev, e, m, words)
        out.append(prev)
        e_prev = e
    return out


def bits_chain(bits, epsilons, divisor: int = 1, words=None) -> list[list[int]]:
    """A binary chain per bit of ``bits`` through the release epsilons ``epsilons``, each output drawn at
    ``draw_epsilon(eps, divisor)``: one list of ``len(bits)`` outputs per epsilon.

    Drawn step-major, as the service grows a value's chains (``market.chains.grow.generate``: ``mechanisms.chain``
    of the whole bit vector): every bit's k-RR at the first epsilon in one batch, then one batch of relaxation
    steps per further epsilon; from the same words, the service's outputs (docs/custody.md#the-devices-sampler)."""
    eps = [draw_epsilon(e, divisor) for e in epsilons]
    if not eps:
        raise ValueError("epsilons must not be empty")
    values = [_check_label(b, 2, "a bit") for b in bits]
    first = _krr_rows(values, eps[0], 2, words)
    return [first] + _extend_rows(values, eps[0], first, eps[1:], 2, words)


def extend_bits_chain(bits, head_epsilon, head_outputs, epsilons, divisor: int = 1, words=None) -> list[list[int]]:
    """Continue :func:`bits_chain` from its head (the release epsilon ``head_epsilon`` and the outputs there): one
    batch of relaxation steps, all bits, per new epsilon (``market.chains.grow.grow``: one ``relax`` of the whole
    vector per step); one list of ``len(bits)`` outputs per new epsilon."""
    if len(head_outputs) != len(bits):
        raise ValueError(f"the head has {len(head_outputs)} outputs for {len(bits)} bits")
    values = [_check_label(b, 2, "a bit") for b in bits]
    heads = [_check_label(int(h), 2, "a head output") for h in head_outputs]
    return _extend_rows(values, draw_epsilon(head_epsilon, divisor), heads,
                        [draw_epsilon(e, divisor) for e in epsilons], 2, words)
