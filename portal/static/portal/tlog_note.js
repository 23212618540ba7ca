// C2SP signed notes, checkpoints, cosignatures and trust policies in the browser (docs/receipts.md#checking-receipts
// and docs/receipts.md#witnesses): the pure module the value page uses to check a checkpoint's signed note against the
// policy the service publishes (GET /api/v1/ledger/policy/).  No DOM, no network, no storage; WebCrypto
// (globalThis.crypto.subtle: Ed25519, SHA-256) only, so Node 20 runs it as it is (tests/js/tlog_note.test.mjs).
// It follows the Python reference, client/ldpmarket_client/tlog/{note,checkpoint,policy}.py, and the
// specifications it implements:
//   c2sp.org/signed-note: a text ending in a newline, a blank line, signature lines `— <key name> base64(key id ||
//     signature)`; key id = SHA-256(key name || 0x0A || type || public key)[:4]; verifier keys (vkeys)
//     `<name>+<hex key id>+base64(type || public key)`.  Signatures of unknown keys (name and id not both known)
//     are ignored; a known key's signature that fails rejects the whole note; a note with no verified signature
//     is rejected.
//   c2sp.org/tlog-cosignature: type 0x04 signs `cosignature/v1\ntime <t>\n` + the note text; its signature is t
//     (8 bytes, big-endian, at most 2^63 - 1) followed by the Ed25519 signature.  Type 0x01 signs the text.
//   c2sp.org/tlog-checkpoint: `<origin>\n<tree size>\n<base64 root>\n` and optional non-empty extension lines.
//   c2sp.org/tlog-policy: `log <vkey> [<url>]` (0x01 keys), `witness <name> <vkey> [<url>]` (0x04 keys),
//     `group <name> all|any|<k> <name>...`, one `quorum <name>|none`; names are octet strings.
// `verifyCheckpoint(policy, note)` opens a checkpoint note with a policy: a verified signature of one of its logs,
// whose key name is the checkpoint's origin, and the witnesses whose cosignatures verify satisfying the quorum.
// An ES module (export, no import): <script type="module"> in the browser, `import` in Node 20.19+.

export const ED25519 = 0x01;
export const COSIGNATURE_V1 = 0x04;
const DASH = "\u2014 ";
//: The most signature lines a note may carry here (the specification asks verifiers to accept at least 16).
export const MAX_SIGNATURES = 100;
//: The groups, witnesses and logs a policy may define here (the specification recommends at least 32 each).
export const MAX_NAMES = 256;
const MAX_TIMESTAMP = 2n ** 63n - 1n;
const MAX_SIZE = 2n ** 64n - 1n;

// ------------------------------------------------------------------ errors (the Python module's classes)

/** A malformed note, key, checkpoint or signature line (the message says which). */
export class NoteError extends Error {
  constructor(message) { super(message); this.name = "NoteError"; }
}
/** A signature by a known key (its name and id) does not verify: the note must be rejected. */
export class InvalidNoteSignature extends NoteError {
  constructor(message) { super(message); this.name = "InvalidNoteSignature"; }
}
/** No signature of the note is by a known key. */
export class UnverifiedNote extends NoteError {
  constructor(message) { super(message); this.name = "UnverifiedNote"; }
}
/** A malformed policy file (the message says which line). */
export class PolicyError extends NoteError {
  constructor(message) { super(message); this.name = "PolicyError"; }
}
/** The checkpoint verified, but the witnesses that cosigned it do not satisfy the quorum (`result` says who did). */
export class QuorumNotMet extends NoteError {
  constructor(message, result) { super(message); this.name = "QuorumNotMet"; this.result = result; }
}

// ------------------------------------------------------------------ bytes, text, base64

const utf8 = new TextEncoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
const lenientUtf8 = new TextDecoder("utf-8");

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

const sameBytes = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
const hex8 = (n) => n.toString(16).padStart(8, "0");

/** Whether a JavaScript string is well-formed UTF-16 (no lone surrogate), so that it is valid UTF-8 once encoded. */
function wellFormed(text) {
  return !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?:^|[^\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(text);
}

/** The bytes of a note, policy or checkpoint given as a string (encoded as UTF-8) or bytes. */
function bytesOf(data, what) {
  if (typeof data === "string") {
    if (!wellFormed(data)) throw new NoteError(`${what} must be valid UTF-8`);
    return utf8.encode(data);
  }
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  throw new NoteError(`${what} is not text`);
}

/** Bytes as a string of one character per byte (U+0000-U+00FF): names of a policy are compared as octets. */
function octets(bytes) {
  let out = "";
  for (let i = 0; i < bytes.length; i += 8192) out += String.fromCharCode(...bytes.subarray(i, i + 8192));
  return out;
}

const octetBytes = (text) => Uint8Array.from(text, (c) => c.charCodeAt(0));
/** A policy's octet string shown as text (UTF-8; what is not UTF-8 becomes U+FFFD). */
const shown = (text) => lenientUtf8.decode(octetBytes(text));

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64_FORM = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** RFC 4648 section 4 base64, padded: whole quanta only, "=" only to pad the last one; throws NoteError. */
export function base64Decode(text, what = "the text") {
  if (typeof text !== "string" || !B64_FORM.test(text)) throw new NoteError(`${what} is not valid base64`);
  const body = text.replace(/=+$/, "");
  const out = new Uint8Array(Math.floor((body.length * 6) / 8));
  let bits = 0, value = 0, at = 0;
  for (const c of body) {
    value = (value << 6) | B64.indexOf(c);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[at++] = (value >> bits) & 0xff;
    }
  }
  return out;
}

export function base64Encode(bytes) {
  let out = "";
  for (let i = 0; i < bytes.length; i += 3) {
    const n = (bytes[i] << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0);
    out += B64[(n >> 18) & 63] + B64[(n >> 12) & 63];
    out += i + 1 < bytes.length ? B64[(n >> 6) & 63] : "=";
    out += i + 2 < bytes.length ? B64[n & 63] : "=";
  }
  return out;
}

// ------------------------------------------------------------------ keys

const NAME_FORBIDDEN = /[\p{White_Space}+\u0000-\u001f]/u;

/** A key name: non-empty, no Unicode space (White_Space), no "+", no control character, valid UTF-8. */
export function checkKeyName(name) {
  if (typeof name !== "string" || !name || NAME_FORBIDDEN.test(name) || !wellFormed(name)) {
    throw new NoteError(`invalid key name ${JSON.stringify(String(name))}: it must be non-empty, without spaces ` +
                        "or '+'");
  }
  return name;
}

/** `SHA-256(name || 0x0A || type || public key)[:4]` as an unsigned 32-bit number. */
export async function keyId(name, type, publicKey) {
  const digest = new Uint8Array(await crypto.subtle.digest(
    "SHA-256", concat(utf8.encode(name), Uint8Array.of(0x0a, type), publicKey)));
  return new DataView(digest.buffer).getUint32(0, false);
}

/** What a type 0x04 cosignature signs: `cosignature/v1`, `time <timestamp>` and the note text. */
export function cosignedMessage(text, timestamp) {
  return concat(utf8.encode(`cosignature/v1\ntime ${BigInt(timestamp)}\n`), text);
}

/**
 * A public key that checks note signatures: {name, type (0x01 or 0x04), publicKey (32 bytes), keyId, vkey,
 * verify(text, signature)}.  `verify` takes the note text (bytes) and a signature without its key id and resolves to
 * null when it fails, else the cosignature's timestamp (a BigInt; 0n for an Ed25519 signature).
 */
export async function makeVerifier(name, type, publicKey) {
  checkKeyName(name);
  if (type !== ED25519 && type !== COSIGNATURE_V1) {
    throw new NoteError(`unsupported signature type 0x${type.toString(16).padStart(2, "0")} (0x01 and 0x04 are ` +
                        "supported)");
  }
  if (!(publicKey instanceof Uint8Array) || publicKey.length !== 32) {
    throw new NoteError("an Ed25519 public key is 32 bytes");
  }
  const id = await keyId(name, type, publicKey);
  let imported = null;
  const verifier = {
    name, type, publicKey: publicKey.slice(), keyId: id,
    vkey: `${name}+${hex8(id)}+${base64Encode(concat(Uint8Array.of(type), publicKey))}`,
    async verify(text, signature) {
      let message = text, timestamp = 0n, sig = signature;
      if (type === COSIGNATURE_V1) {
        if (signature.length !== 8 + 64) return null;
        timestamp = new DataView(signature.buffer, signature.byteOffset, 8).getBigUint64(0, false);
        if (timestamp > MAX_TIMESTAMP) return null;
        message = cosignedMessage(text, timestamp);
        sig = signature.subarray(8);
      } else if (signature.length !== 64) {
        return null;
      }
      try {
        imported = imported || await crypto.subtle.importKey("raw", verifier.publicKey, { name: "Ed25519" }, false,
                                                             ["verify"]);
        return await crypto.subtle.verify({ name: "Ed25519" }, imported, sig, message) ? timestamp : null;
      } catch {
        return null;          // a key WebCrypto refuses verifies nothing
      }
    },
  };
  return Object.freeze(verifier);
}

/** A verifier key `<name>+<hex id>+<base64(type || key)>`; the id must be the one the name and key give. */
export async function parseVkey(vkey) {
  if (typeof vkey !== "string") throw new NoteError("a verifier key is text");
  const first = vkey.indexOf("+"), second = first < 0 ? -1 : vkey.indexOf("+", first + 1);
  if (second < 0) throw new NoteError("a verifier key is <name>+<key id>+<base64 key>");
  const [name, hexId, raw] = [vkey.slice(0, first), vkey.slice(first + 1, second), vkey.slice(second + 1)];
  if (!/^[0-9a-f]{8}$/.test(hexId)) throw new NoteError("a verifier key's id is 8 lowercase hex digits");
  const data = base64Decode(raw, "the verifier key");
  if (data.length < 2) throw new NoteError("the verifier key holds no key");
  const verifier = await makeVerifier(name, data[0], data.subarray(1));
  if (hex8(verifier.keyId) !== hexId) {
    throw new NoteError(`the verifier key's id ${hexId} is not the id of its name and key (${hex8(verifier.keyId)})`);
  }
  return verifier;
}

// ------------------------------------------------------------------ notes

function checkCharacters(bytes) {
  let text;
  try {
    text = strictUtf8.decode(bytes);
  } catch {
    throw new NoteError("a note must be valid UTF-8");
  }
  if (/[\u0000-\u0009\u000b-\u001f]/.test(text)) {
    throw new NoteError("a note must not hold control characters other than newline");
  }
  return text;
}

/** One `— <name> <base64>` line, without its newline: {name, keyId, signature (bytes after the id)}. */
export function parseSignatureLine(line) {
  if (!line.startsWith(DASH)) throw new NoteError("a signature line starts with an em dash and a space");
  const rest = line.slice(DASH.length);
  const space = rest.indexOf(" ");
  if (space < 0) throw new NoteError("a signature line is '— <key name> <base64 signature>'");
  const name = checkKeyName(rest.slice(0, space));
  const data = base64Decode(rest.slice(space + 1), "a signature");
  if (data.length < 5) throw new NoteError("a signature holds a 4-byte key id and a signature");
  return { name, keyId: new DataView(data.buffer).getUint32(0, false), signature: data.slice(4) };
}

/**
 * Split a signed note (a string or UTF-8 bytes) into its `text` (bytes, with its final newline, up to the last
 * blank line) and its `signatures`; no signature is checked.
 */
export function parseNote(note) {
  const data = bytesOf(note, "a note");
  checkCharacters(data);
  let split = -1;
  for (let i = data.length - 2; i >= 0; i--) {
    if (data[i] === 0x0a && data[i + 1] === 0x0a) { split = i; break; }
  }
  if (split < 0) throw new NoteError("a signed note is a text, a blank line and signature lines");
  const text = data.slice(0, split + 1), block = data.subarray(split + 2);
  if (!block.length) throw new NoteError("the note has no signature");
  const lines = strictUtf8.decode(block);
  if (!lines.endsWith("\n")) throw new NoteError("signature lines end with a newline");
  const each = lines.slice(0, -1).split("\n");
  if (each.length > MAX_SIGNATURES) throw new NoteError(`more than ${MAX_SIGNATURES} signatures`);
  return { text, signatures: each.map(parseSignatureLine) };
}

/**
 * Parse `note` and check its signatures with `verifiers` (found by name and key id; the others are ignored):
 * {text, verified: [{verifier, timestamp, signature}] (one per key), unverified: [signature lines of unknown keys]}.
 * Throws InvalidNoteSignature when a known key's signature fails, UnverifiedNote when none is by a known key.
 */
export async function openNote(note, verifiers) {
  const parsed = parseNote(note);
  const known = new Map(verifiers.map((v) => [`${v.name}\n${v.keyId}`, v]));
  const verified = [], unverified = [];
  for (const sig of parsed.signatures) {
    const verifier = known.get(`${sig.name}\n${sig.keyId}`);
    if (!verifier) {
      const same = (u) => u.name === sig.name && u.keyId === sig.keyId && sameBytes(u.signature, sig.signature);
      if (!unverified.some(same)) unverified.push(sig);   // a repeated line counts once
      continue;
    }
    const timestamp = await verifier.verify(parsed.text, sig.signature);   // every line of a known key is checked
    if (timestamp === null) {
      throw new InvalidNoteSignature(`the signature of ${sig.name} (key ${hex8(sig.keyId)}) does not verify`);
    }
    if (!verified.some((v) => v.verifier === verifier)) verified.push({ verifier, timestamp, signature: sig });
  }
  if (!verified.length) throw new UnverifiedNote("no signature of the note is by a known key");
  return { text: parsed.text, signatures: parsed.signatures, verified, unverified };
}

// ------------------------------------------------------------------ checkpoints

/** The origin, size (BigInt), root (bytes and hex) and extension lines of a checkpoint's text (bytes or string). */
export function parseCheckpoint(text) {
  let decoded;
  try {
    decoded = typeof text === "string" ? text : strictUtf8.decode(text);
  } catch {
    throw new NoteError("a checkpoint is UTF-8 text");
  }
  if (!decoded.endsWith("\n")) throw new NoteError("a checkpoint's text ends with a newline");
  const lines = decoded.slice(0, -1).split("\n");
  if (lines.length < 3 || lines.some((line) => !line)) {
    throw new NoteError("a checkpoint is at least three non-empty lines: origin, tree size, root hash");
  }
  const [origin, sizeText, rootText, ...extensions] = lines;
  if (!/^(?:0|[1-9][0-9]*)$/.test(sizeText)) {
    throw new NoteError(`the tree size ${JSON.stringify(sizeText)} is not a decimal without leading zeroes`);
  }
  const size = BigInt(sizeText);
  if (size > MAX_SIZE) throw new NoteError("the tree size is above 2^64 - 1");
  const root = base64Decode(rootText, "the root hash");
  if (root.length !== 32) throw new NoteError("the root hash is 32 bytes (SHA-256)");
  return { origin, size, root, rootHex: hex(root), extensions };
}

// ------------------------------------------------------------------ policies

function threshold(word, n, lineno) {
  if (word === "all") return n;
  if (word === "any") return 1;
  if (!/^[1-9][0-9]*$/.test(word)) {
    throw new PolicyError(`line ${lineno}: a group's threshold is 'all', 'any' or a number from 1 to ${n}`);
  }
  const k = Number(word);
  if (!(k >= 1 && k <= n)) throw new PolicyError(`line ${lineno}: the threshold ${word} is not between 1 and ${n}`);
  return k;
}

async function policyVkey(word, type, lineno) {
  let verifier;
  try {
    verifier = await parseVkey(strictUtf8.decode(octetBytes(word)));
  } catch (exc) {
    const why = exc instanceof NoteError ? exc.message : "invalid key name: the key is not UTF-8";
    throw new PolicyError(`line ${lineno}: ${why}`);
  }
  if (verifier.type !== type) {
    const h = (t) => `0x${t.toString(16).padStart(2, "0")}`;
    throw new PolicyError(`line ${lineno}: a ${type === ED25519 ? "log" : "witness"} key is of type ${h(type)}, not ` +
                          h(verifier.type));
  }
  return verifier;
}

/**
 * A policy file (c2sp.org/tlog-policy), as a string or bytes: {logs: [{name, verifier, url}], witnesses: Map(name
 * -> {name, verifier, url}), groups: Map(name -> {name, threshold, members}), quorum}.  The Maps' keys, `members`
 * and `quorum` are the names as octet strings (one character per byte); each entry's `name` is the same name shown
 * as UTF-8 text.  Log keys must be of type 0x01, witness keys of type 0x04.  Throws PolicyError.
 */
export async function parsePolicy(text) {
  let data;
  try {
    data = bytesOf(text, "a policy");
  } catch (exc) {
    throw new PolicyError(exc.message);
  }
  if (data.some((b) => (b < 0x20 && b !== 0x09 && b !== 0x0a) || b === 0x7f)) {
    throw new PolicyError("a policy holds no control characters but tab and newline");
  }
  const policy = { logs: [], witnesses: new Map(), groups: new Map(), quorum: "none" };
  const names = new Set(), keys = new Set();
  let quorumSeen = false;
  const newName = (name, lineno) => {
    if (name === "none" || names.has(name)) {
      throw new PolicyError(`line ${lineno}: the name ${JSON.stringify(shown(name))} is reserved or already defined`);
    }
    names.add(name);
    return name;
  };
  const newKey = (verifier, lineno) => {
    const k = hex(verifier.publicKey);
    if (keys.has(k)) throw new PolicyError(`line ${lineno}: a duplicate key`);
    keys.add(k);
  };
  const lines = octets(data).split("\n");
  for (const [i, raw] of lines.entries()) {
    const lineno = i + 1;
    const words = raw.split(/[ \t]+/).filter(Boolean);   // only space and tab separate: other octets are opaque
    if (!words.length || words[0].startsWith("#")) continue;
    const [keyword, ...args] = words;
    if (keyword === "log") {
      if (args.length !== 1 && args.length !== 2) throw new PolicyError(`line ${lineno}: 'log <vkey> [<url>]'`);
      const verifier = await policyVkey(args[0], ED25519, lineno);
      newKey(verifier, lineno);
      policy.logs.push({ name: verifier.name, verifier, url: args[1] === undefined ? "" : shown(args[1]) });
    } else if (keyword === "witness") {
      if (args.length !== 2 && args.length !== 3) {
        throw new PolicyError(`line ${lineno}: 'witness <name> <vkey> [<url>]'`);
      }
      const name = newName(args[0], lineno);
      const verifier = await policyVkey(args[1], COSIGNATURE_V1, lineno);
      newKey(verifier, lineno);
      policy.witnesses.set(name, { name: shown(name), verifier, url: args[2] === undefined ? "" : shown(args[2]) });
    } else if (keyword === "group") {
      if (args.length < 3) throw new PolicyError(`line ${lineno}: 'group <name> all|any|<k> <name>...'`);
      const name = newName(args[0], lineno);
      const members = args.slice(2);
      for (const m of members) {
        if (!names.has(m) || m === name) {
          throw new PolicyError(`line ${lineno}: ${JSON.stringify(shown(m))} is not a witness or group defined above`);
        }
      }
      if (new Set(members).size !== members.length) throw new PolicyError(`line ${lineno}: a member is listed twice`);
      policy.groups.set(name, { name: shown(name), threshold: threshold(args[1], members.length, lineno), members });
    } else if (keyword === "quorum") {
      if (quorumSeen) throw new PolicyError(`line ${lineno}: a second quorum line`);
      if (args.length !== 1 || (args[0] !== "none" && !names.has(args[0]))) {
        throw new PolicyError(`line ${lineno}: 'quorum <name>' names 'none' or a witness or group defined above`);
      }
      policy.quorum = args[0];
      quorumSeen = true;
    } else {
      throw new PolicyError(`line ${lineno}: unknown keyword ${JSON.stringify(shown(keyword))}`);
    }
    if (names.size > MAX_NAMES || policy.logs.length > MAX_NAMES) {
      throw new PolicyError(`more than ${MAX_NAMES} names`);
    }
  }
  if (!quorumSeen) throw new PolicyError("a policy needs a quorum line ('quorum none' for no witnesses)");
  return policy;
}

/** Whether the witnesses named in `witnessed` (a Set of octet-string names) satisfy `name` (default: the quorum). */
export function satisfied(policy, witnessed, name = policy.quorum) {
  if (name === "none") return true;
  if (policy.witnesses.has(name)) return witnessed.has(name);
  const group = policy.groups.get(name);
  return group.members.filter((m) => satisfied(policy, witnessed, m)).length >= group.threshold;
}

/** The quorum in words, e.g. `2 of (assoc, audit)`. */
export function describeQuorum(policy, name = policy.quorum) {
  if (name === "none" || policy.witnesses.has(name)) return shown(name);
  const group = policy.groups.get(name);
  return `${group.threshold} of (${group.members.map((m) => describeQuorum(policy, m)).join(", ")})`;
}

/**
 * Open the checkpoint note `note` (string or bytes) with `policy` (a parsed policy, or its text): one of its logs
 * signed it, under a key named as the checkpoint's origin (and `origin`, when given, is that origin), and the
 * witnesses whose cosignatures verify satisfy its quorum.  Resolves to {origin, size (BigInt), root, rootHex,
 * witnessed: [witness names, sorted], total: the policy's witness count, quorumMet: true, quorumText, cosignedAt:
 * {name: timestamp}}.  Throws NoteError (malformed, no log signature, another origin), InvalidNoteSignature (a known
 * key's signature fails: a forged cosignature), UnverifiedNote, PolicyError, or QuorumNotMet (its `result` is the
 * same object with quorumMet false).
 */
export async function verifyCheckpoint(policy, note, { origin = null } = {}) {
  if (typeof policy === "string" || policy instanceof Uint8Array || policy instanceof ArrayBuffer) {
    policy = await parsePolicy(policy);
  }
  const logs = policy.logs.map((m) => m.verifier);
  const byKey = new Map([...policy.witnesses].map(([name, m]) => [m.verifier, name]));
  const opened = await openNote(note, [...logs, ...byKey.keys()]);
  const logSigned = opened.verified.filter((v) => logs.includes(v.verifier));
  if (!logSigned.length) throw new NoteError("no signature of a log of the policy verifies");
  const checkpoint = parseCheckpoint(opened.text);
  if (!logSigned.some((v) => v.verifier.name === checkpoint.origin)) {
    throw new NoteError(`the checkpoint's origin ${JSON.stringify(checkpoint.origin)} is not the name of the log key ` +
                        "that signed it");
  }
  if (origin !== null && checkpoint.origin !== origin) {
    throw new NoteError(`the checkpoint is of ${JSON.stringify(checkpoint.origin)}, not of ${JSON.stringify(origin)}`);
  }
  const cosigned = opened.verified.filter((v) => byKey.has(v.verifier));
  const keys = [...new Set(cosigned.map((v) => byKey.get(v.verifier)))].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const witnessed = keys.map((k) => policy.witnesses.get(k).name);
  const result = {
    origin: checkpoint.origin, size: checkpoint.size, root: checkpoint.root, rootHex: checkpoint.rootHex,
    extensions: checkpoint.extensions, witnessed, total: policy.witnesses.size, quorumMet: true,
    quorumText: describeQuorum(policy),
    cosignedAt: Object.fromEntries(cosigned.map((v) => [policy.witnesses.get(byKey.get(v.verifier)).name,
                                                        v.timestamp])),
  };
  if (!satisfied(policy, new Set(keys))) {
    throw new QuorumNotMet(`cosigned by ${witnessed.length} of ${result.total} witnesses ` +
                           `(${witnessed.join(", ") || "none"}); the quorum is ${result.quorumText}`,
                           { ...result, quorumMet: false });
  }
  return result;
}
