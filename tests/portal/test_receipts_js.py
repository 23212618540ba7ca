"""The browser's receipt checks (``portal/static/portal/receipts_verify.js``, the pure verifier the value page's
``receipts_page.js`` calls) in Chromium (docs/receipts.md, "Checking receipts").

Receipts files come from ``tests/client/receipt_fixtures.py`` (synthetic entries laid out as docs/receipts.md
says, trees and proofs from ``accounts.ledger.merkle``, checkpoints signed by a fresh Ed25519 key) and are checked by
the module's ``verifyBundle`` in the page:

* its RFC 9162 inclusion and consistency checks answer as ``accounts.ledger.merkle``'s on every index and size up to 70
  (and 2049), for valid proofs and broken ones;
* a valid file verifies every entry, in blocks of 1, 3, 5 and 2049 entries, against its own checkpoint or against
  an older or newer one linked by a consistency proof;
* each tampering is caught by the check docs/receipts.md assigns it: a changed entry byte, a shown entry that
  differs from its entry data, a receipt left out (a gap), receipts out of order, swapped entry indexes, a changed
  proof hash, a wrong block index or size, a loss above the ceiling or going down, a bad signature, a wrong key, a
  statement that does not state the checkpoint, a forked log (same size with different roots; a consistency proof
  that does not link).

The shared vectors ``tests/data/receipt_vectors.json`` (``tests/js/make_receipt_vectors.py``: the same kinds of
files and tampering, fixed keys) are what Node's tests check the module against without a browser
(``tests/js/receipts_verify.test.mjs``, ``node --test``); here: they are up to date, the Python client's verifier
agrees with every case's verdict (but for the differences named in ``CLIENT_DIFFERS``), and Chromium gives every
case's answer too.  Likewise ``tests/data/tlog_vectors.json`` (``tests/js/make_tlog_vectors.py``: the Python tlog
conformance tests' keys, notes, checkpoints and policies with ``ldpmarket_client.tlog``'s answers) for the page's
C2SP verifier ``tlog_note.js`` (``tests/js/tlog_note.test.mjs``): up to date, and every answer the same in Chromium.
The browser tests are skipped, saying why, without Playwright or ``/usr/bin/chromium``.
"""
from __future__ import annotations

import base64
import copy
import hashlib
import json
import os

import pytest
from cryptography.hazmat.primitives import serialization

from accounts.ledger import merkle
from accounts.ledger.leaves import block_leaf, entry_leaf_data
from ldpmarket_client.tlog import note as tlog_note
from tests.client import receipt_fixtures as rf
from tests.js import make_receipt_vectors, make_tlog_vectors
from tests.portal.test_browser import ARGS, CHROMIUM, sync_playwright

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
MODULE = "/static/portal/receipts_verify.js"
ID_SHIFT = 2 ** 24

#: Vectors the Python client's verifier (``ldpmarket_client.receipts``) answers otherwise, and why.
CLIENT_DIFFERS = {
    "a shown id of": "the client does not compare the shown entry id with block id * 2^24 + position",
    "value 7's receipts 4 and 5 swapped": "the client sorts each value's receipts by block and position before "
                                          "chaining them; the portal wants them in ledger order, as served",
}

VERIFY = """async ([url, bundle, checkpoint, key, consistency]) => {
  const m = await import(url);
  const r = await m.verifyBundle(bundle, checkpoint, key, consistency);
  return {ok: r.ok, checks: r.checks, ids: [...r.verifiedEntryIds], problems: r.problems, forked: r.forked};
}"""


def raw_hex(key) -> str:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def fillers(n: int, start: int = 900) -> list[dict]:
    return [rf.filler(start + i) for i in range(n)]


def two_values() -> rf.Fixture:
    """Values 7 and 8 in blocks of 1, 3, 5, 1 and 2049 entries (first, middle and last positions), after 3
    foreign leaves: a log of 8 leaves.  Receipts for 7 and 8 only."""
    s7 = rf.history(7, [("ceiling", 2_000_000), ("chain", 500_000), ("chain", 1_000_000), ("ceiling", 3_000_000),
                        ("oneshot", 400_000, "uldp"), ("chain", 1_200_000)], purchase=11)
    s8 = rf.history(8, [("ceiling", 2_000_000), ("oneshot", 250_000)], purchase=12)
    blocks = [[s7[0]], [s8[0], *fillers(1), s7[1]], [*fillers(2), s7[2], s8[1], *fillers(1)], [s7[3]],
              [*fillers(1000), s7[4], *fillers(1047), s7[5]]]
    assert [len(b) for b in blocks] == [1, 3, 5, 1, 2049]
    return rf.build(blocks, values=[7, 8], foreign_leaves=3)


@pytest.fixture(scope="module")
def page(live_server, django_db_blocker):
    """Chromium on the module's URL (tests using it are skipped, saying why, without Playwright or Chromium).

    The pages only load static files, but the live server's thread still closes its old database connection at each
    request: after a test of another module that used the database (tests/portal/test_pages.py, run before this
    one), that connection exists and pytest-django's blocker refused it, failing every request here."""
    if sync_playwright is None:
        pytest.skip("Playwright for Python is not installed (pip install playwright)")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    with sync_playwright() as p, django_db_blocker.unblock():
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        response = page.goto(f"{live_server.url}{MODULE}")
        assert response.ok and "javascript" in response.headers["content-type"]
        yield page
        browser.close()
        assert errors == []


@pytest.fixture(scope="module")
def module_fx():
    return two_values()


@pytest.fixture
def fx():
    """A fixture of its own, for tests that grow the log or sign more checkpoints."""
    return two_values()


def verify(page, fx, bundle=None, checkpoint=None, *, key=None, consistency=None) -> dict:
    return page.evaluate(VERIFY, [MODULE, bundle or fx.bundle, checkpoint or fx.checkpoint, key or raw_hex(fx.key),
                                  consistency])


def failed(result) -> set[str]:
    return {name for name, ok in result["checks"].items() if not ok}


def ids_of(bundle, value=None) -> list[int]:
    return [r["entry"]["id"] for r in bundle["receipts"] if value is None or r["entry"]["value"] == value]


def tampered(bundle, change) -> dict:
    out = copy.deepcopy(bundle)
    change(out)
    return out


def receipt_of(bundle, entry_id) -> dict:
    return next(r for r in bundle["receipts"] if r["entry"]["id"] == entry_id)


def test_the_fixtures_lay_entries_and_blocks_out_as_the_ledger_does():
    """The layout the module decodes is the service's (accounts/ledger/hashchain.py), not only the fixtures'."""
    import numpy as np

    from accounts.ledger import hashchain as ledger

    rec = rf.record(7, "oneshot_release", epsilon=400_000, purchase=13, chain=(1, 2), oneshot=(3, 4), ceiling=5,
                    guarantee="per_report_non_collusion", schedule_start_at=6)
    record = np.array([tuple(rec[f] for f in rf.FIELDS)], dtype=ledger.ENTRY)[0]
    assert rf.entry_data(rec) == entry_leaf_data(record) and len(rf.entry_data(rec)) == 159
    data = rf.block_data(4, 9, 105, 3, 1234, b"h" * 32, b"r" * 32)
    assert data == block_leaf(4, 9, 105, 3, 1234, (b"h" * 32).hex(), (b"r" * 32).hex())


# ------------------------------------------------------------------ the shared vectors (Node's tests read them)

def test_the_receipt_vectors_are_up_to_date():
    fresh = make_receipt_vectors.dumps(make_receipt_vectors.generate())
    assert fresh == make_receipt_vectors.PATH.read_text(), \
        "tests/data/receipt_vectors.json is stale: run python -m tests.js.make_receipt_vectors"


def test_the_python_client_gives_each_receipt_vector_its_verdict():
    """``ldpmarket_client.receipts.verify_bundle`` (the same checks in Python, docs/client.md) passes the valid
    cases and fails the tampered ones, but for ``CLIENT_DIFFERS``."""
    from ldpmarket_client import receipts

    vectors = json.loads(make_receipt_vectors.PATH.read_text())
    differ = {}
    for case in vectors["cases"]:
        bundle = make_receipt_vectors.apply_patch(vectors["bundles"][case["bundle"]], case["patch"])
        report = receipts.verify_bundle(bundle, case["checkpoint"], vectors["keys"][case["key"]], case["consistency"])
        if report.ok != case["expect"]["ok"]:
            differ[case["name"]] = report.problems
    named = {name for name in differ if any(name.startswith(prefix) for prefix in CLIENT_DIFFERS)}
    assert set(differ) == named, {name: differ[name] for name in set(differ) - named}
    assert len(named) == len(CLIENT_DIFFERS), f"a difference is gone: {sorted(named)}"


def test_chromium_gives_every_receipt_vector_its_answer(page):
    """Every case of the shared vectors, in the browser, as Node's tests check it."""
    vectors = json.loads(make_receipt_vectors.PATH.read_text())
    result = page.evaluate("""async ([url, vectors]) => {
      const m = await import(url);
      const parentOf = (doc, path) => {
        for (const k of path.slice(0, -1)) doc = doc[k];
        return [doc, path[path.length - 1]];
      };
      const patched = (doc, patch) => {
        const out = structuredClone(doc);
        for (const [op, path, arg] of patch) {
          const [parent, last] = parentOf(out, path);
          if (op === "set") parent[last] = structuredClone(arg);
          else if (op === "delete") Array.isArray(parent) ? parent.splice(last, 1) : delete parent[last];
          else if (op === "swap") {
            const [other, otherLast] = parentOf(out, arg);
            [parent[last], other[otherLast]] = [other[otherLast], parent[last]];
          } else throw new Error(op);
        }
        return out;
      };
      const bad = [];
      for (const c of vectors.cases) {
        const r = await m.verifyBundle(patched(vectors.bundles[c.bundle], c.patch), c.checkpoint, c.key,
                                       c.consistency);
        const got = {ok: r.ok, failed: Object.keys(r.checks).filter((k) => !r.checks[k]).sort(),
                     verified: [...r.verifiedEntryIds].sort((a, b) => a - b), forked: r.forked};
        const e = c.expect;
        const said = e.message === null || r.problems.some((p) => p.message.includes(e.message));
        if (JSON.stringify(got) !== JSON.stringify({ok: e.ok, failed: e.failed, verified: e.verified,
                                                    forked: e.forked}) || !said) bad.push({name: c.name, got});
      }
      return {bad, count: vectors.cases.length};
    }""", [MODULE, vectors])
    assert result["bad"] == [] and result["count"] >= 50


# ------------------------------------------------------------------ C2SP notes, checkpoints and policies (tlog_note.js)

def test_the_tlog_vectors_are_up_to_date():
    """``tests/data/tlog_vectors.json`` (``tests/js/make_tlog_vectors.py``: the Python conformance tests' vectors
    with the Python library's answers) is what a fresh generation writes."""
    fresh = make_tlog_vectors.dumps(make_tlog_vectors.generate())
    assert fresh == make_tlog_vectors.PATH.read_text(), \
        "tests/data/tlog_vectors.json is stale: run python -m tests.js.make_tlog_vectors"


TLOG_RUN = """async ([url, verifyUrl, v]) => {
  const t = await import(url);
  const rv = await import(verifyUrl);
  const bytes = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  const b64 = (u) => btoa(Array.from(u, (c) => String.fromCharCode(c)).join(""));
  const hex = (u) => Array.from(u, (c) => c.toString(16).padStart(2, "0")).join("");
  const kind = (exc) => { if (!(exc instanceof t.NoteError)) throw exc; return exc.name; };
  async function opened(note, vkeys) {
    const verifiers = await Promise.all(vkeys.map(t.parseVkey));
    try {
      const n = await t.openNote(note, verifiers);
      return {error: null, text: b64(n.text),
              verified: n.verified.map((x) => [x.verifier.name, x.verifier.type, String(x.timestamp)]),
              unverified: n.unverified.map((u) => [u.name, u.keyId.toString(16).padStart(8, "0")])};
    } catch (exc) { return {error: kind(exc)}; }
  }
  const out = {vkeys: [], notes: [], flips: [], checkpoints: [], policies: [], checks: [], bundles: []};
  for (const c of v.vkeys) {
    try {
      const k = await t.parseVkey(c.vkey);
      out.vkeys.push({name: k.name, type: k.type, key_id: k.keyId.toString(16).padStart(8, "0"),
                      public: hex(k.publicKey)});
    } catch (exc) { kind(exc); out.vkeys.push(null); }
  }
  for (const c of v.notes) out.notes.push(await opened(bytes(c.note), c.verifiers));
  const note = bytes(v.flips.note);
  for (const [index, mask] of v.flips.flips) {
    const changed = note.slice();
    changed[index] ^= mask;
    out.flips.push(await opened(changed, v.flips.verifiers));
  }
  for (const c of v.checkpoints) {
    try {
      const cp = t.parseCheckpoint(bytes(c.text));
      out.checkpoints.push({origin: cp.origin, size: String(cp.size), root: cp.rootHex, extensions: cp.extensions});
    } catch (exc) { kind(exc); out.checkpoints.push(null); }
  }
  for (const c of v.policies) {
    try {
      const p = await t.parsePolicy(bytes(c.text));
      const shown = (m) => (p.witnesses.get(m) || p.groups.get(m)).name;
      out.policies.push({logs: p.logs.map((m) => m.verifier.vkey), log_urls: p.logs.map((m) => m.url),
                         witnesses: [...p.witnesses.values()].map((w) => [w.name, w.verifier.vkey, w.url]),
                         groups: [...p.groups.values()].map((g) => [g.name, g.threshold, g.members.map(shown)]),
                         quorum: p.quorum === "none" ? "none" : shown(p.quorum), describe: t.describeQuorum(p)});
    } catch (exc) { kind(exc); out.policies.push(null); }
  }
  for (const c of v.checkpoint_cases) {
    try {
      const r = await t.verifyCheckpoint(v.checkpoint_policies[c.policy], bytes(c.note), {origin: c.origin});
      out.checks.push({error: null, origin: r.origin, size: String(r.size), root: r.rootHex, witnessed: r.witnessed,
                       total: r.total, quorum: r.quorumText});
    } catch (exc) {
      const e = {error: kind(exc)};
      if (exc.name === "QuorumNotMet") {
        Object.assign(e, {witnessed: exc.result.witnessed, total: exc.result.total, quorum: exc.result.quorumText});
      }
      out.checks.push(e);
    }
  }
  for (const c of v.bundle_cases) {
    const b = structuredClone(v.receipts.bundle);
    if (c.note === null) delete b.checkpoint.note; else b.checkpoint.note = c.note;
    const r = await rv.verifyBundle(b, v.receipts.checkpoint, v.receipts.key, null, c.policy);
    out.bundles.push({ok: r.ok, failed: Object.keys(r.checks).filter((k) => !r.checks[k]).sort(),
                      verified: [...r.verifiedEntryIds].sort((x, y) => x - y),
                      witness: r.witness && {witnessed: r.witness.witnessed, total: r.witness.total,
                                             quorum: r.witness.quorumText},
                      messages: r.problems.map((p) => p.message)});
  }
  return out;
}"""


def test_chromium_gives_every_tlog_vector_the_python_librarys_answer(page):
    """Chromium's WebCrypto and ``tlog_note.js`` on every vector of ``tests/data/tlog_vectors.json``: vkeys, notes
    (and every byte of one changed), checkpoint texts, policies, checkpoints opened with policies, and receipts
    files whose checkpoint note ``verifyBundle`` opens with a policy -- the answers of the Python library."""
    v = json.loads(make_tlog_vectors.PATH.read_text())
    got = page.evaluate(TLOG_RUN, ["/static/portal/tlog_note.js", MODULE, v])
    assert got["vkeys"] == [c["expect"] for c in v["vkeys"]]
    assert {c["name"]: g for c, g in zip(v["notes"], got["notes"]) if g != c["expect"]} == {}
    text = base64.b64encode(tlog_note.parse_note(base64.b64decode(v["flips"]["note"])).text).decode()
    flips = [{k: x for k, x in g.items() if not (k == "text" and x == text)} for g in got["flips"]]
    assert [(i, m, g) for (i, m, e), g in zip(v["flips"]["flips"], flips) if g != e] == []
    assert got["checkpoints"] == [c["expect"] for c in v["checkpoints"]]
    assert {c["name"]: g for c, g in zip(v["policies"], got["policies"]) if g != c["expect"]} == {}
    assert {c["name"]: g for c, g in zip(v["checkpoint_cases"], got["checks"]) if g != c["expect"]} == {}
    for c, g in zip(v["bundle_cases"], got["bundles"], strict=True):
        e = c["expect"]
        assert {k: g[k] for k in ("ok", "failed", "verified", "witness")} == {
            k: e[k] for k in ("ok", "failed", "verified", "witness")}, c["name"]
        assert e["message"] is None or any(e["message"] in m for m in g["messages"]), (c["name"], g["messages"])
    assert len(got["flips"]) > 600 and len(got["checks"]) > 100


# ------------------------------------------------------------------ RFC 9162 proofs agree with accounts.ledger.merkle

def test_inclusion_and_consistency_checks_agree_with_the_python_ones(page):
    """Valid proofs, and proofs with a hash changed, a hash dropped, another index or size, another root: the
    module answers as ``merkle.verify_inclusion`` / ``verify_consistency`` do."""
    leaves = [merkle.leaf_hash(b"leaf %d" % i) for i in range(2049)]
    cases = []   # [kind, a, b, leaf or first root, (second) root, proof, what Python answers]

    def inc(i, n, leaf, root, proof):
        cases.append(["inc", i, n, leaf.hex(), root.hex(), [p.hex() for p in proof],
                      merkle.verify_inclusion(i, n, leaf, proof, root)])

    def con(m, n, r1, r2, proof):
        cases.append(["con", m, n, r1.hex(), r2.hex(), [p.hex() for p in proof],
                      merkle.verify_consistency(m, n, r1, r2, proof)])

    other = hashlib.sha256(b"x").digest()
    for n in [*range(1, 71), 2049]:
        tree = merkle.Tree(leaves[:n])
        for i in (range(n) if n <= 70 else [0, 1, 1023, 1024, 2047, 2048]):
            proof = tree.inclusion_proof(i)
            inc(i, n, leaves[i], tree.root, proof)
            inc(i, n, other, tree.root, proof)
            inc(i ^ 1, n, leaves[i], tree.root, proof)
            inc(i, n + 1, leaves[i], tree.root, proof)
            if proof:
                inc(i, n, leaves[i], tree.root, [*proof[:-1], other])
                inc(i, n, leaves[i], tree.root, proof[:-1])
        inc(n, n, leaves[0], tree.root, [])
    for n in [*range(1, 41), 2049]:
        hashes = leaves[:n]
        r2 = merkle.root(hashes)
        for m in (range(1, n + 1) if n <= 40 else [1, 2, 3, 1024, 1025, 2048, 2049]):
            proof = merkle.consistency_proof(m, hashes)
            r1 = merkle.root(hashes[:m])
            con(m, n, r1, r2, proof)
            con(m, n, merkle.root([other, *hashes[1:m]]), r2, proof)
            con(m, n, r1, other, proof)
            if proof:
                con(m, n, r1, r2, proof[:-1])
                con(m, n, r1, r2, [other, *proof[1:]])
    answers = [c[-1] for c in cases]
    assert len(cases) > 5000 and answers.count(True) > 2000 and answers.count(False) > 5000
    result = page.evaluate("""async ([url, cases]) => {
      const m = await import(url);
      const h = (x) => m.hexToBytes(x);
      const bad = [];
      for (const [kind, a, b, x, root, proof, expected] of cases) {
        const got = kind === "inc" ? await m.verifyInclusion(a, b, h(x), proof.map(h), h(root))
                                   : await m.verifyConsistency(a, b, h(x), h(root), proof.map(h));
        if (got !== expected) bad.push([kind, a, b, proof.length, expected]);
      }
      return {bad: bad.slice(0, 10), count: bad.length};
    }""", [MODULE, cases])
    assert result["count"] == 0, result["bad"]


# ------------------------------------------------------------------ valid files verify

def test_a_valid_file_verifies_every_entry_in_blocks_of_1_3_5_and_2049(page, module_fx):
    bundle = module_fx.bundle
    assert module_fx.checkpoint["tree_size"] == 8 and {r["block_size"] for r in bundle["receipts"]} == {1, 3, 5, 2049}
    assert {r["entry_index"] for r in bundle["receipts"]} >= {0, 2, 3, 1000, 2048}
    result = verify(page, module_fx)
    assert result["problems"] == [] and result["ok"] and not result["forked"]
    assert all(result["checks"].values())
    assert sorted(result["ids"]) == sorted(ids_of(bundle)) and len(ids_of(bundle, 7)) == 6


def test_a_checkpoint_linked_by_a_consistency_proof_verifies(page, fx):
    everything = sorted(ids_of(fx.bundle))
    # the owner holds an older checkpoint (5 leaves, before the last three blocks): the file's is larger
    result = verify(page, fx, checkpoint=fx.checkpoint_of(5), consistency=fx.consistency(5, 8))
    assert result["ok"], result["problems"]
    assert sorted(result["ids"]) == everything
    # the owner holds a newer one (3 leaves more): the file is against an older checkpoint of the same log
    newer, proof = fx.grow(3)
    assert newer["tree_size"] == 11
    result = verify(page, fx, checkpoint=newer, consistency=proof)
    assert result["ok"], result["problems"]
    assert sorted(result["ids"]) == everything
    # without a proof nothing links them, and nothing is verified
    result = verify(page, fx, checkpoint=newer)
    assert failed(result) == {"consistency"} and result["ids"] == [] and not result["forked"]


# ------------------------------------------------------------------ each tampering is caught

def test_a_changed_entry_byte_breaks_its_inclusion(page, module_fx):
    target = ids_of(module_fx.bundle, 7)[2]   # in the block of 5

    def change(b):
        r = receipt_of(b, target)
        data = bytearray.fromhex(r["entry_data"])
        data[rf.OFFSETS["schedule_cap"]] ^= 1   # a field the portal does not show
        r["entry_data"] = data.hex()

    result = verify(page, module_fx, tampered(module_fx.bundle, change))
    assert failed(result) == {"inclusion"} and not result["ok"]
    assert sorted(result["ids"]) == sorted(set(ids_of(module_fx.bundle)) - {target})


@pytest.mark.parametrize("field,value", [
    ("epsilon", "1.000001"), ("chain_loss_after", "0.400000"), ("ceiling", "5.000000"), ("kind", "oneshot_release"),
    ("purchase", 99), ("purchase", None), ("value", 8), ("guarantee", "ldp"), ("id", "next"),
])
def test_a_shown_entry_that_differs_from_its_data_is_refused(page, module_fx, field, value):
    target = ids_of(module_fx.bundle, 7)[1]

    def change(b):
        e = receipt_of(b, target)["entry"]
        e[field] = e["id"] + 1 if value == "next" else value

    result = verify(page, module_fx, tampered(module_fx.bundle, change))
    assert failed(result) == {"entry"}, result["problems"]
    assert target not in result["ids"] and target + 1 not in result["ids"]
    [problem] = result["problems"]
    assert problem["message"].startswith("receipt 2 ") and problem["message"].endswith(f"proven in {field}")


def test_a_receipt_left_out_shows_as_a_gap(page, module_fx):
    seven = ids_of(module_fx.bundle, 7)
    for dropped in (seven[1], seven[2], seven[4]):   # the first release, a middle entry, a one-shot release
        result = verify(page, module_fx, tampered(module_fx.bundle,
                                                  lambda b, d=dropped: b["receipts"].remove(receipt_of(b, d))))
        assert failed(result) == {"chain"}, result["problems"]
        assert any("gap" in p["message"] for p in result["problems"])
        assert seven[seven.index(dropped) + 1] not in result["ids"]


def test_receipts_out_of_ledger_order_are_refused(page, module_fx):
    seven = ids_of(module_fx.bundle, 7)

    def swap(b):
        i, j = b["receipts"].index(receipt_of(b, seven[3])), b["receipts"].index(receipt_of(b, seven[4]))
        b["receipts"][i], b["receipts"][j] = b["receipts"][j], b["receipts"][i]

    result = verify(page, module_fx, tampered(module_fx.bundle, swap))
    assert failed(result) == {"chain"}
    assert any("not in ledger order" in p["message"] for p in result["problems"])


def test_swapped_entry_indexes_break_the_inclusion(page, module_fx):
    a, b_ = ids_of(module_fx.bundle, 7)[2], ids_of(module_fx.bundle, 8)[1]   # positions 2 and 3 of one block
    assert a // ID_SHIFT == b_ // ID_SHIFT

    def swap(b):
        ra, rb = receipt_of(b, a), receipt_of(b, b_)
        ra["entry_index"], rb["entry_index"] = rb["entry_index"], ra["entry_index"]

    result = verify(page, module_fx, tampered(module_fx.bundle, swap))
    assert "inclusion" in failed(result)
    assert a not in result["ids"] and b_ not in result["ids"]


@pytest.mark.parametrize("proof", ["entry_proof", "block_proof"])
def test_a_changed_proof_hash_breaks_the_inclusion(page, module_fx, proof):
    target = ids_of(module_fx.bundle, 7)[4]   # in the block of 2049

    def change(b):
        r = receipt_of(b, target)
        r[proof][1] = hashlib.sha256(r[proof][1].encode()).hexdigest()

    result = verify(page, module_fx, tampered(module_fx.bundle, change))
    assert failed(result) == {"inclusion"} and target not in result["ids"]


@pytest.mark.parametrize("index", [2, 5, 8])   # a foreign leaf, another block's leaf, outside the tree
def test_a_wrong_block_index_breaks_the_inclusion(page, module_fx, index):
    target = ids_of(module_fx.bundle, 7)[1]
    assert receipt_of(module_fx.bundle, target)["block_index"] == 4
    result = verify(page, module_fx, tampered(module_fx.bundle,
                                              lambda b: receipt_of(b, target).update(block_index=index)))
    assert failed(result) == {"inclusion"} and target not in result["ids"]


@pytest.mark.parametrize("value,nth,size,count", [(8, 0, 4, 3), (7, 4, 2048, 2049)])
def test_a_block_size_that_is_not_the_blocks_entry_count_is_refused(page, module_fx, value, nth, size, count):
    # leaf 0 of the block of 3 claimed in a tree of 4: its path would verify, the entry count in block_data not
    target = ids_of(module_fx.bundle, value)[nth]
    result = verify(page, module_fx, tampered(module_fx.bundle,
                                              lambda b: receipt_of(b, target).update(block_size=size)))
    assert failed(result) == {"inclusion"} and target not in result["ids"]
    [problem] = result["problems"]
    assert problem["message"].endswith(f"block_size {size} is not the block's entry count {count}")


def test_a_loss_above_the_ceiling_or_going_down_is_refused_even_when_proven(page):
    def check(*blocks, verified):
        fx = rf.build([[b] for b in blocks])
        result = verify(page, fx)
        assert failed(result) == {"losses"}, result["problems"]
        assert result["ids"] == ids_of(fx.bundle)[:verified]

    ceiling = rf.record(7, "ceiling")   # 1
    # above the ceiling: the chain alone, or chain and one-shot together (0.6 + 0.5)
    check(ceiling, rf.record(7, "chain_release", epsilon=1_500_000, purchase=1, chain=(0, 1_500_000)), verified=1)
    check(ceiling, rf.record(7, "chain_release", epsilon=600_000, purchase=1, chain=(0, 600_000)),
          rf.record(7, "oneshot_release", epsilon=500_000, purchase=2, chain=(600_000, 600_000), oneshot=(0, 500_000),
                    guarantee="ldp"), verified=2)
    # going down: the chain loss, or the one-shot loss
    check(ceiling, rf.record(7, "chain_release", epsilon=500_000, purchase=1, chain=(0, 500_000)),
          rf.record(7, "ceiling", chain=(500_000, 300_000)), verified=2)
    check(ceiling, rf.record(7, "oneshot_release", epsilon=500_000, purchase=1, oneshot=(0, 500_000), guarantee="ldp"),
          rf.record(7, "pause", oneshot=(500_000, 0)), verified=2)


def test_a_bad_signature_verifies_nothing(page, module_fx):
    sig = bytearray.fromhex(module_fx.checkpoint["signature"])
    sig[5] ^= 0x40
    bad = {**module_fx.checkpoint, "signature": sig.hex()}
    for bundle, given in ((module_fx.bundle, bad), ({**module_fx.bundle, "checkpoint": bad}, module_fx.checkpoint)):
        result = verify(page, module_fx, bundle, given)
        assert failed(result) == {"signature"} and result["ids"] == []


def test_a_checkpoint_signed_by_another_key_verifies_nothing(page, module_fx):
    other = rf.new_key()
    # the service's checkpoint, checked with another key
    result = verify(page, module_fx, key=raw_hex(other))
    assert failed(result) == {"signature"} and result["ids"] == []
    # a checkpoint of the same root signed by another key, checked with the published one
    forged = rf.sign_checkpoint(other, 8, module_fx.checkpoint["root_hash"], rf.T0)
    result = verify(page, module_fx, {**module_fx.bundle, "checkpoint": forged}, forged)
    assert failed(result) == {"signature"} and result["ids"] == []
    assert any("not the published key" in p["message"] for p in result["problems"])


def test_a_statement_that_does_not_state_the_checkpoint_verifies_nothing(page, module_fx):
    cp = module_fx.checkpoint
    header, size, root, time, end = cp["statement"].split("\n")
    assert (size, root, end) == ("8", cp["root_hash"], "")

    def signing(*lines):   # a statement signed by the published key, the checkpoint's fields as they are
        return rf.sign_checkpoint(module_fx.key, 8, cp["root_hash"], module_fx.created_at, "\n".join(lines))

    bad = [signing(header, "7", root, time, end), signing(header, size, "ab" * 32, time, end),
           signing("ldpmarket ledger checkpoint v0", size, root, time, end), signing(header, size, root, time),
           {**cp, "created_at": "2026-03-01T13:00:00Z"}]
    assert signing(header, size, root, time, end) == cp
    for checkpoint in bad:
        result = verify(page, module_fx, {**module_fx.bundle, "checkpoint": checkpoint})
        assert failed(result) == {"statement"}, result["problems"]
        assert result["ids"] == []


def test_a_forked_log_is_reported_as_forked(page, fx):
    # the service shows another root for the same tree size, signed
    leaves = list(fx.leaves)
    leaves[4] = rf.block_data(3, 2, 101, 3, 0, bytes(32), bytes(32))
    other_root = fx.sign(8, fx.root_of(8, leaves))
    result = verify(page, fx, checkpoint=other_root)
    assert result["forked"] and failed(result) == {"fork"} and result["ids"] == []
    # the owner holds the real checkpoint; the service's later one rewrote block 101's leaf
    newer, proof = fx.grow(2, rewrite={4: leaves[4]})
    result = verify(page, fx, checkpoint=newer, consistency=proof)
    assert result["forked"] and failed(result) == {"fork"} and result["ids"] == []
    # the owner holds checkpoint 5 of a rewritten log; the file is against the real 8, with the real proof
    result = verify(page, fx, checkpoint=fx.sign(5, fx.root_of(5, leaves)), consistency=fx.consistency(5, 8))
    assert result["forked"] and result["ids"] == []
    # a proof with a hash changed does not link the real checkpoints; one for other sizes is no proof
    proof = fx.consistency(5, 8)
    proof["proof"][0] = hashlib.sha256(b"x").hexdigest()
    result = verify(page, fx, checkpoint=fx.checkpoint_of(5), consistency=proof)
    assert result["forked"] and result["ids"] == []
    result = verify(page, fx, checkpoint=fx.checkpoint_of(5), consistency=fx.consistency(4, 8))
    assert failed(result) == {"consistency"} and not result["forked"] and result["ids"] == []
    # an answer stating another root for a signed size is refused, even with a proof that links the signed ones
    for which in ("first_root", "second_root"):
        result = verify(page, fx, checkpoint=fx.checkpoint_of(5),
                        consistency={**fx.consistency(5, 8), which: "ab" * 32})
        assert failed(result) == {"consistency"} and not result["forked"] and result["ids"] == []
    # the genuine proof links them
    result = verify(page, fx, checkpoint=fx.checkpoint_of(5), consistency=fx.consistency(5, 8))
    assert result["ok"], result["problems"]


def test_what_is_not_a_receipts_file_is_refused(page, module_fx):
    for bad in ({**module_fx.bundle, "format": "ldpmarket-receipts-v0"}, {"checkpoint": module_fx.checkpoint}):
        result = verify(page, module_fx, bad)
        assert failed(result) == {"format"} and result["ids"] == []
    first = ids_of(module_fx.bundle)[0]
    result = verify(page, module_fx, tampered(module_fx.bundle,
                                              lambda b: receipt_of(b, first).update(entry_data="00" * 159)))
    assert "entry" in failed(result) and first not in result["ids"]
    for change in ({"entry_index": "0"}, {"block_index": -1}, {"block_proof": None}):
        result = verify(page, module_fx, tampered(module_fx.bundle, lambda b, c=change: receipt_of(b, first).update(c)))
        assert failed(result) == {"format"} and sorted(result["ids"]) == sorted(ids_of(module_fx.bundle)[1:])
