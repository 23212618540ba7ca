// Receipts checked anywhere WebCrypto runs (docs/receipts.md, "Checking receipts"): the pure verifier, no DOM,
// no network, no storage.  The value page's code is receipts_page.js; Node runs this module as it is
// (tests/js/receipts_verify.test.mjs, tests/js/tlog_note.test.mjs).
//
// `verifyBundle(bundle, checkpoint, publicKeyRawHex, consistency, policy)` runs the checks of docs/receipts.md with
// WebCrypto (globalThis.crypto.subtle: Ed25519 signatures, SHA-256) and nothing from the service but what it is
// given:
//   1. `checkpoint` (the one the caller trusts) is signed by the key and its statement states its tree size
//      and root;
//   2. the bundle's checkpoint is signed by the same key and is that checkpoint, or `consistency` (a
//      GET /api/v1/ledger/consistency/ answer) proves the smaller log a prefix of the larger; same size with
//      different roots, or no proof linking them, is a forked log;
//   3. every receipt's entry is leaf `entry_index` of its block's entry tree (root: the entries root in
//      `block_data`), of the version `block_data` states (1, or 2: blinded by the entry's key), and
//      `block_data` is leaf `block_index` of the checkpoint's tree (RFC 9162 2.1.3.2);
//   4. `entry_data` decodes to what `entry` shows; every loss after is at most the ceiling, losses never go
//      down, and each value's receipts chain from no loss with no gap.
// Given the trust policy the service publishes (GET /api/v1/ledger/policy/, c2sp.org/tlog-policy), it also opens
// the bundle's checkpoint note (`checkpoint.note`, a C2SP signed note with the witnesses' cosignatures) with it
// (tlog_note.js): signed by a log of the policy, its tree size and root those the proofs are checked against, no
// cosignature of a known witness forged, the quorum met; the result says who witnessed it (`witness`).
// An ES module: <script type="module"> in the browser, `import` in Node 20.19+ (a .js file with ES module syntax
// and no package.json "type" is loaded as a module); it imports tlog_note.js, beside it.

import { describeQuorum, parsePolicy, verifyCheckpoint } from "./tlog_note.js";

const HEADER = "ldpmarket ledger checkpoint v1";          // ldpmarket/ledger_key.py HEADER
const FORMAT = "ldpmarket-receipts-v1";
// docs/receipts.md "Entry data": version 1, the entry's fields alone; version 2, blinded by the entry's own
// 32-byte key, which follows the marker.  A block leaf's marker says which version its entries are.
const ENTRY_MARKERS = { 1: "ldpmarket-ledger-entry-leaf-v1\0", 2: "ldpmarket-ledger-entry-leaf-v2\0" };  // 31 bytes
const BLOCK_MARKERS = { 1: "ldpmarket-ledger-block-leaf-v1\0", 2: "ldpmarket-ledger-block-leaf-v2\0" };  // 31 bytes
const MARKER_LENGTH = 31;
const KEY_LENGTH = 32;
const ENTRY_FIELDS = ["value", "kind", "epsilon", "purchase", "chain_before", "chain_after", "oneshot_before",
                      "oneshot_after", "ceiling", "schedule_start", "schedule_cap", "schedule_start_at",
                      "schedule_end_at", "schedule_shape", "schedule_steps", "guarantee"];
const ENTRY_LENGTHS = { 1: MARKER_LENGTH + 8 * ENTRY_FIELDS.length,                 // 159
                        2: MARKER_LENGTH + KEY_LENGTH + 8 * ENTRY_FIELDS.length };  // 191
const BLOCK_FIELDS = ["shard", "height", "block", "count", "created_at"];
const BLOCK_LENGTH = MARKER_LENGTH + 8 * BLOCK_FIELDS.length + 32 + 32;  // + block hash + entries root
// docs/receipts.md "Entry data": the codes of kind, schedule_shape and guarantee (accounts/models.py)
const KINDS = ["chain_release", "oneshot_release", "ceiling", "schedule", "pause", "resume", "raw_deleted",
               "owner_custody", "owner_upload"];
const SHAPES = ["", "linear", "steps"];
const GUARANTEES = ["", "ldp", "uldp", "per_report_non_collusion"];
//: An entry's id is its block id * 2^24 + its position in the block (accounts/models.py LedgerEntry).
const ID_SHIFT = 2n ** 24n;

// ------------------------------------------------------------------ bytes, hashes

export function hexToBytes(hex, length = null) {
  if (typeof hex !== "string" || hex.length % 2 || !/^[0-9a-f]*$/.test(hex)) {
    throw new Error("not lower-case hex");
  }
  if (length !== null && hex.length !== 2 * length) throw new Error(`not ${length} bytes`);
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

export function bytesToHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

function equal(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

export async function sha256(bytes) {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
}

// RFC 6962: leaf = SHA-256(0x00 || data), node = SHA-256(0x01 || left || right) (ldpmarket/merkle.py)
export const leafHash = (data) => sha256(concat(Uint8Array.of(0), data));
const nodeHash = (left, right) => sha256(concat(Uint8Array.of(1), left, right));

// Indexes and sizes as BigInt: JavaScript's bitwise operators truncate to 32 bits.
const big = (n) => {
  if (typeof n === "bigint") return n;
  if (!Number.isSafeInteger(n)) throw new Error(`${n} is not an integer`);
  return BigInt(n);
};

/** Whether `leaf` (a leaf hash) is leaf `index` of the tree of `size` leaves whose root is `root` (RFC 9162
 * section 2.1.3.2; merkle.verify_inclusion). */
export async function verifyInclusion(index, size, leaf, proof, root) {
  let fn = big(index), sn = big(size) - 1n, r = leaf;
  if (fn < 0n || fn > sn) return false;
  for (const p of proof) {
    if (sn === 0n) return false;
    if (fn & 1n || fn === sn) {
      r = await nodeHash(p, r);
      if (!(fn & 1n)) {
        while (fn && !(fn & 1n)) { fn >>= 1n; sn >>= 1n; }
      }
    } else {
      r = await nodeHash(r, p);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  return sn === 0n && equal(r, root);
}

/** Whether the tree of size `m` with `firstRoot` is a prefix of the tree of size `n` with `secondRoot` (RFC 9162
 * section 2.1.4.2; merkle.verify_consistency). */
export async function verifyConsistency(m, n, firstRoot, secondRoot, proof) {
  m = big(m); n = big(n);
  if (!(0n < m && m <= n)) return false;
  if (m === n) return proof.length === 0 && equal(firstRoot, secondRoot);
  let path = [...proof];
  if ((m & (m - 1n)) === 0n) path = [firstRoot, ...path];  // m a power of two: the first root starts the path
  if (!path.length) return false;
  let fn = m - 1n, sn = n - 1n;
  while (fn & 1n) { fn >>= 1n; sn >>= 1n; }
  let fr = path[0], sr = path[0];
  for (const c of path.slice(1)) {
    if (sn === 0n) return false;
    if (fn & 1n || fn === sn) {
      fr = await nodeHash(c, fr);
      sr = await nodeHash(c, sr);
      if (!(fn & 1n)) {
        while (fn && !(fn & 1n)) { fn >>= 1n; sn >>= 1n; }
      }
    } else {
      sr = await nodeHash(sr, c);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  return sn === 0n && equal(fr, firstRoot) && equal(sr, secondRoot);
}

// ------------------------------------------------------------------ entry and block data

/** The version (1 or 2) whose marker `bytes` starts with and whose length it has; throws saying why not. */
function versionOf(bytes, markers, lengths, what) {
  const found = Object.keys(markers).map(Number).find((v) => {
    const head = new TextEncoder().encode(markers[v]);
    return equal(bytes.subarray(0, head.length), head);
  });
  if (found === undefined) {
    const sizes = [...new Set(Object.values(lengths))].sort((a, b) => a - b);
    if (!sizes.includes(bytes.length)) throw new Error(`${what} is ${bytes.length} bytes, not ${sizes.join(" or ")}`);
    throw new Error(`${what} does not start with its marker`);
  }
  if (bytes.length !== lengths[found]) {
    throw new Error(`${what} is ${bytes.length} bytes, not ${lengths[found]} (version ${found})`);
  }
  return found;
}

/** docs/receipts.md "Entry data": the 16 fields as BigInt, with `version` (1, or 2: blinded, `key` its 32 bytes). */
export function decodeEntry(bytes) {
  const version = versionOf(bytes, ENTRY_MARKERS, ENTRY_LENGTHS, "entry_data");
  const at = bytes.length - 8 * ENTRY_FIELDS.length;
  const view = new DataView(bytes.buffer, bytes.byteOffset + at, 8 * ENTRY_FIELDS.length);
  const out = Object.fromEntries(ENTRY_FIELDS.map((name, i) => [name, view.getBigInt64(8 * i, true)]));
  out.version = version;
  if (version === 2) out.key = bytes.slice(MARKER_LENGTH, MARKER_LENGTH + KEY_LENGTH);
  return out;
}

/** docs/receipts.md "Block leaf data": its `version` (how its entries are hashed, by its marker), shard, height,
 * block, count, created_at (BigInt), hash and entries root. */
export function decodeBlock(bytes) {
  const version = versionOf(bytes, BLOCK_MARKERS, { 1: BLOCK_LENGTH, 2: BLOCK_LENGTH }, "block_data");
  const view = new DataView(bytes.buffer, bytes.byteOffset + MARKER_LENGTH, BLOCK_LENGTH - MARKER_LENGTH);
  const out = Object.fromEntries(BLOCK_FIELDS.map((name, i) => [name, view.getBigInt64(8 * i, true)]));
  const at = MARKER_LENGTH + 8 * BLOCK_FIELDS.length;
  out.hash = bytes.slice(at, at + 32);
  out.entriesRoot = bytes.slice(at + 32, at + 64);
  out.version = version;
  return out;
}

/** "0.500000" -> 500000n: exact micro units (at most 6 decimals; null -> -1n, the ledger's none). */
export function toMicro(text) {
  if (text === null || text === undefined) return -1n;
  const m = /^(-?)(\d+)(?:\.(\d{1,6})0*)?$/.exec(String(text));
  if (!m) throw new Error(`${JSON.stringify(text)} is not a decimal with at most 6 places`);
  const v = BigInt(m[2]) * 1000000n + BigInt((m[3] || "").padEnd(6, "0"));
  return m[1] ? -v : v;
}

/** An ISO 8601 time -> microseconds since 1970-01-01 UTC (BigInt; null -> -1n); null when unreadable. */
export function isoMicros(text) {
  if (text === null || text === undefined) return -1n;
  const m = /^(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?(Z|[+-]\d\d:?\d\d)$/.exec(String(text));
  if (!m) return null;
  const seconds = Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]) / 1000;
  let offset = 0;
  if (m[8] !== "Z") {
    const z = m[8].replace(":", "");
    offset = (z[0] === "-" ? -1 : 1) * (Number(z.slice(1, 3)) * 3600 + Number(z.slice(3, 5)) * 60);
  }
  return BigInt(seconds - offset) * 1000000n + BigInt((m[7] || "").padEnd(6, "0"));
}

// How each field the portal may show reads from the decoded entry (docs/receipts.md "The receipts file").
const SHOWN = {
  value: (e) => [BigInt(e.value ?? -1), "value"],
  kind: (e) => [BigInt(KINDS.indexOf(e.kind)), "kind"],
  epsilon: (e) => [toMicro(e.epsilon), "epsilon"],
  purchase: (e) => [BigInt(e.purchase ?? -1), "purchase"],
  chain_loss_before: (e) => [toMicro(e.chain_loss_before), "chain_before"],
  chain_loss_after: (e) => [toMicro(e.chain_loss_after), "chain_after"],
  oneshot_loss_before: (e) => [toMicro(e.oneshot_loss_before), "oneshot_before"],
  oneshot_loss_after: (e) => [toMicro(e.oneshot_loss_after), "oneshot_after"],
  ceiling: (e) => [toMicro(e.ceiling), "ceiling"],
  schedule_start: (e) => [toMicro(e.schedule_start), "schedule_start"],
  schedule_cap: (e) => [toMicro(e.schedule_cap), "schedule_cap"],
  schedule_start_at: (e) => [isoMicros(e.schedule_start_at), "schedule_start_at"],
  schedule_end_at: (e) => [isoMicros(e.schedule_end_at), "schedule_end_at"],
  schedule_shape: (e) => [BigInt(SHAPES.indexOf(e.schedule_shape ?? "")), "schedule_shape"],
  schedule_steps: (e) => [BigInt(e.schedule_steps ?? -1), "schedule_steps"],
  guarantee: (e) => [BigInt(GUARANTEES.indexOf(e.guarantee ?? "")), "guarantee"],
};
// Always compared, whether or not the portal sent them (the others when present).
const REQUIRED = ["value", "kind", "epsilon", "purchase", "chain_loss_before", "chain_loss_after",
                  "oneshot_loss_before", "oneshot_loss_after", "ceiling"];

/** The fields where the shown `entry` says something other than the decoded `entry_data` ([] when none). */
export function entryDifferences(entry, decoded) {
  const out = [];
  for (const [name, read] of Object.entries(SHOWN)) {
    if (!(name in entry) && !REQUIRED.includes(name)) continue;
    let shown, field;
    try {
      [shown, field] = read(entry);
    } catch {
      out.push(name);
      continue;
    }
    if (shown !== decoded[field]) out.push(name);
  }
  return out;
}

// ------------------------------------------------------------------ checkpoints

async function importKey(publicKeyRawHex) {
  return crypto.subtle.importKey("raw", hexToBytes(publicKeyRawHex, 32), { name: "Ed25519" }, false, ["verify"]);
}

/** Check 1 for one checkpoint: signed by the key, statement stating its tree size and root. Problems, [] when
 * none. */
export async function checkpointProblems(checkpoint, publicKeyRawHex, what = "the checkpoint") {
  const problems = [];
  const add = (check, message) => problems.push({ check, message: `${what}: ${message}` });
  if (!checkpoint || typeof checkpoint !== "object") {
    add("signature", "missing");
    return problems;
  }
  try {
    const key = await importKey(publicKeyRawHex);
    const keyId = bytesToHex(await sha256(hexToBytes(publicKeyRawHex, 32)));
    if (checkpoint.key_id !== keyId) add("signature", `names key ${checkpoint.key_id}, not the published key ${keyId}`);
    const signed = await crypto.subtle.verify({ name: "Ed25519" }, key, hexToBytes(checkpoint.signature, 64),
                                              new TextEncoder().encode(checkpoint.statement));
    if (!signed) add("signature", "its signature does not verify with the published key");
  } catch (exc) {
    add("signature", `its signature cannot be checked (${exc.message})`);
  }
  // ldpmarket/ledger_key.py statement(): header, tree size, root, time, one per line
  const lines = String(checkpoint.statement).split("\n");
  const size = checkpoint.tree_size;
  if (lines.length !== 5 || lines[0] !== HEADER || lines[4] !== "") {
    add("statement", "its statement is not a checkpoint statement");
  } else {
    if (!Number.isSafeInteger(size) || size < 1 || lines[1] !== String(size)) {
      add("statement", `its statement states tree size ${lines[1]}, not ${size}`);
    }
    if (!/^[0-9a-f]{64}$/.test(String(checkpoint.root_hash)) || lines[2] !== checkpoint.root_hash) {
      add("statement", `its statement states root ${lines[2]}, not ${checkpoint.root_hash}`);
    }
    const stated = isoMicros(lines[3]), shown = isoMicros(checkpoint.created_at);
    if (stated === null || (checkpoint.created_at !== undefined && shown !== stated)) {
      add("statement", `its statement states the time ${lines[3]}, not ${checkpoint.created_at}`);
    }
  }
  return problems;
}

/** Check 2 between two checkpoints already checked for signatures: same size and root, or a consistency proof
 * linking them.  Problems ([] when linked); a `fork: true` problem when the log was rewritten. */
export async function linkProblems(a, b, consistency = null) {
  const [older, newer] = a.tree_size <= b.tree_size ? [a, b] : [b, a];
  if (older.tree_size === newer.tree_size) {
    return older.root_hash === newer.root_hash ? [] : [{
      check: "fork", fork: true,
      message: `two signed checkpoints of tree size ${older.tree_size} have different roots: the log was forked`,
    }];
  }
  const link = `tree sizes ${older.tree_size} and ${newer.tree_size}`;
  if (!consistency) {
    return [{ check: "consistency", message: `no consistency proof links the checkpoints of ${link}` }];
  }
  if (consistency.first !== older.tree_size || consistency.second !== newer.tree_size) {
    return [{ check: "consistency", message: `the consistency proof is for tree sizes ${consistency.first} and ` +
                                             `${consistency.second}, not ${link}` }];
  }
  // the proof is checked against the signed roots
  let ok = false;
  try {
    ok = await verifyConsistency(older.tree_size, newer.tree_size, hexToBytes(older.root_hash, 32),
                                 hexToBytes(newer.root_hash, 32), consistency.proof.map((p) => hexToBytes(p, 32)));
  } catch {
    ok = false;
  }
  if (!ok) {
    return [{ check: "fork", fork: true,
              message: `the checkpoints of ${link} are not consistent: the log was rewritten (forked)` }];
  }
  // a proof that links them, in an answer stating other roots for those sizes: refused all the same
  for (const [stated, cp] of [[consistency.first_root, older], [consistency.second_root, newer]]) {
    if (stated !== undefined && stated !== cp.root_hash) {
      return [{ check: "consistency", message: `the consistency proof states root ${stated} for tree size ` +
                                               `${cp.tree_size}, not the signed ${cp.root_hash}` }];
    }
  }
  return [];
}

// ------------------------------------------------------------------ the checkpoint's signed note

/**
 * The checkpoint's signed note (`checkpoint.note`) opened with the trust policy `policyText` (its text, or bytes):
 * {problems, witness}.  `witness` is {witnessed: [names], total, quorumText, origin} when the note verified and
 * met the quorum, else null.  A checkpoint without a note (made before signed notes) has no problem when the
 * policy's quorum is `none`, and one ("note") when it needs witnesses.  Problems: "note" (no note where one is
 * needed, a malformed note, no signature of a log of the policy, a known key's signature that fails: a forged
 * cosignature, a tree size or root other than the checkpoint's) or "quorum" (the witnesses who cosigned do not
 * meet the quorum).
 */
export async function noteProblems(checkpoint, policyText, what = "the checkpoint") {
  const problems = [];
  const add = (check, message) => problems.push({ check, message: `${what}: ${message}` });
  let policy;
  try {
    policy = policyText && policyText.witnesses instanceof Map ? policyText : await parsePolicy(policyText);
  } catch (exc) {
    add("note", `the trust policy cannot be read (${exc.message})`);
    return { problems, witness: null };
  }
  const note = checkpoint && checkpoint.note;
  if (note === undefined || note === null) {
    if (policy.quorum !== "none") {
      add("note", "it carries no signed note, but the trust policy needs witnesses' cosignatures (quorum " +
                  `${describeQuorum(policy)})`);
    }
    return { problems, witness: null };
  }
  let result;
  try {
    result = await verifyCheckpoint(policy, typeof note === "string" ? note : String(note));
  } catch (exc) {
    if (exc.name === "QuorumNotMet") {
      add("quorum", `its witnesses do not meet the trust policy's quorum: ${exc.message}`);
    } else {
      add("note", `its signed note does not verify with the trust policy: ${exc.message}`);
    }
    return { problems, witness: null };
  }
  if (result.size !== BigInt(Number.isSafeInteger(checkpoint.tree_size) ? checkpoint.tree_size : -1)
      || result.rootHex !== checkpoint.root_hash) {
    add("note", `its signed note states tree size ${result.size} and root ${result.rootHex}, not its tree size ` +
                `${checkpoint.tree_size} and root ${checkpoint.root_hash}`);
    return { problems, witness: null };
  }
  return { problems, witness: { witnessed: result.witnessed, total: result.total, quorumText: result.quorumText,
                                origin: result.origin, cosignedAt: result.cosignedAt } };
}

// ------------------------------------------------------------------ the bundle

/**
 * docs/receipts.md "Checking receipts", all four checks.  `checkpoint`: the checkpoint the caller trusts (an
 * item of GET /api/v1/ledger/checkpoints/); `consistency`: a GET /api/v1/ledger/consistency/ answer, needed when
 * the bundle is against a checkpoint of another size; `policyText`: the trust policy (GET /api/v1/ledger/policy/)
 * the bundle's checkpoint note is opened with (`noteProblems`), or null not to check the note.  Returns {ok,
 * checks: {name: bool}, verifiedEntryIds (entries whose receipt passed every check), problems: [{check, message,
 * entry?, fork?}], forked, witness (null, or who witnessed the checkpoint: noteProblems)}.
 */
export async function verifyBundle(bundle, checkpoint, publicKeyRawHex, consistency = null, policyText = null) {
  const problems = [];
  const verified = new Set();
  const checks = { format: true, signature: true, statement: true, note: true, quorum: true, consistency: true,
                   fork: true, inclusion: true, entry: true, losses: true, chain: true };
  let witness = null;
  const fail = (check, message, extra = {}) => {
    checks[check] = false;
    problems.push({ check, message, ...extra });
  };
  const result = () => ({ ok: problems.length === 0, checks, verifiedEntryIds: verified, problems,
                          forked: problems.some((p) => p.fork), witness });

  if (!bundle || bundle.format !== FORMAT || !Array.isArray(bundle.receipts)) {
    fail("format", `not a receipts file (format ${FORMAT})`);
    return result();
  }
  // 1 and 2: both checkpoints signed by the key, the same log
  const own = await checkpointProblems(checkpoint, publicKeyRawHex, "your checkpoint");
  const theirs = await checkpointProblems(bundle.checkpoint, publicKeyRawHex, "the receipts' checkpoint");
  for (const p of [...own, ...theirs]) fail(p.check, p.message);
  if (problems.length) return result();     // nothing is proven against an unsigned root
  if (policyText !== null && policyText !== undefined) {
    const opened = await noteProblems(bundle.checkpoint, policyText, "the receipts' checkpoint");
    for (const p of opened.problems) fail(p.check, p.message);
    if (problems.length) return result();   // nor against a root the witnesses did not vouch for
    witness = opened.witness;
  }
  for (const p of await linkProblems(checkpoint, bundle.checkpoint, consistency)) {
    fail(p.check, p.message, { fork: p.fork });
  }
  if (problems.length) return result();

  const logSize = bundle.checkpoint.tree_size;
  const logRoot = hexToBytes(bundle.checkpoint.root_hash, 32);
  const last = new Map();                   // value -> {block, index, chain, oneshot} of its previous receipt
  for (const [i, r] of bundle.receipts.entries()) {
    const id = r && r.entry ? r.entry.id : undefined;
    const where = `receipt ${i + 1} (entry ${id})`;
    const bad = (check, message) => fail(check, `${where}: ${message}`, { entry: id });
    const count = (n) => Number.isSafeInteger(n) && n >= 0;
    if (!r || !count(r.entry_index) || !count(r.block_size) || !count(r.block_index)
        || !Array.isArray(r.entry_proof) || !Array.isArray(r.block_proof)) {
      bad("format", "not a receipt (entry_index, block_size, block_index, entry_proof, block_proof)");
      continue;
    }
    let entry, block;
    try {
      entry = decodeEntry(hexToBytes(r.entry_data));
      block = decodeBlock(hexToBytes(r.block_data));
    } catch (exc) {
      bad("entry", `cannot be read (${exc.message})`);
      continue;
    }
    let ok = true;
    // 3: the entry in its block's entry tree, the block in the checkpoint's tree
    try {
      const proofOf = (list) => list.map((p) => hexToBytes(p, 32));
      if (entry.version !== block.version) {
        ok = false;
        bad("inclusion", `its entry is of version ${entry.version}, but its block's entries are of version ` +
                         `${block.version}`);
      }
      if (BigInt(r.block_size) !== block.count) {
        ok = false;
        bad("inclusion", `block_size ${r.block_size} is not the block's entry count ${block.count}`);
      } else if (!await verifyInclusion(r.entry_index, r.block_size, await leafHash(hexToBytes(r.entry_data)),
                                        proofOf(r.entry_proof), block.entriesRoot)) {
        ok = false;
        bad("inclusion", `the entry is not leaf ${r.entry_index} of its block's entry tree`);
      }
      if (!await verifyInclusion(r.block_index, logSize, await leafHash(hexToBytes(r.block_data)),
                                 proofOf(r.block_proof), logRoot)) {
        ok = false;
        bad("inclusion", `its block is not leaf ${r.block_index} of the signed log of tree size ${logSize}`);
      }
    } catch (exc) {
      ok = false;
      bad("inclusion", `its proofs cannot be read (${exc.message})`);
    }
    // 4: what the portal shows is what is proven, the entry's id included (block id * 2^24 + position)
    const differ = entryDifferences(r.entry || {}, entry);
    if (!Number.isSafeInteger(id) || BigInt(id) !== block.block * ID_SHIFT + big(r.entry_index)) differ.unshift("id");
    if (differ.length) {
      ok = false;
      bad("entry", `the entry shown differs from the entry proven in ${differ.join(", ")}`);
    }
    // 4: losses within the ceiling, never down, chained per value with no gap, in ledger order
    if (entry.chain_after + entry.oneshot_after > entry.ceiling) {
      ok = false;
      bad("losses", "its loss after is above its ceiling");
    }
    if (entry.chain_after < entry.chain_before || entry.oneshot_after < entry.oneshot_before) {
      ok = false;
      bad("losses", "its loss goes down");
    }
    const prev = last.get(entry.value) || { block: -1n, index: -1n, chain: 0n, oneshot: 0n };
    const position = big(r.entry_index);
    if (block.block < prev.block || (block.block === prev.block && position <= prev.index)) {
      ok = false;
      bad("chain", `value ${entry.value}'s receipts are not in ledger order`);
    }
    if (entry.chain_before !== prev.chain || entry.oneshot_before !== prev.oneshot) {
      ok = false;
      bad("chain", last.has(entry.value)
        ? `value ${entry.value}: its losses before are not the previous receipt's after (a gap)`
        : `value ${entry.value}: its first receipt does not start from no loss (a gap)`);
    }
    last.set(entry.value, { block: block.block, index: position, chain: entry.chain_after,
                            oneshot: entry.oneshot_after });
    if (ok) verified.add(id);
  }
  return result();
}
