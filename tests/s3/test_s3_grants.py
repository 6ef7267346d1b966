"""The pods' S3 grants: SigV4 only, the model owner's policies only, lifetimes and refresh.

Against the real local S3 server process (scripts/s3_server.py checks
presigned requests the way S3 does).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from harness.s3_fixtures import S3Server
from operators.grants import grant_patches, plan_grants, sign_grants
from operators.s3access import presign_bundle_url, presign_tensorboard_upload, presign_upload
from runtime import checkpoint_sync, transfer
from tfjob.grants import MAX_GRANT_SECONDS, grant_lifetime, max_active_deadline, refresh_interval
from tfjob.records.run import GrantPlan
from tfjob.request.model import Role

# The DAG of the runs these tests grant for: part of every run's S3 prefix.
DAG = "tfjob__job"


def test_grants_are_sigv4_and_a_client_that_would_sign_sigv2_is_refused(
    s3_server: S3Server,
) -> None:
    s3_server.client().put_object(Bucket=s3_server.bucket, Key="b/x.tar.gz", Body=b"x")
    url = presign_bundle_url(s3_server.presigner(), f"s3://{s3_server.bucket}/b/x.tar.gz", 60)
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in url and "X-Amz-Signature=" in url
    assert "AWSAccessKeyId" not in url
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.read() == b"x"
    upload = presign_upload(s3_server.presigner(), f"s3://{s3_server.bucket}/o", DAG, "r1", 60)
    for grant in upload["grants"].values():
        assert grant["fields"]["x-amz-algorithm"] == "AWS4-HMAC-SHA256"
        assert "AWSAccessKeyId" not in grant["fields"] and "signature" not in grant["fields"]
    # botocore's default client presigns SigV2 in us-east-1: the product refuses to.
    with pytest.raises(ValueError, match="presigned without SigV4"):
        presign_bundle_url(s3_server.client(), f"s3://{s3_server.bucket}/b/x.tar.gz", 60)
    with pytest.raises(ValueError, match="presigned without SigV4"):
        presign_upload(s3_server.client(), f"s3://{s3_server.bucket}/o", DAG, "r1", 60)


def forged(policy: transfer.UploadPolicy, grant: str, as_name: str) -> transfer.UploadPolicy:
    """What a pod could try: one grant's signed fields used for another key."""
    return transfer.UploadPolicy(
        url=policy.url, prefix=policy.prefix, grants={as_name: policy.grants[grant]}
    )


def post_status(policy: transfer.UploadPolicy, name: str, tmp_path: Path) -> int:
    body = tmp_path / "f"
    body.write_bytes(b"evil")
    try:
        transfer.post_file(policy, policy.prefix + name, body, retries=0)
    except transfer.TransferError as exc:
        return int(exc.status or 0)
    return 204


def test_the_model_owner_writes_model_and_metrics_and_nothing_else_of_the_run(
    s3_server: S3Server, tmp_path: Path
) -> None:
    raw = presign_upload(s3_server.presigner(), f"s3://{s3_server.bucket}/out/j", DAG, "run-9", 60)
    policy = transfer.UploadPolicy.from_json(raw)
    assert policy.prefix == f"out/j/runs/{DAG}/run-9/"
    assert post_status(policy, "model/saved_model.pb", tmp_path) == 204
    assert post_status(policy, "metrics.json", tmp_path) == 204
    with pytest.raises(transfer.TransferError, match="no grant covers this key"):
        transfer.post_file(policy, policy.prefix + "bundle.tar.gz", tmp_path / "f")
    # Forged on purpose: S3 itself refuses (403), whatever the pod does with the fields.
    for grant in ("model/", "metrics.json"):
        for name in ("bundle.tar.gz", "run.json", "logs/chief-0.log", "metrics.json.x"):
            if grant == "metrics.json" and name == "metrics.json":
                continue
            assert post_status(forged(policy, grant, name), name, tmp_path) == 403, (grant, name)
    keys = {
        o["Key"]
        for o in s3_server.client()
        .list_objects_v2(Bucket=s3_server.bucket, Prefix=policy.prefix)
        .get("Contents", [])
    }
    assert keys == {policy.prefix + "model/saved_model.pb", policy.prefix + "metrics.json"}


def list_run_keys(s3_server: S3Server, prefix: str) -> set[str]:
    answer = s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix)
    return {o["Key"] for o in answer.get("Contents", [])}


def test_a_replica_writes_its_own_summaries_folder_and_nothing_else_of_the_run(
    s3_server: S3Server, tmp_path: Path
) -> None:
    output = f"s3://{s3_server.bucket}/out/tb"
    raw = presign_tensorboard_upload(s3_server.presigner(), output, DAG, "run-3", "worker-1", 60)
    policy = transfer.UploadPolicy.from_json(raw)
    assert raw["grants"]["tensorboard/worker-1/"]["fields"]["x-amz-algorithm"] == (
        "AWS4-HMAC-SHA256"
    )
    folder = checkpoint_sync.locate_granted_folder(policy)
    assert folder == f"out/tb/runs/{DAG}/run-3/tensorboard/worker-1/"
    assert post_status(policy, "tensorboard/worker-1/events.out.tfevents.1.host.7", tmp_path) == 204
    assert post_status(policy, "tensorboard/worker-1/train/events.out.tfevents.2", tmp_path) == 204
    with pytest.raises(transfer.TransferError, match="no grant covers this key"):
        transfer.post_file(policy, policy.prefix + "tensorboard/worker-0/x", tmp_path / "f")
    # Forged on purpose: another replica's folder, the model owner's outputs, Airflow's files.
    for name in (
        "tensorboard/worker-0/events.out.tfevents.1",
        "tensorboard/chief-0/events.out.tfevents.1",
        "tensorboard/worker-10/events.out.tfevents.1",
        "tensorboard/worker-1",
        "tensorboard/x",
        "model/saved_model.pb",
        "checkpoints/checkpoint",
        "metrics.json",
        "bundle.tar.gz",
        "run.json",
        "logs/worker-1.log",
    ):
        assert post_status(forged(policy, "tensorboard/worker-1/", name), name, tmp_path) == 403, (
            name
        )
    assert list_run_keys(s3_server, policy.prefix) == {
        folder + "events.out.tfevents.1.host.7",
        folder + "train/events.out.tfevents.2",
    }


def test_a_grant_covers_the_run_window_within_what_the_credentials_can_sign() -> None:
    assert grant_lifetime(300, 3600, MAX_GRANT_SECONDS) == 300 + 3600 + 600
    assert grant_lifetime(300, 3600, 60) == 60  # temporary credentials, or the test switch
    assert grant_lifetime(300, max_active_deadline(300), 10**9) == MAX_GRANT_SECONDS
    assert refresh_interval(60, 1800) == 30
    assert refresh_interval(4500, 1800) == 1800


class FakeRun:
    namespace = "tfjob-test"
    run_key = "job-0123abcd"
    dag_id = "tfjob__job"
    run_id = "manual__1"
    aws_conn_id = "aws_default"
    pods_conn_id = "tfjob_pods_test"

    class request:  # noqa: N801 - a stand-in for TrainingRequest's fields used here
        startup_timeout = 120
        active_deadline = 1200
        output = "s3://tfjob-test/out/job"

        @staticmethod
        def replicas_in_order() -> list[tuple[Role, int]]:
            return [(Role.CHIEF, 0), (Role.WORKER, 0), (Role.WORKER, 1)]


def test_signing_a_plan_gives_both_secrets_fresh_values(s3_server: S3Server) -> None:
    plan = plan_grants(FakeRun, "s3://tfjob-test/out/job/runs/tfjob__job/manual__1/bundle.tar.gz")
    assert plan.lifetime == 120 + 1200 + 600
    assert (plan.aws_conn_id, plan.presign_conn_id) == ("aws_default", "tfjob_pods_test")
    assert GrantPlan.from_payload(plan.to_payload()) == plan
    first = sign_grants(plan, s3_server.presigner())
    patches = dict(grant_patches(plan, first))
    assert set(patches) == {
        "job-0123abcd-access",
        "job-0123abcd-upload",
        "job-0123abcd-tensorboard-0",
    }
    assert set(patches["job-0123abcd-access"]["data"]) == {"bundle_url"}
    assert set(patches["job-0123abcd-upload"]["data"]) == {"upload.json"}
    assert set(patches["job-0123abcd-tensorboard-0"]["data"]) == {
        "tensorboard-chief-0.json",
        "tensorboard-worker-0.json",
        "tensorboard-worker-1.json",
    }
    assert plan.replicas == ("chief-0", "worker-0", "worker-1")
    worker = transfer.UploadPolicy.from_json(first.tensorboard["worker-1"])
    assert list(worker.grants) == ["tensorboard/worker-1/"]
    assert "X-Amz-Signature=" in first.bundle_url
    assert first.upload["prefix"] == "out/job/runs/tfjob__job/manual__1/"
