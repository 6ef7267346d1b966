"""What a pod holds on the node besides its processes: its sandbox.

The network namespace and IP (or the node's, for hostNetwork), the port forwards
into the namespace, the volumes and the generated /etc files. A PodWorker sets
its sandbox up once (`open` and `mount`, or `adopt` after a kubelet restart),
reads it for every container run, and releases it once every process of the
pod is gone; it is kept apart so that setting up and tearing down the pod's
surroundings is one object's job and the worker keeps only the sequencing.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

from localkube.kubelet import network
from localkube.kubelet.status import PodRuntimeFacts
from localkube.kubelet.volumes import materialize_volumes, write_etc_files

if TYPE_CHECKING:
    from localkube.kubelet.podhost import PodHost


class PodSandbox:
    def __init__(self, host: PodHost, uid: str, pod_dir: str, facts: PodRuntimeFacts) -> None:
        self.host = host
        self.uid = uid
        self.dir = pod_dir
        self.facts = facts
        # empty until open()/mount() (or adopt()) set them up
        self.netns: str | None = None
        self.forwarder: network.PodPortForwarder | None = None
        self.volume_paths: dict[str, str] = {}
        self.etc_files: dict[str, str] = {}

    def ips(self) -> tuple[str | None, str]:
        return self.facts.pod_ip, self.facts.host_ip

    def netns_path(self) -> str | None:
        return os.path.join(network.NETNS_DIR, self.netns) if self.netns else None

    async def open(self, host_network: bool) -> None:
        """The pod's IP and, unless it uses the host's network, its namespace."""
        if host_network:
            self.facts.pod_ip = self.facts.host_ip  # like Kubernetes: the node's IP
            return
        ip = self.host.addresses.allocate()
        self.facts.pod_ip = ip
        self.netns = await asyncio.to_thread(
            network.setup_pod_network, self.host.state_dir, self.uid, ip
        )

    async def forward_ports(self) -> None:
        if self.host.forward_ports and self.netns:
            self.forwarder = network.PodPortForwarder(self.netns, self.host.forward_ports)
            await self.forwarder.start()

    async def mount(self, pod: dict) -> None:
        """Volumes and /etc files; raises VolumeError while a source is missing."""
        self.volume_paths = await materialize_volumes(
            pod, self.dir, self.ips(), self.host.get_object
        )
        self.etc_files = write_etc_files(pod, self.dir, self.facts.pod_ip)

    async def adopt(self, pod: dict, netns: str, pod_ip: str | None) -> None:
        """Take over the namespace and IP a previous kubelet set up (recovery.py)."""
        self.netns, self.facts.pod_ip = netns, pod_ip
        self.host.addresses.reserve(pod_ip)
        await self.mount(pod)
        await self.forward_ports()

    async def stop_forwarding(self) -> None:
        if self.forwarder:
            await self.forwarder.stop()

    async def release(self) -> None:
        """Port forwards, the namespace and the IP; only once every process is gone."""
        await self.stop_forwarding()
        # unconditional: a stop may have raced with the namespace's creation
        await asyncio.to_thread(network.teardown_pod_network, self.host.state_dir, self.uid)
        if self.netns:
            self.host.addresses.release(self.facts.pod_ip)
