"""Powering one node of a running cluster off and on: `node-stop` and `node-start`.

Why this exists: a real node can vanish (power, kernel, network) with its pods,
and what a control plane and its clients do then (the API server's node
lifecycle controller fails the pods with reason NodeLost, the scheduler places
new ones elsewhere) can only be tested if a node can be made to vanish. A stop
is a power-off: SIGKILL to the kubelet, then to every process of the pods it
ran; nothing is reported or cleaned up. A start runs the kubelet again, whose
recovery releases what the dead one left; `down` sweeps it in any case.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from localkube.cluster import (
    API_STOP_TIMEOUT_S,
    POLL_S,
    UpError,
    is_alive,
    read_cluster_info,
    start_kubelet,
    wait_for_nodes,
    write_atomically,
)
from localkube.credentials import read_credentials


def running_cluster(state_dir: Path, node: str) -> dict:
    """localkube.json of the running cluster that has `node`; UpError otherwise."""
    info = read_cluster_info(state_dir)
    if not info.get("api_url") or not is_alive((info.get("pids") or {}).get("apiserver")):
        raise UpError(f"no running localkube in {state_dir}: start it with `up`")
    if node not in (info.get("nodes") or []):
        raise UpError(
            f"node {node!r} given; this cluster's nodes are "
            f"{', '.join(info.get('nodes') or []) or 'none'}"
        )
    if node in (info.get("simulated_nodes") or []):
        raise UpError(
            f"node {node!r} is simulated (one process serves every simulated node): "
            f"only nodes with a kubelet of their own can be stopped and started"
        )
    return info


def node_stop(state_dir: Path, node: str) -> list[int]:
    """Power `node` off: SIGKILL its kubelet, then every process of the pods it ran (their
    shims and whatever is in their cgroups). Nothing is reported to the API server and nothing
    is cleaned up, as when a machine loses power. Returns the pids killed."""
    from localkube.kubelet.cgroups import kill_groups_below, pod_group_tops
    from localkube.kubelet.network import state_hash
    from localkube.kubelet.runtime import is_process_alive

    info = running_cluster(state_dir, node)
    kubelet_pids = info["pids"].setdefault("kubelets", {})
    killed = []
    kubelet = kubelet_pids.pop(node, None)
    if is_alive(kubelet):
        # First, and waited for: a live kubelet would report its containers' deaths.
        os.kill(kubelet, signal.SIGKILL)
        killed.append(kubelet)
        deadline = time.monotonic() + API_STOP_TIMEOUT_S
        while is_alive(kubelet) and time.monotonic() < deadline:
            time.sleep(POLL_S)
    write_atomically(state_dir / "localkube.json", json.dumps(info, indent=2))
    cluster_hash = state_hash(str(state_dir))
    for state_file in (state_dir / "kubelet" / "pods").glob("*/state.json"):
        try:
            pod_state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            continue
        if pod_state.get("node") != node:
            continue
        for container in (pod_state.get("containers") or {}).values():
            shim = container.get("shimPid")
            if is_process_alive(shim, start=container.get("shimStart")):
                os.kill(shim, signal.SIGKILL)
                killed.append(shim)
        for top in pod_group_tops(cluster_hash, state_file.parent.name):
            if os.path.isdir(top):
                killed.extend(pids_below(top))
                kill_groups_below(top)
    return killed


def pids_below(top: str) -> list[int]:
    from localkube.kubelet.cgroups import list_pids

    return [pid for dirpath, _dirs, _files in os.walk(top) for pid in list_pids(dirpath)]


def node_start(state_dir: Path, node: str) -> dict:
    """Start the kubelet of `node` again (after node-stop); returns once it reports Ready."""
    info = running_cluster(state_dir, node)
    kubelet_pids = info["pids"].setdefault("kubelets", {})
    if is_alive(kubelet_pids.get(node)):
        raise UpError(f"the kubelet of node {node} runs already (pid {kubelet_pids[node]})")
    kubelet = start_kubelet(state_dir, info["api_url"], node)
    kubelet_pids[node] = kubelet.pid
    write_atomically(state_dir / "localkube.json", json.dumps(info, indent=2))
    wait_for_nodes(state_dir, info["api_url"], read_credentials(state_dir), {node: kubelet})
    return info
