"""Counting the Kubernetes API requests the product makes, from the client's side.

Why this exists: localkube keeps no request counter (its aiohttp access log is
off), and the figure the issue asks for is what *our* code costs the API
server, not what the kubelets cost it. Every request of the pipeline goes
through one of three doors of the Kubernetes clients: the sync REST client
(`kubernetes.client.rest.RESTClientObject.request`, also used by watches), its
WebSocket opener for exec (`kubernetes.stream.ws_client.create_websocket`), and
the async REST client of the triggerer (`kubernetes_asyncio`). `ApiCounter`
wraps those three in this process only, records (method, path, watch?) per
request and changes nothing else. A watch counts as one request however long
it stays open.
"""

from __future__ import annotations

import collections
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ApiCall:
    verb: str  # GET, POST, DELETE, WATCH, EXEC, ...
    path: str
    at: float = field(default=0.0, compare=False)  # perf_counter when sent


def classify_call(method: str, url: str, query_params: Any = None) -> ApiCall:
    """One request as (verb, path without query); watches and execs get their own verbs."""
    parsed = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parsed.query))
    for key, value in (
        (query_params or []) if not isinstance(query_params, dict) else query_params.items()
    ):
        query[str(key)] = str(value)
    verb = method.upper()
    if str(query.get("watch", "")).lower() in ("true", "1"):
        verb = "WATCH"
    if parsed.path.endswith("/exec"):
        verb = "EXEC"
    return ApiCall(verb, parsed.path)


def find_span(calls: list[ApiCall], verb: str, plural: str) -> tuple[float, float] | None:
    """(first, last) send time of the calls with this verb on this kind (`POST`, `pods`)."""
    times = [c.at for c in calls if c.verb == verb and c.path.rstrip("/").endswith(f"/{plural}")]
    return (min(times), max(times)) if times else None


def summarise_calls(calls: list[ApiCall]) -> dict[str, int]:
    """Counts per verb and per kind of object (`POST pods`, `WATCH pods`, `EXEC pods/exec`)."""
    counts: collections.Counter[str] = collections.Counter()
    for call in calls:
        parts = [p for p in call.path.split("/") if p]
        # /api/v1/namespaces/<ns>/<plural>[/<name>[/<sub>]]
        if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
            rest = parts[parts.index("namespaces") + 2 :]
            what = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
        else:
            what = parts[-1] if parts else "/"
        counts[f"{call.verb} {what}"] += 1
    return dict(sorted(counts.items()))


@dataclass
class ApiCounter:
    """Install once per process; `take()` returns and clears what was counted since."""

    calls: list[ApiCall] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, call: ApiCall) -> None:
        stamped = ApiCall(call.verb, call.path, time.perf_counter())
        with self.lock:
            self.calls.append(stamped)

    def take(self) -> list[ApiCall]:
        with self.lock:
            taken, self.calls = self.calls, []
        return taken

    def install(self) -> ApiCounter:
        from kubernetes.client import rest as sync_rest
        from kubernetes.stream import ws_client
        from kubernetes_asyncio.client import rest as async_rest

        counter = self
        sync_request = sync_rest.RESTClientObject.request
        async_request = async_rest.RESTClientObject.request
        create_websocket = ws_client.create_websocket

        def counted_sync(
            self: Any, method: str, url: str, query_params: Any = None, *args: Any, **kwargs: Any
        ) -> Any:
            counter.record(classify_call(method, url, query_params))
            return sync_request(self, method, url, query_params, *args, **kwargs)

        async def counted_async(
            self: Any, method: str, url: str, query_params: Any = None, *args: Any, **kwargs: Any
        ) -> Any:
            counter.record(classify_call(method, url, query_params))
            return await async_request(self, method, url, query_params, *args, **kwargs)

        def counted_websocket(configuration: Any, url: str, headers: Any = None) -> Any:
            counter.record(classify_call("GET", url))
            return create_websocket(configuration, url, headers)

        sync_rest.RESTClientObject.request = counted_sync
        async_rest.RESTClientObject.request = counted_async
        ws_client.create_websocket = counted_websocket
        return self
