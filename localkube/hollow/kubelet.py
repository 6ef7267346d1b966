"""The kubelet of every simulated node, in one process: `python -m localkube.hollow`.

`python -m localkube.hollow --api URL --state-dir DIR --node NAME [--node NAME ...]`. Per node
it does what a real kubelet does on the API (localkube/kubelet/apiclient.py, its own connection
pool): PATCH the node's status at start and every HEARTBEAT_S, list+watch the pods bound to the
node, PATCH each pod's status, POST events, DELETE a pod once its simulated containers ended.
Pods are HollowPod tasks (pod.py): no process, network namespace or cgroup is made. On SIGTERM
it stops reporting and removes its pods' directories; the pods stay in the API (the next start
finds them, as a restarted kubelet does, and fails the ones that had started: NodeRestart).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal

from localkube.credentials import read_credentials
from localkube.hollow.pod import HollowPod, PodOrigin
from localkube.kubelet.apiclient import ApiClient
from localkube.kubelet.network import AddressPool, node_gateway
from localkube.kubelet.nodeagent import NodeAgent, NodeIdentity

KUBELET_VERSION = "v1.30.0-localkube-hollow"


def find_node_index(state_dir: str, node: str) -> int:
    """The node's 1-based place in DIR/localkube.json's nodes (its pod range 10.77.i.0/24)."""
    try:
        with open(os.path.join(state_dir, "localkube.json")) as f:
            names = json.load(f).get("nodes") or []
    except (OSError, ValueError):
        names = []
    if node not in names:
        raise ValueError(
            f"--node: {node!r} given; the nodes of {state_dir}/localkube.json are {names}"
        )
    return names.index(node) + 1


class HollowNodeAgent(NodeAgent):
    """One simulated node: heartbeat, pod watch (nodeagent.py), a HollowPod per pod."""

    identity = NodeIdentity(
        kubelet_version=KUBELET_VERSION,
        runtime_version="localkube-hollow://0.1",
        os_image="localkube (simulated)",
        ready_message="kubelet is posting ready status (simulated node)",
    )

    def __init__(self, api_url: str, state_dir: str, node: str, node_index: int) -> None:
        api = ApiClient(api_url, read_credentials(state_dir))
        super().__init__(api, node, node_gateway(node_index))
        self.state_dir = state_dir
        self.addresses = AddressPool(node_index)
        self.pods: dict[str, HollowPod] = {}
        self.finished: set[str] = set()
        self.first_sync = True

    def forget(self, uid: str) -> None:
        if self.pods.pop(uid, None) is not None:
            self.finished.add(uid)

    def handle_pod_event(self, kind: str, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        hollow = self.pods.get(uid)
        if kind == "DELETED":
            if hollow:
                hollow.vanish()
            return
        if (pod.get("spec") or {}).get("nodeName") != self.node:
            return
        if hollow:
            hollow.update(pod)
        elif uid not in self.finished:
            self.admit(pod)

    def admit(self, pod: dict) -> None:
        status = pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            origin = PodOrigin.FINISHED
        elif self.first_sync and status.get("startTime"):
            origin = PodOrigin.LOST
        else:
            origin = PodOrigin.NEW
        hollow = HollowPod(self, pod, origin)
        self.pods[hollow.uid] = hollow
        if pod["metadata"].get("deletionTimestamp"):
            hollow.deletion.set()
        hollow.start()

    async def sync_pods(self) -> str:
        listing = await self.api.list_node_pods(self.node)
        pods = {p["metadata"]["uid"]: p for p in listing.get("items") or []}
        for uid, hollow in list(self.pods.items()):
            if uid not in pods:
                hollow.vanish()
        for pod in pods.values():
            self.handle_pod_event("ADDED", pod)
        self.first_sync = False
        return (listing.get("metadata") or {}).get("resourceVersion") or "0"

    async def shutdown(self) -> None:
        """Stop reporting; the pods stay in the API; their directories go."""
        for hollow in list(self.pods.values()):
            hollow.reporter.enabled = False
            if hollow.task:
                hollow.task.cancel()
        tasks = [h.task for h in self.pods.values() if h.task]
        await asyncio.gather(*tasks, return_exceptions=True)
        for hollow in list(self.pods.values()):
            shutil.rmtree(hollow.dir, ignore_errors=True)


async def run_nodes(api_url: str, state_dir: str, nodes: list[str]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    os.makedirs(os.path.join(state_dir, "kubelet", "pods"), mode=0o700, exist_ok=True)
    agents = [
        HollowNodeAgent(api_url, state_dir, node, find_node_index(state_dir, node))
        for node in nodes
    ]
    await asyncio.gather(*(agent.run(stop) for agent in agents))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m localkube.hollow", description="The kubelet of localkube's simulated nodes."
    )
    parser.add_argument("--api", required=True, help="the API server's https:// URL")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--node", action="append", required=True, help="a simulated node")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(run_nodes(args.api, os.path.abspath(args.state_dir), args.node))
    return 0
