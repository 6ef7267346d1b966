"""The kubelet of one node: node status, the pod watch, and one worker per pod.

It talks to the API server only over HTTP (list+watch of pods bound to the
node, GET configmaps/secrets, PATCH status, POST events, DELETE). On start it
settles what a previous kubelet of the node left (after a crash): a started
pod whose containers still live under their shims is re-adopted (it keeps
running and being reported); one that cannot be re-adopted is stopped and
reported Failed with reason NodeRestart; pods that never started start fresh. On SIGTERM it
kills every pod's processes and releases every resource before exiting.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import signal
from collections.abc import Coroutine
from typing import Any
from urllib.parse import urlparse

import aiohttp

from localkube.credentials import ClusterCredentials
from localkube.forwarding import forwards_of_cluster
from localkube.kubelet import cleanup, network
from localkube.kubelet.apiclient import ApiClient, ApiRequestError
from localkube.kubelet.images import load_image_rules
from localkube.kubelet.nodeagent import NodeAgent, NodeIdentity
from localkube.kubelet.podworker import PodWorker
from localkube.kubelet.policyenforcer import PolicyEnforcer
from localkube.kubelet.recovery import PodOrigin, settle_previous_pod
from localkube.kubelet.runtime import make_kubelet_dirs, pod_dir
from localkube.kubelet.status import PodPhase
from localkube.kubelet.volumes import VolumeError, refresh_object_volumes
from localkube.logrotation import log_rotation_of_cluster

log = logging.getLogger(__name__)

# How often running pods' configMap/secret volumes are brought up to date (a real
# kubelet: its sync period plus the object cache's TTL, about a minute).
VOLUME_SYNC_S = 5
PARALLEL_POD_STARTS = 8
# On shutdown, how long the container loops get to see their killed runs end.
LIFECYCLE_END_WAIT_S = 5
KUBELET_VERSION = "v1.30.0-localkube"


def read_cluster_file(state_dir: str) -> dict:
    try:
        with open(os.path.join(state_dir, "localkube.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def find_node_index(cluster: dict, node: str) -> int | None:
    for i, entry in enumerate(cluster.get("nodes") or [], start=1):
        name = entry.get("name") if isinstance(entry, dict) else entry
        if name == node:
            return i
    return None


class Kubelet(NodeAgent):
    """The node's kubelet: its reporting (nodeagent.py), one PodWorker per pod, volume sync,
    NetworkPolicies, and shutdown."""

    identity = NodeIdentity(
        kubelet_version=KUBELET_VERSION,
        runtime_version="localkube://0.1",
        os_image="localkube",
        ready_message="kubelet is posting ready status",
    )

    def __init__(
        self,
        api_url: str,
        credentials: ClusterCredentials,
        node: str,
        state_dir: str,
        node_index: int | None = None,
    ) -> None:
        self.api_url = api_url
        self.state_dir = os.path.abspath(state_dir)
        self.state_hash = network.state_hash(self.state_dir)
        cluster = read_cluster_file(self.state_dir)
        self.node_index = node_index or find_node_index(cluster, node) or 1
        super().__init__(
            ApiClient(api_url, credentials), node, network.node_gateway(self.node_index)
        )
        self.addresses = network.AddressPool(self.node_index)
        self.api_port = urlparse(api_url).port
        # Forwards (localkube/forwarding.py), not bare ports: a pod port may be relayed to
        # another host address and port.
        self.forward_ports = forwards_of_cluster(cluster, self.api_port)
        self.image_rules = load_image_rules()
        self.log_rotation = log_rotation_of_cluster(cluster)
        simulated = set(cluster.get("simulated_nodes") or [])
        self.policies = PolicyEnforcer(self.api, self.forward_ports, simulated.__contains__)
        self.workers: dict[str, PodWorker] = {}
        self.start_slots = asyncio.Semaphore(PARALLEL_POD_STARTS)
        self.initial_sync = True  # until the first list of the node's pods is reconciled
        self.deleted_uids: set[str] = set()  # pods this kubelet deleted: not to be restarted

    # ---- helpers used by pod workers ------------------------------------------
    async def get_object(self, kind: str, namespace: str, name: str) -> dict | None:
        return await self.api.get_object(kind, namespace, name)

    @staticmethod
    def age_of(timestamp: str) -> float:
        when = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
        return (datetime.datetime.now(datetime.UTC) - when).total_seconds()

    def forget(self, uid: str) -> None:
        if self.workers.pop(uid, None) is not None:
            self.deleted_uids.add(uid)

    # ---- node ------------------------------------------------------------------
    async def sync_object_volumes(self) -> None:
        """Carry changed ConfigMaps and Secrets into the running pods' volumes."""
        while True:
            await asyncio.sleep(VOLUME_SYNC_S)
            for worker in list(self.workers.values()):
                if not worker.sandbox.volume_paths:
                    continue
                try:
                    await refresh_object_volumes(
                        worker.pod, worker.sandbox.volume_paths, worker.ips(), self.get_object
                    )
                except (
                    OSError,
                    VolumeError,
                    TimeoutError,
                    ApiRequestError,
                    aiohttp.ClientError,
                ) as exc:
                    log.debug("volumes of pod %s not refreshed: %s", worker.name, exc)

    # ---- pods ------------------------------------------------------------------
    def classify(self, pod: dict) -> PodOrigin:
        status = pod.get("status") or {}
        if status.get("phase") in (PodPhase.SUCCEEDED.value, PodPhase.FAILED.value):
            return PodOrigin.FINISHED
        if status.get("startTime") or os.path.isdir(
            pod_dir(self.state_dir, pod["metadata"]["uid"])
        ):
            return PodOrigin.NODE_RESTART
        return PodOrigin.NEW

    def admit(self, pod: dict, origin: PodOrigin) -> None:
        worker = PodWorker(self, pod)
        self.workers[worker.uid] = worker
        if origin is PodOrigin.NEW:
            worker.start()
        else:
            worker.settle(settle_previous_pod(self, worker, origin))

    def handle_pod_event(self, kind: str, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if kind == "DELETED":
            if worker:
                worker.vanish()
            return
        if pod.get("spec", {}).get("nodeName") != self.node:
            return
        if worker:
            worker.update(pod)
        elif not self.is_finished_locally(pod):
            self.admit(pod, self.classify(pod) if self.initial_sync else PodOrigin.NEW)

    def is_finished_locally(self, pod: dict) -> bool:
        """A pod we already deleted may still echo through the watch: do not restart it."""
        return pod["metadata"]["uid"] in self.deleted_uids

    async def remove_orphan_dirs(self, live_uids: set[str]) -> None:
        root = os.path.join(self.state_dir, "kubelet", "pods")
        if not os.path.isdir(root):
            return
        for uid in os.listdir(root):
            if uid in live_uids:
                continue
            state = cleanup.read_state(os.path.join(root, uid, "state.json"))
            if state.get("node") == self.node:
                await asyncio.to_thread(cleanup.clean_pod_leftovers, self.state_dir, uid, True)

    async def sync_pods(self) -> str:
        """List the node's pods, reconcile workers with the list; returns its resourceVersion."""
        listing = await self.api.list_node_pods(self.node)
        pods = {p["metadata"]["uid"]: p for p in listing.get("items") or []}
        for uid, worker in list(self.workers.items()):
            if uid not in pods:
                worker.vanish()
        if self.initial_sync:
            await self.remove_orphan_dirs(set(pods))
        for pod in pods.values():
            pod.setdefault("metadata", {})
            self.handle_pod_event("ADDED", pod)
        self.initial_sync = False
        return listing.get("metadata", {}).get("resourceVersion") or "0"

    # ---- the whole kubelet -----------------------------------------------------
    async def prepare(self) -> None:
        make_kubelet_dirs(self.state_dir)
        await asyncio.to_thread(network.ensure_cluster_network, self.state_dir, self.node_index)

    def side_loops(self) -> tuple[Coroutine[Any, Any, None], ...]:
        return (self.sync_object_volumes(), self.policies.run())

    async def shutdown(self) -> None:
        """Kill every pod's processes and release their resources (pods stay in the API)."""
        workers = list(self.workers.values())
        for worker in workers:
            worker.stop_for_shutdown()
        for worker in workers:
            await worker.kill_everything()
        await asyncio.gather(*(w.await_lifecycle(LIFECYCLE_END_WAIT_S) for w in workers))
        for worker in workers:
            await worker.abandon()
        await asyncio.to_thread(self.release_leftovers, [w.uid for w in workers])

    def release_leftovers(self, uids: list[str]) -> None:
        for uid in uids:
            cleanup.clean_pod_leftovers(self.state_dir, uid, False)


def install_signal_handlers(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
