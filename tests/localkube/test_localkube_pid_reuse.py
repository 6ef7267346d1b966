"""A pid recorded by a kubelet is acted on only while it names the same process.

A container or shim that ended leaves its pid in state.json until the record
is rewritten, and a kubelet that was killed never rewrites it. Meanwhile the
kernel may hand the number to anything, e.g. the container or shim of another
cluster running beside this one (the test suite runs several), and a cleanup
that killed it would end a healthy container: KPO's xcom sidecar was once seen
"already terminated" that way. The record therefore holds each process's start
time too (/proc/<pid>/stat), and the container's pid 1 runs in its own session,
as runc starts it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from harness.localkube_fixtures import start_localkube, stop_localkube
from localkube.kubelet import cleanup
from localkube.kubelet.runtime import pod_dir, read_start_ticks

pytestmark = [pytest.mark.root]


@pytest.fixture
def foreign_container() -> Iterator[int]:
    """Another cluster's container as the host sees it: pid 1 of its own pid namespace."""
    process = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "sleep", "300"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            children = open(f"/proc/{process.pid}/task/{process.pid}/children").read().split()
            if children:
                yield int(children[0])
                break
            time.sleep(0.05)
        else:
            raise AssertionError("unshare did not start its child")
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def foreign_shim() -> Iterator[int]:
    """Another cluster's shim: a process whose command line names the shim."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", "localkube/kubelet/shim.py"]
    )
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def entry(pid: int, start: int | None, shim: int, shim_start: int | None) -> dict:
    return {
        "containers": {
            "c": {"pid": pid, "pidStart": start, "shimPid": shim, "shimStart": shim_start}
        }
    }


def test_a_recorded_pid_now_naming_another_process_is_left_alone(foreign_container, foreign_shim):
    container_start = read_start_ticks(foreign_container)
    shim_start = read_start_ticks(foreign_shim)
    # Recorded when our own processes had these numbers: they started at other times.
    cleanup.kill_recorded_processes(
        entry(foreign_container, container_start - 1, foreign_shim, shim_start - 1)
    )
    # A record without start times (nothing known of the process) is no licence either.
    cleanup.kill_recorded_processes(entry(foreign_container, None, foreign_shim, None))
    time.sleep(0.2)
    assert read_start_ticks(foreign_container) == container_start
    assert read_start_ticks(foreign_shim) == shim_start


def test_the_recorded_processes_themselves_are_killed(foreign_container, foreign_shim):
    cleanup.kill_recorded_processes(
        entry(
            foreign_container,
            read_start_ticks(foreign_container),
            foreign_shim,
            read_start_ticks(foreign_shim),
        )
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        cleanup.is_process_alive(foreign_container) or cleanup.is_process_alive(foreign_shim)
    ):
        time.sleep(0.05)
    assert not cleanup.is_process_alive(foreign_container)
    assert not cleanup.is_process_alive(foreign_shim)


@pytest.mark.e2e
def test_a_containers_pid_1_leads_its_own_session_and_its_record_holds_its_start(tmp_path):
    handle = start_localkube(tmp_path)
    try:
        core = handle.core_v1()
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": "alone"},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {"name": "c", "image": "busybox:1.36", "command": ["sleep", "300"]}
                    ],
                },
            },
        )
        deadline = time.monotonic() + 60
        while core.read_namespaced_pod("alone", "default").status.phase != "Running":
            assert time.monotonic() < deadline, "pod alone did not start"
            time.sleep(0.2)
        uid = core.read_namespaced_pod("alone", "default").metadata.uid
        state = json.loads(open(os.path.join(pod_dir(handle.state_dir, uid), "state.json")).read())
        recorded = state["containers"]["c"]
        pid = recorded["pid"]
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        process_group, session = int(fields[2]), int(fields[3])
        assert (process_group, session) == (pid, pid)  # not the shim's group or session
        assert recorded["pidStart"] == read_start_ticks(pid)
        assert recorded["shimStart"] == read_start_ticks(recorded["shimPid"])
    finally:
        stop_localkube(handle)
