"""tshell tensorboard: a run's event files synced into the cache through Airflow's files API.

A fake Airflow (a local HTTP server whose run states and listings the tests
change) serves the runs, so these tests check what is downloaded and when:
only files whose size or time changed, nothing at all over the byte cap, each
run in its own folder under its own name in TensorBoard's --logdir_spec, a
live run followed until it ends, and Ctrl-C stopping the server it started.
TensorBoard itself is replaced by a plain HTTP server here; the slow test in
tests/tshell/test_tshell_tensorboard_browser.py serves real event files with it.
"""

from __future__ import annotations

import _thread
import http.server
import io
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.tshell_fixtures import point_tshell_at
from tfjob.runlayout import RunLayout
from tshell.cli import build_parser
from tshell.cli import run as run_tshell_cli
from tshell.command import run_command
from tshell.exitcodes import ExitCode
from tshell.runs import tensorboard as board_command
from tshell.runs.event_mirror import RunMirror, plan_mirrors
from tshell.runs.lookup import RunRef

DAG = "tfjob_submit__team-a"
RUN_A = "manual__2026-12-07T10:00:00+00:00"
RUN_B = "manual__2026-12-07T11:00:00+00:00"
OUTPUT = "s3://models/digits"
EVENTS = "events.out.tfevents.1765100000.worker-0.1.v2"


def board_path(run_id: str, replica: str, name: str) -> str:
    """A file's path relative to the run prefix, as the files API lists it."""
    layout = RunLayout.for_run(OUTPUT, DAG, run_id)
    return layout.path_of(layout.replica_tensorboard(*replica.split("-")).key) + name


@dataclass
class FakeRun:
    state: str = "success"
    files: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # path -> (bytes, time)
    grown: dict[str, bytes] = field(default_factory=dict)  # served instead: grew since listed
    warm_start: dict[str, object] | None = None  # launch's `warm_start` XCom


@dataclass
class Routes:
    runs: dict[str, FakeRun] = field(default_factory=dict)
    file_gets: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakeAirflow(http.server.BaseHTTPRequestHandler):
    routes = Routes()

    def answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")]
        with self.routes.lock:
            if parts[1:4] == ["api", "v2", "dags"] and len(parts) == 7 and parts[4] == DAG:
                run = self.routes.runs.get(parts[6])
                if run is None:
                    return self.answer(404, b'{"detail": "not found"}')
                body = {"dag_id": DAG, "dag_run_id": parts[6], "state": run.state, "conf": {}}
                return self.answer(200, json.dumps(body).encode())
            if parts[7:] == ["taskInstances", "launch", "xcomEntries", "warm_start"]:
                run = self.routes.runs.get(parts[6])
                if run is None or run.warm_start is None:
                    return self.answer(404, b'{"detail": "no such XCom"}')
                return self.answer(200, json.dumps({"value": run.warm_start}).encode())
            if parts[1:3] == ["tfjob", "runs"] and parts[3] == DAG and parts[5] == "files":
                run = self.routes.runs.get(parts[4])
                if run is None:
                    return self.answer(404, b'{"detail": "no description"}')
                if len(parts) == 6:
                    under = urllib.parse.parse_qs(url.query).get("under", [""])[0]
                    files = [
                        {"path": p, "size": len(b), "last_modified": t}
                        for p, (b, t) in sorted(run.files.items())
                        if p.startswith(under)
                    ]
                    prefix = RunLayout.for_run(OUTPUT, DAG, parts[4]).root.uri
                    listing = {"run_prefix": prefix, "files": files, "truncated": False}
                    return self.answer(200, json.dumps(listing | {"limit": 10000}).encode())
                path = "/".join(parts[6:])
                self.routes.file_gets.append(path)
                if path not in run.files:
                    return self.answer(404, b'{"detail": "no such file"}')
                data = run.grown.get(path, run.files[path][0])
                return self.answer(200, data, "application/octet-stream")
        self.answer(404, b'{"detail": "no such route"}')

    def do_POST(self) -> None:  # noqa: N802 - only the login
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer(201, json.dumps({"access_token": "t"}).encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def airflow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Routes]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeAirflow)
    FakeAirflow.routes = Routes()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    point_tshell_at(monkeypatch, tmp_path, f"http://127.0.0.1:{server.server_port}", "alice", "pw")
    yield FakeAirflow.routes
    server.shutdown()


def tshell(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run_tshell_cli([*argv, "--dag", DAG])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def add_events(routes: Routes, run_id: str, replica: str, data: bytes, stamp: str) -> str:
    path = board_path(run_id, replica, EVENTS)
    routes.runs.setdefault(run_id, FakeRun()).files[path] = (data, stamp)
    return path


def cached(cache: Path, run_id: str, replica: str, name: str = EVENTS) -> Path:
    return cache / DAG / run_id / replica / name


def test_once_copies_each_run_s_event_files_into_its_own_cache_folder_and_exits(
    airflow: Routes, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    add_events(airflow, RUN_A, "worker-0", b"loss-a", "2026-12-07T10:05:00+00:00")
    add_events(airflow, RUN_B, "chief-0", b"loss-b", "2026-12-07T11:05:00+00:00")
    cache = tmp_path / "cache"
    code, out, err = tshell(
        capsys, "tensorboard", RUN_A, RUN_B, "--once", "--cache-dir", str(cache)
    )
    assert code == ExitCode.OK, err
    assert cached(cache, RUN_A, "worker-0").read_bytes() == b"loss-a"
    assert cached(cache, RUN_B, "chief-0").read_bytes() == b"loss-b"
    assert "1 event files" in out and "1 downloaded" in out
    assert f"manual__2026-12-07T10_00_00+00_00: {cache / DAG / RUN_A}" in out


def test_a_second_sync_downloads_only_what_changed_and_drops_what_the_run_no_longer_has(
    airflow: Routes, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    same = add_events(airflow, RUN_A, "worker-0", b"same", "2026-12-07T10:05:00+00:00")
    grows = add_events(airflow, RUN_A, "chief-0", b"grows", "2026-12-07T10:05:00+00:00")
    goes = board_path(RUN_A, "ps-0", EVENTS)
    airflow.runs[RUN_A].files[goes] = (b"goes", "2026-12-07T10:05:00+00:00")
    argv = ("tensorboard", RUN_A, "--once", "--cache-dir", str(cache))
    assert tshell(capsys, *argv)[0] == ExitCode.OK
    assert sorted(airflow.file_gets) == sorted([same, grows, goes])

    airflow.file_gets.clear()
    airflow.runs[RUN_A].files[grows] = (b"grows-more", "2026-12-07T10:06:00+00:00")
    del airflow.runs[RUN_A].files[goes]
    new = add_events(airflow, RUN_A, "worker-1", b"new", "2026-12-07T10:06:00+00:00")
    code, out, err = tshell(capsys, *argv)
    assert code == ExitCode.OK, err
    assert sorted(airflow.file_gets) == sorted([grows, new])
    assert "2 downloaded, 1 unchanged, 1 removed" in out
    assert cached(cache, RUN_A, "chief-0").read_bytes() == b"grows-more"
    assert not cached(cache, RUN_A, "ps-0").exists()

    airflow.file_gets.clear()
    cached(cache, RUN_A, "worker-0").unlink()  # a local copy lost is fetched again
    assert tshell(capsys, *argv)[0] == ExitCode.OK
    assert airflow.file_gets == [same]


def test_a_run_over_the_byte_cap_is_refused_before_anything_is_downloaded(
    airflow: Routes, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    add_events(airflow, RUN_A, "worker-0", b"x" * 600, "2026-12-07T10:05:00+00:00")
    add_events(airflow, RUN_A, "chief-0", b"x" * 600, "2026-12-07T10:05:00+00:00")
    cache = tmp_path / "cache"
    code, _, err = tshell(
        capsys, "tensorboard", RUN_A, "--once", "--cache-dir", str(cache), "--max-run-bytes", "1000"
    )
    assert code == ExitCode.FAILED
    assert "1200 bytes" in err and "--max-run-bytes 1000" in err and "nothing was downloaded" in err
    assert airflow.file_gets == []


def test_a_sync_stops_when_files_grown_since_the_listing_bring_more_than_the_cap(
    airflow: Routes, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = add_events(airflow, RUN_A, "worker-0", b"x" * 600, "2026-12-07T10:05:00+00:00")
    airflow.runs[RUN_A].grown[path] = b"x" * 1600
    cache = tmp_path / "cache"
    code, _, err = tshell(
        capsys, "tensorboard", RUN_A, "--once", "--cache-dir", str(cache), "--max-run-bytes", "1000"
    )
    assert code == ExitCode.FAILED
    assert "more than the 1000 B a run may sync arrived" in err, err
    assert not cached(cache, RUN_A, "worker-0").exists()
    assert not list(cached(cache, RUN_A, "worker-0").parent.glob("*.part"))


def test_a_finished_run_without_event_files_says_so(
    airflow: Routes, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    airflow.runs[RUN_A] = FakeRun()
    code, _, err = tshell(capsys, "tensorboard", RUN_A, "--once", "--cache-dir", str(tmp_path))
    assert code == ExitCode.NOT_FOUND
    assert f"run {RUN_A} of DAG {DAG} has no event files under s3://models/digits/runs/" in err
    assert "TENSORBOARD_DIR" in err


def warm_start_from(run_id: str) -> dict[str, object]:
    """launch's `warm_start` XCom of a run that restored `run_id`'s checkpoints."""
    source = RunLayout.for_run(OUTPUT, DAG, run_id).checkpoints.uri
    return {"requested": run_id, "source": source, "step": 300, "files": 3, "bytes": 10}


def test_a_warm_started_run_brings_the_run_it_restored_from_along(
    airflow: Routes, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    add_events(airflow, RUN_A, "chief-0", b"first", "2026-12-07T10:05:00+00:00")
    add_events(airflow, RUN_B, "chief-0", b"second", "2026-12-07T11:05:00+00:00")
    airflow.runs[RUN_B].warm_start = warm_start_from(RUN_A)
    cache = tmp_path / "cache"
    code, out, err = tshell(capsys, "tensorboard", RUN_B, "--once", "--cache-dir", str(cache))
    assert code == ExitCode.OK, err
    assert f"run {RUN_B} was warm-started from run {RUN_A}" in out
    assert cached(cache, RUN_A, "chief-0").read_bytes() == b"first"
    assert cached(cache, RUN_B, "chief-0").read_bytes() == b"second"
    assert f": {cache / DAG / RUN_A}" in out and f": {cache / DAG / RUN_B}" in out

    # Named too, the source is served once; --no-warm-start serves only what is named.
    code, out, err = tshell(
        capsys, "tensorboard", RUN_A, RUN_B, "--once", "--cache-dir", str(cache)
    )
    assert code == ExitCode.OK, err
    assert "warm-started" not in out and out.count(str(cache / DAG / RUN_A)) == 1
    other = tmp_path / "other"
    code, out, err = tshell(
        capsys, "tensorboard", RUN_B, "--once", "--no-warm-start", "--cache-dir", str(other)
    )
    assert code == ExitCode.OK, err
    assert "warm-started" not in out
    assert not (other / DAG / RUN_A).exists() and cached(other, RUN_B, "chief-0").exists()


def test_a_warm_start_source_that_cannot_be_served_is_said_and_left_out(
    airflow: Routes, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    add_events(airflow, RUN_B, "chief-0", b"second", "2026-12-07T11:05:00+00:00")
    airflow.runs[RUN_A] = FakeRun()  # from before summaries: no event files
    airflow.runs[RUN_B].warm_start = warm_start_from(RUN_A)
    cache = tmp_path / "cache"
    code, out, err = tshell(capsys, "tensorboard", RUN_B, "--once", "--cache-dir", str(cache))
    assert code == ExitCode.OK, err
    assert f"run {RUN_A} of DAG {DAG} has no event files" in out and "not served" in out
    assert str(cache / DAG / RUN_A) not in out.splitlines()[-1]
    assert out.splitlines()[-1].endswith(str(cache / DAG / RUN_B))

    del airflow.runs[RUN_A]  # gone from Airflow: its files cannot be listed
    code, out, err = tshell(capsys, "tensorboard", RUN_B, "--once", "--cache-dir", str(cache))
    assert code == ExitCode.OK, err
    assert "not served" in out, out


def test_an_unknown_run_is_named(
    airflow: Routes, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    add_events(airflow, RUN_A, "worker-0", b"a", "2026-12-07T10:05:00+00:00")
    code, _, err = tshell(
        capsys, "tensorboard", RUN_A, "nope", "--once", "--cache-dir", str(tmp_path)
    )
    assert code == ExitCode.NOT_FOUND
    assert "unknown run 'nope'" in err


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("--port", "70000", "1 to 65535"),
        ("--interval", "0.1", "at least 1"),
        ("--max-run-bytes", "0", "positive"),
    ],
)
def test_option_values_that_cannot_work_are_refused_with_the_option_named(
    airflow: Routes, capsys: pytest.CaptureFixture[str], option: str, value: str, allowed: str
) -> None:
    code, _, err = tshell(capsys, "tensorboard", RUN_A, option, value)
    assert code == ExitCode.INVALID_REQUEST
    assert f"{option} {value}" in err and allowed in err


def test_two_runs_get_one_named_folder_each_in_the_logdir_spec(tmp_path: Path) -> None:
    refs = [RunRef(DAG, RUN_A), RunRef(DAG, RUN_B)]
    argv = board_command.build_tensorboard_argv(plan_mirrors(refs, tmp_path), 6006)
    spec = argv[argv.index("--logdir_spec") + 1]
    assert spec == (
        f"manual__2026-12-07T10_00_00+00_00:{tmp_path / DAG / RUN_A},"
        f"manual__2026-12-07T11_00_00+00_00:{tmp_path / DAG / RUN_B}"
    )
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    same_id = plan_mirrors([RunRef(DAG, RUN_A), RunRef("tfjob__digits", RUN_A)], tmp_path)
    assert [m.name for m in same_id] == [
        f"{DAG}.manual__2026-12-07T10_00_00+00_00",
        "tfjob__digits.manual__2026-12-07T10_00_00+00_00",
    ]


def stand_in_server(root: Path) -> Any:
    """A plain HTTP server in TensorBoard's place, answering its readiness probe."""
    (root / "data").mkdir(parents=True)
    (root / "data" / "environment").write_text("{}")

    def argv(mirrors: list[RunMirror], port: int) -> list[str]:
        (root / "spec").write_text(",".join(m.logdir_spec for m in mirrors))
        return [sys.executable, "-m", "http.server", "-b", "127.0.0.1", "-d", str(root), str(port)]

    return argv


class WatchedOutput(io.StringIO):
    """What the command prints, with an event set once `mark` has been printed."""

    def __init__(self, mark: str) -> None:
        super().__init__()
        self.mark, self.seen = mark, threading.Event()

    def write(self, text: str) -> int:
        written = super().write(text)
        if self.mark in self.getvalue():
            self.seen.set()
        return written


def test_a_live_run_is_followed_until_it_ends_and_ctrl_c_stops_the_server(
    airflow: Routes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(board_command, "build_tensorboard_argv", stand_in_server(tmp_path / "tb"))
    # interrupt_main() is a Ctrl-C only where SIGINT has Python's handler: a process started
    # in the background of a script (a CI's `make test &`) inherits SIGINT ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    started: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def record_popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(board_command.subprocess, "Popen", record_popen)
    airflow.runs[RUN_A] = FakeRun(state="running")  # no event files yet: not an error
    cache = tmp_path / "cache"
    out = WatchedOutput(f"{RUN_A.replace(':', '_')}: the run has ended")
    serving = WatchedOutput("TensorBoard at")

    def train_then_end() -> None:
        serving.seen.wait(60)
        with airflow.lock:
            add_events(airflow, RUN_A, "chief-0", b"step-1", "2026-12-07T10:05:00+00:00")
        synced_by = time.monotonic() + 60
        while not cached(cache, RUN_A, "chief-0").exists() and time.monotonic() < synced_by:
            time.sleep(0.1)
        with airflow.lock:
            add_events(airflow, RUN_A, "chief-0", b"step-1-2", "2026-12-07T10:06:00+00:00")
            airflow.runs[RUN_A].state = "success"
        out.seen.wait(60)
        _thread.interrupt_main()  # Ctrl-C

    args = build_parser().parse_args(
        ["tensorboard", RUN_A, "--dag", DAG, "--interval", "1", "--cache-dir", str(cache)]
    )
    threading.Thread(target=train_then_end, daemon=True).start()
    real_write = out.write

    def write_both(text: str) -> int:
        serving.write(text)
        return real_write(text)

    monkeypatch.setattr(out, "write", write_both)
    try:
        code = run_command(args, out)
    finally:
        signal.signal(signal.SIGINT, previous)
    printed = out.getvalue()
    assert code == ExitCode.INTERRUPTED, printed
    assert "none yet; the run is still going" in printed
    assert "TensorBoard at http://127.0.0.1:" in printed and "following 1 live run(s)" in printed
    assert cached(cache, RUN_A, "chief-0").read_bytes() == b"step-1-2"
    spec = f"manual__2026-12-07T10_00_00+00_00:{cache / DAG / RUN_A}"
    assert (tmp_path / "tb" / "spec").read_text() == spec
    assert len(started) == 1 and started[0].poll() is not None  # stopped, not left behind
