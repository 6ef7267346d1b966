"""tshell tensorboard: TensorBoard on the event files of one or more runs, side by side.

Why this exists: TensorFlow users look at their training in TensorBoard. A
run's replicas write summaries into their TENSORBOARD_DIR, which lands under
the run's `tensorboard/<role>-<index>/` in S3 (docs/pod-protocol.md). This
command copies each run's event files into a local cache through Airflow
(tshell/runs/event_mirror.py: only what changed, a cap per run) and starts
TensorBoard as a child process on them with one name per run
(`--logdir_spec name1:dir1,name2:dir2`), listening on 127.0.0.1 only. While a
run has not ended, its files are synced again every `--interval` seconds and
TensorBoard reloads them; Ctrl-C stops the command and TensorBoard with it.
`--once` syncs and exits without starting anything. A run that was
warm-started brings the run it restored from along (launch's `warm_start`
XCom names it), so the curves read on from where that run left off;
`--no-warm-start` leaves it out.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from tfjob.pipeline_ids import LAUNCH_TASK, WARM_START_KEY
from tfjob.runlayout import RunLayout
from tshell.airflow_client import AirflowSession
from tshell.command import open_session, set_command
from tshell.exitcodes import CommandError, ExitCode
from tshell.runs.commands import RunState, add_common, call_patiently, fetch_task_xcom
from tshell.runs.event_mirror import MAX_RUN_BYTES, RunMirror, plan_mirrors, sync_run_events
from tshell.runs.lookup import RunRef, explain_forbidden_on_run, find_run

LOOPBACK = "127.0.0.1"
SYNC_INTERVAL_S = 15.0
MIN_INTERVAL_S = 1.0
RELOAD_INTERVAL_S = 5  # how often TensorBoard rereads its folders
START_TIMEOUT_S = 120.0  # TensorBoard imports TensorFlow when it is installed: seconds
STOP_GRACE_S = 10.0
LOG_TAIL_BYTES = 4000
TENSORBOARD_MODULE = "tensorboard.main"


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/tshell/tensorboard`, else `~/.cache/tshell/tensorboard`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tshell" / "tensorboard"


def check_options(args: argparse.Namespace) -> None:
    """Refuse option values that cannot work, naming the option, the value and what is allowed."""
    if not 0 <= args.port <= 65535:
        raise CommandError(
            f"--port {args.port}: a port from 1 to 65535 is required (0: a free one)",
            ExitCode.INVALID_REQUEST,
        )
    if args.interval < MIN_INTERVAL_S:
        raise CommandError(
            f"--interval {args.interval:g}: at least {MIN_INTERVAL_S:g} seconds is required",
            ExitCode.INVALID_REQUEST,
        )
    if args.max_run_bytes < 1:
        raise CommandError(
            f"--max-run-bytes {args.max_run_bytes}: a positive number of bytes is required",
            ExitCode.INVALID_REQUEST,
        )


def pick_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def read_log_tail(path: Path) -> str:
    with path.open("rb") as log:
        log.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
        return log.read().decode("utf-8", "replace").strip()


def check_tensorboard_alive(process: subprocess.Popen[bytes], log_path: Path) -> None:
    code = process.poll()
    if code is not None:
        raise CommandError(
            f"TensorBoard exited with status {code}; the end of its log ({log_path}):\n"
            f"{read_log_tail(log_path)}",
            ExitCode.FAILED,
        )


def is_serving(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}data/environment", timeout=2) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def wait_until_serving(process: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not is_serving(url):
        check_tensorboard_alive(process, log_path)
        if time.monotonic() > deadline:
            raise CommandError(
                f"TensorBoard did not answer at {url} within {START_TIMEOUT_S:.0f} s; "
                f"its log: {log_path}",
                ExitCode.FAILED,
            )
        time.sleep(0.3)
    check_tensorboard_alive(process, log_path)  # another server may hold the port


def exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def stop_tensorboard(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def build_tensorboard_argv(mirrors: list[RunMirror], port: int) -> list[str]:
    """TensorBoard's command line: one named run per mirror, loopback only."""
    return [
        sys.executable,
        "-m",
        TENSORBOARD_MODULE,
        "--logdir_spec",
        ",".join(m.logdir_spec for m in mirrors),
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--reload_interval",
        str(RELOAD_INTERVAL_S),
    ]


@contextlib.contextmanager
def serve_tensorboard(
    mirrors: list[RunMirror], port: int, log_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """TensorBoard on the mirrors' folders at 127.0.0.1:`port`, stopped when the block ends.

    Its own session: Ctrl-C reaches tshell only, which then stops it. A SIGTERM to tshell
    (a `kill`, a supervisor's stop) ends the block too, so TensorBoard is never left behind.
    """
    previous_sigterm = signal.signal(signal.SIGTERM, exit_on_sigterm)
    argv = build_tensorboard_argv(mirrors, port)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    url = f"http://{LOOPBACK}:{port}/"
    try:
        wait_until_serving(process, url, log_path)
        yield process, url
    finally:
        stop_tensorboard(process)
        signal.signal(signal.SIGTERM, previous_sigterm)


def sync_and_report(
    session: AirflowSession,
    mirror: RunMirror,
    finished: bool,
    max_bytes: int,
    out: TextIO,
    quiet_when_unchanged: bool = False,
) -> None:
    """Sync one run and say what it did; a run that ended with no event files is an error."""
    with explain_forbidden_on_run(session, "read", mirror.ref):
        result = sync_run_events(session, mirror, max_bytes)
    if result.event_files == 0 and finished:
        raise CommandError(
            f"run {mirror.ref.run_id} of DAG {mirror.ref.dag_id} has no event files under "
            f"{result.source}: its program wrote no summaries to $TENSORBOARD_DIR "
            f"(docs/examples.md shows how)",
            ExitCode.NOT_FOUND,
        )
    if quiet_when_unchanged and not result.downloaded and not result.removed:
        return
    stamp = time.strftime("%H:%M:%S")
    note = "" if result.event_files or finished else " (none yet; the run is still going)"
    out.write(f"{stamp}  {mirror.name}: {result.describe()}{note}\n")
    out.flush()


def find_warm_start_sources(
    session: AirflowSession, refs: list[RunRef], out: TextIO
) -> list[RunRef]:
    """The runs that `refs` were warm-started from (launch's `warm_start` XCom names the
    checkpoints it restored), each once and none of `refs` again; each is said on `out`."""
    sources: list[RunRef] = []
    for ref in refs:
        staged = fetch_task_xcom(session, ref, LAUNCH_TASK, WARM_START_KEY) or {}
        checkpoints = staged.get("source")
        try:
            dag_id, run_id = RunLayout.of_checkpoints(str(checkpoints)).run_ids
        except ValueError:
            continue  # no warm start, or one that restored nothing
        source = RunRef(dag_id, run_id)
        if source in refs or source in sources:
            continue
        sources.append(source)
        out.write(
            f"run {ref.run_id} was warm-started from run {run_id}: its event files are served "
            f"beside this run's (--no-warm-start leaves them out)\n"
        )
    return sources


def sync_warm_start_source(
    session: AirflowSession, mirror: RunMirror, max_bytes: int, out: TextIO
) -> bool:
    """Sync a warm start's source run once; a source that cannot be served (no event files,
    gone, not readable) is said on `out` and left out, never the end of the command."""
    try:
        sync_and_report(session, mirror, True, max_bytes, out)
    except CommandError as error:
        out.write(f"{mirror.name}: not served: {error}\n")
        out.flush()
        return False
    return True


def read_run_state(session: AirflowSession, ref: RunRef) -> RunState:
    return RunState(call_patiently(lambda: session.get_json(ref.path))["state"])


def follow_runs(
    session: AirflowSession,
    live: list[RunMirror],
    process: subprocess.Popen[bytes],
    log_path: Path,
    interval: float,
    max_bytes: int,
    out: TextIO,
) -> None:
    """Sync the live runs every `interval` seconds until each has ended, then keep
    TensorBoard serving; returns only if TensorBoard fails (an error) — Ctrl-C ends it."""
    while True:
        deadline = time.monotonic() + interval
        while live and time.monotonic() < deadline:
            check_tensorboard_alive(process, log_path)
            time.sleep(min(0.5, interval))
        for mirror in list(live):
            finished = read_run_state(session, mirror.ref).is_finished
            # A whole sync again when Airflow is away for a while: it fetches only what changed.
            call_patiently(
                lambda m=mirror, f=finished: sync_and_report(
                    session, m, f, max_bytes, out, quiet_when_unchanged=True
                )
            )
            if finished:
                live.remove(mirror)
                out.write(f"{time.strftime('%H:%M:%S')}  {mirror.name}: the run has ended\n")
                out.flush()
        while not live:  # every run has ended: serve until Ctrl-C
            check_tensorboard_alive(process, log_path)
            time.sleep(0.5)


def cmd_tensorboard(args: argparse.Namespace, out: TextIO) -> ExitCode:
    check_options(args)
    _, session = open_session()
    runs = [find_run(session, run_id, args.dag) for run_id in args.runs]
    cache_dir = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    refs = [RunRef(r["dag_id"], r["dag_run_id"]) for r in runs]
    states = {ref: RunState(r["state"]) for ref, r in zip(refs, runs, strict=True)}
    sources = [] if args.no_warm_start else find_warm_start_sources(session, refs, out)
    mirrors, live = [], []
    for mirror in plan_mirrors(refs + sources, cache_dir):
        if mirror.ref not in states:
            if sync_warm_start_source(session, mirror, args.max_run_bytes, out):
                mirrors.append(mirror)
            continue
        finished = states[mirror.ref].is_finished
        sync_and_report(session, mirror, finished, args.max_run_bytes, out)
        mirrors.append(mirror)
        if not finished:
            live.append(mirror)
    if args.once:
        for mirror in mirrors:
            out.write(f"{mirror.name}: {mirror.folder}\n")
        return ExitCode.OK
    port = args.port or pick_free_port()
    log_path = cache_dir / f"tensorboard-{port}.log"
    with serve_tensorboard(mirrors, port, log_path) as (process, url):
        following = f"; following {len(live)} live run(s)" if live else ""
        out.write(
            f"TensorBoard at {url} (runs: {', '.join(m.name for m in mirrors)}{following}); "
            f"Ctrl-C stops it\n"
        )
        out.flush()
        follow_runs(session, live, process, log_path, args.interval, args.max_run_bytes, out)
    return ExitCode.OK


def register(subparsers: Any) -> None:
    board = subparsers.add_parser(
        "tensorboard", help="TensorBoard on runs' event files, side by side (synced locally)"
    )
    board.add_argument("runs", metavar="RUN", nargs="+", help="run ids (Airflow dag_run_id)")
    add_common(board, run_arg=False, json_arg=False)
    board.add_argument(
        "--port", type=int, default=0, help="TensorBoard's port on 127.0.0.1 (default: a free one)"
    )
    board.add_argument(
        "--once", action="store_true", help="sync the event files and exit; start nothing"
    )
    board.add_argument(
        "--no-warm-start",
        action="store_true",
        help="serve only the runs named, not the runs they were warm-started from",
    )
    board.add_argument(
        "--interval",
        type=float,
        default=SYNC_INTERVAL_S,
        help=f"seconds between syncs of a live run (default {SYNC_INTERVAL_S:g})",
    )
    board.add_argument(
        "--cache-dir", help="where the event files go (default ~/.cache/tshell/tensorboard)"
    )
    board.add_argument(
        "--max-run-bytes",
        type=int,
        default=MAX_RUN_BYTES,
        help=f"refuse a run whose event files hold more (default {MAX_RUN_BYTES})",
    )
    set_command(board, cmd_tensorboard)
