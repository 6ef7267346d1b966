"""The process that runs a command inside a running container, as the container's user.

Why not nsenter: nsenter enters the namespaces but stays root with every capability, while a
Kubernetes exec (`pods/exec`, exec lifecycle hooks) runs like the container itself: its uid,
gid and groups, its capabilities, no_new_privs and seccomp filter. The API server (or the
kubelet, for hooks) runs `python -I -S enter.py STATE_JSON CONTAINER -- COMMAND...` as root,
as `localkube.kubelet.exec.build_exec_command` says; this process

1. reads the pod's state.json: the container's pid 1, environment and security profile;
2. joins the container's cgroups (memory, cpu, pids), so its limits cover what exec starts;
3. enters its ipc, uts, net, pid and mount namespaces, chroots into its root and changes to
   its working directory (what `nsenter --root --wd` did);
4. forks, since a pid namespace applies to children only; the child drops privileges
   (privileges.apply_privileges), asks for SIGKILL should this process die, and execs the
   command with the container's environment; this process waits for it and exits the same
   way (code, or the same signal), as nsenter does.

Standard library only, few imports: it starts on every exec.
"""

import _signal as signal  # the C module: `signal` would import enum
import json
import os
import sys
import warnings  # noqa: F401 - os.execvpe imports it, once the host's stdlib may be out of sight

if __name__ == "__main__" and not __package__:  # run as a script with -I -S
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from localkube.kubelet.exec import read_cgroups  # noqa: E402
from localkube.kubelet.privileges import (  # noqa: E402
    apply_privileges,
    check_call,
    die_with_parent,
    libc,
)

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
# nsenter's order; the mount namespace last, since it changes what paths mean
NAMESPACES = (
    ("ipc", CLONE_NEWIPC),
    ("uts", CLONE_NEWUTS),
    ("net", CLONE_NEWNET),
    ("pid", CLONE_NEWPID),
    ("mnt", CLONE_NEWNS),
)
EXIT_NOT_FOUND = 127
EXIT_CANNOT_RUN = 126


def fail(message: str, code: int = 1) -> None:
    os.write(2, f"localkube exec: {message}\n".encode(errors="replace"))
    os._exit(code)


def read_container_entry(state_path: str, container: str) -> dict:
    try:
        with open(state_path) as f:
            entry = (json.load(f).get("containers") or {}).get(container)
    except (OSError, ValueError) as exc:
        fail(f"cannot read {state_path}: {exc}")
    if not entry or not entry.get("pid"):
        fail(f"container {container!r} is not running")
    return entry


def join_cgroups(pid: int) -> None:
    for group in read_cgroups(pid):
        try:
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            pass  # the group went away with the container; the exec then fails on setns


def enter_container(pid: int) -> None:
    """setns into the container's namespaces, then its root and working directory."""
    fds = [(os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY), flag) for name, flag in NAMESPACES]
    root_fd = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY)
    cwd_fd = os.open(f"/proc/{pid}/cwd", os.O_RDONLY | os.O_DIRECTORY)
    for fd, flag in fds:
        check_call(libc.setns(fd, flag), "setns")
        os.close(fd)
    os.fchdir(root_fd)
    os.chroot(".")
    os.fchdir(cwd_fd)
    os.close(root_fd)
    os.close(cwd_fd)


def run_child(entry: dict, command: list[str], parent: int) -> None:
    try:
        if entry.get("security"):
            apply_privileges(entry["security"])
        die_with_parent(signal.SIGKILL)
        # The parent lives outside the container's pid namespace: getppid() is 0 while it
        # lives (its own pid when the namespace is the host's), something else once it died.
        if os.getppid() not in (0, parent):
            os._exit(137)
        for sig in (signal.SIGPIPE, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        os.execvpe(command[0], command, entry.get("env") or {})
    except FileNotFoundError:
        fail(f'exec: "{command[0]}": executable file not found in $PATH', EXIT_NOT_FOUND)
    except OSError as exc:
        fail(f'exec: "{command[0]}": {exc.strerror or exc}', EXIT_CANNOT_RUN)


def main() -> None:
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        fail("usage: enter.py STATE_JSON CONTAINER -- COMMAND [ARG...]", 2)
    state_path, container, command = sys.argv[1], sys.argv[2], sys.argv[4:]
    entry = read_container_entry(state_path, container)
    pid = int(entry["pid"])
    join_cgroups(pid)
    try:
        enter_container(pid)
    except OSError as exc:
        fail(f"cannot enter container {container!r} (pid {pid}): {exc}")
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        run_child(entry, command, parent)
    while True:
        _, status = os.waitpid(child, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            break
        os.kill(os.getpid(), signal.SIGSTOP)  # the child stopped: so do we (nsenter's way)
        os.kill(child, signal.SIGCONT)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


if __name__ == "__main__":
    main()
