"""What a process tree holds, read from /proc: resident memory and open TCP connections to a port.

Why this exists: the concurrent-jobs scale bench (bench_concurrent_scale.py) asks how many
streams Airflow's triggerer holds open to the Kubernetes API server (one watch per run, or one
per pod, plus log streams) and how much memory it and the API server take, while 100 jobs run.
No client counts its own open connections, so they are read from the outside: the socket inodes
among a process's file descriptors, matched with the ESTABLISHED entries of /proc/<pid>/net/tcp
whose remote (or local) port is the API server's.
"""

from __future__ import annotations

import os
from pathlib import Path

ESTABLISHED = "01"


def read_parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def read_cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def list_descendants(root: int) -> list[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = read_parent(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def find_process(root: int, word: str) -> int | None:
    """The topmost process under `root` whose command line holds `word` (e.g. the triggerer)."""
    tree = list_descendants(root)
    matches = [pid for pid in tree if word in read_cmdline(pid)]
    tops = [pid for pid in matches if read_parent(pid) not in matches]
    return min(tops) if tops else None


def read_rss_kib(pids: list[int]) -> int:
    """VmRSS summed over `pids` (those gone meanwhile count 0)."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def count_connections(pids: list[int], port: int, remote: bool = True) -> int:
    """ESTABLISHED TCP connections of `pids` whose remote (`remote`) or local port is `port`."""
    total = 0
    for pid in pids:
        inodes = socket_inodes(pid)
        if not inodes:
            continue
        for table in ("tcp", "tcp6"):
            try:
                lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                address = fields[2] if remote else fields[1]
                if (
                    fields[3] == ESTABLISHED
                    and fields[9] in inodes
                    and int(address.rsplit(":", 1)[1], 16) == port
                ):
                    total += 1
    return total
