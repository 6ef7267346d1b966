"""A local cluster's lifecycle: up, down, status, blink, and the files it keeps in its state dir.

What `python -m localkube` (localkube/cli.py) and localkube/nodepower.py act on:
the credentials and kubeconfig, the API server and kubelet processes (their pids
in DIR/localkube.json), waiting until the API answers and the nodes are Ready,
and stopping all of it again. See localkube/cli.py for the commands and the
state dir's files.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from localkube.apiserver.app import load_nodes_file
from localkube.apiserver.nodelifecycle import DEFAULT_GRACE_PERIOD_S
from localkube.apiserver.outage import OUTAGE_PATH
from localkube.credentials import (
    ClusterCredentials,
    ensure_credentials,
    read_credentials,
)
from localkube.errors import LocalkubeError
from localkube.forwarding import Forward, forwards_of_cluster, merge_forwards
from localkube.logrotation import DEFAULT_LOG_ROTATION, LogRotation

DEFAULT_PORT = 6443
DEFAULT_STATE_DIR = ".state/localkube"
API_START_TIMEOUT_S = 30.0
NODES_READY_TIMEOUT_S = 60.0
KUBELET_STOP_TIMEOUT_S = 60.0
API_STOP_TIMEOUT_S = 10.0
POLL_S = 0.1
PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


class UpError(LocalkubeError):
    """localkube could not be started; the message says why and where the logs are."""


def kubeconfig_text(api_url: str, credentials: ClusterCredentials) -> str:
    ca_data = base64.b64encode(credentials.ca_pem.encode()).decode()
    # json.dumps quotes the token as a YAML double-quoted string: it can never read as a number.
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: localkube\n  cluster:\n    server: {api_url}\n"
        f"    certificate-authority-data: {ca_data}\n"
        f"users:\n- name: localkube\n  user:\n    token: {json.dumps(credentials.token)}\n"
        "contexts:\n- name: localkube\n  context:\n    cluster: localkube\n"
        "    user: localkube\n    namespace: default\n"
        "current-context: localkube\npreferences: {}\n"
    )


def write_atomically(path: Path, text: str) -> None:
    """Replace path with text; mode 0600 from the first byte (temporary file, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    tmp.replace(path)


def read_cluster_info(state_dir: Path) -> dict:
    try:
        return json.loads((state_dir / "localkube.json").read_text())
    except (OSError, ValueError):
        return {}


def is_alive(pid: int | None) -> bool:
    """True when pid runs a localkube process (a recycled pid of something else is not ours)."""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return b"localkube" in cmdline and stat.split(")", 1)[-1].split()[0] != "Z"


def all_pids(info: dict) -> list[int]:
    pids = info.get("pids") or {}
    return list((pids.get("kubelets") or {}).values()) + [pids.get("apiserver")]


def fetch_json(url: str, credentials: ClusterCredentials, timeout: float = 2.0) -> dict:
    request = urllib.request.Request(url, headers=credentials.auth_headers())
    with urllib.request.urlopen(
        request, timeout=timeout, context=credentials.ssl_context()
    ) as response:
        return json.loads(response.read())


def spawn(argv: list[str], log_path: Path) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_for_api(
    state_dir: Path, process: subprocess.Popen, credentials: ClusterCredentials
) -> int:
    deadline = time.monotonic() + API_START_TIMEOUT_S
    info_file = state_dir / "apiserver.json"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise UpError(
                f"the API server exited with code {process.returncode}; its log "
                f"({state_dir / 'apiserver.log'}) ends with:\n"
                f"{log_tail(state_dir / 'apiserver.log')}"
            )
        try:
            port = json.loads(info_file.read_text())["port"]
            fetch_json(f"{api_url_of(port)}/version", credentials)
            return port
        except urllib.error.HTTPError as error:
            if error.code == 401:
                raise UpError(
                    f"the API server on port {port} refused the token of "
                    f"{state_dir / 'token'} (401 Unauthorized): was the file replaced "
                    f"while it started? Run `down`, then `up` again"
                ) from None
            time.sleep(POLL_S)
        except (OSError, ValueError, KeyError, urllib.error.URLError):
            time.sleep(POLL_S)
    raise UpError(
        f"the API server did not answer /version within {API_START_TIMEOUT_S:.0f} s; "
        f"see {state_dir / 'apiserver.log'}"
    )


def api_url_of(port: int) -> str:
    return f"https://127.0.0.1:{port}"


def ready_nodes(api_url: str, credentials: ClusterCredentials) -> set[str]:
    ready = set()
    for node in fetch_json(f"{api_url}/api/v1/nodes", credentials).get("items", []):
        for condition in (node.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Ready" and condition.get("status") == "True":
                ready.add(node["metadata"]["name"])
    return ready


def kubelet_log_path(state_dir: Path, node: str) -> Path:
    if node in (read_cluster_info(state_dir).get("simulated_nodes") or []):
        return state_dir / "kubelet-simulated.log"
    return state_dir / f"kubelet-{node}.log"


class RunningPid:
    """A process started by an earlier `up` (not our child): poll() like a Popen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not is_alive(self.pid):
            self.returncode = -1
        return self.returncode


def wait_for_nodes(
    state_dir: Path,
    api_url: str,
    credentials: ClusterCredentials,
    kubelets: dict[str, subprocess.Popen | RunningPid],
) -> None:
    deadline = time.monotonic() + NODES_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        for name, process in kubelets.items():
            if process.poll() is not None:
                log = kubelet_log_path(state_dir, name)
                raise UpError(
                    f"the kubelet of node {name} exited with code "
                    f"{process.returncode}; its log ({log}) ends with:\n"
                    f"{log_tail(log)}"
                )
        try:
            if set(kubelets) <= ready_nodes(api_url, credentials):
                return
        except (OSError, ValueError, urllib.error.URLError):
            pass
        time.sleep(POLL_S)
    raise UpError(
        f"nodes {sorted(kubelets)} did not all report Ready within "
        f"{NODES_READY_TIMEOUT_S:.0f} s; see {state_dir}/kubelet-*.log"
    )


def up(
    state_dir: Path,
    nodes_file: str,
    port: int,
    forward: list[Forward | int],
    start_kubelets: bool = True,
    node_monitor_grace_period_s: float | None = None,
    log_rotation: LogRotation = DEFAULT_LOG_ROTATION,
) -> dict:
    """Start localkube in the background; returns the contents of DIR/localkube.json.

    `node_monitor_grace_period_s`: how long a node may go without a kubelet heartbeat before it
    and its pods are lost; None: 40 s, or never (0) without kubelets, where tests set the
    nodes' Ready condition by hand. `log_rotation`: how the kubelets rotate container logs
    (recorded there for them)."""
    if node_monitor_grace_period_s is None:
        node_monitor_grace_period_s = DEFAULT_GRACE_PERIOD_S if start_kubelets else 0.0
    forwards = merge_forwards([f if isinstance(f, Forward) else Forward(f) for f in forward])
    state_dir.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    state_dir.chmod(PRIVATE_DIR_MODE)
    credentials = ensure_credentials(state_dir)
    info = read_cluster_info(state_dir)
    recorded = [pid for pid in all_pids(info) if pid]
    if (
        recorded
        and all(is_alive(pid) for pid in recorded)
        and len(recorded) == 1 + (len(info.get("nodes") or []) if start_kubelets else 0)
    ):
        return info
    kubelet_pids = (info.get("pids") or {}).get("kubelets") or {}
    if (
        start_kubelets
        and (info.get("api_url") or "").startswith("https://")
        and kubelet_pids
        and set(kubelet_pids) == set(info.get("nodes") or [])
        and all(is_alive(pid) for pid in kubelet_pids.values())
    ):
        # Only the API server died: start a new one where the kubelets expect it; their pods
        # keep running and they report again on their next heartbeat. (Kubelets of a plain-HTTP
        # cluster from before authentication could not talk to it: those start afresh below.)
        return restart_api_server(state_dir, nodes_file, info, credentials)
    if recorded:
        # Part of an earlier cluster died (a crash): stop the rest and sweep, then start afresh.
        down(state_dir)
    node_entries = load_nodes_file(nodes_file)
    node_names = [entry["name"] for entry in node_entries]
    simulated = [entry["name"] for entry in node_entries if entry.get("simulated")]
    apiserver = start_api_server(state_dir, nodes_file, port, node_monitor_grace_period_s)
    try:
        actual_port = wait_for_api(state_dir, apiserver, credentials)
    except UpError:
        apiserver.kill()
        raise
    api_url = api_url_of(actual_port)
    forwards = forwards_of_cluster({"forwards": [f.to_json() for f in forwards]}, actual_port)
    info = {
        "api_url": api_url,
        "pids": {"apiserver": apiserver.pid, "kubelets": {}},
        "nodes": node_names,
        "forward_ports": [f.pod_port for f in forwards],
        "forwards": [f.to_json() for f in forwards],
        "kubeconfig": str(state_dir / "kubeconfig"),
        "node_monitor_grace_period": node_monitor_grace_period_s,
        "simulated_nodes": simulated,
        "container_logs": log_rotation.to_json(),
    }
    write_atomically(state_dir / "kubeconfig", kubeconfig_text(api_url, credentials))
    write_atomically(state_dir / "localkube.json", json.dumps(info, indent=2))
    if not start_kubelets:
        return info
    kubelets = {}
    for name in node_names:
        if name not in simulated:
            kubelets[name] = start_kubelet(state_dir, api_url, name)
    if simulated:
        # One process serves every simulated node: recorded as the kubelet of each of them.
        hollow = start_hollow_kubelet(state_dir, api_url, simulated)
        kubelets.update({name: hollow for name in simulated})
    info["pids"]["kubelets"] = {name: process.pid for name, process in kubelets.items()}
    write_atomically(state_dir / "localkube.json", json.dumps(info, indent=2))
    try:
        wait_for_nodes(state_dir, api_url, credentials, kubelets)
    except UpError:
        down(state_dir)
        raise
    return info


def start_api_server(
    state_dir: Path, nodes_file: str, port: int, node_monitor_grace_period_s: float
) -> subprocess.Popen:
    (state_dir / "apiserver.json").unlink(missing_ok=True)
    return spawn(
        [
            sys.executable,
            "-m",
            "localkube.apiserver",
            "--state-dir",
            str(state_dir),
            "--port",
            str(port),
            "--nodes",
            nodes_file,
            "--node-monitor-grace-period",
            f"{node_monitor_grace_period_s:g}",
        ],
        state_dir / "apiserver.log",
    )


def start_kubelet(state_dir: Path, api_url: str, node: str) -> subprocess.Popen:
    return spawn(
        [
            sys.executable,
            "-m",
            "localkube.kubelet",
            "--api",
            api_url,
            "--node",
            node,
            "--state-dir",
            str(state_dir),
        ],
        state_dir / f"kubelet-{node}.log",
    )


def start_hollow_kubelet(state_dir: Path, api_url: str, nodes: list[str]) -> subprocess.Popen:
    """The kubelet of the simulated nodes (localkube/hollow/): one process for all of them."""
    argv = [
        sys.executable,
        "-m",
        "localkube.hollow",
        "--api",
        api_url,
        "--state-dir",
        str(state_dir),
    ]
    for node in nodes:
        argv += ["--node", node]
    return spawn(argv, state_dir / "kubelet-simulated.log")


def restart_api_server(
    state_dir: Path, nodes_file: str, info: dict, credentials: ClusterCredentials
) -> dict:
    port = int(info["api_url"].rsplit(":", 1)[1])
    # A cluster from before the node lifecycle controller: the default it would have had.
    apiserver = start_api_server(
        state_dir, nodes_file, port, info.get("node_monitor_grace_period", DEFAULT_GRACE_PERIOD_S)
    )
    try:
        wait_for_api(state_dir, apiserver, credentials)
    except UpError:
        apiserver.kill()
        raise
    info["pids"]["apiserver"] = apiserver.pid
    write_atomically(state_dir / "kubeconfig", kubeconfig_text(info["api_url"], credentials))
    write_atomically(state_dir / "localkube.json", json.dumps(info, indent=2))
    wait_for_nodes(
        state_dir,
        info["api_url"],
        credentials,
        {name: RunningPid(pid) for name, pid in info["pids"]["kubelets"].items()},
    )
    return info


def _stop(pids: list[int], timeout: float) -> None:
    for pid in pids:
        if is_alive(pid):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(is_alive(p) for p in pids):
        time.sleep(POLL_S)
    for pid in pids:
        if is_alive(pid):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(is_alive(p) for p in pids):
        time.sleep(POLL_S)


def down(state_dir: Path) -> None:
    """Stop kubelets, then the API server; then sweep leftovers recorded by the kubelets."""
    info = read_cluster_info(state_dir)
    pids = info.get("pids") or {}
    _stop([p for p in (pids.get("kubelets") or {}).values() if p], KUBELET_STOP_TIMEOUT_S)
    if pids.get("apiserver"):
        _stop([pids["apiserver"]], API_STOP_TIMEOUT_S)
    try:
        from localkube.kubelet.cleanup import sweep
    except ImportError:
        sweep = None
    if sweep is not None:
        sweep(str(state_dir))
    if info:
        info["pids"] = {}
        write_atomically(state_dir / "localkube.json", json.dumps(info, indent=2))


def status(state_dir: Path) -> dict:
    info = read_cluster_info(state_dir)
    running = [p for p in all_pids(info) if is_alive(p)]
    return {
        "state_dir": str(state_dir),
        "api_url": info.get("api_url"),
        "running_pids": running,
        "up": bool(running),
    }


def blink(state_dir: Path, seconds: float) -> dict:
    """Make the running API server answer 503 for `seconds` (0: serve again); its answer."""
    api_url = read_cluster_info(state_dir).get("api_url")
    if not api_url:
        raise UpError(f"no running localkube in {state_dir} (no api_url in localkube.json)")
    credentials = read_credentials(state_dir)
    request = urllib.request.Request(
        api_url + OUTAGE_PATH,
        data=json.dumps({"seconds": seconds}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **credentials.auth_headers()},
    )
    with urllib.request.urlopen(request, timeout=10, context=credentials.ssl_context()) as response:
        return json.loads(response.read())
