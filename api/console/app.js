// The ninetrix web console: threads and their crash lineage (a turn that runs can be cancelled;
// a fork says where it came from, a rewind marks the branch it left, a replay what it replays;
// a thread can be marked into an eval suite), the approvals inbox, triggers, the agents'
// memories, eval suites with their last run's table. It calls the same API routes as the CLI;
// the sign-in is an HttpOnly cookie the page never sees, and every request that changes
// something carries the X-Ninetrix-Console header (CSRF). No framework, no build step: text goes
// into the page with textContent only, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
let session = null; // {kind, pool?, name?}
let live = null; // the EventSource of the thread on screen
let refresh = null; // the approvals view's timer

async function api(method, path, body) {
  const init = { method, headers: { "X-Ninetrix-Console": "1" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  const text = await resp.text();
  const data = text ? JSON.parse(text) : null;
  if (!resp.ok) {
    const err = new Error((data && data.message) || `${method} ${path}: ${resp.status}`);
    err.status = resp.status;
    throw err;
  }
  return data;
}

// Elements from a tag, attributes and children (strings become text nodes).
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return node;
}

function ago(iso) {
  const s = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}

function show(view) {
  if (live) { live.close(); live = null; }
  if (refresh) { clearTimeout(refresh); refresh = null; }
  const root = $("view");
  root.replaceChildren(view);
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", location.hash.startsWith(`#/${a.dataset.view}`));
  }
}

function failure(e) {
  return el("p", { class: "error", role: "alert" }, e.message);
}

// ---- sign-in ----

async function signIn(ev) {
  ev.preventDefault();
  $("signin-error").textContent = "";
  try {
    await api("POST", "/console/session", { token: $("token").value });
    $("token").value = "";
    await start();
  } catch (e) {
    $("signin-error").textContent = e.status === 401 ? "That token is not valid here." : e.message;
  }
}

async function signOut() {
  await api("DELETE", "/console/session").catch(() => {});
  session = null;
  location.hash = "";
  await start();
}

async function start() {
  try {
    const who = await api("GET", "/console/session");
    session = who.kind === "none" ? null : who;
  } catch (e) {
    session = null;
  }
  $("signin").hidden = !!session;
  $("nav").hidden = !session;
  $("signout").hidden = !session;
  $("who").textContent = !session ? "" : session.kind === "admin" ? "admin" : `${session.name} · approver of pool ${session.pool}`;
  for (const a of document.querySelectorAll("#nav a")) {
    a.hidden = session && session.kind !== "admin" && a.dataset.view !== "approvals";
  }
  if (!session) { $("view").replaceChildren(); return; }
  if (!location.hash || location.hash === "#/") {
    location.hash = session.kind === "admin" ? "#/pools" : "#/approvals";
  } else {
    route();
  }
}

// ---- pools ----

// Every pool's agents and their conversations, from the threads the API holds: a replica's own
// thread or a session's, each with its status, epoch and boots (a boot past the first is a
// restart: a crash, a kill or an update).
async function poolsView() {
  const view = el("section", {}, el("h1", {}, "Pools"));
  show(view);
  try {
    const threads = await api("GET", "/v1/threads?limit=1000");
    const pools = new Map();
    for (const t of threads) {
      const pool = t.pool || "(no pool)";
      const agent = t.agent || "(no agent)";
      if (!pools.has(pool)) pools.set(pool, new Map());
      const agents = pools.get(pool);
      if (!agents.has(agent)) agents.set(agent, []);
      agents.get(agent).push(t);
    }
    if (!pools.size) view.append(el("p", { class: "dim" }, "No pools yet: `ninetrix up` starts one."));
    for (const [pool, agents] of [...pools.entries()].sort()) {
      const section = el("section", { "data-pool": pool }, el("h2", {}, pool));
      for (const [agent, list] of [...agents.entries()].sort()) {
        const replicas = list.filter((t) => !t.session).length;
        const sessions = list.length - replicas;
        const restarts = list.reduce((n, t) => n + Math.max(0, t.boot_count - 1), 0);
        const busy = list.filter((t) => t.status === "in_turn" || t.status === "waiting").length;
        const failed = list.filter((t) => t.status === "failed").length;
        section.append(el("h3", { "data-agent": agent }, agent, " ",
          el("span", { class: "dim" }, `${replicas} replica thread(s), ${sessions} session(s) · ${busy} working · `),
          el("span", { class: restarts ? "warn" : "dim" }, `${restarts} restart(s)`),
          failed ? el("span", { class: "error" }, ` · ${failed} failed`) : ""));
        section.append(el("table", {},
          el("tr", {}, ...["conversation", "status", "epoch", "boots", "updated"].map((h) => el("th", {}, h))),
          ...list.map((t) => el("tr", { class: "link", onclick: () => { location.hash = `#/threads/${t.thread_id}`; } },
            el("td", {}, t.session ? `session ${t.session}` : `replica ${t.replica || "-"}`),
            el("td", { class: t.status === "failed" ? "error" : "" }, t.status),
            el("td", {}, String(t.epoch)),
            el("td", { class: t.boot_count > 1 ? "warn" : "" }, String(t.boot_count)),
            el("td", { class: "dim" }, ago(t.updated_at))))));
      }
      view.append(section);
    }
  } catch (e) {
    view.append(failure(e));
  }
}

// ---- threads ----

// How full a thread's model context is: a gauge of the last round's input against the window,
// with the compactions so far (from the thread's `context`; nothing before its first round).
function contextGauge(c) {
  if (!c) return el("span", { class: "dim" }, "-");
  const k = (n) => (n >= 1000 ? `${Math.round(n / 1000)}k` : String(n));
  const compactions = c.compactions ? ` · ${c.compactions} compaction${c.compactions === 1 ? "" : "s"}` : "";
  if (!c.window) {
    return el("span", { class: "context", title: "window unknown" }, `${k(c.input_tokens)} tokens${compactions}`);
  }
  const used = c.input_tokens / c.window;
  return el("span", { class: "context", title: `${c.input_tokens} of ${c.window} tokens` },
    el("meter", { min: "0", max: "1", low: "0.6", high: "0.8", optimum: "0", value: String(Math.min(used, 1)) }),
    ` ${Math.round(used * 100)}% of ${k(c.window)}${compactions}`);
}

async function threadsView() {
  const view = el("section", {}, el("h1", {}, "Threads"));
  show(view);
  try {
    const threads = await api("GET", "/v1/threads?limit=500");
    const rows = threads.map((t) =>
      el("tr", { class: "link", "data-thread": t.thread_id, onclick: () => { location.hash = `#/threads/${t.thread_id}`; } },
        el("td", {}, t.pool || "-"),
        el("td", {}, t.agent || "-"),
        el("td", {}, t.session ? `session ${t.session}` : t.replica ? `replica ${t.replica}` : "-"),
        el("td", {}, t.status),
        el("td", {}, String(t.epoch)),
        el("td", { class: t.boot_count > 1 ? "warn" : "" }, String(t.boot_count)),
        el("td", {}, contextGauge(t.context)),
        el("td", { class: "dim" }, ago(t.updated_at)),
        el("td", { class: "mono dim" }, t.thread_id)));
    view.append(el("table", {},
      el("tr", {}, ...["pool", "agent", "conversation", "status", "epoch", "boots", "context", "updated", "thread"].map((h) => el("th", {}, h))),
      ...rows));
    if (!threads.length) view.append(el("p", { class: "dim" }, "No threads yet: `ninetrix up` starts a pool."));
  } catch (e) {
    view.append(failure(e));
  }
}

// The crash lineage of one restart: what the runner found and did when it came back.
function lineage(boot, after) {
  const steps = [el("li", {}, `the runner of epoch ${boot.epoch - 1} stopped without finishing (killed, crashed or fenced)`),
    el("li", {}, `restarted: epoch ${boot.epoch}, boot ${boot.boot_count}${boot.restart_count ? `, container restart ${boot.restart_count}` : ""}`)];
  for (const e of after) {
    if (e.type === "repair") {
      const n = (e.data.dropped || []).length;
      steps.push(el("li", {}, `repaired the history: cut back to ${e.data.truncate_to} messages, dropped ${n} (${e.data.mode})`));
    } else if (e.type === "turn_resumed") {
      steps.push(el("li", {}, `resumed turn ${e.data.turn_seq} (message ${e.data.seq})`));
    } else if (e.type === "tool_replayed") {
      steps.push(el("li", {}, `replayed ${e.data.name} from the ledger (not run again)`));
    } else if (e.type === "tool_call" && e.data.mode === "outcome_unknown") {
      steps.push(el("li", { class: "error" }, `${e.data.name}: outcome unknown — it may have run; not run again`));
    }
  }
  return el("div", { class: "lineage", "data-lineage": String(boot.epoch) },
    el("strong", {}, `✖ crash → restart (epoch ${boot.epoch})`), el("ol", {}, ...steps));
}

// What stopped a turn (`stopped_by`, or a `turn_stopping`'s `by`), as the CLI says it.
function stoppedWords(by) {
  if (!by) return "stopped";
  return by.kind === "interrupted" ? `interrupted by message ${by.seq}` : `cancelled by ${by.by}`;
}

// A thread in a turn (working, or waiting for people or collaborators) can be cancelled.
function cancellable(t) {
  return session && session.kind === "admin" && (t.status === "in_turn" || t.status === "waiting");
}

// What the API answered to a cancel, in words.
function cancelWords(r) {
  const parts = [r.running
    ? `cancel stored as message ${r.seq}: turn ${r.running.turn_seq} stops once its runner takes it`
    : `cancel stored as message ${r.seq}: no turn was running, so it stops nothing unless one starts first`];
  if (r.approvals_cancelled) parts.push(`${r.approvals_cancelled} pending approval(s) cancelled`);
  if (r.handoffs_cancelled) parts.push(`${r.handoffs_cancelled} handoff(s) cancelled`);
  return parts.join(" · ");
}

function timelineItem(e) {
  const d = e.data || {};
  switch (e.type) {
    case "turn_started": return el("li", { class: "turn" }, `turn ${d.turn_seq} · message ${d.seq}: `, d.input || "");
    case "turn_resumed": return el("li", { class: "turn" }, `turn ${d.turn_seq} resumed`);
    case "llm_call": return el("li", {}, `model ${d.model} answered in ${d.latency_ms} ms · ${d.input_tokens} in / ${d.output_tokens} out`);
    case "llm_retry": return el("li", { class: "warn" }, `model call failed (${d.reason}); retry in ${d.retry_in_ms} ms`);
    case "compacted": {
      const how = d.strategy === "clear_tool_results" ? `${d.cleared} tool results cleared` : `summarized by ${d.model || "the model"}`;
      const k = (n) => (n >= 1000 ? `${Math.round(n / 1000)}k` : String(n));
      return el("li", { class: "compacted" }, `⇣ compacted turns ${d.turns[0]}–${d.turns[1]} (${k(d.tokens_before)} → ${k(d.tokens_after)} tokens) · ${how}${d.reason === "threshold" ? "" : ` · ${d.reason}`}`);
    }
    case "compaction_skipped": return el("li", { class: "warn" }, `compaction due (${d.reason}) not made: ${d.why}`);
    case "tool_call":
    case "tool_replayed": {
      const mode = e.type === "tool_replayed" ? "replayed" : d.mode;
      return el("li", {}, `${d.name} `, el("span", { class: `badge ${mode}` }, mode), ` ${d.duration_ms} ms`, d.ok ? "" : el("span", { class: "error" }, " failed"));
    }
    case "approval_requested": return el("li", { class: "warn" }, `waiting for a person: ${d.tool} (request ${d.id})`);
    case "approval_decided": return el("li", {}, `decided: ${d.decision || d.status || ""} ${d.by ? `by ${d.by}` : ""}`);
    case "handoff_sent": return el("li", {}, `asked ${d.agent}`);
    case "handoff_settled": return el("li", {}, `${d.agent} ${d.status}`);
    case "steered": return el("li", { class: "steered" }, `↪ message ${d.seq} joined turn ${d.turn_seq}: `, d.input || "");
    case "turn_stopping": {
      const running = (d.running || []).length ? ` · letting ${d.running.join(", ")} finish` : "";
      return el("li", { class: "stopped" }, `⏹ stopping turn ${d.turn_seq}: ${stoppedWords(d.by)}${running}`);
    }
    case "cancel_missed": return el("li", { class: "dim" }, `cancel (message ${d.seq}) by ${d.by} found no turn running (turn ${d.last_turn} had ended)`);
    case "job_started": return el("li", {}, `job ${d.name} (${d.job}) started: `, el("code", {}, d.command || ""));
    case "job_finished": return el("li", { class: d.exit_code === 0 ? "" : "warn" }, `job ${d.name} (${d.job}) ${d.timed_out ? "timed out" : `exited ${d.exit_code}`}`);
    case "job_reattached": return el("li", { class: "dim" }, `re-attached to job ${d.name} (${d.job}): ${d.state}${d.exit_code === undefined ? "" : ` (code ${d.exit_code})`}`);
    case "turn_completed":
      if (d.stopped_by) {
        return el("li", { class: "stopped", "data-stopped": d.stopped_by.kind }, `turn ${d.turn_seq} ${stoppedWords(d.stopped_by)}`, d.reply ? ": " : "", d.reply || "");
      }
      return el("li", { class: d.ok ? "reply" : "error" }, `reply${d.ok ? "" : " (failed)"}: `, d.reply || "");
    case "forked": return el("li", { class: "fork" }, "⑂ forked from thread ", threadLink(d.parent), ` at turn ${d.at_turn} (${d.history_len} messages${d.snapshot ? `, files of snapshot ${short(d.snapshot.root)}` : ", no snapshot: empty workspace"})${d.undone ? ` · ${d.undone} effect(s) of the parent not undone` : ""}`);
    case "fork_created": return el("li", { class: "fork" }, `⑂ forked at turn ${d.at_turn}: `, threadLink(d.thread_id), ` (session ${d.session})`);
    case "rewound": return el("li", { class: "rewound", "data-rewound": String(d.to_turn) },
      d.from_turn > d.to_turn
        ? `⟲ rewound to turn ${d.to_turn}: ${d.from_turn === d.to_turn + 1 ? `turn ${d.from_turn}` : `turns ${d.to_turn + 1}–${d.from_turn}`} left on a branch (${d.left_messages} messages kept)`
        : `⟲ rewound to turn ${d.to_turn}`,
      d.snapshot ? ` · files of snapshot ${short(d.snapshot.root)} (${d.files_written} written, ${d.files_removed} removed)` : " · files untouched (no snapshot)",
      d.undone ? ` · ${d.undone} effect(s) not undone` : "");
    case "rewind_failed": return el("li", { class: "error" }, `rewind to turn ${d.to_turn} not done: ${d.why}`);
    case "snapshot_taken": return el("li", { class: "dim" }, `snapshot ${short(d.snapshot.root)} · ${d.snapshot.files} files, ${size(d.snapshot.bytes)} · ${d.uploaded_objects} new objects (${size(d.uploaded_bytes)}) · ${d.ms} ms`);
    case "snapshot_skipped": return el("li", { class: "warn" }, `no snapshot: ${d.why}`);
    case "workspace_restored": return el("li", { class: "dim" }, `workspace restored to snapshot ${short(d.snapshot.root)} (${d.files_written} written, ${d.files_removed} removed)`);
    case "replay_started": return el("li", { class: "replay" }, "▷ replay of thread ", threadLink(d.source), ` turns ${d.from_turn}–${d.to_turn} (${d.turns} turn(s)) against ${d.candidate || "the candidate"}`);
    case "replay_answered": return el("li", { class: d.verdict === "not_run" ? "warn" : "dim" }, `${d.name}: ${replayVerdict(d.verdict)}`);
    case "error": return el("li", { class: "error" }, d.message || "error");
    default: return null;
  }
}

// A snapshot's object ID as people see it (its first 12 characters, as the CLI shows it).
function short(id) {
  return String(id || "").slice(0, 12);
}

// A size as the CLI says it: 120 B, 1.5 KiB, 4 MiB.
function size(bytes) {
  const units = [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]];
  for (const [unit, step] of units) {
    if (bytes >= step) return `${(bytes / step).toFixed(1).replace(/\.0$/, "")} ${unit}`;
  }
  return `${bytes} B`;
}

// A link to a thread's view (its ID as text).
function threadLink(id) {
  return el("a", { href: `#/threads/${encodeURIComponent(id)}`, class: "mono" }, String(id));
}

// Where a thread came from and what was forked from it, and its ended turns with their
// snapshots (`GET /v1/threads/{id}/turns`); turns a rewind left are marked.
function turnsPanel(list) {
  const panel = el("div", { class: "turns", id: "turns" });
  if (list.forked_from) {
    panel.append(el("p", { class: "fork", id: "forked-from" }, "forked from ", threadLink(list.forked_from.parent), ` at turn ${list.forked_from.at_turn}`));
  }
  if ((list.forks || []).length) {
    panel.append(el("p", { class: "fork", id: "forks" }, "forks: ",
      ...list.forks.map((f, i) => [i ? ", " : "", threadLink(f.thread_id), ` at turn ${f.at_turn}${f.session ? ` (session ${f.session})` : ""}`])));
  }
  if ((list.turns || []).length) {
    const rows = list.turns.map((t) => el("tr", { class: t.live ? "" : "left", "data-turn": String(t.turn_seq) },
      el("td", {}, String(t.turn_seq)),
      el("td", {}, t.live ? "" : "left on a branch"),
      el("td", {}, t.snapshot ? `${t.snapshot.files} files, ${size(t.snapshot.bytes)}` : t.snapshot_dropped ? "dropped (keep_turns)" : t.snapshot_skipped ? `skipped: ${t.snapshot_skipped}` : "none"),
      el("td", { class: "dim" }, ago(t.ended_at))));
    panel.append(el("details", {}, el("summary", {}, `${list.turns.length} ended turn(s)`),
      el("table", {}, el("tr", {}, ...["turn", "branch", "snapshot", "ended"].map((h) => el("th", {}, h))), ...rows)));
  }
  return panel;
}

function renderTimeline(list, events) {
  list.replaceChildren();
  events.forEach((e, i) => {
    if (e.type === "boot" && e.data.epoch > 1 && (e.data.boot_count > 1 || e.data.repaired)) {
      // What the boot led to, up to the next boot.
      const next = events.findIndex((x, j) => j > i && x.type === "boot");
      const after = events.slice(i + 1, next < 0 ? events.length : next);
      list.append(el("li", {}, lineage(e.data, after)));
      return;
    }
    const item = timelineItem(e);
    if (item) list.append(item);
  });
}

async function threadView(id) {
  const title = el("h1", {}, "Thread ", el("span", { class: "mono" }, id));
  const status = el("p", { class: "dim" });
  const actions = el("p", { class: "actions" });
  const list = el("ul", { class: "timeline", id: "timeline" });
  const liveNote = el("span", { class: "live" });
  const turns = el("div");
  const origin = el("div");
  const evalForm = el("div");
  const view = el("section", {}, title, status, origin, actions, evalForm, turns, liveNote, list);
  show(view);
  const path = `/v1/threads/${encodeURIComponent(id)}`;
  // The thread's line and, while it is in a turn, the Cancel button (read again when a turn
  // starts or ends). A cancel's answer stays on screen until the next one.
  const note = el("span", { class: "dim", role: "status", id: "cancel-note" });
  const describe = (t) => {
    status.textContent = `${t.pool || "-"} / ${t.agent || "-"} · ${t.session ? `session ${t.session}` : `replica ${t.replica || "-"}`} · ${t.status} · epoch ${t.epoch} · ${t.boot_count} boot(s) · context `;
    status.append(contextGauge(t.context));
    const cancel = async (ev) => {
      ev.target.disabled = true;
      note.className = "dim";
      note.textContent = "cancelling…";
      try {
        const r = await api("POST", `${path}/cancel`, { by: (session && session.name) || "console" });
        note.textContent = cancelWords(r);
      } catch (e) {
        note.className = "error";
        note.textContent = e.message;
        ev.target.disabled = false;
      }
    };
    actions.replaceChildren(
      cancellable(t) ? el("button", { class: "cancel", onclick: cancel, "data-action": "cancel", title: "End the running turn `cancelled`: the model call in flight is abandoned, running tools get execution.interrupt_grace to finish" }, "Cancel turn") : "",
      " ", note);
  };
  try {
    const t = await api("GET", path);
    describe(t);
    if (t.replay_of) origin.replaceChildren(replayOrigin(t.replay_of));
    if (session && session.kind === "admin") evalForm.replaceChildren(addToSuite(id));
    // An API without the turns route (older than fork and rewind) shows no turns panel.
    const showTurns = () => api("GET", `${path}/turns`).then((l) => turns.replaceChildren(turnsPanel(l))).catch(() => {});
    await showTurns();
    const events = [];
    let after = 0;
    for (;;) {
      const page = await api("GET", `/v1/threads/${encodeURIComponent(id)}/events?after=${after}&limit=1000`);
      if (!page.length) break;
      events.push(...page);
      after = page[page.length - 1].seq;
    }
    renderTimeline(list, events);
    live = new EventSource(`/v1/threads/${encodeURIComponent(id)}/events/stream?after=${after}`);
    live.onopen = () => { liveNote.textContent = "● live"; };
    live.onerror = () => { liveNote.textContent = ""; };
    live.onmessage = null;
    const onEvent = (m) => {
      const e = JSON.parse(m.data);
      events.push(e);
      renderTimeline(list, events);
      // A turn started, ended or was found gone: whether it can be cancelled changed.
      if (["turn_started", "turn_resumed", "turn_completed", "cancel_missed", "approval_requested"].includes(e.type)) {
        api("GET", path).then(describe).catch(() => {});
      }
      // A turn ended, a rewind or a fork: the turns panel changed.
      if (["turn_completed", "rewound", "fork_created"].includes(e.type)) showTurns();
    };
    for (const kind of ["boot", "ready", "repair", "turn_started", "turn_resumed", "llm_call", "llm_retry", "compacted", "compaction_skipped", "tool_call",
      "tool_replayed", "approval_requested", "approval_decided", "handoff_sent", "handoff_settled", "steered", "turn_stopping", "cancel_missed",
      "job_started", "job_finished", "job_reattached", "forked", "fork_created", "rewound", "rewind_failed", "snapshot_taken",
      "snapshot_skipped", "workspace_restored", "replay_started", "replay_answered", "turn_completed", "error"]) {
      live.addEventListener(kind, onEvent);
    }
  } catch (e) {
    view.append(failure(e));
  }
}

// What a replay thread replays: its source (a link), the turns and the candidate.
function replayOrigin(o) {
  return el("p", { class: "replay", id: "replay-of" }, "replay of thread ", threadLink(o.source),
    ` · turns ${o.from_turn}–${o.to_turn} · against ${o.candidate || "(no candidate named)"}`);
}

function replayVerdict(v) {
  return { recorded: "answered from the recording", recorded_answer: "the recorded answer", live: "run live (a read)", not_run: "not run (a replay runs no new writes)" }[v] || v;
}

// "Add to eval suite": a suite name and an optional turn range, POSTed as a member; the API's
// answer (the member, or its refusal) is shown under the form.
function addToSuite(thread) {
  const suite = el("input", { name: "suite", required: "", placeholder: "suite (e.g. regressions)" });
  const from = el("input", { name: "from_turn", type: "number", min: "1", placeholder: "from turn" });
  const to = el("input", { name: "to_turn", type: "number", min: "1", placeholder: "to turn" });
  const note = el("span", { role: "status", id: "eval-note" });
  const submit = async (ev) => {
    ev.preventDefault();
    const body = { thread };
    if (from.value) body.from_turn = Number(from.value);
    if (to.value) body.to_turn = Number(to.value);
    note.className = "dim";
    note.textContent = "adding…";
    try {
      const m = await api("POST", `/v1/evals/${encodeURIComponent(suite.value)}/members`, body);
      note.className = "";
      note.replaceChildren(`member ${m.id} of `, el("a", { href: `#/evals/${encodeURIComponent(suite.value)}` }, suite.value),
        m.from_turn || m.to_turn ? ` (turns ${m.from_turn || "first"}–${m.to_turn || "last"})` : "");
    } catch (e) {
      note.className = "error";
      note.textContent = e.message;
    }
  };
  return el("form", { class: "eval-add", id: "eval-add", onsubmit: submit },
    el("strong", {}, "Add to eval suite "), suite, " ", from, " ", to, " ", el("button", { type: "submit" }, "Add"), " ", note);
}

// ---- evals ----

// Every suite: its members, when it last ran and whether that run passed.
async function evalsView() {
  const view = el("section", {}, el("h1", {}, "Eval suites"));
  show(view);
  try {
    const list = await api("GET", "/v1/evals");
    if (!list.suites.length) {
      view.append(el("p", { class: "dim" }, "No suite yet: mark a thread into one from its page (Add to eval suite)."));
      return;
    }
    view.append(el("table", { id: "suites" },
      el("tr", {}, ...["suite", "members", "last run", "passed"].map((h) => el("th", {}, h))),
      ...list.suites.map((s) => el("tr", { "data-suite": s.name },
        el("td", {}, el("a", { href: `#/evals/${encodeURIComponent(s.name)}` }, s.name)),
        el("td", {}, String(s.members)),
        el("td", { class: "dim" }, s.last_run_at ? ago(s.last_run_at) : "never"),
        el("td", {}, s.last_run_passed === undefined ? "" : s.last_run_passed ? "passed" : "failed")))));
  } catch (e) {
    view.append(failure(e));
  }
}

// One suite: its members (each with a Remove button) and the last run's table.
async function evalView(name) {
  const view = el("section", {}, el("h1", {}, "Eval suite ", el("span", { class: "mono" }, name)));
  show(view);
  const path = `/v1/evals/${encodeURIComponent(name)}`;
  try {
    const s = await api("GET", path);
    const note = el("p", { role: "status", id: "remove-note" });
    const remove = (m) => async (ev) => {
      ev.target.disabled = true;
      try {
        await api("DELETE", `${path}/members/${m.id}`);
        ev.target.closest("tr").remove();
      } catch (e) {
        note.className = "error";
        note.textContent = e.message;
        ev.target.disabled = false;
      }
    };
    view.append(el("h2", {}, "Members"), note, el("table", { id: "members" },
      el("tr", {}, ...["thread", "agent", "turns", "added", ""].map((h) => el("th", {}, h))),
      ...s.members.map((m) => el("tr", { "data-member": String(m.id) },
        el("td", {}, threadLink(m.thread)),
        el("td", {}, `${m.labels.agent || "-"}${m.labels.session ? `/${m.labels.session}` : ""}`),
        el("td", {}, `${m.from_turn || "first"}–${m.to_turn || "last"}`),
        el("td", { class: "dim" }, ago(m.added_at)),
        el("td", {}, el("button", { onclick: remove(m), "data-action": "remove" }, "Remove"))))));
    const run = s.last_run;
    if (!run) {
      view.append(el("p", { class: "dim" }, "Not run yet: ", el("code", {}, `ninetrix eval SUITE.yaml`), "."));
      return;
    }
    view.append(el("h2", {}, `Last run · ${run.passed ? "passed" : "failed"} · ${ago(run.created_at)} · ${run.candidate}`),
      el("table", { id: "last-run" },
        el("tr", {}, ...["case", "turns", "divergent turns", "failed checks", "cost", "result"].map((h) => el("th", {}, h))),
        ...run.cases.map((c) => el("tr", { class: c.passed ? "" : "failed" },
          el("td", {}, c.name, " ", threadLink(c.replay)),
          el("td", {}, String(c.turns)),
          el("td", {}, String(c.divergent_turns)),
          el("td", {}, c.failed_checks.length ? el("ul", {}, ...c.failed_checks.map((f) => el("li", {}, f))) : "none"),
          el("td", {}, `$${Number(c.cost_usd).toFixed(4)}`),
          el("td", {}, c.passed ? "passed" : "failed")))));
  } catch (e) {
    view.append(failure(e));
  }
}

// ---- approvals ----

async function decide(a, decision, extra) {
  const body = Object.assign({ decision }, extra || {});
  await api("POST", `/v1/approvals/${encodeURIComponent(a.id)}/decision`, body);
}

// What a budget request asks, in words: "raise agent writer's budget for 2026-11-28 by $5.00?"
// (`BudgetScope::text` in proto says the same).
function raiseText(a) {
  const r = a.raise || {};
  const what = r.scope === "agent_day" ? `agent ${a.agent || "-"}'s budget for ${r.day}`
    : r.scope === "pool_day" ? `the pool's budget for ${r.day}`
    : "this session's budget";
  return `raise ${what} by $${Number(r.amount_usd || 0).toFixed(2)}?`;
}

async function approvalsView() {
  const view = el("section", {}, el("h1", {}, "Approvals"));
  show(view);
  // New requests show up without a reload (a request is stored with the model response that
  // makes the call; there is no stream of all threads' events to follow).
  const again = () => {
    if (!location.hash.startsWith("#/approvals")) return;
    // Not while someone is typing a reason or an answer.
    if (document.activeElement && document.activeElement.tagName === "INPUT") refresh = setTimeout(again, 5000);
    else approvalsView();
  };
  refresh = setTimeout(again, 5000);
  try {
    const pending = await api("GET", "/v1/approvals?status=pending");
    if (!pending.length) view.append(el("p", { class: "dim", id: "no-approvals" }, "Nothing is waiting for a person."));
    for (const a of pending) {
      const note = el("p", { class: "error", role: "alert" });
      const reason = el("input", { type: "text", placeholder: a.kind === "question" ? "your answer" : "reason (to deny)", "aria-label": "reason" });
      const act = (decision) => async () => {
        note.textContent = "";
        try {
          if (decision === "answer") await decide(a, "answer", { answer: reason.value });
          else if (decision === "reject") await decide(a, "reject", { reason: reason.value || "denied from the console" });
          else await decide(a, "approve");
          await approvalsView();
        } catch (e) {
          note.textContent = e.message;
        }
      };
      const buttons = a.kind === "question"
        ? [el("button", { onclick: act("answer"), "data-action": "answer" }, "Answer")]
        : [el("button", { onclick: act("approve"), "data-action": "approve" }, "Approve"),
          el("button", { onclick: act("reject"), "data-action": "deny" }, "Deny")];
      const what = a.kind === "budget"
        ? el("p", { "data-raise": "" }, raiseText(a))
        : el("pre", { class: "mono" }, typeof a.args === "string" ? a.args : JSON.stringify(a.args, null, 2));
      view.append(el("article", { "data-approval": a.id },
        el("h3", {}, `${a.kind === "budget" ? "budget" : a.tool} `, el("span", { class: "dim" }, `${a.pool || "-"} / ${a.agent || "-"}`)),
        what,
        el("p", { class: "dim" }, `requested ${ago(a.requested_at)} · expires ${new Date(a.expires_at).toISOString()}`),
        reason, " ", ...buttons, note));
    }
  } catch (e) {
    view.append(failure(e));
  }
}

// ---- triggers ----

async function triggersView() {
  const view = el("section", {}, el("h1", {}, "Triggers"));
  show(view);
  try {
    const triggers = await api("GET", "/v1/triggers");
    if (!triggers.length) view.append(el("p", { class: "dim" }, "No triggers: declare `triggers:` in the agentfile, then `ninetrix up`."));
    const rows = triggers.map((t) => {
      const k = t.spec.kind;
      const rule = k.type === "webhook" ? `POST ${t.hook_path}` : k.cron ? `cron ${k.cron} (${k.timezone})` : `every ${k.every_secs}s`;
      const last = t.last ? `${t.last.outcome}${t.last.reason ? ` (${t.last.reason})` : ""} ${ago(t.last.at)}` : "-";
      return el("tr", { class: "link", onclick: () => { location.hash = `#/triggers/${t.pool}/${t.spec.name}`; } },
        el("td", {}, t.pool), el("td", {}, t.spec.name), el("td", {}, k.type), el("td", {}, t.spec.agent),
        el("td", { class: "mono" }, rule), el("td", {}, t.next_fire_at ? new Date(t.next_fire_at).toISOString() : "-"), el("td", {}, last));
    });
    if (triggers.length) {
      view.append(el("table", {},
        el("tr", {}, ...["pool", "name", "type", "agent", "rule", "next fire", "last"].map((h) => el("th", {}, h))), ...rows));
    }
  } catch (e) {
    view.append(failure(e));
  }
}

async function triggerView(pool, name) {
  const view = el("section", {}, el("h1", {}, `Trigger ${name}`), el("p", { class: "dim" }, `pool ${pool}`));
  show(view);
  try {
    const events = await api("GET", `/v1/pools/${encodeURIComponent(pool)}/triggers/${encodeURIComponent(name)}/history?limit=200`);
    view.append(el("table", {},
      el("tr", {}, ...["at", "source", "outcome", "for", "session", "detail"].map((h) => el("th", {}, h))),
      ...events.map((e) => el("tr", {},
        el("td", {}, new Date(e.at).toISOString()), el("td", {}, e.source),
        el("td", { class: e.outcome === "rejected" ? "error" : "" }, `${e.outcome}${e.reason ? ` (${e.reason})` : ""}`),
        el("td", { class: "mono" }, e.scheduled_at || e.delivery_id || "-"),
        el("td", {}, e.session ? `${e.session} #${e.inbox_seq}` : "-"), el("td", { class: "dim" }, e.detail || "")))));
  } catch (e) {
    view.append(failure(e));
  }
}

// ---- memory ----

// The query that names one memory file (its pool and agent, its session for a session's memory,
// and its path).
function memoryQuery(f) {
  const q = new URLSearchParams({ pool: f.pool, agent: f.agent, path: f.path });
  if (f.scope === "session") q.set("session", f.session);
  return q.toString();
}

// Every pool's memory files (the pools are those with threads), each opening in an editor.
async function memoryView() {
  const view = el("section", {}, el("h1", {}, "Memory"));
  const editor = el("div", { id: "memory-editor" });
  show(view);
  try {
    const threads = await api("GET", "/v1/threads?limit=1000");
    const pools = [...new Set(threads.map((t) => t.pool).filter(Boolean))].sort();
    let any = false;
    for (const pool of pools) {
      const files = await api("GET", `/v1/memories?pool=${encodeURIComponent(pool)}`);
      if (!files.length) continue;
      any = true;
      view.append(el("h2", {}, pool), el("table", {},
        el("tr", {}, ...["agent", "scope", "session", "path", "size", "updated"].map((h) => el("th", {}, h))),
        ...files.map((f) => el("tr", { class: "link", "data-memory": f.path, onclick: () => openMemory(f, editor) },
          el("td", {}, f.agent), el("td", {}, f.scope), el("td", {}, f.session || "-"),
          el("td", { class: "mono" }, f.path), el("td", {}, `${f.size} B`), el("td", { class: "dim" }, ago(f.updated_at))))));
    }
    if (!any) view.append(el("p", { class: "dim" }, "No memories yet: agents with the `memory` tool write them."));
    view.append(editor);
  } catch (e) {
    view.append(failure(e));
  }
}

// One memory file in an editor: Save overwrites it, Delete removes it.
async function openMemory(f, editor) {
  const q = memoryQuery(f);
  const note = el("p", { class: "error", role: "alert" });
  editor.replaceChildren(note);
  try {
    const file = await api("GET", `/v1/memories/file?${q}`);
    const text = el("textarea", { class: "memory", rows: "18", "aria-label": "content" });
    text.value = file.content;
    const save = async () => {
      note.textContent = "";
      try {
        await api("PUT", `/v1/memories/file?${q}`, { content: text.value });
        await memoryView();
      } catch (e) {
        note.textContent = e.message;
      }
    };
    const remove = async () => {
      if (!window.confirm(`Delete ${f.path} from ${f.agent}'s memory?`)) return;
      note.textContent = "";
      try {
        await api("DELETE", `/v1/memories/file?${q}`);
        await memoryView();
      } catch (e) {
        note.textContent = e.message;
      }
    };
    const whose = f.scope === "session" ? `session ${f.session} of ${f.agent}` : `agent ${f.agent}`;
    editor.replaceChildren(el("h3", {}, el("span", { class: "mono" }, f.path), " ", el("span", { class: "dim" }, `${f.pool} · ${whose}`)),
      text, el("p", {}, el("button", { onclick: save, "data-action": "save" }, "Save"), " ",
        el("button", { onclick: remove, "data-action": "delete" }, "Delete")), note);
  } catch (e) {
    note.textContent = e.message;
  }
}

// ---- routing ----

function route() {
  if (!session) return;
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "pools") poolsView();
  else if (parts[0] === "threads" && parts[1]) threadView(parts[1]);
  else if (parts[0] === "threads") threadsView();
  else if (parts[0] === "approvals") approvalsView();
  else if (parts[0] === "triggers" && parts[2]) triggerView(parts[1], parts[2]);
  else if (parts[0] === "triggers") triggersView();
  else if (parts[0] === "memory") memoryView();
  else if (parts[0] === "evals" && parts[1]) evalView(parts[1]);
  else if (parts[0] === "evals") evalsView();
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", () => {
  $("signin").addEventListener("submit", signIn);
  $("signout").addEventListener("click", signOut);
  start();
});
