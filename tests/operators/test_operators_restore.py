"""Staging a gang's restore against the real S3 server: one presigned GET per checkpoint
file, nothing wider, the step from TensorFlow's pointer, and refusals before signing."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from operators import restore
from tfjob import checkpoints
from tfjob.checkpoints import RestoreTooLarge
from tfjob.runlayout import RunLayout, S3Path

RUN = "outputs/job/runs/tfjob__job/manual__1/"
POINTER = b'model_checkpoint_path: "ckpt-7"\nall_model_checkpoint_paths: "ckpt-7"\n'


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return answer.read()


def test_each_checkpoint_file_gets_its_own_get_and_the_step_comes_from_the_pointer(s3_server):
    s3, bucket = s3_server.client(), s3_server.bucket
    files = {
        "checkpoint": POINTER,
        "ckpt-7.index": b"index",
        "ckpt-7.data-00000-of-00001": b"d" * 99,
        "sub/notes.txt": b"n",
    }
    for name, body in files.items():
        s3.put_object(Bucket=bucket, Key=RUN + "checkpoints/" + name, Body=body)
    s3.put_object(Bucket=bucket, Key=RUN + "model/saved_model.pb", Body=b"model")

    source = RunLayout.parse(f"s3://{bucket}/{RUN}").checkpoints
    staged = restore.stage_checkpoints(s3, s3_server.presigner(), source, 300)

    assert (staged.step, staged.files, staged.size) == (7, 4, sum(map(len, files.values())))
    assert staged.source == f"s3://{bucket}/{RUN}checkpoints/"
    assert staged.describe() == (
        f"restoring 4 checkpoint files ({staged.size} bytes, step 7) "
        f"from s3://{bucket}/{RUN}checkpoints/"
    )
    document = staged.document
    assert (document["version"], document["step"]) == (1, 7)
    assert sorted(item["path"] for item in document["files"]) == sorted(files)
    for item in document["files"]:
        assert item["size"] == len(files[item["path"]])
        assert fetch(item["url"]) == files[item["path"]]
    # A grant names its object: another key under the same signature is refused.
    url = document["files"][0]["url"]
    forged = url.replace("checkpoints/" + document["files"][0]["path"], "model/saved_model.pb")
    with pytest.raises(urllib.error.HTTPError) as refused:
        fetch(forged)
    assert refused.value.code == 403


def test_no_checkpoints_stage_an_empty_restore(s3_server):
    staged = restore.stage_checkpoints(
        s3_server.client(),
        s3_server.presigner(),
        S3Path(s3_server.bucket, "outputs/none/runs/tfjob__none/r/checkpoints/"),
        300,
    )
    assert staged.document == {"version": 1, "source": None, "step": None, "files": []}
    assert staged.describe() == "no checkpoint to restore: the programs start from scratch"


def test_too_many_checkpoint_files_are_refused_before_anything_is_signed(s3_server, monkeypatch):
    s3, bucket = s3_server.client(), s3_server.bucket
    prefix = "outputs/many/runs/tfjob__many/r/checkpoints/"
    for index in range(4):
        s3.put_object(Bucket=bucket, Key=f"{prefix}f{index}", Body=b"x")
    monkeypatch.setattr(checkpoints, "MAX_RESTORE_FILES", 3)
    monkeypatch.setattr(restore, "MAX_RESTORE_FILES", 3)

    class NoSigning:
        def generate_presigned_url(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            raise AssertionError("signed although refused")

    with pytest.raises(RestoreTooLarge, match="4 files"):
        restore.stage_checkpoints(s3, NoSigning(), S3Path(bucket, prefix), 300)


def test_an_oversized_pointer_gives_no_step_but_is_restored(s3_server, monkeypatch):
    s3, bucket = s3_server.client(), s3_server.bucket
    prefix = "outputs/ptr/runs/tfjob__ptr/r/checkpoints/"
    s3.put_object(Bucket=bucket, Key=prefix + "checkpoint", Body=POINTER)
    monkeypatch.setattr(restore, "MAX_POINTER_BYTES", 10)
    staged = restore.stage_checkpoints(s3, s3_server.presigner(), S3Path(bucket, prefix), 300)
    assert (staged.step, staged.files) == (None, 1)
