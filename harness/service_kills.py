"""Killing a service of an embedded default (`scripts/services.py up` in a state dir) and
waiting for its supervisor to start it again.

Shared by the self-healing test (tests/airflow/test_services_self_healing.py) and the chaos
soak's injectors (bench/chaos_faults.py): the pid of each service as its own state files
record it, and the supervisor's table (scripts/supervision.py) as the proof of a restart.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from harness.pipeline_fixtures import wait_for
from scripts import postgres_server, supervision
from scripts.background_server import is_alive

RESTART_TIMEOUT_S = 240


def read_service_pid(state: Path, name: str) -> int:
    """The pid of "s3", "localkube" (its API server) or "postgresql" (the postmaster)."""
    if name == "s3":
        return json.loads((state / "s3" / "ready.json").read_text())["pid"]
    if name == "localkube":
        return json.loads((state / "localkube" / "localkube.json").read_text())["pids"]["apiserver"]
    cluster = postgres_server.locate_cluster(state / "postgres")
    return int((cluster.data / "postmaster.pid").read_text().split("\n", 1)[0])


def read_row(table: Path, name: str) -> supervision.ServiceStatus:
    _, rows = supervision.read_table(table)
    return next(row for row in rows if row.name == name)


def await_running(table: Path, name: str) -> supervision.ServiceStatus:
    """The row of `name` once it runs on a live pid: a component may be restarting when
    asked, e.g. a scheduler that exited on the PostgreSQL kill just before."""

    def running() -> supervision.ServiceStatus | None:
        row = read_row(table, name)
        up = row.state is supervision.ServiceState.RUNNING and row.pid is not None
        return row if up and is_alive(row.pid) else None

    return wait_for(running, RESTART_TIMEOUT_S, f"{name} running", interval=0.5)


def kill_and_await_restart(table: Path, name: str, pid: int) -> supervision.ServiceStatus:
    """kill -9 pid, then wait until the table shows `name` running again on another pid."""
    before = read_row(table, name).restarts
    started = time.monotonic()
    os.kill(pid, signal.SIGKILL)

    def restarted() -> supervision.ServiceStatus | None:
        row = read_row(table, name)
        fresh = row.pid not in (None, pid) and is_alive(row.pid)
        back = row.state is supervision.ServiceState.RUNNING and fresh
        return row if back and row.restarts > before else None

    row = wait_for(restarted, RESTART_TIMEOUT_S, f"{name} restarted after kill -9", interval=0.5)
    print(f"{name}: pid {pid} killed, back as {row.pid} in {time.monotonic() - started:.1f} s")
    return row
