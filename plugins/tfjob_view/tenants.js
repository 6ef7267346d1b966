// The tenants page: polls /tfjob/tenants (runview/tenants.py) and redraws in place.
// Names and ids go in as text (page.js's el), never as markup.
"use strict";

const TENANTS_URL = location.pathname.replace(/\/view$/, "");
const TENANTS_POLL_MS = 2000;

function runTabHref(run) {
  return `/dags/${encodeURIComponent(run.dag_id)}/runs/${encodeURIComponent(run.run_id)}/plugin/tfjob-run`;
}

function drawQuota(tenant) {
  if (!tenant.quota_applied) {
    return el("p", { class: "muted" }, `No ResourceQuota in ${tenant.namespace} (run tshell tenants apply).`);
  }
  const rows = tenant.quota.map((line) => {
    const meter = el("div", { class: "meter" }, el("div", { class: "fill" }));
    const share = Math.min(1, line.fraction);
    meter.firstChild.style.width = `${(100 * share).toFixed(1)}%`;
    if (line.fraction >= 0.9) meter.classList.add("full");
    return el("tr", { "data-resource": line.resource },
      el("td", { class: "mono" }, line.resource), el("td", { class: "used" }, line.used),
      el("td", { class: "hard" }, line.hard), el("td", {}, meter));
  });
  return el("table", { class: "grid quota" },
    el("thead", {}, el("tr", {}, el("th", {}, "resource"), el("th", {}, "used"),
      el("th", {}, "hard"), el("th", {}, ""))),
    el("tbody", {}, ...rows));
}

function drawRuns(tenant) {
  if (!tenant.runs.length) return el("p", { class: "muted" }, "No active run.");
  const rows = tenant.runs.map((run) => el("tr", { "data-run": run.run_id },
    el("td", {}, el("a", { href: runTabHref(run), target: "_top" }, run.job || run.run_id)),
    el("td", { class: "mono" }, run.dag_id), el("td", { class: "mono" }, run.run_id),
    el("td", {}, el("span", { class: `badge st-${run.state}` }, run.state)),
    el("td", {}, run.started ? since(run.started) : "—"),
    el("td", { class: "pods" }, `${run.pods_running}/${run.pods}`), el("td", {}, run.gpus)));
  return el("table", { class: "grid runs" },
    el("thead", {}, el("tr", {}, ...["job", "DAG", "run", "state", "running for",
      "pods running", "GPUs"].map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows));
}

function drawPlacements(tenant) {
  if (!tenant.placements.length) return el("p", { class: "muted" }, "No pod on any node.");
  const rows = tenant.placements.map((p) => el("tr", { "data-node": p.node },
    el("td", {}, p.node || "(not scheduled yet)"),
    el("td", { class: "mono" }, p.pods.join(", ")),
    el("td", {}, p.gpu_ids.length ? `${p.gpus} (ids ${p.gpu_ids.join(", ")})` : p.gpus)));
  return el("table", { class: "grid nodes" },
    el("thead", {}, el("tr", {}, el("th", {}, "node"), el("th", {}, "pods"), el("th", {}, "GPUs"))),
    el("tbody", {}, ...rows));
}

function since(start) {
  const seconds = Math.max(0, (Date.now() - Date.parse(start)) / 1000);
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min`;
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}

function drawTenant(tenant) {
  const slots = el("span", { class: "slots" },
    `jobs running ${tenant.jobs_running} / ${tenant.max_concurrent_jobs}`);
  return el("section", { class: "card tenant", "data-tenant": tenant.name },
    el("div", { class: "title" }, el("h2", {}, tenant.name), slots,
      el("span", { class: "muted small" }, tenant.namespace)),
    tenant.description ? el("p", { class: "muted" }, tenant.description) : null,
    el("h3", {}, "Active runs"), drawRuns(tenant),
    el("div", { class: "two" },
      el("div", {}, el("h3", {}, "Quota"), drawQuota(tenant)),
      el("div", {}, el("h3", {}, "Nodes and GPUs"), drawPlacements(tenant))));
}

async function pollTenants() {
  const problem = document.getElementById("problem");
  try {
    const answer = await fetch(TENANTS_URL, { credentials: "same-origin", cache: "no-store" });
    if (!answer.ok) throw new Error(`${answer.status}: ${answer.statusText}`);
    const body = await answer.json();
    document.getElementById("tenants").replaceChildren(...body.tenants.map(drawTenant));
    document.getElementById("none").hidden = body.tenants.length > 0;
    problem.hidden = !body.kubernetes_error;
    problem.textContent = body.kubernetes_error || "";
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.getElementById("page").setAttribute("aria-busy", "false");
  } catch (error) {
    problem.hidden = false;
    problem.textContent = `The tenants could not be read: ${error.message}`;
  }
  setTimeout(pollTenants, TENANTS_POLL_MS);
}

applyTheme();
followAirflowTheme();
pollTenants();
