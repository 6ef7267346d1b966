"""How to run a command inside a running container (pods/exec and lifecycle hooks).

The API server spawns what `build_exec_command` returns: `enter.py` (run by this
interpreter with -I -S), which joins the container's cgroups, enters the namespaces of the
container's pid 1 (ipc, uts, net, pid, mount, its root and working directory) and runs the
command with the container's environment as the container's user, groups, capabilities,
no_new_privs and seccomp filter (the `security` profile the kubelet recorded). It reads only
the pod's state.json, so it works from any process on the host that runs as root.
"""

from __future__ import annotations

import json
import os
import sys

from localkube.kubelet.errors import KubeletError

ENTER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "enter.py")
JOINED_CONTROLLERS = ("memory", "cpu", "pids")
ENTER_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


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


class ContainerNotRunning(KubeletError):
    """The container has no live process to exec into."""


def build_state_path(state_dir: str, pod_uid: str) -> str:
    return os.path.join(state_dir, "kubelet", "pods", pod_uid, "state.json")


def read_pod_state(state_dir: str, pod_uid: str) -> dict:
    path = build_state_path(state_dir, pod_uid)
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
    """(argv, env, cwd) that runs `command` inside `container` of the pod.

    `env` is for the root process that enters the container, not the command (which gets the
    container's environment from state.json): the pod's variables (LD_PRELOAD, ...) must not
    reach a process running as root on the host."""
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
    state_path = build_state_path(state_dir, pod_uid)
    argv = [sys.executable, "-I", "-S", ENTER_PATH, state_path, container, "--", *command]
    return argv, dict(ENTER_ENV), "/"
