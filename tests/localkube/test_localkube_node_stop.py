"""A node that loses power: `python -m localkube node-stop` kills its kubelet and its pods'
processes; after the node monitor grace period the API server marks the node Ready=Unknown with
the unreachable taint and its pods Failed/NodeLost, the scheduler places new pods elsewhere, a
lost pod is deleted at once, `node-start` brings the node back, and `down` leaves nothing.
The node lifecycle controller's rules are first checked on an in-process store with a fake
clock (no root, no processes)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import kubernetes
import pytest

from harness.localkube_fixtures import LocalkubeHandle, stop_localkube, wait_until
from localkube.apiserver.app import bootstrap_objects
from localkube.apiserver.nodelifecycle import NodeLifecycleController
from localkube.apiserver.operations import ObjectApi
from localkube.apiserver.store import Store

# More than the kubelets' 10 s heartbeat interval (the least `up` accepts), to keep it short.
GRACE_PERIOD_S = 12
UNREACHABLE = "node.kubernetes.io/unreachable"


def localkube_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "localkube", *args], capture_output=True, text=True, timeout=timeout
    )


def start_cluster(tmp_path: Path) -> LocalkubeHandle:
    state_dir = tmp_path / "localkube"
    result = localkube_cli(
        "up",
        "--state-dir",
        str(state_dir),
        "--port",
        "0",
        "--node-monitor-grace-period",
        str(GRACE_PERIOD_S),
    )
    if result.returncode != 0:
        stop_localkube(state_dir)
        raise RuntimeError(f"localkube up failed ({result.returncode}): {result.stderr}")
    info = json.loads((state_dir / "localkube.json").read_text())
    return LocalkubeHandle(info["api_url"], str(state_dir / "kubeconfig"), str(state_dir))


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def cluster_hash(state_dir: str) -> str:
    return hashlib.sha256(os.path.abspath(state_dir).encode()).hexdigest()[:8]


def pids_in_pod_cgroups(state_dir: str, uid: str) -> list[int]:
    pids = []
    for controller in ("memory", "cpu", "pids"):
        top = f"/sys/fs/cgroup/{controller}/localkube-{cluster_hash(state_dir)}/{uid}"
        for dirpath, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                pids += [int(p) for p in Path(dirpath, "cgroup.procs").read_text().split()]
    return pids


def leftovers(state_dir: str, marker: str) -> dict:
    prefix = f"lk-{cluster_hash(state_dir)}"
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    with open("/proc/mounts") as mounts:
        mounted = [line for line in mounts if state_dir in line]
    return {
        "processes": processes_with(marker) + processes_with(state_dir),
        "netns": [line for line in netns.splitlines() if line.startswith(prefix)],
        "cgroups": [
            c
            for c in ("memory", "cpu", "pids")
            if os.path.exists(f"/sys/fs/cgroup/{c}/localkube-{cluster_hash(state_dir)}")
        ],
        "mounts": mounted,
    }


def pinned_pod(name: str, node: str, command: list[str]) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 30,
            "nodeSelector": {"kubernetes.io/hostname": node} if node else {},
            "containers": [{"name": "main", "image": "busybox:1.36", "command": command}],
        },
    }


def ready_of(node) -> object:
    return next(c for c in node.status.conditions if c.type == "Ready")


def taint_keys(node) -> set[tuple[str, str]]:
    return {(t.key, t.effect) for t in node.spec.taints or []}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def in_process_cluster(tmp_path, paused=lambda: False):
    api = ObjectApi(Store(str(tmp_path / "store.db")))
    bootstrap_objects(api, [{"name": "node-1"}, {"name": "node-2"}])
    clock = FakeClock()
    return api, NodeLifecycleController(api, 40, paused=paused, clock=clock), clock


def heartbeat(api: ObjectApi, node: str, stamp: str) -> None:
    api.patch(
        "nodes",
        "",
        node,
        "application/merge-patch+json",
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "lastHeartbeatTime": stamp,
                    }
                ]
            }
        },
        subresource="status",
    )


def bound_pod(api: ObjectApi, name: str, node: str, phase: str = "Running") -> None:
    api.create(
        "pods",
        "default",
        {
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
        },
    )
    api.patch(
        "pods",
        "default",
        name,
        "application/merge-patch+json",
        {
            "status": {
                "phase": phase,
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": True,
                        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                    }
                ],
            }
        },
        subresource="status",
    )


def test_a_silent_node_is_lost_with_its_unfinished_pods_and_returns_when_it_reports(tmp_path):
    api, controller, clock = in_process_cluster(tmp_path)
    for node in ("node-1", "node-2"):
        heartbeat(api, node, "2026-01-01T00:00:00Z")
    bound_pod(api, "running", "node-1")
    bound_pod(api, "done", "node-1", phase="Succeeded")
    bound_pod(api, "elsewhere", "node-2")
    clock.now += 30
    heartbeat(api, "node-2", "2026-01-01T00:00:30Z")
    controller.check_nodes()
    assert api.node_ready("node-1")
    clock.now += 11
    controller.check_nodes()
    lost = api.get("nodes", "", "node-1")
    assert not api.node_ready("node-1") and api.node_ready("node-2")
    ready = next(c for c in lost["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
    assert {(t["key"], t["effect"]) for t in lost["spec"]["taints"]} == {
        (UNREACHABLE, "NoSchedule"),
        (UNREACHABLE, "NoExecute"),
    }
    status = api.get("pods", "default", "running")["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "NodeLost")
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    assert api.get("pods", "default", "done")["status"]["phase"] == "Succeeded"
    assert api.get("pods", "default", "elsewhere")["status"]["phase"] == "Running"
    # A pod on a lost node has nothing left to wait for: a graceful delete removes it.
    api.delete("pods", "default", "running")
    assert api.store.get("pods", "default", "running") is None

    heartbeat(api, "node-1", "2026-01-01T00:01:00Z")
    controller.check_nodes()
    assert api.node_ready("node-1")
    assert not api.get("nodes", "", "node-1")["spec"].get("taints")


def test_an_outage_does_not_count_as_silence(tmp_path):
    outage = {"on": False}
    api, controller, clock = in_process_cluster(tmp_path, paused=lambda: outage["on"])
    heartbeat(api, "node-1", "2026-01-01T00:00:00Z")
    bound_pod(api, "running", "node-1")
    outage["on"] = True
    clock.now += 100
    controller.check_nodes()
    outage["on"] = False
    clock.now += 30
    controller.check_nodes()
    assert api.node_ready("node-1")
    assert api.get("pods", "default", "running")["status"]["phase"] == "Running"
    clock.now += 11
    controller.check_nodes()
    assert not api.node_ready("node-1")


@pytest.mark.e2e
@pytest.mark.root
def test_a_stopped_node_loses_its_pods_and_new_ones_go_elsewhere(tmp_path):
    started = time.monotonic()
    marker = uuid.uuid4().hex
    handle = start_cluster(tmp_path)
    try:
        core = handle.core_v1()
        core.create_namespaced_pod(
            "default", pinned_pod("lost", "node-1", ["sh", "-c", f"sleep 300; : {marker}"])
        )
        wait_until(
            lambda: core.read_namespaced_pod("lost", "default").status.phase == "Running",
            timeout=60,
            what="pod lost running on node-1",
        )
        pod = core.read_namespaced_pod("lost", "default")
        assert pod.spec.node_name == "node-1" and processes_with(marker)

        stopped = localkube_cli("node-stop", "node-1", "--state-dir", handle.state_dir)
        assert stopped.returncode == 0, stopped.stderr
        assert processes_with(marker) == []
        assert pids_in_pod_cgroups(handle.state_dir, pod.metadata.uid) == []
        info = json.loads(Path(handle.state_dir, "localkube.json").read_text())
        assert "node-1" not in info["pids"]["kubelets"] and "node-2" in info["pids"]["kubelets"]

        # The pod turns Failed/NodeLost, seen as a MODIFIED watch event.
        lost_event = None
        for event in kubernetes.watch.Watch().stream(
            core.list_namespaced_pod,
            "default",
            field_selector="metadata.name=lost",
            resource_version=pod.metadata.resource_version,
            timeout_seconds=GRACE_PERIOD_S + 15,
        ):
            if event["type"] == "MODIFIED" and event["object"].status.phase == "Failed":
                lost_event = event
                break
        assert lost_event is not None, "no MODIFIED event with phase Failed"
        status = lost_event["object"].status
        assert status.reason == "NodeLost"
        assert status.message == "Node node-1 which was running pod lost is unresponsive"
        terminated = status.container_statuses[0].state.terminated
        assert terminated.reason == "NodeLost" and terminated.exit_code == 137

        node = core.read_node("node-1")
        ready = ready_of(node)
        assert (ready.status, ready.reason, ready.message) == (
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
        )
        assert (UNREACHABLE, "NoExecute") in taint_keys(node)
        assert ready_of(core.read_node("node-2")).status == "True"

        # New pods go to node-2; one that must run on node-1 waits, told why.
        core.create_namespaced_pod("default", pinned_pod("fresh", "", ["sleep", "300"]))
        core.create_namespaced_pod("default", pinned_pod("stuck", "node-1", ["sleep", "300"]))
        wait_until(
            lambda: core.read_namespaced_pod("fresh", "default").status.phase == "Running",
            timeout=60,
            what="pod fresh running",
        )
        assert core.read_namespaced_pod("fresh", "default").spec.node_name == "node-2"

        def unschedulable_message() -> str | None:
            conditions = core.read_namespaced_pod("stuck", "default").status.conditions or []
            return next(
                (c.message for c in conditions if c.type == "PodScheduled" and c.status == "False"),
                None,
            )

        message = wait_until(unschedulable_message, timeout=10, what="stuck unschedulable")
        assert f"untolerated taint {{{UNREACHABLE}: }}" in message, message
        core.delete_namespaced_pod("stuck", "default")

        # No kubelet is left to kill anything: the lost pod goes at once.
        core.delete_namespaced_pod("lost", "default")
        with pytest.raises(kubernetes.client.ApiException) as gone:
            core.read_namespaced_pod("lost", "default")
        assert gone.value.status == 404

        restarted = localkube_cli("node-start", "node-1", "--state-dir", handle.state_dir)
        assert restarted.returncode == 0, restarted.stderr
        assert ready_of(core.read_node("node-1")).status == "True"
        wait_until(
            lambda: not {k for k, _ in taint_keys(core.read_node("node-1"))} & {UNREACHABLE},
            timeout=5,
            what="unreachable taint removed",
        )
    finally:
        stop_localkube(handle)
    assert leftovers(handle.state_dir, marker) == {
        "processes": [],
        "netns": [],
        "cgroups": [],
        "mounts": [],
    }
    assert time.monotonic() - started < 90
