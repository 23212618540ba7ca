"""A string value's Bloom bit chains on the device consume words exactly as the service grows them
(docs/custody.md#the-devices-sampler): step-major, all ``num_bits`` rows of the value in one vectorized pass per
epsilon (``market.chains.grow.generate``: ``mechanisms.chain`` of the whole bit vector; ``grow``: one
``mechanisms.relax`` of the whole vector per grid step).

Many random cases, with words at the thresholds' top words and at the top of the range so that draws tie (settled
by further words) and are rejected (redrawn after the whole pass, as ``mechanisms._sampling.draw_weighted`` does):
the SDK's ``bits_chain`` / ``extend_bits_chain`` and the browser module's ``bloomChains`` (run in Node) return the
service's outputs from the same words and use exactly as many.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from ldpmarket_client import sampler
from tests.client.make_sampler_vectors import FixedWords

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "portal" / "static" / "portal" / "owner_sampler.js"
U64_MAX = (1 << 64) - 1
STEP = 250_000  # the extension's grid step in micro-epsilons


def _special_words(draw_eps):
    """The top words of every law a chain through ``draw_eps`` uses (ties there), and the range's top (ties and
    rejections)."""
    from mechanisms._sampling import _Cut
    from mechanisms.exactness import RowWeights, krr_cells, step_weights

    cells = krr_cells(draw_eps[0], 2)
    laws = [RowWeights(first=cells.keep, second=0, other=cells.flip, n_others=1)] if cells.keep != cells.flip else []
    for lo, hi in zip(draw_eps, draw_eps[1:]):
        laws += list(step_weights(lo, hi, 2))
    out = {U64_MAX, U64_MAX - 1}
    for w in laws:
        out |= {top for top, _ in _Cut.of(w).top_words()}
    return sorted(out)


def _cases(seed: int = 9, count: int = 300) -> list[dict]:
    """Fresh and extended chains of random bit vectors, computed by the service's own growth code."""
    from market.chains.grow import Grid, draw_epsilon, generate, grow

    rng = np.random.default_rng(seed)
    cases = []
    for k in range(count):
        n, divisor = int(rng.integers(1, 40)), int(rng.integers(1, 9))
        bits = rng.integers(0, 2, n)
        start = int(rng.integers(0, 4)) * STEP  # eps 0 (the uniform law) included
        length = int(rng.integers(1, 5))
        micros = [start + STEP * i for i in range(length)]
        more = int(rng.integers(1, 4))
        grid = Grid(start=start, step=STEP, stop=start + STEP * (length + more))
        draw = [draw_epsilon(e, divisor) for e in range(start, grid.stop + 1, STEP)]
        special = _special_words(draw)
        words = rng.integers(0, U64_MAX, 20 * n * (length + more) + 40, dtype=np.uint64, endpoint=True).tolist()
        pick = rng.random(len(words)) < (0.3 if k % 3 == 0 else 0.02)
        for i in np.flatnonzero(pick):
            words[i] = special[int(rng.integers(0, len(special)))]
        src = FixedWords(words)
        fresh = generate(bits[None, :], np.array(micros), 2, src, divisor)[0]          # (length, n)
        used_fresh = src.used
        head = micros[-1]
        g = grow(bits[None, :], np.array([head]), fresh[-1][None, :], np.array([grid.stop]), grid, 2, src, divisor)
        new = g.out[0, :g.count[0]]
        eps_text = lambda micro: format(Decimal(int(micro)).scaleb(-6), "f")  # noqa: E731
        cases.append({
            "bits": [int(b) for b in bits], "divisor": divisor, "words": [str(w) for w in words],
            "epsilons": [eps_text(e) for e in micros], "outputs": ["".join(map(str, r)) for r in fresh.tolist()],
            "words_fresh": used_fresh, "head_epsilon": eps_text(head),
            "more": [eps_text(int(e)) for e in g.eps[0, :g.count[0]]],
            "extended": ["".join(map(str, r)) for r in new.tolist()], "words_used": src.used,
        })
    return cases


@pytest.fixture(scope="module")
def cases():
    out = _cases()
    # one word per bit and step, more when a draw ties, is rejected or redraws a uniform
    extra = [c for c in out if c["words_used"] > len(c["bits"]) * (len(c["epsilons"]) + len(c["more"]))]
    assert len(extra) > 50, f"ties, rejections and redrawn uniforms are exercised in {len(extra)} cases only"
    return out


class Words:
    """The case's words, from ``offset`` on (``used`` counts the words taken)."""

    def __init__(self, words, offset=0):
        self.list = [int(w) for w in words]
        self.used = offset

    def words(self, n):
        assert self.used + n <= len(self.list), "ran out of words"
        self.used += n
        return self.list[self.used - n:self.used]


def test_the_sdk_draws_a_strings_chains_step_major_as_the_service_grows_them(cases):
    bad = []
    for c in cases:
        words = Words(c["words"])
        rows = sampler.bits_chain(c["bits"], c["epsilons"], c["divisor"], words)
        fresh = ["".join(map(str, r)) for r in rows]
        used_fresh = words.used
        rows = sampler.extend_bits_chain(c["bits"], c["head_epsilon"], [int(x) for x in c["outputs"][-1]],
                                         c["more"], c["divisor"], words)
        extended = ["".join(map(str, r)) for r in rows]
        if (fresh, used_fresh, extended, words.used) != (c["outputs"], c["words_fresh"], c["extended"],
                                                         c["words_used"]):
            bad.append({"case": c["bits"], "fresh": [fresh, c["outputs"]], "used": [used_fresh, c["words_fresh"]],
                        "extended": [extended, c["extended"]], "total": [words.used, c["words_used"]]})
    assert not bad, f"{len(bad)} of {len(cases)} cases differ from the service's growth, the first: {bad[0]}"


NODE = r"""
import { readFileSync } from "node:fs";
const s = await import(process.argv[2]);
const cases = JSON.parse(readFileSync(0, "utf8"));
const out = [];
for (const c of cases) {
  const list = c.words.map(BigInt);
  let i = 0;
  const next = () => { if (i >= list.length) throw new Error("ran out of words"); return list[i++]; };
  const fresh = s.bloomChains(c.bits, c.epsilons, c.divisor, next);
  const usedFresh = i;
  const extended = s.bloomChains(c.bits, c.more, c.divisor, next, c.head_epsilon, c.outputs[c.outputs.length - 1]);
  out.push({fresh, usedFresh, extended, used: i});
}
process.stdout.write(JSON.stringify(out));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_the_browser_module_draws_a_strings_chains_step_major_as_the_service_grows_them(cases, tmp_path):
    script = tmp_path / "run.mjs"
    script.write_text(NODE)
    done = subprocess.run(["node", str(script), MODULE.as_uri()], input=json.dumps(cases), capture_output=True,
                          text=True, timeout=300, check=True)
    got = json.loads(done.stdout)
    bad = [{"bits": c["bits"], "got": g, "want": [c["outputs"], c["words_fresh"], c["extended"], c["words_used"]]}
           for c, g in zip(cases, got)
           if (g["fresh"], g["usedFresh"], g["extended"], g["used"]) != (c["outputs"], c["words_fresh"],
                                                                        c["extended"], c["words_used"])]
    assert len(got) == len(cases)
    assert not bad, f"{len(bad)} of {len(cases)} cases differ from the service's growth, the first: {bad[0]}"
