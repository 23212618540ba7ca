// "Keep my value on this device" (docs/custody.md): the raw value never leaves this browser.
//
// Contribute page: when the box is checked, the form is not submitted.  Instead this module creates an
// owner-held value through the owner API (POST /api/v1/owner/values/, no value in the body), draws the chain
// here with owner_sampler.js (k-RR at the grid start, then one relaxation step per grid point, the server's
// integer laws, crypto.getRandomValues) up to the upload level (default: the last grid point at or below the
// ceiling), uploads only the epsilons and outputs (POST /api/v1/owner/values/{id}/chain/), keeps what it drew
// from and the chain head in localStorage, and opens the value's page.  What the chain runs on, by kind:
//   categorical, binary: the label's index;
//   numeric: z, the number discretized once here (1 = high with probability (x - low) / (high - low)),
//     kept with the number and never drawn again;
//   string: its Bloom filter in the value's cohort (the attribute's num_bits and num_hashes), one binary chain
//     per bit drawn at epsilon / draw_divisor; each upload output is a text of num_bits characters 0/1.
// The number, z, the string and its Bloom filter stay in this browser's storage: no request carries them.
// Value page: says whether this browser holds the value (the server cannot know which device does: its badge says
// "a device", this module "your device (this browser)" when it finds the value here); for an owner-held value
// whose ceiling passed its upload level (needs_upload), "Extend now" draws from the stored head to the ceiling's
// last grid point and uploads.
//
// Requests carry the session cookie and the CSRF token (DRF's SessionAuthentication).  An upload's draws are
// stored (as "pending") before they are sent and reused until the service confirms them: draws the service
// may have seen are never replaced by fresh ones (a second independent draw would leak more than the level).
// Loaded with <script type="module" src=...> (the Content-Security-Policy allows no inline script).

import { bloomBits, bloomChains, chain, checkText, compareEpsilons, discretize, extend, numericThreshold }
  from "./owner_sampler.js";

const API = "/api/v1/owner/values/";
// + value id: {value, m, label, head, output, pending} (categorical, binary); numeric: {value, kind, m, x, z, head,
// output, pending}; string: {value, kind, string, cohort, num_bits, num_hashes, divisor, bits, head, output,
// pending} (bits: the Bloom filter, output: the head's text of bits)
const STORE = "ldpmarket.owner-held.";
const MICRO = 1000000;

// ------------------------------------------------------------------ epsilons in micro units, the grid

function toMicro(text, what) {
  const m = /^\s*(\d+)(?:\.(\d{1,6})0*)?\s*$/.exec(String(text));
  if (!m) throw new Error(`${what} must be a number with at most 6 decimal places, for example 1.5.`);
  const micro = Number(m[1]) * MICRO + Number((m[2] || "").padEnd(6, "0"));
  if (!Number.isSafeInteger(micro)) throw new Error(`${what} is too large.`);
  return micro;
}

function fromMicro(micro) {
  const whole = Math.floor(micro / MICRO), frac = String(micro % MICRO).padStart(6, "0").replace(/0+$/, "");
  return frac ? `${whole}.${frac}` : String(whole);
}

function gridOf(g) {
  return { start: toMicro(g.start, "grid start"), step: toMicro(g.step, "grid step"),
           stop: toMicro(g.stop, "grid stop") };
}

// market.chains.Grid.last_point_upto: the largest grid point <= min(limit, stop); the first one below it.
function lastPointUpTo(grid, limit) {
  const lim = Math.min(limit, grid.stop);
  return grid.start + Math.max(Math.floor((lim - grid.start) / grid.step), 0) * grid.step;
}

// market.chains.Grid.next_point_after
function nextPointAfter(grid, eps) {
  const k = eps >= grid.start ? Math.floor((eps - grid.start) / grid.step) + 1 : 0;
  return grid.start + k * grid.step;
}

// The epsilons of an upload: every grid point from `first` up to `level`, and `level` itself when it lies
// between grid points (the server accepts an off-grid last point, the upload level).
function pointsUpTo(grid, first, level) {
  const out = [];
  for (let e = first; e <= level; e += grid.step) out.push(e);
  if (level >= first && out[out.length - 1] !== level) out.push(level);
  return out.map(fromMicro);
}

// ------------------------------------------------------------------ this browser's storage

function load(id) {
  const text = window.localStorage.getItem(STORE + id);
  return text ? JSON.parse(text) : null;
}

function save(record) {
  window.localStorage.setItem(STORE + record.value, JSON.stringify(record));
}

// ------------------------------------------------------------------ the owner API

function csrfToken() {
  const input = document.querySelector("input[name=csrfmiddlewaretoken]");
  if (input) return input.value;
  const cookie = document.cookie.split("; ").find((c) => c.startsWith("csrftoken="));
  return cookie ? decodeURIComponent(cookie.slice("csrftoken=".length)) : "";
}

class ApiError extends Error {}

async function api(method, url, body) {
  const response = await fetch(url, {
    method, credentials: "same-origin",
    headers: { Accept: "application/json", "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try { data = await response.json(); } catch { /* no body */ }
  if (!response.ok) {
    // problem+json (docs/errors.md): detail, and errors per field
    const fields = data && data.errors
      ? Object.entries(data.errors).map(([f, msgs]) => `${f}: ${[].concat(msgs).join(" ")}`) : [];
    const detail = (data && (data.detail || data.title)) || `HTTP ${response.status}`;
    throw new ApiError(fields.length ? fields.join("; ") : detail);
  }
  return data;
}

// ------------------------------------------------------------------ drawing and uploading

// The outputs at `epsilons` (continuing the record's head), drawn here: label indices, or texts of bits.
function draw(record, epsilons) {
  if (record.kind === "string") {
    return bloomChains([...record.bits].map(Number), epsilons, record.divisor, undefined, record.head,
                       record.output);
  }
  const input = record.kind === "numeric" ? record.z : record.label;
  return record.head === null ? chain(input, epsilons, record.m)
    : extend(input, record.head, record.output, epsilons, record.m);
}

// What the owner typed, checked before anything is sent (the service never sees it).
function readRaw(form, kind, option) {
  const raw = form.elements.raw.value;
  if (kind === "numeric") {
    const text = raw.trim().replace(/[\u2212\u2013]/g, "-");
    const { low, high } = option.dataset;
    if (!text) throw new Error(`Please enter a number between ${low} and ${high}.`);
    try {
      numericThreshold(text, low, high);
    } catch {
      throw new Error(`Please enter a number between ${low} and ${high}, written with the digits 0-9 and a point.`);
    }
    return text;
  }
  if (kind === "string") {
    const text = raw.trim();                  // as the portal's form reads it
    if (!text) throw new Error("Please enter your value.");
    try {
      checkText(text);
    } catch (exc) {
      throw new Error(`${exc.message[0].toUpperCase()}${exc.message.slice(1)}.`);
    }
    return text;
  }
  if (!raw) throw new Error("Please choose your answer.");
  return raw;
}

// This browser's record of a new owner-held value (the API's representation) holding `raw`.
function newRecord(value, raw) {
  const base = { value: value.id, head: null, output: null, pending: null };
  if (value.kind === "numeric") {
    const z = discretize(raw, value.low, value.high);   // once: a second draw would leak more about the number
    return { ...base, kind: "numeric", m: 2, x: raw, z };
  }
  if (value.kind === "string") {
    const bits = bloomBits(value.cohort, raw, value.num_bits, value.num_hashes).join("");
    return { ...base, kind: "string", string: raw, cohort: value.cohort, num_bits: value.num_bits,
             num_hashes: value.num_hashes, divisor: value.draw_divisor, bits };
  }
  const label = value.labels.indexOf(raw);
  if (label < 0) throw new Error("Your answer is not one of this question's labels.");
  return { value: value.id, m: value.m, label, head: null, output: null, pending: null };
}

/**
 * Bring the service's chain of `value` (the API's representation) up to `level` (micro-epsilons) from this
 * browser's record: first any pending upload (confirmed if the service already has it, else sent again), then
 * fresh draws from the head.  Returns the value after the last upload.
 */
async function sync(record, value, level) {
  const same = (a, b) => (a === null || b === null ? a === b : compareEpsilons(a, b) === 0);
  const commit = () => {
    const p = record.pending;
    record.head = p.epsilons[p.epsilons.length - 1];
    record.output = p.outputs[p.outputs.length - 1];
    record.pending = null;
    save(record);
  };
  if (record.pending) {
    const last = record.pending.epsilons[record.pending.epsilons.length - 1];
    if (value.head !== null && same(value.head, last)) {
      commit();
    } else if (same(value.head, record.head)) {
      value = await api("POST", `${API}${record.value}/chain/`, record.pending);
      commit();
    }
  }
  if (!same(value.head, record.head)) {
    throw new Error(`The chain on the service (ε ${value.head}) does not continue the one this browser drew ` +
                    `(ε ${record.head}): was it extended from another device?`);
  }
  const grid = gridOf(value.grid);
  const first = record.head === null ? grid.start : nextPointAfter(grid, toMicro(record.head, "head"));
  const epsilons = pointsUpTo(grid, first, level);
  if (!epsilons.length) return value;
  const outputs = draw(record, epsilons);
  record.pending = { epsilons, outputs };
  save(record);                               // before sending: these draws are never replaced
  value = await api("POST", `${API}${record.value}/chain/`, record.pending);
  commit();
  return value;
}

// ------------------------------------------------------------------ the contribute page

function showError(box, message) {
  box.textContent = "";
  const h = document.createElement("h2");
  h.textContent = "Your value was not contributed";
  const p = document.createElement("p");
  p.textContent = message;
  box.append(h, p);
  box.hidden = false;
  box.focus();
}

function contributePage(option) {
  const form = option.closest("form");
  const box = document.getElementById("keep-on-device");
  const levelField = document.getElementById("field-upload-level");
  const errors = document.getElementById("custody-errors");
  const progress = document.getElementById("custody-progress");
  const { gridStart: start, gridStep: step, gridStop: stop } = option.dataset;
  const grid = gridOf({ start, step, stop });
  option.hidden = false;                      // without this module the option is never offered
  box.addEventListener("change", () => { levelField.hidden = !box.checked; });
  levelField.hidden = !box.checked;

  form.addEventListener("submit", async (event) => {
    if (!box.checked) return;
    event.preventDefault();                   // the raw value is never posted
    const button = form.querySelector("button[type=submit]");
    errors.hidden = true;
    let record = null;
    try {
      const raw = readRaw(form, option.dataset.kind, option);
      if (form.elements.policy.value !== "fixed") {
        throw new Error("Keeping your value on this device needs a fixed ceiling: choose “A fixed ceiling”.");
      }
      const ceilingText = form.elements.ceiling.value.trim();
      const ceiling = toMicro(ceilingText, "The ceiling");
      const levelText = document.getElementById("upload-level").value.trim();
      const level = levelText ? toMicro(levelText, "The upload level") : lastPointUpTo(grid, ceiling);
      if (level < grid.start || level > grid.stop) {
        throw new Error(`The upload level must lie between ε ${fromMicro(grid.start)} and ` +
                        `ε ${fromMicro(grid.stop)}.`);
      }
      button.disabled = true;
      progress.textContent = "Randomizing your value on this device…";
      const value = await api("POST", API, {
        attribute: Number(option.dataset.attribute), custody: "owner", ceiling: ceilingText,
      });
      record = newRecord(value, raw);
      save(record);
      await sync(record, value, level);
      progress.textContent = "Uploaded. Opening your value…";
      window.location.assign(`/portal/values/${value.id}/`);
    } catch (exc) {
      button.disabled = false;
      progress.textContent = "";
      const where = record ? ` Your value was created; its page can upload the chain again.` : "";
      showError(errors, `${exc.message}${where}`);
      if (record) {
        const link = document.createElement("a");
        link.href = `/portal/values/${record.value}/`;
        link.textContent = "Open the value's page";
        errors.append(link);
      }
    }
  });
}

// ------------------------------------------------------------------ the value page

function para(text) {
  const p = document.createElement("p");
  p.textContent = text;
  return p;
}

async function valuePage(section) {
  const id = section.dataset.value;
  const status = document.getElementById("custody-status");
  const button = document.getElementById("extend-now");
  const actions = document.getElementById("extend-actions");   // a button's display ignores [hidden]
  const render = (value) => {
    const record = load(id);
    status.textContent = "";
    actions.hidden = true;
    if (!record) {
      status.append(para(value.needs_upload
        ? `Sales above ε ${value.upload_level ?? 0} wait for the device that holds your value: ` +
          "this browser does not hold it."
        : "This browser does not hold your value: only the device that holds it can extend its chain."));
      return;
    }
    // The service cannot tell which device holds the value (the page says "a device"); this browser can.
    const badge = document.getElementById("custody-badge");
    if (badge) badge.textContent = "Kept on your device (this browser)";
    const target = lastPointUpTo(gridOf(value.grid), toMicro(value.ceiling, "ceiling"));
    if (value.needs_upload || record.pending) {
      status.append(para(`This browser holds your value. The ceiling (ε ${value.ceiling}) is above what it ` +
                         `uploaded (ε ${value.upload_level ?? 0}): extend the chain to ε ${fromMicro(target)} ` +
                         "so that sales can follow."));
      actions.hidden = false;
    } else {
      status.append(para(`This browser holds your value; the chain it uploaded reaches ε ${value.upload_level}, ` +
                         "nothing to upload now."));
    }
  };
  let value;
  try {
    value = await api("GET", `${API}${id}/`);
  } catch (exc) {
    status.textContent = `Could not read this value from the service: ${exc.message}`;
    return;
  }
  render(value);
  button.addEventListener("click", async () => {
    const record = load(id);
    button.disabled = true;
    status.textContent = "Randomizing on this device and uploading…";
    try {
      value = await api("GET", `${API}${id}/`);
      await sync(record, value, lastPointUpTo(gridOf(value.grid), toMicro(value.ceiling, "ceiling")));
      window.location.reload();
    } catch (exc) {
      button.disabled = false;
      status.textContent = `The chain was not extended: ${exc.message}`;
    }
  });
}

const option = document.getElementById("field-keep-on-device");
if (option) contributePage(option);
const section = document.getElementById("owner-custody");
if (section) valuePage(section);
