"""Before starting the embedded default: can it work here, and if not, why and what to do.

Why this exists: the services fail late and obscurely when the machine is not
ready for them (a kubelet that cannot create a network namespace, a server
whose port another program holds and whose log then says "Address already in
use"). These checks run first and cheaply, gather every problem at once, and
word each one for a person: what is wrong, who holds the port, what to do.

A port held by this state dir's own running service is not a problem: that is
the second `make demo`, which finds the services up and reuses them.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from scripts.background_server import LOOPBACK, is_alive, is_port_free  # noqa: E402

TCP_LISTEN = "0A"
S3_SERVICE = "S3 server"  # scripts/services.py's name of the S3 server's port


@dataclass(frozen=True)
class ServicePort:
    """A port one service of the embedded default listens on, and the option that changes it."""

    service: str
    port: int
    option: str


def check_root(uid: int) -> list[str]:
    if uid == 0:
        return []
    return [
        f"running as uid {uid}, not root: localkube runs every pod in its own network and "
        "mount namespaces and cgroups, which needs root. Run it as root (sudo make demo, "
        "sudo make up)."
    ]


def find_listener_pids(port: int) -> list[int]:
    """Processes with a listening TCP socket on port (from /proc; empty when unreadable)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        if inodes & {read_link(fd) for fd in fds}:
            found.append(int(entry.name))
    return sorted(found)


def read_link(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:  # the descriptor closed meanwhile
        return ""


def describe_process(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        argv = "?"
    return f"pid {pid} ({' '.join(argv.split())[:120]})"


def check_port(wanted: ServicePort, host: str = LOOPBACK) -> list[str]:
    if is_port_free(wanted.port, host):
        return []
    holders = find_listener_pids(wanted.port)
    who = ", ".join(describe_process(pid) for pid in holders) or "another process"
    return [
        f"port {wanted.port} ({wanted.service}) on {host} is taken by {who}. Stop that "
        f"program (if it is the demo of another checkout: `make down` there; "
        f"`ss -ltnp 'sport = :{wanted.port}'` shows the holder), or start the services on "
        f"another port: python scripts/services.py up {wanted.option} PORT"
    ]


def find_running_services(state_dir: Path) -> set[str]:
    """Services of this state dir whose port is theirs to check: recorded and alive, or
    for Airflow, recorded at all."""
    running = set()
    s3_ready = read_json(state_dir / "s3" / "ready.json")
    if s3_ready.get("pid") and is_alive(s3_ready["pid"]):
        running.add("S3 server")
    cluster = read_json(state_dir / "localkube" / "localkube.json")
    apiserver = (cluster.get("pids") or {}).get("apiserver")
    if apiserver and is_alive(apiserver):
        running.add("localkube")
    try:
        airflow_pid = int((state_dir / "airflow" / "airflow.pid").read_text().strip())
    except (OSError, ValueError):
        airflow_pid = 0
    if airflow_pid:
        # Alive, or crashed: start_airflow ends an earlier instance's processes and
        # checks the port itself once they are gone (a killed server holds its port
        # until it has finished exiting).
        running.add("Airflow")
    return running


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def check_postgres_installed() -> list[str]:
    """Airflow's database server (scripts/postgres_server.py) and the user it runs as."""
    from scripts import postgres_server

    try:
        postgres_server.find_bin_dir()
        postgres_server.find_server_user()
    except postgres_server.PostgresError as error:
        return [str(error)]
    return []


def check_nft_installed() -> list[str]:
    """nftables, with which localkube's kubelets enforce NetworkPolicies (every tenant has one)."""
    if shutil.which("nft"):
        return []
    return [
        "nft (nftables) not found: localkube enforces NetworkPolicies with it, and pods of a "
        "namespace with a policy (every tenant's) do not start without it. Install it: "
        "apt-get install nftables (make setup does)."
    ]


def check_s3_port_allowed(ports: list[ServicePort]) -> list[str]:
    """The tenants' NetworkPolicies allow egress to `network.s3_port` only (localkube enforces
    them): an S3 server on another port would be out of every training pod's reach."""
    from tfjob.errors import TfjobError
    from tfjob.tenants import TENANTS_FILE_ENV, load_tenants

    s3 = next((p for p in ports if p.service == S3_SERVICE and p.port != 0), None)
    if s3 is None:
        return []
    try:
        allowed = load_tenants().network.s3_port
    except TfjobError:
        return []  # the tenants file's own check names what is wrong with it
    if s3.port == allowed:
        return []
    return [
        f"the S3 server's port {s3.port} ({s3.option}) is not the tenants file's network.s3_port "
        f"{allowed}: the tenants' NetworkPolicies would keep every training pod from S3. "
        f"Use {s3.option} {allowed}, or a tenants file ({TENANTS_FILE_ENV}) naming {s3.port}."
    ]


def find_problems(state_dir: Path, ports: list[ServicePort], uid: int) -> list[str]:
    """Every reason the services cannot start here; empty when they can."""
    problems = check_root(uid) + check_postgres_installed() + check_nft_installed()
    running = find_running_services(state_dir)
    problems += check_s3_port_allowed([p for p in ports if p.service not in running])
    for wanted in ports:
        if wanted.service not in running and wanted.port != 0:
            problems += check_port(wanted)
    return problems
