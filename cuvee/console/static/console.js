// The Cuvee console: a page of the controller that calls the controller's REST API (docs/console.md).
// Views by URL hash: #/query, #/tables, #/tables/<table>, #/tables/<table>/segments/<segment>.
// Data never becomes markup: every value is set with textContent.
"use strict";

const AUTH_KEY = "cuvee.authorization";
const USER_KEY = "cuvee.user";
const SQL_KEY = "cuvee.sql";
const REFRESH_MS = 5000;
const MAX_ROWS_SHOWN = 1000;
const NUMERIC = new Set(["INT", "LONG", "FLOAT", "DOUBLE", "BIG_DECIMAL", "TIMESTAMP"]);

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// ---- HTTP and login --------------------------------------------------------------------------------------

let loginPending = null;

async function call(method, path, body, authorization) {
  const headers = { Accept: "application/json", "X-Requested-With": "XMLHttpRequest" };
  if (authorization) headers.Authorization = authorization;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let doc = null;
  try { doc = await response.json(); } catch (_) { doc = null; }
  return { status: response.status, doc };
}

async function api(method, path, body) {
  for (;;) {
    const { status, doc } = await call(method, path, body, sessionStorage.getItem(AUTH_KEY));
    if (status === 401) {
      await login();
      continue;
    }
    if (status >= 400) {
      const message = (doc && (doc.error || doc.message)) || `HTTP ${status}`;
      throw new ApiError(status, message);
    }
    return doc;
  }
}

function basic(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return "Basic " + btoa(binary);
}

// Shows the login dialog; resolves once credentials the controller accepts were typed (one dialog for any
// number of calls that were refused at once).
function login() {
  if (loginPending) return loginPending;
  loginPending = new Promise((resolve) => {
    const dialog = document.getElementById("login");
    const form = document.getElementById("login-form");
    const error = document.getElementById("login-error");
    error.hidden = true;
    form.onsubmit = async (event) => {
      event.preventDefault();
      const user = document.getElementById("login-user").value;
      const authorization = basic(user, document.getElementById("login-password").value);
      const { status } = await call("GET", "/tables", undefined, authorization);
      if (status === 401 || status >= 300) {
        error.textContent = status === 401 ? "Wrong user name or password."
                                           : `The controller answered HTTP ${status}; try again.`;
        error.hidden = false;
        return;
      }
      sessionStorage.setItem(AUTH_KEY, authorization);
      sessionStorage.setItem(USER_KEY, user);
      document.getElementById("login-password").value = "";
      dialog.close();
      showUser();
      loginPending = null;
      resolve();
    };
    dialog.addEventListener("cancel", (event) => event.preventDefault());  // no way around it but logging in
    if (!dialog.open) dialog.showModal();
  });
  return loginPending;
}

function showUser() {
  const user = sessionStorage.getItem(USER_KEY);
  document.getElementById("who").textContent = user ? `signed in as ${user}` : "";
  document.getElementById("logout").hidden = !user;
}

// ---- small DOM helpers -----------------------------------------------------------------------------------

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "dataset") Object.assign(node.dataset, value);
    else node[key] = value;
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function text(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function badge(word, prefix) {
  return el("span", { className: `badge ${prefix}-${word}`, textContent: word || "?" });
}

function grid(columns, rows, { numeric = new Set(), id } = {}) {
  const table = el("table", { className: "grid" });
  if (id) table.id = id;
  table.append(el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", { textContent: c })))));
  const body = el("tbody");
  for (const row of rows) {
    body.append(el("tr", {}, ...row.map((cell, i) => {
      const td = el("td", { className: numeric.has(i) ? "num" : "" });
      if (cell instanceof Node) td.append(cell); else td.textContent = text(cell);
      return td;
    })));
  }
  table.append(body);
  return table;
}

function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${i ? v.toFixed(1) : v} ${units[i]}`;
}

function when(ms) {
  return ms ? new Date(ms).toLocaleString() : "";
}

function showError(container, err) {
  container.replaceChildren(el("div", { className: "error", textContent: err.message || String(err) }));
}

function path(...parts) {
  return "/" + parts.map((p) => encodeURIComponent(p)).join("/");
}

// ---- views ------------------------------------------------------------------------------------------------

let refreshTimer = null;
const view = () => document.getElementById("view");

function mount(templateId) {
  const content = document.getElementById(templateId).content.cloneNode(true);
  view().replaceChildren(content);
}

function queryView() {
  mount("query-view");
  const sql = document.getElementById("sql");
  sql.value = sessionStorage.getItem(SQL_KEY) || "";
  const run = document.getElementById("run");
  const chart = document.getElementById("show-chart");
  let last = null;
  const draw = () => drawChart(last, chart.checked);
  run.onclick = async () => {
    sessionStorage.setItem(SQL_KEY, sql.value);
    run.disabled = true;
    document.getElementById("query-stats").textContent = "running…";
    try {
      last = await api("POST", "/sql", { sql: sql.value });
      showResult(last);
      draw();
    } catch (err) {
      last = null;
      document.getElementById("query-stats").textContent = "";
      const box = document.getElementById("query-error");
      box.textContent = err.message;
      box.hidden = false;
      document.getElementById("query-result").replaceChildren();
      draw();
    } finally {
      run.disabled = false;
    }
  };
  chart.onchange = draw;
  sql.onkeydown = (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); run.click(); }
  };
}

function showResult(answer) {
  const box = document.getElementById("query-error");
  const problems = (answer.exceptions || []).map((e) => `${e.errorCode}: ${e.message}`);
  box.textContent = problems.join("\n");
  box.hidden = problems.length === 0;
  const table = answer.resultTable;
  const stats = [];
  if (table) stats.push(`${table.rows.length} row(s)`);
  if (answer.timeUsedMs !== undefined) stats.push(`${answer.timeUsedMs} ms`);
  if (answer.numDocsScanned !== undefined) stats.push(`${answer.numDocsScanned} docs scanned of ${answer.totalDocs}`);
  if (answer.partialResult) stats.push("partial result");
  document.getElementById("query-stats").textContent = stats.join(" · ");
  const result = document.getElementById("query-result");
  if (!table) { result.replaceChildren(); return; }
  const types = table.dataSchema.columnDataTypes || [];
  const numeric = new Set(types.map((t, i) => (NUMERIC.has(t) ? i : -1)).filter((i) => i >= 0));
  const rows = table.rows.slice(0, MAX_ROWS_SHOWN);
  result.replaceChildren(grid(table.dataSchema.columnNames, rows, { numeric, id: "result-table" }));
  if (table.rows.length > rows.length) {
    result.append(el("p", { className: "muted", textContent: `showing the first ${rows.length} rows` }));
  }
}

function drawChart(answer, wanted) {
  const box = document.getElementById("query-chart");
  const table = answer && answer.resultTable;
  box.hidden = !wanted || !table || !table.rows.length;
  if (box.hidden) return;
  const types = table.dataSchema.columnDataTypes || [];
  const names = table.dataSchema.columnNames;
  let y = types.findIndex((t, i) => i > 0 && NUMERIC.has(t));
  if (y < 0 && NUMERIC.has(types[0])) y = 0;
  if (y < 0) {
    box.replaceChildren(el("p", { className: "muted", textContent: "No numeric column to chart." }));
    return;
  }
  const labels = y === 0 ? table.rows.map((_, i) => i + 1) : table.rows.map((r) => r[0]);
  const values = table.rows.map((r) => Number(r[y]) || 0);
  window.CuveeCharts.seriesChart(box, labels, values, { yLabel: names[y], xNumeric: y !== 0 && NUMERIC.has(types[0]) });
}

async function tablesView() {
  mount("tables-view");
  const body = document.querySelector("#tables tbody");
  try {
    const { tables } = await api("GET", "/tables");
    if (!tables.length) {
      body.replaceChildren(el("tr", {}, el("td", { colSpan: 4, className: "muted",
                                                    textContent: "No table yet: POST /schemas and /tables." })));
      return;
    }
    body.replaceChildren(...tables.map((name) => {
      const row = el("tr", { dataset: { table: name } },
        el("td", {}, el("a", { href: `#/tables/${encodeURIComponent(name)}`, textContent: name })),
        el("td"), el("td", { className: "num" }), el("td"));
      fillTableRow(name, row);
      return row;
    }));
  } catch (err) {
    showError(body.parentElement.parentElement, err);
  }
}

async function fillTableRow(name, row) {
  const cells = row.children;
  try {
    const segments = await api("GET", path("segments", name));
    cells[1].textContent = segments.map((s) => Object.keys(s)[0]).join(", ");
    cells[2].textContent = segments.reduce((n, s) => n + Object.values(s)[0].length, 0);
    if (cells[1].textContent.includes("REALTIME")) {
      const status = await api("GET", path("tables", name, "status"));
      cells[3].replaceChildren(badge(status.health, "health"));
    }
  } catch (err) {
    cells[3].textContent = err.message;
  }
}

async function tableView(name) {
  mount("table-view");
  document.getElementById("table-name").textContent = name;
  let realtime = false;
  try {
    const [config, schema] = await Promise.all([api("GET", path("tables", name)),
                                                api("GET", path("tables", name, "schema")).catch((e) => ({ error: e.message }))]);
    realtime = "REALTIME" in config;
    document.getElementById("table-config").textContent = JSON.stringify(config, null, 2);
    document.getElementById("table-schema").textContent = JSON.stringify(schema, null, 2);
  } catch (err) {
    showError(view(), err);
    return;
  }
  for (const button of document.querySelectorAll("#table-actions button")) {
    button.disabled = !realtime;
    button.onclick = () => act(name, button.dataset.action);
  }
  if (!realtime) {
    document.getElementById("table-status").textContent = "An offline table: no consumption.";
  }
  const refresh = async () => {
    await Promise.all([realtime ? showStatus(name) : null, realtime ? showConsuming(name) : null, showSegments(name)]);
  };
  await refresh();
  refreshTimer = setInterval(refresh, REFRESH_MS);
}

async function act(name, action) {
  const out = document.getElementById("action-result");
  out.textContent = `${action}…`;
  try {
    const answer = await api("POST", path("tables", name, action));
    out.textContent = `${action}: done` + (answer && answer.repairs ? ` (${answer.repairs.length} repair(s))` : "");
    out.dataset.done = action;
  } catch (err) {
    out.textContent = `${action} failed: ${err.message}`;
  }
}

async function showStatus(name) {
  const box = document.getElementById("table-status");
  try {
    const status = await api("GET", path("tables", name, "status"));
    const health = document.getElementById("table-health");
    health.replaceWith(Object.assign(badge(status.health, "health"), { id: "table-health" }));
    const rows = status.partitions.map((p) => {
      const consuming = (p.consuming || []).map((r) =>
        `${r.server}: ${r.state} @${text(r.currentOffset)} lag ${text(r.recordsLag)}` +
        (r.rowsPerSecond ? ` ${r.rowsPerSecond.toFixed(1)} rows/s` : "") + (r.error ? ` error: ${r.error}` : ""));
      const latest = p.segments.length ? p.segments[p.segments.length - 1] : null;
      return [p.partition, badge(p.health, "health"), latest ? latest.segmentName : "", text(p.latestStatus),
              text(p.latestUpstreamOffset), el("div", {}, ...consuming.map((line) => el("div", { textContent: line })))];
    });
    const parts = [grid(["Partition", "Health", "Latest segment", "Its status", "Stream offset", "Consuming replicas"],
                        rows, { numeric: new Set([0, 4]), id: "status-table" })];
    const lost = status.dataLost || {};
    const notes = [];
    if (status.paused) notes.push("Consumption is paused.");
    if (lost.offsetsSkippedByRepair) notes.push(`${lost.offsetsSkippedByRepair} offsets skipped by repair (retention).`);
    if (lost.messagesLostByConsumingReplicas) notes.push(`${lost.messagesLostByConsumingReplicas} messages lost by consuming replicas.`);
    if (status.streamError) notes.push(`Stream: ${status.streamError}`);
    if (status.repair && status.repair.last_error) notes.push(`Last repair error: ${status.repair.last_error}`);
    for (const p of status.partitions) for (const problem of p.problems || []) notes.push(`Partition ${p.partition}: ${problem}`);
    for (const note of notes) parts.push(el("p", { className: "muted", textContent: note }));
    box.replaceChildren(...parts);
  } catch (err) {
    showError(box, err);
  }
}

async function showConsuming(name) {
  const box = document.getElementById("table-consuming");
  try {
    const info = await api("GET", path("tables", name, "consumingSegmentsInfo"));
    const rows = [];
    for (const [segment, replicas] of Object.entries(info._segmentToConsumingInfoMap || {})) {
      for (const r of replicas) {
        rows.push([segment, r.serverName, badge(r.consumerState, "state"), r.partition, r.currentOffset,
                   r.latestUpstreamOffset, r.recordsLag, r.rowsConsumed,
                   r.rowsPerSecond === undefined || r.rowsPerSecond === null ? "" : Number(r.rowsPerSecond).toFixed(1),
                   bytes(r.memoryBytes), r.badRecords, r.error || r.uploadError || ""]);
      }
    }
    box.replaceChildren(rows.length
      ? grid(["Segment", "Server", "State", "Partition", "Offset", "Stream offset", "Lag", "Rows", "Rows/s", "Memory",
              "Bad rows", "Error"], rows, { numeric: new Set([3, 4, 5, 6, 7, 8, 9, 10]), id: "consuming-table" })
      : el("p", { className: "muted", textContent: "No segment is consuming." }));
  } catch (err) {
    showError(box, err);
  }
}

async function showSegments(name) {
  const box = document.getElementById("table-segments");
  try {
    const [records, ideal, external] = await Promise.all([
      api("GET", path("segments", name, "metadata")), api("GET", path("tables", name, "idealstate")),
      api("GET", path("tables", name, "externalview"))]);
    const replicaStates = (type, segment) => {
      const wanted = (ideal[type] || {})[segment] || {};
      const seen = (external[type] || {})[segment] || {};
      const box = el("div");
      for (const [server, state] of Object.entries(wanted)) {
        const actual = seen[server] || "—";
        box.append(el("div", {}, `${server} `, badge(state, "state"),
                      actual === state ? "" : el("span", { className: "muted", textContent: ` (seen ${actual})` })));
      }
      return box;
    };
    const list = Object.values(records).sort((a, b) =>
      (a.partition ?? -1) - (b.partition ?? -1) || (a.sequence ?? 0) - (b.sequence ?? 0) ||
      a.segmentName.localeCompare(b.segmentName));
    const rows = list.map((r) => {
      const type = r.table.endsWith("_REALTIME") ? "REALTIME" : "OFFLINE";
      const link = el("a", { href: `#/tables/${encodeURIComponent(name)}/segments/${encodeURIComponent(r.segmentName)}`,
                             textContent: r.segmentName });
      return [link, type, text(r.partition), badge(r.status, "state"), replicaStates(type, r.segmentName),
              r.totalDocs, bytes(r.sizeBytes), `${text(r.startOffset)}–${text(r.endOffset)}`, when(r.commitTimeMs)];
    });
    box.replaceChildren(grid(["Segment", "Type", "Partition", "Status", "Replicas", "Docs", "Size", "Offsets",
                              "Committed"], rows, { numeric: new Set([2, 5, 6]), id: "segments-table" }));
    const points = list.filter((r) => r.status === "DONE" || r.status === "UPLOADED")
      .map((r) => ({ t: r.commitTimeMs || r.creationTimeMs, size: r.sizeBytes, partition: r.partition, name: r.segmentName }));
    window.CuveeCharts.segmentSizePlot(document.getElementById("segment-plot"), points);
  } catch (err) {
    showError(box, err);
  }
}

async function segmentView(table, segment) {
  mount("segment-view");
  document.getElementById("segment-name").textContent = segment;
  const back = document.getElementById("segment-back");
  back.href = `#/tables/${encodeURIComponent(table)}`;
  back.textContent = `← ${table}`;
  try {
    const [metadata, story] = await Promise.all([api("GET", path("segments", table, segment, "metadata")),
                                                 api("GET", path("segments", table, segment, "story"))]);
    document.getElementById("segment-metadata").textContent = JSON.stringify(metadata, null, 2);
    const skip = new Set(["timeMs", "role", "instance", "kind"]);
    const rows = story.events.map((e) => [new Date(e.timeMs).toISOString().replace("T", " "), e.role, e.instance, e.kind,
      Object.entries(e).filter(([k]) => !skip.has(k)).map(([k, v]) => `${k}=${text(v)}`).join("  ")]);
    document.getElementById("segment-story").replaceChildren(rows.length
      ? grid(["Time (UTC)", "Role", "Instance", "Event", "Details"], rows, { id: "story-table" })
      : el("p", { className: "muted", textContent: "No story recorded for this segment." }));
  } catch (err) {
    showError(view(), err);
  }
}

function route() {
  clearInterval(refreshTimer);
  refreshTimer = null;
  let parts;
  try {
    parts = (location.hash.replace(/^#\/?/, "") || "query").split("/").map(decodeURIComponent);
  } catch (_) {
    parts = ["query"];  // a hand-typed address that is not valid percent-encoding
  }
  for (const link of document.querySelectorAll("header nav a")) {
    link.classList.toggle("active", link.dataset.nav === parts[0]);
  }
  if (parts[0] === "tables" && parts.length === 1) return tablesView();
  if (parts[0] === "tables" && parts.length === 2) return tableView(parts[1]);
  if (parts[0] === "tables" && parts.length === 4 && parts[2] === "segments") return segmentView(parts[1], parts[3]);
  return queryView();
}

document.getElementById("logout").onclick = () => {
  sessionStorage.removeItem(AUTH_KEY);
  sessionStorage.removeItem(USER_KEY);
  location.hash = "#/query";
  location.reload();
};
window.addEventListener("hashchange", route);
showUser();
// Ask once who we are before the first view: with auth on, the login dialog comes up at once.
api("GET", "/tables").catch(() => null).finally(route);
