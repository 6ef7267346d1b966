"""Starting, signalling and awaiting container runs through the shim.

One run = one shim process (see shim.py). `start_container_run` writes the
shim's spec (a marshal file), spawns it and reads its first line (STARTED pid / FAILED why);
`await_container_exit` waits for the shim and returns its exit record. Runs
re-adopted after a kubelet restart are awaited through a pidfd.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import marshal
import os
import signal
import sys
from dataclasses import dataclass

SHIM_PATH = os.path.join(os.path.dirname(__file__), "shim.py")
SHIM_START_TIMEOUT_S = 30


PRIVATE_DIR_MODE = 0o700  # the kubelet's state: no pod process may look into another pod's


def pod_dir(state_dir: str, pod_uid: str) -> str:
    return os.path.join(state_dir, "kubelet", "pods", pod_uid)


def make_private_dir(path: str) -> None:
    """A root-owned 0700 directory (created if missing, tightened if it exists)."""
    os.makedirs(path, exist_ok=True)
    os.chown(path, 0, 0)
    os.chmod(path, PRIVATE_DIR_MODE)


def make_kubelet_dirs(state_dir: str) -> None:
    """DIR/kubelet and DIR/kubelet/pods, 0700: a non-root process of one pod cannot reach
    another pod's volumes (its secrets) through their host paths; each pod reaches its own
    through the bind mounts the shim made as root."""
    make_private_dir(os.path.join(state_dir, "kubelet"))
    make_private_dir(os.path.join(state_dir, "kubelet", "pods"))


def make_pod_dirs(directory: str) -> None:
    """The pod's directory (0700); each container's /tmp is a tmpfs of its own (podroot.py)."""
    make_private_dir(directory)


def build_shim_spec(
    pod: dict, directory: str, container: dict, restart_count: int, **run: object
) -> dict:
    """The shim's spec for one run of `container`, creating its per-run directories.

    `run` holds what the kubelet resolved: netns_path, security (the profile of
    securitycontext.py), mounts, host_dirs, cgroups, argv, env."""
    name = container["name"]
    base = os.path.join(directory, "containers", name)
    for sub in ("root", "scratch"):
        os.makedirs(os.path.join(base, sub), exist_ok=True)
    log_dir = os.path.join(directory, "logs", name)
    os.makedirs(log_dir, exist_ok=True)
    return {
        **run,
        "host_dirs": list(run.get("host_dirs") or ()),
        "root": os.path.join(base, "root"),
        "scratch_dir": os.path.join(base, "scratch"),
        "hostname": (pod.get("spec") or {}).get("hostname") or pod["metadata"]["name"],
        "workingDir": container.get("workingDir") or "/",
        "log_path": os.path.join(log_dir, f"{restart_count}.log"),
        "exit_path": os.path.join(base, "exit.bin"),
    }


def write_json_atomically(path: str, data: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


@dataclass
class ContainerRun:
    """One started (or failed-to-start) run of a container."""

    exit_path: str
    shim_pid: int
    pid: int | None = None
    started_at: str | None = None
    start_error: str | None = None
    process: asyncio.subprocess.Process | None = None
    # When each process started (clock ticks since boot, /proc/<pid>/stat): a pid alone
    # may name another cluster's process once ours is gone and the number was reused.
    shim_start: int | None = None
    pid_start: int | None = None


async def start_container_run(spec: dict, spec_path: str) -> ContainerRun:
    """Spawn the shim for `spec`; returns once the container's process exists (or failed)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(spec["exit_path"])
    tmp = f"{spec_path}.tmp"
    with open(tmp, "wb") as f:
        marshal.dump(spec, f)
    os.replace(tmp, spec_path)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-S",
        SHIM_PATH,
        spec_path,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=None,
        start_new_session=True,
    )
    run = ContainerRun(
        exit_path=spec["exit_path"],
        shim_pid=process.pid,
        process=process,
        shim_start=read_start_ticks(process.pid),
    )
    try:
        line = await asyncio.wait_for(process.stdout.readline(), SHIM_START_TIMEOUT_S)
    except TimeoutError:
        line = b"FAILED the container did not start within %d s" % SHIM_START_TIMEOUT_S
    text = line.decode(errors="replace").strip()
    if text.startswith("STARTED "):
        _, pid, started_at = text.split(" ", 2)
        run.pid, run.started_at = int(pid), started_at
        run.pid_start = read_start_ticks(run.pid)
    else:
        run.start_error = (
            text.removeprefix("FAILED ").strip() or "the shim exited before starting the container"
        )
    return run


def read_exit_record(path: str) -> dict | None:
    try:
        with open(path, "rb") as f:
            return marshal.load(f)
    except (OSError, ValueError, EOFError, TypeError):
        return None


async def await_pid_exit(pid: int) -> None:
    """Wait for a process that is not our child (a re-adopted shim)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_reader(fd, lambda: done.done() or done.set_result(None))
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def await_container_exit(run: ContainerRun) -> dict:
    """The exit record once the run's shim is gone."""
    if run.process is not None:
        await run.process.wait()
    else:
        await await_pid_exit(run.shim_pid)
    record = read_exit_record(run.exit_path)
    if record is None:
        return {
            "exitCode": 137,
            "signal": 9,
            "reason": "ContainerStatusUnknown",
            "message": "The container's shim exited without an exit record",
        }
    return record


def signal_process(pid: int | None, sig: signal.Signals) -> None:
    if pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def read_start_ticks(pid: int | None) -> int | None:
    """When `pid` started (field 22 of /proc/<pid>/stat); None when it is gone."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def is_process_alive(pid: int | None, marker: str | None = None, start: int | None = None) -> bool:
    """Whether `pid` lives (and, given a marker, runs something whose cmdline holds it;
    given `start`, is the process that started then, not a later one with its number)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
            if fields[0] == "Z" or (start is not None and int(fields[19]) != start):
                return False
        if marker:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return marker.encode() in f.read()
        return True
    except (OSError, IndexError):
        return False
