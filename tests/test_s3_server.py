"""scripts/s3_server.py up/down as the Makefile and the demo use it, and transfer retries."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from runtime import transfer

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "s3_server.py"


def s3_server_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=90
    )


def pid_alive(pid: int) -> bool:
    """Running, not a zombie: a stopped server may wait a moment for init to reap it."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_up_daemonises_with_buckets_and_down_stops_it(tmp_path: Path) -> None:
    state = tmp_path / "s3"
    started = s3_server_cli(
        "up", "--port", "0", "--state-dir", str(state), "--bucket", "tfjob-demo"
    )
    assert started.returncode == 0, started.stderr
    info = json.loads((state / "ready.json").read_text())
    try:
        assert f"serving {info['endpoint']}" in started.stdout
        client = boto3.client(
            "s3",
            endpoint_url=info["endpoint"],
            aws_access_key_id="tfjob-local",
            aws_secret_access_key="tfjob-local-secret",
            region_name="us-east-1",
        )
        assert [b["Name"] for b in client.list_buckets()["Buckets"]] == ["tfjob-demo"]
        again = s3_server_cli("up", "--port", "0", "--state-dir", str(state))
        assert again.returncode == 0 and "already serving" in again.stdout
    finally:
        stopped = s3_server_cli("down", "--state-dir", str(state))
    assert stopped.returncode == 0 and f"stopped (pid {info['pid']})" in stopped.stdout
    assert not pid_alive(info["pid"])
    assert not (state / "ready.json").exists()
    assert "not running" in s3_server_cli("down", "--state-dir", str(state)).stdout


class FlakyHandler(http.server.BaseHTTPRequestHandler):
    failures_left = 0
    requests = 0

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        type(self).requests += 1
        if type(self).failures_left > 0:
            type(self).failures_left -= 1
            self.send_response(503)
            self.end_headers()
            return
        body = (
            b"payload"
            if self.path.startswith("/ok")
            else b"<Error><Code>AccessDenied</Code><Message>no</Message></Error>"
        )
        self.send_response(200 if self.path.startswith("/ok") else 403)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def flaky_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FlakyHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FlakyHandler.requests = 0
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()


def test_download_retries_server_errors_then_succeeds(tmp_path: Path, flaky_server: str) -> None:
    FlakyHandler.failures_left = 2
    size = transfer.download_to_file(
        f"{flaky_server}/ok?X-Amz-Signature=s", tmp_path / "f", retries=3
    )
    assert size == 7 and (tmp_path / "f").read_bytes() == b"payload"
    assert FlakyHandler.requests == 3


def test_download_does_not_retry_a_refusal_and_names_the_s3_code(
    tmp_path: Path, flaky_server: str
) -> None:
    FlakyHandler.failures_left = 0
    with pytest.raises(transfer.TransferError) as caught:
        transfer.download_to_file(
            f"{flaky_server}/denied?X-Amz-Signature=secret", tmp_path / "f", retries=3
        )
    assert FlakyHandler.requests == 1
    assert caught.value.status == 403 and caught.value.code == "AccessDenied"
    assert "secret" not in str(caught.value) and not (tmp_path / "f").exists()
