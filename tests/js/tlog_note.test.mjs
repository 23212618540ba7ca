// The browser's C2SP verifier (portal/static/portal/tlog_note.js: signed notes, cosignatures, checkpoints, trust
// policies) in Node, against the shared vectors tests/data/tlog_vectors.json: the vectors of the Python
// conformance tests (Go's and transparency-dev's keys, notes, checkpoints and policies, the specifications'
// examples, a real cosigned checkpoint) and notes signed by the Python library, each with the answer of the Python
// reference ldpmarket_client.tlog (tests/js/make_tlog_vectors.py makes them; tests/portal/test_receipts_js.py
// checks they are up to date and runs them in Chromium too).  And receipts_verify.js's verifyBundle given the
// policy: "witnessed by N of M", a forged cosignature, a quorum not met.
// Run: node --test tests/js/  (Node 20.19+, no packages).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import * as t from "../../portal/static/portal/tlog_note.js";
import { verifyBundle } from "../../portal/static/portal/receipts_verify.js";

const VECTORS = JSON.parse(readFileSync(new URL("../data/tlog_vectors.json", import.meta.url), "utf8"));
const bytes = (b64) => Uint8Array.from(Buffer.from(b64, "base64"));
const b64 = (u8) => Buffer.from(u8).toString("base64");
const hex = (u8) => Buffer.from(u8).toString("hex");

/** What opening `note` with `vkeys` answers, in the vectors' terms (the error's class name, or what it opened). */
async function opened(note, vkeys) {
  let verifiers;
  try {
    verifiers = await Promise.all(vkeys.map(t.parseVkey));
  } catch (exc) {
    return { error: `vkey: ${exc.message}` };
  }
  try {
    const n = await t.openNote(note, verifiers);
    return {
      error: null, text: b64(n.text),
      verified: n.verified.map((v) => [v.verifier.name, v.verifier.type, String(v.timestamp)]),
      unverified: n.unverified.map((u) => [u.name, u.keyId.toString(16).padStart(8, "0")]),
    };
  } catch (exc) {
    if (!(exc instanceof t.NoteError)) throw exc;   // only NoteError and its kinds, never a TypeError
    return { error: exc.name };
  }
}

async function parsedPolicy(text) {
  try {
    return await t.parsePolicy(text);
  } catch (exc) {
    if (!(exc instanceof t.PolicyError)) throw exc;
    return null;
  }
}

function policyShape(p) {
  return {
    logs: p.logs.map((m) => m.verifier.vkey), log_urls: p.logs.map((m) => m.url),
    witnesses: [...p.witnesses.values()].map((w) => [w.name, w.verifier.vkey, w.url]),
    groups: [...p.groups.values()].map((g) => [g.name, g.threshold, g.members.map((m) => p.witnesses.get(m)?.name
                                                                              ?? p.groups.get(m).name)]),
    quorum: p.quorum === "none" ? "none" : (p.witnesses.get(p.quorum) ?? p.groups.get(p.quorum)).name,
    describe: t.describeQuorum(p),
  };
}

/** What verifyCheckpoint answers, in the vectors' terms. */
async function checked(policyText, note, origin) {
  try {
    const r = await t.verifyCheckpoint(policyText, note, { origin });
    assert.equal(r.quorumMet, true);
    return { error: null, origin: r.origin, size: String(r.size), root: r.rootHex, witnessed: r.witnessed,
             total: r.total, quorum: r.quorumText };
  } catch (exc) {
    if (!(exc instanceof t.NoteError)) throw exc;
    if (exc instanceof t.QuorumNotMet) {
      assert.equal(exc.result.quorumMet, false);
      return { error: exc.name, witnessed: exc.result.witnessed, total: exc.result.total,
               quorum: exc.result.quorumText };
    }
    return { error: exc.name };
  }
}

// ------------------------------------------------------------------ keys

describe("verifier keys", () => {
  test("key names: non-empty, no White_Space, no '+', no control character", () => {
    assert.ok(VECTORS.key_names.length >= 20);
    for (const [name, valid] of VECTORS.key_names) {
      let ok = true;
      try { t.checkKeyName(name); } catch { ok = false; }
      assert.equal(ok, valid, JSON.stringify(name));
    }
  });

  test("vkeys parse as the Python library parses them, key ids checked", async () => {
    const good = VECTORS.vkeys.filter((c) => c.expect), bad = VECTORS.vkeys.filter((c) => !c.expect);
    assert.ok(good.length >= 20 && bad.length >= 15, `${good.length} good, ${bad.length} bad`);
    for (const c of VECTORS.vkeys) {
      let got;
      try {
        const v = await t.parseVkey(c.vkey);
        got = { name: v.name, type: v.type, key_id: v.keyId.toString(16).padStart(8, "0"), public: hex(v.publicKey) };
        assert.equal(v.vkey, c.vkey);   // a vkey that parses is its own canonical form
      } catch (exc) {
        if (!(exc instanceof t.NoteError)) throw exc;
        got = null;
      }
      assert.deepEqual(got, c.expect, c.vkey);
    }
  });

  test("every mangling of Go's PeterNeumann vkey is refused", async () => {
    const { of, vkeys } = VECTORS.mangled_vkeys;
    assert.ok(vkeys.length > 2000);
    assert.equal((await t.parseVkey(of)).keyId, 0xc74f20a3);
    const accepted = [];
    for (const k of vkeys) {
      try {
        await t.parseVkey(k);
        accepted.push(k);
      } catch (exc) {
        if (!(exc instanceof t.NoteError)) throw exc;
      }
    }
    assert.deepEqual(accepted, []);
  });

  test("base64 is RFC 4648's, padded, whole quanta only", () => {
    assert.deepEqual([...t.base64Decode("AAEC")], [0, 1, 2]);
    assert.deepEqual([...t.base64Decode("AAE=")], [0, 1]);
    assert.deepEqual([...t.base64Decode("AA==")], [0]);
    assert.equal(t.base64Decode("").length, 0);
    for (const bad of ["AAE", "AA=", "AAAA=", "AA==AA==", "AA AA", "AA-_", "A===", null]) {
      assert.throws(() => t.base64Decode(bad), t.NoteError, String(bad));
    }
    for (const n of [0, 1, 2, 3, 31, 32, 33, 64, 72]) {
      const data = Uint8Array.from({ length: n }, (_, i) => (i * 37 + 11) & 255);
      assert.equal(t.base64Encode(data), b64(data));
      assert.deepEqual(t.base64Decode(b64(data)), data);
    }
  });
});

// ------------------------------------------------------------------ notes

describe("signed notes open as the Python library opens them", () => {
  test("the vectors hold every kind of answer", () => {
    const errors = new Set(VECTORS.notes.map((c) => c.expect.error));
    for (const e of [null, "NoteError", "InvalidNoteSignature", "UnverifiedNote"]) assert.ok(errors.has(e), e);
    assert.ok(VECTORS.notes.some((c) => c.expect.verified?.some(([, type]) => type === 4)), "a cosignature");
  });

  for (const c of VECTORS.notes) {
    test(c.name, async () => {
      assert.deepEqual(await opened(bytes(c.note), c.verifiers), c.expect);
    });
  }

  test("a note given as a string opens as its UTF-8 bytes; a lone surrogate is not UTF-8", async () => {
    const c = VECTORS.notes.find((x) => x.name === "signed here by three keys");
    const text = Buffer.from(c.note, "base64").toString("utf8");
    assert.deepEqual(await opened(text, c.verifiers), c.expect);
    assert.deepEqual(await opened(text.replace("è", "\ud800"), c.verifiers), { error: "NoteError" });
  });

  test("every byte of a signed note changed in turn (two ways each)", async () => {
    const { note, verifiers, flips } = VECTORS.flips;
    const data = bytes(note);
    assert.ok(flips.length > 600);
    const answers = new Set(flips.map(([, , e]) => e.error));
    assert.deepEqual([...answers].sort(), ["InvalidNoteSignature", "NoteError", null].sort());
    const bad = [];
    for (const [index, mask, expect] of flips) {
      const changed = data.slice();
      changed[index] ^= mask;
      const got = await opened(changed, verifiers);
      if (got.error === null && !("text" in expect)) {
        assert.equal(got.text, b64((await t.openNote(data, await Promise.all(verifiers.map(t.parseVkey)))).text));
        delete got.text;
      }
      try {
        assert.deepEqual(got, expect);
      } catch {
        bad.push({ index, mask, expect, got });
      }
    }
    assert.deepEqual(bad.slice(0, 5), []);
  });
});

// ------------------------------------------------------------------ checkpoints

describe("checkpoint texts", () => {
  for (const [i, c] of VECTORS.checkpoints.entries()) {
    test(`checkpoint ${i + 1}: ${JSON.stringify(Buffer.from(c.text, "base64").toString("latin1")).slice(0, 60)}`,
         () => {
      let got;
      try {
        const cp = t.parseCheckpoint(bytes(c.text));
        got = { origin: cp.origin, size: String(cp.size), root: cp.rootHex, extensions: cp.extensions };
        assert.equal(typeof cp.size, "bigint");
      } catch (exc) {
        if (!(exc instanceof t.NoteError)) throw exc;
        got = null;
      }
      assert.deepEqual(got, c.expect);
    });
  }
});

// ------------------------------------------------------------------ policies

describe("trust policies", () => {
  test("the vectors hold valid policies and refusals", () => {
    assert.ok(VECTORS.policies.filter((c) => c.expect).length >= 15);
    assert.ok(VECTORS.policies.filter((c) => !c.expect).length >= 60);
  });

  for (const c of VECTORS.policies) {
    test(c.name, async () => {
      const p = await parsedPolicy(bytes(c.text));
      assert.deepEqual(p && policyShape(p), c.expect);
    });
  }

  test("quorums of groups (all, any, k, nested, none) over every subset of witnesses", async () => {
    let checked = 0, yes = 0;
    for (const q of VECTORS.quorums) {
      const p = await t.parsePolicy(q.policy);
      for (const [subset, expected] of q.subsets) {
        const got = t.satisfied(p, new Set(subset));
        assert.equal(got, expected, `${JSON.stringify(subset)} under ${t.describeQuorum(p)}`);
        checked += 1;
        yes += got ? 1 : 0;
      }
    }
    assert.ok(checked >= 400 && yes > 100 && checked - yes > 100, `${checked} checked, ${yes} satisfied`);
  });
});

// ------------------------------------------------------------------ verifyCheckpoint

describe("verifyCheckpoint: a checkpoint note opened with a policy", () => {
  test("the vectors hold quorums met, not met, forged cosignatures and other refusals", () => {
    const errors = VECTORS.checkpoint_cases.map((c) => c.expect.error);
    for (const e of [null, "QuorumNotMet", "InvalidNoteSignature", "UnverifiedNote", "NoteError"]) {
      assert.ok(errors.includes(e), e);
    }
  });

  for (const c of VECTORS.checkpoint_cases) {
    test(c.name, async () => {
      assert.deepEqual(await checked(VECTORS.checkpoint_policies[c.policy], bytes(c.note), c.origin), c.expect);
    });
  }

  test("a parsed policy serves as its text; the result names the cosigners and their times", async () => {
    const c = VECTORS.checkpoint_cases.find((x) => x.name === "2 of 3: A and B");
    const policy = await t.parsePolicy(VECTORS.checkpoint_policies[c.policy]);
    const r = await t.verifyCheckpoint(policy, bytes(c.note));
    assert.deepEqual([r.witnessed, r.total, r.quorumText], [["A", "B"], 3, "2 of (A, B, C)"]);
    assert.deepEqual(r.cosignedAt, { A: 1700000000n, B: 1700000000n });
    await assert.rejects(() => t.verifyCheckpoint(policy, bytes(c.note), { origin: "example.com/other" }),
                         /not of "example.com\/other"/);
  });

  test("a quorum not met says who cosigned and what the quorum is", async () => {
    const c = VECTORS.checkpoint_cases.find((x) => x.name === "2 of 3: an unknown witness does not count");
    await assert.rejects(() => t.verifyCheckpoint(VECTORS.checkpoint_policies[c.policy], bytes(c.note)),
                         { name: "QuorumNotMet", message: "cosigned by 1 of 3 witnesses (A); the quorum is 2 of " +
                                                          "(A, B, C)" });
  });
});

// ------------------------------------------------------------------ the receipts file's checkpoint note

describe("verifyBundle with the policy", () => {
  const { bundle, checkpoint, key } = VECTORS.receipts;
  const failedChecks = (r) => Object.entries(r.checks).filter(([, ok]) => !ok).map(([name]) => name).sort();

  test("the cases cover witnessed files, a forged cosignature, a quorum not met and files without a note", () => {
    const e = VECTORS.bundle_cases.map((c) => c.expect);
    assert.ok(e.some((x) => x.ok && x.witness && x.witness.witnessed.length));
    assert.ok(e.some((x) => x.failed.includes("quorum")) && e.some((x) => x.failed.includes("note")));
    assert.ok(VECTORS.bundle_cases.some((c) => c.note === null && c.expect.ok));
  });

  for (const c of VECTORS.bundle_cases) {
    test(c.name, async () => {
      const b = structuredClone(bundle);
      if (c.note === null) delete b.checkpoint.note; else b.checkpoint.note = c.note;
      const r = await verifyBundle(b, checkpoint, key, null, c.policy);
      const e = c.expect;
      const messages = r.problems.map((p) => p.message);
      assert.deepEqual(failedChecks(r), e.failed, messages.join("\n"));
      assert.equal(r.ok, e.ok);
      assert.deepEqual([...r.verifiedEntryIds].sort((x, y) => x - y), e.verified);
      assert.deepEqual(r.witness && { witnessed: r.witness.witnessed, total: r.witness.total,
                                      quorum: r.witness.quorumText }, e.witness);
      if (e.message !== null) {
        assert.ok(messages.some((m) => m.includes(e.message)), `no problem says "${e.message}":\n${messages}`);
      }
      // the Python reference's answer on the note (where it is given one and a policy) is the same
      if (c.python) assert.equal(c.python.error === null && c.python.matches, e.ok);
    });
  }
});
