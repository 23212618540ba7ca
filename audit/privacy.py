"""The empirical privacy audit of stored chains (docs/mechanisms-reference.md#privacy-audit-by-inference).

For each attribute, a random sample of values with their raw datum; their true inputs are opened inside this
process only (nothing but error rates leaves it); the four attackers of ``mechanisms.audit`` run at the chains'
common epsilons against the Bayes bound.  The plot is drawn by ``audit.charts``.

Owner-held chains (docs/custody.md#the-ledger-and-the-audit) have no raw datum here, so they are tested by a
statistic that needs none: between consecutive stored points e1 < e2 of a chain, the output stays the same with
probability ``keep(e1) p_aa + (1 - keep(e1)) p_bb`` whatever the value (k-RR's keep and the step kernel's two
stay weights, from the exact integer laws).  A device that does not randomize (stays too often) or draws afresh
at each point (too rarely) is flagged by a two-sided binomial test per epsilon pair.
"""
from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
from scipy.stats import binomtest

from accounts.epsilon import MICRO
from market.chains import store
from market.chains.grow import draw_epsilon
from market.models import Attribute, Value
from market.values import inputs as domain
from market.values import sealing
from mechanisms.audit import ATTACKERS, LEAK_LEVEL, run_attacks
from mechanisms.exactness import krr_cells, step_weights
from mechanisms.random import words

from .charts import privacy_plot_png


@dataclass
class Level:
    epsilon: float
    n: int
    bound: float
    attackers: dict  # name -> {"error_rate", "standard_error", "p_value", "flag"}


@dataclass
class AttributeAudit:
    attribute_id: int
    label: str
    m: int
    kind: str
    values: int = 0
    sampled: int = 0
    common_epsilons: int = 0
    levels: list[Level] = field(default_factory=list)
    note: str = ""
    error: str = ""
    owner_held: int = 0
    steps: list[dict] = field(default_factory=list)  # owner-held chains' stay tests, one per epsilon pair

    @property
    def leak(self) -> bool:
        return any(a["flag"] for lv in self.levels for a in lv.attackers.values())

    @property
    def not_random(self) -> bool:
        """Owner-held chains whose outputs stay the same between two points more or less often than the law says."""
        return any(t["flag"] for t in self.steps)

    @property
    def ok(self) -> bool:
        return not self.leak and not self.not_random and not self.error

    @property
    def skipped(self) -> bool:
        """Nothing was attacked or tested (no chains, nothing sampled, no common epsilon, too few values): neither
        a pass nor a failure."""
        return not self.error and not self.levels and not self.steps

    @property
    def status(self) -> str:
        return "FAIL" if not self.ok else "SKIPPED" if self.skipped else "PASS"

    def steps_table(self) -> list[dict]:
        """The owner-held chains' stay tests as shown by ``as_text`` and the console's page (one table, the same
        cells): epsilons, chains, stays, their share, the law's share, the p-value, and ``flag``."""
        return [{"eps_from": t["eps_from"], "eps_to": t["eps_to"], "n": str(t["n"]), "stayed": str(t["stayed"]),
                 "share": f"{t['stayed'] / t['n']:.4f}", "expected": f"{t['expected']:.4f}",
                 "p_value": f"{t['p_value']:.2g}", "flag": t["flag"]} for t in self.steps]

    @property
    def domain(self) -> str:
        """``m`` in words: what the attackers guess among."""
        per = {"string": " per Bloom bit", "graph": " states per item", "ternary": " states",
               "numeric": " (discretized to its bounds)"}
        return f"m = {self.m}{per.get(self.kind, '')}"


@dataclass
class PrivacyAuditReport:
    attributes: list[AttributeAudit]
    sample: int
    seconds: float = 0.0
    png: bytes | None = None

    @property
    def ok(self) -> bool:
        return all(a.ok for a in self.attributes)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "sample": self.sample, "attributes": [
            {"attribute": a.attribute_id, "label": a.label, "m": a.m, "kind": a.kind, "values": a.values,
             "sampled": a.sampled, "leak": a.leak, "error": a.error, "note": a.note, "status": a.status,
             "skipped": a.skipped, "owner_held": a.owner_held, "not_random": a.not_random, "steps": a.steps,
             "levels": [{"epsilon": lv.epsilon, "n": lv.n, "bound": lv.bound, "attackers": lv.attackers}
                        for lv in a.levels]} for a in self.attributes]}

    def as_text(self) -> str:
        short = {"last_output": "LO", "mle": "MLE", "highest_frequency": "HF", "weighted_highest_frequency": "WHF"}
        lines = ["Privacy audit by inference (docs/mechanisms-reference.md#privacy-audit-by-inference): error rate +- "
                 "standard error of each",
                 "attacker on a uniform-prior subsample of stored chains, against the Bayes bound 1 - E/(E + m - 1).",
                 "A '!' marks an error rate significantly below the bound (a chain leaks more than its epsilon).", ""]
        for a in self.attributes:
            lines.append(f"[{a.status}] attribute {a.attribute_id} {a.label} ({a.domain}, {a.kind}): {a.values} "
                         f"values, {a.sampled} sampled, {a.common_epsilons} common epsilons")
            if a.error:
                lines.append(f"    ERROR: {a.error}")
            if a.note:
                lines.append(f"    note: {a.note}")
            if a.levels:
                head = f"    {'epsilon':>9} {'n':>6} {'bound':>7} " + " ".join(f"{short[n]:>16}" for n in ATTACKERS)
                lines.append(head)
                for lv in a.levels:
                    cells = []
                    for name in ATTACKERS:
                        r = lv.attackers[name]
                        mark = "!" if r["flag"] else " "
                        cells.append(f"{r['error_rate']:7.4f}+-{r['standard_error']:6.4f}{mark}")
                    lines.append(f"    {lv.epsilon:9.4f} {lv.n:6d} {lv.bound:7.4f} " + " ".join(cells))
            if a.steps:
                lines.append(f"    owner-held chains ({a.owner_held}): share of outputs that stay the same between "
                             "two points, against the law ('!': not random)")
                for t in a.steps_table():
                    lines.append(f"    {t['eps_from']:>9} -> {t['eps_to']:<9} n {t['n']:>6}  stayed {t['share']}  "
                                 f"law {t['expected']}  p {t['p_value']}"
                                 f"{' !' if t['flag'] else ''}")
            lines.append("")
        audited = sum(not a.skipped for a in self.attributes)
        skipped = len(self.attributes) - audited
        lines.append(f"RESULT: {'PASS' if self.ok else 'FAIL'} ({audited} attribute{'s' if audited != 1 else ''} "
                     f"audited, {skipped} skipped; {self.seconds:.2f} s)")
        return "\n".join(lines)


def _sample_ids(ids: np.ndarray, k: int, rng) -> np.ndarray:
    if ids.size <= k:
        return np.sort(ids)
    keys = words(rng, ids.size)
    return np.sort(ids[np.argpartition(keys, k)[:k]])


def stay_probability(eps_from: int, eps_to: int, m: int, divisor: int = 1) -> Fraction:
    """Exact ``Pr(o2 = o1)`` between a chain's points at micro-epsilons ``eps_from < eps_to``, for every true value:
    ``keep(e1) p_aa + (1 - keep(e1)) p_bb`` (module docstring) from the integer laws the samplers draw from, each
    output drawn at ``epsilon / divisor`` (``Attribute.draw_divisor``: a string's Bloom bits)."""
    e1, e2 = draw_epsilon(eps_from, divisor), draw_epsilon(eps_to, divisor)
    cells = krr_cells(e1, m)
    keep = Fraction(cells.keep, cells.total)
    kept, moved = step_weights(e1, e2, m)
    return keep * Fraction(kept.first, kept.total) + (1 - keep) * Fraction(moved.second, moved.total)


#: Fewest chains an epsilon pair needs before its stay rate is tested.
MIN_PAIRS = 30


def _owner_held_steps(attribute, out: AttributeAudit, sample: int, rng) -> None:
    """The stay test of the module docstring on a sample of the attribute's owner-held chains."""
    held = np.array(list(Value.objects.filter(attribute=attribute, custody=Value.Custody.OWNER, block__isnull=False)
                         .values_list("id", flat=True)), dtype=np.int64)
    out.owner_held = int(held.size)
    width = attribute.width
    if held.size == 0 or (width != 1 and attribute.kind != Attribute.Kind.STRING):
        return
    rows = list(Value.objects.filter(id__in=_sample_ids(held, sample, rng).tolist()).order_by("id")
                .values_list("block_id", "slot"))
    block_ids = np.array([r[0] for r in rows], dtype=np.int64)
    slots = np.array([r[1] for r in rows], dtype=np.int64)
    blocks = store.read(block_ids)
    eps = np.unique(np.concatenate(store.epsilons_of(blocks, block_ids, slots) + [np.zeros(0, np.int64)]))
    if eps.size < 2:
        return
    present, outputs = store.grid_of_points(attribute, blocks, block_ids, slots, eps)
    # one chain per output: a string's Bloom bits are independent binary chains, tested together
    outputs = outputs.transpose(0, 2, 1).reshape(len(rows) * width, eps.size)
    present = np.repeat(present, width, axis=0)
    last_eps = np.full(outputs.shape[0], -1, dtype=np.int64)
    last_out = np.full(outputs.shape[0], -1, dtype=np.int64)
    pairs, stays = [], []
    for j in range(eps.size):  # each chain's consecutive stored points (e1, e2) and whether the output stayed
        here = present[:, j] & (last_eps >= 0)
        pairs.append(last_eps[here] * (1 << 32) + eps[j])
        stays.append(outputs[here, j] == last_out[here])
        last_eps = np.where(present[:, j], eps[j], last_eps)
        last_out = np.where(present[:, j], outputs[:, j], last_out)
    pairs, stays = np.concatenate(pairs), np.concatenate(stays)
    keys, inverse, counts = np.unique(pairs, return_inverse=True, return_counts=True)
    stayed = np.bincount(inverse, weights=stays, minlength=keys.size).astype(np.int64)
    tested = np.flatnonzero(counts >= MIN_PAIRS)
    m = attribute.domain_size
    for k in tested.tolist():
        e1, e2 = int(keys[k] >> 32), int(keys[k] & ((1 << 32) - 1))
        p = stay_probability(e1, e2, m, attribute.draw_divisor)
        res = binomtest(int(stayed[k]), int(counts[k]), float(p))
        out.steps.append({"eps_from": str(draw_epsilon(e1, attribute.draw_divisor)),
                          "eps_to": str(draw_epsilon(e2, attribute.draw_divisor)), "n": int(counts[k]),
                          "stayed": int(stayed[k]), "expected": float(p), "p_value": float(res.pvalue),
                          "flag": bool(res.pvalue < LEAK_LEVEL / max(1, tested.size))})


def _audit_attribute(attribute, *, sample: int, levels: int, coverage: float, rng) -> AttributeAudit:
    m = attribute.domain_size
    out = AttributeAudit(attribute.id, str(attribute), m, attribute.kind)
    if attribute.is_oneshot:
        out.values = int(Value.objects.filter(attribute=attribute).count())
        out.note = (f"one-shot mechanism ({attribute.mechanism}): no stored chains to attack; each release is a "
                    f"fresh draw charged to the value's one-shot loss")
        return out
    try:
        _owner_held_steps(attribute, out, sample, rng)
    except sealing.SealBroken as exc:
        out.error = f"stored chain points do not open: {exc}"
        return out
    ids = np.array(list(Value.objects.filter(attribute=attribute, input_sealed__isnull=False)
                        .values_list("id", flat=True)), dtype=np.int64)
    out.values = int(Value.objects.filter(attribute=attribute).count())
    chosen = _sample_ids(ids, sample, rng)
    rows = []
    for s in range(0, chosen.size, 1000):
        part = chosen[s:s + 1000].tolist()
        rows += list(Value.objects.filter(id__in=part, block__isnull=False).order_by("id").values_list(
            "id", "owner_id", "input_sealed", "block_id", "slot", "value_key_id"))
    out.sampled = len(rows)
    if not rows:
        out.note = "no stored chains with their raw value to audit"
        return out
    try:
        payload = sealing.open_inputs([bytes(r[2]) for r in rows], [r[1] for r in rows], [attribute.id] * len(rows),
                                      domain.payload_bytes(attribute), [r[5] for r in rows])
    except sealing.SealBroken as exc:
        out.error = f"sealed inputs do not open: {exc}"
        return out
    truth = domain.from_payload(attribute, payload)  # (n, width)
    block_ids = np.array([r[3] for r in rows], dtype=np.int64)
    slots = np.array([r[4] for r in rows], dtype=np.int64)
    blocks = store.read(block_ids)
    all_eps = np.concatenate(store.epsilons_of(blocks, block_ids, slots))
    distinct, counts = np.unique(all_eps, return_counts=True)
    common = distinct[counts >= coverage * len(rows)]
    out.common_epsilons = int(common.size)
    if common.size == 0:
        out.note = "the sampled chains share no epsilon"
        return out
    L = common.size
    try:
        present, outputs = store.grid_of_points(attribute, blocks, block_ids, slots, common)
    except sealing.SealBroken as exc:
        out.error = f"stored chain points do not open: {exc}"
        return out
    steps = np.unique(np.round(np.linspace(1, L, min(levels, L))).astype(np.int64))
    threshold = LEAK_LEVEL / steps.size  # Bonferroni over the levels of one attribute
    for j in steps:
        keep = present[:, :j].all(axis=1)
        x = truth[keep].reshape(-1)
        o = outputs[keep, :j, :].transpose(0, 2, 1).reshape(-1, j)
        if x.size == 0 or np.bincount(x, minlength=m).min() == 0:
            continue
        if (o < 0).any() or (o >= m).any() or (x < 0).any() or (x >= m).any():
            out.error = "stored outputs or inputs outside the attribute's domain"
            return out
        res = run_attacks(x, o, common[:j] / MICRO / attribute.draw_divisor, m, rng)  # each output's epsilon
        out.levels.append(Level(
            epsilon=float(common[j - 1]) / MICRO, n=int(res["n"]), bound=float(res["bound"]),
            attackers={name: {"error_rate": r["error_rate"], "standard_error": r["standard_error"],
                              "z": r["z"], "p_value": r["p_value"], "flag": bool(r["p_value"] < threshold)}
                       for name, r in ((nm, res["attackers"][nm]) for nm in ATTACKERS)}))
    if not out.levels:
        out.note = "too few sampled values of every category for a uniform-prior subsample"
    return out


def privacy_audit(*, sample: int = 2000, levels: int = 10, attribute_ids: Iterable[int] | None = None,
                  coverage: float = 0.5, rng=None, plot: bool = True) -> PrivacyAuditReport:
    """Run the four attackers of docs/mechanisms-reference.md#privacy-audit-by-inference on a sample of each attribute's
    stored chains.

    For each attribute: ``sample`` values with their raw datum are drawn at
    random; their true inputs are opened (``market.values.sealing.open_inputs``: an
    operator tool -- nothing but error rates leaves this function); the
    epsilons present in at least ``coverage`` of the sampled chains form the
    common path; at up to ``levels`` prefixes of it, the chains holding the
    whole prefix are attacked (``mechanisms.audit.run_attacks``, uniform-prior
    subsample).  An attacker is flagged when its error rate is below the
    Theorem 6.1 bound by more than chance allows (exact binomial test at
    ``LEAK_LEVEL``, Bonferroni-divided by the number of levels).
    """
    started = time.perf_counter()
    qs = Attribute.objects.select_related("dataset").order_by("id")
    if attribute_ids:
        qs = qs.filter(id__in=list(attribute_ids))
    results = [_audit_attribute(a, sample=sample, levels=levels, coverage=coverage, rng=rng) for a in qs]
    report = PrivacyAuditReport(results, sample)
    if plot:
        report.png = privacy_plot_png(report)
    report.seconds = time.perf_counter() - started
    return report
