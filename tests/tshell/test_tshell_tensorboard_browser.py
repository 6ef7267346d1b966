"""tshell tensorboard end to end: two real runs' event files in S3, TensorBoard serving both,
headless Chromium opening it.

What is real: all of it. A real Airflow (API server, scheduler, triggerer, this repo's
DAGs and plugin, as tests/pipeline/test_pipeline_rest.py starts it) on the shared
pipeline world (harness/world_fixtures.py: the S3 server, localkube); two runs of the
test tenant's submit DAG triggered over REST and awaited to success. Each run's pod runs
the stand-in program (harness/standin.py), which writes a TensorBoard event file into its
TENSORBOARD_DIR (`loss` and `accuracy` scalars by step, as `tf.summary.scalar` writes them:
made here with harness/event_files.py, tensorboard's own protos and record writer, and
handed to the stand-in base64 in the request's env `STANDIN_EVENTS`); the pod's bootstrap
syncs it to the run's `tensorboard/worker-0/` in S3 (tfjob/runlayout.py). The `tshell`
command runs in its own process, logged in to that Airflow only: it reads the runs and
their event files through Airflow's REST API and /tfjob files API. Then the TensorBoard it
starts, its scalars API and Debian's Chromium (driven by Playwright, as
tests/operators/test_run_view_browser.py does).

With $TFJOB_VIEW_SCREENSHOTS set (docs/images/), the page is saved as
tensorboard-two-runs.jpg for docs/tshell.md.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from harness.event_files import frame, tensor_event
from harness.pipeline_fixtures import await_run, explain_run, trigger
from harness.repo_root import REPO_ROOT
from harness.tshell_fixtures import MACHINE_SETTINGS
from harness.world_fixtures import run_world_airflow
from tfjob import pipeline_ids
from tfjob.runlayout import RunLayout
from tshell.runs.event_mirror import name_run_for_board
from tshell.runs.lookup import RunRef

# A world, an Airflow and two runs before the first test: over 600 s on two busy cores.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DAG = pipeline_ids.submit_dag_id("test")
REPLICA = ("worker", 0)  # a single-mode run's one replica
SERVE_TIMEOUT_S = 300.0  # TensorBoard imports TensorFlow: tens of seconds on a busy machine
UI_TIMEOUT_MS = 120_000
# Two runs of one program, one learning faster (its name, its rate); the first also leaves
# checkpoints, which a third run warm-starts from.
RUNS = (("tb-fast", 0.35), ("tb-slow", 0.2))
CHECKPOINTING = json.dumps({"*": {"sleep": 2, "checkpoint_every": 1}})


def write_event_file(rate: float, first_step: int = 0) -> bytes:
    """`loss` and `accuracy` by step, as digits-ps's chief writes them (tf.summary scalars)."""
    events = []
    for step in range(first_step, first_step + 401, 50):
        decay = (1 - rate) ** (step / 50)
        events.append(tensor_event(step, "loss", 2.3 * decay + 0.1))
        events.append(tensor_event(step, "accuracy", 0.95 - 0.85 * decay))
    return frame(*events)


def restore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def airflow(pipeline_world, tmp_path_factory):
    with run_world_airflow(pipeline_world, tmp_path_factory.mktemp("airflow-board")) as handle:
        yield handle


@pytest.fixture(scope="module")
def run_ids(pipeline_world, airflow) -> list[str]:
    """Two runs, each of whose pods wrote its event file; both ended with it in S3."""
    started = []
    for name, rate in RUNS:
        events = base64.b64encode(write_event_file(rate)).decode()
        env = {"STANDIN_EVENTS": events, "STANDIN_BEHAVIOUR": CHECKPOINTING}
        conf = pipeline_world.request(name, env=env)
        started.append((conf, trigger(airflow, DAG, conf)["dag_run_id"]))
    for conf, run_id in started:
        done = await_run(airflow, DAG, run_id)
        assert done["state"] == "success", explain_run(airflow, DAG, run_id)
        folder = RunLayout.for_run(conf["output"], DAG, run_id).replica_tensorboard(*REPLICA)
        keys = pipeline_world.s3_keys(folder.key)
        assert f"{folder.key}events.out.tfevents.0.standin-worker-0" in keys, keys
    return [run_id for _, run_id in started]


@pytest.fixture(scope="module")
def warm_run_id(pipeline_world, airflow, run_ids) -> str:
    """A third run on the first one's output, warm-started from its checkpoints, whose
    summaries go on from step 400."""
    first = pipeline_world.request(RUNS[0][0])
    events = base64.b64encode(write_event_file(RUNS[0][1], first_step=400)).decode()
    conf = pipeline_world.request(
        "tb-warm", output=first["output"], warm_start=run_ids[0], env={"STANDIN_EVENTS": events}
    )
    run_id = trigger(airflow, DAG, conf)["dag_run_id"]
    done = await_run(airflow, DAG, run_id)
    assert done["state"] == "success", explain_run(airflow, DAG, run_id)
    return str(run_id)


def build_tshell_env(airflow: Any, home: Any) -> dict[str, str]:
    """This machine's environment, with tshell logged in to the test's Airflow only."""
    env = {k: v for k, v in os.environ.items() if k not in MACHINE_SETTINGS}
    return env | {
        "TSHELL_CONFIG": str(home / "no-config.yaml"),
        "TSHELL_SERVICES_FILE": str(home / "no-services.json"),
        "TSHELL_AIRFLOW_URL": airflow.url,
        "TSHELL_USERNAME": airflow.username,
        "TSHELL_PASSWORD": airflow.password,
    }


@pytest.fixture(scope="module")
def board(
    airflow: Any, run_ids: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`tshell tensorboard RUN1 RUN2` running in its own process, and the URL it printed."""
    home = tmp_path_factory.mktemp("tshell")
    argv = [sys.executable, "-m", "tshell", "tensorboard", *run_ids, "--dag", DAG]
    process = subprocess.Popen(
        [*argv, "--cache-dir", str(home / "cache")],
        cwd=REPO_ROOT,
        env=build_tshell_env(airflow, home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A user's terminal delivers Ctrl-C; a test run in the background of a script (a
        # CI's `make test &`) has SIGINT ignored, and a child would inherit that.
        preexec_fn=restore_sigint,
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
        process.terminate()  # tshell stops its TensorBoard on SIGTERM as on Ctrl-C
        process.wait(60)


def board_names(run_ids: list[str]) -> list[str]:
    """Each run's replica as TensorBoard names it: `<run>/<role>-<index>`."""
    role, index = REPLICA
    return [f"{name_run_for_board(RunRef(DAG, run_id))}/{role}-{index}" for run_id in run_ids]


def test_tensorboard_serves_both_runs_loss_tags_to_its_scalars_api(board, run_ids) -> None:
    _, url = board
    with urllib.request.urlopen(url + "data/plugin/scalars/tags", timeout=30) as answer:
        tags = json.load(answer)
    for name in board_names(run_ids):
        assert "loss" in tags.get(name, {}), (name, sorted(tags))


def test_headless_chromium_opens_tensorboard_with_both_runs(board, run_ids) -> None:
    from playwright.sync_api import sync_playwright

    _, url = board
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        page = chromium.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(UI_TIMEOUT_MS)
        page.goto(url + "#timeseries")
        page.get_by_text("loss", exact=True).first.wait_for()
        for name in board_names(run_ids):
            page.get_by_text(name).first.wait_for()
        page.wait_for_timeout(2000)  # let the charts draw their lines for the picture
        folder = os.environ.get("TFJOB_VIEW_SCREENSHOTS")
        if folder:
            page.screenshot(
                path=os.path.join(folder, "tensorboard-two-runs.jpg"), type="jpeg", quality=70
            )
        chromium.close()


def test_a_warm_started_run_brings_the_run_it_restored_from_along(
    airflow, run_ids, warm_run_id, tmp_path
) -> None:
    source = run_ids[0]
    cache = tmp_path / "cache"
    done = subprocess.run(
        [sys.executable, "-m", "tshell", "tensorboard", warm_run_id, "--once", "--dag", DAG]
        + ["--cache-dir", str(cache)],
        cwd=REPO_ROOT,
        env=build_tshell_env(airflow, tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"run {warm_run_id} was warm-started from run {source}" in done.stdout, done.stdout
    role, index = REPLICA
    for run_id in (source, warm_run_id):
        folder = cache / DAG / run_id / f"{role}-{index}"
        assert (folder / "events.out.tfevents.0.standin-worker-0").is_file(), done.stdout

    # The TFJob tab's curves name the source run and its TensorBoard folder (the plugin).
    quoted = urllib.parse.quote(warm_run_id, safe="")
    request = urllib.request.Request(
        f"{airflow.url}/tfjob/runs/{DAG}/{quoted}/curves",
        headers={"Authorization": f"Bearer {airflow.token()}"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        board_of_run = json.load(answer)["tensorboard"]
    assert board_of_run["warm_start_from"]["run_id"] == source, board_of_run
    assert board_of_run["warm_start_from"]["tensorboard"].endswith(
        f"/runs/{DAG}/{source}/tensorboard/"
    ), board_of_run


def test_ctrl_c_stops_tshell_and_the_tensorboard_it_started(board) -> None:
    process, url = board
    port = int(urllib.parse.urlsplit(url).port or 0)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 130
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
