"""End to end: restarts of a run's gang, and a control plane that blinks (issue 15, items 1, 5).

Real `dag.test()` runs through localkube and the local S3 server, with the
stand-in training program of pipeline_fixtures (no TensorFlow: each replica
is a small Python process that prints its TF_CONFIG, sleeps or exits as the
request's env `STANDIN_BEHAVIOUR` says, and writes a model). The test acts on
the cluster while the DAG runs, from the test process:

- a replica pod is deleted with its grace period (what a node drain does)
  once every replica's program runs, i.e. once the gang has its ClusterSpec
  and trains;
- localkube's outage switch (`POST /localkube/v1/outage`) makes its API
  server answer 503 for 20 s while `train` waits.

`PodLifeRecorder` watches the job's pods from before the run starts, in one
watch stream resumed from its last resourceVersion, so it sees every
creation, graceful deletion and removal in the API server's own order; the
tests judge "no two gangs alive at once" from that order (see its docstring).

Stand-in behaviour is the same for every gang of a run (the program cannot
tell attempts apart), so a restarted gang trains as long as the first did.
The recorder lives in harness/pod_life.py.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from harness.gang_actions import abandon, delete_like_a_drain, first_gang_pods
from harness.node_power import start_node, stop_node
from harness.pipeline_fixtures import NAMESPACE, run_keys, wait_for
from harness.pod_life import start_recorder
from operators.archive import LOG_OF_A_GONE_POD
from runtime.protocol import MAIN_CONTAINER
from tfjob.naming import ANNOTATION_ATTEMPTS, LABEL_ROLE, job_selector

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

PS_REPLICAS = {"chief": 1, "ps": 1, "worker": 2}
PS_IDS = ("chief-0", "ps-0", "worker-0", "worker-1")
# How long the restarted run's chief trains, in each gang. The first gang must
# not finish before its worker-1 is deleted and the failure is noticed (about
# 10-25 s after the programs start on two busy cores), so not much shorter.
RESTART_TRAIN_SECONDS = 45
# Long enough that only the deleted or failing replica can end a run.
LONG_SECONDS = 300
OUTAGE_SECONDS = 20
# The single replica of the outage test trains this long: the outage starts once
# `train` has started (some seconds after the program did) and must end well before.
OUTAGE_TRAIN_SECONDS = 75
# Waiting for every program of a gang to print its first line (bundle fetch, gang start,
# ClusterSpec delivery, on two busy cores).
PROGRAMS_TIMEOUT_S = 300


# --- acting on the run while it trains -------------------------------------------------------


def start_request_dag(world, body):  # type: ignore[no-untyped-def]
    """Write the request file and start its DAG's `dag.test()` without waiting for it."""
    world.write_request(body)
    return world.start_dag(f"tfjob__{body['name']}")


def program_started(world, pod_name: str, replica: str) -> bool:  # type: ignore[no-untyped-def]
    """The stand-in printed its first line: its bootstrap had the ClusterSpec, training runs."""
    try:
        text = world.kube.core_v1().read_namespaced_pod_log(
            pod_name, NAMESPACE, container=MAIN_CONTAINER
        )
    except Exception:  # noqa: BLE001 - not started yet (or the API is busy): ask again
        return False
    return f"standin {replica} TF_CONFIG=" in text


def await_programs(
    world,
    job: str,
    replicas,
    running_dag=None,  # type: ignore[no-untyped-def]
    timeout: float = PROGRAMS_TIMEOUT_S,
):
    """Wait until every program of the job's first gang runs; return {replica: pod}. A
    `dag.test()` (running_dag) that ended meanwhile fails the wait with its output."""

    def running() -> dict[str, Any] | None:
        if running_dag is not None and running_dag.poll() is not None:
            out, err = running_dag.communicate()
            raise AssertionError(
                f"dag.test() of {job} ended before its programs ran:\n{(out + err)[-20000:]}"
            )
        pods = first_gang_pods(world, job)
        if set(replicas) <= set(pods) and all(
            program_started(world, pods[r].metadata.name, r) for r in replicas
        ):
            return pods
        return None

    return wait_for(
        running, timeout, f"every program of {job} ({', '.join(replicas)}) to run", interval=0.5
    )


def task_states(world, dag_id: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """{task_id: state} of the DAG's (only) run in this world's Airflow DB."""
    rows = world.query_airflow_db(
        "SELECT task_id, state FROM task_instance WHERE dag_id = :dag_id", dag_id=dag_id
    )
    return {task_id: state for task_id, state in rows}


def ps_request(world, name: str, behaviour: dict[str, Any], **changes: Any):  # type: ignore[no-untyped-def]
    return world.request(
        name,
        mode="distributed",
        strategy="parameter_server",
        replicas=PS_REPLICAS,
        success_policy="chief",
        env={"STANDIN_BEHAVIOUR": json.dumps(behaviour)},
        **changes,
    )


def run_manifest(world, result) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return json.loads(world.s3_text(run_keys(result) + "run.json"))


# --- the tests -------------------------------------------------------------------------------


def test_a_deleted_worker_restarts_the_whole_gang_which_succeeds_and_two_gangs_never_overlap(
    pipeline_world,
):
    world = pipeline_world
    job = "e2e-restart"
    # ps (not named) waits forever; the workers never decide (success_policy chief).
    body = ps_request(
        world,
        job,
        {
            "chief-0": {"sleep": RESTART_TRAIN_SECONDS, "checkpoint_every": 1},
            "worker-0": {"sleep": LONG_SECONDS},
            "worker-1": {"sleep": LONG_SECONDS},
        },
        max_restarts=2,
        checkpoint_interval=10,
    )
    recorder = start_recorder(world, job)
    running = start_request_dag(world, body)
    try:
        try:
            first = await_programs(world, job, PS_IDS, running)
            delete_like_a_drain(world, first["worker-1"])
        except BaseException:
            abandon(world, running, job)
            raise
        result = world.finish_dag(running)
    finally:
        recorder.stop()
    timeline = recorder.timeline()
    assert result.state == "success", f"{result}\n{timeline}"
    assert set(result.tasks.values()) == {"success"}, result

    # The task log: the verdict, the stop, the new gang with its ClusterSpec, the success.
    assert "worker-1 was deleted" in result.log, result
    assert "restarting as attempt 2 of 3" in result.log, result
    assert "stopping the gang of run" in result.log, result
    assert "attempt 2: every replica runs" in result.log, result
    assert "runs with its ClusterSpec" in result.log, result
    assert "at attempt 2" in result.log, result  # "training succeeded (chief-0) at attempt 2"
    # Each gang's chief printed its TF_CONFIG: the first gang's through train's log of
    # the failed gang (or the live stream), the second's as it trained.
    assert result.log.count("[chief-0] standin chief-0 TF_CONFIG=") >= 2, result

    manifest = run_manifest(world, result)
    attempts = manifest["attempts"]
    assert [a["number"] for a in attempts] == [1, 2], attempts
    failed, last = attempts
    assert failed["outcome"] == "restarted" and failed["failed_replica"] == "worker-1", attempts
    assert failed["kind"] == "deleted", attempts
    assert failed["reason"].startswith("worker-1 was deleted"), attempts
    assert failed["exit_code"] in (143, None), attempts  # SIGTERM'd, or seen gone
    assert last["outcome"] == "succeeded" and last["failed_replica"] is None, attempts
    assert failed["ended"] and last["started"] and failed["ended"] <= last["started"], attempts
    # The chief's checkpoints: synced to S3 (at the latest when its gang was stopped),
    # restored into every replica of the new gang, and the chief counted on from there.
    restored = last["restored_checkpoint_step"]
    assert failed["restored_checkpoint_step"] is None, attempts
    assert isinstance(restored, int) and restored > 0, attempts
    assert f"[chief-0] standin chief-0 resumed from step {restored}" in result.log, result
    assert f"step {restored}) from s3://" in result.log, result  # "restoring N checkpoint files"
    assert manifest["checkpoints"]["objects"] > restored, manifest["checkpoints"]
    prefix = run_keys(result)
    assert json.loads(world.s3_text(prefix + "model/model.json"))["trained_by"] == "chief-0"

    # Two gangs of the same four replicas under the same names, one after the other.
    gangs = recorder.gangs()
    assert sorted(gangs) == [1, 2], timeline
    old, new = gangs[1], gangs[2]
    assert sorted(life.replica for life in old) == list(PS_IDS), timeline
    assert sorted(life.replica for life in new) == list(PS_IDS), timeline
    assert {life.name for life in old} == {life.name for life in new}, timeline
    assert recorder.gaps == 0, f"the watch had to relist: the order is not known\n{timeline}"
    # No moment with both: every old pod was removed before the first new one was created.
    assert all(life.died_rv is not None for life in old), timeline
    assert max(life.died_rv for life in old) < min(life.born_rv for life in new), timeline
    assert recorder.overlaps == [], "\n".join(recorder.overlaps) + "\n" + timeline
    # Graceful deletions: worker-1 by the "drain", the rest by train's stop of the gang
    # (a deletionTimestamp seen before removal; with grace 0 the object would vanish at once).
    assert all(life.terminating for life in old), timeline

    # run.json's ClusterSpec is the new gang's, and the new chief trained with it.
    cluster = manifest["cluster_spec"]
    new_chief = next(life for life in new if life.replica == "chief-0")
    assert cluster["chief"][0].split(":")[0] == new_chief.ip, (cluster, timeline)
    chief_log = world.s3_text(prefix + "logs/chief-0.log")
    assert '"task":{"index":0,"type":"chief"}' in chief_log
    assert "standin chief-0 done" in chief_log
    assert world.run_objects(job) == []


def test_a_deleted_worker_fails_the_run_naming_it_when_max_restarts_is_0(pipeline_world):
    world = pipeline_world
    job = "e2e-norestart"
    body = ps_request(
        world,
        job,
        {
            "chief-0": {"sleep": LONG_SECONDS},
            "worker-0": {"sleep": LONG_SECONDS},
            "worker-1": {"sleep": LONG_SECONDS},
        },
        max_restarts=0,
    )
    recorder = start_recorder(world, job)
    running = start_request_dag(world, body)
    try:
        try:
            first = await_programs(world, job, PS_IDS, running)
            delete_like_a_drain(world, first["worker-1"])
        except BaseException:
            abandon(world, running, job)
            raise
        result = world.finish_dag(running)
    finally:
        recorder.stop()
    timeline = recorder.timeline()
    assert result.state == "failed", f"{result}\n{timeline}"
    assert result.tasks["train"] == "failed" and result.tasks["archive"] == "success", result
    assert result.tasks["teardown"] == "success", result
    assert result.tasks["publish"] == "upstream_failed", result
    # describe_run_failure: "training failed: attempt 1: worker-1 was deleted (exit code
    # 143) (not restarted: max_restarts is 0)", then the failed replica and its log tail.
    assert "training failed: attempt 1: worker-1 was deleted" in result.log, result
    assert "(not restarted: max_restarts is 0)" in result.log, result
    assert "restarting as attempt" not in result.log, result

    attempts = run_manifest(world, result)["attempts"]
    assert len(attempts) == 1, attempts
    (only,) = attempts
    assert only["number"] == 1 and only["outcome"] == "failed", attempts
    assert only["failed_replica"] == "worker-1" and only["kind"] == "deleted", attempts
    assert only["reason"].startswith("worker-1 was deleted"), attempts

    # One gang only, and the deleted worker went with its grace period.
    gangs = recorder.gangs()
    assert sorted(gangs) == [1] and len(gangs[1]) == len(PS_IDS), timeline
    worker = next(life for life in gangs[1] if life.replica == "worker-1")
    assert worker.terminating and worker.grace, timeline
    assert world.run_objects(job) == []


def test_a_worker_exiting_1_is_a_permanent_failure_and_is_not_restarted(pipeline_world):
    world = pipeline_world
    job = "e2e-permanent"
    body = world.request(
        job,
        mode="distributed",
        strategy="multi_worker_mirrored",
        replicas={"worker": 2},
        success_policy="all_workers",
        max_restarts=2,  # restart_on: the default, retryable
        env={
            "STANDIN_BEHAVIOUR": json.dumps(
                {"worker-0": {"sleep": LONG_SECONDS}, "worker-1": {"sleep": 5, "exit": 1}}
            )
        },
    )
    recorder = start_recorder(world, job)
    try:
        result = world.run_request(body)
    finally:
        recorder.stop()
    timeline = recorder.timeline()
    assert result.state == "failed", f"{result}\n{timeline}"
    assert result.tasks["train"] == "failed" and result.tasks["archive"] == "success", result
    assert result.tasks["teardown"] == "success", result
    assert (
        "training failed: attempt 1: worker-1 exited 1 "
        "(not restarted: a permanent failure under restart_on=retryable)"
    ) in result.log, result
    assert "failed with exit code 1" in result.log, result
    assert "[worker-1] standin worker-1 failing on purpose with 1" in result.log, result
    assert "restarting as attempt" not in result.log, result

    attempts = run_manifest(world, result)["attempts"]
    assert len(attempts) == 1, attempts
    (only,) = attempts
    assert only["outcome"] == "failed" and only["failed_replica"] == "worker-1", attempts
    assert only["kind"] == "exited" and only["exit_code"] == 1, attempts
    gangs = recorder.gangs()
    assert sorted(gangs) == [1] and len(gangs[1]) == 2, timeline
    assert world.run_objects(job) == []


def test_a_20s_api_server_outage_while_training_does_not_fail_the_run(pipeline_world):
    world = pipeline_world
    job = "e2e-blink"
    dag_id = f"tfjob__{job}"
    body = world.request(
        job,
        max_restarts=0,
        env={"STANDIN_BEHAVIOUR": json.dumps({"worker-0": {"sleep": OUTAGE_TRAIN_SECONDS}})},
    )
    running = start_request_dag(world, body)
    try:
        try:
            await_programs(world, job, ("worker-0",))
            program_seen = time.monotonic()
            # `train` has started (dag.test() queues a task right before it runs it, and
            # keeps it queued while its trigger runs in line): the outage hits the wait.
            wait_for(
                lambda: (
                    task_states(world, dag_id).get("train") in ("queued", "running", "deferred")
                ),
                120,
                f"train of {dag_id} to start",
                interval=0.5,
            )
            outage_started = time.monotonic()
            answer = world.kube.request("POST", "/localkube/v1/outage", {"seconds": OUTAGE_SECONDS})
            assert answer.get("active") is True, answer
            # The switch works: the API answers 503 (the client's own calls included).
            with pytest.raises(ApiException) as refused:
                world.kube.core_v1().list_namespaced_pod(NAMESPACE)
            assert refused.value.status == 503
            # The outage must end while the program still trains, else it tested nothing.
            margin = OUTAGE_TRAIN_SECONDS - (outage_started + OUTAGE_SECONDS - program_seen)
            assert margin > 10, (
                f"the outage began {outage_started - program_seen:.0f}s after the program: "
                f"too late to fall within its {OUTAGE_TRAIN_SECONDS}s; raise "
                "OUTAGE_TRAIN_SECONDS"
            )
        except BaseException:
            world.kube.request("POST", "/localkube/v1/outage", {"seconds": 0})
            abandon(world, running, job)
            raise
        result = world.finish_dag(running)
    finally:
        world.kube.request("POST", "/localkube/v1/outage", {"seconds": 0})  # others need it
    assert result.state == "success", result
    assert set(result.tasks.values()) == {"success"}, result
    # Ridden out, and said so: "pods of run ...: 503 Service Unavailable (transient);
    # relisting in 1.2s" from the trigger (or the same from another waiting call).
    assert "(transient)" in result.log and "503" in result.log, result
    assert "[worker-0] standin worker-0 done" in result.log, result
    attempts = run_manifest(world, result)["attempts"]
    assert [(a["number"], a["outcome"]) for a in attempts] == [(1, "succeeded")], attempts
    prefix = run_keys(result)
    assert prefix + "model/model.json" in world.s3_keys(prefix)
    assert world.run_objects(job) == []


def test_a_warm_start_from_latest_resumes_from_the_published_runs_checkpoint(pipeline_world):
    world = pipeline_world
    output = f"s3://{world.bucket}/outputs/e2e-warm"
    # Yesterday's run: its single replica checkpoints every second for 4 s, its bootstrap
    # copies them to S3 (the last copy after the program ended), and publish moves latest.
    first = world.run_request(
        world.request(
            "e2e-warm-first",
            output=output,
            env={"STANDIN_BEHAVIOUR": json.dumps({"*": {"sleep": 4, "checkpoint_every": 1}})},
        )
    )
    assert first.state == "success", first
    assert "standin worker-0 resumed" not in first.log, first
    first_keys = run_keys(first, "e2e-warm")
    pointer = world.s3_text(first_keys + "checkpoints/checkpoint")
    saved = int(pointer.split('"')[1].rsplit("-", 1)[1])
    assert saved >= 1, pointer

    # Today's run of another DAG on the same output starts from there.
    second = world.run_request(
        world.request(
            "e2e-warm-next",
            output=output,
            warm_start="latest",
            env={"STANDIN_BEHAVIOUR": json.dumps({"*": {"sleep": 1, "checkpoint_every": 1}})},
        )
    )
    assert second.state == "success", second
    assert f"standin worker-0 resumed from step {saved}" in second.log, second
    assert "warm_start 'latest': restoring" in second.log, second
    manifest = json.loads(world.s3_text(run_keys(second, "e2e-warm") + "run.json"))
    assert manifest["warm_start"]["step"] == saved, manifest["warm_start"]
    assert manifest["warm_start"]["source"] == f"s3://{world.bucket}/{first_keys}checkpoints/"
    assert manifest["attempts"][0]["restored_checkpoint_step"] == saved, manifest["attempts"]
    assert world.run_objects("e2e-warm-next") == []


def test_a_warm_start_from_a_run_without_checkpoints_starts_nothing(pipeline_world):
    world = pipeline_world
    result = world.run_request(world.request("e2e-warm-none", warm_start="manual__nothing"))
    assert result.state == "failed", result
    assert result.tasks["launch"] == "failed", result
    assert "warm_start: run 'manual__nothing' given, but s3://" in result.log, result
    assert "holds no checkpoint" in result.log, result
    assert world.run_objects("e2e-warm-none") == []


def test_a_node_that_stops_mid_run_restarts_the_gang_on_the_other_node(pipeline_world):
    world = pipeline_world
    job = "e2e-nodelost"
    # The chief trains to step 100 (a step a second, counting restored ones): the first
    # gang cannot finish before its lost node is noticed (40 s of silence, localkube's
    # default node-monitor grace period, as Kubernetes').
    body = ps_request(
        world,
        job,
        {
            "chief-0": {"steps": 100, "checkpoint_every": 1},
            "worker-0": {"sleep": LONG_SECONDS},
            "worker-1": {"sleep": LONG_SECONDS},
        },
        max_restarts=2,
        checkpoint_interval=10,
        active_deadline=400,
    )
    recorder = start_recorder(world, job)
    running = start_request_dag(world, body)
    lost = None
    try:
        try:
            first = await_programs(world, job, PS_IDS, running)
            # Once the chief's first periodic sync is in S3 (10 s): the lost node may be
            # the chief's, and a powered-off pod syncs nothing more.
            wait_for(
                lambda: [
                    k
                    for k in world.s3_keys(f"outputs/{job}/runs/")
                    if k.endswith("/checkpoints/checkpoint")
                ],
                60,
                "the chief's first checkpoint sync",
                interval=0.5,
            )
            lost = first["worker-1"].spec.node_name
            stop_node(world, lost)
        except BaseException:
            abandon(world, running, job)
            raise
        result = world.finish_dag(running)
    finally:
        recorder.stop()
        if lost:
            start_node(world, lost)
    timeline = recorder.timeline()
    assert result.state == "success", f"{result}\n{timeline}"
    attempts = run_manifest(world, result)["attempts"]
    assert [a["number"] for a in attempts] == [1, 2], attempts
    assert attempts[0]["kind"] == "node_lost" and attempts[0]["outcome"] == "restarted", attempts
    restored = attempts[1]["restored_checkpoint_step"]
    assert isinstance(restored, int) and restored > 0, attempts  # a periodic sync's copy
    assert f"[chief-0] standin chief-0 resumed from step {restored}" in result.log, result
    # The new gang went to the node that still answers.
    gangs = recorder.gangs()
    assert sorted(gangs) == [1, 2], timeline
    assert lost in {life.node for life in gangs[1]}, timeline
    assert {life.node for life in gangs[2]} - {None} == {"node-1", "node-2"} - {lost}, timeline
    assert world.run_objects(job) == []


def pending_worker_of_gang(world, job: str, restarted: bool, running_dag):  # type: ignore[no-untyped-def]
    """The job's worker-0 pod of the first gang (restarted False) or of a gang launch
    restarted (its pods carry the attempts), while it is Pending and not being deleted. A
    `dag.test()` (running_dag) that ended meanwhile fails the wait with its output."""
    if running_dag.poll() is not None:
        out, err = running_dag.communicate()
        raise AssertionError(f"dag.test() of {job} ended first:\n{(out + err)[-20000:]}")
    for pod in (
        world.kube.core_v1().list_namespaced_pod(NAMESPACE, label_selector=job_selector(job)).items
    ):
        labels = pod.metadata.labels or {}
        annotated = ANNOTATION_ATTEMPTS in (pod.metadata.annotations or {})
        if (
            labels.get(LABEL_ROLE) == "worker"
            and annotated == restarted
            and pod.status.phase == "Pending"
            and pod.metadata.deletion_timestamp is None
        ):
            return pod
    return None


def test_a_worker_deleted_while_the_gang_starts_restarts_it_in_launch_up_to_max_restarts(
    pipeline_world,
):
    world = pipeline_world
    job = "e2e-start-lost"
    # The worker wants more GPUs than any node has (4 each): it stays Pending, so the gang
    # is still starting (launch's watch) when the test deletes it, each gang in turn.
    body = world.request(
        job,
        mode="distributed",
        strategy="multi_worker_mirrored",
        replicas={"chief": 1, "worker": 1},
        startup_timeout=200,  # under the default active_deadline (240 s)
        max_restarts=1,
        resources={
            "chief": {"cpu": "100m", "memory": "128Mi"},
            "worker": {"cpu": "100m", "memory": "128Mi", "gpu": 5},
        },
    )
    running = start_request_dag(world, body)
    deleted = []
    try:
        for restarted in (False, True):
            pod = wait_for(
                lambda restarted=restarted: pending_worker_of_gang(world, job, restarted, running),
                PROGRAMS_TIMEOUT_S,
                f"the {'restarted' if restarted else 'first'} gang's worker pending",
                interval=0.5,
            )
            delete_like_a_drain(world, pod)
            deleted.append(pod.metadata.name)
    except BaseException:
        abandon(world, running, job)
        raise
    result = world.finish_dag(running)

    assert result.state == "failed", result
    assert result.tasks["launch"] == "failed" and result.tasks["train"] == "upstream_failed"
    assert result.tasks["archive"] == "success" and result.tasks["teardown"] == "success"
    # The first deletion restarted the gang; the second failed it at once, with the verdict,
    # long before startup_timeout.
    assert "gang start: worker-0 was deleted; restarting as attempt 2 of 2" in result.log
    assert "stopping the gang of run" in result.log, result
    assert "the pod was deleted during the gang start" in result.log, result
    assert "no restarts left: max_restarts=1, and this was attempt 2 of 2" in result.log
    assert "after startup_timeout" not in result.log, result
    assert deleted[0] == deleted[1]  # the restarted gang reuses the names

    manifest = run_manifest(world, result)
    attempts = manifest["attempts"]
    assert [(a["number"], a["outcome"]) for a in attempts] == [(1, "restarted"), (2, "failed")]
    assert {(a["failed_replica"], a["kind"]) for a in attempts} == {("worker-0", "deleted")}
    assert manifest["launch"]["error"] == "GangStartError", manifest["launch"]
    # The chief's log is kept; the deleted worker's went with its pod, and run.json says so.
    prefix = run_keys(result)
    assert prefix + "logs/chief-0.log" in world.s3_keys(prefix)
    assert manifest["logs_missing"] == {"worker-0": LOG_OF_A_GONE_POD}, manifest
    assert world.run_objects(job) == []
