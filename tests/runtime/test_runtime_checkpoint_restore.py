"""Restoring checkpoints in the pod (runtime/checkpoints.py, run by fetch.py).

fetch.py runs as a subprocess against the real local S3 server, as the init
container runs it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.bundle_fixtures import build_good, run_fetch
from harness.checkpoint_fixtures import (
    DAG,
    POINTER_TEXT,
    assert_no_credentials,
)
from harness.s3_fixtures import S3Server
from runtime import checkpoints


def put_restore_files(server: S3Server, source: str, files: dict[str, bytes]) -> list[dict]:
    """Store `files` under `source` and list them as restore.json does (presigned GETs)."""
    client, presigner = server.client(), server.presigner()
    listed = []
    for path, body in files.items():
        client.put_object(Bucket=server.bucket, Key=source + path, Body=body)
        url = presigner.generate_presigned_url(
            "get_object", Params={"Bucket": server.bucket, "Key": source + path}, ExpiresIn=300
        )
        listed.append({"path": path, "size": len(body), "url": url})
    return listed


def fetch_with_restore(
    tmp_path: Path, restore: dict | bytes | None, extra_env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], Path]:
    access = tmp_path / "access"
    access.mkdir(parents=True)
    if restore is not None:
        body = restore if isinstance(restore, bytes) else json.dumps(restore).encode()
        (access / "restore.json").write_bytes(body)
    bundle = build_good(tmp_path / "good.tar.gz")
    return run_fetch(tmp_path, bundle.as_uri(), extra_env)


RESTORED = {
    "checkpoint": POINTER_TEXT.format(n=3).encode(),
    "ckpt-3.index": b"index-3",
    "ckpt-3.data-00000-of-00001": bytes(range(256)) * 40,
    "train/events.out": b"",
    "train/deep/state.json": b'{"epoch": 3}',
}


def test_restore_downloads_every_listed_file_into_checkpoint_dir_and_says_so(
    tmp_path: Path, s3_server: S3Server
) -> None:
    source = f"outputs/job/runs/{DAG}/run-restore/checkpoints/"
    files = put_restore_files(s3_server, source, RESTORED)
    restore = {"version": 1, "source": source, "step": 3, "files": files}
    result, workspace = fetch_with_restore(tmp_path, restore)
    assert result.returncode == 0, result.stderr
    restored = workspace / "checkpoints"
    for path, body in RESTORED.items():
        assert (restored / path).read_bytes() == body
    every = sorted(str(p.relative_to(restored)) for p in restored.rglob("*") if p.is_file())
    assert every == sorted(RESTORED)
    assert sorted(p.name for p in workspace.iterdir()) == ["checkpoints", "code", "data"]
    total = sum(len(body) for body in RESTORED.values())
    assert f"restored 5 checkpoint files ({total} bytes, step 3) from {source}" in result.stderr
    assert (workspace / "code" / "train.py").exists()  # the bundle first, as always
    assert_no_credentials(result.stdout + result.stderr)


# The last one is what Airflow writes for a gang that starts from scratch.
@pytest.mark.parametrize(
    "restore",
    [
        None,
        {"files": []},
        {"version": 1, "source": None, "step": None, "files": []},
    ],
    ids=["no-restore-json", "empty-list", "from-scratch"],
)
def test_nothing_to_restore_leaves_the_workspace_as_the_bundle_made_it(
    tmp_path: Path, restore: dict | None
) -> None:
    result, workspace = fetch_with_restore(tmp_path, restore)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in workspace.iterdir()) == ["code", "data"]
    assert "restored" not in result.stderr


def a_listing(url: str, **changes: object) -> dict:
    return {
        "version": 1,
        "source": "s/",
        "step": None,
        "files": [{"path": "ckpt-1.index", "size": 5, "url": url}],
        **changes,
    }


REFUSED = {
    "parent": ({"path": "../x"}, "files[0].path: '../x' given; a relative path inside"),
    "inner-parent": ({"path": "a/../../x"}, "no '..', '.' or empty parts"),
    "absolute": ({"path": "/etc/passwd"}, "'/etc/passwd' given; a relative path inside"),
    "empty-part": ({"path": "a//b"}, "no '..', '.' or empty parts"),
    "dot": ({"path": "./a"}, "no '..', '.' or empty parts"),
    "backslash": ({"path": "a\\..\\..\\x"}, "no leading '/', no '\\'"),
    "empty": ({"path": ""}, "files[0].path: '' given"),
    "negative-size": ({"size": -1}, "files[0].size: -1 given; a non-negative integer"),
    "text-size": ({"size": "5"}, "files[0].size: '5' given"),
    "no-url": ({"url": ""}, "files[0].url: a presigned URL is required"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_bad_path_or_size_is_refused_with_65_before_anything_is_downloaded(
    tmp_path: Path, s3_server: S3Server, case: str
) -> None:
    change, text = REFUSED[case]
    (good,) = put_restore_files(s3_server, "refused/", {"ckpt-1.index": b"12345"})
    listing = a_listing(good["url"])
    listing["files"] = [good, {**good, "path": "ckpt-2.index"}]
    listing["files"][0] = {**good, **change}
    result, workspace = fetch_with_restore(tmp_path, listing)
    assert result.returncode == 65, result.stderr
    assert "checkpoint restore refused: restore.json: " in result.stderr and text in result.stderr
    assert not workspace.exists() or list(workspace.iterdir()) == []  # not even the bundle
    assert "Traceback" not in result.stderr
    assert_no_credentials(result.stderr)


def test_too_many_files_or_bytes_are_refused_naming_the_limit(
    tmp_path: Path, s3_server: S3Server
) -> None:
    files = put_restore_files(s3_server, "limits/", {f"f{i}": b"x" * 10 for i in range(3)})
    listing = {"version": 1, "source": "limits/", "step": 1, "files": files}
    result, workspace = fetch_with_restore(
        tmp_path / "count", listing, {"TFJOB_MAX_RESTORE_FILES": "2"}
    )
    assert result.returncode == 65
    assert "3 files listed; the limit is 2 (TFJOB_MAX_RESTORE_FILES)" in result.stderr
    assert not workspace.exists() or list(workspace.iterdir()) == []
    result, workspace = fetch_with_restore(
        tmp_path / "bytes", listing, {"TFJOB_MAX_RESTORE_BYTES": "29"}
    )
    assert result.returncode == 65
    assert "add up to 30 bytes; the limit is 29 (TFJOB_MAX_RESTORE_BYTES)" in result.stderr
    assert not workspace.exists() or list(workspace.iterdir()) == []


def test_a_restore_json_over_its_size_cap_is_refused_unread(tmp_path: Path) -> None:
    body = b" " * checkpoints.MAX_RESTORE_JSON_BYTES + b'{"files": []}'
    result, workspace = fetch_with_restore(tmp_path, body)
    assert result.returncode == 65
    assert f"at most {checkpoints.MAX_RESTORE_JSON_BYTES} are read" in result.stderr
    assert not workspace.exists() or list(workspace.iterdir()) == []


def test_a_path_listed_as_a_file_and_a_directory_is_refused(tmp_path: Path) -> None:
    listing = {
        "files": [
            {"path": "a", "size": 1, "url": "http://127.0.0.1:1/a"},
            {"path": "a/b", "size": 1, "url": "http://127.0.0.1:1/b"},
        ]
    }
    result, _ = fetch_with_restore(tmp_path, listing)
    assert result.returncode == 65
    assert "'a' is listed as a file and as the directory of 'a/b'" in result.stderr


@pytest.mark.parametrize(
    "listed, words",
    [(4, "longer than the 4 bytes"), (9, "5 bytes downloaded; restore.json lists 9")],
)
def test_a_checkpoint_of_another_size_than_listed_is_refused_and_not_kept(
    tmp_path: Path, s3_server: S3Server, listed: int, words: str
) -> None:
    (entry,) = put_restore_files(s3_server, "sized/", {"ckpt-1.index": b"12345"})
    result, workspace = fetch_with_restore(
        tmp_path, a_listing(entry["url"], files=[{**entry, "size": listed}])
    )
    assert result.returncode == 65, result.stderr
    assert f"checkpoint restore refused: ckpt-1.index: {words}" in result.stderr
    assert list((workspace / "checkpoints").iterdir()) == []
    assert sorted(p.name for p in workspace.iterdir()) == ["checkpoints", "code", "data"]
    assert_no_credentials(result.stderr)


def test_a_failed_download_exits_74_without_the_url(tmp_path: Path, s3_server: S3Server) -> None:
    url = s3_server.presigner().generate_presigned_url(
        "get_object", Params={"Bucket": s3_server.bucket, "Key": "absent/ckpt"}, ExpiresIn=300
    )
    result, _ = fetch_with_restore(tmp_path, a_listing(url))
    assert result.returncode == 74, result.stderr
    assert "checkpoint restore failed: download of" in result.stderr and "404" in result.stderr
    assert_no_credentials(result.stderr)
