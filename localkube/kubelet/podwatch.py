"""The node-pod watch loop that the kubelet and the hollow nodes' kubelet share.

List the pods bound to one node, then watch from the list's resourceVersion; relist
after 410 Gone (`RelistRequired`) and after any dropped connection, and before every
relist but the first PATCH the node's status again (the API server may have restarted
and reset the node to Unknown). What a listing and an event do to the node's pods is
the caller's (`relist`, `handle_event`); this module holds only the loop, once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import aiohttp

from localkube.kubelet.apiclient import ApiClient, ApiRequestError, RelistRequired

log = logging.getLogger(__name__)

RELIST_PAUSE_S = 0.5


async def follow_node_pods(
    api: ApiClient,
    node: str,
    relist: Callable[[], Awaitable[str]],
    handle_event: Callable[[str, dict], None],
    node_status: Callable[[], dict],
) -> None:
    """Forever: `relist()` (returns the listing's resourceVersion), then each watch event
    but bookmarks to `handle_event(type, pod)`."""
    resource_version = None
    listed = False
    while True:
        try:
            if resource_version is None:
                if listed:
                    await api.patch_node_status(node, node_status())
                resource_version = await relist()
                listed = True
            async for event in api.watch_node_pods(node, resource_version):
                obj = event.get("object") or {}
                resource_version = (obj.get("metadata") or {}).get(
                    "resourceVersion"
                ) or resource_version
                if event.get("type") == "BOOKMARK":
                    continue
                handle_event(event["type"], obj)
        except RelistRequired:
            resource_version = None
        except (TimeoutError, ApiRequestError, aiohttp.ClientError, ValueError, OSError) as exc:
            log.warning("node %s: pod watch interrupted: %s; relisting", node, exc)
            resource_version = None
            await asyncio.sleep(RELIST_PAUSE_S)
