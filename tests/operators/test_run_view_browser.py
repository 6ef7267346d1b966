"""The TFJob tab in headless Chromium, through the real Airflow, localkube and S3.

A person's view of a distributed run of the stand-in program (harness/standin.py,
printing a `TFJOB_METRIC` point and a timed tick line every second): the tab
inside the Airflow UI shows every replica Running, then a curve of at least 3
points, then a chosen replica's live lines within a few seconds of their
printing; after the run its archived log and its outputs' links work; Cancel
from the page tears a second run down; another tenant's user gets a 403 page.
The tenants page (a navigation entry) and its JSON show tenant `test`'s running
job with its quota use to that tenant's user, and nothing of it to `research`'s.
Airflow's own pages of the tenant's DAG (grid, graph, a task's log and XComs)
make no request its user is refused; another tenant's user is refused them.
Last, real TensorFlow: digits-ps' tab draws curves read from its event files while it trains.
Debian's `chromium` is driven by Playwright (its own browser download is not
reachable), logged in with Airflow's `_token` cookie (the UI accepts the JWT there).
The tests share one world and run in file order: the first three follow one run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from harness.airflow_fixtures import airflow_server
from harness.pipeline_fixtures import (
    TENANT,
    await_run,
    explain_run,
    trigger,
    wait_for,
)
from harness.repo_root import REPO_ROOT
from harness.world_fixtures import run_world_airflow
from runtime.bundle import write_bundle
from tfjob import pipeline_ids
from tfjob.runlayout import TENSORBOARD_DIR

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SUBMIT = pipeline_ids.submit_dag_id("test")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LAPTOP = {"width": 1366, "height": 768}
UI_TIMEOUT_MS = 90_000
LIVE_LAG_S = 6.0  # "within a few seconds": 2 s polls of the page and of Kubernetes, and slack
REPLICAS = {"chief": 1, "ps": 1, "worker": 1, "evaluator": 0}


def distributed_request(world: Any, name: str, sleep_s: int) -> dict[str, Any]:
    behaviour = {r: {"sleep": sleep_s, "metric_every": 1} for r in ("chief-0", "worker-0")}
    return world.request(
        name,
        mode="distributed",
        strategy="parameter_server",
        replicas=REPLICAS,
        active_deadline=300,
        env={"STANDIN_BEHAVIOUR": json.dumps(behaviour)},
    )


@pytest.fixture(scope="module")
def airflow(pipeline_world, tmp_path_factory):
    with run_world_airflow(pipeline_world, tmp_path_factory.mktemp("airflow-view")) as handle:
        yield handle


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        yield chromium
        chromium.close()


def open_tab(
    browser: Any, airflow: Any, run_id: str, dag_id: str = SUBMIT, color_scheme: str = "light"
) -> tuple[Any, Any]:
    """The run's TFJob tab in the Airflow UI, logged in as `airflow`'s user: (page, tab), the
    tab a frame locator (the UI may re-render its iframe; a locator finds it again)."""
    page = open_page(browser, airflow, tab_path(run_id, dag_id), color_scheme)
    return page, page.frame_locator("iframe[title=TFJob]")


def tab_path(run_id: str, dag_id: str = SUBMIT) -> str:
    return f"/dags/{dag_id}/runs/{urllib.parse.quote(run_id, safe='')}/plugin/tfjob-run"


def open_page(browser: Any, airflow: Any, path: str, color_scheme: str = "light") -> Any:
    context = browser.new_context(viewport=LAPTOP, color_scheme=color_scheme)
    context.add_cookies([{"name": "_token", "value": airflow.token(), "url": airflow.url}])
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    page.goto(airflow.url + path)
    return page


def save_screenshot(page: Any, name: str, full_page: bool = False) -> None:
    """Into $TFJOB_VIEW_SCREENSHOTS when set (scripts/view_screenshots.sh: docs/images/)."""
    folder = os.environ.get("TFJOB_VIEW_SCREENSHOTS")
    if folder:
        page.screenshot(
            path=os.path.join(folder, f"{name}.jpg"), type="jpeg", quality=70, full_page=full_page
        )


def tenant_user(airflow: Any, tenant: str) -> Any:
    users = airflow_server.read_users(airflow.home)
    return airflow.for_user(next(name for name in users if name.startswith(f"{tenant}-")))


def points_of(tab: Any, metric: str) -> int:
    chart = tab.locator(f"#charts .chart[data-metric={metric}]")
    return int(chart.get_attribute("data-points") or 0) if chart.count() else 0


@pytest.fixture(scope="module")
def running(pipeline_world, airflow) -> dict[str, Any]:
    """A distributed run that trains (and prints its curve) for 90 s: long enough for every live
    check below on a busy machine (at load 23 the page reached its last one 2.5 min in)."""
    return trigger(airflow, SUBMIT, distributed_request(pipeline_world, "view-live", 90))


def replica_phases(tab: Any) -> dict[str, str]:
    rows = tab.locator("#replicas tbody tr[data-replica]")
    return {
        rows.nth(i).get_attribute("data-replica"): rows.nth(i)
        .locator("td")
        .nth(4)
        .inner_text()
        .strip()
        for i in range(rows.count())
    }


def test_a_running_job_shows_every_replica_running_its_curve_and_live_log(
    browser, airflow, running
):
    # The tenant's own user: the tab needs the plugin list, which tenant roles may read.
    page, tab = open_tab(browser, tenant_user(airflow, "test"), running["dag_run_id"])
    expected = {"chief-0", "ps-0", "worker-0"}

    def all_running() -> dict[str, str] | None:
        phases = replica_phases(tab)
        return phases if set(phases) == expected and set(phases.values()) == {"Running"} else None

    wait_for(all_running, 150, "every replica Running in the tab", interval=0.5)
    assert tab.locator("#replicas-from").inner_text() == "live from Kubernetes"
    assert tab.locator("#state").inner_text() == "running"
    assert tab.locator("#job-name").inner_text() == "view-live"
    # The live log first, while the replicas surely still train (the 90 s run's first part):
    # on a busy machine each step below waits on the page's polls.
    tab.locator("#log-replica").select_option("worker-0")

    def fresh_tick() -> float | None:
        ticks = re.findall(
            r"standin worker-0 tick \d+ at ([0-9.]+)", tab.locator("#log").inner_text()
        )
        lag = time.time() - float(ticks[-1]) if ticks else None
        return lag if lag is not None and lag < LIVE_LAG_S else None

    lag = wait_for(fresh_tick, 60, f"a worker-0 line printed under {LIVE_LAG_S} s ago")
    assert tab.locator("#log-source").inner_text() == "followed live"
    wait_for(
        lambda: points_of(tab, "loss") >= 3 or None,
        60,
        "a loss curve of at least 3 points",
        interval=0.5,
    )
    assert tab.locator("#curves-from").inner_text() == "live from the pods' logs"
    # The ClusterSpec as a table once clusterspec pushed it (pods run before it is
    # delivered), and the timeline to scale: validate to clusterspec ended, train started.
    wait_for(
        lambda: tab.locator("#cluster tbody tr").count() == 3 or None,
        30,
        "the ClusterSpec's three rows",
    )
    wait_for(
        lambda: tab.locator("#timeline .bar").count() >= 5 or None,
        30,
        "the timeline's bars of validate to clusterspec and train",
    )

    tab.locator("#log-filter").fill("TFJOB_METRIC")
    wait_for(
        lambda: (
            (lines := tab.locator("#log").inner_text().splitlines())
            and all("TFJOB_METRIC" in line for line in lines)
            or None
        ),
        15,
        "the log filtered",
    )
    # Readable on a laptop screen: nothing wider than the frame.
    width = tab.locator("html").evaluate("html => [html.scrollWidth, html.clientWidth]")
    assert width[0] <= width[1], f"horizontal scrolling: {width}"
    assert tab.locator("#cancel").is_visible()  # the tenant's user may cancel its runs
    tab.locator("#log-filter").fill("")
    save_screenshot(page, "tfjob-tab-running")
    print(f"live log lag: {lag:.1f} s")
    page.context.close()


def test_after_the_run_the_archived_logs_curves_and_outputs_are_served(browser, airflow, running):
    run_id = running["dag_run_id"]
    done = await_run(airflow, SUBMIT, run_id)
    assert done["state"] == "success", explain_run(airflow, SUBMIT, run_id)
    page, tab = open_tab(browser, airflow, run_id, color_scheme="dark")
    wait_for(
        lambda: tab.locator("#state").inner_text() == "success" or None,
        60,
        "the tab showing the finished run",
    )
    # The UI is dark (its "system" theme on a dark browser), and the tab follows its class.
    assert "dark" in (page.locator("html").get_attribute("class") or "").split()
    assert tab.locator("html").get_attribute("data-theme") == "dark"
    assert tab.locator("#replicas-from").inner_text() == "as the run recorded them"
    assert not tab.locator("#cancel").is_visible()
    tab.locator("#log-replica").select_option("worker-0")
    wait_for(
        lambda: "standin worker-0 done" in tab.locator("#log").inner_text() or None,
        30,
        "worker-0's archived log",
    )
    assert tab.locator("#log-source").inner_text() == "from the archive"
    wait_for(lambda: points_of(tab, "loss") >= 3 or None, 30, "the archived curve")
    links = tab.locator("#outputs a")
    wait_for(lambda: links.count() >= 3 or None, 30, "the outputs' links")
    hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
    assert all(h.startswith("/tfjob/runs/") for h in hrefs), hrefs  # through Airflow only
    run_json = next(h for h in hrefs if h.endswith("/files/run.json"))
    answer = page.context.request.get(airflow.url + run_json)
    assert answer.status == 200 and json.loads(answer.body())["run_id"] == run_id
    model = next(h for h in hrefs if "/files/model/" in h)
    assert page.context.request.get(airflow.url + model).status == 200
    if os.environ.get("TFJOB_VIEW_SCREENSHOTS"):  # the whole page, in the dark theme
        quoted = urllib.parse.quote(run_id, safe="")
        dark = open_page(browser, airflow, f"/tfjob/runs/{SUBMIT}/{quoted}/view")
        dark.emulate_media(color_scheme="dark")
        dark.locator("#page[aria-busy=false]").wait_for()
        wait_for(lambda: points_of(dark, "loss") >= 3 or None, 30, "the curve drawn")
        save_screenshot(dark, "tfjob-view-finished-dark", full_page=True)
        dark.context.close()
    page.context.close()


def test_cancel_from_the_page_tears_the_run_down(browser, airflow, pipeline_world):
    run = trigger(airflow, SUBMIT, distributed_request(pipeline_world, "view-cancel", 300))
    page, tab = open_tab(browser, tenant_user(airflow, "test"), run["dag_run_id"])
    # Training has started (a curve point): train is the task Cancel fails.
    wait_for(lambda: points_of(tab, "loss") >= 1 or None, 180, "the run training")
    assert set(replica_phases(tab).values()) == {"Running"}
    cancel = tab.locator("#cancel")
    cancel.click()  # asked twice in the page: the UI's iframe sandbox allows no dialog
    assert cancel.inner_text().startswith("Click again to cancel")
    cancel.click()
    wait_for(
        lambda: "cancelled" in tab.locator("#cancel-note").inner_text() or None,
        30,
        "the page saying the run is cancelled",
    )
    done = await_run(airflow, SUBMIT, run["dag_run_id"])
    assert done["state"] == "failed"
    states = {
        ti["task_id"]: ti["state"]
        for ti in airflow.request(
            "GET", f"/api/v2/dags/{SUBMIT}/dagRuns/{run['dag_run_id']}/taskInstances"
        )["task_instances"]
    }
    assert states["train"] == "failed" and states["teardown"] == "success", states
    assert states["archive"] == "success", states
    assert pipeline_world.run_objects("view-cancel") == []
    page.context.close()


def test_another_tenants_user_gets_the_403_page(browser, airflow, running):
    other = tenant_user(airflow, "research")
    run_path = f"/tfjob/runs/{SUBMIT}/{urllib.parse.quote(running['dag_run_id'], safe='')}"
    page = open_page(browser, other, run_path + "/view")
    assert page.locator("main.refused h1").inner_text() == "403 Forbidden"
    assert page.locator("#job-name").count() == 0
    assert page.context.request.get(airflow.url + run_path).status == 403
    assert page.context.request.get(airflow.url + run_path + "/logs/worker-0").status == 403
    cancel = page.context.request.post(
        airflow.url + run_path + "/cancel", headers={"X-TFJob-Cancel": "1"}
    )
    assert cancel.status == 403
    page.context.close()
    # Inside the Airflow UI the run is not theirs: Airflow's own error page, no job view.
    page, tab = open_tab(browser, other, running["dag_run_id"])
    refused = wait_for(
        lambda: (
            page.get_by_text(re.compile(r"^(403|404)$")).count()
            or tab.locator("main.refused").count()
        ),
        60,
        "a refusal in the UI",
    )
    assert refused and tab.locator("#job-name").count() == 0
    page.context.close()


# --- the tenants page (a navigation entry): tenant A's running job, unseen by tenant B ----------

TENANTS_JSON = "/tfjob/tenants"
TENANTS_PAGE = "/plugin/tfjob-tenants"


@pytest.fixture(scope="module")
def tenant_run(pipeline_world, airflow) -> Iterator[dict[str, Any]]:
    """A distributed run of tenant `test` that trains for 45 s, in its namespace with the
    ResourceQuota and LimitRange `tshell tenants apply` makes; awaited and removed after."""
    from tfjob.tenants import load_tenants
    from tfjob.tenants.objects import build_limit_range, build_resource_quota

    tenant = load_tenants().find("test")
    api = pipeline_world.kube.core_v1()
    quota, limits = build_resource_quota(tenant), build_limit_range(tenant)
    api.create_namespaced_limit_range(tenant.namespace, limits)
    api.create_namespaced_resource_quota(tenant.namespace, quota)
    try:
        run = trigger(airflow, SUBMIT, distributed_request(pipeline_world, "view-tenants", 45))
        yield run
        await_run(airflow, SUBMIT, run["dag_run_id"])
    finally:
        api.delete_namespaced_resource_quota(quota["metadata"]["name"], tenant.namespace)
        api.delete_namespaced_limit_range(limits["metadata"]["name"], tenant.namespace)


def card_of(answer: dict[str, Any], tenant: str) -> dict[str, Any] | None:
    return next((card for card in answer["tenants"] if card["name"] == tenant), None)


def test_the_tenants_json_shows_a_running_job_and_its_quota_to_its_tenant_only(airflow, tenant_run):
    run_id = tenant_run["dag_run_id"]
    own = tenant_user(airflow, "test")

    def running_card() -> dict[str, Any] | None:
        card = card_of(own.request("GET", TENANTS_JSON), "test")
        runs = [r for r in (card or {}).get("runs", []) if r["run_id"] == run_id]
        return card if runs and runs[0]["pods"] == 3 and runs[0]["pods_running"] == 3 else None

    card = wait_for(running_card, 150, "the run's 3 pods Running on the tenants JSON", 1.0)
    row = next(r for r in card["runs"] if r["run_id"] == run_id)
    assert (row["dag_id"], row["job"], row["state"]) == (SUBMIT, "view-tenants", "running")
    assert card["jobs_running"] >= 1 and card["max_concurrent_jobs"] == 8
    quota = {line["resource"]: line for line in card["quota"]}
    assert card["quota_applied"] and set(quota) == {"cpu", "memory", "nvidia.com/gpu", "pods"}
    assert int(quota["pods"]["used"]) >= 3 and quota["pods"]["hard"] == "60"
    assert quota["cpu"]["used"] != "0" and quota["cpu"]["fraction"] > 0
    held = {pod for node in card["placements"] for pod in node["pods"]}
    assert sum(pod.endswith(("-chief-0", "-ps-0", "-worker-0")) for pod in held) >= 3
    assert all(node["node"] for node in card["placements"])  # all scheduled by now
    # Tenant B's user: its own tenant only, nothing of tenant A's.
    other = tenant_user(airflow, "research").request("GET", TENANTS_JSON)
    assert [c["name"] for c in other["tenants"]] == ["research"]
    assert run_id not in json.dumps(other)
    # No login: Airflow's 401, no card.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(airflow.url + TENANTS_JSON, timeout=30)
    assert refused.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as refused_page:
        urllib.request.urlopen(airflow.url + TENANTS_JSON + "/view", timeout=30)
    page = refused_page.value.read().decode()
    assert refused_page.value.code == 401 and "401 Not signed in" in page
    assert "href=../static/run.css" in page


def test_the_tenants_page_shows_tenant_a_its_running_job_and_tenant_b_does_not(
    browser, airflow, tenant_run
):
    run_id = tenant_run["dag_run_id"]
    page = open_page(browser, tenant_user(airflow, "test"), TENANTS_PAGE)
    frame = page.frame_locator('iframe[title="TFJob tenants"]')
    card = frame.locator("section[data-tenant=test]")
    row = card.locator(f'tr[data-run="{run_id}"]')
    wait_for(
        lambda: row.count() and row.locator("td.pods").inner_text() == "3/3",
        150,
        "tenant test's run with 3/3 pods running on the page",
        interval=0.5,
    )
    assert row.locator("a").inner_text() == "view-tenants"
    href = row.locator("a").get_attribute("href")
    assert href == tab_path(run_id)  # the run's TFJob tab
    assert card.locator("tr[data-resource=pods] td.used").inner_text() != "0"
    assert card.locator("tr[data-resource=cpu] td.hard").inner_text() == "16"
    assert "jobs running" in card.locator(".slots").inner_text()
    assert card.locator("tr[data-node]").count() >= 1
    width = frame.locator("html").evaluate("html => [html.scrollWidth, html.clientWidth]")
    assert width[0] <= width[1], f"horizontal scrolling: {width}"
    save_screenshot(page, "tenants-page")
    page.context.close()

    other = open_page(browser, tenant_user(airflow, "research"), TENANTS_PAGE)
    frame = other.frame_locator('iframe[title="TFJob tenants"]')
    wait_for(
        lambda: frame.locator("section[data-tenant=research]").count(),
        60,
        "tenant research's own card",
    )
    assert frame.locator("section[data-tenant=test]").count() == 0
    assert run_id not in frame.locator("#tenants").inner_text()
    other.context.close()


# --- Airflow's own pages of a tenant's DAG: whole for its tenant, refused to others -----------


@pytest.fixture(scope="module")
def short_run(pipeline_world, airflow) -> dict[str, Any]:
    """A finished single-replica run of tenant `test`."""
    run = trigger(airflow, SUBMIT, pipeline_world.request("view-pages"))
    done = await_run(airflow, SUBMIT, run["dag_run_id"])
    assert done["state"] == "success", explain_run(airflow, SUBMIT, run["dag_run_id"])
    return done


def airflow_page_paths(run_id: str) -> dict[str, tuple[str, str, str]]:
    """name -> (UI path, the DAG view it opens with, a request the page makes for its data)."""
    run = f"/dags/{SUBMIT}/runs/{urllib.parse.quote(run_id, safe='')}"
    return {
        "grid": (run, "grid", "/ui/grid/"),
        "graph": (run, "graph", "/ui/structure/structure_data"),
        "task log": (f"{run}/tasks/validate", "grid", "/logs/"),
        "XCom": (f"{run}/tasks/validate/xcom", "grid", "/xcomEntries"),
        "TFJob tab": (tab_path(run_id), "grid", f"/tfjob/runs/{SUBMIT}/"),
    }


# Its own Airflow and a run come first: past 600 s on a loaded 2-core machine.
@pytest.mark.timeout(1200)
def test_a_tenant_users_dag_grid_graph_log_xcom_and_tfjob_tab_answer_no_4xx(
    browser, airflow, short_run
):
    """Issue 27 item 6: the graph's /ui/structure/structure_data answered 403 to tenant users."""
    user = tenant_user(airflow, "test")
    for name, (path, dag_view, data_url) in airflow_page_paths(short_run["dag_run_id"]).items():
        context = browser.new_context(viewport=LAPTOP)
        context.add_cookies([{"name": "_token", "value": user.token(), "url": user.url}])
        # The UI keeps the grid/graph choice in localStorage (usehooks' JSON encoding).
        context.add_init_script(
            f"window.localStorage.setItem('default_dag_view', {json.dumps(json.dumps(dag_view))})"
        )
        page = context.new_page()
        page.set_default_timeout(UI_TIMEOUT_MS)
        answers: list[tuple[int, str, str]] = []
        page.on("response", lambda r, a=answers: a.append((r.status, r.request.method, r.url)))
        print(f"opening {name}: {path}")
        with page.expect_response(lambda r, u=data_url: u in r.url) as data:
            page.goto(airflow.url + path)
        assert data.value.status == 200, (name, data.value.url, data.value.status, answers)
        page.wait_for_load_state("networkidle")
        refused = [a for a in answers if 400 <= a[0] < 500]
        assert refused == [], f"{name} ({path}): {refused}"
        context.close()


@pytest.mark.timeout(1200)
def test_airflow_pages_of_another_tenants_dag_stay_refused_to_a_tenant_user(airflow, short_run):
    run_id = urllib.parse.quote(short_run["dag_run_id"], safe="")
    instance = f"/api/v2/dags/{SUBMIT}/dagRuns/{run_id}/taskInstances/validate"
    paths = [
        f"/ui/structure/structure_data?dag_id={SUBMIT}",
        f"/ui/grid/structure/{SUBMIT}",
        f"/ui/grid/runs/{SUBMIT}",
        f"/ui/grid/ti_summaries/{SUBMIT}?run_ids={run_id}",
        f"{instance}/logs/1",
        f"{instance}/xcomEntries",
    ]
    own, other = tenant_user(airflow, "test"), tenant_user(airflow, "research")
    for path in paths:
        own.request("GET", path)  # 200, else HTTPError
        with pytest.raises(urllib.error.HTTPError) as refused:
            other.request("GET", path)
        assert refused.value.code == 403, path
    # "DAG Dependencies" is global in FAB: Airflow filters the graph to readable DAGs.
    assert SUBMIT in json.dumps(airflow.request("GET", "/ui/dependencies"))  # the admin's
    assert SUBMIT not in json.dumps(other.request("GET", "/ui/dependencies"))
    assert "tfjob_submit__research" not in json.dumps(own.request("GET", "/ui/dependencies"))


@pytest.mark.timeout(1500)
def test_digits_ps_shows_curves_read_from_its_event_files_while_it_trains(
    browser, airflow, pipeline_world, tmp_path
):
    """Real TensorFlow: digits-ps' chief writes `tf.summary` scalars into its TENSORBOARD_DIR,
    the bootstrap syncs them to the run's tensorboard/chief-0/ every checkpoint interval, and
    the tab draws them while the run is still training (issue 31)."""
    bundle = REPO_ROOT / "bundles" / "digits-ps"
    archive = tmp_path / "digits-ps.tar.gz"
    write_bundle(bundle, archive, "digits-ps")
    world = pipeline_world
    world.s3.client().upload_file(str(archive), world.bucket, "bundles/digits-ps.tar.gz")
    request = yaml.safe_load((bundle / "request.yaml").read_text())
    request.update(
        name="view-summaries",
        tenant=TENANT,
        bundle=f"s3://{world.bucket}/bundles/digits-ps.tar.gz",
        output=f"s3://{world.bucket}/outputs/view-summaries",
        startup_timeout=240,
        checkpoint_interval=10,  # the summaries' sync interval too: points arrive while training
        env={**request["env"], "STEPS": "3000"},  # a point every 100 steps, ~30 in all
    )
    run_id = trigger(airflow, SUBMIT, request)["dag_run_id"]
    page, tab = open_tab(browser, tenant_user(airflow, "test"), run_id)
    try:
        wait_for(
            lambda: (
                (
                    tab.locator("#curves-from").inner_text() == "from the run's event files"
                    and points_of(tab, "loss") >= 2
                    and tab.locator("#state").inner_text() == "running"
                )
                or None
            ),
            600,
            "a loss curve of at least 2 points from the event files while the run trains",
            interval=1.0,
        )
        assert points_of(tab, "accuracy") >= 2
        assert tab.locator("#tensorboard-command").inner_text() == f"tshell tensorboard {run_id}"
        folder = tab.locator("#tensorboard-folder")
        run_prefix = f"/outputs/view-summaries/runs/{SUBMIT}/{run_id}/"
        assert folder.inner_text().endswith(run_prefix + TENSORBOARD_DIR)
        listing = page.context.request.get(airflow.url + folder.get_attribute("href"))
        paths = [f["path"] for f in json.loads(listing.body())["files"]]
        assert any("chief-0/events.out.tfevents" in path for path in paths), paths
        save_screenshot(page, "tfjob-tab-event-curves")
    finally:
        page.context.close()
    # Cancelled (the tab's own route) rather than trained to the end: the curves were the point.
    quoted = urllib.parse.quote(run_id, safe="")
    answer = urllib.request.urlopen(
        urllib.request.Request(
            f"{airflow.url}/tfjob/runs/{SUBMIT}/{quoted}/cancel",
            method="POST",
            headers={"Authorization": f"Bearer {airflow.token()}", "x-tfjob-cancel": "1"},
        ),
        timeout=60,
    )
    assert answer.status == 200
    await_run(airflow, SUBMIT, run_id)
