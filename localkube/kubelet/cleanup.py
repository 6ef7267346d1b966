"""Removing what kubelets of a state dir left behind (after a crash, or at `down`).

Everything the kubelet creates is findable from the state dir alone: pod
directories with state.json (shim and container pids), cgroups under
`localkube-<h8>`, network namespaces named `lk-<h8>` and `lk-<h8>-*` (their
veths die with them), and no mount in the host's namespace except the netns
files `ip netns` manages. `sweep(state_dir)` removes all of them and keeps the
pods' log files (the API server may still serve them).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

from localkube.kubelet import cgroups, network
from localkube.kubelet.runtime import is_process_alive, pod_dir

SHIM_MARKER = "localkube/kubelet/shim.py"


def read_state(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def is_recorded_process(
    entry: dict, pid_key: str, start_key: str, marker: str | None = None
) -> bool:
    """Whether the process a state.json entry records still runs: same pid, same start.

    A pid recorded by a kubelet that died (or a container that ended before its
    record was rewritten) may since name anything, e.g. another cluster's shim or
    container, which a kill must never reach.
    """
    start = entry.get(start_key)
    if start is None:
        return False
    return is_process_alive(entry.get(pid_key), marker, start)


def kill_recorded_processes(state: dict) -> None:
    for entry in (state.get("containers") or {}).values():
        shim = entry.get("shimPid")
        if is_recorded_process(entry, "shimPid", "shimStart", SHIM_MARKER):
            os.kill(shim, signal.SIGKILL)
        pid = entry.get("pid")
        if is_recorded_process(entry, "pid", "pidStart") and os.path.exists(f"/proc/{pid}/ns/pid"):
            try:
                if os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid"):
                    os.kill(pid, signal.SIGKILL)  # pid 1 of its own pid namespace: ours
            except OSError:
                pass


def clean_pod_leftovers(state_dir: str, pod_uid: str, remove_dir: bool) -> None:
    """Kill the pod's processes and remove its cgroups and network namespace."""
    directory = pod_dir(state_dir, pod_uid)
    state = read_state(os.path.join(directory, "state.json"))
    kill_recorded_processes(state)
    cgroups.destroy_pod_cgroups(network.state_hash(state_dir), pod_uid)
    network.teardown_pod_network(state_dir, pod_uid)
    unmount_below(directory)
    if remove_dir:
        subprocess.run(["rm", "-rf", directory], check=False)


def unmount_below(path: str) -> None:
    """Lazily unmount anything mounted at or below `path` in our namespace (deepest first)."""
    prefix = os.path.abspath(path)
    targets = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            target = line.split()[4].replace("\\040", " ")
            if target == prefix or target.startswith(prefix + "/"):
                targets.append(target)
    for target in sorted(targets, key=len, reverse=True):
        subprocess.run(["umount", "-l", target], check=False, capture_output=True)


def list_state_netns(state_dir: str) -> list[str]:
    prefix = network.cluster_netns_name(state_dir)
    try:
        names = os.listdir(network.NETNS_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n == prefix or n.startswith(prefix + "-"))


def sweep(state_dir: str) -> None:
    """Remove every process, cgroup, network namespace and mount of this state dir's kubelets."""
    state_dir = os.path.abspath(state_dir)
    pods_root = os.path.join(state_dir, "kubelet", "pods")
    if os.path.isdir(pods_root):
        for uid in os.listdir(pods_root):
            kill_recorded_processes(read_state(os.path.join(pods_root, uid, "state.json")))
    cgroups.destroy_state_cgroups(network.state_hash(state_dir))
    cluster = network.cluster_netns_name(state_dir)
    for name in list_state_netns(state_dir):
        if name != cluster:
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
    if cluster in list_state_netns(state_dir):
        subprocess.run(["ip", "netns", "del", cluster], check=False, capture_output=True)
    unmount_below(os.path.join(state_dir, "kubelet"))
    if os.path.isdir(pods_root):
        for uid in os.listdir(pods_root):
            state_path = os.path.join(pods_root, uid, "state.json")
            state = read_state(state_path)
            if state:
                for entry in (state.get("containers") or {}).values():
                    entry["pid"] = entry["shimPid"] = None
                    entry["root"] = None
                state["netns"] = None
                tmp = state_path + ".sweep.tmp"
                with open(tmp, "w") as f:
                    json.dump(state, f)
                os.replace(tmp, state_path)
