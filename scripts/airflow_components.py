"""Run Airflow's components in the foreground, as `airflow standalone` does, with our auth manager.

Why this exists: `airflow standalone` (Airflow 3.3) overrides `[core] auth_manager`
with the simple auth manager, which has no per-DAG rights; TF-on-K8s needs the
FAB auth manager so that Airflow decides who may act for a tenant
(docs/tenants.md). So scripts/airflow_server.py migrates the database and makes
the roles and users itself, then starts this supervisor in a session of its
own. It runs the API server, scheduler, DAG processor and triggerer as its
children, each in a process group of its own within that session, and:

- when one of them exits, stops the others and exits 1 (a half-running
  Airflow is worse than none: the launcher sees the exit and reports it);
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

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
STOP_GRACE_S = 15.0
POLL_INTERVAL_S = 0.5


def start_component(name: str) -> subprocess.Popen:
    airflow = Path(sys.executable).parent / "airflow"
    return subprocess.Popen([str(airflow), name], process_group=0)


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


def main() -> int:
    stopping: list[int] = []

    def request_stop(signum: int, _frame: object) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    processes = [start_component(name) for name in COMPONENTS]
    started = zip(COMPONENTS, processes, strict=True)
    print(f"components: {', '.join(f'{n} (pid {p.pid})' for n, p in started)}", flush=True)
    exited = None
    while not stopping and exited is None:
        time.sleep(POLL_INTERVAL_S)
        exited = next(
            (
                (name, p.returncode)
                for name, p in zip(COMPONENTS, processes, strict=True)
                if p.poll() is not None
            ),
            None,
        )
    if exited is not None:
        print(f"airflow {exited[0]} exited with code {exited[1]}; stopping the others", flush=True)
    stop_components(processes)
    return 1 if exited is not None else 0


if __name__ == "__main__":
    sys.exit(main())
