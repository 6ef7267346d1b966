"""state.json: what the kubelet records about a pod for the tools that outlive it.

`kubectl exec` (exec.py, enter.py), cleanup.py and a restarted kubelet
(recovery.py) find a pod's processes, environments, security profiles and
network namespace there, without asking the kubelet that wrote it. This module
holds how that file is built from a PodWorker's records and written.
"""

from __future__ import annotations

import os

from localkube.kubelet.runtime import ContainerRun, write_json_atomically
from localkube.kubelet.status import ContainerRecord


def build_pod_state(
    pod: dict,
    node: str,
    netns: str | None,
    pod_ip: str | None,
    records: dict[str, ContainerRecord],
    runs: dict[str, ContainerRun],
    container_env: dict[str, dict],
) -> dict:
    """The content of state.json; `container_env`: each started container's env,
    workingDir and security profile."""
    containers = {}
    for name, record in records.items():
        run = runs.get(name)
        env = container_env.get(name, {})
        containers[name] = {
            "pid": run.pid if run else None,
            "shimPid": run.shim_pid if run else None,
            "pidStart": run.pid_start if run else None,
            "shimStart": run.shim_start if run else None,
            "restartCount": record.restart_count,
            "env": env.get("env", {}),
            "workingDir": env.get("workingDir", "/"),
            "root": f"/proc/{run.pid}/root" if run and run.pid else None,
            "security": env.get("security"),
        }
    meta = pod["metadata"]
    return {
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
        "node": node,
        "netns": netns,
        "ip": pod_ip,
        "containers": containers,
    }


def write_pod_state(pod_dir: str, state: dict) -> None:
    os.makedirs(pod_dir, exist_ok=True)
    write_json_atomically(os.path.join(pod_dir, "state.json"), state)
