"""The pod's init container (runtime/fetch.py) run as a subprocess, as the pod runs it.

Bundles are served by file:// URLs here (urllib treats them like any URL);
tests/s3/test_s3_roundtrip.py does the same through the S3 server.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness.bundle_fixtures import BAD_BUNDLES, OVERSIZE_LIMIT, build_good, run_fetch
from harness.repo_root import REPO_ROOT
from runtime import transfer

REPO = REPO_ROOT
FETCH = ("-m", "runtime.fetch")  # as protocol.FETCH_COMMAND runs it


def test_fetch_extracts_a_good_bundle_and_prints_a_summary_without_the_url(tmp_path: Path) -> None:
    bundle = build_good(tmp_path / "good.tar.gz")
    url = bundle.as_uri()
    result, workspace = run_fetch(tmp_path, url)
    assert result.returncode == 0, result.stderr
    assert (workspace / "code" / "train.py").read_text() == "print('training')\n"
    assert "bundle 'evil'" in result.stderr and "2 files" in result.stderr
    assert str(bundle) not in result.stderr + result.stdout
    assert sorted(p.name for p in workspace.iterdir()) == ["code", "data"]


def test_fetch_without_bundle_url_exits_2_and_says_what_is_missing(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "TFJOB_ACCESS_DIR": str(tmp_path / "nothing"),
        "TFJOB_WORKSPACE": str(tmp_path / "ws"),
    }
    result = subprocess.run(
        [sys.executable, "-I", *FETCH], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "bundle_url" in result.stderr and "access Secret" in result.stderr


def test_fetch_with_no_bundle_downloads_nothing_and_leaves_code_and_data_empty(
    tmp_path: Path,
) -> None:
    """A request without a bundle: the access Secret's bundle_url is empty and never read."""
    result, workspace = run_fetch(tmp_path, "", {"TFJOB_NO_BUNDLE": "1"})
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in workspace.iterdir()) == ["code", "data"]
    assert not any((workspace / "code").iterdir()) and not any((workspace / "data").iterdir())
    assert "no bundle: the program is in the image" in result.stderr
    without_the_flag, _ = run_fetch(tmp_path / "again", "")
    assert without_the_flag.returncode == 2 and "is empty" in without_the_flag.stderr


def test_fetch_of_a_missing_object_exits_74(tmp_path: Path) -> None:
    result, workspace = run_fetch(tmp_path, (tmp_path / "absent.tar.gz").as_uri())
    assert result.returncode == 74
    assert "download of" in result.stderr
    assert not (workspace / "code").exists()


@pytest.mark.parametrize("case", sorted(BAD_BUNDLES))
def test_fetch_refuses_bad_bundle_with_exit_65_and_the_reason(tmp_path: Path, case: str) -> None:
    build, _reason, text = BAD_BUNDLES[case]
    bundle = build(tmp_path / f"{case}.tar.gz")
    extra = {"TFJOB_MAX_BUNDLE_BYTES": str(OVERSIZE_LIMIT)} if case == "oversized" else {}
    result, workspace = run_fetch(tmp_path, bundle.as_uri(), extra)
    assert result.returncode == 65, result.stderr
    assert text in result.stderr
    assert "Traceback" not in result.stderr
    assert not workspace.exists() or list(workspace.iterdir()) == []


def test_fetch_refuses_an_archive_over_the_compressed_limit_before_reading_it(
    tmp_path: Path,
) -> None:
    bundle = build_good(tmp_path / "good.tar.gz")
    size = bundle.stat().st_size
    limit = {"TFJOB_MAX_BUNDLE_COMPRESSED_BYTES": str(size - 1)}
    result, workspace = run_fetch(tmp_path, bundle.as_uri(), limit)
    assert result.returncode == 65, result.stderr
    assert (
        "bundle refused: <archive>: compressed archive over the size limit" in result.stderr
        and f"{size} bytes; the limit is {size - 1})" in result.stderr
    )
    assert list(workspace.iterdir()) == []  # no partial download left behind


def test_fetch_with_a_compressed_limit_that_is_not_a_number_exits_2(tmp_path: Path) -> None:
    bundle = build_good(tmp_path / "good.tar.gz")
    result, _ = run_fetch(tmp_path, bundle.as_uri(), {"TFJOB_MAX_BUNDLE_COMPRESSED_BYTES": "20GiB"})
    assert result.returncode == 2
    assert "TFJOB_MAX_BUNDLE_COMPRESSED_BYTES: '20GiB' given" in result.stderr


class _NoLengthHandler(http.server.BaseHTTPRequestHandler):
    """Answers with 3 MiB and no Content-Length (the body ends when the connection closes)."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(200)
        self.end_headers()
        try:
            for _ in range(3):
                self.wfile.write(bytes(1024 * 1024))
        except OSError:
            pass  # the client stopped reading, as it should

    def log_message(self, *args: object) -> None:
        pass


def test_download_without_a_content_length_stops_once_past_max_bytes(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NoLengthHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/bundle.tar.gz?X-Amz-Signature=secret"
        with pytest.raises(transfer.TransferError) as caught:
            transfer.download_to_file(url, tmp_path / "b.tar.gz", retries=0, max_bytes=1024**2)
    finally:
        server.shutdown()
        server.server_close()
    assert caught.value.code == "EntityTooLarge"
    assert "bytes; the limit is 1048576" in str(caught.value)
    assert "secret" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []
