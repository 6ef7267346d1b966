"""End to end: request file → DAG → dag.test() through localkube and a real S3 server process.

The training program is a stand-in (see pipeline_fixtures): no TensorFlow, so
each scenario costs seconds, not a gigabyte of RAM per replica.
"""

from __future__ import annotations

import json

import pytest

from harness.pipeline_fixtures import NAMESPACE, TENANT, run_keys, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SMALL = {"cpu": "100m", "memory": "128Mi"}


def test_a_single_replica_request_runs_to_success_and_leaves_model_logs_and_manifest(
    pipeline_world,
):
    world = pipeline_world
    result = world.run_request(world.request("e2e-single"))
    assert result.state == "success", result
    assert set(result.tasks.values()) == {"success"}, result
    prefix = run_keys(result)
    assert prefix == f"outputs/e2e-single/runs/tfjob__e2e-single/{result.run_id}/"
    keys = world.s3_keys(prefix)
    assert prefix + "model/model.json" in keys
    assert prefix + "logs/worker-0.log" in keys
    assert prefix + "bundle.tar.gz" in keys
    log = world.s3_text(prefix + "logs/worker-0.log")
    assert "standin worker-0 done" in log and "===== fetch-bundle =====" in log
    manifest = json.loads(world.s3_text(prefix + "run.json"))
    assert manifest["request"]["name"] == "e2e-single"
    assert manifest["image"] == "python:3.11"
    assert manifest["bundle"]["sha256"] and manifest["bundle"]["snapshot"].endswith("bundle.tar.gz")
    assert [(r["role"], r["index"], r["exit_code"]) for r in manifest["replicas"]] == [
        ("worker", 0, 0)
    ]
    assert manifest["model"]["objects"] == 1
    assert manifest["metrics"]["accuracy"] == 0.99
    latest = json.loads(world.s3_text("outputs/e2e-single/latest"))
    assert latest["run_id"] == result.run_id and latest["model"].endswith(prefix + "model/")
    assert latest["dag_id"] == "tfjob__e2e-single" and latest["ordered_by"] == "run_after"
    assert "[worker-0] standin worker-0 done" in result.log
    # The presigned URLs live only in the run's Secret: never in a log, XCom or the manifest.
    for secret in ("X-Amz-Signature", "x-amz-signature", "X-Amz-Credential", world.s3.secret_key):
        assert secret not in result.log
        assert secret not in world.s3_text(prefix + "run.json")
    assert world.run_objects("e2e-single") == []


def test_a_parameter_server_job_gets_its_cluster_spec_and_succeeds_when_the_chief_is_done(
    pipeline_world,
):
    world = pipeline_world
    body = world.request(
        "e2e-ps",
        mode="distributed",
        strategy="parameter_server",
        replicas={"chief": 1, "ps": 1, "worker": 2},
        success_policy="chief",
        env={"STANDIN_SUMMARIES": "1"},
    )
    result = world.run_request(body)
    assert result.state == "success", result
    prefix = run_keys(result)
    # Every replica's TENSORBOARD_DIR in its own folder; the ps, which never exits by itself,
    # at the latest by its final pass after teardown's SIGTERM.
    for replica in ("chief-0", "ps-0", "worker-0", "worker-1"):
        key = prefix + f"tensorboard/{replica}/standin-{replica}.txt"
        assert world.s3_text(key) == f"summaries of {replica}\n", key
    manifest = json.loads(world.s3_text(prefix + "run.json"))
    cluster = manifest["cluster_spec"]
    assert sorted(cluster) == ["chief", "ps", "worker"] and len(cluster["worker"]) == 2
    for replica in ("chief-0", "ps-0", "worker-0", "worker-1"):
        assert prefix + f"logs/{replica}.log" in world.s3_keys(prefix)
    chief_log = world.s3_text(prefix + "logs/chief-0.log")
    assert (
        json.dumps(cluster, separators=(",", ":"), sort_keys=True)[1:-1].split(",")[0] in chief_log
    )
    assert '"task":{"index":0,"type":"chief"}' in chief_log
    worker_log = world.s3_text(prefix + "logs/worker-1.log")
    assert "legacy JOB_NAME=worker" in worker_log
    # ps never exits by itself: teardown stopped it, and nothing is left.
    assert world.run_objects("e2e-ps") == []


def test_a_worker_that_exits_non_zero_fails_train_with_its_exit_code_and_log_and_nothing_is_left(
    pipeline_world,
):
    world = pipeline_world
    body = world.request(
        "e2e-fail",
        mode="distributed",
        strategy="multi_worker_mirrored",
        replicas={"worker": 2},
        success_policy="all_workers",
        env={
            "STANDIN_BEHAVIOUR": json.dumps({"worker-1": {"exit": 3}, "worker-0": {"sleep": 120}})
        },
    )
    result = world.run_request(body)
    assert result.state == "failed", result
    assert result.tasks["train"] == "failed" and result.tasks["archive"] == "success", result
    assert result.tasks["teardown"] == "success" and result.tasks["publish"] == "upstream_failed", (
        result
    )
    assert "replica worker-1 (pod e2e-fail-" in result.log
    assert "failed with exit code 3" in result.log
    assert "[worker-1] standin worker-1 failing on purpose with 3" in result.log
    manifest = json.loads(world.s3_text(run_keys(result) + "run.json"))
    codes = {f"{r['role']}-{r['index']}": r["exit_code"] for r in manifest["replicas"]}
    assert codes["worker-1"] == 3
    assert world.run_objects("e2e-fail") == []


def test_a_gang_that_cannot_be_scheduled_fails_launch_with_the_scheduler_reason(pipeline_world):
    world = pipeline_world
    body = world.request(
        "e2e-gang",
        mode="distributed",
        strategy="multi_worker_mirrored",
        # The chief starts; the worker wants more GPUs than any node has (4 each), though
        # the gang fits the tenant's quota: the gang never completes.
        replicas={"chief": 1, "worker": 1},
        startup_timeout=8,
        resources={
            "chief": {"cpu": "100m", "memory": "128Mi"},
            "worker": {"cpu": "100m", "memory": "128Mi", "gpu": 5},
        },
    )
    result = world.run_request(body)
    assert result.state == "failed", result
    assert result.tasks["launch"] == "failed", result
    assert result.tasks["train"] == "upstream_failed", result
    assert result.tasks["publish"] == "upstream_failed", result
    # A failed gang start is archived and torn down like any other failed run.
    assert result.tasks["archive"] == "success" and result.tasks["teardown"] == "success", result
    assert "not every replica was running after startup_timeout=8s" in result.log
    assert "FailedScheduling" in result.log and "Insufficient nvidia.com/gpu" in result.log
    prefix = run_keys(result)
    keys = world.s3_keys(prefix)
    # The chief started (it waited for its ClusterSpec): its log is kept; the worker never ran.
    assert prefix + "logs/chief-0.log" in keys and prefix + "logs/worker-0.log" not in keys, keys
    assert "===== fetch-bundle =====" in world.s3_text(prefix + "logs/chief-0.log")
    manifest = json.loads(world.s3_text(prefix + "run.json"))
    assert manifest["launch"]["state"] == "failed", manifest["launch"]
    assert manifest["launch"]["error"] == "GangStartError"
    assert "Insufficient nvidia.com/gpu" in manifest["launch"]["message"]
    phases = {r["pod"].rsplit("-", 2)[-2]: r["phase"] for r in manifest["replicas"]}
    # (the chief may have given up waiting for its ClusterSpec by then: Running or Failed)
    assert phases["worker"] == "Pending" and phases["chief"] != "Pending", manifest["replicas"]
    assert world.run_objects("e2e-gang") == []


def fill_every_gpu(api, namespace: str) -> list[str]:
    """Blocker pods (outside the tenant's namespace and quota) that take each node's 4 GPUs."""
    api.create_namespace({"metadata": {"name": namespace}})
    names = []
    for node in ("node-1", "node-2"):
        name = f"blocker-{node}"
        api.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": name},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [
                        {
                            "name": "hold",
                            "image": "python:3.11",
                            "command": ["python3", "-c", "import time; time.sleep(600)"],
                            "resources": {
                                "requests": {"nvidia.com/gpu": "4"},
                                "limits": {"nvidia.com/gpu": "4"},
                            },
                        }
                    ],
                },
            },
        )
        names.append(name)
    return names


def start_request_dag(world, body):
    """Write the request file and start its DAG's `dag.test()` without waiting for it."""
    world.write_request(body)
    return world.start_dag(f"tfjob__{body['name']}")


def await_launch_try_state(world, dag_id: str, state: str) -> None:
    """Wait until try 1 of the run's launch task is in `state`."""
    wait_for(
        lambda: (1, state) in world.task_try_states(dag_id, "launch"),
        120,
        f"launch try 1 of {dag_id} to be {state}",
        interval=0.5,
    )


def test_airflow_retries_a_gang_start_that_failed_and_the_retry_starts_cleanly(pipeline_world):
    world = pipeline_world
    api = world.kube.core_v1()
    blockers = fill_every_gpu(api, "e2e-blockers")
    body = world.request(
        "e2e-retry",
        retries=1,
        startup_timeout=5,
        resources={"worker": {"cpu": "100m", "memory": "128Mi", "gpu": 1}},
    )
    running = start_request_dag(world, body)
    try:
        # Try 1 of launch fails (no GPU is free); then the GPUs are given back.
        await_launch_try_state(world, "tfjob__e2e-retry", "up_for_retry")
        # Try 1's pod is still there (left for archive/teardown, or for the retry to remove).
        assert [o for o in world.run_objects("e2e-retry") if o.startswith("Pod/")], (
            world.run_objects("e2e-retry")
        )
        for name in blockers:
            api.delete_namespaced_pod(name, "e2e-blockers", grace_period_seconds=0)
    finally:
        result = world.finish_dag(running)
    assert result.state == "success", result
    tries = world.task_try_states("tfjob__e2e-retry", "launch")
    assert [t for t, _ in tries] == [1, 2] and tries[-1] == (2, "success"), (tries, result)
    assert "Insufficient nvidia.com/gpu" in result.log
    assert "removing leftovers of an earlier try" in result.log
    assert "AlreadyExists" not in result.log
    prefix = run_keys(result)
    manifest = json.loads(world.s3_text(prefix + "run.json"))
    assert manifest["launch"]["state"] == "ready", manifest["launch"]
    assert [(r["role"], r["index"], r["exit_code"]) for r in manifest["replicas"]] == [
        ("worker", 0, 0)
    ]
    assert world.run_objects("e2e-retry") == []


def test_a_tenant_at_its_job_cap_waits_without_a_retry_and_starts_once_a_place_is_free(
    pipeline_world,
):
    from tfjob import naming
    from tfjob.tenants import load_tenants, resolve_tenant

    world = pipeline_world
    api = world.kube.core_v1()
    cap = resolve_tenant(load_tenants(), TENANT).max_concurrent_jobs
    # Other runs of the tenant holding objects: as many as the tenant may run.
    holders = [f"e2e-holder-{i}" for i in range(cap)]
    for name in holders:
        key = naming.run_key(name, f"tfjob__{name}", "manual__hold")
        api.create_namespaced_config_map(
            NAMESPACE,
            {
                "metadata": {
                    "name": naming.configmap_name(key),
                    "labels": naming.run_labels(
                        name, key, TENANT, naming.run_hash(f"tfjob__{name}", "manual__hold")
                    ),
                },
                "data": {"held": "yes"},
            },
        )
    running = start_request_dag(world, world.request("e2e-admit"))
    try:
        await_launch_try_state(world, "tfjob__e2e-admit", "up_for_reschedule")
        # It took nothing: its ticket is gone again and no pod was made.
        assert world.run_objects("e2e-admit") == [], world.run_objects("e2e-admit")
        api.delete_namespaced_config_map(
            naming.configmap_name(
                naming.run_key(holders[0], f"tfjob__{holders[0]}", "manual__hold")
            ),
            NAMESPACE,
        )
    finally:
        result = world.finish_dag(running)
        for name in holders[1:]:
            api.delete_namespaced_config_map(
                naming.configmap_name(naming.run_key(name, f"tfjob__{name}", "manual__hold")),
                NAMESPACE,
            )
    assert result.state == "success", result
    tries = world.task_try_states("tfjob__e2e-admit", "launch")
    assert {t for t, _ in tries} == {1} and (1, "success") in tries, tries  # no retry used
    assert f"tenant {TENANT} runs {cap} job(s) at most" in result.log
    assert "giving the slot back" in result.log and "admitted:" in result.log
    assert world.run_objects("e2e-admit") == []


def test_a_missing_bundle_fails_fetch_bundle_naming_the_key_and_launches_nothing(pipeline_world):
    world = pipeline_world
    body = world.request("e2e-nobundle", bundle=f"s3://{world.bucket}/bundles/nope.tar.gz")
    result = world.run_request(body)
    assert result.state == "failed", result
    assert result.tasks["fetch_bundle"] == "failed", result
    assert result.tasks["launch"] == "upstream_failed", result
    assert "no object with key 'bundles/nope.tar.gz'" in result.log
    assert world.run_objects("e2e-nobundle") == []


def test_a_rerun_of_the_same_run_removes_an_earlier_tries_leftovers_and_starts_cleanly(
    pipeline_world,
):
    from tfjob import naming
    from tfjob.manifests import build_container_security_context, build_pod_security_context
    from tfjob.tenants import load_tenants, resolve_tenant

    world = pipeline_world
    body = world.request("e2e-rerun")
    logical_date = "2026-01-02T03:04:05+00:00"
    run_id = f"manual__{logical_date}"
    key = naming.run_key("e2e-rerun", "tfjob__e2e-rerun", run_id)
    run_hash = naming.run_hash("tfjob__e2e-rerun", run_id)
    labels = naming.replica_labels("e2e-rerun", key, "test", run_hash, "worker", 0)
    # an earlier try's objects name their run, as every object launch creates does
    annotations = {
        naming.ANNOTATION_DAG_ID: "tfjob__e2e-rerun",
        naming.ANNOTATION_RUN_ID: run_id,
    }
    api = world.kube.core_v1()
    # What a killed earlier try left: its pod (still running) and its ConfigMap.
    api.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {
                "name": naming.pod_name(key, "worker", 0),
                "labels": labels,
                "annotations": annotations,
            },
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                # The namespace enforces Pod Security "restricted", as a tenant's does.
                "securityContext": build_pod_security_context(
                    resolve_tenant(load_tenants(), "test").pod_user
                ),
                "containers": [
                    {
                        "name": "tensorflow",
                        "image": "python:3.11",
                        "command": ["python3", "-c", "import time; time.sleep(600)"],
                        "securityContext": build_container_security_context(),
                    }
                ],
            },
        },
    )
    api.create_namespaced_config_map(
        NAMESPACE,
        {
            "metadata": {
                "name": naming.configmap_name(key),
                "labels": naming.run_labels("e2e-rerun", key, "test", run_hash),
                "annotations": annotations,
            },
            "data": {"stale": "yes"},
        },
    )
    result = world.run_request(body, logical_date=logical_date)
    assert result.state == "success", result
    assert result.run_id == run_id
    assert "removing leftovers of an earlier try" in result.log
    assert world.run_objects("e2e-rerun") == []


def test_an_older_run_finishing_after_a_newer_one_leaves_latest_on_the_newer(pipeline_world):
    """Two DAGs publish to one output: the request file's and its tenant's submit DAG. The
    submit run was asked for first (older run_after) but finishes last: `latest` stays on
    the request DAG's run, and each run keeps its own objects under its own prefix."""
    world = pipeline_world
    body = world.request("e2e-order")
    newer = world.run_request(body, logical_date="2026-06-02T00:00:00+00:00")
    assert newer.state == "success", newer
    older = world.run_submit(body, logical_date="2026-06-01T00:00:00+00:00")
    assert older.state == "success", older  # its model is kept; it just is not the latest
    assert older.tasks["publish"] == "success", older
    assert older.dag_id == f"tfjob_submit__{TENANT}"
    latest = json.loads(world.s3_text("outputs/e2e-order/latest"))
    assert (latest["dag_id"], latest["run_id"]) == (newer.dag_id, newer.run_id), latest
    assert latest["run_after"] == "2026-06-02T00:00:00+00:00"
    assert "is newer than this run" in older.log and "no Asset event" in older.log
    for result in (newer, older):
        prefix = run_keys(result, "e2e-order")
        assert prefix + "model/model.json" in world.s3_keys(prefix), result
    assert run_keys(newer, "e2e-order") != run_keys(older, "e2e-order")
    # A newer run of either DAG moves it on.
    newest = world.run_submit(body, logical_date="2026-06-03T00:00:00+00:00")
    assert newest.state == "success", newest
    latest = json.loads(world.s3_text("outputs/e2e-order/latest"))
    assert (latest["dag_id"], latest["run_id"]) == (newest.dag_id, newest.run_id), latest
    assert world.run_objects("e2e-order") == []
