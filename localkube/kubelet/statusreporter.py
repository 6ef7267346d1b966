"""Sending one pod's status to the API server: a PATCH whenever it changed.

The PodWorker only marks its status dirty; the reporter's loop coalesces
bursts of changes into one PATCH and retries a PATCH that did not get through.
Kept apart because it has its own state (dirty, enabled) and task, and knows
nothing of containers: `build_status` computes what is sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from localkube.kubelet.apiclient import ApiClient

log = logging.getLogger(__name__)

STATUS_RETRY_S = 1.0
COALESCE_S = 0.01


class PodStatusReporter:
    """PATCHes the status `build_status` returns; calls `on_gone` when the pod is gone."""

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        name: str,
        build_status: Callable[[], dict],
        on_gone: Callable[[], None],
    ) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.build_status, self.on_gone = build_status, on_gone
        self.enabled = True  # False: nothing more is sent (the pod is gone or being removed)
        self.dirty = asyncio.Event()

    def mark_dirty(self) -> None:
        self.dirty.set()

    def disable(self) -> None:
        """Send nothing more (the pod is gone, or the worker is done with it)."""
        self.enabled = False

    async def run(self) -> None:
        while True:
            await self.dirty.wait()
            await asyncio.sleep(COALESCE_S)  # coalesce bursts of changes into one PATCH
            self.dirty.clear()
            if not await self.send():
                await asyncio.sleep(STATUS_RETRY_S)
                self.mark_dirty()

    async def send(self) -> bool:
        """PATCH the current status; False when it did not get through (retry later)."""
        if not self.enabled:
            return True
        try:
            status = self.build_status()
            result = await self.api.patch_pod_status(self.namespace, self.name, status)
            if result is None:
                self.on_gone()
            return True
        except Exception as exc:  # noqa: BLE001 - the status loop retries
            log.warning("pod %s/%s: status update failed: %s", self.namespace, self.name, exc)
            return False

    async def flush(self) -> None:
        """Send now (whatever is pending goes with it); on failure the loop tries again, so a
        container's last status is not lost to an API server that was down for a moment."""
        self.dirty.clear()
        if not await self.send():
            self.mark_dirty()
