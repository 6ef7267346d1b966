"""The model owner's keeper: replicas are judged by `tensorflow` alone, and archive copies a
model whose upload failed out of the keeper into S3 (the real S3 server; exec played by
running runtime/keeper.py on a local workspace)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from urllib3.response import HTTPResponse

from harness.tfjob_fixtures import RUN, distributed_request_data, valid_request_data
from operators import modelrecovery
from operators.archive import archive_run
from operators.modelrecovery import RecoveryAction, RecoveryError, decide_recovery
from operators.replicas import (
    GangState,
    PodPhase,
    TrainingState,
    judge_gang_start,
    judge_training,
    read_replica_status,
)
from operators.runinfo import describe_run, read_run
from operators.triggers import decide_training, has_main_container_ended
from runtime.protocol import KEEPER_CONTAINER
from tfjob.manifests import build_pod_manifest
from tfjob.request.model import Role, load_request
from tfjob.runlayout import RunLayout

KEEPER = ("-m", "runtime.keeper")  # as protocol.KEEPER_COMMAND runs it
RUN_ID = "manual__2026-12-03T07:00:00+00:00"


def owner_pod(
    name: str,
    main: dict[str, Any],
    keeper: dict[str, Any] | None = None,
    role: str = "chief",
    phase: str = "Running",
) -> dict[str, Any]:
    statuses = [{"name": "tensorflow", "state": main}]
    if keeper is not None:
        statuses.append({"name": KEEPER_CONTAINER, "state": keeper})
    return {
        "metadata": {"name": name, "labels": {"tfjob.io/role": role, "tfjob.io/index": "0"}},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": phase, "podIP": "10.77.1.2", "containerStatuses": statuses},
    }


RUNNING = {"running": {"startedAt": "2026-12-03T07:00:00Z"}}


def exited(code: int) -> dict[str, Any]:
    return {
        "terminated": {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "finishedAt": "2026-12-03T07:05:00Z",
        }
    }


# --- the verdicts look at tensorflow, never at the keeper ---------------------------------


def test_only_the_model_owner_gets_the_keeper_container_without_credentials():
    request = load_request(distributed_request_data())

    for role, index in request.replicas_in_order():
        pod = build_pod_manifest(request, RUN, role, index)
        names = [c["name"] for c in pod["spec"]["containers"]]
        if (role, index) != (Role.CHIEF, 0):
            assert names == ["tensorflow"]
            continue
        assert names == ["tensorflow", KEEPER_CONTAINER]
        keeper = pod["spec"]["containers"][1]
        assert keeper["image"] == request.image
        assert keeper["command"] == ["python3", "-m", "runtime.keeper"]
        # HOME only (a writable one for the non-root user): no credential, no grant
        assert [e["name"] for e in keeper.get("env", [])] in ([], ["HOME"]), keeper["env"]
        assert "envFrom" not in keeper and "ports" not in keeper
        mounts = {m["name"]: m for m in keeper["volumeMounts"]}
        assert set(mounts) == {"tfjob-runtime", "tfjob-workspace"}
        assert mounts["tfjob-workspace"] == {
            "name": "tfjob-workspace",
            "mountPath": "/tfjob/workspace",
            "readOnly": True,
        }
        assert keeper["resources"]["requests"] == {"cpu": "10m", "memory": "32Mi"}
        assert "nvidia.com/gpu" not in keeper["resources"]["limits"]


def test_a_single_replica_owns_the_model_and_gets_the_keeper():
    request = load_request(valid_request_data())

    pod = build_pod_manifest(request, RUN, Role.WORKER, 0)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["tensorflow", KEEPER_CONTAINER]


@pytest.mark.parametrize(
    ("code", "phase"), [(0, PodPhase.SUCCEEDED), (74, PodPhase.FAILED), (3, PodPhase.FAILED)]
)
def test_a_finished_main_container_decides_the_replica_while_the_keeper_runs(code, phase):
    replica = read_replica_status(owner_pod("job-chief-0", exited(code), RUNNING))
    assert replica.phase is phase and replica.exit_code == code


def test_a_running_main_container_is_running_whatever_the_keeper_does():
    for keeper in (RUNNING, exited(0), None):
        replica = read_replica_status(owner_pod("job-chief-0", RUNNING, keeper))
        assert replica.phase is PodPhase.RUNNING and replica.exit_code is None


def test_training_succeeds_when_the_chief_exits_0_though_its_keeper_keeps_the_pod_running():
    pods = [owner_pod("job-chief-0", exited(0), RUNNING), owner_pod("job-ps-0", RUNNING, role="ps")]
    verdict = judge_training(pods, ["chief-0"], ["job-chief-0", "job-ps-0"])
    assert verdict.state is TrainingState.SUCCEEDED
    event = decide_training(
        {p["metadata"]["name"]: p for p in pods},
        ["chief-0"],
        ["job-chief-0", "job-ps-0"],
        deadline=float("inf"),
    )
    assert event.state is TrainingState.SUCCEEDED
    assert event.replicas[0].phase == "Succeeded"
    assert has_main_container_ended(pods[0])


def test_training_fails_with_the_chief_whose_upload_failed():
    pods = [owner_pod("job-chief-0", exited(74), RUNNING)]
    verdict = judge_training(pods, ["chief-0"], ["job-chief-0"])
    assert verdict.state is TrainingState.FAILED
    assert verdict.failed_replica.exit_code == 74


def test_training_still_runs_while_the_chief_does_though_the_keeper_runs_too():
    pods = [owner_pod("job-chief-0", RUNNING, RUNNING)]
    assert judge_training(pods, ["chief-0"], ["job-chief-0"]).state is TrainingState.RUNNING


def test_an_owner_pod_with_both_containers_running_counts_as_started():
    verdict = judge_gang_start([owner_pod("job-chief-0", RUNNING, RUNNING)], ["job-chief-0"])
    assert verdict.state is GangState.READY


# --- when archive recovers ---------------------------------------------------------------


def test_recovery_when_the_upload_failed_or_the_model_is_missing_and_the_keeper_runs():
    decide = decide_recovery
    assert decide(owner_pod("p", exited(74), RUNNING), 3).action is RecoveryAction.RECOVER
    assert decide(owner_pod("p", exited(0), RUNNING), 0).action is RecoveryAction.RECOVER
    assert decide(owner_pod("p", exited(0), RUNNING), 2).action is RecoveryAction.SKIP
    assert decide(owner_pod("p", exited(1), RUNNING), 0).action is RecoveryAction.SKIP
    assert decide(owner_pod("p", RUNNING, RUNNING), 0).action is RecoveryAction.SKIP
    assert decide(None, 0).action is RecoveryAction.SKIP
    gone = decide(owner_pod("p", exited(74), exited(0)), 0)
    assert gone.action is RecoveryAction.SKIP and "not running" in gone.reason


# --- copying out of the keeper into S3 ---------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    (ws / "model" / "variables").mkdir(parents=True)
    (ws / "model" / "saved_model.pb").write_bytes(os.urandom(10_000))
    (ws / "model" / "variables" / "variables.data-00000-of-00001").write_bytes(os.urandom(2500))
    (ws / "model" / "empty").write_bytes(b"")
    (ws / "metrics.json").write_text('{"accuracy": 0.97}')
    return ws


@pytest.fixture
def local_exec(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """exec_keeper played by running keeper.py on `workspace` (what exec runs in the pod)."""
    calls: list[list[str]] = []

    def run_keeper(api: Any, namespace: str, pod: str, args: list[str], timeout: float = 60):
        calls.append(args)
        done = subprocess.run(
            [sys.executable, "-I", *KEEPER, *args],
            capture_output=True,
            text=True,
            env={"TFJOB_WORKSPACE": str(workspace)},
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RecoveryError(
                f"pod {pod}: keeper.py {args[0]} exited with code "
                f"{done.returncode}: {done.stderr.strip()}"
            )
        return done.stdout

    monkeypatch.setattr(modelrecovery, "exec_keeper", run_keeper)
    return calls


def stored(s3: Any, bucket: str, prefix: str) -> dict[str, bytes]:
    answer = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return {
        item["Key"][len(prefix) :]: s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
        for item in answer.get("Contents", [])
    }


def test_every_file_is_copied_in_bounded_chunks_and_uploaded_byte_for_byte(
    s3_server, workspace, local_exec
):
    s3 = s3_server.client()
    prefix = RunLayout.parse(f"s3://{s3_server.bucket}/outputs/chunks/runs/{RUN_ID}")
    copied = modelrecovery.recover_model_from_pod(None, s3, "ns", "pod", prefix, chunk_bytes=4096)
    assert copied["files"] == 4 and copied["bytes"] == 10_000 + 2500 + 0 + 18
    reads = [args for args in local_exec if args[0] == "read"]
    assert max(int(args[3]) for args in reads) <= 4096
    assert len([a for a in reads if a[1] == "model/saved_model.pb"]) == 3  # 4096+4096+1808
    got = stored(s3, s3_server.bucket, f"outputs/chunks/runs/{RUN_ID}/")
    expected = {
        str(p.relative_to(workspace)): p.read_bytes() for p in workspace.rglob("*") if p.is_file()
    }
    assert got == expected


def test_a_file_that_changes_under_the_copy_is_refused_by_its_checksum(
    s3_server, workspace, local_exec, monkeypatch
):
    real_list = modelrecovery.list_keeper_files

    def listing_then_change(*args: Any) -> list[dict[str, Any]]:
        files = real_list(*args)
        (workspace / "model" / "saved_model.pb").write_bytes(os.urandom(10_000))
        return files

    monkeypatch.setattr(modelrecovery, "list_keeper_files", listing_then_change)
    with pytest.raises(RecoveryError, match="sha256"):
        modelrecovery.recover_model_from_pod(
            None,
            s3_server.client(),
            "ns",
            "pod",
            RunLayout.parse(f"s3://{s3_server.bucket}/outputs/changed/runs/{RUN_ID}"),
        )


class FakeKube:
    """Only what archive_run reads from Kubernetes: the run's pods and their logs."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods

    def list_namespaced_pod(self, namespace: str, label_selector: str) -> Any:
        return SimpleNamespace(items=self.pods)

    def read_namespaced_pod_log(self, pod: str, namespace: str, **kwargs: Any) -> Any:
        body = io.BytesIO(f"{kwargs['container']} of {pod}\n".encode())
        return HTTPResponse(body=body, preload_content=False)


def make_run(bucket: str, job: str) -> Any:
    request = load_request(valid_request_data(name=job, output=f"s3://{bucket}/outputs/{job}"))
    return read_run(describe_run(request, RUN_ID, f"tfjob__{job}", "aws_default"))


def run_keys(run: Any) -> str:
    """The key prefix (ending in '/') of the run's objects in its bucket."""
    return run.layout.root.key


def archive(run: Any, pods: list[dict[str, Any]], s3: Any) -> dict[str, Any]:
    return archive_run(
        FakeKube(pods),
        s3,
        run,
        bundle=None,
        cluster_spec=None,
        train_replicas=None,
        metrics=None,
        timings={},
    )


def test_archive_recovers_the_model_of_an_owner_that_exited_74_and_says_so_in_run_json(
    s3_server, workspace, local_exec
):
    s3 = s3_server.client()
    run = make_run(s3_server.bucket, "recovers")
    owner = run.pod_names()[0]
    manifest = archive(run, [owner_pod(owner, exited(74), RUNNING, role="worker")], s3)
    assert manifest["model"]["recovered_from_pod"] is True
    assert manifest["model"]["objects"] == 3
    assert manifest["model"]["recovery"]["reason"].startswith("tensorflow exited 74")
    assert manifest["metrics"] == {"accuracy": 0.97}
    key = run_keys(run)
    assert key == f"outputs/recovers/runs/tfjob__recovers/{RUN_ID}/"
    got = stored(s3, s3_server.bucket, key)
    model = workspace / "model" / "saved_model.pb"
    assert (
        hashlib.sha256(got["model/saved_model.pb"]).digest()
        == hashlib.sha256(model.read_bytes()).digest()
    )
    run_json = json.loads(got["run.json"])
    assert run_json["model"]["recovered_from_pod"] is True
    assert run_json["replicas"][0]["exit_code"] == 74


def test_archive_leaves_a_model_that_was_uploaded_alone(s3_server, workspace, local_exec):
    s3 = s3_server.client()
    run = make_run(s3_server.bucket, "uploaded")
    s3.put_object(
        Bucket=s3_server.bucket,
        Key=f"{run_keys(run)}model/m.bin",
        Body=b"uploaded by the bootstrap",
    )
    owner = run.pod_names()[0]
    manifest = archive(run, [owner_pod(owner, exited(0), RUNNING, role="worker")], s3)
    assert local_exec == []
    assert manifest["model"]["objects"] == 1
    assert manifest["model"]["recovered_from_pod"] is False


def test_a_keeper_that_cannot_be_read_is_recorded_and_archive_still_writes_run_json(
    s3_server, workspace, local_exec
):
    (workspace / "model").rename(workspace / "elsewhere")
    (workspace / "model").symlink_to(workspace / "elsewhere")  # the keeper refuses this
    s3 = s3_server.client()
    run = make_run(s3_server.bucket, "unreadable")
    owner = run.pod_names()[0]
    manifest = archive(run, [owner_pod(owner, exited(74), RUNNING, role="worker")], s3)
    assert manifest["model"]["recovered_from_pod"] is False
    assert "exited with code 77" in manifest["model"]["recovery"]["error"]
    assert "run.json" in stored(s3, s3_server.bucket, run_keys(run))
