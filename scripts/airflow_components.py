"""Run Airflow's components in the foreground, as `airflow standalone` does, with our auth manager.

Why this exists: `airflow standalone` (Airflow 3.3) overrides `[core] auth_manager`
with the simple auth manager, which has no per-DAG rights; TF-on-K8s needs the
FAB auth manager so that Airflow decides who may act for a tenant
(docs/tenants.md). So scripts/airflow_server.py migrates the database and makes
the roles and users itself, then starts this supervisor in a session of its
own. It runs the API server, scheduler, DAG processor and triggerer as its
children, each in a process group of its own within that session, and:

- when one of them dies, kills what is left of its group (a dead scheduler's
  LocalExecutor workers) and starts it again after a back-off pause
  (scripts/supervision.py: logged with the exit status, counted, bounded);
- when one dies past that bound, stops the others and exits 1 (a half-running
  Airflow is worse than none: the launcher sees the exit and reports it, and
  scripts/supervisor.py restarts Airflow whole, within its own bound);
- keeps the table of its components (pid, up since, restarts, last exit) in
  <AIRFLOW_HOME>/components.json, which `make status` prints;
- on SIGTERM or SIGINT, sends SIGTERM to every group, then SIGKILL to what is
  left after the grace period (the LocalExecutor's idle workers ignore SIGTERM).

Usage: python scripts/airflow_components.py   (environment: Airflow's, from the launcher)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from operators.preload import PRELOADS
from scripts.supervision import (
    ServiceState,
    Watch,
    check_all,
    describe_returncode,
    write_table,
)

COMPONENTS_FILE = "components.json"
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
STOP_GRACE_S = 15.0
POLL_INTERVAL_S = 0.5


def start_component(name: str) -> subprocess.Popen:
    if name in PRELOADS:  # what its forked children import, imported before they fork
        command = [sys.executable, "-m", "scripts.airflow_preloaded", name]
    else:
        command = [str(Path(sys.executable).parent / "airflow"), name]
    return subprocess.Popen(command, process_group=0)


def signal_groups(processes: list[subprocess.Popen], signum: int) -> None:
    for process in processes:
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            pass


def is_group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_components(processes: list[subprocess.Popen], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM every component's group, SIGKILL what is left after `grace`, reap them."""
    signal_groups(processes, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(is_group_alive(p.pid) for p in processes):
        for process in processes:
            process.poll()
        time.sleep(POLL_INTERVAL_S)
    signal_groups(processes, signal.SIGKILL)
    for process in processes:
        process.wait()


class Component:
    """One Airflow component as scripts/supervision.py watches it: our child process."""

    needs_previous = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.process = start_component(name)

    def find_pid(self) -> int | None:
        if self.process.poll() is None:
            return self.process.pid
        signal_groups([self.process], signal.SIGKILL)  # what it left: workers, serve-logs
        return None

    def describe_exit(self, pid: int) -> str:
        return describe_returncode(self.process.returncode)

    def start(self) -> int:
        self.process = start_component(self.name)
        return self.process.pid


def main() -> int:
    stopping: list[int] = []

    def request_stop(signum: int, _frame: object) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    table = Path(os.environ.get("AIRFLOW_HOME", ".")) / COMPONENTS_FILE
    since = time.time()
    components = [Component(name) for name in COMPONENTS]
    print(
        f"components: {', '.join(f'{c.name} (pid {c.process.pid})' for c in components)}",
        flush=True,
    )
    watches = [Watch(c, log=lambda line: print(f"airflow {line}", flush=True)) for c in components]
    failed = False
    while not stopping and not failed:
        write_table(table, os.getpid(), since, [watch.status() for watch in watches])
        time.sleep(POLL_INTERVAL_S)
        if stopping:  # `down` signals the components too: none of them is restarted
            break
        check_all(watches)
        failed = any(watch.state is ServiceState.FAILED for watch in watches)
    if failed:
        print("airflow: a component failed past its restarts; stopping the others", flush=True)
    stop_components([component.process for component in components])
    for watch in watches:
        watch.stop()
    write_table(table, os.getpid(), since, [watch.status() for watch in watches])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
