"""cgroup v1 groups per container: limits, kill-all, removal.

Every container run gets `<controller>/localkube-<h8>/<pod-uid>/<container>`
in the memory, cpu and pids hierarchies (limits only where the spec sets one,
plus a pids cap). The groups are how the kubelet finds and kills every process
of a container, and how the shim tells an OOM kill (memory.oom_control's
`oom_kill` counter) from any other SIGKILL.
"""

from __future__ import annotations

import os
import signal
import time

CGROUP_ROOT = "/sys/fs/cgroup"
CONTROLLERS = ("memory", "cpu", "pids")
CFS_PERIOD_US = 100_000
DEFAULT_PIDS_LIMIT = 4096
BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL_SUFFIXES = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def parse_quantity(value: str | int | float, field: str) -> float:
    """A Kubernetes quantity ('512Mi', '0.5', '250m', '1G') as a number."""
    text = str(value).strip()
    try:
        for suffix, factor in BINARY_SUFFIXES.items():
            if text.endswith(suffix):
                return float(text[: -len(suffix)]) * factor
        if text.endswith("m"):
            return float(text[:-1]) / 1000
        for suffix, factor in DECIMAL_SUFFIXES.items():
            if text.endswith(suffix):
                return float(text[: -len(suffix)]) * factor
        return float(text)
    except ValueError:
        raise ValueError(
            f"{field}: {value!r} is not a Kubernetes quantity (e.g. 512Mi, 250m, 2)"
        ) from None


def pod_group_rel(state_hash: str, pod_uid: str) -> str:
    return f"localkube-{state_hash}/{pod_uid}"


def container_cgroup_paths(state_hash: str, pod_uid: str, container: str) -> list[str]:
    rel = f"{pod_group_rel(state_hash, pod_uid)}/{container}"
    return [os.path.join(CGROUP_ROOT, c, rel) for c in CONTROLLERS]


def write_value(path: str, name: str, value: str | int) -> None:
    with open(os.path.join(path, name), "w") as f:
        f.write(str(value))


def create_container_cgroups(
    state_hash: str, pod_uid: str, container: dict, pids_limit: int = DEFAULT_PIDS_LIMIT
) -> list[str]:
    """Create (or reuse) the container's groups with the limits of its spec."""
    paths = container_cgroup_paths(state_hash, pod_uid, container["name"])
    limits = (container.get("resources") or {}).get("limits") or {}
    name = container["name"]
    for path in paths:
        os.makedirs(path, exist_ok=True)
        controller = path[len(CGROUP_ROOT) + 1 :].split("/", 1)[0]
        if controller == "memory":
            # use_hierarchy so the pod group's counters include its containers
            if "memory" in limits:
                memory = int(
                    parse_quantity(limits["memory"], f"containers[{name}].resources.limits.memory")
                )
                write_value(path, "memory.limit_in_bytes", memory)
            else:
                write_value(path, "memory.limit_in_bytes", -1)
        elif controller == "cpu":
            if "cpu" in limits:
                cpus = parse_quantity(limits["cpu"], f"containers[{name}].resources.limits.cpu")
                write_value(path, "cpu.cfs_period_us", CFS_PERIOD_US)
                write_value(path, "cpu.cfs_quota_us", max(1000, int(cpus * CFS_PERIOD_US)))
            else:
                write_value(path, "cpu.cfs_quota_us", -1)
        elif controller == "pids":
            write_value(path, "pids.max", pids_limit)
    return paths


def list_pids(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(line) for line in f if line.strip()]
    except OSError:
        return []


def kill_groups_below(top: str, deadline_s: float = 5.0) -> bool:
    """SIGKILL every process in `top` and its descendants until none is left."""
    deadline = time.monotonic() + deadline_s
    while True:
        pids = []
        for dirpath, _dirs, _files in os.walk(top):
            pids.extend(list_pids(dirpath))
        if not pids:
            return True
        if time.monotonic() > deadline:
            return False
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def remove_groups_below(top: str) -> None:
    """rmdir `top` and its descendants, deepest first (cgroup dirs are removed with rmdir)."""
    if not os.path.isdir(top):
        return
    for dirpath, _dirs, _files in os.walk(top, topdown=False):
        try:
            os.rmdir(dirpath)
        except OSError:
            pass


def pod_group_tops(state_hash: str, pod_uid: str) -> list[str]:
    rel = pod_group_rel(state_hash, pod_uid)
    return [os.path.join(CGROUP_ROOT, c, rel) for c in CONTROLLERS]


def destroy_pod_cgroups(state_hash: str, pod_uid: str) -> bool:
    """Kill every process left in the pod's groups, then remove the groups."""
    clean = True
    for top in pod_group_tops(state_hash, pod_uid):
        if os.path.isdir(top):
            clean = kill_groups_below(top) and clean
            remove_groups_below(top)
    return clean


def destroy_state_cgroups(state_hash: str) -> None:
    """Sweep: every group of this state dir, in every controller."""
    for controller in CONTROLLERS:
        top = os.path.join(CGROUP_ROOT, controller, f"localkube-{state_hash}")
        if os.path.isdir(top):
            kill_groups_below(top)
            remove_groups_below(top)
