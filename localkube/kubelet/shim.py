"""The per-container shim: namespaces, root filesystem, logs and the exit record.

Why a separate process: the kubelet is an asyncio program with threads, so it
cannot safely fork into namespaces itself, and a container must outlive a
kubelet crash long enough to be re-adopted or swept. The kubelet starts one
shim per container run as `python -I -S shim.py SPEC` (standard library only,
no site, few imports: ~15 ms CPU; the spec and exit record are marshal files). The shim

1. enters the pod's network namespace and unshares mount, uts, ipc and pid
   namespaces, then forks: the child is pid 1 of the container;
2. the child joins the container's cgroups, builds its root as an image would
   hold it (podroot.py: the system's and the Python installation's directories
   read-only, its own /tmp, /var/tmp, /dev/shm and /dev, the pod's volumes at
   their mountPaths, /etc/hosts), chroots, sets the hostname, drops to the
   container's user, groups, capabilities, no_new_privs and seccomp filter
   (privileges.py) and execs the command;
3. the shim prints `STARTED <host pid> <startedAt>` or `FAILED <message>` on
   stdout, relays the child's stdout/stderr into the CRI-format log file
   (logwriter.py, which rotates it by size), waits
   for the child and writes the exit record (exit code, signal, OOM) atomically.

When pid 1 of the container exits the kernel kills every other process of its
pid namespace, so a container never leaves processes behind.
"""

import _signal as signal  # the C module: `signal` would import enum (~15 ms)
import ctypes
import marshal  # not json: importing json (re, enum) doubles the shim's start time
import os
import select
import sys
import time
import warnings  # noqa: F401 - os.execvpe imports it, once the host's stdlib may be out of sight

if __name__ == "__main__" and not __package__:  # run as a script with -I -S
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from localkube.kubelet.logwriter import LogWriter, format_timestamp  # noqa: E402
from localkube.kubelet.podroot import build_root  # noqa: E402
from localkube.kubelet.privileges import apply_privileges  # noqa: E402

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000

libc = ctypes.CDLL(None, use_errno=True)


def check_call(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def join_cgroups(paths: list[str]) -> None:
    for path in paths:
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write("0")


def run_child(spec: dict, out_w: int, err_w: int, errpipe_w: int) -> None:
    """In the new pid namespace as pid 1: finish the container and exec it."""
    try:
        os.setsid()  # as runc does: no signal to the shim's group or session reaches it
        join_cgroups(spec["cgroups"])
        build_root(spec)
        os.chroot(spec["root"])
        os.chdir(spec.get("workingDir") or "/")
        name = spec["hostname"].encode()
        check_call(libc.sethostname(name, len(name)), "sethostname")
        devnull = os.open("/dev/null", os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for sig in (signal.SIGPIPE, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        if spec.get("security"):
            apply_privileges(spec["security"])
        argv = spec["argv"]
        os.execvpe(argv[0], argv, spec["env"])
    except BaseException as exc:  # noqa: BLE001 - everything must reach the kubelet
        message = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, FileNotFoundError) and exc.filename is None:
            message = f'exec: "{spec["argv"][0]}": executable file not found in $PATH'
        elif isinstance(exc, FileNotFoundError | PermissionError):
            message = f'exec: "{spec["argv"][0]}": {exc.strerror}'
        os.write(errpipe_w, message.encode()[:4000])
    os._exit(127)


def enter_namespaces(spec: dict) -> None:
    if spec.get("netns_path"):  # None: hostNetwork
        fd = os.open(spec["netns_path"], os.O_RDONLY)
        check_call(libc.setns(fd, CLONE_NEWNET), "setns net")
        os.close(fd)
    check_call(libc.unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID), "unshare")


def relay_output(log: LogWriter, out_r: int, err_r: int) -> None:
    poller = select.poll()
    streams = {out_r: "stdout", err_r: "stderr"}
    for fd in streams:
        poller.register(fd, select.POLLIN)
    while streams:
        for fd, _ in poller.poll():
            data = os.read(fd, 65536)
            if data:
                log.feed(streams[fd], data)
            else:
                log.flush_stream(streams[fd])
                poller.unregister(fd)
                os.close(fd)
                del streams[fd]


def read_oom_kills(cgroups: list[str]) -> int:
    for path in cgroups:
        if "/memory/" in path:
            try:
                with open(os.path.join(path, "memory.oom_control")) as f:
                    for line in f:
                        if line.startswith("oom_kill "):
                            return int(line.split()[1])
            except OSError:
                return 0
    return 0


def write_record_atomically(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        marshal.dump(data, f)
    os.replace(tmp, path)


def report(line: str) -> None:
    try:
        os.write(1, (line + "\n").encode())
    except OSError:
        pass  # the kubelet is gone; the exit record still tells the story


def main() -> int:
    with open(sys.argv[1], "rb") as f:
        spec = marshal.load(f)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    log = LogWriter(spec["log_path"], spec.get("log_max_bytes", 0), spec.get("log_max_files", 2))
    oom_before = read_oom_kills(spec["cgroups"])
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    errpipe_r, errpipe_w = os.pipe2(os.O_CLOEXEC)
    try:
        enter_namespaces(spec)
        pid = os.fork()
    except OSError as exc:
        report(f"FAILED {exc}")
        write_record_atomically(spec["exit_path"], {"startError": str(exc)})
        return 0
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        os.close(errpipe_r)
        run_child(spec, out_w, err_w, errpipe_w)
    os.close(out_w)
    os.close(err_w)
    os.close(errpipe_w)
    started_ns = time.time_ns()
    error = b""
    while True:
        chunk = os.read(errpipe_r, 4096)
        if not chunk:
            break
        error += chunk
    os.close(errpipe_r)
    if error:
        os.waitpid(pid, 0)
        message = error.decode(errors="replace")
        report(f"FAILED {message}")
        write_record_atomically(spec["exit_path"], {"startError": message})
        return 0
    report(f"STARTED {pid} {format_timestamp(started_ns)}")
    os.close(1)
    os.open("/dev/null", os.O_WRONLY)
    relay_output(log, out_r, err_r)
    _, status = os.waitpid(pid, 0)
    finished_ns = time.time_ns()
    record = {
        "startedAt": format_timestamp(started_ns),
        "finishedAt": format_timestamp(finished_ns),
        "oomKilled": read_oom_kills(spec["cgroups"]) > oom_before,
    }
    if os.WIFSIGNALED(status):
        record["signal"] = os.WTERMSIG(status)
        record["exitCode"] = 128 + os.WTERMSIG(status)
    else:
        record["exitCode"] = os.WEXITSTATUS(status)
    write_record_atomically(spec["exit_path"], record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
