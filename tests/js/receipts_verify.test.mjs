// The portal's receipts verifier (portal/static/portal/receipts_verify.js: pure, no DOM) in Node, against the
// shared vectors tests/data/receipt_vectors.json (tests/js/make_receipt_vectors.py makes them from
// tests/client/receipt_fixtures.py and accounts.ledger.merkle; tests/portal/test_receipts_js.py checks they are
// up to date and runs them in Chromium too).  Run: node --test tests/js/  (Node 20.19+, no packages).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import * as v from "../../portal/static/portal/receipts_verify.js";

const VECTORS = JSON.parse(readFileSync(new URL("../data/receipt_vectors.json", import.meta.url), "utf8"));
const OTHER = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881";   // sha256("x")

// ------------------------------------------------------------------ the vectors' patches (the file's "about")

function parentOf(doc, path) {
  const head = path.slice(0, -1);
  for (const k of head) doc = doc[k];
  return [doc, path[path.length - 1]];
}

function applyPatch(doc, patch) {
  const out = structuredClone(doc);
  for (const [op, path, arg] of patch) {
    const [parent, last] = parentOf(out, path);
    if (op === "set") {
      parent[last] = structuredClone(arg);
    } else if (op === "delete") {
      if (Array.isArray(parent)) parent.splice(last, 1);
      else delete parent[last];
    } else if (op === "swap") {
      const [other, otherLast] = parentOf(out, arg);
      [parent[last], other[otherLast]] = [other[otherLast], parent[last]];
    } else {
      throw new Error(`unknown patch op ${op}`);
    }
  }
  return out;
}

const failedChecks = (result) => Object.entries(result.checks).filter(([, ok]) => !ok).map(([name]) => name)
  .sort();

// ------------------------------------------------------------------ receipts files

describe("verifyBundle on the shared receipts cases", () => {
  test("the vectors hold valid files and each kind of tampering", () => {
    const cases = VECTORS.cases;
    assert.ok(cases.length >= 50, `${cases.length} cases`);
    assert.ok(cases.filter((c) => c.expect.ok).length >= 4, "valid cases");
    for (const check of ["format", "signature", "statement", "consistency", "fork", "inclusion", "entry", "losses",
                         "chain"]) {
      assert.ok(cases.some((c) => c.expect.failed.includes(check)), `no case fails the ${check} check`);
    }
    assert.ok(cases.some((c) => c.expect.forked), "a forked case");
  });

  for (const c of VECTORS.cases) {
    test(c.name, async () => {
      const bundle = applyPatch(VECTORS.bundles[c.bundle], c.patch);
      const result = await v.verifyBundle(bundle, c.checkpoint, c.key, c.consistency);
      const e = c.expect;
      const messages = result.problems.map((p) => p.message);
      assert.deepEqual(failedChecks(result), e.failed, messages.join("\n"));
      assert.equal(result.ok, e.ok);
      assert.equal(result.ok, result.problems.length === 0);
      assert.deepEqual([...result.verifiedEntryIds].sort((a, b) => a - b), e.verified);
      assert.equal(result.forked, e.forked);
      if (e.message !== null) {
        assert.ok(messages.some((m) => m.includes(e.message)),
                  `no problem says "${e.message}":\n${messages.join("\n")}`);
      }
    });
  }

  test("a problem of a receipt names its entry", async () => {
    const c = VECTORS.cases.find((x) => x.name === "a changed entry byte breaks its inclusion");
    const result = await v.verifyBundle(applyPatch(VECTORS.bundles[c.bundle], c.patch), c.checkpoint, c.key);
    const [problem] = result.problems;
    assert.equal(result.problems.length, 1);
    assert.equal(problem.check, "inclusion");
    assert.ok(!c.expect.verified.includes(problem.entry));
    assert.ok(VECTORS.bundles[c.bundle].receipts.some((r) => r.entry.id === problem.entry));
  });

  test("verifyBundle changes nothing it is given", async () => {
    const bundle = VECTORS.bundles.two_values;
    const before = JSON.stringify(bundle);
    const checkpoint = bundle.checkpoint;
    await v.verifyBundle(bundle, checkpoint, VECTORS.published_key, null);
    assert.equal(JSON.stringify(bundle), before);
  });

  test("no key, a key of the wrong length, or no checkpoint verify nothing", async () => {
    const bundle = VECTORS.bundles.two_values;
    for (const [key, checkpoint] of [["", bundle.checkpoint], ["ab".repeat(31), bundle.checkpoint],
                                     [VECTORS.published_key.toUpperCase(), bundle.checkpoint],
                                     [VECTORS.published_key, null]]) {
      const result = await v.verifyBundle(bundle, checkpoint, key);
      assert.deepEqual(failedChecks(result), ["signature"]);
      assert.equal(result.verifiedEntryIds.size, 0);
    }
    for (const bad of [null, "text", { format: "ldpmarket-receipts-v1", receipts: {} }]) {
      const result = await v.verifyBundle(bad, bundle.checkpoint, VECTORS.published_key);
      assert.deepEqual(failedChecks(result), ["format"]);
    }
  });
});

describe("checkpoints", () => {
  const cp = VECTORS.bundles.two_values.checkpoint;

  test("the published checkpoint checks out", async () => {
    assert.deepEqual(await v.checkpointProblems(cp, VECTORS.published_key), []);
  });

  test("linkProblems: same size and root, or a fork", async () => {
    assert.deepEqual(await v.linkProblems(cp, { ...cp }), []);
    const [fork] = await v.linkProblems(cp, { ...cp, root_hash: "ab".repeat(32) });
    assert.equal(fork.fork, true);
    assert.equal(fork.check, "fork");
  });
});

// ------------------------------------------------------------------ Merkle proofs (RFC 9162)

const h = (x) => v.hexToBytes(x);
const other = h(OTHER);

describe("Merkle proofs agree with accounts.ledger.merkle", () => {
  test("inclusion proofs and their variants", async () => {
    const rows = VECTORS.merkle.inclusion;
    const bad = [];
    let checked = 0, yes = 0;
    for (const r of rows) {
      const proof = r.proof.map(h), leaf = h(r.leaf), root = h(r.root);
      const variants = {
        as_given: () => v.verifyInclusion(r.index, r.size, leaf, proof, root),
        other_leaf: () => v.verifyInclusion(r.index, r.size, other, proof, root),
        index_xor1: () => v.verifyInclusion(r.index ^ 1, r.size, leaf, proof, root),
        size_plus1: () => v.verifyInclusion(r.index, r.size + 1, leaf, proof, root),
        last_changed: () => v.verifyInclusion(r.index, r.size, leaf, [...proof.slice(0, -1), other], root),
        last_dropped: () => v.verifyInclusion(r.index, r.size, leaf, proof.slice(0, -1), root),
      };
      for (const [name, expected] of Object.entries(r.answers)) {
        const got = await variants[name]();
        checked += 1;
        yes += got ? 1 : 0;
        if (got !== expected) bad.push({ index: r.index, size: r.size, variant: name, expected, got });
      }
    }
    assert.deepEqual(bad, []);
    assert.ok(checked > 400 && yes > 80 && checked - yes > 300, `${checked} checked, ${yes} true`);
  });

  test("consistency proofs and their variants", async () => {
    const rows = VECTORS.merkle.consistency;
    const bad = [];
    let checked = 0, yes = 0;
    for (const r of rows) {
      const proof = r.proof.map(h), r1 = h(r.first_root), r2 = h(r.second_root);
      const variants = {
        as_given: () => v.verifyConsistency(r.first, r.second, r1, r2, proof),
        other_first_root: () => v.verifyConsistency(r.first, r.second, h(r.alt_first_root), r2, proof),
        other_second_root: () => v.verifyConsistency(r.first, r.second, r1, other, proof),
        last_dropped: () => v.verifyConsistency(r.first, r.second, r1, r2, proof.slice(0, -1)),
        first_changed: () => v.verifyConsistency(r.first, r.second, r1, r2, [other, ...proof.slice(1)]),
      };
      for (const [name, expected] of Object.entries(r.answers)) {
        const got = await variants[name]();
        checked += 1;
        yes += got ? 1 : 0;
        if (got !== expected) bad.push({ first: r.first, second: r.second, variant: name, expected, got });
      }
    }
    assert.deepEqual(bad, []);
    assert.ok(checked > 250 && yes >= rows.length && checked - yes > 200, `${checked} checked, ${yes} true`);
  });

  test("sizes and indexes beyond 32 bits", async () => {
    const leaf = await v.leafHash(new TextEncoder().encode("x"));
    // a tree of 2^40 leaves has 40 levels: a proof of 3 hashes does not reach its root
    assert.equal(await v.verifyInclusion(2 ** 40 - 1, 2 ** 40, leaf, [leaf, leaf, leaf], leaf), false);
    assert.equal(await v.verifyInclusion(0, 1, leaf, [], leaf), true);
    assert.equal(await v.verifyConsistency(2 ** 33, 2 ** 33, leaf, leaf, []), true);
    await assert.rejects(() => v.verifyInclusion(0.5, 2, leaf, [], leaf));
  });
});

// ------------------------------------------------------------------ bytes, entries, amounts and times

describe("decoding", () => {
  test("hexToBytes and bytesToHex", () => {
    assert.deepEqual([...v.hexToBytes("00ff10")], [0, 255, 16]);
    assert.equal(v.bytesToHex(Uint8Array.of(0, 255, 16)), "00ff10");
    for (const bad of ["0", "GG", "AB", 12, null]) assert.throws(() => v.hexToBytes(bad), /hex/);
    assert.throws(() => v.hexToBytes("00", 2), /not 2 bytes/);
  });

  test("every receipt's entry and block data decode to what its entry shows", () => {
    for (const bundle of Object.values(VECTORS.bundles)) {
      for (const r of bundle.receipts) {
        const entry = v.decodeEntry(v.hexToBytes(r.entry_data));
        const block = v.decodeBlock(v.hexToBytes(r.block_data));
        assert.deepEqual(v.entryDifferences(r.entry, entry), []);
        assert.equal(BigInt(r.entry.id), block.block * 2n ** 24n + BigInt(r.entry_index));
        assert.equal(block.count, BigInt(r.block_size));
        assert.equal(block.entriesRoot.length, 32);
        assert.equal(entry.value, BigInt(r.entry.value));
      }
    }
  });

  test("entry and block data of the wrong length or marker are refused", () => {
    const r = VECTORS.bundles.two_values.receipts[0];
    assert.throws(() => v.decodeEntry(v.hexToBytes(r.entry_data.slice(2))), /158 bytes, not 159/);
    assert.throws(() => v.decodeEntry(v.hexToBytes(r.block_data)), /not 159/);
    assert.throws(() => v.decodeBlock(v.hexToBytes("00" + r.block_data.slice(2))), /marker/);
  });

  test("version-2 entry data decodes with its key; each block names its entries' version", () => {
    let seen = 0;
    for (const name of ["two_values_v2", "mixed_versions"]) {
      for (const r of VECTORS.bundles[name].receipts) {
        const bytes = v.hexToBytes(r.entry_data);
        const entry = v.decodeEntry(bytes);
        const block = v.decodeBlock(v.hexToBytes(r.block_data));
        assert.equal(entry.version, block.version);
        assert.equal(bytes.length, entry.version === 2 ? 191 : 159);
        if (entry.version === 2) {
          seen += 1;
          assert.equal(v.bytesToHex(entry.key), r.entry_data.slice(62, 126));
          // the same fields as the entry shown, read after the key
          assert.deepEqual(v.entryDifferences(r.entry, entry), []);
        } else {
          assert.equal(entry.key, undefined);
        }
      }
    }
    assert.ok(seen >= 10, `${seen} version-2 receipts`);
  });

  test("version-2 entry data of the wrong length or marker is refused", () => {
    const r = VECTORS.bundles.two_values_v2.receipts[0];
    const hex = r.entry_data;
    const keyless = hex.slice(0, 62) + hex.slice(126);
    assert.throws(() => v.decodeEntry(v.hexToBytes(keyless)), /159 bytes, not 191 \(version 2\)/);
    assert.throws(() => v.decodeEntry(v.hexToBytes(hex.slice(0, -2))), /190 bytes, not 191/);
    const asV1 = VECTORS.bundles.two_values.receipts[0].entry_data.slice(0, 62) + hex.slice(62);
    assert.throws(() => v.decodeEntry(v.hexToBytes(asV1)), /191 bytes, not 159 \(version 1\)/);
    assert.throws(() => v.decodeEntry(v.hexToBytes("00" + hex.slice(2))), /does not start with its marker/);
    assert.equal(v.decodeBlock(v.hexToBytes(r.block_data)).version, 2);
  });

  test("toMicro: exact micro units", () => {
    assert.equal(v.toMicro("0.500000"), 500000n);
    assert.equal(v.toMicro("2"), 2000000n);
    assert.equal(v.toMicro("1.0000010"), 1000001n);
    assert.equal(v.toMicro("-0.25"), -250000n);
    assert.equal(v.toMicro("12345678901234.000001"), 12345678901234000001n);
    assert.equal(v.toMicro(null), -1n);
    assert.equal(v.toMicro(undefined), -1n);
    for (const bad of ["0.0000001", "1e3", "", "abc", "0.5.1"]) assert.throws(() => v.toMicro(bad), /decimal/);
  });

  test("isoMicros: ISO 8601 times in microseconds since 1970", () => {
    assert.equal(v.isoMicros("1970-01-01T00:00:00Z"), 0n);
    assert.equal(v.isoMicros("2026-03-01T12:00:00Z"), 1772366400000000n);
    assert.equal(v.isoMicros("2026-03-01T12:00:00.5Z"), 1772366400500000n);
    assert.equal(v.isoMicros("2026-03-01T13:30:00.000001+01:30"), 1772366400000001n);
    assert.equal(v.isoMicros("2026-03-01 10:00:00-0200"), 1772366400000000n);
    assert.equal(v.isoMicros(null), -1n);
    for (const bad of ["2026-03-01", "2026-03-01T12:00:00", "yesterday"]) assert.equal(v.isoMicros(bad), null);
  });
});
