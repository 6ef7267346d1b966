"""How to run a command inside a running container (pods/exec and lifecycle hooks).

The API server spawns what `build_exec_command` returns: a `/bin/sh` that
moves itself into the container's cgroups and execs `nsenter` into the
namespaces of the container's pid 1 (net, mount, uts, ipc, pid, its root and
working directory), with the container's environment. It reads only the
pod's state.json, so it works from any process on the host.
"""

from __future__ import annotations

import json
import os

NSENTER = "/usr/bin/nsenter"
SHELL = "/bin/sh"
JOINED_CONTROLLERS = ("memory", "cpu", "pids")


def read_cgroups(pid: int) -> list[str]:
    """The v1 cgroup directories of `pid` for the controllers the kubelet limits."""
    groups = []
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(","):
                    if controller in JOINED_CONTROLLERS and path.startswith("/localkube-"):
                        groups.append(f"/sys/fs/cgroup/{controller}{path}")
    except (OSError, ValueError):
        return []
    return groups


class ContainerNotRunning(RuntimeError):
    """The container has no live process to exec into."""


def read_pod_state(state_dir: str, pod_uid: str) -> dict:
    path = os.path.join(state_dir, "kubelet", "pods", pod_uid, "state.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        raise ContainerNotRunning(
            f"pod {pod_uid}: no state at {path}; is it running on a localkube node?"
        ) from None


def build_exec_command(
    state_dir: str, pod_uid: str, container: str, command: list[str]
) -> tuple[list[str], dict[str, str], str]:
    """(argv, env, cwd) that runs `command` inside `container` of the pod."""
    if not command:
        raise ValueError("command: [] given; exec needs at least the program to run")
    state = read_pod_state(state_dir, pod_uid)
    containers = state.get("containers") or {}
    pod = f"{state.get('namespace')}/{state.get('name')}"
    if container not in containers:
        raise ContainerNotRunning(
            f"container {container!r} not found in pod {pod}; containers: {sorted(containers)}"
        )
    entry = containers[container]
    pid = entry.get("pid")
    if not pid or not os.path.exists(f"/proc/{pid}/ns/mnt"):
        raise ContainerNotRunning(f"container {container!r} of pod {pod} is not running")
    nsenter = [NSENTER, f"--target={pid}", "--net", "--mount", "--uts", "--ipc", "--pid"]
    nsenter += ["--root", "--wd", "--", *command]
    # join the container's cgroups first (limits and accounting cover exec'd processes)
    joins = "".join(f"echo $$ > '{g}/cgroup.procs' 2>/dev/null; " for g in read_cgroups(pid))
    argv = [SHELL, "-c", joins + 'exec "$@"', "sh", *nsenter] if joins else nsenter
    env = dict(entry.get("env") or {})
    return argv, env, "/"
