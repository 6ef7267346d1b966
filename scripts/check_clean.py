"""Check that `make down` left nothing of this checkout running or mounted.

    python scripts/check_clean.py [--checkout DIR] [--state-dir DIR]

Why this exists: the README promises that `make down` leaves no process,
network namespace or mount behind, and CI holds it to that after `make demo`.
A leftover is found from the outside, the way a user would look for it:

- processes: any process whose working directory, executable or command line
  lies under the checkout, or whose environment carries the Airflow instance
  marker of this state dir (scripts/airflow_server.py); PostgreSQL's server
  and backends work in their data dir, under the state dir or, for a state dir
  its user cannot enter, where <state>/postgres/location says; the caller's own
  ancestors (the shell running CI in the checkout) do not count;
- network namespaces: localkube's `lk-<h8>` and `lk-<h8>-*` of this state dir;
- cgroups: localkube's `localkube-<h8>` groups of this state dir;
- mounts: any mount point under the checkout or the state dir.

It exits 0 when nothing is left, else 1 after naming each leftover.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
AIRFLOW_MARKER = "TFJOB_AIRFLOW_INSTANCE"
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Leftover:
    kind: str
    what: str

    def describe(self) -> str:
        return f"{self.kind}: {self.what}"


def is_under(path: str, top: Path) -> bool:
    top_text = str(top)
    return path == top_text or path.startswith(top_text + os.sep)


def list_ancestors(pid: int) -> set[int]:
    """pid and every parent up to init."""
    found = set()
    while pid > 0 and pid not in found:
        found.add(pid)
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            break
        pid = int(fields[1])
    return found


def read_process(pid: int) -> tuple[str, str, list[str], list[str]]:
    """cwd, exe, argv and environment of a process ('' and [] where unreadable)."""
    proc = Path(f"/proc/{pid}")

    def link(name: str) -> str:
        try:
            return os.readlink(proc / name)
        except OSError:
            return ""

    def split(name: str) -> list[str]:
        try:
            return (proc / name).read_bytes().decode(errors="replace").split("\0")
        except OSError:
            return []

    return link("cwd"), link("exe"), split("cmdline"), split("environ")


def find_database_dir(state_dir: Path) -> Path | None:
    """PostgreSQL's cluster when it lives outside the state dir (scripts/postgres_server.py)."""
    try:
        return Path((state_dir / "postgres" / "location").read_text().strip())
    except FileNotFoundError:
        return None


def find_processes(checkout: Path, state_dir: Path) -> list[Leftover]:
    spared = list_ancestors(os.getpid())
    database_dir = find_database_dir(state_dir)
    marker = f"{AIRFLOW_MARKER}={state_dir / 'airflow'}"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in spared:
            continue
        pid = int(entry.name)
        cwd, exe, argv, environ = read_process(pid)
        if not argv or argv == [""]:  # a kernel thread or a zombie
            continue
        reasons = []
        if cwd and (
            is_under(cwd, checkout) or (database_dir is not None and is_under(cwd, database_dir))
        ):
            reasons.append(f"cwd {cwd}")
        if exe and is_under(exe, checkout):
            reasons.append(f"exe {exe}")
        if any(str(checkout) in arg for arg in argv):
            reasons.append("command line names the checkout")
        if marker in environ:
            reasons.append(f"Airflow instance {state_dir / 'airflow'}")
        if reasons:
            command = " ".join(argv)[:160]
            found.append(Leftover("process", f"pid {pid} ({'; '.join(reasons)}): {command}"))
    return found


def find_netns(state_dir: Path) -> list[Leftover]:
    from localkube.kubelet.network import cluster_netns_name

    prefix = cluster_netns_name(str(state_dir / "localkube"))
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in listed.splitlines() if line.strip()]
    return [
        Leftover("network namespace", name)
        for name in names
        if name == prefix or name.startswith(prefix + "-")
    ]


def find_cgroups(state_dir: Path) -> list[Leftover]:
    from localkube.kubelet.network import state_hash

    name = f"localkube-{state_hash(str(state_dir / 'localkube'))}"
    if not CGROUP_ROOT.is_dir():
        return []
    return [
        Leftover("cgroup", str(controller / name))
        for controller in sorted(CGROUP_ROOT.iterdir())
        if (controller / name).is_dir()
    ]


def find_mounts(tops: list[Path]) -> list[Leftover]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = line.split()[4].replace("\\040", " ")
        if any(is_under(mount_point, top) for top in tops):
            found.append(Leftover("mount", mount_point))
    return found


def find_leftovers(checkout: Path, state_dir: Path) -> list[Leftover]:
    """Everything of this checkout and state dir still running or mounted."""
    return (
        find_processes(checkout, state_dir)
        + find_netns(state_dir)
        + find_cgroups(state_dir)
        + find_mounts([checkout, state_dir])
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, default=REPO_ROOT)
    parser.add_argument("--state-dir", type=Path, help="default: CHECKOUT/.state")
    args = parser.parse_args(argv)
    checkout = args.checkout.resolve()
    state_dir = (args.state_dir or checkout / ".state").resolve()
    leftovers = find_leftovers(checkout, state_dir)
    for leftover in leftovers:
        print(f"left behind: {leftover.describe()}", file=sys.stderr)
    if leftovers:
        print(f"check_clean: {len(leftovers)} thing(s) of {checkout} left behind", file=sys.stderr)
        return 1
    print(f"check_clean: nothing of {checkout} left running or mounted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
