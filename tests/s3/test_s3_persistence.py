"""The local S3 keeps what it acknowledged: across a normal stop, a SIGKILL and `down`/`up`.

End to end against real server processes (scripts/s3_server.py) on one state
dir: a bundle uploaded in parts, a model posted with the pods' presigned POST
policies through the pod-facing listener, a copy, deletes and buckets. Then
the disk store itself (scripts/s3_store.py), the load path into moto
(scripts/s3_sync.py), the layer that answers only after saving
(scripts/s3_persist.py), and `make clean-state` (scripts/clean_state.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from harness.repo_root import REPO_ROOT
from harness.s3_fixtures import S3Server, kill_s3_server, start_s3_server, stop_s3_server
from operators.s3access import presign_upload
from runtime import transfer

REPO = REPO_ROOT
from scripts import (  # noqa: E402
    s3_persist,  # noqa: E402
    s3_store,  # noqa: E402
    s3_store_upkeep,  # noqa: E402
    s3_sync,  # noqa: E402
)

SERVER = REPO / "scripts" / "s3_server.py"
CLEAN = REPO / "scripts" / "clean_state.py"
MiB = 1024 * 1024
BUNDLE_KEY = "bundles/job/bundle.tar.gz"
PUBLISHED_KEY = "models/job/latest/saved_model.pb"
DAG = "tfjob__job"
KEPT_BUCKET = "kept-bucket"
GONE_BUCKET = "gone-bucket"
DELETED = ("logs/old-1.log", "logs/old-2.log", "logs/old-3.log")


def some_bytes(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_everything(server: S3Server, tmp_path: Path) -> dict[str, str]:
    """What a run leaves in S3, and then some; the content hash of every object kept."""
    client = server.client()
    kept: dict[str, str] = {}
    bundle = tmp_path / "bundle.tar.gz"
    bundle.write_bytes(some_bytes(12 * MiB, 1))
    client.upload_file(
        str(bundle),
        server.bucket,
        BUNDLE_KEY,
        ExtraArgs={"ContentType": "application/gzip", "Metadata": {"owner": "research"}},
        Config=TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB),
    )
    kept[BUNDLE_KEY] = sha(bundle.read_bytes())

    # The model, as a pod posts it: presigned POST policies, through the pods' listener.
    raw = presign_upload(
        server.pods_presigner("test"), f"s3://{server.bucket}/outputs/j", DAG, "run-1", 300
    )
    policy = transfer.UploadPolicy.from_json(raw)
    policy = dataclasses.replace(
        policy, url=policy.url.replace(server.endpoint, server.pod_endpoint)
    )
    for name, size in (
        ("model/saved_model.pb", 300_000),
        ("model/variables/variables.index", 2_000),
        ("model/variables/variables.data-00000-of-00001", 3 * MiB),
        ("metrics.json", 50),
    ):
        local = tmp_path / name.replace("/", "_")
        local.write_bytes(some_bytes(size, size))
        transfer.post_file(policy, policy.prefix + name, local, retries=0)
        kept[policy.prefix + name] = sha(local.read_bytes())
    # Publishing copies the model. (Not a multipart object: moto 5.2.5 gives the copy of one
    # the source's composite checksum as a whole-object one, which boto3 then refuses.)
    client.copy_object(
        Bucket=server.bucket,
        Key=PUBLISHED_KEY,
        CopySource=f"{server.bucket}/{policy.prefix}model/saved_model.pb",
    )
    kept[PUBLISHED_KEY] = kept[policy.prefix + "model/saved_model.pb"]

    client.put_object(Bucket=server.bucket, Key="notes.txt", Body=b"first")
    client.put_object(
        Bucket=server.bucket,
        Key="notes.txt",
        Body=b"second",
        ContentType="text/plain",
        Metadata={"edited": "yes"},
    )
    kept["notes.txt"] = sha(b"second")
    for key in DELETED:
        client.put_object(Bucket=server.bucket, Key=key, Body=b"old log")
    client.delete_object(Bucket=server.bucket, Key=DELETED[0])
    client.delete_objects(
        Bucket=server.bucket, Delete={"Objects": [{"Key": key} for key in DELETED[1:]]}
    )
    client.create_bucket(Bucket=KEPT_BUCKET)
    client.put_object(Bucket=KEPT_BUCKET, Key="k", Body=b"in another bucket")
    client.create_bucket(Bucket=GONE_BUCKET)
    client.delete_bucket(Bucket=GONE_BUCKET)
    return kept


def look_at(server: S3Server) -> dict[str, Any]:
    """What a client sees: buckets, and every object's bytes, ETag, type, metadata, date."""
    client = server.client()
    seen: dict[str, Any] = {"buckets": sorted(b["Name"] for b in client.list_buckets()["Buckets"])}
    for bucket in seen["buckets"]:
        for item in client.list_objects_v2(Bucket=bucket).get("Contents", []):
            got = client.get_object(Bucket=bucket, Key=item["Key"])
            seen[f"{bucket}/{item['Key']}"] = {
                "sha256": sha(got["Body"].read()),
                "etag": got["ETag"],
                "listed_etag": item["ETag"],
                "size": got["ContentLength"],
                "type": got["ContentType"],
                "metadata": got["Metadata"],
                "last_modified": got["LastModified"].isoformat(),
            }
    return seen


def check_kept(seen: dict[str, Any], kept: dict[str, str], bucket: str) -> None:
    assert KEPT_BUCKET in seen["buckets"] and GONE_BUCKET not in seen["buckets"]
    objects = {
        name.split("/", 1)[1]: each for name, each in seen.items() if name.startswith(bucket + "/")
    }
    assert {key: each["sha256"] for key, each in objects.items()} == kept
    assert objects[BUNDLE_KEY]["etag"].endswith('-3"')  # three parts, as the client saw it
    assert objects[BUNDLE_KEY]["type"] == "application/gzip"
    assert objects[BUNDLE_KEY]["metadata"] == {"owner": "research"}
    assert objects["notes.txt"]["type"] == "text/plain"


@pytest.mark.slow  # server processes started two or three times
def test_a_stopped_server_started_again_serves_what_it_acknowledged(tmp_path: Path) -> None:
    state = tmp_path / "state"
    server, process = start_s3_server(mkdir(tmp_path / "first"), state_dir=state)
    try:
        kept = write_everything(server, tmp_path)
        before = look_at(server)
    finally:
        stop_s3_server(process)  # SIGTERM: the normal way
    check_kept(before, kept, server.bucket)
    again, process = start_s3_server(mkdir(tmp_path / "second"), state_dir=state)
    try:
        assert look_at(again) == before
        for key in DELETED:
            with pytest.raises(ClientError, match="404"):
                again.client().head_object(Bucket=again.bucket, Key=key)
    finally:
        stop_s3_server(process)


@pytest.mark.slow  # server processes started two or three times
def test_a_killed_server_started_again_serves_what_it_acknowledged(tmp_path: Path) -> None:
    state = tmp_path / "state"
    server, process = start_s3_server(mkdir(tmp_path / "first"), state_dir=state)
    try:
        kept = write_everything(server, tmp_path)
        before = look_at(server)
    finally:
        kill_s3_server(process)  # SIGKILL right after the last answer
    check_kept(before, kept, server.bucket)
    again, process = start_s3_server(mkdir(tmp_path / "second"), state_dir=state)
    try:
        assert look_at(again) == before
        # It goes on keeping: a delete and a new object, then another SIGKILL.
        client = again.client()
        client.delete_object(Bucket=again.bucket, Key=PUBLISHED_KEY)
        client.put_object(Bucket=again.bucket, Key="after-restart", Body=b"new")
        after = look_at(again)
    finally:
        kill_s3_server(process)
    assert f"{again.bucket}/{PUBLISHED_KEY}" not in after
    third, process = start_s3_server(mkdir(tmp_path / "third"), state_dir=state)
    try:
        assert look_at(third) == after
    finally:
        stop_s3_server(process)


def mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_script(script: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow  # server processes started two or three times
def test_down_says_where_the_data_is_and_clean_state_removes_only_it(tmp_path: Path) -> None:
    root = tmp_path / "state"
    s3_dir = root / "s3"
    data = s3_dir / "data"
    up = ("up", "--port", "0", "--state-dir", str(s3_dir), "--bucket", "tfjob-demo")
    assert run_script(SERVER, *up).returncode == 0
    info = json.loads((s3_dir / "ready.json").read_text())
    try:
        make_client(info, s3_dir).put_object(Bucket="tfjob-demo", Key="model.bin", Body=b"weights")
        refused = run_script(CLEAN, "--state-dir", str(root), "--yes")
        assert refused.returncode == 1
        assert f"an S3 server (pid {info['pid']}) is using {data}" in refused.stderr
    finally:
        down = run_script(SERVER, "down", "--state-dir", str(s3_dir))
    assert down.returncode == 0
    assert f"stopped (pid {info['pid']}); buckets and objects are kept in {data}" in down.stdout
    assert "make clean-state" in down.stdout

    assert run_script(SERVER, *up).returncode == 0  # `up` again: the object is there
    info = json.loads((s3_dir / "ready.json").read_text())
    try:
        got = make_client(info, s3_dir).get_object(Bucket="tfjob-demo", Key="model.bin")
        assert got["Body"].read() == b"weights"
    finally:
        assert run_script(SERVER, "down", "--state-dir", str(s3_dir)).returncode == 0

    declined = run_script(CLEAN, "--state-dir", str(root), stdin="n\n")
    assert declined.returncode == 1 and "nothing removed" in declined.stdout
    assert "1 buckets, 1 objects, 7 bytes" in declined.stdout
    assert "Nothing else is removed" in declined.stdout
    assert data.exists()
    assert run_script(CLEAN, "--state-dir", str(root)).returncode == 1  # no answer: kept
    assert data.exists()
    confirmed = run_script(CLEAN, "--state-dir", str(root), stdin="y\n")
    assert confirmed.returncode == 0, confirmed.stderr
    assert not data.exists()
    assert (s3_dir / "server.log").exists()  # only the data goes
    assert "nothing to remove" in run_script(CLEAN, "--state-dir", str(root), "--yes").stdout


def make_client(info: dict[str, Any], state_dir: Path) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=info["endpoint"],
        aws_access_key_id=info["access_key"],
        aws_secret_access_key=json.loads((state_dir / "credentials.json").read_text())[
            "secret_key"
        ],
        region_name=info["region"],
    )


# The disk store and the load path, without a server.


def save_one(store: s3_store.DiskStore, key: str, data: bytes) -> s3_store.ObjectRecord:
    store.save_bucket(
        s3_store.BucketRecord(
            "tfjob-test", "123456789012", "us-east-1", "2026-12-03T10:00:00+00:00"
        )
    )
    return store.save_object("tfjob-test", key, {"etag": '"x"'}, [data[:3], data[3:]], None)


def test_the_store_lays_out_one_record_and_one_data_file_per_object(tmp_path: Path) -> None:
    root = tmp_path / "data"
    store = s3_store.open_store(root)
    record = save_one(store, "runs/../model/x.pb", b"model bytes")
    objects = root / "buckets" / "tfjob-test" / "objects"
    hashed = hashlib.sha256(b"runs/../model/x.pb").hexdigest()
    assert sorted(p.name for p in objects.iterdir()) == sorted([f"{hashed}.json", record.data])
    assert (objects / record.data).read_bytes() == b"model bytes"
    assert (root / "FORMAT").read_text() == "tfjob-local-s3 1\n"
    for path in [root, *root.rglob("*")]:
        assert path.stat().st_mode & 0o077 == 0, path  # nothing for other users
    newer = store.save_object("tfjob-test", record.key, {"etag": '"y"'}, [b"v2"], record)
    assert not (objects / record.data).exists()  # the old version's bytes are gone
    store.close()

    store = s3_store.open_store(root)
    [bucket] = store.list_buckets()
    [loaded] = store.list_objects(bucket.name)
    assert loaded == newer and b"".join(store.read_data(bucket.name, loaded)) == b"v2"
    store.drop_object(bucket.name, loaded)
    assert list(objects.iterdir()) == []
    store.close()


def test_what_an_interrupted_write_leaves_is_removed_when_the_store_opens(
    tmp_path: Path,
) -> None:
    root = tmp_path / "data"
    store = s3_store.open_store(root)
    record = save_one(store, "k", b"kept")
    store.close()
    objects = root / "buckets" / "tfjob-test" / "objects"
    (objects / ".tmp-0123").write_bytes(b"half a record")
    orphan = objects / f"{'0' * 64}-{'1' * 16}.data"
    orphan.write_bytes(b"bytes no record names")
    (root / "buckets" / "never-committed" / "objects").mkdir(parents=True)
    store = s3_store.open_store(root)
    assert sorted(p.name for p in objects.iterdir()) == sorted(
        [f"{hashlib.sha256(b'k').hexdigest()}.json", record.data]
    )
    assert [b.name for b in store.list_buckets()] == ["tfjob-test"]
    store.close()


def test_a_damaged_store_is_reported_not_served(tmp_path: Path) -> None:
    root = tmp_path / "data"
    store = s3_store.open_store(root)
    record = save_one(store, "k", b"kept bytes")
    objects = root / "buckets" / "tfjob-test" / "objects"
    (objects / record.data).write_bytes(b"kept bytez")  # same size, other bytes
    with pytest.raises(s3_store.StoreError, match="SHA-256 is not the one recorded"):
        b"".join(store.read_data("tfjob-test", record))
    (objects / record.data).write_bytes(b"short")
    with pytest.raises(s3_store.StoreError, match="5 bytes, the record of tfjob-test/k says 10"):
        b"".join(store.read_data("tfjob-test", record))
    record_file = objects / f"{hashlib.sha256(b'k').hexdigest()}.json"
    value = json.loads(record_file.read_text())
    record_file.write_text(json.dumps({**value, "data": "../../../etc/passwd"}))
    with pytest.raises(s3_store.StoreError, match="does not match its name"):
        store.list_objects("tfjob-test")
    record_file.write_bytes(b" " * (s3_store.MAX_RECORD_BYTES + 1))
    with pytest.raises(s3_store.StoreError, match="more than the 1048576 bytes"):
        store.list_objects("tfjob-test")
    store.close()


def test_one_server_at_a_time_keeps_a_store(tmp_path: Path) -> None:
    root = tmp_path / "data"
    assert s3_store_upkeep.find_store_holder(root) is None
    store = s3_store.open_store(root)
    assert s3_store_upkeep.find_store_holder(root) == os.getpid()
    with pytest.raises(s3_store.StoreError, match=f"an S3 server \\(pid {os.getpid()}\\) is using"):
        s3_store.open_store(root)
    with pytest.raises(s3_store.StoreError, match="stop it first"):
        s3_store_upkeep.remove_store(root)
    store.close()
    assert s3_store_upkeep.find_store_holder(root) is None
    s3_store_upkeep.remove_store(root)
    assert not root.exists()


def test_what_moto_changed_is_saved_and_loaded_back_into_a_fresh_moto(tmp_path: Path) -> None:
    import boto3
    from moto import mock_aws

    s3_sync.install_change_tracking()
    root = tmp_path / "data"
    store = s3_store.open_store(root)
    mirror = s3_sync.BackendMirror(store)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        with s3_sync.collect_changes() as changes:
            client.create_bucket(Bucket="tfjob-test")
            client.put_object(
                Bucket="tfjob-test",
                Key="a/b.json",
                Body=b'{"x": 1}',
                ContentType="application/json",
                Metadata={"run": "r1"},
            )
            client.put_object(Bucket="tfjob-test", Key="gone", Body=b"x")
            client.delete_object(Bucket="tfjob-test", Key="gone")
            client.put_object_tagging(
                Bucket="tfjob-test",
                Key="a/b.json",
                Tagging={"TagSet": [{"Key": "kind", "Value": "metrics"}]},
            )
        assert changes == {
            s3_sync.Change("tfjob-test", None),
            s3_sync.Change("tfjob-test", "a/b.json"),
            s3_sync.Change("tfjob-test", "gone"),
        }
        mirror.save_changes(changes)
        before = client.head_object(Bucket="tfjob-test", Key="a/b.json")
    store.close()

    store = s3_store.open_store(root)
    with mock_aws():  # a fresh, empty moto
        restored = s3_sync.BackendMirror(store).restore()
        assert (restored.buckets, restored.objects, restored.data_bytes) == (1, 1, 8)
        client = boto3.client("s3", region_name="us-east-1")
        got = client.get_object(Bucket="tfjob-test", Key="a/b.json")
        assert got["Body"].read() == b'{"x": 1}'
        for field in ("ETag", "ContentType", "Metadata", "LastModified", "ContentLength"):
            assert got[field] == before[field], field
        tags = client.get_object_tagging(Bucket="tfjob-test", Key="a/b.json")["TagSet"]
        assert tags == [{"Key": "kind", "Value": "metrics"}]
        assert [o["Key"] for o in client.list_objects_v2(Bucket="tfjob-test")["Contents"]] == [
            "a/b.json"
        ]
    store.close()


def test_a_change_that_cannot_be_saved_is_answered_with_500_not_success() -> None:
    class FailingMirror:
        store = type("Store", (), {"root": Path("/nowhere")})()

        def save_changes(self, changes: object) -> None:
            raise OSError(28, "No space left on device")

    def moto(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Length", "0")])
        return []

    answered: list[str] = []
    layer = s3_persist.PersistingMiddleware(moto, FailingMirror())  # type: ignore[arg-type]
    body = b"".join(
        layer(
            {"REQUEST_METHOD": "PUT", "PATH_INFO": "/b/k"},
            lambda status, headers, exc_info=None: answered.append(status),
        )
    )
    assert answered == ["500 Internal Server Error"]
    assert b"<Code>InternalError</Code>" in body and b"No space left on device" in body
    assert b"in memory only" in body
