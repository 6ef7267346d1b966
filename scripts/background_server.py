"""Start a local server in the background, await it, stop it: what the launchers share.

Why this exists: scripts/airflow_server.py and scripts/s3_server.py both run a
long-lived program detached from whoever started it (a session of its own, so
the end of `make` or a Ctrl-C in the terminal does not reach it; stdin closed;
output appended to a log file), wait until it answers or dies, and stop it
with SIGTERM, then SIGKILL after a grace period. Stopping looks again on every
pass, because a server that is shutting down may still start processes (an
executor replacing a worker); it returns only once a look finds none alive.

Files that hold credentials (a log with a password or presigned queries,
services.json, ready.json) are written through `open_private`/`write_private`:
0600 from the first byte, then renamed into place, never world-readable even
briefly.

The launchers import it as `scripts.background_server` (scripts/ is an installed
package), whether they run as scripts or are imported by the tests' harness.
"""

from __future__ import annotations

import enum
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

LOOPBACK = "127.0.0.1"
POLL_INTERVAL_S = 0.2
PRIVATE_FILE_MODE = 0o600  # files holding credentials
PRIVATE_DIR_MODE = 0o700


class StartOutcome(enum.Enum):
    READY = "ready"
    EXITED = "exited"
    TIMED_OUT = "timed out"


def pick_free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def pick_port_below_ephemeral_range(host: str = LOOPBACK) -> int:
    """A free port the kernel never hands out as a connection's source port.

    A server that must come back on its port after a crash needs one: while it is
    down, a port of the ephemeral range (what `pick_free_port` returns) may become
    the source port of any outgoing connection on the machine, and then no server
    can bind it until that connection ends.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.sample(range(max(1024, low - 12000), low), 200):
        if is_port_free(port, host):
            return port
    raise OSError(f"no free port below the ephemeral range (from {low}) on {host}")


def is_port_free(port: int, host: str = LOOPBACK) -> bool:
    """True when a server could listen on host:port now (SO_REUSEADDR, as servers set it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def await_port_free(port: int, timeout: float, host: str = LOOPBACK) -> bool:
    """Whether host:port came free within timeout (a killed server releases its
    listening socket only once the kernel has finished its exit, seconds on a busy
    machine)."""
    deadline = time.monotonic() + timeout
    while not is_port_free(port, host):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL_S)
    return True


def is_alive(pid: int) -> bool:
    """The process exists and is not a zombie (an exited child nobody has reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def open_private(path: Path, flags: int) -> int:
    """os.open with mode 0600, also for a file that exists already (made by an older version)."""
    fd = os.open(path, flags | os.O_CREAT, PRIVATE_FILE_MODE)
    os.fchmod(fd, PRIVATE_FILE_MODE)
    return fd


def write_private(path: Path, text: str) -> None:
    """Replace path with text, mode 0600 from the first byte (a temporary file, then rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_TRUNC | os.O_EXCL), "w") as out:
        out.write(text)
    os.replace(tmp, path)


def make_private_dir(path: Path) -> None:
    """mkdir -p path, then mode 0700 (also when it existed)."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    path.chmod(PRIVATE_DIR_MODE)


def spawn_detached(
    argv: list[str],
    log_path: Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    umask: int = -1,
) -> subprocess.Popen[bytes]:
    """Start argv in a new session with stdin closed and stdout+stderr appended to log_path.

    The log is 0600: servers print credentials there (Airflow its admin password,
    moto every request line with its presigned query). `umask` (e.g. 0o077) is the
    child's; -1 keeps ours.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(open_private(log_path, os.O_WRONLY | os.O_APPEND), "ab") as log:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            umask=umask,
        )


def await_ready(
    is_ready: Callable[[], bool],
    pid: int,
    timeout: float,
    poll: float = POLL_INTERVAL_S,
) -> StartOutcome:
    """Poll is_ready until it is true, the process pid dies, or timeout seconds pass."""
    deadline = time.monotonic() + timeout
    while not is_ready():
        if not is_alive(pid):
            return StartOutcome.EXITED
        if time.monotonic() > deadline:
            return StartOutcome.TIMED_OUT
        time.sleep(poll)
    return StartOutcome.READY


def signal_all(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def stop_processes(
    find_alive: Callable[[], set[int]],
    grace: float,
    kill_period: float,
    poll: float = POLL_INTERVAL_S,
) -> list[int]:
    """SIGTERM what find_alive returns, SIGKILL what is still alive after grace; every pid seen."""
    seen: set[int] = set()
    for signum, period in ((signal.SIGTERM, grace), (signal.SIGKILL, kill_period)):
        deadline = time.monotonic() + period
        signalled: set[int] = set()
        while (running := find_alive()) and time.monotonic() < deadline:
            seen |= running
            # SIGTERM once per process (a second one can cut a clean shutdown short);
            # SIGKILL every pass.
            signal_all(running - signalled if signum == signal.SIGTERM else running, signum)
            signalled |= running
            time.sleep(poll)
        if not running:
            break
    return sorted(seen)


def stop_pid(pid: int, grace: float, kill_period: float = 5.0) -> bool:
    """Stop one process; False when it was not running."""
    return bool(stop_processes(lambda: {pid} if is_alive(pid) else set(), grace, kill_period))


def reap(pid: int | None) -> None:
    """Collect the exit status of pid when it is our child (a server started by this process)."""
    if pid is None:
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
