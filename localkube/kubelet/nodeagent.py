"""What every kubelet of localkube does for its node on the API, real or simulated.

The real kubelet (`agent.Kubelet`) and the hollow one (`localkube/hollow/kubelet.py`) differ in
what a pod is (processes under shims, or a simulated task); they report their node the same
way: its status at start and every HEARTBEAT_S, events POSTed a few at a time in the
background, and the list+watch of the pods bound to it (`podwatch.py`). That part is written
here once; a subclass says who it is (`NodeIdentity`) and what it does with the pods.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp

from localkube.kubelet.apiclient import ApiClient, ApiRequestError
from localkube.kubelet.podwatch import follow_node_pods
from localkube.kubelet.status import now_rfc3339

log = logging.getLogger(__name__)

HEARTBEAT_S = 10
PARALLEL_EVENTS = 8
# The node conditions a healthy kubelet reports, Ready last (its message is the kubelet's own).
PRESSURE_CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)


@dataclass(frozen=True)
class NodeIdentity:
    """What a node's status says of its kubelet."""

    kubelet_version: str
    runtime_version: str
    os_image: str
    ready_message: str


def build_event(
    pod: dict, node: str, kind: str, reason: str, message: str, container: str | None = None
) -> dict:
    """A kubelet's Event about `pod` (and one of its containers, when named)."""
    meta, now = pod["metadata"], now_rfc3339()
    involved = {
        "kind": "Pod",
        "apiVersion": "v1",
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
    }
    if container:
        involved["fieldPath"] = f"spec.containers{{{container}}}"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": "kubelet", "host": node},
        "reportingComponent": "kubelet",
        "reportingInstance": node,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def build_node_status(node: str, host_ip: str, identity: NodeIdentity, started_at: str) -> dict:
    """The node's status: healthy conditions, its addresses and its kubelet's identity."""
    now = now_rfc3339()
    conditions = [
        *((kind, "False", reason, message) for kind, reason, message in PRESSURE_CONDITIONS),
        ("Ready", "True", "KubeletReady", identity.ready_message),
    ]
    return {
        "conditions": [
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": started_at,
            }
            for kind, status, reason, message in conditions
        ],
        "addresses": [
            {"type": "InternalIP", "address": host_ip},
            {"type": "Hostname", "address": node},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": {
            "kubeletVersion": identity.kubelet_version,
            "kubeProxyVersion": identity.kubelet_version,
            "containerRuntimeVersion": identity.runtime_version,
            "operatingSystem": "linux",
            "architecture": "amd64",
            "osImage": identity.os_image,
            "kernelVersion": os.uname().release,
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
        },
    }


class NodeAgent:
    """A node's reporting on the API; subclasses handle the pods the watch brings."""

    identity: NodeIdentity

    def __init__(self, api: ApiClient, node: str, host_ip: str) -> None:
        self.api, self.node, self.host_ip = api, node, host_ip
        self.event_slots = asyncio.Semaphore(PARALLEL_EVENTS)
        self.background: set[asyncio.Task] = set()
        self.started_at = now_rfc3339()

    async def run(self, stop: asyncio.Event) -> None:
        """Report the node, watch its pods and beat its heart until `stop`, then shut down."""
        self.started_at = now_rfc3339()
        await self.api.open()
        try:
            await self.prepare()
            await self.api.patch_node_status(self.node, self.node_status())
            loops = (self.watch_pods(), self.heartbeat(), *self.side_loops())
            tasks = [asyncio.create_task(loop) for loop in loops]
            await stop.wait()
            for task in tasks:
                task.cancel()
            await self.shutdown()
        finally:
            await self.api.close()

    async def prepare(self) -> None:
        """What the node sets up before it reports itself Ready (nothing by default)."""

    def side_loops(self) -> tuple[Coroutine[Any, Any, None], ...]:
        """What else runs beside the pod watch and the heartbeat (nothing by default)."""
        return ()

    async def shutdown(self) -> None:
        raise NotImplementedError

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run `coro` in the background, held until it ends."""
        task = asyncio.create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def record_event(
        self, pod: dict, kind: str, reason: str, message: str, container: str | None = None
    ) -> None:
        namespace = pod["metadata"]["namespace"]
        event = build_event(pod, self.node, kind, reason, message, container)

        async def post() -> None:
            async with self.event_slots:
                await self.api.post_event(namespace, event)

        self.spawn(post())

    def node_status(self) -> dict:
        return build_node_status(self.node, self.host_ip, self.identity, self.started_at)

    async def heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await self.api.patch_node_status(self.node, self.node_status())
            except (TimeoutError, ApiRequestError, aiohttp.ClientError) as exc:
                log.warning("node %s: heartbeat failed: %s", self.node, exc)

    async def watch_pods(self) -> None:
        await follow_node_pods(
            self.api, self.node, self.sync_pods, self.handle_pod_event, self.node_status
        )

    async def sync_pods(self) -> str:
        """List the node's pods and reconcile with them; returns the list's resourceVersion."""
        raise NotImplementedError

    def handle_pod_event(self, kind: str, pod: dict) -> None:
        raise NotImplementedError
