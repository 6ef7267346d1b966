"""Counting the requests the API server answers, by verb and resource: a measurement aid.

Scale benchmarks ask "how many API requests does a 1,024-replica gang cost, and of which kind"
for every client at once (the product, the kubelets, the scheduler's watchers), which no single
client can count. A middleware classifies each authenticated request as kube-apiserver's
metrics do (verb LIST/GET/WATCH/CREATE/UPDATE/PATCH/DELETE/DELETECOLLECTION/CONNECT, resource,
subresource) and `GET /localkube/v1/requests` answers the counts since start, with the bearer
token like any request. The counts live in memory only.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

REQUESTS_PATH = "/localkube/v1/requests"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
WRITE_VERBS = {"POST": "CREATE", "PUT": "UPDATE", "PATCH": "PATCH"}


def classify_request(method: str, path: str, query: dict) -> tuple[str, str] | None:
    """(verb, resource[/subresource]) of a request under /api or /apis; None for others."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        rest = parts[3:]
    else:
        return None
    watch = bool(rest) and rest[0] == "watch"
    rest = rest[1:] if watch else rest
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]
    if not rest:
        return None
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    named = len(rest) >= 2
    watch = watch or str(query.get("watch", "")).lower() in ("true", "1")
    if method == "GET":
        verb = (
            "WATCH"
            if watch
            else ("CONNECT" if len(rest) >= 3 and rest[2] == "exec" else "GET" if named else "LIST")
        )
    elif method == "DELETE":
        verb = "DELETE" if named else "DELETECOLLECTION"
    else:
        verb = WRITE_VERBS.get(method, method)
    return verb, resource


class RequestCounts:
    def __init__(self) -> None:
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.started = time.time()

    def describe(self) -> dict:
        return {
            "since": self.started,
            "total": sum(self.counts.values()),
            "counts": {
                f"{verb} {resource}": n for (verb, resource), n in sorted(self.counts.items())
            },
        }


def build_counting_middleware(counts: RequestCounts) -> Callable:
    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        kind = classify_request(request.method, request.path, request.rel_url.query)
        if kind is not None:
            counts.counts[kind] += 1
        return await handler(request)

    return count


def request_count_routes(app: web.Application, counts: RequestCounts) -> None:
    async def show(_request: web.Request) -> web.Response:
        return web.json_response(counts.describe())

    app.router.add_get(REQUESTS_PATH, show)
