"""pack -> upload -> fetch through the real S3 server process over HTTP, as users and pods do."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bundle_fixtures import BAD_BUNDLES, run_fetch
from harness.repo_root import REPO_ROOT
from harness.s3_fixtures import S3Server
from operators.s3access import presign_bundle_url

REPO = REPO_ROOT
MIB = 1024 * 1024


def tshell(server: S3Server, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **server.env(), "PYTHONPATH": str(REPO)}
    env.pop("AWS_PROFILE", None)
    return subprocess.run(
        [sys.executable, "-m", "tshell", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def make_project(root: Path) -> Path:
    (root / "code").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "code" / "train.py").write_text("print('train')\n")
    # Incompressible and over the 5 MiB part size below: a real multipart upload of several parts.
    (root / "data" / "features.bin").write_bytes(os.urandom(12 * MIB))
    return root


def test_push_then_fetch_in_a_pod_restores_the_tree(tmp_path: Path, s3_server: S3Server) -> None:
    src = make_project(tmp_path / "digits")
    pushed = tshell(
        s3_server, "push", str(src), f"s3://{s3_server.bucket}/bundles/", "--part-size", "5"
    )
    assert pushed.returncode == 0, pushed.stderr
    uri = f"s3://{s3_server.bucket}/bundles/digits.tar.gz"
    assert uri in pushed.stdout
    assert "in 3 part(s)" in pushed.stdout and "verified: ETag" in pushed.stdout
    stored = s3_server.client().get_object(Bucket=s3_server.bucket, Key="bundles/digits.tar.gz")
    sha_line = next(line for line in pushed.stdout.splitlines() if line.startswith("sha256 "))
    assert hashlib.sha256(stored["Body"].read()).hexdigest() == sha_line.split()[1]
    assert stored["ETag"].strip('"').endswith("-3")

    url = presign_bundle_url(s3_server.presigner(), uri, 300)
    result, workspace = run_fetch(tmp_path / "pod", url)
    assert result.returncode == 0, result.stderr
    assert url not in result.stderr and "Signature" not in result.stderr
    for rel in ("code/train.py", "data/features.bin"):
        assert (
            hashlib.sha256((workspace / rel).read_bytes()).digest()
            == hashlib.sha256((src / rel).read_bytes()).digest()
        )


def test_upload_of_a_packed_file_reports_size_and_checksum(
    tmp_path: Path, s3_server: S3Server
) -> None:
    src = make_project(tmp_path / "proj")
    packed = tshell(s3_server, "pack", str(src), "-o", str(tmp_path / "out.tar.gz"))
    assert packed.returncode == 0, packed.stderr
    archive = tmp_path / "out.tar.gz"
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    assert f"sha256 {sha}" in packed.stdout
    uploaded = tshell(
        s3_server,
        "upload",
        str(archive),
        f"s3://{s3_server.bucket}/exact/key.tar.gz",
        "--part-size",
        "5",
    )
    assert uploaded.returncode == 0, uploaded.stderr
    assert (
        f"s3://{s3_server.bucket}/exact/key.tar.gz" in uploaded.stdout
        and f"sha256 {sha}" in uploaded.stdout
    )
    body = (
        s3_server.client()
        .get_object(Bucket=s3_server.bucket, Key="exact/key.tar.gz")["Body"]
        .read()
    )
    assert hashlib.sha256(body).hexdigest() == sha


def test_upload_to_a_missing_bucket_fails_with_a_message(
    tmp_path: Path, s3_server: S3Server
) -> None:
    path = tmp_path / "f.txt"
    path.write_text("x")
    result = tshell(s3_server, "upload", str(path), "s3://no-such-bucket/p/")
    assert result.returncode == 1
    assert "s3://no-such-bucket/p/f.txt failed" in result.stderr and "NoSuchBucket" in result.stderr


@pytest.mark.parametrize(
    "case", ["tar-slip", "symlink-escape", "checksum-mismatch", "truncated-gzip"]
)
def test_bad_bundle_from_s3_is_refused_by_the_pod(
    tmp_path: Path, s3_server: S3Server, case: str
) -> None:
    build, _reason, text = BAD_BUNDLES[case]
    path = build(tmp_path / "bad.tar.gz")
    key = f"bad/{case}.tar.gz"
    s3_server.client().upload_file(str(path), s3_server.bucket, key)
    url = presign_bundle_url(s3_server.presigner(), f"s3://{s3_server.bucket}/{key}", 60)
    result, workspace = run_fetch(tmp_path / "pod", url)
    assert result.returncode == 65
    assert text in result.stderr
    assert not (workspace / "code").exists()


def test_push_of_a_small_bundle_uses_one_put_and_is_verified(
    tmp_path: Path, s3_server: S3Server
) -> None:
    src = tmp_path / "tiny"
    (src / "code").mkdir(parents=True)
    (src / "code" / "main.py").write_text("print(1)\n")
    pushed = tshell(s3_server, "push", str(src), f"s3://{s3_server.bucket}/small/", "--name", "t1")
    assert pushed.returncode == 0, pushed.stderr
    assert (
        f"s3://{s3_server.bucket}/small/t1.tar.gz" in pushed.stdout
        and "in 1 part(s)" in pushed.stdout
    )
    head = s3_server.client().head_object(Bucket=s3_server.bucket, Key="small/t1.tar.gz")
    assert "-" not in head["ETag"]


def test_push_to_a_missing_bucket_fails_and_leaves_no_upload(
    tmp_path: Path, s3_server: S3Server
) -> None:
    src = make_project(tmp_path / "proj")
    pushed = tshell(s3_server, "push", str(src), "s3://no-such-bucket/b/", "--part-size", "5")
    assert pushed.returncode == 1
    assert "upload to s3://no-such-bucket/b/proj.tar.gz failed" in pushed.stderr
    assert "NoSuchBucket" in pushed.stderr
