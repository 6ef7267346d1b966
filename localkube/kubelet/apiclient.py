"""The kubelet's only door to the cluster: the Kubernetes HTTP API.

A thin aiohttp client with exactly the calls a kubelet makes: list+watch its
pods (and, for NetworkPolicies, every pod, namespace and policy), GET
configmaps/secrets, PATCH pod and node status (merge patch), POST
events, DELETE pods. Transient connection errors are retried; 404 on GET and
DELETE is an answer, not an error. It speaks HTTPS, trusting only the cluster
CA, and every request carries the cluster's bearer token (both read from the
state dir by the kubelet: localkube/credentials.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

import aiohttp

from localkube.credentials import ClusterCredentials
from localkube.kubelet.errors import KubeletError

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
RETRIES = 5
RETRY_DELAY_S = 0.2
WATCH_TIMEOUT_S = 300
# The final DELETE of a pod whose containers ended rides out an unavailable API server this long.
DELETE_PATIENCE_S = 600.0
DELETE_RETRY_MAX_DELAY_S = 5.0


class ApiRequestError(KubeletError):
    """The API server refused or failed one of the kubelet's requests (HTTP `status`)."""

    def __init__(self, status: int, body: str, what: str) -> None:
        hint = " (the API server refused the kubelet's token, DIR/token)" if status == 401 else ""
        super().__init__(f"{what}: HTTP {status}{hint}: {body[:500]}")
        self.status = status


class RelistRequired(KubeletError):
    """The watch's resourceVersion is too old (410 Gone): list the pods again."""


class ApiClient:
    def __init__(self, base_url: str, credentials: ClusterCredentials) -> None:
        self.base_url = base_url.rstrip("/")
        self.credentials = credentials
        self.session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        connector = aiohttp.TCPConnector(limit=32, ssl=self.credentials.ssl_context())
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
            headers=self.credentials.auth_headers(),
        )

    async def close(self) -> None:
        if self.session:
            await self.session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: dict | None = None,
        params: dict | None = None,
        content_type: str = "application/json",
        ok404: bool = False,
    ) -> dict | None:
        data = json.dumps(body) if body is not None else None
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        for attempt in range(RETRIES):
            try:
                async with self.session.request(
                    method,
                    self.base_url + path,
                    data=data,
                    params=params,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=30),
                ) as resp:
                    text = await resp.text()
                    if resp.status == 404 and ok404:
                        return None
                    if resp.status >= 500 and attempt < RETRIES - 1:
                        await asyncio.sleep(RETRY_DELAY_S * (attempt + 1))
                        continue
                    if resp.status >= 400:
                        raise ApiRequestError(resp.status, text, f"{method} {path}")
                    return json.loads(text) if text else {}
            except (TimeoutError, aiohttp.ClientConnectionError) as exc:
                if attempt == RETRIES - 1:
                    raise
                log.debug("retrying %s %s after %s", method, path, exc)
                await asyncio.sleep(RETRY_DELAY_S * (attempt + 1))
        return None

    async def get_object(self, kind: str, namespace: str, name: str) -> dict | None:
        return await self.request(
            "GET", f"/api/v1/namespaces/{namespace}/{kind}/{name}", ok404=True
        )

    async def list_node_pods(self, node: str) -> dict:
        return await self.request(
            "GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node}"}
        )

    async def watch_node_pods(self, node: str, resource_version: str) -> AsyncIterator[dict]:
        params = {"fieldSelector": f"spec.nodeName={node}"}
        async for event in self.watch_collection("/api/v1/pods", resource_version, params):
            yield event

    async def list_collection(self, path: str) -> dict:
        """One list of a collection (e.g. `/api/v1/namespaces`), every item in one page."""
        return await self.request("GET", path)

    async def watch_collection(
        self, path: str, resource_version: str, params: dict | None = None
    ) -> AsyncIterator[dict]:
        """The watch events of a collection from `resource_version` (bookmarks included);
        RelistRequired on 410 Gone."""
        params = {
            **(params or {}),
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_S),
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=WATCH_TIMEOUT_S + 30)
        async with self.session.get(self.base_url + path, params=params, timeout=timeout) as resp:
            if resp.status == 410:
                raise RelistRequired()
            if resp.status >= 400:
                raise ApiRequestError(resp.status, await resp.text(), f"watch {path}")
            buffer = b""
            async for chunk in resp.content.iter_any():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        if (event.get("object") or {}).get("code") == 410:
                            raise RelistRequired()
                        raise ApiRequestError(
                            (event.get("object") or {}).get("code", 500),
                            line.decode(),
                            f"watch {path}",
                        )
                    yield event

    async def patch_pod_status(self, namespace: str, name: str, status: dict) -> dict | None:
        return await self.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            body={"status": status},
            content_type=MERGE_PATCH,
            ok404=True,
        )

    async def delete_pod_now(self, namespace: str, name: str, uid: str) -> None:
        """Remove the pod object once its containers ended (the kubelet's last word on it).

        Asked again while the API server is unavailable (5xx, no connection), for up to
        DELETE_PATIENCE_S: a pod left behind would stay Terminating for ever."""
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DELETE_PATIENCE_S
        delay = RETRY_DELAY_S
        while True:
            try:
                await self.request(
                    "DELETE",
                    f"/api/v1/namespaces/{namespace}/pods/{name}",
                    body=body,
                    ok404=True,
                )
                return
            except ApiRequestError as exc:
                if exc.status == 409:  # a newer pod of the same name: ours is already gone
                    return
                if exc.status < 500 or loop.time() >= deadline:
                    raise
                failure: Exception = exc
            except (TimeoutError, aiohttp.ClientConnectionError) as exc:
                if loop.time() >= deadline:
                    raise
                failure = exc
            log.warning(
                "pod %s/%s not removed yet (%s); asking again in %.1fs",
                namespace,
                name,
                failure,
                delay,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, DELETE_RETRY_MAX_DELAY_S)

    async def patch_node_status(self, node: str, status: dict) -> dict | None:
        return await self.request(
            "PATCH",
            f"/api/v1/nodes/{node}/status",
            body={"status": status},
            content_type=MERGE_PATCH,
        )

    async def post_event(self, namespace: str, event: dict) -> None:
        try:
            await self.request("POST", f"/api/v1/namespaces/{namespace}/events", body=event)
        except (TimeoutError, ApiRequestError, aiohttp.ClientError) as exc:
            log.debug("event not recorded: %s", exc)
