"""What the steps hand on (tfjob/records/outcomes.py) reads the payloads stored today and
writes them back byte for byte."""

from __future__ import annotations

import json

import pytest

from tfjob.records.outcomes import (
    ArchivedRun,
    BundleIdentity,
    LaunchFailure,
    LaunchOutcome,
    LaunchState,
    ModelSummary,
    PublishedLatest,
    StagedWarmStart,
)

BUNDLE = {
    "source": "s3://tfjob-bundles/digits.tar.gz",
    "source_etag": "9b2cf535f27731c974343645a3985328",
    "snapshot": "s3://tfjob-output/digits/runs/train_digits/manual__1/bundle.tar.gz",
    "size": 2048,
    "sha256": "ab" * 32,
    "name": "digits",
    "created": "2026-12-01T03:00:00Z",
    "files": 2,
    "total_size": 4096,
}
WARM_START = {
    "requested": "latest",
    "source": "s3://tfjob-output/digits/runs/train_digits/manual__0/checkpoints/",
    "step": 1200,
    "files": 3,
    "bytes": 65536,
}
NOTHING_RESTORED = {"requested": "manual__0", "source": None, "step": None, "files": 0, "bytes": 0}


def same_bytes(left: object, right: object) -> bool:
    return json.dumps(left) == json.dumps(right)


@pytest.mark.parametrize(
    ("record", "payload"),
    [
        (BundleIdentity, BUNDLE),
        (StagedWarmStart, WARM_START),
        (StagedWarmStart, NOTHING_RESTORED),
        (LaunchFailure, {"error": "GangStartError", "message": "pod r-worker-0 unschedulable"}),
        (LaunchOutcome, {"state": "ready", "ready_at": 1765000000.25}),
        (LaunchOutcome, {"state": "failed", "error": "GangStartError", "message": "no room"}),
        (
            LaunchOutcome,
            {"state": "not ready", "message": "launch did not finish (killed or not run)"},
        ),
    ],
)
def test_a_payload_stored_today_reads_typed_and_writes_back_the_same(record, payload):
    read = record.from_payload(payload)
    assert same_bytes(read.to_payload(), payload)
    assert record.from_payload(read.to_payload()) == read


def test_the_bundle_identity_reads_as_fields():
    identity = BundleIdentity.from_payload(BUNDLE)
    assert identity.snapshot.endswith("/bundle.tar.gz") and identity.files == 2


def test_a_launch_failure_names_the_error_and_its_message():
    failure = LaunchFailure.of(TimeoutError("the gang did not start within 600s"))
    assert failure.to_payload() == {
        "error": "TimeoutError",
        "message": "the gang did not start within 600s",
    }


def test_the_launch_outcome_says_failed_before_ready_and_not_ready_without_either():
    failure = LaunchFailure("GangStartError", "no room")
    assert LaunchOutcome.judge(failure, 12.5).state is LaunchState.FAILED
    assert LaunchOutcome.judge(None, 12.5) == LaunchOutcome(LaunchState.READY, ready_at=12.5)
    assert LaunchOutcome.judge(None, None).state is LaunchState.NOT_READY


MODEL = {
    "uri": "s3://tfjob-output/digits/runs/train_digits/manual__1/model/",
    "objects": 4,
    "bytes": 9000,
    "recovered_from_pod": False,
}
RECOVERED = {
    **MODEL,
    "recovered_from_pod": True,
    "recovery": {"pod": "r-worker-0", "reason": "tensorflow exited 74", "files": 4, "bytes": 9000},
}
NOT_RECOVERED = {
    **MODEL,
    "recovery": {"pod": "r-worker-0", "reason": "tensorflow exited 74", "error": "exec: 500"},
}
POINTER = {"version": 1, "run_id": "manual__1", "model": MODEL["uri"], "metrics": {"loss": 0.1}}


@pytest.mark.parametrize("model", [MODEL, RECOVERED, NOT_RECOVERED])
def test_archive_s_return_value_reads_typed_and_writes_back_the_same(model):
    payload = {
        "model": model,
        "logs": ["s3://b/o/logs/worker-0.log"],
        "run_json": "s3://b/o/run.json",
    }
    read = ArchivedRun.from_payload(payload)
    assert same_bytes(read.to_payload(), payload)
    assert ArchivedRun.from_payload(read.to_payload()) == read


def test_a_model_summary_says_whether_its_copy_out_of_the_pod_failed():
    assert ModelSummary.from_payload(NOT_RECOVERED).recovery.error == "exec: 500"
    assert ModelSummary.from_payload(RECOVERED).recovery.error is None
    assert ModelSummary.from_payload(MODEL).recovery is None


def test_archive_s_value_with_the_model_alone_reads_as_a_model_without_logs():
    read = ArchivedRun.from_payload({"model": {"uri": MODEL["uri"], "objects": 1}})
    assert read.model.objects == 1 and read.logs == () and read.run_json is None


@pytest.mark.parametrize(
    "payload",
    [
        {
            "latest": "s3://b/o/latest",
            "moved": True,
            "reason": "first",
            "pointer": POINTER,
            "current": None,
        },
        {
            "latest": "s3://b/o/latest",
            "moved": False,
            "reason": "a newer run holds it",
            "pointer": POINTER,
            "current": {**POINTER, "run_id": "manual__2"},
        },
    ],
)
def test_publish_s_return_value_reads_typed_and_writes_back_the_same(payload):
    read = PublishedLatest.from_payload(payload)
    assert same_bytes(read.to_payload(), payload)
    assert PublishedLatest.from_payload(read.to_payload()) == read
