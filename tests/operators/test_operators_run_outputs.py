"""A new try of a run starts with clean outputs, so it never publishes an earlier try's model.

Against the real S3 server: an earlier try left a model and metrics under the run's prefix;
the cleared run re-runs fetch_bundle, whose program then writes no model; archive finds
none and publish refuses with "nothing to publish" (and writes no `latest`).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from harness.tfjob_fixtures import valid_request_data
from operators import steps
from operators.archive import LOG_OF_A_GONE_POD, archive_run
from operators.runinfo import describe_run
from operators.runoutputs import clear_run_outputs
from runtime.bundle import write_bundle
from tfjob.pipeline_ids import ARCHIVE_TASK, VALIDATE_TASK
from tfjob.request.model import load_request
from tfjob.runlayout import RunLayout

RUN_ID = "scheduled__2026-12-03T08:00:00+00:00"


def keys_under(s3: Any, bucket: str, prefix: str) -> set[str]:
    answer = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return {item["Key"][len(prefix) :] for item in answer.get("Contents", [])}


def put(s3: Any, bucket: str, key: str, body: bytes = b"x") -> None:
    s3.put_object(Bucket=bucket, Key=key, Body=body)


def test_clearing_removes_the_model_and_metrics_and_nothing_else(s3_server):
    s3, bucket = s3_server.client(), s3_server.bucket
    run = f"outputs/clear/runs/tfjob__clear/{RUN_ID}/"
    earlier = ["model/saved_model.pb", "model/variables/variables.index", "metrics.json"]
    kept = ["bundle.tar.gz", "logs/worker-0.log", "run.json", "model-notes.txt", "metrics.json.bak"]
    for name in earlier + kept:
        put(s3, bucket, run + name)
    other_run = "outputs/clear/runs/tfjob__clear/other-run/model/saved_model.pb"
    put(s3, bucket, other_run)

    deleted = clear_run_outputs(s3, RunLayout.parse(f"s3://{bucket}/{run.rstrip('/')}"))

    assert sorted(deleted) == sorted(run + name for name in earlier)
    assert keys_under(s3, bucket, run) == set(kept)
    assert keys_under(s3, bucket, other_run) == {""}
    assert clear_run_outputs(s3, RunLayout.parse(f"s3://{bucket}/{run}")) == []  # no error


def test_a_new_try_clears_the_checkpoints_too_and_a_gang_restart_keeps_them(s3_server):
    s3, bucket = s3_server.client(), s3_server.bucket
    run = f"outputs/ckpt/runs/tfjob__ckpt/{RUN_ID}/"
    for name in ("model/saved_model.pb", "checkpoints/checkpoint", "checkpoints/ckpt-3.index"):
        put(s3, bucket, run + name)
    layout = RunLayout.parse(f"s3://{bucket}/{run}")
    assert clear_run_outputs(s3, layout) == [run + "model/saved_model.pb"]
    assert keys_under(s3, bucket, run) == {"checkpoints/checkpoint", "checkpoints/ckpt-3.index"}
    deleted = clear_run_outputs(s3, layout, checkpoints=True)
    assert sorted(deleted) == [run + "checkpoints/checkpoint", run + "checkpoints/ckpt-3.index"]
    assert keys_under(s3, bucket, run) == set()


def test_every_try_and_gang_restart_keeps_the_runs_summaries(s3_server):
    s3, bucket = s3_server.client(), s3_server.bucket
    run = f"outputs/tb/runs/tfjob__tb/{RUN_ID}/"
    summaries = [
        "tensorboard/chief-0/events.out.tfevents.1.host-a.7",
        "tensorboard/worker-0/train/events.out.tfevents.1.host-b.8",
    ]
    for name in ["model/saved_model.pb", "checkpoints/checkpoint", *summaries]:
        put(s3, bucket, run + name)
    layout = RunLayout.parse(f"s3://{bucket}/{run}")
    clear_run_outputs(s3, layout)  # a gang restart's
    clear_run_outputs(s3, layout, checkpoints=True)  # a new try's
    assert keys_under(s3, bucket, run) == set(summaries)


def test_clearing_a_model_of_more_than_one_delete_batch(s3_server, monkeypatch):
    monkeypatch.setattr("operators.runoutputs.DELETE_BATCH", 7)
    s3, bucket = s3_server.client(), s3_server.bucket
    run = f"outputs/batches/runs/tfjob__batches/{RUN_ID}/"
    for index in range(20):
        put(s3, bucket, f"{run}model/shard-{index:02d}")
    assert len(clear_run_outputs(s3, RunLayout.parse(f"s3://{bucket}/{run}"))) == 20
    assert keys_under(s3, bucket, run) == set()


class FakeTaskInstance:
    def __init__(self, xcoms: dict[str, Any]) -> None:
        self.xcoms = xcoms

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.xcoms.get(task_ids) if key == "return_value" else None


class NoPods:
    """The Kubernetes side of archive for a run whose pods are gone."""

    def list_namespaced_pod(self, namespace: str, label_selector: str) -> Any:
        return SimpleNamespace(items=[])


def test_a_cleared_run_whose_program_writes_no_model_publishes_nothing(
    s3_server, tmp_path: Path, monkeypatch
):
    s3, bucket = s3_server.client(), s3_server.bucket
    src = tmp_path / "src"
    (src / "code").mkdir(parents=True)
    (src / "code" / "train.py").write_text("print('no model this time')\n")
    write_bundle(src, tmp_path / "bundle.tar.gz", "nomodel")
    s3.upload_file(str(tmp_path / "bundle.tar.gz"), bucket, "bundles/nomodel.tar.gz")
    request = load_request(
        valid_request_data(
            name="nomodel",
            bundle=f"s3://{bucket}/bundles/nomodel.tar.gz",
            output=f"s3://{bucket}/outputs/nomodel",
        )
    )
    described = describe_run(request, RUN_ID, "tfjob__nomodel", "aws_default")
    run_keys = f"outputs/nomodel/runs/tfjob__nomodel/{RUN_ID}/"
    # The first try trained, uploaded and archived.
    put(s3, bucket, run_keys + "model/saved_model.pb", b"the first try's model")
    put(s3, bucket, run_keys + "metrics.json", b'{"accuracy": 0.9}')
    put(s3, bucket, run_keys + "run.json", b"{}")

    context: dict[str, Any] = {"ti": FakeTaskInstance({VALIDATE_TASK: described})}
    monkeypatch.setattr(steps, "get_current_context", lambda: context)
    monkeypatch.setattr(steps, "_s3", lambda run: s3)

    # The cleared run: fetch_bundle again, then a program that writes no model, then archive.
    identity = steps.fetch_bundle()
    assert identity["snapshot"].endswith(f"{run_keys}bundle.tar.gz")
    assert keys_under(s3, bucket, run_keys) == {"bundle.tar.gz", "run.json"}
    run = steps.pull_run(context)
    manifest = archive_run(
        NoPods(),
        s3,
        run,
        bundle=identity,
        cluster_spec=None,
        train_replicas=None,
        metrics=None,
        timings={},
    )
    assert manifest["model"]["objects"] == 0 and manifest["metrics"] is None
    # no pod left: each replica's log is named missing, with why
    assert manifest["logs"] == []
    assert manifest["logs_missing"] == {"worker-0": LOG_OF_A_GONE_POD}

    context["ti"].xcoms[ARCHIVE_TASK] = {"model": manifest["model"]}
    context["task"] = SimpleNamespace(outlets=[])
    with pytest.raises(AirflowFailException, match="nothing to publish"):
        steps.publish()
    assert keys_under(s3, bucket, "outputs/nomodel/latest") == set()


def test_a_model_whose_recovery_from_the_pod_failed_is_not_published(s3_server, monkeypatch):
    s3, bucket = s3_server.client(), s3_server.bucket
    request = load_request(
        valid_request_data(name="partial", output=f"s3://{bucket}/outputs/partial")
    )
    described = describe_run(request, RUN_ID, "tfjob__partial", "aws_default")
    model = {
        "uri": f"{described['run_prefix']}/model/",
        "objects": 1,
        "bytes": 10,
        "recovered_from_pod": False,
        "recovery": {
            "pod": "partial-1234abcd-worker-0",
            "reason": "tensorflow exited 74",
            "error": "keeper.py read did not finish within 120s",
        },
    }
    context: dict[str, Any] = {
        "ti": FakeTaskInstance({VALIDATE_TASK: described, ARCHIVE_TASK: {"model": model}}),
        "task": SimpleNamespace(outlets=[]),
    }
    monkeypatch.setattr(steps, "get_current_context", lambda: context)
    monkeypatch.setattr(steps, "_s3", lambda run: s3)
    with pytest.raises(AirflowFailException, match="may be incomplete: keeper.py read"):
        steps.publish()
    assert keys_under(s3, bucket, "outputs/partial/latest") == set()
