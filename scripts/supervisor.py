"""The embedded default's supervisor: S3, localkube, PostgreSQL or Airflow that dies is restarted.

    python scripts/supervisor.py --state-dir .state     (started by `make up`, detached)

Why this exists: a production deployment restarts a crashed service (systemd,
Kubernetes); without this, a `kill -9` of the S3 server left every run
waiting until someone ran `make up`. scripts/services.py starts one per state
dir once every service is up, and `make down` stops it first (SIGTERM: it
exits at once and restarts nothing), then the services.

It watches, every second and in this order, the S3 server (ready.json's pid),
localkube's API server (localkube.json; `localkube up` starts only a new API
server while the kubelets live, so pods carry on), PostgreSQL's postmaster
(postmaster.pid) and Airflow's component supervisor (airflow.pid;
scripts/airflow_components.py restarts each component itself). A dead one is
started again by the same step `make up` runs, after the back-off pause of
scripts/supervision.py (bounded: past it, the service is left down and shown
failed); localkube waits for S3 (its pods' relay names the S3 listener) and
Airflow for PostgreSQL and localkube. Each death and restart is logged in
<state>/supervisor.log; the table is <state>/supervisor.json (`make status`).

It is the child subreaper of what it starts (prctl): a restarted service whose
launcher exits stays its child, so its exit status is known when it dies
(a service started by `make up` before the supervisor shows "unknown").
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import time
from pathlib import Path

from scripts import postgres_server, services  # noqa: E402
from scripts.background_server import is_alive  # noqa: E402
from scripts.supervision import (  # noqa: E402
    STATE_FILE,
    Watch,
    check_all,
    describe_returncode,
    write_table,
)

POLL_INTERVAL_S = 1.0
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
MAX_KEPT_EXITS = 256


class Stopping(BaseException):  # not caught by a restart step's `except Exception`
    """SIGTERM or SIGINT: the supervisor ends (make down), whatever it was doing."""


class ChildExits:
    """Exit statuses of the supervisor's children (restarted services, adopted orphans)."""

    def __init__(self) -> None:
        self.codes: dict[int, int] = {}

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.codes[pid] = os.waitstatus_to_exitcode(status)
            if len(self.codes) > MAX_KEPT_EXITS:  # orphans it adopted and reaped: the oldest go
                self.codes.pop(next(iter(self.codes)))

    def describe(self, pid: int) -> str:
        self.reap()
        return describe_returncode(self.codes.pop(pid, None))


def alive_or_none(pid: object) -> int | None:
    return pid if isinstance(pid, int) and pid > 0 and is_alive(pid) else None


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


class SupervisedService:
    """A service of scripts/services.py: how to find its pid and how to start it again."""

    def __init__(self, name: str, needs_previous: bool, exits: ChildExits) -> None:
        self.name = name
        self.needs_previous = needs_previous
        self.exits = exits

    def describe_exit(self, pid: int) -> str:
        return self.exits.describe(pid)


class S3Service(SupervisedService):
    def __init__(self, paths: services.StatePaths, record: dict, exits: ChildExits) -> None:
        super().__init__("s3", False, exits)
        self.paths = paths
        self.port = int(record["s3"]["endpoint_url"].rsplit(":", 1)[1])
        self.buckets = record["s3"]["buckets"]

    def find_pid(self) -> int | None:
        return alive_or_none(read_json(self.paths.s3 / "ready.json").get("pid"))

    def start(self) -> int:
        return services.start_s3(self.paths, self.port, self.buckets)["pid"]


class LocalkubeService(SupervisedService):
    def __init__(self, paths: services.StatePaths, record: dict, exits: ChildExits) -> None:
        super().__init__("localkube", True, exits)
        self.paths = paths
        self.port = int(record["localkube"]["api_url"].rsplit(":", 1)[1])

    def find_pid(self) -> int | None:
        info = read_json(self.paths.localkube / "localkube.json")
        return alive_or_none((info.get("pids") or {}).get("apiserver"))

    def start(self) -> int:
        s3_ready = read_json(self.paths.s3 / "ready.json")
        info = services.start_localkube(self.paths, self.port, services.pod_forward_spec(s3_ready))
        return info["pids"]["apiserver"]


class PostgresService(SupervisedService):
    def __init__(self, paths: services.StatePaths, exits: ChildExits) -> None:
        super().__init__("postgresql", False, exits)
        self.paths = paths

    def find_pid(self) -> int | None:
        cluster = postgres_server.locate_cluster(self.paths.postgres)
        return alive_or_none(postgres_server.read_postmaster_pid(cluster))

    def start(self) -> int:
        postgres_server.start_postgres(self.paths.postgres)
        pid = self.find_pid()
        if pid is None:
            raise postgres_server.PostgresError("started, but no live postmaster.pid")
        return pid


class AirflowService(SupervisedService):
    def __init__(self, paths: services.StatePaths, record: dict, exits: ChildExits) -> None:
        super().__init__("airflow", True, exits)
        self.paths = paths
        self.port = int(record["airflow"]["url"].rsplit(":", 1)[1])
        self.kubeconfig = Path(record["localkube"]["kubeconfig"])
        self.s3_endpoint = record["s3"]["endpoint_url"]

    def find_pid(self) -> int | None:
        return alive_or_none(services.airflow_server.read_pid(self.paths.airflow))

    def start(self) -> int:
        pods = services.write_s3_pod_identities(self.paths)  # kept: the same identities
        instance = services.start_airflow(
            self.paths, self.port, self.kubeconfig, self.s3_endpoint, pods
        )
        return instance.pid


def list_services(paths: services.StatePaths, exits: ChildExits) -> list[SupervisedService]:
    """The services in the order they are started (and restarted)."""
    record = read_json(paths.root / services.SERVICES_FILE)
    if not record:
        raise SystemExit(f"supervisor: no {paths.root / services.SERVICES_FILE}: make up first")
    return [
        S3Service(paths, record, exits),
        LocalkubeService(paths, record, exits),
        PostgresService(paths, exits),
        AirflowService(paths, record, exits),
    ]


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("supervisor: not a child subreaper; exit statuses stay unknown", flush=True)


def log(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} supervisor: {line}", flush=True)


def supervise(paths: services.StatePaths) -> int:
    def request_stop(signum: int, _frame: object) -> None:
        raise Stopping(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    become_subreaper()
    exits = ChildExits()
    watches = [Watch(service, log=log) for service in list_services(paths, exits)]
    since = time.time()
    table = paths.root / STATE_FILE
    log(f"watching {', '.join(w.service.name for w in watches)} (pid {os.getpid()})")
    try:
        while True:
            write_table(table, os.getpid(), since, [watch.status() for watch in watches])
            time.sleep(POLL_INTERVAL_S)
            exits.reap()
            check_all(watches)
    except Stopping as stop:
        log(f"{stop}: stopping; nothing is restarted from now on")
    for watch in watches:
        watch.stop()
    write_table(table, os.getpid(), since, [watch.status() for watch in watches])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=services.DEFAULT_STATE_DIR)
    args = parser.parse_args(argv)
    return supervise(services.StatePaths(args.state_dir.resolve()))


if __name__ == "__main__":
    sys.exit(main())
