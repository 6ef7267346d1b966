"""What a pod worker needs from the kubelet that runs it, as a Protocol.

podworker.py and recovery.py are typed against PodHost rather than
agent.Kubelet, so neither has to import the module that imports them: the
imports between agent.py, podworker.py and recovery.py run one way only.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from localkube.forwarding import Forward
from localkube.kubelet.apiclient import ApiClient
from localkube.kubelet.images import ImageRule
from localkube.kubelet.network import AddressPool
from localkube.kubelet.policyenforcer import PolicyEnforcer
from localkube.logrotation import LogRotation


class PodHost(Protocol):
    """The node-wide state and services a PodWorker uses (agent.Kubelet provides them)."""

    node: str
    state_dir: str
    state_hash: str
    host_ip: str
    api_port: int | None
    forward_ports: list[Forward]
    image_rules: list[ImageRule]
    log_rotation: LogRotation
    api: ApiClient
    addresses: AddressPool
    policies: PolicyEnforcer
    start_slots: asyncio.Semaphore

    async def get_object(self, kind: str, namespace: str, name: str) -> dict | None: ...

    def age_of(self, timestamp: str) -> float: ...

    def forget(self, uid: str) -> None: ...

    def record_event(
        self, pod: dict, kind: str, reason: str, message: str, container: str | None = None
    ) -> None: ...
