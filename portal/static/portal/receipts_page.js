// The value page's receipts (docs/receipts.md, "Checking receipts"; the #receipts section of
// portal/templates/portal/value_detail.html): fetches the value's receipts, the latest checkpoint, the key and the
// trust policy (GET /api/v1/ledger/policy/), checks them with the pure verifier (receipts_verify.js; the
// checkpoint's signed note and its witnesses' cosignatures with tlog_note.js), marks each release row "verified"
// (with "witnessed by N of M" when the policy names witnesses) or "not yet in a checkpoint", and remembers the last
// checkpoint it verified (localStorage `ldpmarket.checkpoint`) so a later, rewritten log is caught (consistency
// proof).
// Loaded with <script type="module" src=...> (the Content-Security-Policy allows no inline script).

import { checkpointProblems, linkProblems, verifyBundle } from "./receipts_verify.js";

export const STORE_KEY = "ldpmarket.checkpoint";

async function getJson(url) {
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`${url} answered HTTP ${response.status}`);
  return response.json();
}

/** The body of `url` as bytes (a policy is octets: names that are not UTF-8 stay as they are). */
async function getBytes(url) {
  const response = await fetch(url, { credentials: "same-origin" });   // text/plain, whatever the Accept header
  if (!response.ok) throw new Error(`${url} answered HTTP ${response.status}`);
  return new Uint8Array(await response.arrayBuffer());
}

function withQuery(url, params) {
  const u = new URL(url, window.location.href);
  for (const [k, v] of Object.entries(params)) u.searchParams.set(k, v);
  return u.toString();
}

function loadStored() {
  try {
    const stored = JSON.parse(window.localStorage.getItem(STORE_KEY));
    return stored && Number.isSafeInteger(stored.tree_size) ? stored : null;
  } catch {
    return null;
  }
}

function badge(cell, text, kind, title, witnessed = null) {
  cell.textContent = "";
  const span = document.createElement("span");
  span.className = `badge receipt-${kind}`;
  span.textContent = text;
  if (title) span.title = title;
  cell.append(span);
  if (witnessed) {                          // "witnessed by N of M", next to "verified"
    const small = document.createElement("small");
    small.className = "receipt-witnessed";
    small.style.whiteSpace = "nowrap";     // CSSOM, not a style attribute: the Content-Security-Policy allows it
    small.textContent = witnessed;
    if (title) small.title = title;
    cell.append(" ", small);
  }
}

/** "witnessed by N of M" for a checkpoint whose note verified with the policy (null when the policy names no
 * witness, or the checkpoint has no note). */
function witnessedText(witness) {
  return witness && witness.total ? `witnessed by ${witness.witnessed.length} of ${witness.total}` : null;
}

function warn(box, heading, lines, fork = false) {
  box.textContent = "";
  box.hidden = false;
  box.className = fork ? "receipts-warning forked" : "receipts-warning";
  box.setAttribute("role", "alert");
  const h = document.createElement("h3");
  h.textContent = heading;
  const ul = document.createElement("ul");
  for (const line of lines) {
    const li = document.createElement("li");
    li.textContent = line;
    ul.append(li);
  }
  box.append(h, ul);
}

/** The value page: check this value's receipts and mark its release rows. */
export async function valuePage(section) {
  const d = section.dataset;
  const status = section.querySelector("#receipts-status");
  const warning = section.querySelector("#receipts-warning");
  const rows = Array.from(document.querySelectorAll("tr.release-row[data-entry-id]"));
  const cellOf = (row) => row.querySelector(".receipt-cell") || row.lastElementChild;
  const problemsShown = (heading, problems, fork) => warn(warning, heading, problems.map((p) => p.message), fork);
  status.textContent = "Checking this value's receipts in your browser…";
  for (const row of rows) badge(cellOf(row), "checking…", "checking");
  let key, latest, bundle, policy;
  try {
    key = await getJson(d.publicKeyUrl);
    policy = await getBytes(d.policyUrl);
    const page = await getJson(withQuery(d.checkpointsUrl, { page_size: 1 }));
    latest = page.results && page.results[0];
    if (!latest) {
      status.textContent = "The ledger has no signed checkpoint yet: receipts come with the first one.";
      for (const row of rows) badge(cellOf(row), "not yet in a checkpoint", "pending");
      return;
    }
    bundle = await getJson(withQuery(d.receiptsUrl, { tree_size: latest.tree_size }));
  } catch (exc) {
    status.textContent = `Receipts could not be checked: ${exc.message}`;
    return;
  }
  const refuse = (heading, problems, fork, text) => {
    problemsShown(heading, problems, fork);
    status.textContent = text;
    for (const row of rows) badge(cellOf(row), "not verified", "failed");
  };
  const checksOf = (problems) => [...new Set(problems.map((p) => p.check))].join(", ");
  // Check 1 for the latest checkpoint, then check 2 against the last one this browser verified (a checkpoint
  // remembered is only replaced by a larger one that verified, never by one that failed).
  let problems = await checkpointProblems(latest, key.public_key, "the latest checkpoint");
  if (problems.length) {
    refuse(`Receipts did not verify (${checksOf(problems)})`, problems, false,
           "Nothing was verified: the latest checkpoint does not check out.");
    return;
  }
  const stored = loadStored();
  if (stored && !(await checkpointProblems(stored, key.public_key)).length) {
    let proof = null;
    if (stored.tree_size !== latest.tree_size) {
      const [first, second] = [stored.tree_size, latest.tree_size].sort((x, y) => x - y);
      proof = await getJson(withQuery(d.consistencyUrl, { first, second })).catch(() => null);
    }
    problems = await linkProblems(stored, latest, proof);
    if (!problems.length && latest.tree_size < stored.tree_size) {
      problems = [{ check: "consistency", message: `the latest checkpoint the service shows (tree size ` +
        `${latest.tree_size}) is older than one this browser verified before (tree size ${stored.tree_size})` }];
    }
  }
  if (problems.some((p) => p.fork)) {
    refuse("The ledger's log was rewritten (forked)", problems, true,
           "Nothing was verified: the signed log this browser saw before was rewritten.");
    return;
  }
  let link = null;                            // the route honours ?tree_size=, so normally the same checkpoint
  const size = bundle.checkpoint && bundle.checkpoint.tree_size;
  if (Number.isSafeInteger(size) && size !== latest.tree_size) {
    const [first, second] = [size, latest.tree_size].sort((x, y) => x - y);
    link = await getJson(withQuery(d.consistencyUrl, { first, second })).catch(() => null);
  }
  const result = await verifyBundle(bundle, latest, key.public_key, link, policy);
  problems = [...problems, ...result.problems];
  const cp = bundle.checkpoint || latest;
  const w = result.witness;
  const witnessed = witnessedText(w);
  const cosigners = w && w.witnessed.length ? ` (${w.witnessed.join(", ")})` : "";
  const title = `Checked in this browser: included in the signed log of tree size ${cp.tree_size} ` +
    `(root ${cp.root_hash}), signed by key id ${cp.key_id}` +
    (w ? `; its signed note verified with the trust policy, ${witnessed || "which names no witness"}${cosigners}, ` +
         `quorum ${w.quorumText}` : "") +
    "; the entry matches what is shown, its loss is within its ceiling and follows the previous entry with no gap.";
  const pending = new Set((bundle.pending || []).map((e) => String(e.id)));
  const missing = [];
  for (const row of rows) {
    const id = row.dataset.entryId;
    if (result.verifiedEntryIds.has(Number(id))) {
      badge(cellOf(row), "verified", "verified", title, witnessed);
    } else if (pending.has(id)) {
      badge(cellOf(row), "not yet in a checkpoint", "pending",
            "Written after the latest checkpoint: its receipt comes with the next one.");
    } else {
      badge(cellOf(row), "not verified", "failed");
      if (result.ok) missing.push(id);
    }
  }
  if (missing.length) {
    problems.push({ check: "chain", message: `no receipt and not pending: entr${missing.length > 1 ? "ies" : "y"} ` +
                                             missing.join(", ") });
  }
  if (problems.length) {
    problemsShown(`Receipts did not verify (${checksOf(problems)})`, problems, problems.some((p) => p.fork));
    status.textContent = !result.checks.note || !result.checks.quorum
      ? "Nothing was verified: the checkpoint's signed note does not check out with the trust policy (its " +
        "witnesses' cosignatures): see the warning."
      : "Some receipts did not verify: see the warning.";
    return;
  }
  if (!stored || latest.tree_size >= stored.tree_size) {
    const keep = ["tree_size", "root_hash", "created_at", "key_id", "signature", "statement"];
    window.localStorage.setItem(STORE_KEY, JSON.stringify(Object.fromEntries(keep.map((k) => [k, latest[k]]))));
  }
  const n = result.verifiedEntryIds.size;
  status.textContent = `${n} ledger entr${n === 1 ? "y" : "ies"} of this value verified in this browser against ` +
    `the signed checkpoint of tree size ${cp.tree_size} (key id ${cp.key_id.slice(0, 16)}…)` +
    (witnessed ? `, ${witnessed} (${w.witnessed.join(", ") || "none"}; quorum ${w.quorumText})` : "") +
    (pending.size ? `; ${pending.size} not yet in a checkpoint.` : ".");
}

if (typeof document !== "undefined") {
  const section = document.getElementById("receipts");
  if (section) valuePage(section);
}
