"""tshell tensorboard end to end: two runs' event files in S3, TensorBoard serving both,
headless Chromium opening it.

What is real: the event files (written by TensorFlow's `tf.summary` in a child
process), the S3 server and the runs' keys (tfjob/runlayout.py), the `tshell`
command in its own process, the TensorBoard it starts, its scalars API and
Debian's Chromium (driven by Playwright, as tests/operators/test_run_view_browser.py
does). What stands in: Airflow's REST answers for the two runs and its
`/tfjob` files API, served here from the same S3 objects the real one reads
(runview/files.py; its own tests are tests/tshell/test_tshell_run_commands.py's).

With $TFJOB_VIEW_SCREENSHOTS set (docs/images/), the page is saved as
tensorboard-two-runs.jpg for docs/tshell.md.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from harness.repo_root import REPO_ROOT
from harness.s3_fixtures import S3Server
from harness.tshell_fixtures import MACHINE_SETTINGS
from tfjob.runlayout import RunLayout
from tshell.runs.event_mirror import name_run_for_board
from tshell.runs.lookup import RunRef

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DAG = "tfjob_submit__team-a"
RUNS = ("manual__2026-12-07T10:00:00+00:00", "manual__2026-12-07T11:00:00+00:00")
SERVE_TIMEOUT_S = 300.0  # TensorBoard imports TensorFlow: tens of seconds on a busy machine
UI_TIMEOUT_MS = 120_000

# Two runs of one program, one learning faster: `loss` and `accuracy` by step, as
# digits-ps's chief writes them (tf.summary scalars).
WRITE_EVENTS = textwrap.dedent(
    """
    import sys
    import tensorflow as tf

    for folder, rate in zip(sys.argv[1::2], map(float, sys.argv[2::2])):
        writer = tf.summary.create_file_writer(folder)
        with writer.as_default():
            for step in range(0, 401, 50):
                tf.summary.scalar("loss", 2.3 * (1 - rate) ** (step / 50) + 0.1, step=step)
                tf.summary.scalar("accuracy", 0.95 - 0.85 * (1 - rate) ** (step / 50), step=step)
        writer.close()
    """
)


def output_of(s3: S3Server) -> str:
    return f"s3://{s3.bucket}/digits"


class AirflowFromS3(http.server.BaseHTTPRequestHandler):
    """Airflow's answers for the two runs; their files come from S3 under each run's prefix."""

    s3: Any = None
    output = ""

    def answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")]
        if len(parts) == 7 and parts[1:5] == ["api", "v2", "dags", DAG] and parts[6] in RUNS:
            body = {"dag_id": DAG, "dag_run_id": parts[6], "state": "success", "conf": {}}
            return self.answer(200, json.dumps(body).encode())
        if len(parts) >= 6 and parts[1:4] == ["tfjob", "runs", DAG] and parts[4] in RUNS:
            layout = RunLayout.for_run(self.output, DAG, parts[4])
            if len(parts) == 6:
                under = urllib.parse.parse_qs(url.query).get("under", [""])[0]
                page = self.s3.list_objects_v2(Bucket=layout.bucket, Prefix=layout.root.key + under)
                files = [
                    {
                        "path": layout.path_of(item["Key"]),
                        "size": item["Size"],
                        "last_modified": item["LastModified"].isoformat(),
                    }
                    for item in page.get("Contents", [])
                ]
                listing = {"run_prefix": layout.root.uri, "files": files, "truncated": False}
                return self.answer(200, json.dumps(listing | {"limit": 10000}).encode())
            key = layout.file("/".join(parts[6:])).key
            data = self.s3.get_object(Bucket=layout.bucket, Key=key)["Body"].read()
            return self.answer(200, data, "application/octet-stream")
        self.answer(404, b'{"detail": "no such route"}')

    def do_POST(self) -> None:  # noqa: N802 - only the login
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer(201, json.dumps({"access_token": "t"}).encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def runs_in_s3(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> S3Server:
    """Each run's chief-0 wrote its summaries; they lie under the run's tensorboard/ folder."""
    local = tmp_path_factory.mktemp("events")
    folders = [local / run_id.replace(":", "_") for run_id in RUNS]
    rates = ("0.35", "0.2")
    argv = [x for pair in zip(map(str, folders), rates, strict=True) for x in pair]
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "2"}
    subprocess.run(
        [sys.executable, "-c", WRITE_EVENTS, *argv], env=env, check=True, timeout=SERVE_TIMEOUT_S
    )
    client = s3_server.client()
    for run_id, folder in zip(RUNS, folders, strict=True):
        replica = RunLayout.for_run(output_of(s3_server), DAG, run_id).replica_tensorboard(
            "chief", 0
        )
        for path in folder.iterdir():
            client.upload_file(str(path), replica.bucket, replica.key + path.name)
    return s3_server


@pytest.fixture(scope="module")
def airflow_url(runs_in_s3: S3Server) -> Iterator[str]:
    AirflowFromS3.s3, AirflowFromS3.output = runs_in_s3.client(), output_of(runs_in_s3)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), AirflowFromS3)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.fixture(scope="module")
def board(
    airflow_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`tshell tensorboard RUN1 RUN2` running in its own process, and the URL it printed."""
    home = tmp_path_factory.mktemp("tshell")
    env = {k: v for k, v in os.environ.items() if k not in MACHINE_SETTINGS}
    env |= {
        "TSHELL_CONFIG": str(home / "no-config.yaml"),
        "TSHELL_SERVICES_FILE": str(home / "no-services.json"),
        "TSHELL_AIRFLOW_URL": airflow_url,
        "TSHELL_USERNAME": "alice",
        "TSHELL_PASSWORD": "pw",
    }
    argv = [sys.executable, "-m", "tshell", "tensorboard", *RUNS, "--dag", DAG]
    process = subprocess.Popen(
        [*argv, "--cache-dir", str(home / "cache")],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    deadline = time.monotonic() + SERVE_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        line = process.stdout.readline() if process.stdout else ""
        lines.append(line)
        if line.startswith("TensorBoard at "):
            break
    else:
        process.kill()
        pytest.fail(f"no URL printed: {lines} {process.stderr.read() if process.stderr else ''}")
    url = lines[-1].split()[2]
    yield process, url
    if process.poll() is None:
        process.kill()
        process.wait()


def test_tensorboard_serves_both_runs_loss_tags_to_its_scalars_api(board) -> None:
    _, url = board
    with urllib.request.urlopen(url + "data/plugin/scalars/tags", timeout=30) as answer:
        tags = json.load(answer)
    for run_id in RUNS:
        name = name_run_for_board(RunRef(DAG, run_id))
        assert "loss" in tags.get(f"{name}/chief-0", {}), (name, sorted(tags))


def test_headless_chromium_opens_tensorboard_with_both_runs(board) -> None:
    from playwright.sync_api import sync_playwright

    _, url = board
    names = [name_run_for_board(RunRef(DAG, run_id)) for run_id in RUNS]
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        page = chromium.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(UI_TIMEOUT_MS)
        page.goto(url + "#timeseries")
        page.get_by_text("loss", exact=True).first.wait_for()
        for name in names:
            page.get_by_text(f"{name}/chief-0").first.wait_for()
        page.wait_for_timeout(2000)  # let the charts draw their lines for the picture
        folder = os.environ.get("TFJOB_VIEW_SCREENSHOTS")
        if folder:
            page.screenshot(
                path=os.path.join(folder, "tensorboard-two-runs.jpg"), type="jpeg", quality=70
            )
        chromium.close()


def test_ctrl_c_stops_tshell_and_the_tensorboard_it_started(board) -> None:
    process, url = board
    port = int(urllib.parse.urlsplit(url).port or 0)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 130
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
