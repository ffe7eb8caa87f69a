// hotloop console: polls GET /v1/console/state once a second and drives a WebSocket-mode playground.
// Plain browser JavaScript, no build step. Keys typed here stay in this tab (sessionStorage).
"use strict";

const $ = (id) => document.getElementById(id);
const STAGE_ORDER = ["validate", "resolve", "safety", "render", "pre_inference", "ttft", "generate", "post_inference"];
const POLL_MS = 1000;
let previous = null; // the last snapshot's {time, total}, for responses per second

function fmtNumber(value) {
  if (value === null || value === undefined) return "–";
  if (Math.abs(value) >= 1e6) return (value / 1e6).toFixed(1) + "M";
  if (Math.abs(value) >= 1e4) return (value / 1e3).toFixed(1) + "k";
  return Number.isInteger(value) ? String(value) : value.toFixed(2);
}

function fmtSeconds(seconds) {
  if (seconds === null || !isFinite(seconds)) return "–";
  if (seconds < 1e-3) return (seconds * 1e6).toFixed(0) + " µs";
  if (seconds < 1) return (seconds * 1e3).toFixed(2) + " ms";
  return seconds.toFixed(2) + " s";
}

function fmtAge(seconds) {
  if (seconds < 60) return seconds.toFixed(0) + " s";
  if (seconds < 3600) return (seconds / 60).toFixed(0) + " min";
  return (seconds / 3600).toFixed(1) + " h";
}

// A quantile from cumulative Prometheus buckets [[upper bound | null (+Inf), cumulative count], …].
function quantile(buckets, count, q) {
  if (!count) return null;
  const rank = q * count;
  let lower = 0, below = 0;
  for (const [bound, cumulative] of buckets) {
    if (cumulative >= rank) {
      if (bound === null) return lower;
      const inBucket = cumulative - below;
      return inBucket ? lower + (bound - lower) * ((rank - below) / inBucket) : bound;
    }
    lower = bound === null ? lower : bound;
    below = cumulative;
  }
  return lower;
}

function fillRows(table, rows) {
  const body = $(table).tBodies[0];
  body.replaceChildren(...rows.map((cells) => {
    const tr = document.createElement("tr");
    for (const cell of cells) {
      const td = document.createElement("td");
      td.textContent = cell;
      tr.appendChild(td);
    }
    return tr;
  }));
}

function renderStages(stages) {
  const names = Object.keys(stages).sort((a, b) => {
    const ia = STAGE_ORDER.indexOf(a), ib = STAGE_ORDER.indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
  });
  $("stages").replaceChildren(...names.map((name) => {
    const stage = stages[name];
    const counts = stage.buckets.map(([, cumulative], i) => cumulative - (i ? stage.buckets[i - 1][1] : 0));
    const peak = Math.max(1, ...counts);
    const card = document.createElement("div");
    card.className = "stage";
    card.dataset.stage = name;
    const title = document.createElement("div");
    title.className = "title";
    title.innerHTML = `<span></span><span class="muted"></span>`;
    title.children[0].textContent = name;
    title.children[1].textContent = `${fmtNumber(stage.count)} turns`;
    const bars = document.createElement("div");
    bars.className = "bars";
    for (const [i, n] of counts.entries()) {
      const bar = document.createElement("div");
      bar.style.height = `${(100 * n) / peak}%`;
      const bound = stage.buckets[i][0];
      bar.title = `≤ ${bound === null ? "∞" : fmtSeconds(bound)}: ${n}`;
      bars.appendChild(bar);
    }
    const summary = document.createElement("div");
    summary.className = "muted";
    const p50 = quantile(stage.buckets, stage.count, 0.5), p99 = quantile(stage.buckets, stage.count, 0.99);
    summary.textContent = `p50 ${fmtSeconds(p50)} · p99 ${fmtSeconds(p99)} · mean ${fmtSeconds(stage.count ? stage.sum / stage.count : null)}`;
    card.append(title, bars, summary);
    return card;
  }));
}

// The latest MCP calls, newest first; one still running shows its time so far.
function renderMcp(mcp) {
  const counts = (byOutcome) => Object.entries(byOutcome).map(([outcome, n]) => `${fmtNumber(n)} ${outcome}`).join(", ") || "none";
  $("mcp-totals").textContent = `(calls: ${counts(mcp.calls_by_outcome)} · lists: ${counts(mcp.lists_by_outcome)})`;
  fillRows("mcp-calls", mcp.calls.map((call) => [
    new Date(call.started_at * 1000).toLocaleTimeString(), call.owner, call.server_label, call.name,
    call.error ? `${call.status} (${call.error})` : call.status, (call.seconds * 1e3).toFixed(0),
  ]));
}

// The last hour as time series (GET /v1/console/state `history`: a point per `step_s`, the server's numbers).
const CHARTS = [
  ["chart-turns", ["turns_per_s"], (v) => fmtNumber(v)],
  ["chart-overhead", ["overhead_p50_ms", "overhead_p99_ms"], (v) => fmtSeconds(v / 1e3)],
  ["chart-errors", ["errors"], (v) => fmtNumber(v)],
  ["chart-connections", ["connections"], (v) => fmtNumber(v)],
];
const SPAN_S = 3600;

function renderHistory(history) {
  const points = history.points;
  $("history-note").textContent = points.length
    ? `(a point every ${history.step_s} s, every worker's numbers)` : "(the first point comes after one step)";
  if (!points.length) return;
  // The window grows with the points until it is an hour wide.
  const end = points[points.length - 1].time, start = Math.max(points[0].time, end - SPAN_S);
  const x = (time) => (end > start ? 300 * (time - start) / (end - start) : 300).toFixed(1);
  for (const [id, fields, format] of CHARTS) {
    const chart = $(id), svg = chart.querySelector("svg");
    const values = points.flatMap((point) => fields.map((field) => point[field])).filter((v) => v !== null);
    const peak = Math.max(1e-9, ...values);
    svg.replaceChildren(...fields.map((field, index) => {
      const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
      line.setAttribute("points", points.filter((point) => point[field] !== null)
        .map((point) => `${x(point.time)},${(58 - 56 * point[field] / peak).toFixed(1)}`).join(" "));
      if (index) line.setAttribute("class", "second");
      return line;
    }));
    const last = points[points.length - 1];
    chart.querySelector(".latest").textContent =
      fields.map((field) => last[field] === null ? "–" : format(last[field])).join(" · ") + ` (max ${format(peak)})`;
  }
}

function render(state) {
  const total = state.responses.total;
  if (previous && state.time > previous.time) {
    $("rps").textContent = fmtNumber((total - previous.total) / (state.time - previous.time));
  }
  previous = { time: state.time, total };
  $("responses-total").textContent = fmtNumber(total);
  $("in-flight").textContent = fmtNumber(state.in_flight);
  $("connections-count").textContent = fmtNumber(state.connections.length);
  $("uptime").textContent = fmtAge(state.uptime_s);
  renderStages(state.stages);
  fillRows("caches", Object.entries(state.caches).map(([name, c]) =>
    [name, fmtNumber(c.hit), fmtNumber(c.miss), c.hit_rate === null ? "–" : (100 * c.hit_rate).toFixed(1) + " %"]));
  fillRows("ledger", state.ledger.map((row) =>
    [row.owner, fmtNumber(row.responses), fmtNumber(row.input_tokens), fmtNumber(row.cached_tokens), fmtNumber(row.output_tokens)]));
  fillRows("connections", state.connections.map((conn) =>
    [conn.owner, fmtAge(conn.age_s), conn.lanes.map((l) => `${l.lane}: ${l.response_id.slice(0, 14)}… · ${l.items}`).join("  |  ") || "(idle)"]));
  fillRows("gauges", Object.entries(state.gauges).map(([name, value]) => [name, fmtNumber(value)]));
  renderMcp(state.mcp);
  renderHistory(state.history);
  const select = $("pg-model");
  if (!select.options.length) {
    for (const model of state.models) select.add(new Option(model, model));
  }
}

async function poll() {
  const adminKey = $("admin-key").value.trim();
  sessionStorage.setItem("hotloop-admin-key", adminKey);
  try {
    const reply = await fetch("/v1/console/state", { headers: adminKey ? { Authorization: `Bearer ${adminKey}` } : {} });
    const body = await reply.json();
    if (!reply.ok) {
      $("status").textContent = body.error ? body.error.message : `HTTP ${reply.status}`;
    } else {
      $("status").textContent = `live · ${new Date(body.time * 1000).toLocaleTimeString()}`;
      render(body);
    }
  } catch (err) {
    $("status").textContent = `unreachable: ${err}`;
  }
  setTimeout(poll, POLL_MS);
}

// -- playground: one WebSocket, one chain continued with previous_response_id ------------------------------------

const playground = { ws: null, previousId: null, current: null, thinking: null };

// The model's reasoning as it streams (protocol.md §2.6: OpenAI's or Open Responses' event names), in its own line
// above the answer.
function think(text) {
  if (!playground.thinking) {
    const div = document.createElement("div");
    div.className = "reasoning";
    $("pg-log").insertBefore(div, playground.current);
    playground.thinking = div;
  }
  playground.thinking.textContent += text;
}

function logLine(kind, text) {
  const div = document.createElement("div");
  div.className = kind;
  div.textContent = text;
  $("pg-log").appendChild(div);
  $("pg-log").scrollTop = $("pg-log").scrollHeight;
  return div;
}

function openSocket() {
  // Browsers cannot set headers on an upgrade: the key travels as a subprotocol (docs/console.md).
  const key = $("pg-key").value.trim();
  const protocols = key ? [`openai-insecure-api-key.${key}`, "hotloop-console"] : ["hotloop-console"];
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${scheme}://${location.host}/v1/responses`, protocols);
  ws.onmessage = (message) => onEvent(JSON.parse(message.data));
  ws.onclose = (event) => {
    $("pg-status").textContent = `socket closed (${event.code})`;
    playground.ws = null;
  };
  playground.ws = ws;
  return new Promise((resolve, reject) => {
    ws.onopen = () => resolve(ws);
    ws.onerror = () => reject(new Error("could not open the WebSocket"));
  });
}

function onEvent(event) {
  switch (event.type) {
    case "response.created":
      $("pg-status").textContent = "generating…";
      playground.current = logLine("assistant", "");
      playground.thinking = null;
      break;
    case "response.reasoning_text.delta":
    case "response.reasoning.delta":
      think(event.delta);
      break;
    case "response.output_text.delta":
      playground.current.textContent += event.delta;
      break;
    case "response.output_item.done":
      if (event.item.type === "function_call") logLine("tool", `→ ${event.item.name}(${event.item.arguments})`);
      if (event.item.type === "mcp_call") logLine("tool", `⚙ ${event.item.server_label}.${event.item.name} → ${event.item.status}`);
      if (event.item.type === "mcp_approval_request") {
        logLine("tool", `⚙ ${event.item.server_label}.${event.item.name} awaits approval (${event.item.id})`);
      }
      if (event.item.type === "reasoning" && !playground.thinking) {  // reasoning_events = "none": no deltas
        think((event.item.content || []).map((part) => part.text).join(""));
      }
      playground.thinking = null;  // the next reasoning item gets its own line
      break;
    case "response.completed":
    case "response.incomplete": {
      const r = event.response;
      playground.previousId = r.id;
      const usage = r.usage ? ` · ${r.usage.input_tokens} in / ${r.usage.output_tokens} out` : "";
      $("pg-status").textContent = `${r.status} · ${r.id}${usage}`;
      break;
    }
    case "response.failed":
      $("pg-status").textContent = `failed: ${event.response.error ? event.response.error.message : "unknown"}`;
      playground.previousId = null;
      break;
    case "error":
      logLine("error", event.error.message);
      $("pg-status").textContent = `error: ${event.error.code}`;
      playground.previousId = null;
      break;
  }
}

async function send(text) {
  sessionStorage.setItem("hotloop-pg-key", $("pg-key").value);
  const ws = playground.ws && playground.ws.readyState === WebSocket.OPEN ? playground.ws : await openSocket();
  logLine("user", `> ${text}`);
  const create = { type: "response.create", model: $("pg-model").value, input: text };
  if (playground.previousId) create.previous_response_id = playground.previousId;
  ws.send(JSON.stringify(create));
}

$("pg-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("pg-input").value.trim();
  if (!text) return;
  $("pg-input").value = "";
  send(text).catch((err) => { $("pg-status").textContent = String(err); });
});
$("pg-new").addEventListener("click", () => {
  playground.previousId = null;
  $("pg-log").replaceChildren();
  $("pg-status").textContent = "new chat";
});
$("pg-key").addEventListener("change", () => { if (playground.ws) playground.ws.close(1000); });
$("admin-key").value = sessionStorage.getItem("hotloop-admin-key") || "";
$("pg-key").value = sessionStorage.getItem("hotloop-pg-key") || "";
poll();
