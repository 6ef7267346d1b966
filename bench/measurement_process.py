"""Running one measurement of `make bench` as a process of its own, and reading what it wrote.

Why a process each (bench/world.py says more): a measurement imports Airflow,
the Kubernetes clients or TensorFlow as a task would, and must not inherit
another's imports, threads or open connections. This module starts it in a
session of its own with a timeout, so that a timeout or Ctrl-C stops what it
started too (its S3 server, its pods' clients), keeps its output in
`<out>/<name>.log`, and reads its JSON back (or the reason there is none) for
the report. It also describes the machine and its load for the report's
header.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
STEP_TIMEOUT_S = {
    "pack_upload": 300,
    "parse": 420,
    "startup": 420,
    "naive": 420,
    "wholerun": 600,
    "phases": 3000,  # two worlds (~4 min each when loaded) and 10 traced runs
    "concurrency": 720,  # bench_concurrency.RUN_TIMEOUT_S (660) and the triggers
    "restart": 1200,
    "scale": 900,
    # bench_concurrent_scale.py: its own world (~2 min) and batches of 10, 50 and 100 jobs
    "concurrent_scale": 2400,
    "log_follow": 900,  # the old follower is quadratic: ~30 s per 32 MiB line
    "s3_gate": 300,  # 240 requests of 1 MiB: ~1 min on a loaded machine
    "event_curves": 1200,  # tf.summary writes 50 MiB (~8 min: 567 s in all on 12-07, loaded)
    "chaos": 1800,  # its own services up (~3 min loaded), two waves of runs and their faults
}
STOP_GRACE_S = 20  # a measurement told to stop (timeout, Ctrl-C) before it is killed
# The lines of a measurement's log that the run's own output repeats.
SHOWN_LINE_PREFIXES = (
    "startup ",
    "naive ",
    "restart ",
    "parse ",
    "digits-ps ",
    "concurrency:",
    "scale ",
    "concurrent-scale ",
    "median ratio",
    "tree ",
    "log-follow ",
    "event-curves:",
)


def describe_machine() -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kib = int(
            next(
                line.split()[1]
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")
            )
        )
    except (OSError, StopIteration, ValueError):
        mem_kib = 0
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem_kib / 2**20,
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def shown(path: Path) -> str:
    """`path` relative to the repository when inside it (--out may lie elsewhere)."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def load_text() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run_measurement(
    name: str, argv: list[str], env: dict[str, str] | None, out: Path
) -> dict[str, Any]:
    """Run one measurement process; its output goes to <out>/<name>.log."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / f"{name}.log"
    started = time.monotonic()
    print(f"==> {name}: {' '.join(argv[1:])}", flush=True)
    with log.open("w") as handle:
        # A session of its own, so a timeout stops what it started too (its S3 server).
        process = subprocess.Popen(
            argv,
            env=env,
            cwd=REPO,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=STEP_TIMEOUT_S[name])
            status = "ok" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            status = f"failed (over {STEP_TIMEOUT_S[name]} s)"
            stop_process_group(process)
        except BaseException:  # Ctrl-C, or SIGTERM (SystemExit): stop it before unwinding
            stop_process_group(process)
            raise
    seconds = time.monotonic() - started
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith(SHOWN_LINE_PREFIXES):
            print(f"    {line}", flush=True)
    if status != "ok":
        print("    last lines of the log:", flush=True)
        for line in log.read_text(errors="replace").splitlines()[-15:]:
            print(f"    | {line[:300]}", flush=True)
    print(f"    {name}: {status} in {seconds:.0f}s (log {shown(log)})", flush=True)
    return {"status": status, "seconds": seconds, "load_after": load_text()}


def stop_process_group(process: subprocess.Popen[bytes]) -> None:
    """SIGINT to the measurement's process group (Python unwinds: its `finally` blocks stop
    what it started), then SIGKILL to whatever of the group is left after STOP_GRACE_S."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:  # nothing of the group is left
            return
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass


def read_result(name: str, step: dict[str, Any] | None, out: Path) -> dict[str, Any]:
    path = out / f"{name}.json"
    if step is None:
        return {"error": "skipped (--only)"}
    # A measurement that wrote its figures but exits non-zero (concurrency: not every job
    # succeeded) is still reported; the step table shows its status.
    if not path.exists():
        log = out / f"{name}.log"
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
        return {
            "error": f"{step['status']}; last lines of {shown(log)}: " + " / ".join(tail)[-600:]
        }
    return json.loads(path.read_text())
