"""End to end through the REST API of a real `airflow standalone` (scheduler, triggerer, workers).

Same world as test_pipeline_e2e (localkube, S3 server, stand-in program), but
runs are triggered over HTTP and the train task really defers to the triggerer.
"""

# ruff: noqa: F811  (pytest fixtures imported by name, then requested as parameters)
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from airflow_fixtures import start_airflow
from pipeline_fixtures import (  # noqa: F401  (pipeline_world: a pytest fixture)
    RUN_TIMEOUT_S,
    await_run,
    create_tenant_pool,
    explain_run,
    pipeline_world,
    task_log,
    task_states,
    trigger,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def airflow(pipeline_world, tmp_path_factory):
    env = {
        k: v
        for k, v in pipeline_world.env.items()
        if k.startswith("AIRFLOW_CONN_") or k == "TFJOB_REQUESTS_DIR"
    }
    # Each task process parses its DAG file, importing the provider's KubernetesPodOperator
    # (kubernetes + kubernetes_asyncio: ~2 s idle, over 10 s on 2 cores under load): give it
    # more than Airflow's default 30 s so a busy machine does not fail tasks at start.
    env["AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT"] = "120"
    # A request file, so tfjob_requests.py yields a DAG and start-up need not wait for it.
    pipeline_world.write_request(pipeline_world.request("rest-file"))
    handle = start_airflow(tmp_path_factory.mktemp("airflow-rest"), extra_env=env)
    try:
        create_tenant_pool(handle)
        yield handle
    finally:
        handle.stop()


def test_tfjob_submit_triggered_over_rest_runs_to_success(pipeline_world, airflow):
    world = pipeline_world
    conf = world.request("rest-submit")
    run = trigger(airflow, "tfjob_submit", conf)
    done = await_run(airflow, "tfjob_submit", run["dag_run_id"])
    assert done["state"] == "success", explain_run(airflow, "tfjob_submit", run["dag_run_id"])
    prefix = f"outputs/rest-submit/runs/{run['dag_run_id']}/"
    keys = world.s3_keys(prefix)
    assert prefix + "model/model.json" in keys and prefix + "run.json" in keys
    assert prefix + "logs/worker-0.log" in keys
    train_log = task_log(airflow, "tfjob_submit", run["dag_run_id"], "train", 1)
    # Streamed live by the trigger or written when train resumed: either way exactly once.
    assert train_log.count("[worker-0] standin worker-0 done") == 1, train_log[-3000:]
    assert train_log.count("[worker-0] standin worker-0 TF_CONFIG=") == 1, train_log[-3000:]
    assert world.run_objects("rest-submit") == []


def test_conf_that_does_not_fit_the_schema_is_refused_naming_the_field(pipeline_world, airflow):
    conf = {**pipeline_world.request("rest-bad"), "port": "not-a-port"}
    with pytest.raises(urllib.error.HTTPError) as refused:
        trigger(airflow, "tfjob_submit", conf)
    assert refused.value.code == 400
    body = refused.value.read().decode()
    assert "port" in body and "not-a-port" in body


def test_conf_the_request_model_refuses_fails_validate_naming_the_field_and_launches_nothing(
    pipeline_world,
    airflow,
):
    world = pipeline_world
    conf = world.request(
        "rest-invalid",
        mode="distributed",
        strategy="parameter_server",
        replicas={"chief": 0, "ps": 0, "worker": 2, "evaluator": 0},
    )
    run = trigger(airflow, "tfjob_submit", conf)
    done = await_run(airflow, "tfjob_submit", run["dag_run_id"])
    assert done["state"] == "failed"
    states = task_states(airflow, "tfjob_submit", run["dag_run_id"])
    assert states["validate"] == "failed" and states["launch"] == "upstream_failed", states
    log = task_log(airflow, "tfjob_submit", run["dag_run_id"], "validate")
    assert "replicas.ps" in log and "at least 1" in log
    assert world.run_objects("rest-invalid") == []


def test_train_stopped_mid_run_leaves_no_object_behind(pipeline_world, airflow):
    world = pipeline_world
    conf = world.request(
        "rest-kill",
        mode="distributed",
        strategy="parameter_server",
        replicas={"chief": 1, "ps": 1, "worker": 1, "evaluator": 0},
        env={"STANDIN_BEHAVIOUR": json.dumps({"*": {"sleep": 600}})},
    )
    run = trigger(airflow, "tfjob_submit", conf)
    run_id = run["dag_run_id"]
    wait_for(
        lambda: task_states(airflow, "tfjob_submit", run_id).get("train") == "deferred",
        RUN_TIMEOUT_S,
        "train to be deferred",
        interval=1.0,
    )
    assert len([o for o in world.run_objects("rest-kill") if o.startswith("Pod/")]) == 3
    # Live logs: the replicas' lines reach the train task's log while it is still deferred.
    live = wait_for(
        lambda: (
            "[chief-0] standin chief-0 TF_CONFIG="
            in (text := task_log(airflow, "tfjob_submit", run_id, "train"))
            and "[worker-0] standin worker-0 legacy JOB_NAME=worker" in text
            and text
        ),
        60,
        "replica lines in the live train log",
        interval=1.0,
    )
    assert task_states(airflow, "tfjob_submit", run_id)["train"] == "deferred", live[-3000:]
    airflow.request(
        "PATCH",
        f"/api/v2/dags/tfjob_submit/dagRuns/{run_id}/taskInstances/train",
        {"new_state": "failed"},
    )
    done = await_run(airflow, "tfjob_submit", run_id)
    assert done["state"] == "failed"
    states = task_states(airflow, "tfjob_submit", run_id)
    assert states["teardown"] == "success", states
    assert world.run_objects("rest-kill") == []


def fetch_page(airflow, path: str, token: str | None) -> tuple[int, str, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(airflow.url + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=90) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_the_tfjob_tab_shows_a_runs_cluster_spec_replicas_and_outputs(pipeline_world, airflow):
    conf = pipeline_world.request(
        "rest-tab",
        mode="distributed",
        strategy="parameter_server",
        replicas={"chief": 1, "ps": 1, "worker": 1, "evaluator": 0},
    )
    run_id = trigger(airflow, "tfjob_submit", conf)["dag_run_id"]
    done = await_run(airflow, "tfjob_submit", run_id)
    assert done["state"] == "success", explain_run(airflow, "tfjob_submit", run_id)

    # The plugin registers the tab on the DAG run page.
    plugins = airflow.request("GET", "/api/v2/plugins")["plugins"]
    views = [v for p in plugins if p["name"] == "tfjob" for v in p["external_views"]]
    assert [(v["name"], v["destination"]) for v in views] == [("TFJob", "dag_run")], plugins
    assert views[0]["href"] == "tfjob/runs/{DAG_ID}/{RUN_ID}/view"

    summary = airflow.request("GET", f"/tfjob/runs/tfjob_submit/{run_id}")
    assert summary["state"] == "success" and summary["job"]["name"] == "rest-tab"
    assert summary["job"]["namespace"] == f"tfjob-{conf['tenant']}"
    assert [t["state"] for t in summary["tasks"]] == ["success"] * 8, summary["tasks"]
    cluster = summary["cluster_spec"]
    assert sorted(cluster) == ["chief", "ps", "worker"] and len(cluster["worker"]) == 1
    ends = {f"{r['role']}-{r['index']}": r["exit_code"] for r in summary["replicas"]}
    assert ends["chief-0"] == 0 and set(ends) == {"chief-0", "ps-0", "worker-0"}
    prefix = f"s3://{pipeline_world.bucket}/outputs/rest-tab/runs/{run_id}"
    assert summary["run_json"] == f"{prefix}/run.json"
    assert summary["model"]["uri"] == f"{prefix}/model/"
    assert sorted(summary["logs"]) == [f"{prefix}/logs/{r}.log" for r in sorted(ends)]

    status, kind, page = fetch_page(airflow, f"/tfjob/runs/tfjob_submit/{run_id}/view",
                                    airflow.token())
    assert status == 200 and kind.startswith("text/html"), (status, page[:500])
    assert cluster["ps"][0] in page and f"{prefix}/run.json" in page
    # No grant or key reaches the view (the grants' values are searched for in
    # tests/test_pipeline_s3_access.py; here the marks every grant and key carries).
    text = json.dumps(summary) + page
    for mark in ("X-Amz-Signature", "x-amz-signature", "X-Amz-Credential", "x-amz-credential",
                 pipeline_world.s3.access_key, pipeline_world.s3.secret_key):
        assert mark not in text, mark

    # Same rule as the REST API's XCom routes: no credentials, no job view.
    status, _, answer = fetch_page(airflow, f"/tfjob/runs/tfjob_submit/{run_id}", None)
    assert status == 401, answer
    status, _, answer = fetch_page(airflow, "/tfjob/runs/tfjob_submit/no-such-run",
                                   airflow.token())
    assert status == 404 and "no-such-run" in answer, answer
