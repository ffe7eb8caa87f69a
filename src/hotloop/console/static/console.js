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

// Vector stores' ingestion on this server (newest first; one in work shows its time so far) and the latest searches,
// with the searches' p50/p99 and the files ingested by outcome.
function renderFileSearch(fs) {
  const outcomes = Object.entries(fs.files_by_outcome).map(([outcome, n]) => `${fmtNumber(n)} ${outcome}`).join(", ") || "none";
  const latency = fs.search_p50_s === null ? "no searches yet" : `search p50 ${fmtSeconds(fs.search_p50_s)} · p99 ${fmtSeconds(fs.search_p99_s)}`;
  $("fs-totals").textContent = `(${fmtNumber(fs.ingesting)} in work · files: ${outcomes} · ${latency})`;
  const time = (at) => new Date(at * 1000).toLocaleTimeString();
  fillRows("fs-ingestions", fs.ingestions.map((row) => [
    time(row.started_at), row.owner, row.vector_store_id, row.file_id,
    row.error ? `${row.status} (${row.error})` : row.status, (row.bytes / 1024).toFixed(1), row.chunks,
    (row.seconds * 1e3).toFixed(0),
  ]));
  fillRows("fs-searches", fs.searches.map((row) => [
    time(row.at), row.owner, row.vector_store_ids.join(", "), row.queries, row.results, (row.seconds * 1e3).toFixed(1),
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

// A lane's latest response, its context's size, and the calls its client has to answer (their types only: the state
// never carries a call's command or arguments).
function laneText(lane) {
  const awaiting = (lane.awaiting || []).length ? ` · awaits ${lane.awaiting.join(", ")}` : "";
  return `${lane.lane}: ${lane.response_id.slice(0, 14)}… · ${lane.items}${awaiting}`;
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
    [conn.owner, fmtAge(conn.age_s), conn.lanes.map(laneText).join("  |  ") || "(idle)"]));
  fillRows("gauges", Object.entries(state.gauges).map(([name, value]) => [name, fmtNumber(value)]));
  renderMcp(state.mcp);
  renderFileSearch(state.file_search);
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

// calls: the streaming response's typed calls by output index; pending: the latest response's, until answered.
const playground = { ws: null, previousId: null, current: null, thinking: null, calls: new Map(), pending: [] };

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

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// -- typed client tools (protocol.md §1.11): the model's calls arrive as items, and the client runs them, not the
// server. This page runs nothing: it shows each call and sends what the user types as the call's output.

const OUTPUT_OF = {
  shell_call: "shell_call_output",
  local_shell_call: "local_shell_call_output",
  apply_patch_call: "apply_patch_call_output",
  computer_call: "computer_call_output",
};
// The screenshot a computer call gets when no image URL is typed: a blank 1×1 PNG.
const BLANK_PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg==";

function declaredTools() {
  return [...document.querySelectorAll("#pg-tools input:checked")].map((box) => ({ type: box.value }));
}

// An argv as one shell line, quoting the words that need it.
function shellLine(argv) {
  return argv.map((arg) => /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, "'\\''")}'`).join(" ");
}

// A computer action in one line: its type, its position, then its other fields.
function actionText(action) {
  const { type, x, y, ...rest } = action || {};
  const parts = [type || "(no action)"];
  if (x !== undefined || y !== undefined) parts.push(`(${x}, ${y})`);
  for (const [name, value] of Object.entries(rest)) {
    parts.push(`${name}=${typeof value === "string" ? value : JSON.stringify(value)}`);
  }
  return parts.join(" ");
}

function callHead(item) {
  const status = item.status && item.status !== "completed" ? ` [${item.status}]` : "";
  switch (item.type) {
    case "shell_call": {
      const timeout = item.action.timeout_ms ? ` (timeout ${item.action.timeout_ms} ms)` : "";
      return `→ shell${timeout}${status}`;
    }
    case "local_shell_call":
      return `→ local_shell${item.action.working_directory ? ` in ${item.action.working_directory}` : ""}${status}`;
    case "apply_patch_call":
      return `→ apply_patch ${item.operation.type} ${item.operation.path}${status}`;
    case "computer_call":
      return `→ computer ${item.action ? actionText(item.action) : `${(item.actions || []).length} actions`}${status}`;
  }
}

// One command line: a "$ " prompt, then the command (a shell call's streams in, from shell_call_command deltas).
function commandRow(text) {
  const row = element("div");
  row.append(element("span", "prompt", "$ "), element("span", "command", text));
  return row;
}

// A call's block in the log: its head line, then what it does (commands, the diff, the actions).
function fillCall(block, item) {
  block.replaceChildren(element("div", "head", callHead(item)));
  block.dataset.callId = item.call_id;
  const code = (className) => block.appendChild(element("div", `code ${className}`));
  if (item.type === "shell_call") {
    code("commands").append(...item.action.commands.map(commandRow));
  } else if (item.type === "local_shell_call") {
    const env = Object.entries(item.action.env || {}).map(([name, value]) => `${name}=${shellLine([value])} `).join("");
    code("commands").append(commandRow(env + shellLine(item.action.command || [])));
  } else if (item.type === "apply_patch_call" && item.operation.diff) {
    const diff = code("diff");
    for (const line of item.operation.diff.replace(/\n$/, "").split("\n")) {
      const kind = line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "";
      diff.appendChild(element("div", kind, line || " "));
    }
  } else if (item.type === "computer_call") {
    if (item.actions) code("actions").append(...item.actions.map((action) => element("div", "", actionText(action))));
    for (const check of item.pending_safety_checks || []) {
      block.appendChild(element("div", "error", `safety check ${check.code || check.id}: ${check.message || ""}`));
    }
  }
}

function commandSpan(event) {
  const block = playground.calls.get(event.output_index);
  if (!block) return null;
  const commands = block.querySelector(".commands");
  while (commands.children.length <= event.command_index) commands.appendChild(commandRow(""));
  return commands.children[event.command_index].querySelector(".command");
}

// The fields that answer a call, under its block, and the output item they make; `summary` says what was sent.
function answerFields(item, form) {
  const field = (tag, placeholder) => {
    const input = form.appendChild(element(tag));
    input.placeholder = placeholder;
    if (tag === "textarea") input.rows = 1;
    return input;
  };
  switch (item.type) {
    case "shell_call": {
      const commands = item.action.commands.length ? item.action.commands : [""];
      const rows = commands.map((command, i) => {
        const stdout = field("textarea", commands.length > 1 ? `stdout of command ${i + 1}` : "stdout");
        const exit = form.appendChild(element("label", "exit", "exit "));
        const code = exit.appendChild(element("input"));
        code.type = "number";
        code.value = "0";
        return [stdout, code];
      });
      return () => {
        const output = rows.map(([stdout, code]) =>
          ({ stdout: stdout.value, stderr: "", outcome: { type: "exit", exit_code: parseInt(code.value, 10) || 0 } }));
        const summary = output.map((o) => `${o.stdout.replace(/\n$/, "")} (exit ${o.outcome.exit_code})`).join("\n");
        return [{ type: "shell_call_output", call_id: item.call_id, output }, summary];
      };
    }
    case "local_shell_call": {
      const output = field("textarea", "output");
      return () => [{ type: "local_shell_call_output", call_id: item.call_id, output: output.value }, output.value];
    }
    case "apply_patch_call": {
      const status = form.appendChild(element("select"));
      for (const value of ["completed", "failed"]) status.add(new Option(value, value));
      const output = field("textarea", "output (optional)");
      return () => {
        const answer = { type: "apply_patch_call_output", call_id: item.call_id, status: status.value };
        if (output.value) answer.output = output.value;
        return [answer, output.value ? `${status.value}: ${output.value}` : status.value];
      };
    }
    case "computer_call": {
      const url = field("input", "screenshot image URL (empty: a blank 1×1 PNG)");
      return () => {
        const answer = { type: "computer_call_output", call_id: item.call_id,
          output: { type: "computer_screenshot", image_url: url.value.trim() || BLANK_PNG } };
        if ((item.pending_safety_checks || []).length) answer.acknowledged_safety_checks = item.pending_safety_checks;
        return [answer, `screenshot ${url.value.trim() || "(a blank 1×1 PNG)"}`];
      };
    }
  }
}

// Once the response is over, each of its calls gets a form; when every one is answered, the outputs go back together
// as the next turn's input.
function offerAnswers() {
  for (const call of playground.pending) {
    const form = element("form", "answer");
    const make = answerFields(call.item, form);
    form.appendChild(element("button", "", "send output")).type = "submit";
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const [answer, summary] = make();
      call.answer = answer;
      form.replaceWith(element("div", "answered", `↩ ${summary}`));
      const left = playground.pending.filter((other) => !other.answer).length;
      if (left) {
        $("pg-status").textContent = `${left} more call${left > 1 ? "s" : ""} to answer`;
      } else {
        createResponse(settlePending()).catch((err) => { $("pg-status").textContent = String(err); });
      }
    });
    call.block.appendChild(form);
  }
  if (playground.pending.length) $("pg-log").scrollTop = $("pg-log").scrollHeight;
}

// The answers given so far; the calls left unanswered say so (a message sent instead goes without them).
function settlePending() {
  const answers = [];
  for (const call of playground.pending) {
    if (call.answer) answers.push(call.answer);
    const form = call.block.querySelector("form.answer");
    if (form) form.replaceWith(element("div", "answered", "(not answered)"));
  }
  playground.pending = [];
  return answers;
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
      settlePending();
      playground.current = logLine("assistant", "");
      playground.thinking = null;
      playground.calls = new Map();
      break;
    case "response.reasoning_text.delta":
    case "response.reasoning.delta":
      think(event.delta);
      break;
    case "response.output_text.delta":
      playground.current.textContent += event.delta;
      break;
    case "response.output_item.added":
      if (OUTPUT_OF[event.item.type]) {
        const block = logLine("tool call", "");
        fillCall(block, event.item);
        playground.calls.set(event.output_index, block);
      }
      break;
    case "response.shell_call_command.added":
    case "response.shell_call_command.done": {
      const span = commandSpan(event);
      if (span) span.textContent = event.command;
      break;
    }
    case "response.shell_call_command.delta": {
      const span = commandSpan(event);
      if (span) span.textContent += event.delta;
      break;
    }
    case "response.output_item.done":
      if (event.item.type === "function_call") logLine("tool", `→ ${event.item.name}(${event.item.arguments})`);
      if (event.item.type === "mcp_call") logLine("tool", `⚙ ${event.item.server_label}.${event.item.name} → ${event.item.status}`);
      if (event.item.type === "mcp_approval_request") {
        logLine("tool", `⚙ ${event.item.server_label}.${event.item.name} awaits approval (${event.item.id})`);
      }
      if (OUTPUT_OF[event.item.type]) {
        const block = playground.calls.get(event.output_index) || logLine("tool call", "");
        fillCall(block, event.item);  // the finished item is the call as the client gets it
        playground.pending.push({ item: event.item, block, answer: null });
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
      const calls = playground.pending.length;
      const waiting = calls ? ` · ${calls} call${calls > 1 ? "s" : ""} for the client: answer below` : "";
      $("pg-status").textContent = `${r.status} · ${r.id}${usage}${waiting}`;
      offerAnswers();
      break;
    }
    case "response.failed":
      $("pg-status").textContent = `failed: ${event.response.error ? event.response.error.message : "unknown"}`;
      playground.previousId = null;
      settlePending();
      break;
    case "error":
      logLine("error", event.error.message);
      $("pg-status").textContent = `error: ${event.error.code}`;
      playground.previousId = null;
      settlePending();
      break;
  }
}

// One turn on the playground's socket: `input` (text, or items such as the calls' outputs) continues the chain,
// with the client tools ticked above.
async function createResponse(input, line) {
  sessionStorage.setItem("hotloop-pg-key", $("pg-key").value);
  const ws = playground.ws && playground.ws.readyState === WebSocket.OPEN ? playground.ws : await openSocket();
  if (line) logLine("user", line);
  const create = { type: "response.create", model: $("pg-model").value, input };
  if (playground.previousId) create.previous_response_id = playground.previousId;
  const tools = declaredTools();
  if (tools.length) create.tools = tools;
  ws.send(JSON.stringify(create));
}

// A message; outputs already given for the latest calls go with it, and calls left unanswered are dropped.
function send(text) {
  const answers = settlePending();
  return createResponse(answers.length ? [...answers, { role: "user", content: text }] : text, `> ${text}`);
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
  playground.pending = [];
  $("pg-log").replaceChildren();
  $("pg-status").textContent = "new chat";
});
$("pg-key").addEventListener("change", () => { if (playground.ws) playground.ws.close(1000); });
$("admin-key").value = sessionStorage.getItem("hotloop-admin-key") || "";
$("pg-key").value = sessionStorage.getItem("hotloop-pg-key") || "";
poll();
