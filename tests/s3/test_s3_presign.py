"""Scoped, expiring pod access (operators/s3access.py) against the real local S3 server process.

moto alone accepts any presigned request; scripts/s3_server.py checks them
the way S3 does (see its docstring), and these tests hold it to that.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from harness.s3_fixtures import S3Server
from operators.s3access import presign_bundle_url, presign_upload
from runtime import transfer
from tfjob.runlayout import run_output_prefix
from tfjob.s3url import parse_s3_url

# The DAG of the runs these tests grant for: part of every run's S3 prefix.
DAG = "tfjob__job"


EXPIRY_DEADLINE_S = 15.0


def http_status(url: str, method: str = "GET") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, method=method), timeout=10
        ) as answer:
            return answer.status, answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


@pytest.fixture
def client(s3_server: S3Server):  # type: ignore[no-untyped-def]
    # SigV4 only: the server refuses SigV2 grants as S3 does (tests/s3/test_s3_server.py).
    return s3_server.presigner()


def test_parse_s3_url_splits_bucket_and_key_and_names_bad_values() -> None:
    assert parse_s3_url("s3://b/a/b.tar.gz") == ("b", "a/b.tar.gz")
    assert parse_s3_url("s3://b") == ("b", "")
    with pytest.raises(ValueError, match=r"'http://b/k' given; expected s3://<bucket>/<key>"):
        parse_s3_url("http://b/k")
    with pytest.raises(ValueError, match="bucket name is missing"):
        parse_s3_url("s3:///k")
    assert run_output_prefix("s3://b/out/job/", "tfjob__job", "manual__2026") == (
        "b",
        "out/job/runs/tfjob__job/manual__2026/",
    )
    # Two DAGs, one output and one run id: two prefixes.
    assert run_output_prefix("s3://b/out", "tfjob__a", "r") != run_output_prefix(
        "s3://b/out", "tfjob__b", "r"
    )
    with pytest.raises(ValueError, match="run_id"):
        run_output_prefix("s3://b/out", "tfjob__job", "a/b")


def test_presigned_get_works_before_expiry_and_is_refused_after(
    s3_server: S3Server, client
) -> None:
    client.put_object(Bucket=s3_server.bucket, Key="bundles/b.tar.gz", Body=b"bundle-bytes")
    url = presign_bundle_url(client, f"s3://{s3_server.bucket}/bundles/b.tar.gz", 2)
    assert http_status(url) == (200, "bundle-bytes")
    deadline = time.monotonic() + EXPIRY_DEADLINE_S
    while (answer := http_status(url))[0] == 200:
        assert time.monotonic() < deadline, "presigned URL still accepted long after its expiry"
        time.sleep(0.25)
    assert answer[0] == 403 and "Request has expired" in answer[1]


def test_presigned_get_with_a_tampered_signature_or_key_is_refused(
    s3_server: S3Server, client
) -> None:
    client.put_object(Bucket=s3_server.bucket, Key="bundles/a.tar.gz", Body=b"a")
    client.put_object(Bucket=s3_server.bucket, Key="bundles/other.tar.gz", Body=b"other")
    url = presign_bundle_url(client, f"s3://{s3_server.bucket}/bundles/a.tar.gz", 60)
    assert http_status(url)[0] == 200
    assert http_status(url.replace("/bundles/a.tar.gz", "/bundles/other.tar.gz"))[0] == 403
    tampered = url.replace("X-Amz-Signature=", "X-Amz-Signature=0")
    status, body = http_status(tampered)
    assert status == 403 and "SignatureDoesNotMatch" in body


def test_anonymous_requests_are_refused(s3_server: S3Server) -> None:
    s3_server.client().put_object(Bucket=s3_server.bucket, Key="open.txt", Body=b"x")
    status, body = http_status(f"{s3_server.endpoint}/{s3_server.bucket}/open.txt")
    assert status == 403 and "Anonymous access is refused" in body


def test_presign_rejects_out_of_range_expiry_and_prefixes(s3_server: S3Server) -> None:
    with pytest.raises(ValueError, match="expires: 0 given; between 1 and 604800"):
        presign_bundle_url(s3_server.client(), "s3://b/k.tar.gz", 0)
    with pytest.raises(ValueError, match="must name an object"):
        presign_bundle_url(s3_server.client(), "s3://b/dir/", 10)


def make_file(tmp_path: Path, body: bytes = b"weights") -> Path:
    path = tmp_path / "file.bin"
    path.write_bytes(body)
    return path


def test_upload_policy_allows_keys_under_the_run_prefix_only(
    tmp_path: Path, s3_server: S3Server, client
) -> None:
    raw = presign_upload(client, f"s3://{s3_server.bucket}/outputs/job", DAG, "run-1", 60)
    policy = transfer.UploadPolicy.from_json(raw)
    assert policy.prefix == f"outputs/job/runs/{DAG}/run-1/"
    path = make_file(tmp_path)
    transfer.post_file(policy, policy.prefix + "model/w.bin", path, retries=0)
    got = s3_server.client().get_object(
        Bucket=s3_server.bucket, Key=f"outputs/job/runs/{DAG}/run-1/model/w.bin"
    )
    assert got["Body"].read() == b"weights"
    for key in (
        f"outputs/job/runs/{DAG}/run-2/model/w.bin",
        "outputs/job/latest",
        f"outputs/job/runs/{DAG}/run-1",
    ):
        with pytest.raises(transfer.TransferError, match="no grant covers this key"):
            transfer.post_file(policy, key, path, retries=0)
        # The same key with the model grant's signed fields: S3 itself refuses.
        forged = transfer.UploadPolicy(policy.url, key, {"": policy.grants["model/"]})
        with pytest.raises(transfer.TransferError) as caught:
            transfer.post_file(forged, key, path, retries=0)
        assert caught.value.status == 403 and "starts-with" in str(caught.value)
    listed = s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix="outputs/job/")
    assert [o["Key"] for o in listed["Contents"]] == [f"outputs/job/runs/{DAG}/run-1/model/w.bin"]


def test_upload_policy_cannot_be_redirected_to_another_bucket(
    tmp_path: Path, s3_server: S3Server, client
) -> None:
    policy = transfer.UploadPolicy.from_json(
        presign_upload(client, f"s3://{s3_server.bucket}/o", DAG, "r", 60)
    )
    other = transfer.UploadPolicy(
        policy.url.replace(s3_server.bucket, "tfjob-other"), policy.prefix, policy.grants
    )
    with pytest.raises(transfer.TransferError) as caught:
        transfer.post_file(other, policy.prefix + "model/x", make_file(tmp_path), retries=0)
    assert caught.value.status == 403 and "bucket" in str(caught.value)


def test_upload_policy_is_refused_after_expiry(tmp_path: Path, s3_server: S3Server, client) -> None:
    # 4 s, not 1: on a loaded machine presigning and the first POST (the form read twice,
    # by the gate and by moto) took over a second, and the first POST was refused as expired
    policy = transfer.UploadPolicy.from_json(
        presign_upload(client, f"s3://{s3_server.bucket}/o", DAG, "exp", 4)
    )
    path = make_file(tmp_path)
    transfer.post_file(policy, policy.prefix + "model/first", path, retries=0)
    deadline = time.monotonic() + EXPIRY_DEADLINE_S
    while True:
        try:
            transfer.post_file(policy, policy.prefix + "model/later", path, retries=0)
        except transfer.TransferError as exc:
            assert exc.status == 403 and "Policy expired" in str(exc)
            break
        assert time.monotonic() < deadline, "upload policy still accepted long after its expiry"
        time.sleep(0.25)


def test_upload_policy_with_a_tampered_policy_document_is_refused(
    tmp_path: Path, s3_server: S3Server, client
) -> None:
    import base64
    import json

    raw = presign_upload(client, f"s3://{s3_server.bucket}/o", DAG, "t", 60)
    fields = raw["grants"]["model/"]["fields"]
    document = json.loads(base64.b64decode(fields["policy"]))
    document["conditions"] = [
        c for c in document["conditions"] if not (isinstance(c, list) and c[0] == "starts-with")
    ]
    fields["policy"] = base64.b64encode(json.dumps(document).encode()).decode()
    policy = transfer.UploadPolicy.from_json(raw)
    with pytest.raises(transfer.TransferError) as caught:
        transfer.post_file(policy, policy.prefix + "model/x", make_file(tmp_path), retries=0)
    assert caught.value.status == 403 and "SignatureDoesNotMatch" in str(caught.value)


def test_transfer_errors_never_show_the_query_string(
    tmp_path: Path, s3_server: S3Server, client
) -> None:
    url = presign_bundle_url(client, f"s3://{s3_server.bucket}/missing/none.tar.gz", 60)
    with pytest.raises(transfer.TransferError) as caught:
        transfer.download_to_file(url, tmp_path / "x", retries=0)
    assert caught.value.status == 404
    assert "?" not in str(caught.value) and "Signature" not in str(caught.value)
