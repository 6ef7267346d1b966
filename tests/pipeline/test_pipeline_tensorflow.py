"""Every example bundle trains with real TensorFlow through the pipeline, over Airflow's REST API.

One Airflow (scheduler, triggerer, workers), its requests folder holding the
four bundles' own request.yaml files (this world's tenant, bucket and
output). Each example trains once: two through their request DAGs
`tfjob__<name>`, two through the tenant's submit DAG `tfjob_submit__<tenant>`
with the request as conf (the two doors share every task after `validate`;
tests/pipeline/test_pipeline_e2e.py runs stand-in requests through both).
digits-ps goes in as its Kubeflow TFJob form (`bundles/digits-ps/tfjob.yaml`),
converted as `tshell submit` converts it (docs/kubeflow.md).
The seed-era TF1 program `digits-tf1-flags` (cluster only from `$(NAME)` in
its args) runs through the submit DAG, from both its request files: ps + 2
workers, and with a chief.
At most `MAX_IN_FLIGHT` runs at a time: a TensorFlow process takes ~650 MB
and the machine has 2 cores.

For each run: success, the model in S3, one log per replica, and a complete
run.json (request, ClusterSpec, bundle identity, image, per-replica exit
codes, timings, metrics with the stated accuracy); nothing left afterwards.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from harness.pipeline_fixtures import TENANT, explain_run, trigger
from harness.repo_root import REPO_ROOT
from harness.world_fixtures import run_world_airflow
from runtime.metric_lines import collect_metric_points
from tfjob.kubeflow.convert import Destination
from tfjob.pipeline_ids import submit_dag_id
from tshell.runs.submit import build_conf

# Six TensorFlow runs on 2 shared cores: more than pytest-timeout's default 600 s.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]

BUNDLES = REPO_ROOT / "bundles"
EXAMPLES = ("digits-ps", "digits-single", "digits-tf1", "digits-mwms")
# Which door each example goes through: one of each strategy family per door.
FROM_REQUEST_FILE = ("digits-mwms", "digits-single")
THROUGH_SUBMIT_DAG = ("digits-tf1", "digits-ps")
# Submitted from its Kubeflow TFJob file rather than its request file.
FROM_TFJOB = "digits-ps"
FLAGS_BUNDLE = "digits-tf1-flags"
# digits-mwms' TFJob with a Master replica instead of a second Worker.
MASTER_JOB = "digits-mwms-master"
FLAGS_REQUEST_FILES = ("request.yaml", "request-chief.yaml")
STATED_ACCURACY = 0.90
# TFJOB_METRIC points of the model owner: every 100 of digits-ps' 400 steps, every epoch of
# digits-single's 10, every 50 of digits-mwms' 300 steps.
CURVE_POINTS = {"digits-ps": 4, "digits-single": 10, "digits-mwms": 6, MASTER_JOB: 6}
MAX_IN_FLIGHT = 4
ALL_RUNS_TIMEOUT_S = 1200
SUBMIT_DAG = submit_dag_id(TENANT)


def example_request(world: Any, name: str, request_file: str = "request.yaml") -> dict[str, Any]:
    """The bundle's own request, pointed at this world's tenant, bucket and output."""
    request = yaml.safe_load((BUNDLES / name / request_file).read_text())
    request.update(
        tenant=TENANT,
        bundle=f"s3://{world.bucket}/bundles/{name}.tar.gz",
        output=f"s3://{world.bucket}/outputs/{request['name']}",
        startup_timeout=240,
    )
    return request


def tfjob_request(
    world: Any, name: str, tfjob_file: str = "tfjob.yaml", job: str | None = None
) -> dict[str, Any]:
    """The bundle's TFJob file converted as `tshell submit` does, pointed at this world."""
    place = Destination(
        bundle=f"s3://{world.bucket}/bundles/{name}.tar.gz",
        tenant=TENANT,
        output=f"s3://{world.bucket}/outputs/{job or name}",
    )
    return build_conf(BUNDLES / name / tfjob_file, ["startup_timeout=240"], place)


def expected_replicas(request: dict[str, Any]) -> list[str]:
    if request["mode"] == "single":
        return ["worker-0"]
    return [
        f"{role}-{index}"
        for role, count in sorted(request["replicas"].items())
        for index in range(count or 0)
    ]


@pytest.fixture(scope="module")
def examples(pipeline_world, tmp_path_factory):
    """Bundles uploaded, request files written, then one Airflow for the module."""
    from runtime.bundle import write_bundle

    world = pipeline_world
    packed = tmp_path_factory.mktemp("bundles")
    requests = {}
    for name in (*EXAMPLES, FLAGS_BUNDLE):
        if not (BUNDLES / name / "data" / "digits.npz").exists():
            pytest.fail(f"bundles/{name}/data/digits.npz is missing: run scripts/export_digits.py")
        archive = packed / f"{name}.tar.gz"
        write_bundle(BUNDLES / name, archive, name)
        world.s3.client().upload_file(str(archive), world.bucket, f"bundles/{name}.tar.gz")
    for name in EXAMPLES:
        requests[name] = example_request(world, name)
        world.write_request(requests[name])
    requests[FROM_TFJOB] = tfjob_request(world, FROM_TFJOB)
    requests[MASTER_JOB] = tfjob_request(world, "digits-mwms", "tfjob-master.yaml", MASTER_JOB)
    for request_file in FLAGS_REQUEST_FILES:  # submitted as conf only: no request DAG
        request = example_request(world, FLAGS_BUNDLE, request_file)
        requests[request["name"]] = request
    with run_world_airflow(world, tmp_path_factory.mktemp("airflow-tf")) as handle:
        yield handle, requests


def run_all(airflow: Any, runs: list[tuple[str, str, dict[str, Any]]]) -> dict[tuple, dict]:
    """Trigger `(name, dag_id, conf)` runs, at most MAX_IN_FLIGHT at a time; their final states."""
    waiting = list(runs)
    in_flight: dict[tuple[str, str], tuple[str, str]] = {}  # (dag_id, run_id) -> (name, dag_id)
    done: dict[tuple[str, str], dict[str, Any]] = {}
    deadline = time.monotonic() + ALL_RUNS_TIMEOUT_S
    while waiting or in_flight:
        while waiting and len(in_flight) < MAX_IN_FLIGHT:
            name, dag_id, conf = waiting.pop(0)
            run = trigger(airflow, dag_id, conf)
            in_flight[(dag_id, run["dag_run_id"])] = (name, dag_id)
        for (dag_id, run_id), key in list(in_flight.items()):
            run = airflow.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            if run["state"] in ("success", "failed"):
                done[key] = {**run, "dag_id": dag_id, "run_id": run_id}
                del in_flight[(dag_id, run_id)]
        if time.monotonic() > deadline:
            raise AssertionError(
                f"runs still going after {ALL_RUNS_TIMEOUT_S}s: {sorted(in_flight)}"
            )
        time.sleep(2)  # polling interval of the REST API, not a wait for a condition
    return done


def check_run(world: Any, request: dict[str, Any], dag_id: str, run_id: str) -> list[str]:
    """What is wrong with a finished run's S3 output (empty when it is complete)."""
    name = request["name"]
    prefix = f"outputs/{name}/runs/{dag_id}/{run_id}/"
    keys = world.s3_keys(prefix)
    problems = []
    if not any(k.startswith(prefix + "model/") for k in keys):
        problems.append(f"{name} {run_id}: no model under {prefix}model/")
    replicas = expected_replicas(request)
    logs = sorted(k.removeprefix(prefix + "logs/") for k in keys if k.startswith(prefix + "logs/"))
    if logs != sorted(f"{r}.log" for r in replicas):
        problems.append(f"{name} {run_id}: logs {logs}, expected one per replica {replicas}")
    manifest = json.loads(world.s3_text(prefix + "run.json"))
    if manifest["request"]["name"] != name or manifest["image"] != request["image"]:
        problems.append(f"{name}: run.json request/image {manifest['request']} {manifest['image']}")
    if request["mode"] == "distributed":
        roles = sorted(role for role, count in request["replicas"].items() if count)
        if sorted(manifest["cluster_spec"] or {}) != roles:
            problems.append(f"{name}: cluster_spec {manifest['cluster_spec']}, roles {roles}")
    bundle = manifest["bundle"] or {}
    if not (bundle.get("sha256") and bundle.get("snapshot", "").endswith("bundle.tar.gz")):
        problems.append(f"{name}: bundle identity {bundle}")
    codes = {f"{r['role']}-{r['index']}": r.get("exit_code") for r in manifest["replicas"]}
    owner = "chief-0" if "chief-0" in codes else "worker-0"
    if sorted(codes) != sorted(replicas) or codes[owner] != 0:
        problems.append(f"{name}: replicas' exit codes {codes}")
    timings = manifest["timings"]
    for when in ("run_started_at", "launch_ready_at", "train_finished_at", "archived_at"):
        if not timings.get(when):
            problems.append(f"{name}: timings has no {when}: {timings}")
    # Curves (docs/pod-protocol.md, "Metrics while training"): points the owner printed; the
    # TF2 examples' counts are fixed by their steps, a TF1 chief's depend on how the global
    # steps fell between the trainers, but its first step always reports.
    points = collect_metric_points(world.s3_text(f"{prefix}logs/{owner}.log").splitlines())
    wanted = CURVE_POINTS.get(name, 1)
    if len(points) < wanted or not all("loss" in p and "step" in p for p in points):
        problems.append(
            f"{name}: {len(points)} curve points in {owner}'s log, {wanted} wanted: {points[:3]}"
        )
    accuracy = (manifest["metrics"] or {}).get("accuracy")
    if accuracy is None or accuracy < STATED_ACCURACY:
        problems.append(f"{name}: metrics {manifest['metrics']} below {STATED_ACCURACY}")
    return problems


def test_every_example_trains_with_tensorflow_from_a_request_file_or_its_tenants_submit_dag(
    pipeline_world, examples
):
    world = pipeline_world
    airflow, requests = examples
    assert sorted(FROM_REQUEST_FILE + THROUGH_SUBMIT_DAG) == sorted(EXAMPLES)
    runs = [(name, f"tfjob__{name}", {}) for name in FROM_REQUEST_FILE]
    runs += [(name, SUBMIT_DAG, requests[name]) for name in THROUGH_SUBMIT_DAG]
    done = run_all(airflow, runs)
    assert len(done) == len(runs), sorted(done)
    failed = [
        explain_run(airflow, run["dag_id"], run["run_id"])
        for run in done.values()
        if run["state"] != "success"
    ]
    assert not failed, "\n\n".join(failed)
    problems = []
    for (name, dag_id), run in done.items():
        problems += check_run(world, requests[name], dag_id, run["run_id"])
    assert not problems, "\n".join(problems)
    for name in EXAMPLES:
        assert world.run_objects(name) == [], name


@pytest.fixture(scope="module")
def flags_and_master_runs(examples) -> dict[tuple, dict]:
    """The flags-only TF1 runs and the Master job, run together (they share no object):
    one wait for the three instead of one after another."""
    airflow, requests = examples
    names = [name for name in requests if name.startswith(FLAGS_BUNDLE)] + [MASTER_JOB]
    return run_all(airflow, [(name, SUBMIT_DAG, requests[name]) for name in names])


def test_a_flags_only_tf1_program_gets_its_cluster_from_expanded_args_through_the_submit_dag(
    pipeline_world, examples, flags_and_master_runs
):
    """`--job_name=$(JOB_NAME)` and the other flags reach the program expanded (issue 16)."""
    world = pipeline_world
    airflow, requests = examples
    names = [name for name in requests if name.startswith(FLAGS_BUNDLE)]
    assert sorted(names) == [FLAGS_BUNDLE, f"{FLAGS_BUNDLE}-chief"]
    done = {key: run for key, run in flags_and_master_runs.items() if key[0] in names}
    assert len(done) == len(names), sorted(flags_and_master_runs)
    failed = [
        explain_run(airflow, run["dag_id"], run["run_id"])
        for run in done.values()
        if run["state"] != "success"
    ]
    assert not failed, "\n\n".join(failed)
    problems = []
    for (name, dag_id), run in done.items():
        problems += check_run(world, requests[name], dag_id, run["run_id"])
        prefix = f"outputs/{name}/runs/{dag_id}/{run['run_id']}/"
        log = world.s3_text(prefix + "logs/worker-1.log")
        if "--job_name=worker --task_index=1" not in log or "invalid choice" in log:
            problems.append(f"{name}: worker-1 did not get its flags expanded:\n{log[-3000:]}")
    assert not problems, "\n".join(problems)
    for name in names:
        assert world.run_objects(name) == [], name


def test_a_tfjob_with_a_master_trains_with_tensorflow_its_pods_finding_master_in_tf_config(
    pipeline_world, examples, flags_and_master_runs
):
    """Kubeflow's `Master` keeps its name in TF_CONFIG (issue 32) and the job still trains."""
    world = pipeline_world
    airflow, requests = examples
    request = requests[MASTER_JOB]
    assert request["chief_task_type"] == "master"
    run = flags_and_master_runs[(MASTER_JOB, SUBMIT_DAG)]
    assert run["state"] == "success", explain_run(airflow, run["dag_id"], run["run_id"])
    assert check_run(world, request, run["dag_id"], run["run_id"]) == []
    prefix = f"outputs/{MASTER_JOB}/runs/{run['dag_id']}/{run['run_id']}/"
    manifest = json.loads(world.s3_text(prefix + "run.json"))
    assert sorted(manifest["cluster_spec"]) == ["chief", "worker"]  # our roles
    master_log = world.s3_text(prefix + "logs/chief-0.log")
    worker_log = world.s3_text(prefix + "logs/worker-0.log")
    assert "TF_CONFIG: task master 0, cluster master" in master_log, master_log[-3000:]
    assert "TF_CONFIG: task worker 0, cluster master" in worker_log, worker_log[-3000:]
    assert world.run_objects(MASTER_JOB) == []
