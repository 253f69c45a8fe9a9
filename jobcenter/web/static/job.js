// The job page: the DAG laid out by dagre, drawn as SVG, coloured by state and kept live
// by polling the job's states (the source can become an event stream without touching the
// drawing: see subscribe()). Every text from a job is set with textContent, never as HTML.
"use strict";

(() => {
  const SVG_NS = "http://www.w3.org/2000/svg";
  // Most urgent first: a group box takes the colour of the most urgent state inside it.
  const URGENCY = [
    "failed", "upstream_failed", "timed_out", "running", "retry_wait", "queued", "awaiting",
    "waiting", "cancelled", "skipped", "succeeded",
  ];
  const DARK_TEXT_ON = new Set(["waiting", "queued", "awaiting", "retry_wait", "upstream_failed", "skipped"]);
  const JOB_DONE = new Set(["succeeded", "failed", "cancelled"]);
  const TASK_DONE = new Set(["succeeded", "failed", "upstream_failed", "cancelled", "skipped"]);
  const IDLE_POLL_MS = 3000; // a finished job is still watched: a retry re-opens it
  const RETRY_MS = 5000; // a graph that could not be read (Redis away) is asked for again
  const TASK_W = 110, TASK_H = 34, GROUP_W = 170, GROUP_H = 58, CHAR_W = 7;
  const TEXT_PAD = 8; // px between a box's edge and its text
  const MIN_VIEW_H = 220; // px: the picture's least height, whatever room the window leaves
  const ZOOM_STEP = 1.15; // one wheel notch
  const MIN_SEGMENT = 3; // px: a state one task in thousands has still shows in a group's bar
  const MEMBERS_SHOWN = 500; // tasks of a group listed in the side panel

  const root = document.getElementById("job");
  const jobId = root.dataset.jobId;
  const svg = document.getElementById("dag-svg");
  const panel = document.getElementById("panel");
  const panelBody = document.getElementById("panel-body");
  const colours = {};
  for (const s of [...URGENCY, "pending"]) {
    colours[s] = getComputedStyle(document.documentElement).getPropertyValue(`--${s}`).trim();
  }

  const model = { ids: [], states: [], picture: null, boxes: [], indexOf: new Map() };
  let selected = null; // {kind: "task" | "group", index}
  let pollMs = 500;

  // -- helpers ---------------------------------------------------------------------------

  function svgEl(name, attrs, parent) {
    const e = document.createElementNS(SVG_NS, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }

  function html(tag, text, parent, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    if (parent) parent.appendChild(e);
    return e;
  }

  // The JSON of `url`; an Error with the server's message and the HTTP status otherwise.
  async function getJSON(url) {
    const reply = await fetch(url, { headers: { Accept: "application/json" } });
    const body = await reply.json().catch(() => ({ error: reply.statusText }));
    if (!reply.ok) throw Object.assign(new Error(body.error || reply.statusText), { status: reply.status });
    return body;
  }

  // An error's message as a clause: without the full stop Redis's client ends it with.
  function why(err) {
    return err.message.replace(/\.\s*$/, "");
  }

  function when(seconds) {
    return seconds ? new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 23) + "Z" : "-";
  }

  function span(seconds) {
    if (seconds === null || seconds === undefined) return "-";
    return seconds < 1 ? `${Math.round(seconds * 1000)} ms` : `${seconds.toFixed(1)} s`;
  }

  // Set an SVG text to `full`, cut with an ellipsis where it would pass `width` px (measured:
  // a guess per character overflows on wide letters and at other fonts).
  function fitText(el, full, width) {
    el.textContent = full;
    if (el.getComputedTextLength() <= width) return;
    let lo = 0, hi = full.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      el.textContent = full.slice(0, mid) + "…";
      if (el.getComputedTextLength() <= width) lo = mid; else hi = mid - 1;
    }
    el.textContent = full.slice(0, lo) + "…";
  }

  // Each present state's width in a group's bar of `full` px: its share, but at least
  // MIN_SEGMENT (taken from the wider ones), so a single failure in a large group shows.
  function segments(counts, total, full) {
    const widths = URGENCY.map((s) => ((counts[s] || 0) / total) * full);
    const raised = widths.map((w) => (w > 0 && w < MIN_SEGMENT ? MIN_SEGMENT : w));
    const extra = raised.reduce((a, w, i) => a + w - widths[i], 0);
    const wide = widths.reduce((a, w) => a + (w >= MIN_SEGMENT ? w : 0), 0);
    return raised.map((w, i) => (widths[i] >= MIN_SEGMENT && wide ? w - (extra * w) / wide : w));
  }

  function urgent(counts) {
    for (const s of URGENCY) if (counts[s]) return s;
    return "waiting";
  }

  // -- layout and drawing ----------------------------------------------------------------

  function sizeOf(node) {
    if (node.members.length > 1) return [GROUP_W, GROUP_H];
    return [Math.min(260, Math.max(TASK_W, node.label.length * CHAR_W + 16)), TASK_H];
  }

  // Positions (centres) of the boxes and the points of each edge.
  function layout(picture, edgesKnown) {
    const sizes = picture.nodes.map(sizeOf);
    if (!edgesKnown || !picture.edges.length) {
      // no edges to rank by: a grid, in task order
      const cols = Math.max(1, Math.ceil(Math.sqrt(picture.nodes.length * 2)));
      const w = Math.max(...sizes.map((s) => s[0])) + 14, h = Math.max(...sizes.map((s) => s[1])) + 14;
      const at = sizes.map((_, i) => ({ x: 10 + (i % cols) * w + w / 2, y: 10 + Math.floor(i / cols) * h + h / 2 }));
      return { at, sizes, paths: [], width: cols * w + 20, height: Math.ceil(sizes.length / cols) * h + 20 };
    }
    const g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: "LR", nodesep: 14, ranksep: 56, marginx: 12, marginy: 12 });
    g.setDefaultEdgeLabel(() => ({}));
    sizes.forEach(([width, height], i) => g.setNode(String(i), { width, height }));
    for (const [a, b] of picture.edges) g.setEdge(String(a), String(b));
    dagre.layout(g);
    return {
      at: sizes.map((_, i) => g.node(String(i))),
      sizes,
      paths: picture.edges.map(([a, b]) => g.edge(String(a), String(b)).points),
      width: g.graph().width,
      height: g.graph().height,
    };
  }

  function draw(picture, edgesKnown) {
    const placed = layout(picture, edgesKnown);
    svg.textContent = "";
    const defs = svgEl("defs", {}, svg);
    const marker = svgEl("marker", {
      id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto",
    }, defs);
    svgEl("path", { d: "M0,0 L10,5 L0,10 z", fill: "#94a3b8" }, marker);
    const view = svgEl("g", { id: "view" }, svg);
    picture.edges.forEach(([, , count], k) => {
      const pts = placed.paths[k];
      const d = pts.map((p, i) => `${i ? "L" : "M"}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(" ");
      svgEl("path", { d, class: "edge", "marker-end": "url(#arrow)" }, view);
      if (count > 1) {
        const mid = pts[Math.floor(pts.length / 2)];
        const label = svgEl("text", { x: mid.x, y: mid.y - 4, "text-anchor": "middle", class: "edge-label" }, view);
        label.textContent = `${count}`;
      }
    });
    model.boxes = picture.nodes.map((node, i) => {
      const [w, h] = placed.sizes[i];
      const { x, y } = placed.at[i];
      const g = svgEl("g", { class: "node", transform: `translate(${(x - w / 2).toFixed(1)},${(y - h / 2).toFixed(1)})` }, view);
      const box = { node, g, w, h, rect: svgEl("rect", { class: "box", width: w, height: h, rx: 5 }, g) };
      const title = svgEl("title", {}, g);
      if (node.members.length === 1) {
        g.dataset.task = model.ids[node.members[0]];
        title.textContent = node.label;
        fitText(svgEl("text", { x: w / 2, y: h / 2 + 4, "text-anchor": "middle" }, g), node.label, w - 2 * TEXT_PAD);
      } else {
        g.dataset.group = node.label;
        box.title = title;
        box.about = `${node.label}: ${node.members.length} tasks (level ${node.level})`;
        title.textContent = box.about;
        fitText(svgEl("text", { x: TEXT_PAD, y: 16 }, g), `${node.label} ×${node.members.length}`, w - 2 * TEXT_PAD);
        box.sub = svgEl("text", { x: TEXT_PAD, y: 31, class: "sub" }, g);
        box.bars = {};
        for (const s of URGENCY) box.bars[s] = svgEl("rect", { x: TEXT_PAD, y: 40, width: 0, height: 9, fill: colours[s] }, g);
      }
      g.addEventListener("click", (ev) => {
        ev.stopPropagation();
        select(node.members.length === 1 ? { kind: "task", index: node.members[0] } : { kind: "group", index: i });
      });
      return box;
    });
    model.size = [placed.width, placed.height];
    fitView();
  }

  // -- pan and zoom (the viewBox) ----------------------------------------------------------

  let vb = { x: 0, y: 0, w: 1, h: 1 };
  let moved = false; // the person zoomed or panned since the picture was last fitted
  function setViewBox() { svg.setAttribute("viewBox", `${vb.x} ${vb.y} ${vb.w} ${vb.h}`); }

  // The picture's height: what the window has left below its top (above the legend), so the
  // whole page shows at once; at least MIN_VIEW_H.
  function roomBelow() {
    const top = svg.getBoundingClientRect().top + window.scrollY;
    const legendH = document.getElementById("legend").offsetHeight;
    const margin = parseFloat(getComputedStyle(document.querySelector("main")).paddingBottom) || 0;
    return Math.max(MIN_VIEW_H, window.innerHeight - top - legendH - margin - 2);
  }

  // Show the whole picture, shrunk as much as that takes (never enlarged): on load, on Fit,
  // and when the view's width changes before the person moved it.
  function fitView() {
    if (!model.size) return;
    const [width, height] = model.size;
    const available = svg.getBoundingClientRect().width;
    if (!available) return;
    const room = roomBelow();
    const scale = Math.min(1, available / width, room / height);
    svg.style.height = `${Math.min(room, Math.max(MIN_VIEW_H, Math.ceil(height * scale)))}px`;
    const box = svg.getBoundingClientRect();
    const unitsPerPx = Math.max(width / box.width, height / box.height, 1);
    vb = { x: 0, y: 0, w: box.width * unitsPerPx, h: box.height * unitsPerPx };
    moved = false;
    setViewBox();
  }

  // The picture at its natural size, from its start (its roots).
  function actualSize() {
    const box = svg.getBoundingClientRect();
    vb = { x: 0, y: 0, w: box.width, h: box.height };
    moved = true;
    setViewBox();
  }

  // Zoom by `f` (> 1: out) about the point (px, py) of the view, in screen px from its corner.
  function zoom(f, px, py) {
    const box = svg.getBoundingClientRect();
    const x = vb.x + (px / box.width) * vb.w;
    const y = vb.y + (py / box.height) * vb.h;
    vb = { x: x - (x - vb.x) * f, y: y - (y - vb.y) * f, w: vb.w * f, h: vb.h * f };
    moved = true;
    setViewBox();
  }

  let lastWidth = 0;
  new ResizeObserver(() => {
    const box = svg.getBoundingClientRect();
    if (Math.abs(box.width - lastWidth) <= 1) return;
    if (moved && lastWidth) { // keep the person's zoom: the same units per px, a wider view
      const unitsPerPx = vb.w / lastWidth;
      vb.w = box.width * unitsPerPx;
      vb.h = box.height * unitsPerPx;
      setViewBox();
    } else {
      fitView();
    }
    lastWidth = box.width;
  }).observe(svg);

  svg.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const box = svg.getBoundingClientRect();
    zoom(ev.deltaY > 0 ? ZOOM_STEP : 1 / ZOOM_STEP, ev.clientX - box.left, ev.clientY - box.top);
  }, { passive: false });

  let drag = null;
  svg.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, y: ev.clientY, vb: { ...vb } }; svg.classList.add("dragging"); });
  window.addEventListener("mouseup", () => { drag = null; svg.classList.remove("dragging"); });
  window.addEventListener("mousemove", (ev) => {
    if (!drag) return;
    const box = svg.getBoundingClientRect();
    vb.x = drag.vb.x - ((ev.clientX - drag.x) / box.width) * vb.w;
    vb.y = drag.vb.y - ((ev.clientY - drag.y) / box.height) * vb.h;
    moved = moved || ev.clientX !== drag.x || ev.clientY !== drag.y;
    setViewBox();
  });

  function centreZoom(f) {
    const box = svg.getBoundingClientRect();
    zoom(f, box.width / 2, box.height / 2);
  }
  document.getElementById("dag-fit").addEventListener("click", fitView);
  document.getElementById("dag-actual").addEventListener("click", actualSize);
  document.getElementById("dag-zoom-in").addEventListener("click", () => centreZoom(1 / ZOOM_STEP));
  document.getElementById("dag-zoom-out").addEventListener("click", () => centreZoom(ZOOM_STEP));

  // -- live states -------------------------------------------------------------------------

  function paint(states) {
    model.states = states;
    const total = {};
    for (const s of states) total[s] = (total[s] || 0) + 1;
    for (const box of model.boxes) {
      const members = box.node.members;
      if (members.length === 1) {
        const s = states[members[0]];
        box.g.dataset.state = s;
        box.rect.setAttribute("fill", colours[s] || "#ddd");
        box.g.classList.toggle("dark", !DARK_TEXT_ON.has(s));
        continue;
      }
      const counts = {};
      for (const m of members) counts[states[m]] = (counts[states[m]] || 0) + 1;
      const s = urgent(counts);
      box.g.dataset.state = s;
      box.rect.setAttribute("fill", "#fff");
      box.rect.setAttribute("stroke", colours[s]);
      box.rect.setAttribute("stroke-width", "2.5");
      let x = TEXT_PAD;
      const widths = segments(counts, members.length, box.w - 2 * TEXT_PAD);
      URGENCY.forEach((st, k) => {
        box.bars[st].setAttribute("x", x.toFixed(2));
        box.bars[st].setAttribute("width", widths[k].toFixed(2));
        x += widths[k];
      });
      const told = URGENCY.filter((st) => counts[st]).map((st) => `${counts[st]} ${st}`).join(" · ");
      if (told !== box.told) { // measuring is layout work: only when the counts changed
        box.told = told;
        box.title.textContent = `${box.about}: ${told}`;
        fitText(box.sub, told, box.w - 2 * TEXT_PAD);
      }
    }
    const counts = document.getElementById("counts");
    counts.textContent = "";
    for (const s of URGENCY) {
      if (!total[s]) continue;
      const item = html("span", null, counts);
      html("span", null, item, "dot").style.background = colours[s];
      item.append(`${total[s]} ${s}`);
      item.dataset.state = s;
    }
  }

  function showJob(state, finishedAt) {
    root.dataset.state = state;
    const badge = document.getElementById("job-state");
    badge.textContent = state;
    badge.className = `badge state-${state}`;
    document.getElementById("job-finished").textContent = when(finishedAt);
    const cancel = document.getElementById("cancel-job");
    const retry = document.getElementById("retry-job");
    if (cancel) cancel.classList.toggle("hidden", JOB_DONE.has(state));
    if (retry) retry.classList.toggle("hidden", state !== "failed");
  }

  // The one place that knows where live states come from: the first poll reads every task's
  // state; the next ones send the cursor it gave (`after`) and get only the tasks whose state
  // changed since, read from the event stream (or every state again when the stream cannot
  // tell). A change of the job's own state reads everything again.
  function subscribe(onStates) {
    let timer = null;
    let after = null;
    let jobState = null;
    async function tick() {
      let state = null;
      try {
        const query = after ? `?after=${encodeURIComponent(after)}` : "";
        const live = await getJSON(`/api/jobs/${jobId}/live${query}`);
        state = live.state;
        if (live.changes && state !== jobState) { // the job's own state changed: read it all
          after = null;
          timer = window.setTimeout(tick, 0);
          return;
        }
        if (live.changes) {
          live.states = model.states.slice();
          for (const [index, s] of Object.entries(live.changes)) live.states[Number(index)] = s;
        }
        after = live.after;
        jobState = state;
        onStates(live);
        setNote(null);
      } catch (err) {
        after = null;
        setNote(`live updates paused: ${why(err)}; trying again`);
      }
      timer = window.setTimeout(tick, state && JOB_DONE.has(state) ? IDLE_POLL_MS : pollMs);
    }
    document.addEventListener("jobcenter:acted", () => { window.clearTimeout(timer); after = null; tick(); });
    tick();
  }

  function onStates(live) {
    if (live.states.length !== model.ids.length) { // a map was expanded, or the job replaced
      load().catch((err) => setNote(`cannot draw the job: ${why(err)}`));
      return;
    }
    const before = selected && selected.kind === "task" ? model.states[selected.index] : null;
    paint(live.states);
    showJob(live.state, live.finished_at);
    refreshNotifications(live.state);
    if (selected) {
      const now = selected.kind === "task" ? live.states[selected.index] : null;
      if (selected.kind === "group" || now !== before || !TASK_DONE.has(now)) refreshPanel();
    }
  }

  // -- notifications -------------------------------------------------------------------------

  // The section is the server's (the same template as on load): read again only when the
  // job's state changed since it was drawn or a delivery is still under way.
  async function refreshNotifications(jobState) {
    const section = document.getElementById("notifications");
    if (!section || (section.dataset.jobState === jobState && section.dataset.settled === "yes")) return;
    const reply = await fetch(`/jobs/${jobId}/notifications`).catch(() => null);
    if (!reply || reply.status !== 200) return;
    const fresh = new DOMParser().parseFromString(await reply.text(), "text/html").getElementById("notifications");
    if (fresh) section.replaceWith(fresh);
  }

  // -- the side panel ----------------------------------------------------------------------

  // Clear (run again) and mark (settle by hand) a task: the states each takes, as the
  // server's clear and mark allow them. The reason and a mark's result go in the URL.
  const CLEARABLE = ["succeeded", "failed", "upstream_failed", "skipped"];
  const MARKABLE = ["waiting", "queued", "retry_wait", "awaiting", "failed", "upstream_failed"];
  const drafts = {}; // task id -> what was typed: the panel is drawn again while a task lives
  function operateButtons(t) {
    const canClear = CLEARABLE.includes(t.state);
    const canMark = MARKABLE.includes(t.state);
    if (!canClear && !canMark) return;
    const box = html("div", null, panelBody, "operate");
    box.id = "task-operate";
    const reason = html("input", null, box);
    reason.id = "operate-reason";
    reason.placeholder = "reason (for the history)";
    const result = canMark ? html("input", null, box, "mono") : null;
    if (result) {
      result.id = "operate-result";
      result.placeholder = "result as JSON (mark succeeded)";
    }
    const p = html("p", null, box, "actions");
    const base = `/jobs/${encodeURIComponent(jobId)}/tasks/${encodeURIComponent(t.id)}`;
    const buttons = [];
    function button(id, label, path, query, confirmText) {
      const b = html("button", label, p, "act");
      b.id = id;
      b.dataset.path = path;
      b.dataset.query = query;
      if (confirmText) b.dataset.confirm = confirmText;
      buttons.push(b);
    }
    if (canClear) {
      button("clear-task", "Clear", `${base}/clear`, "", `Run ${t.id} again?`);
      button("clear-downstream", "Clear with downstream", `${base}/clear`, "downstream=1",
        `Run ${t.id} and every task below it again?`);
    }
    if (canMark) {
      for (const outcome of ["succeeded", "skipped", "failed"]) {
        if (outcome !== t.state) {
          button(`mark-${outcome}`, `Mark ${outcome}`, `${base}/mark`, `state=${outcome}`,
            `Mark ${t.id} ${outcome}?`);
        }
      }
    }
    function refresh() {
      for (const b of buttons) {
        const q = new URLSearchParams(b.dataset.query);
        if (reason.value) q.set("reason", reason.value);
        if (result && result.value && q.get("state") === "succeeded") q.set("result", result.value);
        b.dataset.url = `${b.dataset.path}?${q}`;
      }
    }
    const draft = drafts[t.id] || (drafts[t.id] = { reason: "", result: "" });
    reason.value = draft.reason;
    if (result) result.value = draft.result;
    reason.addEventListener("input", () => { draft.reason = reason.value; refresh(); });
    if (result) result.addEventListener("input", () => { draft.result = result.value; refresh(); });
    refresh();
    window.jobcenter.wireActions(p);
  }

  function select(what) {
    selected = what;
    for (const box of model.boxes) box.g.classList.remove("selected");
    const i = what.kind === "task" ? model.picture.node_of[what.index] : what.index;
    model.boxes[i].g.classList.add("selected");
    if (what.kind === "task") history.replaceState(null, "", `#task=${encodeURIComponent(model.ids[what.index])}`);
    panel.classList.remove("hidden");
    refreshPanel();
  }

  async function refreshPanel() {
    if (!selected) return;
    // not while a person types a reason or a result: the panel is drawn again afterwards
    if (document.activeElement && document.activeElement.closest("#task-operate input")) return;
    if (selected.kind === "group") { showGroup(model.picture.nodes[selected.index]); return; }
    const asked = selected;
    try {
      const t = await getJSON(`/api/jobs/${jobId}/tasks/${asked.index}`);
      if (selected === asked) { showTask(t); showLog(t, asked.index); }
    } catch (err) {
      panelBody.textContent = err.message;
    }
  }

  function fact(dl, name, value) {
    html("dt", name, dl);
    return html("dd", value === null || value === undefined || value === "" ? "-" : value, dl);
  }

  // What a queued task waits for, as `jobcenter status` says it.
  function waitingFor(t) {
    if (t.waiting_for) return `since ${when(t.waiting_for.since)} for a worker with ${t.waiting_for.task}`;
    if (t.waiting_for_limit) return `for a slot of ${t.waiting_for_limit}`;
    if (t.waiting_for_gate) return `since ${when(t.waiting_for_gate.since)} for gate ${t.waiting_for_gate.gate}`;
    return null;
  }

  // What an awaiting task waits for (wait_for:, or the child job it spawned), a job linked.
  function awaitingFor(t, dl) {
    const w = t.awaiting;
    const what = { signal: "signal", job: "job", schedule: "the run of schedule", child: "child job" }[w.kind];
    const dd = fact(dl, "waiting", `since ${when(w.since)} for ${what} ${w.kind === "job" || w.kind === "child" ? "" : w.name}`);
    dd.id = "task-awaiting";
    if (w.job) {
      const a = html("a", w.job, dd, "mono");
      a.href = `/jobs/${encodeURIComponent(w.job)}`;
      a.id = "task-awaited-job";
    }
    if (w.kind === "signal" && document.body.dataset.actions === "on") {
      const p = html("p", null, panelBody, "actions");
      for (const [label, payload] of [["Approve", "true"], ["Reject", "false"]]) {
        const b = html("button", `${label} (signal ${w.name})`, p, "act");
        b.id = `signal-${label.toLowerCase()}`;
        b.dataset.url = `/jobs/${encodeURIComponent(jobId)}/signal/${encodeURIComponent(w.name)}?payload=${payload}`;
      }
      window.jobcenter.wireActions(p);
    }
  }

  function showTask(t) {
    panelBody.textContent = "";
    panelBody.dataset.task = t.id;
    panelBody.dataset.state = t.state;
    const h = html("h2", t.id, panelBody);
    h.append(" ");
    html("span", t.state, h, `badge state-${t.state}`);
    const dl = html("dl", null, panelBody, "facts");
    fact(dl, "task", t.task || (root.dataset.state === "succeeded" ? "(freed when the job succeeded)" : null));
    fact(dl, "attempts", t.max_attempts ? `${t.attempts} of ${t.max_attempts}` : t.attempts);
    fact(dl, "handler", t.handler).className = "mono";
    fact(dl, "queue", t.queue);
    fact(dl, "queued", when(t.queued_at));
    fact(dl, "started", when(t.started_at));
    fact(dl, "finished", when(t.finished_at));
    if (t.started_at) fact(dl, "ran", span((t.finished_at || Date.now() / 1000) - t.started_at));
    fact(dl, "progress", t.progress).id = "task-progress";
    const waiting = waitingFor(t);
    if (waiting) fact(dl, "waiting", waiting).id = "task-waiting";
    if (t.awaiting) awaitingFor(t, dl);
    if (t.args) fact(dl, "arguments", t.args).className = "mono small";
    if (t.result) fact(dl, "result", t.result).className = "mono small";
    if (t.error) {
      html("h3", "error", panelBody);
      html("pre", t.error, panelBody).id = "task-error";
    }
    if (document.body.dataset.actions === "on" && t.state === "failed") {
      const p = html("p", null, panelBody, "actions");
      const b = html("button", "Requeue this task", p, "act");
      b.id = "requeue-task";
      b.dataset.url = `/dead-letters/${encodeURIComponent(jobId)}/${encodeURIComponent(t.id)}/requeue`;
      window.jobcenter.wireActions(p);
    }
    if (document.body.dataset.actions === "on") operateButtons(t);
    html("h3", `attempts (${t.history.length})`, panelBody);
    const table = html("table", null, panelBody, "grid small");
    table.id = "task-attempts";
    const head = html("tr", null, html("thead", null, table));
    for (const c of ["#", "state", "handler", "started", "took", "error"]) html("th", c, head);
    const body = html("tbody", null, table);
    for (const a of t.history) {
      const tr = html("tr", null, body);
      html("td", a.attempt, tr);
      html("td", a.state, tr);
      html("td", (a.handler || "-").slice(0, 8), tr, "mono");
      html("td", when(a.started_at), tr);
      html("td", a.started_at && a.finished_at ? span(a.finished_at - a.started_at) : "-", tr);
      html("td", (a.error || "").split("\n")[0], tr);
    }
    if (!t.history.length) html("td", "no finished attempt yet", html("tr", null, body)).colSpan = 6;
    if (!t.history_complete) html("p", "only the newest history entries of this job were searched", panelBody, "note");
  }

  // -- the chosen attempt's log, under the task's attempts --------------------------------

  let logAttempt = { task: null, attempt: null }; // the attempt shown (null: the latest)
  let logLast = { key: null, text: "" }; // the log last read: no blank while it is read again

  async function showLog(t, index) {
    if (logAttempt.task !== t.id) logAttempt = { task: t.id, attempt: null };
    const section = html("section", null, panelBody);
    section.id = "task-log-section";
    const h = html("h3", "log", section);
    const key = `${t.id}|${logAttempt.attempt}`;
    const pre = html("pre", logLast.key === key ? logLast.text : "…", section, "log");
    pre.id = "task-log";
    const query = logAttempt.attempt ? `?attempt=${logAttempt.attempt}` : "";
    let shown;
    try {
      shown = await getJSON(`/api/jobs/${jobId}/tasks/${index}/logs${query}`);
    } catch (err) {
      pre.textContent = `the log could not be read: ${why(err)}`;
      return;
    }
    if (!section.isConnected) return; // the panel was redrawn meanwhile
    const attempts = new Set(shown.logged_attempts);
    if (shown.attempts) attempts.add(shown.attempts);
    if (attempts.size > 1) {
      const choice = html("select", null, h);
      choice.id = "task-log-attempt";
      for (const n of [...attempts].sort((a, b) => a - b)) {
        const option = html("option", `attempt ${n}`, choice);
        option.value = n;
        option.selected = n === shown.attempt;
      }
      choice.addEventListener("change", () => {
        logAttempt = { task: t.id, attempt: Number(choice.value) };
        refreshPanel();
      });
    } else if (shown.attempt) {
      h.append(` (attempt ${shown.attempt})`);
    }
    // textContent: a task's output is shown as text, never read as HTML
    pre.textContent = shown.log !== null ? shown.log
      : shown.attempt ? `attempt ${shown.attempt} wrote nothing` : "the task has not run yet";
    logLast = { key, text: pre.textContent };
    if (shown.running) html("p", "running: its output so far, as its worker's last heartbeat stored it", section, "note");
    pre.scrollTop = pre.scrollHeight; // its end: where a failed attempt says why
  }

  function showGroup(node) {
    panelBody.textContent = "";
    delete panelBody.dataset.task;
    html("h2", `${node.label} ×${node.members.length}`, panelBody);
    html("p", `level ${node.level}, grouped by ${model.picture.grouping}`, panelBody, "note");
    const order = new Map(URGENCY.map((s, i) => [s, i]));
    const members = [...node.members].sort((a, b) => order.get(model.states[a]) - order.get(model.states[b]) || a - b);
    const list = html("ul", null, panelBody, "members");
    for (const m of members.slice(0, MEMBERS_SHOWN)) {
      const li = html("li", null, list);
      html("span", model.states[m], li, `badge state-${model.states[m]}`);
      li.append(` ${model.ids[m]}`);
      li.dataset.task = model.ids[m];
      li.addEventListener("click", () => select({ kind: "task", index: m }));
    }
    if (members.length > MEMBERS_SHOWN) html("p", `and ${members.length - MEMBERS_SHOWN} more`, panelBody, "note");
  }

  document.getElementById("panel-close").addEventListener("click", () => {
    selected = null;
    panel.classList.add("hidden");
    for (const box of model.boxes) box.g.classList.remove("selected");
    history.replaceState(null, "", window.location.pathname);
  });

  // -- start -------------------------------------------------------------------------------

  function setNote(text) {
    const note = document.getElementById("dag-note");
    const base = model.note || "";
    note.textContent = text ? `${base} ${text}`.trim() : base;
    note.classList.toggle("hidden", !note.textContent);
  }

  function legend() {
    const box = document.getElementById("legend");
    box.textContent = "";
    for (const s of URGENCY) {
      const item = html("span", null, box);
      html("span", null, item, "dot").style.background = colours[s];
      item.append(s);
    }
    html("span", "· drag to move, wheel or + − to zoom", box);
  }

  async function load() {
    performance.mark("jc-graph-asked");
    const g = await getJSON(`/api/jobs/${jobId}/graph`);
    performance.mark("jc-graph-read");
    Object.assign(model, { ids: g.ids, states: g.states, picture: g.picture });
    model.indexOf = new Map(g.ids.map((id, i) => [id, i]));
    pollMs = g.poll_ms;
    const notes = [];
    if (g.picture.grouping !== "tasks") {
      notes.push(`${g.ids.length} tasks drawn as ${g.picture.nodes.length} groups (by ${g.picture.grouping}); click a group for its tasks.`);
    }
    if (!g.edges_known) notes.push("This job's edges were not kept (an older jobcenter compacted it): tasks are shown without them.");
    model.note = notes.join(" ");
    document.getElementById("job-tasks").textContent = g.ids.length;
    setNote(null);
    legend(); // before the picture: its height is what the window leaves above the legend
    draw(g.picture, g.edges_known);
    performance.mark("jc-laid-out");
    paint(g.states);
    showJob(g.job.state, g.job.finished_at);
    performance.mark("jc-drawn");
    const wanted = new URLSearchParams(window.location.hash.slice(1)).get("task");
    if (wanted && model.indexOf.has(wanted)) select({ kind: "task", index: model.indexOf.get(wanted) });
    window.jobcenterPage = { ready: true, tasks: g.ids.length, boxes: model.boxes.length };
  }

  // Draw the job, then follow it; a graph that could not be read is asked for again (Redis
  // may be restarting), unless the job is not there.
  async function start() {
    try {
      await load();
    } catch (err) {
      const again = err.status !== 404;
      model.note = `cannot draw the job: ${why(err)}${again ? "; trying again" : ""}`;
      setNote(null);
      if (again) window.setTimeout(start, RETRY_MS);
      return;
    }
    subscribe(onStates);
  }
  document.addEventListener("DOMContentLoaded", start);
})();
