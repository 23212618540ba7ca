// The value page's receipts (docs/receipts.md, "Checking receipts"; the #receipts section of
// portal/templates/portal/value_detail.html): fetches the value's receipts, the latest checkpoint and the key,
// checks them with the pure verifier (receipts_verify.js), marks each release row "verified" or "not yet in a
// checkpoint", and remembers the last checkpoint it verified (localStorage `ldpmarket.checkpoint`) so a later,
// rewritten log is caught (consistency proof).
// Loaded with <script type="module" src=...> (the Content-Security-Policy allows no inline script).

import { checkpointProblems, linkProblems, verifyBundle } from "./receipts_verify.js";

export const STORE_KEY = "ldpmarket.checkpoint";

async function getJson(url) {
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`${url} answered HTTP ${response.status}`);
  return response.json();
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

function badge(cell, text, kind, title) {
  cell.textContent = "";
  const span = document.createElement("span");
  span.className = `badge receipt-${kind}`;
  span.textContent = text;
  if (title) span.title = title;
  cell.append(span);
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
  let key, latest, bundle;
  try {
    key = await getJson(d.publicKeyUrl);
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
  const result = await verifyBundle(bundle, latest, key.public_key, link);
  problems = [...problems, ...result.problems];
  const cp = bundle.checkpoint || latest;
  const title = `Checked in this browser: included in the signed log of tree size ${cp.tree_size} ` +
    `(root ${cp.root_hash}), signed by key id ${cp.key_id}; the entry matches what is shown, its loss is within ` +
    "its ceiling and follows the previous entry with no gap.";
  const pending = new Set((bundle.pending || []).map((e) => String(e.id)));
  const missing = [];
  for (const row of rows) {
    const id = row.dataset.entryId;
    if (result.verifiedEntryIds.has(Number(id))) {
      badge(cellOf(row), "verified", "verified", title);
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
    status.textContent = "Some receipts did not verify: see the warning.";
    return;
  }
  if (!stored || latest.tree_size >= stored.tree_size) {
    const keep = ["tree_size", "root_hash", "created_at", "key_id", "signature", "statement"];
    window.localStorage.setItem(STORE_KEY, JSON.stringify(Object.fromEntries(keep.map((k) => [k, latest[k]]))));
  }
  const n = result.verifiedEntryIds.size;
  status.textContent = `${n} ledger entr${n === 1 ? "y" : "ies"} of this value verified in this browser against ` +
    `the signed checkpoint of tree size ${cp.tree_size} (key id ${cp.key_id.slice(0, 16)}…)` +
    (pending.size ? `; ${pending.size} not yet in a checkpoint.` : ".");
}

if (typeof document !== "undefined") {
  const section = document.getElementById("receipts");
  if (section) valuePage(section);
}
