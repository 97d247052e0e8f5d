// app.js: the agenthold console (docs/console.md).
//
// One page, routed by the URL's fragment: #/ the agents, #/agent/ID one
// agent (terminal, files, activity). Signing in trades the API token for a
// session cookie (POST /api/v1/login): the token is dropped at once, and
// the cookie is HttpOnly, so no script of the page can read it. The page
// keeps only the session's CSRF value, in this module's memory, and sends
// it as X-Agenthold-CSRF on every state-changing request; never in a URL,
// a cookie or the browser's storage. The terminal's WebSocket opens with a
// one-time ticket the API hands out for it. Everything the server or a
// sandbox sends is put on the page as text (textContent), never parsed as
// HTML.

import { Terminal } from "/console/term.js";

const $ = (id) => document.getElementById(id);
const PROGRESS = {
  creating: "Preparing the sandbox…", starting: "Starting the sandbox…", stopping: "Putting the sandbox to sleep…",
  rebuilding: "Rebuilding the sandbox…", destroying: "Removing the sandbox…",
};
const PREVIEW_MAX = 256 * 1024;
const PREVIEW_LINES = 40;
const PREVIEWS_MAX = 24;        // previews in one folder's view
const THUMB_LINES = 8;
const IMAGE = /\.(png|jpe?g|gif|webp)$/i;
let previewsRun = 0;
const LIST_MAX = 500;

let csrf = null;                // the session's CSRF value (null: signed out)
let me = null;                  // GET /api/v1/me
const agents = new Map();       // id -> agent object
let eventsCtl = null;           // the event stream's AbortController
let pollTimer = null;
let view = { name: "signin" };  // { name: "agents" } | { name: "runtimes" } | { name: "admin" } | { name: "agent", id, tab }
let runtimes = [];              // the catalog (GET /api/v1/runtimes)
let runtimesTimer = null;
let dir = ".";                  // the file browser's folder
let socket = null;              // the terminal's WebSocket
let sendKeys = null;
const term = new Terminal($("term"));
const encoder = new TextEncoder();
const eventLog = [];            // recent events, newest first

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function agentPath(id) { return `/api/v1/agents/${encodeURIComponent(id)}`; }
function homePath(path) { return path.split("/").map(encodeURIComponent).join("/"); }
function joinPath(base, name) { return base === "." ? name : `${base}/${name}`; }

async function api(method, path, body, opts = {}) {
  const headers = {};
  if (csrf && method !== "GET" && method !== "HEAD") headers["X-Agenthold-CSRF"] = csrf;
  let payload;
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  }
  const res = await fetch(path, { method, headers, body: payload, cache: "no-store", credentials: "same-origin",
                                  signal: opts.signal });
  if (res.ok && opts.raw) return res;
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  if (!res.ok) {
    const message = (json && json.error) || `HTTP ${res.status}`;
    if (res.status === 401 && csrf && !opts.signingIn) signOut(`Signed out: the server refused the session (${message}).`);
    throw new ApiError(res.status, message);
  }
  return json;
}

function say(id, text, bad = false) {
  const e = $(id);
  e.textContent = text;
  e.classList.toggle("error", bad);
}

// ------------------------------------------------------------------ sign-in

$("signin-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const input = $("token");
  const given = input.value.trim();
  input.value = "";
  say("signin-error", "");
  if (!given) return;
  try {
    me = await api("POST", "/api/v1/login", { token: given }, { signingIn: true });
  } catch (err) {
    say("signin-error", `Sign-in refused: ${err.message}`, true);
    input.focus();
    return;
  }
  signedIn();
});

// A page reloaded within its session: the cookie still stands.
async function resume() {
  try {
    const answer = await api("GET", "/api/v1/login", undefined, { signingIn: true });
    if (!answer.signed_in || csrf) return;
    me = answer;
    signedIn();
  } catch { /* no session: the sign-in form */ }
}

function signedIn() {
  csrf = me.csrf;
  delete me.csrf;
  $("who").textContent = `${me.token}${me.user ? ` (${me.user})` : ""} · ${me.admin ? "admin, every tenant" : `tenant ${me.tenant}`}`;
  $("signout").hidden = false;
  $("nav").hidden = false;
  $("nav-admin").hidden = !me.admin;
  startEvents();
  pollTimer = setInterval(() => { if (csrf) refreshAgents().catch(() => {}); }, 5000);
  loadRuntimes();
  if (!location.hash || location.hash === "#") location.hash = "#/";
  route();
}

$("signout").addEventListener("click", async () => {
  // The server ends the session: the cookie is refused from now on.
  try { await api("POST", "/api/v1/logout", undefined, { signingIn: true }); } catch { /* signed out already */ }
  signOut("");
});

function signOut(message) {
  csrf = null;
  me = null;
  if (eventsCtl) eventsCtl.abort();
  eventsCtl = null;
  clearInterval(pollTimer);
  clearTimeout(runtimesTimer);
  runtimes = [];
  closeTerminal();
  agents.clear();
  eventLog.length = 0;
  // Nothing of the signed-in person stays on the page.
  for (const id of ["agents-body", "files-body", "events", "audit", "crumbs", "preview", "briefing", "runtimes-body", "previews",
                    "tenants-body", "tokens-body", "token-tenant"]) $(id).replaceChildren();
  hideNewToken();
  for (const id of ["agents-status", "agent-summary", "agent-error", "files-status", "term-status", "agent-title",
                    "briefing-status", "admin-status", "runtimes-status", "audit-status"]) say(id, "");
  term.reset();
  $("who").textContent = "";
  $("signout").hidden = true;
  $("nav").hidden = true;
  view = { name: "signin" };
  show("signin");
  say("signin-error", message, Boolean(message));
  $("token").focus();
}

function show(section) {
  for (const id of ["signin", "agents", "allfiles", "runtimes", "admin", "agent"]) $(id).hidden = id !== section;
  if (section !== "admin") hideNewToken();
  for (const [link, page] of [["nav-agents", "agents"], ["nav-files", "allfiles"], ["nav-runtimes", "runtimes"],
                              ["nav-admin", "admin"]]) {
    if (page === section) $(link).setAttribute("aria-current", "page");
    else $(link).removeAttribute("aria-current");
  }
}

// ------------------------------------------------------------------ routing

window.addEventListener("hashchange", route);

function route() {
  if (!csrf) { show("signin"); return; }
  const m = /^#\/agent\/([0-9a-f]{12})(?:\/(terminal|files|log|briefing))?(?:\/(t[0-9a-f]{12}))?$/.exec(location.hash);
  const leaving = view.name === "agent" && (!m || m[1] !== view.id);
  if (leaving) closeTerminal();
  if (location.hash === "#/files") {
    view = { name: "allfiles" };
    show("allfiles");
    loadAllFiles();
    return;
  }
  if (location.hash === "#/runtimes") {
    view = { name: "runtimes" };
    show("runtimes");
    loadRuntimes();
    return;
  }
  if (location.hash === "#/admin") {
    view = { name: "admin" };
    show("admin");
    loadAdmin();
    return;
  }
  if (m) {
    const first = view.name !== "agent" || view.id !== m[1];
    view = { name: "agent", id: m[1], tab: m[2] || (view.id === m[1] ? view.tab : "terminal"),
             term: m[3] || (view.id === m[1] ? view.term : null) };
    if (first) dir = ".";
    show("agent");
    renderAgentPage(first);
  } else {
    view = { name: "agents" };
    show("agents");
    refreshAgents().catch((err) => say("agents-status", err.message, true));
  }
}

// ------------------------------------------------------------------ agents

async function refreshAgents() {
  const { agents: list } = await api("GET", "/api/v1/agents");
  const seen = new Set();
  for (const a of list) { agents.set(a.id, a); seen.add(a.id); }
  for (const id of [...agents.keys()]) if (!seen.has(id)) agents.delete(id);
  render();
}

async function refreshAgent(id) {
  try {
    agents.set(id, await api("GET", agentPath(id)));
  } catch (err) {
    if (err.status === 404) agents.delete(id);
  }
  render();
}

function render() {
  if (view.name === "runtimes") renderRuntimes();
  if (view.name === "agents") renderAgents();
  else if (view.name === "agent") renderAgentPage(false);
}

function sleepsText(a) {
  if (a.state !== "running") return a.state === "sleeping" ? "asleep" : "";
  if (!a.sleeps_at) return "awake";
  const left = Date.parse(a.sleeps_at) - Date.now();
  const why = a.awake_because ? ` (${a.awake_because})` : "";
  if (left <= 0) return `sleeps any moment${why}`;
  const s = Math.ceil(left / 1000);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  // Ticks every second: "sleeps in 14 min 52 s".
  const text = h ? `${h} h ${m} min` : m ? `${m} min ${sec} s` : `${sec} s`;
  return `sleeps in ${text}${why}`;
}

function stateCell(a) {
  const cell = el("td", { class: "state-cell" },
    el("span", { class: `state state-${a.state}`, text: a.state }));
  if (a.progress || PROGRESS[a.state]) cell.append(el("span", { class: "flag", text: a.progress || PROGRESS[a.state] }));
  if (a.state === "error" && a.error) cell.append(el("span", { class: "flag error", text: a.error }));
  if (a.state === "running" && a.connected === false) cell.append(el("span", { class: "flag", text: "sandboxd reconnecting" }));
  if (a.needs_rebuild) cell.append(el("span", { class: "flag", text: "needs a rebuild" }));
  if (a.home_lost) cell.append(el("span", { class: "flag error", text: `home lost: ${a.home_lost}` }));
  return cell;
}

function actionButtons(a) {
  const b = [];
  const busy = Boolean(PROGRESS[a.state]);
  if (a.state === "sleeping" || a.state === "error")
    b.push(el("button", { type: "button", text: "Start", "aria-label": `Start ${a.name}`, onclick: () => act(a, "start") }));
  if (a.state === "running")
    b.push(el("button", { type: "button", text: "Stop", "aria-label": `Stop ${a.name}`, onclick: () => act(a, "stop") }));
  if (!busy)
    b.push(el("button", { type: "button", text: "Rebuild", "aria-label": `Rebuild ${a.name}`, onclick: () => act(a, "rebuild") }));
  if (a.state !== "destroying")
    b.push(el("button", { type: "button", class: "danger", text: "Delete", "aria-label": `Delete ${a.name}`, onclick: () => act(a, "delete") }));
  return b;
}

function renderAgents() {
  const body = $("agents-body");
  const list = [...agents.values()].sort((x, y) => (x.tenant + x.name).localeCompare(y.tenant + y.name));
  const rows = list.map((a) => el("tr", { "data-agent": a.name, "data-id": a.id },
    el("td", {}, el("a", { href: `#/agent/${a.id}`, text: a.name }),
       me && me.admin ? el("span", { class: "badge", text: a.tenant }) : null),
    stateCell(a),
    el("td", { text: a.runtime || a.image || "" }),
    el("td", { text: String(a.cpus ?? "") }),
    el("td", { text: a.memory_mb ? `${a.memory_mb} MB` : "" }),
    el("td", { text: a.last_activity_at ? new Date(a.last_activity_at).toLocaleString() : "" }),
    el("td", { class: "sleeps", "data-id": a.id, text: sleepsText(a) }),
    el("td", { class: "row-actions" }, ...actionButtons(a))));
  body.replaceChildren(...rows);
  $("agents-empty").hidden = list.length > 0;
}

function confirmDialog(text) {
  const d = $("confirm");
  $("confirm-text").textContent = text;
  d.returnValue = "";
  d.showModal();
  $("confirm-yes").focus();
  return new Promise((resolve) => d.addEventListener("close", () => resolve(d.returnValue === "yes"), { once: true }));
}

async function act(a, what) {
  const status = view.name === "agent" ? "agent-summary" : "agents-status";
  if ((what === "delete" || what === "rebuild") &&
      !(await confirmDialog(what === "delete"
        ? `Delete ${a.name}? Its sandbox and its home directory are removed for good.`
        : `Rebuild ${a.name}? Its container is made again from the image; its home stays.`))) return;
  try {
    say(status, `${a.name}: ${what} asked…`);
    const answer = what === "delete" ? await api("DELETE", agentPath(a.id))
                                     : await api("POST", `${agentPath(a.id)}/${what}`);
    if (answer && answer.id) agents.set(answer.id, answer);
    say(status, `${a.name}: ${PROGRESS[answer && answer.state] || (answer ? answer.state : "done")}`);
    render();
  } catch (err) {
    say(status, `${a.name}: ${what} refused: ${err.message}`, true);
  }
}

// Live updates: ticks, and the event stream.
setInterval(() => {
  for (const cell of document.querySelectorAll(".sleeps[data-id]")) {
    const a = agents.get(cell.dataset.id);
    if (!a) continue;
    cell.textContent = sleepsText(a);
    cell.dataset.sleepsAt = a.state === "running" && a.sleeps_at ? a.sleeps_at : "";
  }
}, 1000);

function startEvents() {
  const ctl = new AbortController();
  eventsCtl = ctl;
  (async () => {
    while (csrf && eventsCtl === ctl) {
      try {
        const res = await api("GET", "/api/v1/events", undefined, { raw: true, signal: ctl.signal });
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += decoder.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf("\n")) >= 0) {
            const line = buf.slice(0, i);
            buf = buf.slice(i + 1);
            if (line.startsWith("data:")) {
              try { onEvent(JSON.parse(line.slice(5))); } catch { /* a line that is not JSON: skipped */ }
            }
          }
        }
      } catch (err) {
        if (ctl.signal.aborted || (err instanceof ApiError && err.status === 401)) return;
      }
      await new Promise((r) => setTimeout(r, 2000));
    }
  })();
}

const refreshSoon = new Map();
function onEvent(ev) {
  eventLog.unshift(ev);
  eventLog.length = Math.min(eventLog.length, 200);
  const a = agents.get(ev.agent_id);
  if (ev.state === "destroyed") agents.delete(ev.agent_id);
  else if (a && !ev.message) {
    a.state = ev.state;
    a.error = ev.error;
  }
  const text = `${ev.name}: ${ev.message || PROGRESS[ev.state] || ev.state}`;
  if (ev.message && ev.message.startsWith("Preparing") && !runtimesTimer) runtimesTimer = setTimeout(loadRuntimes, 1000);
  if (view.name === "agents") say("agents-status", text);
  else if (view.name === "agent" && view.id === ev.agent_id) {
    say("agent-summary", text);
    if (ev.message && socket) say("term-status", `${ev.name} is asleep: waking it. ${ev.message}`);
  }
  render();
  // The full object (sleeps_at, last activity) once the change settles.
  clearTimeout(refreshSoon.get(ev.agent_id));
  if (ev.state !== "destroyed")
    refreshSoon.set(ev.agent_id, setTimeout(() => refreshAgent(ev.agent_id), 300));
  else if (view.name === "agent" && view.id === ev.agent_id) location.hash = "#/";
}

// All files (GET /api/v1/files): a table per agent and session, newest
// first; a name opens the agent's files, Download fetches the file.
async function loadAllFiles() {
  const query = [];
  const q = $("allfiles-q").value.trim();
  if (q) query.push(`q=${encodeURIComponent(q)}`);
  if ($("allfiles-uploads").checked) query.push("uploads=true");
  say("allfiles-status", "Reading…");
  let res;
  try {
    res = await api("GET", `/api/v1/files${query.length ? `?${query.join("&")}` : ""}`);
  } catch (err) {
    $("allfiles-groups").replaceChildren();
    say("allfiles-status", err.message, true);
    return;
  }
  if (view.name !== "allfiles") return;
  const when = (t) => new Date(t * 1000).toLocaleString();
  $("allfiles-groups").replaceChildren(...res.groups.map((g) => el("section", { class: "file-group", "data-agent": g.agent },
    el("h2", {}, el("a", { href: `#/agent/${g.agent_id}/files`, text: g.agent }),
       el("span", { class: "badge", text: g.access_label }),
       g.owner_name ? el("span", { class: "flag", text: `owner: ${g.owner_name}` }) : null),
    el("div", { class: "table-wrap" }, el("table", {},
      el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "File" }), el("th", { scope: "col", text: "Size" }),
                      el("th", { scope: "col", text: "Modified" }), el("th", { scope: "col", text: "Actions" }))),
      el("tbody", {}, ...g.files.map((f) => el("tr", { "data-path": f.path },
        el("td", { class: "mono" }, f.path, f.uploaded ? el("span", { class: "badge", text: "uploaded by a person" }) : null),
        el("td", { text: formatSize(f.size) }),
        el("td", { text: when(f.mtime) }),
        el("td", { class: "row-actions" }, el("button", { type: "button", text: "Download",
          "aria-label": `Download ${f.name} of ${g.agent}`, onclick: () => downloadOf(g.agent_id, f.path, f.name) }))))))))));
  const notes = [`${res.count} files in ${res.groups.length} groups`];
  if (res.limit_reached) notes.push(`only the newest ${res.limit} shown`);
  if (res.not_listed.length) notes.push(`not listed: ${res.not_listed.map((n) => `${n.agent} (${n.why})`).join("; ")}`);
  say("allfiles-status", notes.join(" · "), res.incomplete);
}

// A file of an agent saved by the browser; status: where it is said.
async function downloadOf(agentId, path, name, status = "allfiles-status") {
  try {
    say(status, `Downloading ${name}…`);
    const res = await api("GET", `${agentPath(agentId)}/files/${homePath(path)}`, undefined, { raw: true });
    const blob = await res.blob();
    const url = URL.createObjectURL(blob);
    const a = el("a", { href: url, download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    say(status, `Downloaded ${name} (${formatSize(blob.size)}).`);
  } catch (err) {
    say(status, `Download refused: ${err.message}`, true);
  }
}

$("allfiles-form").addEventListener("submit", (e) => { e.preventDefault(); loadAllFiles(); });
$("allfiles-uploads").addEventListener("change", () => loadAllFiles());

// The catalog: the create form's choices, and the runtimes page.
const alias = (rt) => rt.alias || rt.name;
const BUSY_IMAGE = new Set(["checking", "building"]);

async function loadRuntimes() {
  clearTimeout(runtimesTimer);
  runtimesTimer = null;
  try {
    ({ runtimes } = await api("GET", "/api/v1/runtimes"));
  } catch (err) {
    say("runtimes-status", `The catalog could not be read: ${err.message}`, true);
    return;             // no catalog: the server default image
  }
  const select = $("create-runtime");
  const chosen = select.value;
  select.replaceChildren(...runtimes.map((rt) => el("option", { value: alias(rt),
    selected: chosen ? alias(rt) === chosen : rt.default === true,
    text: `${alias(rt)}${rt.default ? " (default)" : ""}` })));
  describeRuntime();
  renderRuntimes();
  // While an image is being checked or built, its progress is followed.
  if (csrf && runtimes.some((rt) => BUSY_IMAGE.has(rt.image_state)))
    runtimesTimer = setTimeout(loadRuntimes, view.name === "runtimes" ? 2000 : 10000);
}

function describeRuntime() {
  const rt = runtimes.find((x) => alias(x) === $("create-runtime").value);
  $("create-runtime-info").textContent = rt ? [rt.description, rt.image_state && `image ${rt.image_state}`,
    rt.progress, rt.image_error].filter(Boolean).join(" · ") : "";
}
$("create-runtime").addEventListener("change", describeRuntime);

function renderRuntimes() {
  if (view.name !== "runtimes") return;
  $("runtimes-body").replaceChildren(...runtimes.map((rt) => {
    const state = el("td", { class: "state-cell" },
      el("span", { class: `state image-${rt.image_state || "unknown"}`, text: rt.image_state || "unknown" }));
    if (rt.progress) state.append(el("span", { class: "flag", text: rt.progress }));
    if (rt.image_error) state.append(el("span", { class: "flag error", text: rt.image_error }));
    return el("tr", { "data-runtime": alias(rt) },
      el("th", { scope: "row" }, alias(rt), rt.default ? el("span", { class: "badge", text: "default" }) : null),
      el("td", { class: "mono", text: rt.image || "" }),
      state,
      el("td", { text: rt.description || "" }));
  }));
  const busy = runtimes.filter((rt) => BUSY_IMAGE.has(rt.image_state)).length;
  say("runtimes-status", `${runtimes.length} runtimes${busy ? ` · ${busy} being prepared` : ""}`);
}

$("create-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const body = { name: $("create-name").value.trim() };
  if ($("create-runtime").value) body.runtime = $("create-runtime").value;
  if ($("create-cpus").value) body.cpus = Number($("create-cpus").value);
  if ($("create-memory").value) body.memory_mb = Number($("create-memory").value);
  try {
    say("agents-status", `${body.name}: ${PROGRESS.creating}`);
    const a = await api("POST", "/api/v1/agents", body);
    agents.set(a.id, a);
    $("create-name").value = "";
    render();
  } catch (err) {
    say("agents-status", `Create refused: ${err.message}`, true);
  }
});

// ------------------------------------------------------------------ admin

function hideNewToken() {
  $("new-token-value").value = "";
  $("new-token-name").textContent = "";
  $("new-token").hidden = true;
}
$("new-token-done").addEventListener("click", () => { hideNewToken(); $("token-tenant").focus(); });

function limitsText(t) {
  const parts = [];
  if (t.max_sandboxes !== null && t.max_sandboxes !== undefined) parts.push(`${t.max_sandboxes} kept`);
  if (t.max_running !== null && t.max_running !== undefined) parts.push(`${t.max_running} running`);
  if (t.max_cpus !== null && t.max_cpus !== undefined) parts.push(`${t.max_cpus} CPUs`);
  if (t.max_memory_mb !== null && t.max_memory_mb !== undefined) parts.push(`${t.max_memory_mb} MB`);
  return parts.length ? parts.join(", ") : "server defaults";
}

function tokenState(t) {
  if (t.revoked_at) return "revoked";
  if (t.expires_at && Date.parse(t.expires_at) <= Date.now()) return "expired";
  return t.expires_at ? `active, expires ${new Date(t.expires_at).toLocaleString()}` : "active";
}

async function loadAdmin() {
  if (!me || !me.admin) {
    say("admin-status", "This page is for an admin token.", true);
    $("tenants-body").replaceChildren();
    $("tokens-body").replaceChildren();
    return;
  }
  let tenants, tokens;
  try {
    [{ tenants }, { tokens }] = await Promise.all([api("GET", "/api/v1/tenants"), api("GET", "/api/v1/tokens")]);
  } catch (err) {
    say("admin-status", err.message, true);
    return;
  }
  if (view.name !== "admin") return;
  $("tenants-body").replaceChildren(...tenants.map((t) => el("tr", { "data-tenant": t.name },
    el("th", { scope: "row", text: t.name }),
    el("td", { text: String(t.sandboxes) }),
    el("td", { text: String(t.running) }),
    el("td", { text: String(t.tokens) }),
    el("td", { text: limitsText(t) }),
    el("td", { class: "row-actions" }, t.name === "default" ? null
      : el("button", { type: "button", class: "danger", text: "Delete", "aria-label": `Delete tenant ${t.name}`,
                       onclick: () => deleteTenant(t) })))));
  const select = $("token-tenant");
  const chosen = select.value;
  select.replaceChildren(...tenants.map((t) => el("option", { value: t.name, text: `tenant ${t.name}`,
                                                              selected: t.name === chosen })),
                         el("option", { value: "*admin", text: "an admin (every tenant)", selected: chosen === "*admin" }));
  $("tokens-body").replaceChildren(...tokens.map((t) => {
    const state = tokenState(t);
    return el("tr", { "data-token": t.name, "data-state": state.split(",")[0] },
      el("th", { scope: "row" }, t.name, t.admin ? el("span", { class: "badge", text: "admin" }) : null,
         me.token === t.name ? el("span", { class: "badge", text: "this session's" }) : null),
      el("td", { text: t.tenant || "every tenant" }),
      el("td", { text: t.user || "" }),
      el("td", { text: t.last_used_at ? new Date(t.last_used_at).toLocaleString() : "never" }),
      el("td", { text: state }),
      el("td", { class: "row-actions" }, state.startsWith("active") && me.token !== t.name
        ? el("button", { type: "button", class: "danger", text: "Revoke", "aria-label": `Revoke token ${t.name}`,
                         onclick: () => revokeToken(t) }) : null));
  }));
  say("admin-status", `${tenants.length} tenants · ${tokens.filter((t) => tokenState(t).startsWith("active")).length} active tokens`);
}

// Asked first, then done: the outcome said on the admin page.
async function adminAct(question, method, path, done) {
  if (!(await confirmDialog(question))) return;
  try {
    await api(method, path);
    say("admin-status", done);
  } catch (err) {
    say("admin-status", `Refused: ${err.message}`, true);
    return;
  }
  loadAdmin();
}

function deleteTenant(t) {
  return adminAct(`Delete tenant ${t.name}? Its tokens are revoked and its sessions removed.`
                  + (t.sandboxes ? ` It still holds ${t.sandboxes} agents: the server refuses until they are gone.` : ""),
                  "DELETE", `/api/v1/tenants/${encodeURIComponent(t.name)}`, `Tenant ${t.name} deleted.`);
}

function revokeToken(t) {
  return adminAct(`Revoke token ${t.name}? Whoever uses it is refused from now on, and its console sessions end.`,
                  "DELETE", `/api/v1/tokens/${encodeURIComponent(t.name)}`, `Token ${t.name} revoked.`);
}

$("tenant-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const body = { name: $("tenant-name").value.trim() };
  if ($("tenant-max-sandboxes").value) body.max_sandboxes = Number($("tenant-max-sandboxes").value);
  if ($("tenant-max-running").value) body.max_running = Number($("tenant-max-running").value);
  try {
    await api("POST", "/api/v1/tenants", body);
    for (const id of ["tenant-name", "tenant-max-sandboxes", "tenant-max-running"]) $(id).value = "";
    say("admin-status", `Tenant ${body.name} created.`);
  } catch (err) {
    say("admin-status", `Create refused: ${err.message}`, true);
    return;
  }
  loadAdmin();
});

$("token-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const target = $("token-tenant").value;
  const body = target === "*admin" ? { admin: true } : { tenant: target };
  for (const [field, id] of [["name", "token-name"], ["user", "token-user"], ["expires", "token-expires"]]) {
    const v = $(id).value.trim();
    if (v) body[field] = v;
  }
  let made;
  try {
    made = await api("POST", "/api/v1/tokens", body);
  } catch (err) {
    say("admin-status", `Create refused: ${err.message}`, true);
    return;
  }
  for (const id of ["token-name", "token-user", "token-expires"]) $(id).value = "";
  // Shown this once: the page keeps it nowhere else, and hides it on Done
  // or on leaving the page.
  $("new-token-name").textContent = made.name;
  $("new-token-value").value = made.token;
  $("new-token").hidden = false;
  $("new-token-value").focus();
  $("new-token-value").select();
  say("admin-status", `Token ${made.name} created.`);
  loadAdmin();
});

// ------------------------------------------------------------------ one agent

function renderAgentPage(first) {
  const a = agents.get(view.id);
  if (!a) {
    if (first) refreshAgent(view.id);
    $("agent-title").textContent = view.id;
    return;
  }
  $("agent-title").textContent = a.name;
  const parts = [a.state, a.runtime ? `runtime ${a.runtime}` : a.image, `${a.cpus} CPUs`, `${a.memory_mb} MB`, sleepsText(a)].filter(Boolean);
  if (first || !$("agent-summary").textContent) say("agent-summary", parts.join(" · "));
  $("agent-summary").dataset.state = a.state;
  say("agent-error", a.state === "error" && a.error ? a.error : "", true);
  $("agent-actions").replaceChildren(...actionButtons(a),
    el("span", { class: "sleeps", "data-id": a.id, text: sleepsText(a) }));
  for (const tab of ["terminal", "files", "log", "briefing"]) {
    $(`tab-${tab}`).setAttribute("aria-selected", String(view.tab === tab));
    $(`pane-${tab}`).hidden = view.tab !== tab;
  }
  if (first || view.shown !== view.tab) {
    view.shown = view.tab;
    if (view.tab === "terminal" && !socket) terminalOffer(a);
    if (view.tab === "files") loadFiles();
    if (view.tab === "log") loadLog();
    if (view.tab === "briefing") loadBriefing();
  }
}

for (const tab of ["terminal", "files", "log", "briefing"])
  $(`tab-${tab}`).addEventListener("click", () => { location.hash = `#/agent/${view.id}/${tab}`; });

// Terminal

function terminalOffer(a) {
  $("term-reconnect").hidden = false;
  if (a.state === "running") openTerminal();
  else {
    $("term-reconnect").textContent = "Open the terminal";
    say("term-status", `${a.name} is ${a.state}: opening the terminal wakes it.`);
  }
}

$("term-reconnect").addEventListener("click", () => openTerminal());

function closeTerminal() {
  if (socket) {
    const s = socket;
    socket = null;
    s.close(1000, "closed by the page");
  }
  sendKeys = null;
}

term.onData((s) => { if (sendKeys) sendKeys(s); });

// The terminal lasts (docs/api.md "Terminals that last"): the one the
// URL names (#/agent/ID/terminal/TID, so a reload reattaches to it and
// gets its screen), else this agent's newest console terminal that still
// runs, else a new one. Leaving the page does not end it.
async function consoleTerminal(id, cols, rows) {
  const { terminals } = await api("GET", `${agentPath(id)}/terminals`);
  const live = terminals.filter((t) => !["exited", "ended"].includes(t.state));
  if (view.term && live.some((t) => t.id === view.term)) return view.term;
  const mine = live.filter((t) => t.title === "console");
  if (mine.length) return mine[0].id;
  const made = await api("POST", `${agentPath(id)}/terminals`, { cols, rows, title: "console" });
  return made.id;
}

let opening = 0;                // the latest openTerminal call
async function openTerminal() {
  closeTerminal();
  const mine = ++opening;
  const id = view.id;
  const a = agents.get(id);
  $("term-reconnect").hidden = true;
  term.reset();
  const { cols, rows } = term.fit();
  term.resize(cols, rows);
  let ticket, tid;
  // A terminal made or attached on an agent that is not running wakes it
  // (the POST waits for it): say so before, not once the socket opens.
  const waking = a && a.state !== "running";
  say("term-status", waking ? `${a.name} is ${a.state}: waking it…` : "Connecting…");
  try {
    tid = await consoleTerminal(id, cols, rows);
    ({ ticket } = await api("POST", `${agentPath(id)}/terminal/ticket`));
    if (mine !== opening || view.id !== id) return;
    view.term = tid;
    history.replaceState(null, "", `#/agent/${id}/terminal/${tid}`);
  } catch (err) {
    say("term-status", `The terminal could not open: ${err.message}`, true);
    $("term-reconnect").hidden = false;
    return;
  }
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${scheme}//${location.host}/console/terminal/${id}?ticket=${encodeURIComponent(ticket)}&terminal=${tid}&cols=${cols}&rows=${rows}`);
  ws.binaryType = "arraybuffer";
  socket = ws;
  ws.addEventListener("open", () => {
    if (socket !== ws) return;
    if (!waking) say("term-status", "Connected.");
    sendKeys = (s) => { if (ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(s)); };
    term.focus();
  });
  let first = true;
  ws.addEventListener("message", (e) => {
    if (first) { first = false; say("term-status", "Connected."); }
    term.write(typeof e.data === "string" ? e.data : new Uint8Array(e.data));
  });
  ws.addEventListener("close", (e) => {
    if (socket !== ws) return;
    socket = null;
    sendKeys = null;
    if (e.code === 1000 || e.code === 1011) view.term = null;   // it ended: Reconnect makes another
    say("term-status", e.code === 1000 ? `The terminal closed: ${e.reason || "the shell ended"}.`
                                       : `The connection dropped (${e.code}${e.reason ? `: ${e.reason}` : ""}).`, e.code !== 1000);
    $("term-reconnect").textContent = "Reconnect";
    $("term-reconnect").hidden = false;
  });
}

let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => {
    if (!socket) return;
    const { cols, rows } = term.fit();
    if (cols === term.cols && rows === term.rows) return;
    term.resize(cols, rows);
    if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ cols, rows }));
  }, 150);
});

// Files

function fileUrl(path) { return `${agentPath(view.id)}/files/${homePath(path)}`; }

// The folder comes from the tree (GET .../tree?path=DIR): its own entries
// (depth 1) are the rows, the levels below count what each folder holds.
// The tree reads the home directly, so a sleeping agent is not woken.
async function loadFiles() {
  const id = view.id;
  renderCrumbs();
  $("preview").hidden = true;
  say("files-status", "Reading…");
  const showAll = $("show-toolchain").checked;
  const query = [dir !== "." ? `path=${encodeURIComponent(dir)}` : null, showAll ? "all=true" : null].filter(Boolean);
  let tree;
  try {
    tree = await api("GET", `${agentPath(id)}/tree${query.length ? `?${query.join("&")}` : ""}`);
  } catch (err) {
    $("files-body").replaceChildren();
    $("previews").replaceChildren();
    say("files-status", err.message, true);
    return;
  }
  if (view.id !== id) return;
  const below = new Map();       // a folder's path -> entries found under it
  for (const e of tree.entries) {
    if (e.depth < 2) continue;
    const top = e.path.split("/").slice(0, dir === "." ? 1 : dir.split("/").length + 1).join("/");
    below.set(top, (below.get(top) || 0) + 1);
  }
  let entries = tree.entries.filter((e) => e.depth === 1);
  entries.sort((x, y) => (x.type === "dir") === (y.type === "dir") ? x.name.localeCompare(y.name) : x.type === "dir" ? -1 : 1);
  const over = entries.length > LIST_MAX;
  entries = entries.slice(0, LIST_MAX);
  const rows = entries.map((e) => {
    const path = e.path || joinPath(dir, e.name);
    const uploaded = e.uploaded || path === "uploads" || path.startsWith("uploads/");
    const name = e.type === "dir"
      ? el("button", { type: "button", class: "link", text: `${e.name}/`, "aria-label": `Open folder ${e.name}`,
                       onclick: () => { dir = path; loadFiles(); } })
      : el("button", { type: "button", class: "link", text: e.name, "aria-label": `Preview ${e.name}`,
                       onclick: () => preview(path, e) });
    const actions = [];
    if (e.type === "file")
      actions.push(el("button", { type: "button", text: "Download", "aria-label": `Download ${e.name}`, onclick: () => download(path, e.name) }));
    actions.push(el("button", { type: "button", class: "danger", text: "Delete", "aria-label": `Delete ${e.name}`,
                               onclick: () => removeFile(path, e) }));
    const size = e.type === "dir" ? (below.has(path) ? `${below.get(path)} inside` : "") : e.type === "link" ? "link" : formatSize(e.size);
    return el("tr", { "data-name": e.name, "data-type": e.type },
      el("td", {}, name, uploaded ? el("span", { class: "badge", text: "uploaded by a person" }) : null),
      el("td", { text: size }),
      el("td", { text: e.mtime ? new Date(typeof e.mtime === "number" ? e.mtime * 1000 : e.mtime).toLocaleString() : "" }),
      el("td", { class: "row-actions" }, ...actions));
  });
  $("files-body").replaceChildren(...rows);
  // What was left out, and the tree's limits when it hit them.
  const notes = [`${entries.length} entries`];
  if (!showAll) notes.push("toolchain folders (.venv, node_modules, .git…) hidden");
  if (over) notes.push(`only the first ${LIST_MAX} shown`);
  if (tree.depth_limit_reached) notes.push(`folders more than ${tree.max_depth} levels down were not opened (their counts are short)`);
  if (tree.entries_limit_reached) notes.push(`the listing stopped at ${tree.max_entries} entries: some are not shown or counted`);
  if (tree.skipped && tree.skipped.length)
    notes.push(`${tree.skipped.length} folders could not be read (${tree.skipped.slice(0, 3).map((k) => `${k.path}: ${k.error}`).join("; ")})`);
  say("files-status", notes.join(" · "), Boolean(tree.incomplete));
  loadPreviews(id, entries);
}

// Previews of the folder's files: images and the first lines of text
// files, at most PREVIEWS_MAX of them, each at most PREVIEW_MAX bytes.
async function loadPreviews(id, entries) {
  const box = $("previews");
  box.replaceChildren();
  if (!$("show-previews").checked) return;
  const files = entries.filter((e) => e.type === "file" && e.size > 0 && e.size <= PREVIEW_MAX);
  const shown = files.slice(0, PREVIEWS_MAX);
  const mine = ++previewsRun;
  for (const e of shown) {
    const path = e.path || joinPath(dir, e.name);
    let blob;
    try { blob = await fetchFile(path); } catch { continue; }
    if (mine !== previewsRun || view.id !== id) return;
    const figure = el("figure", { class: "thumb", "data-name": e.name });
    if (IMAGE.test(e.name)) {
      const url = URL.createObjectURL(blob);
      const img = el("img", { alt: `preview of ${e.name}`, src: url });
      img.addEventListener("load", () => URL.revokeObjectURL(url), { once: true });
      figure.append(img);
    } else {
      const bytes = new Uint8Array(await blob.slice(0, 4096).arrayBuffer());
      if (bytes.includes(0)) continue;                 // not text
      const text = new TextDecoder("utf-8").decode(await blob.arrayBuffer());
      figure.append(el("pre", { text: text.split("\n").slice(0, THUMB_LINES).join("\n") }));
    }
    figure.append(el("figcaption", { text: e.name }));
    box.append(figure);
  }
  if (files.length > PREVIEWS_MAX && mine === previewsRun)
    box.append(el("p", { class: "hint", text: `Previews of the first ${PREVIEWS_MAX} files of ${files.length} that could have one.` }));
}

$("show-toolchain").addEventListener("change", () => loadFiles());
$("show-previews").addEventListener("change", () => loadFiles());

function renderCrumbs() {
  const parts = dir === "." ? [] : dir.split("/");
  const crumbs = [el("button", { type: "button", text: "home", onclick: () => { dir = "."; loadFiles(); } })];
  parts.forEach((p, i) => {
    crumbs.push(" / ", el("button", { type: "button", text: p, onclick: () => { dir = parts.slice(0, i + 1).join("/"); loadFiles(); } }));
  });
  $("crumbs").replaceChildren(...crumbs);
}

function formatSize(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1 << 30) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  return `${(n / (1 << 30)).toFixed(2)} GiB`;
}

async function fetchFile(path) {
  const res = await api("GET", fileUrl(path), undefined, { raw: true });
  return res.blob();
}

function download(path, name) { return downloadOf(view.id, path, name, "files-status"); }

async function preview(path, e) {
  const box = $("preview");
  box.hidden = false;
  box.replaceChildren(el("p", { text: `${path}: ${formatSize(e.size)}` }));
  if (e.size > PREVIEW_MAX) {
    box.append(el("p", { text: "Too large to preview here: download it." }));
    return;
  }
  try {
    const blob = await fetchFile(path);
    if (IMAGE.test(path)) {
      const url = URL.createObjectURL(blob);
      const img = el("img", { alt: `preview of ${path}`, src: url });
      img.addEventListener("load", () => URL.revokeObjectURL(url), { once: true });
      box.append(img);
    } else {
      const text = new TextDecoder("utf-8").decode(await blob.arrayBuffer());
      const lines = text.split("\n");
      box.append(el("pre", { text: lines.slice(0, PREVIEW_LINES).join("\n") }));
      if (lines.length > PREVIEW_LINES) box.append(el("p", { text: `… ${lines.length - PREVIEW_LINES} more lines` }));
    }
  } catch (err) {
    box.append(el("p", { class: "error", text: err.message }));
  }
}

async function removeFile(path, e) {
  if (!(await confirmDialog(`Delete ${path}${e.type === "dir" ? " and everything in it" : ""}?`))) return;
  try {
    await api("DELETE", `${fileUrl(path)}${e.type === "dir" ? "?recursive=1" : ""}`);
    say("files-status", `Deleted ${path}.`);
    loadFiles();
  } catch (err) {
    say("files-status", `Delete refused: ${err.message}`, true);
  }
}

$("mkdir-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const name = $("mkdir-name").value.trim();
  if (!name || name.includes("/") || name === "." || name === "..") {
    say("files-status", "A folder name is one path component (no '/', '.' or '..').", true);
    return;
  }
  try {
    await api("POST", `${fileUrl(joinPath(dir, name))}?op=mkdir`);
    $("mkdir-name").value = "";
    loadFiles();
  } catch (err) {
    say("files-status", `New folder refused: ${err.message}`, true);
  }
});

function uploadOne(file) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", fileUrl(joinPath(dir, file.name)));
    xhr.setRequestHeader("X-Agenthold-CSRF", csrf);
    xhr.upload.addEventListener("progress", (e) => {
      if (e.lengthComputable) say("files-status", `Uploading ${file.name}: ${Math.floor((100 * e.loaded) / e.total)}%`);
    });
    xhr.addEventListener("load", () => {
      if (xhr.status >= 200 && xhr.status < 300) resolve();
      else {
        let message = `HTTP ${xhr.status}`;
        try { message = JSON.parse(xhr.responseText).error || message; } catch { /* not JSON */ }
        reject(new Error(message));
      }
    });
    xhr.addEventListener("error", () => reject(new Error("the connection failed")));
    xhr.send(file);
  });
}

async function upload(files) {
  for (const file of files) {
    if (file.name.includes("/") || file.name === "." || file.name === "..") continue;
    try {
      await uploadOne(file);
      say("files-status", `Uploaded ${file.name} (${formatSize(file.size)}).`);
    } catch (err) {
      say("files-status", `Upload of ${file.name} refused: ${err.message}`, true);
      return;
    }
  }
  await loadFiles();
  say("files-status", `Uploaded ${[...files].map((f) => f.name).join(", ")}.`);
}

$("upload").addEventListener("change", (e) => {
  const files = [...e.target.files];
  e.target.value = "";
  if (files.length) upload(files);
});
const drop = $("drop");
drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  if (e.dataTransfer && e.dataTransfer.files.length) upload([...e.dataTransfer.files]);
});

// Activity

const AUDIT_PAGE = 50;
let auditNext = null;           // the next page's "before", or null

async function loadLog() {
  const id = view.id;
  $("events").replaceChildren(...eventLog.filter((e) => e.agent_id === id).slice(0, 50)
    .map((e) => el("li", { text: `${e.at} ${e.message || e.state}${e.error ? `: ${e.error}` : ""}` })));
  await loadAudit(false);
}

// The audit trail through the operations API's own filters; "Older" pages on.
async function loadAudit(more) {
  const id = view.id;
  const q = [`limit=${AUDIT_PAGE}`];
  const kind = $("audit-kind").value, text = $("audit-q").value.trim(), run = $("audit-run").value.trim();
  if (kind) q.push(`operation=${encodeURIComponent(kind)}`);
  if ($("audit-failed").checked) q.push("failed=1");
  if (text) q.push(`q=${encodeURIComponent(text)}`);
  if (run) q.push(`run=${encodeURIComponent(run)}`);
  if (more && auditNext) q.push(`before=${encodeURIComponent(auditNext)}`);
  say("audit-status", "Reading…");
  let answer;
  try {
    answer = await api("GET", `${agentPath(id)}/operations?${q.join("&")}`);
  } catch (err) {
    if (!more) $("audit").replaceChildren();
    $("audit-older").hidden = true;
    say("audit-status", err.message, true);
    return;
  }
  if (view.id !== id) return;
  const items = answer.operations.map((op) => el("li", {
    class: op.ok ? "" : "error", "data-kind": op.kind,
    text: `${op.at} ${op.actor} ${op.kind}${op.detail ? ` ${op.detail}` : ""}${op.run ? ` [run ${op.run}]` : ""}`
      + `${op.ok ? "" : ` failed: ${op.error || ""}`}`,
  }));
  if (more) $("audit").append(...items);
  else $("audit").replaceChildren(...items);
  auditNext = answer.next;
  $("audit-older").hidden = !auditNext;
  const count = $("audit").children.length;
  say("audit-status", count ? `${count} operations${auditNext ? " (older ones: Older)" : ""}` : "No operation matches.");
}

$("audit-form").addEventListener("submit", (e) => { e.preventDefault(); loadAudit(false); });
$("audit-older").addEventListener("click", () => loadAudit(true));

// Briefing: what the agent is told about its runtime.
async function loadBriefing() {
  const id = view.id;
  say("briefing-status", "Reading…");
  try {
    const answer = await api("GET", `${agentPath(id)}/briefing`);
    if (view.id !== id) return;
    $("briefing").textContent = answer.text || "";
    say("briefing-status", answer.runtime ? `The briefing of runtime ${answer.runtime}:` : "");
  } catch (err) {
    $("briefing").textContent = "";
    say("briefing-status", err.message, err.status !== 404);
  }
}

show("signin");
$("token").focus();
resume();
