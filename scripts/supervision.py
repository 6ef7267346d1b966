"""Restart a service that died, with bounded back-off, and keep a table of what runs.

Why this exists: the embedded default's services (S3, localkube, PostgreSQL,
each Airflow component) die now and then (a crash, `kill -9`, the OOM killer);
a production deployment restarts them (systemd, Kubernetes), and so do
scripts/supervisor.py (the services) and scripts/airflow_components.py
(Airflow's components), both with the loop here:

- each watched `Service` says which pid runs it now (`find_pid`, None when it
  is down), how a pid of it ended (`describe_exit`) and how to start it again
  (`start`: returns the new pid once it serves, or raises);
- a service found dead is started again after a pause of runtime/backoff.py's
  policy (1 s, 2 s, 4 s, … capped); one that stayed up `stable_s` starts its
  streak over; one that dies again after `policy.attempts` restarts in a streak
  is FAILED and left down, never restarted forever;
- watches run in order: while one is down, the later ones that need it
  (`needs_previous`: Airflow needs PostgreSQL) are not started;
- every death is logged with its exit status and every restart counted; the
  table (service, pid, up since, restarts, last exit, state) is written to a
  JSON state file that `make status` prints (`format_table`).
"""

from __future__ import annotations

import enum
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Protocol

from runtime.backoff import BackoffPolicy
from scripts.background_server import (
    StartOutcome,
    await_ready,
    is_alive,
    spawn_detached,
    stop_pid,
)

# 1 s, 2 s, 4 s, 8 s, 16 s: five restarts in a streak, about half a minute of pauses.
RESTART_POLICY = BackoffPolicy(first_delay=1.0, factor=2.0, max_delay=30.0, attempts=5)
STABLE_S = 60.0  # up this long: the next death starts a new streak
STATE_VERSION = 1
SUPERVISOR_SCRIPT = Path(__file__).resolve().with_name("supervisor.py")
STATE_FILE = "supervisor.json"  # under the services' state dir, as its log
LOG_FILE = "supervisor.log"
START_TIMEOUT_S = 60.0
# SIGTERM ends it at once; a restart step in flight (Airflow's start) first stops what it began.
STOP_GRACE_S = 30.0


class SupervisorError(RuntimeError):
    """The supervisor did not start; the message says where its log is."""


class ServiceState(enum.Enum):
    RUNNING = "running"
    RESTARTING = "restarting"  # dead; started again after its pause
    FAILED = "failed"  # died past the bound: left down
    STOPPED = "stopped"  # the supervisor has stopped (make down)


class Service(Protocol):
    name: str
    needs_previous: bool  # not started while a service watched before it is down

    def find_pid(self) -> int | None: ...

    def describe_exit(self, pid: int) -> str: ...

    def start(self) -> int: ...


@dataclass(frozen=True)
class ServiceStatus:
    """One row of the table: what `make status` prints."""

    name: str
    state: ServiceState
    pid: int | None
    since: float | None  # wall-clock time it was (last) seen starting; None: unknown
    restarts: int
    last_exit: str

    def to_json(self) -> dict[str, object]:
        return asdict(self) | {"state": self.state.value}

    @classmethod
    def from_json(cls, data: dict) -> ServiceStatus:
        return cls(**(data | {"state": ServiceState(data["state"])}))


def read_start_time(pid: int | None) -> float | None:
    """When the process started (wall clock, from /proc); None when it is gone or unknown."""
    if pid is None:
        return None
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def describe_returncode(code: int | None) -> str:
    """An exit status in words: `exit 1`, `killed by SIGKILL`, or unknown (not our child)."""
    if code is None:
        return "exit status unknown (not a child of the supervisor)"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


class Watch:
    """One service's life under supervision: its pid, its streak, its count of restarts."""

    def __init__(
        self,
        service: Service,
        policy: BackoffPolicy = RESTART_POLICY,
        stable_s: float = STABLE_S,
        log: Callable[[str], None] = print,
    ) -> None:
        if policy.attempts is None:
            raise ValueError(f"{service.name}: the restart policy needs attempts (the bound)")
        self.service = service
        self.policy = policy
        self.stable_s = stable_s
        self.log = log
        self.schedule = policy.schedule()
        self.state = ServiceState.RUNNING
        self.pid: int | None = service.find_pid()
        self.since = read_start_time(self.pid)
        self.started_at: float | None = None  # the policy's clock; None: before we watched
        self.restarts = 0
        self.last_exit = ""
        self.retry_at = 0.0

    def check(self, may_start: bool) -> None:
        """Look at the service once: note a death, restart it when its pause is over.

        A service found running again that was waiting or failed was started by
        someone else (a second `make up`): it is watched again, its streak over."""
        pid = self.service.find_pid()
        if pid is not None:
            if self.state is not ServiceState.RUNNING:
                self.log(f"{self.service.name}: running again (pid {pid}), started elsewhere")
                self.state, self.started_at = ServiceState.RUNNING, None
                self.schedule.reset()
            if pid != self.pid:
                self.pid, self.since = pid, read_start_time(pid)
            return
        now = self.policy.now()
        if self.state is ServiceState.RUNNING:
            self.note_death(now, self.describe_death())
        if self.state is ServiceState.RESTARTING and may_start and now >= self.retry_at:
            self.restart()

    def describe_death(self) -> str:
        return self.service.describe_exit(self.pid) if self.pid is not None else "not running"

    def note_death(self, now: float, how: str) -> None:
        self.last_exit = how
        self.pid = None
        if self.started_at is None or now - self.started_at >= self.stable_s:
            self.schedule.reset()
        assert self.policy.attempts is not None
        if self.schedule.failures >= self.policy.attempts:
            self.state = ServiceState.FAILED
            self.log(
                f"{self.service.name}: {how}; it died {self.schedule.failures + 1} times within "
                f"{self.stable_s:g} s of its starts: failed, left down"
            )
            return
        delay = self.schedule.next_delay()
        self.retry_at = now + delay
        self.state = ServiceState.RESTARTING
        self.log(f"{self.service.name}: {how}; restarting in {delay:g} s")

    def restart(self) -> None:
        self.restarts += 1
        self.started_at = self.policy.now()
        try:
            pid = self.service.start()
        except Exception as error:  # any failure of a start step: the service stays down
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            self.note_death(self.policy.now(), f"start failed: {first_line}")
            return
        self.pid = pid
        self.since = read_start_time(pid) or time.time()
        self.state = ServiceState.RUNNING
        self.log(f"{self.service.name}: restarted (pid {pid}, restart {self.restarts})")

    def stop(self) -> None:
        self.state = ServiceState.STOPPED

    def status(self) -> ServiceStatus:
        return ServiceStatus(
            self.service.name, self.state, self.pid, self.since, self.restarts, self.last_exit
        )


def check_all(watches: Sequence[Watch]) -> None:
    """One pass over the watches, in order (a later one that needs an earlier one waits)."""
    blocked = False
    for watch in watches:
        watch.check(may_start=not (blocked and watch.service.needs_previous))
        if watch.state is not ServiceState.RUNNING:
            blocked = True


def write_table(path: Path, supervisor_pid: int, since: float, rows: Sequence[ServiceStatus]):
    """The state file: who supervises since when, and a row per service (no secrets)."""
    record = {
        "version": STATE_VERSION,
        "supervisor_pid": supervisor_pid,
        "since": since,
        "services": [row.to_json() for row in rows],
    }
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=2))
    os.replace(tmp, path)


def read_table(path: Path) -> tuple[int | None, list[ServiceStatus]]:
    """(the supervisor's pid, its rows); (None, []) when there is no state file."""
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None, []
    return record["supervisor_pid"], [ServiceStatus.from_json(row) for row in record["services"]]


def read_current_table(path: Path) -> tuple[int | None, list[ServiceStatus]]:
    """read_table, with the rows of a writer that died (kill -9) shown stopped: stale."""
    pid, rows = read_table(path)
    if pid is not None and not is_alive(pid):
        rows = [
            replace(row, state=ServiceState.STOPPED) if row.state is ServiceState.RUNNING else row
            for row in rows
        ]
    return pid, rows


def format_since(since: float | None, now: float) -> str:
    if since is None:
        return "before the supervisor"
    seconds = int(now - since)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
    return f"{stamp} ({seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s)"


def format_table(rows: Sequence[ServiceStatus], now: float | None = None) -> str:
    """service, state, pid, up since, restarts, last exit: aligned columns."""
    now = time.time() if now is None else now
    lines = [("service", "state", "pid", "up since", "restarts", "last exit")]
    for row in rows:
        up = row.state is ServiceState.RUNNING
        lines.append(
            (
                row.name,
                row.state.value,
                str(row.pid) if up and row.pid else "-",
                format_since(row.since, now) if up else "-",
                str(row.restarts),
                row.last_exit or "-",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=False))
        + "  "
        + line[-1]
        for line in lines
    )


def find_supervisor(state_root: Path) -> int | None:
    """The pid of the supervisor of the services in state_root, None when none runs."""
    pid, _ = read_table(state_root / STATE_FILE)
    if pid is None or not is_alive(pid):
        return None
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if SUPERVISOR_SCRIPT.name.encode() in command else None  # not a reused pid


def start_supervisor(state_root: Path) -> int:
    """Start the supervisor of state_root's services (scripts/supervisor.py), or find it running;
    its pid."""
    running = find_supervisor(state_root)
    if running is not None:
        return running
    log = state_root / LOG_FILE
    argv = [sys.executable, str(SUPERVISOR_SCRIPT), "--state-dir", str(state_root)]
    process = spawn_detached(argv, log)
    outcome = await_ready(
        lambda: read_table(state_root / STATE_FILE)[0] == process.pid, process.pid, START_TIMEOUT_S
    )
    if outcome is not StartOutcome.READY:
        stop_pid(process.pid, grace=1.0)
        raise SupervisorError(f"the supervisor {outcome.value} during its start; see {log}")
    return process.pid


def stop_supervisor(state_root: Path) -> bool:
    """Stop the supervisor first (nothing it watches is restarted after); whether it ran."""
    pid = find_supervisor(state_root)
    if pid is None:
        return False
    stop_pid(pid, STOP_GRACE_S)
    return True
