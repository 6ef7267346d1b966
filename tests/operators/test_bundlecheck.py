"""fetch_bundle's snapshot (operators/bundlecheck.py): the compressed-size limit comes first.

A small stand-in for the boto3 client records what was asked of it, so a test
can show that an archive over the limit is refused from its HEAD alone.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import operators.settings
from harness.bundle_fixtures import build_good
from operators.bundlecheck import snapshot_bundle
from runtime.bundle import BundleError, Refusal
from tfjob.runlayout import RunLayout

URI = "s3://bundles/team/digits.tar.gz"
RUN = RunLayout.parse("s3://out/runs/r1")


class RecordingS3:
    """head_object/download_file/upload_file over one local file, recording the calls."""

    def __init__(self, source: Path, announced: int | None = None, extra: int = 0) -> None:
        self.source = source
        self.announced = source.stat().st_size if announced is None else announced
        self.extra = extra  # bytes the download delivers beyond the file (a replaced object)
        self.calls: list[str] = []

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803 - boto3's names
        self.calls.append("head_object")
        return {"ContentLength": self.announced, "ETag": '"abc"'}

    def download_file(
        self,
        bucket: str,
        key: str,
        filename: str,
        Callback: Callable[[int], None],  # noqa: N803
    ) -> None:
        self.calls.append("download_file")
        shutil.copy(self.source, filename)
        Callback(self.source.stat().st_size + self.extra)

    def upload_file(self, filename: str, bucket: str, key: str) -> None:
        self.calls.append(f"upload_file {bucket}/{key}")


def test_a_bundle_over_the_compressed_limit_is_refused_before_any_download(tmp_path: Path) -> None:
    s3 = RecordingS3(build_good(tmp_path / "good.tar.gz"), announced=30 * 1024**3)
    with pytest.raises(BundleError) as caught:
        snapshot_bundle(s3, URI, RUN, 1024**3, max_compressed_size=20 * 1024**3)
    assert caught.value.reason is Refusal.ARCHIVE_TOO_LARGE
    assert str(caught.value) == (
        f"bundle refused: {URI}: compressed archive over the size limit "
        f"({30 * 1024**3} bytes in S3; the limit is {20 * 1024**3} bytes)"
    )
    assert s3.calls == ["head_object"]


def test_the_limit_defaults_to_the_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = build_good(tmp_path / "good.tar.gz")
    monkeypatch.setattr(operators.settings, "MAX_BUNDLE_COMPRESSED_SIZE", good.stat().st_size - 1)
    s3 = RecordingS3(good)
    with pytest.raises(BundleError, match="compressed archive over the size limit"):
        snapshot_bundle(s3, URI, RUN, 1024**3)
    assert s3.calls == ["head_object"]


def test_a_bundle_within_the_limit_is_checked_and_snapshotted(tmp_path: Path) -> None:
    good = build_good(tmp_path / "good.tar.gz")
    s3 = RecordingS3(good)
    identity = snapshot_bundle(s3, URI, RUN, 1024**3, max_compressed_size=good.stat().st_size)
    assert identity.size == good.stat().st_size and identity.files == 2
    assert s3.calls == ["head_object", "download_file", "upload_file out/runs/r1/bundle.tar.gz"]


def test_a_download_larger_than_the_head_said_is_stopped(tmp_path: Path) -> None:
    s3 = RecordingS3(build_good(tmp_path / "good.tar.gz"), extra=1)
    with pytest.raises(ValueError, match="replaced during the download"):
        snapshot_bundle(s3, URI, RUN, 1024**3)
    assert "upload_file" not in " ".join(s3.calls)
