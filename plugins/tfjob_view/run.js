// The TFJob tab: polls the run's JSON (runview/api.py) and redraws in place.
// Everything a run or a pod wrote goes in as text (textContent), never as markup.
"use strict";

const BASE = location.pathname.replace(/\/view$/, "");
const POLL_MS = 2000;
const FAILED_TAIL = 8;
const CONFIRM_MS = 10000;
const PALETTE = ["#017cee", "#e53e3e", "#38a169", "#d69e2e", "#805ad5", "#dd6b20",
                 "#319795", "#d53f8c"];
const state = { run: null, charts: {}, logReplica: "", logTimer: null, tails: {} };

function redrawCharts() {
  for (const name of Object.keys(state.charts)) {
    state.charts[name].destroy();
    delete state.charts[name];
  }
  document.getElementById("charts").replaceChildren();
  if (state.curves) drawCurves(state.curves);
}

async function getJson(path) {
  const answer = await fetch(BASE + path, { credentials: "same-origin", cache: "no-store" });
  if (!answer.ok) {
    let detail = answer.statusText;
    try { detail = (await answer.json()).detail || detail; } catch (e) { /* not JSON */ }
    throw new Error(`${answer.status}: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
  }
  return answer.json();
}

function since(start, end) {
  if (!start) return "";
  const seconds = Math.max(0, ((end ? Date.parse(end) : Date.now()) - Date.parse(start)) / 1000);
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}

function replicaId(r) { return `${r.role}-${r.index}`; }

function drawHeader(run) {
  const job = run.job;
  document.title = `${job.name || run.run_id} · TFJob`;
  document.getElementById("job-name").textContent = job.name || run.run_id;
  const badge = document.getElementById("state");
  badge.textContent = run.state || "unknown";
  badge.className = `badge st-${run.state}`;
  document.getElementById("elapsed").textContent =
    run.start ? `${run.active ? "running for" : "ran"} ${since(run.start, run.end)}` : "";
  const facts = [["tenant", job.tenant], ["mode", job.mode], ["strategy", job.strategy],
                 ["namespace", job.namespace], ["run", run.run_id]];
  if (run.attempts.length > 1) facts.push(["attempt", run.attempts.length]);
  document.getElementById("facts").replaceChildren(...facts.filter(([, v]) => v !== null && v !== undefined)
    .map(([k, v]) => el("span", {}, `${k} `, el("b", {}, v))));
  const dagRun = `/dags/${encodeURIComponent(run.dag_id)}/runs/${encodeURIComponent(run.run_id)}`;
  document.getElementById("links").replaceChildren(
    el("a", { href: dagRun, target: "_top" }, "DAG run"),
    el("a", { href: `${dagRun}/details`, target: "_top" }, "request (conf)"),
    el("a", { href: BASE, target: "_blank" }, "JSON"));
  const cancel = document.getElementById("cancel");
  cancel.hidden = !(run.can_cancel && run.active);
  const problem = document.getElementById("problem");
  problem.hidden = !run.live_error;
  problem.textContent = run.live_error || "";
  const failure = document.getElementById("launch-failure");
  failure.hidden = !run.launch_failure;
  if (run.launch_failure) {
    document.getElementById("launch-failure-text").textContent =
      JSON.stringify(run.launch_failure, null, 2);
  }
}

function drawTimeline(run) {
  const times = run.tasks.filter((t) => t.start);
  const first = Math.min(...times.map((t) => Date.parse(t.start)), run.start ? Date.parse(run.start) : Infinity);
  const last = Math.max(Date.now() * (run.active ? 1 : 0),
    ...run.tasks.map((t) => Date.parse(t.end || t.start || 0) || 0), run.end ? Date.parse(run.end) : 0);
  const span = Math.max(1, last - first);
  const rows = [];
  for (const task of run.tasks) {
    const track = el("div", { class: "track" });
    if (task.start && isFinite(first)) {
      const start = Date.parse(task.start);
      const end = task.end ? Date.parse(task.end) : Date.now();
      const bar = el("div", { class: `bar st-${task.state}`, title: `${task.task_id}: ${task.state}` });
      bar.style.left = `${(100 * (start - first)) / span}%`;
      bar.style.width = `${Math.max(0.3, (100 * (end - start)) / span)}%`;
      track.append(bar);
    }
    rows.push(el("div", { class: "mono" }, task.task_id), track,
      el("div", { class: "dur", title: task.state || "" },
        task.start ? since(task.start, task.end) : task.state || "—"));
  }
  document.getElementById("timeline").replaceChildren(...rows);
}

function drawReplicas(run) {
  const addresses = {};
  for (const row of run.cluster_rows) addresses[`${row.role}-${row.index}`] = row.address;
  document.getElementById("replicas-from").textContent =
    run.replicas_from === "kubernetes" ? "live from Kubernetes" : "as the run recorded them";
  const body = [];
  for (const r of run.replicas) {
    const id = replicaId(r);
    const failed = r.phase === "Failed" || r.phase === "Unknown" || (r.exit_code !== null && r.exit_code !== undefined && r.exit_code !== 0);
    body.push(el("tr", { class: failed ? "failed" : "", "data-replica": id },
      el("td", { class: "mono" }, id), el("td", { class: "mono" }, r.pod || ""),
      el("td", {}, r.node || ""), el("td", { class: "mono" }, addresses[id] || r.ip || ""),
      el("td", {}, el("span", { class: `badge ph-${r.phase}` }, r.phase || "")),
      el("td", {}, r.gpus ?? ""), el("td", {}, r.restarts ?? ""),
      el("td", {}, r.exit_code ?? ""), el("td", {}, [r.reason, r.message].filter(Boolean).join(": "))));
    if (failed) {
      const tail = el("pre", {}, state.tails[id] || "");
      body.push(el("tr", { class: "failed" }, el("td", { class: "tail", colspan: "9" }, tail)));
      if (state.tails[id] === undefined) {
        state.tails[id] = "";
        getJson(`/logs/${id}?tail=${FAILED_TAIL}`)
          .then((log) => { state.tails[id] = log.lines.join("\n"); tail.textContent = state.tails[id]; })
          .catch(() => { delete state.tails[id]; });
      }
    }
  }
  document.querySelector("#replicas tbody").replaceChildren(...body);
  const select = document.getElementById("log-replica");
  const ids = run.replicas.map(replicaId).sort();
  const known = [...select.options].map((o) => o.value);
  if (ids.join() !== known.join()) {
    select.replaceChildren(...ids.map((id) => el("option", { value: id }, id)));
    if (ids.includes(state.logReplica)) select.value = state.logReplica;
    else if (ids.length) { state.logReplica = select.value = ids.find((i) => !i.startsWith("ps")) || ids[0]; }
  }
}

function drawCluster(run) {
  document.querySelector("#cluster tbody").replaceChildren(...run.cluster_rows.map((row) =>
    el("tr", {}, el("td", {}, row.role), el("td", {}, row.index), el("td", { class: "mono" }, row.address))));
}

function fileLink(path, label) {
  return el("a", { href: `${BASE}/files/${path.split("/").map(encodeURIComponent).join("/")}` }, label || path);
}

function drawOutputs(run) {
  const items = [];
  if (run.run_json) items.push(el("li", {}, fileLink("run.json", "run.json (run manifest)")));
  for (const uri of run.logs) {
    const name = uri.split("/").pop();
    items.push(el("li", {}, fileLink(`logs/${name}`, `log of ${name.replace(/\.log$/, "")}`)));
  }
  if (run.model) {
    const model = el("li", {}, "model: ", el("span", { class: "muted" }, "listing…"));
    items.push(model);
    getJson("/files?under=model/").then((listing) => {
      const list = el("ul", {}, ...listing.files.slice(0, 50).map((f) => el("li", {}, fileLink(f.path))));
      model.replaceChildren("model", list);
    }).catch((error) => { model.replaceChildren(`model: ${error.message}`); });
  }
  if (!items.length) items.push(el("li", { class: "muted" }, run.active ? "archived when training ends" : "none"));
  document.getElementById("outputs").replaceChildren(...items);
}

function drawAttempts(run) {
  const card = document.getElementById("attempts-card");
  card.hidden = run.attempts.length < 2;
  document.querySelector("#attempts tbody").replaceChildren(...run.attempts.map((a) =>
    el("tr", {}, ...[a.number, a.outcome, a.started, a.ended, a.restored_checkpoint_step,
      a.failed_replica, a.exit_code, a.reason].map((v) => el("td", {}, v ?? "")))));
}

function drawCurves(answer) {
  state.curves = answer;
  const curves = answer.curves;
  const names = [];
  for (const points of Object.values(curves)) {
    for (const point of points) for (const name of Object.keys(point)) if (name !== "step" && !names.includes(name)) names.push(name);
  }
  document.getElementById("curves-empty").hidden = names.length > 0;
  document.getElementById("curves-from").textContent = {
    events: "from the run's event files", live: "live from the pods' logs", archive: "from the archived logs",
  }[answer.source] || "";
  const note = [answer.note, answer.events_error].filter(Boolean).join("; ");
  document.getElementById("curves-note").hidden = !note;
  document.getElementById("curves-note").textContent = note;
  const board = answer.tensorboard;
  document.getElementById("tensorboard").hidden = !board;
  if (board) {
    const folder = document.getElementById("tensorboard-folder");
    folder.textContent = board.folder;
    folder.href = `${BASE}/files?under=${encodeURIComponent(board.under)}`;
    document.getElementById("tensorboard-command").textContent = board.command;
    const source = board.warm_start_from;
    document.getElementById("warm-start-board").hidden = !source;
    if (source) {
      document.getElementById("warm-start-run").textContent = source.run_id;
      const sourceFolder = document.getElementById("warm-start-folder");
      sourceFolder.textContent = source.tensorboard;
      const runs = BASE.replace(/\/runs\/[^/]+\/[^/]+$/, "/runs");
      sourceFolder.href = `${runs}/${encodeURIComponent(source.dag_id)}/` +
        `${encodeURIComponent(source.run_id)}/files?under=${encodeURIComponent(board.under)}`;
    }
  }
  const holder = document.getElementById("charts");
  if (typeof Chart === "undefined") return;
  const style = getComputedStyle(document.documentElement);
  const fg = style.getPropertyValue("--muted").trim();
  const grid = style.getPropertyValue("--line").trim();
  for (const name of names) {
    const datasets = Object.entries(curves).map(([replica, points], i) => ({
      label: replica,
      data: points.filter((p) => name in p).map((p, n) => ({ x: p.step ?? n, y: p[name] })),
      borderColor: PALETTE[i % PALETTE.length], backgroundColor: PALETTE[i % PALETTE.length],
      pointRadius: 2, borderWidth: 1.5, tension: 0.2,
    })).filter((d) => d.data.length);
    let chart = state.charts[name];
    if (!chart) {
      const canvas = el("canvas", { "aria-label": `${name} over steps`, role: "img" });
      holder.append(el("div", { class: "chart", "data-metric": name }, canvas));
      chart = state.charts[name] = new Chart(canvas, {
        type: "line", data: { datasets },
        options: {
          animation: false, maintainAspectRatio: false, parsing: true,
          plugins: { title: { display: true, text: name, color: fg }, legend: { labels: { color: fg } } },
          scales: { x: { type: "linear", title: { display: true, text: "step", color: fg }, ticks: { color: fg }, grid: { color: grid } },
                    y: { ticks: { color: fg }, grid: { color: grid } } },
        },
      });
    } else {
      chart.data.datasets = datasets;
      chart.update("none");
    }
    chart.canvas.parentNode.dataset.points = String(datasets.reduce((n, d) => n + d.data.length, 0));
  }
}

async function pollLog() {
  const replica = state.logReplica;
  if (!replica) return;
  const filter = document.getElementById("log-filter").value;
  const query = `?tail=500${filter ? `&filter=${encodeURIComponent(filter)}` : ""}`;
  try {
    const answer = await getJson(`/logs/${encodeURIComponent(replica)}${query}`);
    if (answer.replica !== state.logReplica) return;
    const pane = document.getElementById("log");
    const atEnd = pane.scrollTop + pane.clientHeight >= pane.scrollHeight - 4;
    pane.textContent = answer.lines.join("\n");
    if (atEnd) pane.scrollTop = pane.scrollHeight;
    document.getElementById("log-source").textContent =
      answer.source === "live" ? "followed live" : answer.source === "archive" ? "from the archive" : "no log yet";
  } catch (error) {
    document.getElementById("log-source").textContent = error.message;
  }
}

async function poll() {
  try {
    const run = await getJson("");
    state.run = run;
    drawHeader(run); drawTimeline(run); drawReplicas(run); drawCluster(run); drawAttempts(run);
    if (!run.active || !state.outputsDrawn) { drawOutputs(run); state.outputsDrawn = !run.active; }
    drawCurves(await getJson("/curves"));
    await pollLog();
    document.getElementById("page").setAttribute("aria-busy", "false");
    if (run.active) setTimeout(poll, POLL_MS);
  } catch (error) {
    const problem = document.getElementById("problem");
    problem.hidden = false;
    problem.textContent = `The job view could not be read: ${error.message}`;
    setTimeout(poll, POLL_MS * 2);
  }
}

async function cancelRun() {
  // Asked twice in the page itself: the UI's iframe sandbox has no allow-modals, so confirm()
  // would answer false without showing anything.
  const button = document.getElementById("cancel");
  if (!state.cancelArmed) {
    state.cancelArmed = true;
    button.textContent = "Click again to cancel: active tasks fail, archive and teardown still run";
    setTimeout(() => { state.cancelArmed = false; button.textContent = "Cancel run"; }, CONFIRM_MS);
    return;
  }
  state.cancelArmed = false;
  button.textContent = "Cancel run";
  button.disabled = true;
  const note = document.getElementById("cancel-note");
  try {
    const answer = await fetch(`${BASE}/cancel`, { method: "POST", credentials: "same-origin",
      headers: { "X-TFJob-Cancel": "1" } });
    const body = await answer.json();
    note.textContent = answer.ok ? `cancelled: ${body.failed.join(", ") || "nothing active"} failed; teardown runs`
      : `cancel refused: ${body.detail}`;
  } catch (error) {
    note.textContent = `cancel failed: ${error.message}`;
  }
  button.disabled = false;
}

applyTheme();
followAirflowTheme(redrawCharts);
document.getElementById("cancel").addEventListener("click", cancelRun);
document.getElementById("log-replica").addEventListener("change", (event) => {
  state.logReplica = event.target.value;
  document.getElementById("log").textContent = "";
  pollLog();
});
document.getElementById("log-filter").addEventListener("input", () => {
  clearTimeout(state.logTimer);
  state.logTimer = setTimeout(pollLog, 300);
});
poll();
