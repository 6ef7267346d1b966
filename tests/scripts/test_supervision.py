"""scripts/supervision.py: a dead service is restarted with bounded back-off, in order, counted.

Fake services on a fake clock (no sleeping), then the two places that use the
loop on real processes: an Airflow component whose group is cleaned up before
its restart (scripts/airflow_components.py) and the supervisor's exit statuses
of its children (scripts/supervisor.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from scripts import airflow_components, supervision, supervisor
from scripts.background_server import is_alive
from scripts.supervision import ServiceState, ServiceStatus, Watch, check_all


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeService:
    """A service whose process dies when the test says, and starts as `fail_starts` allows."""

    def __init__(self, name: str, needs_previous: bool = False) -> None:
        self.name = name
        self.needs_previous = needs_previous
        self.pid: int | None = 1000
        self.exit_codes: dict[int, int] = {}
        self.starts = 0
        self.fail_starts = 0

    def kill(self, code: int = -9) -> None:
        assert self.pid is not None
        self.exit_codes[self.pid] = code
        self.pid = None

    def find_pid(self) -> int | None:
        return self.pid

    def describe_exit(self, pid: int) -> str:
        return supervision.describe_returncode(self.exit_codes.get(pid))

    def start(self) -> int:
        self.starts += 1
        if self.fail_starts:
            self.fail_starts -= 1
            raise RuntimeError("port 9000 is taken\nmore lines")
        self.pid = 2000 + self.starts
        return self.pid


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def watch_of(service: FakeService, clock: FakeClock, lines: list[str]) -> Watch:
    policy = supervision.RESTART_POLICY.with_changes(clock=clock)
    return Watch(service, policy, stable_s=60.0, log=lines.append)


def test_a_dead_service_is_restarted_after_its_pause_logged_and_counted(clock):
    lines: list[str] = []
    service = FakeService("s3")
    watch = watch_of(service, clock, lines)
    watch.check(may_start=True)
    assert (watch.state, watch.restarts, service.starts) == (ServiceState.RUNNING, 0, 0)

    service.kill()
    watch.check(may_start=True)
    assert watch.state is ServiceState.RESTARTING and service.starts == 0
    assert lines == ["s3: killed by SIGKILL; restarting in 1 s"]
    clock.now += 0.5
    watch.check(may_start=True)
    assert service.starts == 0  # still in its pause
    clock.now += 0.5
    watch.check(may_start=True)
    status = watch.status()
    assert (status.state, status.pid, status.restarts) == (ServiceState.RUNNING, 2001, 1)
    assert status.last_exit == "killed by SIGKILL"
    assert lines[-1] == "s3: restarted (pid 2001, restart 1)"


def test_pauses_grow_and_a_service_dying_past_the_bound_is_left_down(clock):
    lines: list[str] = []
    service = FakeService("scheduler")
    watch = watch_of(service, clock, lines)
    pauses = []
    for _ in range(supervision.RESTART_POLICY.attempts):
        service.kill(1)
        watch.check(may_start=True)
        pauses.append(watch.retry_at - clock.now)
        clock.now = watch.retry_at
        watch.check(may_start=True)
        assert watch.state is ServiceState.RUNNING
        clock.now += 1.0  # dies again soon after each start
    assert pauses == [1.0, 2.0, 4.0, 8.0, 16.0]
    service.kill(1)
    watch.check(may_start=True)
    assert watch.state is ServiceState.FAILED
    assert "failed, left down" in lines[-1] and "exit 1" in lines[-1]
    clock.now += 3600
    watch.check(may_start=True)
    assert watch.state is ServiceState.FAILED and service.starts == 5
    assert watch.status().restarts == 5


def test_a_service_up_for_the_stable_time_starts_its_streak_over(clock):
    service = FakeService("triggerer")
    watch = watch_of(service, clock, [])
    for _ in range(3):
        service.kill()
        watch.check(may_start=True)
        clock.now = watch.retry_at
        watch.check(may_start=True)
        clock.now += 1.0
    service.kill()
    watch.check(may_start=True)
    assert watch.retry_at - clock.now == 8.0
    clock.now = watch.retry_at
    watch.check(may_start=True)
    clock.now += 61.0  # up longer than stable_s
    service.kill()
    watch.check(may_start=True)
    assert watch.retry_at - clock.now == 1.0
    assert watch.restarts == 4


def test_a_failed_start_counts_and_backs_off_naming_the_error(clock):
    lines: list[str] = []
    service = FakeService("s3")
    service.fail_starts = 1
    watch = watch_of(service, clock, lines)
    service.kill()
    watch.check(may_start=True)
    clock.now = watch.retry_at
    watch.check(may_start=True)
    assert watch.state is ServiceState.RESTARTING
    assert watch.last_exit == "start failed: port 9000 is taken"
    assert lines[-1] == "s3: start failed: port 9000 is taken; restarting in 2 s"
    clock.now = watch.retry_at
    watch.check(may_start=True)
    assert (watch.state, watch.restarts, watch.pid) == (ServiceState.RUNNING, 2, 2002)


def test_a_later_service_waits_while_one_it_needs_is_down(clock):
    database = FakeService("postgresql")
    airflow = FakeService("airflow", needs_previous=True)
    database.fail_starts = 1
    watches = [watch_of(database, clock, []), watch_of(airflow, clock, [])]
    database.kill()
    airflow.kill()
    check_all(watches)
    clock.now += 1.0
    check_all(watches)  # the database's start fails: Airflow is not started
    assert (database.starts, airflow.starts) == (1, 0)
    clock.now += 2.0
    check_all(watches)  # the database first, then Airflow in the same pass
    assert (database.starts, airflow.starts) == (2, 1)
    assert [w.state for w in watches] == [ServiceState.RUNNING, ServiceState.RUNNING]


def test_a_failed_service_started_elsewhere_is_watched_again(clock):
    lines: list[str] = []
    service = FakeService("localkube")
    watch = watch_of(service, clock, lines)
    watch.state = ServiceState.FAILED
    service.pid = None
    watch.check(may_start=True)
    assert watch.state is ServiceState.FAILED
    service.pid = 4242  # a second `make up`
    watch.check(may_start=True)
    assert (watch.state, watch.pid) == (ServiceState.RUNNING, 4242)
    assert lines[-1] == "localkube: running again (pid 4242), started elsewhere"
    assert watch.schedule.failures == 0


def test_the_table_is_written_read_back_and_printed(tmp_path):
    rows = [
        ServiceStatus("s3", ServiceState.RUNNING, 10, 1_000_000.0, 1, "killed by SIGKILL"),
        ServiceStatus("postgresql", ServiceState.FAILED, None, None, 5, "exit 1"),
    ]
    path = tmp_path / "supervisor.json"
    supervision.write_table(path, 77, 999_000.0, rows)
    assert supervision.read_table(path) == (77, rows)
    assert supervision.read_table(tmp_path / "none.json") == (None, [])
    text = supervision.format_table(rows, now=1_003_661.0)
    header, s3, database = text.splitlines()
    assert header.split() == ["service", "state", "pid", "up", "since", "restarts", "last", "exit"]
    assert s3.split()[:3] == ["s3", "running", "10"] and "(1h01m01s)" in s3
    assert s3.endswith("killed by SIGKILL")
    assert database.split()[:4] == ["postgresql", "failed", "-", "-"]


def test_exit_statuses_in_words():
    assert supervision.describe_returncode(3) == "exit 3"
    assert supervision.describe_returncode(-signal.SIGKILL) == "killed by SIGKILL"
    assert "unknown" in supervision.describe_returncode(None)


def test_an_unbounded_policy_is_refused():
    with pytest.raises(ValueError, match="needs attempts"):
        Watch(FakeService("s3"), supervision.RESTART_POLICY.with_changes(attempts=None))


def test_a_dead_component_leaves_nothing_of_its_group_and_starts_again(monkeypatch):
    def start_group(name: str) -> subprocess.Popen:
        # the leader and a child of its group (a scheduler and its LocalExecutor worker)
        return subprocess.Popen(["sh", "-c", "sleep 60 & wait"], process_group=0)

    monkeypatch.setattr(airflow_components, "start_component", start_group)
    component = airflow_components.Component("scheduler")
    first = component.process
    try:
        assert component.find_pid() == first.pid
        time.sleep(0.2)  # the leader's child started
        members = [
            pid
            for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
            if pid != first.pid and os.getpgid(pid) == first.pid
        ]
        assert members, "the leader's child did not start"
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        assert component.find_pid() is None
        assert component.describe_exit(first.pid) == "killed by SIGKILL"
        deadline = time.monotonic() + 5
        while any(is_alive(pid) for pid in members) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(is_alive(pid) for pid in members)
        assert component.start() != first.pid and component.find_pid() == component.process.pid
    finally:
        for process in (first, component.process):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


def test_the_supervisor_knows_how_its_children_ended():
    exits = supervisor.ChildExits()
    child = subprocess.Popen(["sh", "-c", "exit 3"])
    pid = child.pid
    deadline = time.monotonic() + 5
    while pid not in exits.codes and time.monotonic() < deadline:
        exits.reap()
        time.sleep(0.02)
    assert exits.describe(pid) == "exit 3"
    assert "unknown" in exits.describe(pid)  # told once


def test_rows_of_a_writer_that_died_show_stopped(tmp_path):
    rows = [
        ServiceStatus("s3", ServiceState.RUNNING, 10, None, 0, ""),
        ServiceStatus("postgresql", ServiceState.FAILED, None, None, 5, "exit 1"),
    ]
    dead = subprocess.Popen(["true"])
    dead.wait()
    path = tmp_path / "supervisor.json"
    supervision.write_table(path, dead.pid, 0.0, rows)
    _, seen = supervision.read_current_table(path)
    assert [row.state for row in seen] == [ServiceState.STOPPED, ServiceState.FAILED]
    supervision.write_table(path, os.getpid(), 0.0, rows)
    assert supervision.read_current_table(path) == (os.getpid(), rows)
