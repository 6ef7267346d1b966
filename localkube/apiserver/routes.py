"""The HTTP side of the REST API: URL parsing, query options, JSON in and out, watch streams.

Every path under /api/v1 goes through `handle_core`, which resolves the resource, namespace, name
and subresource, then calls the verbs in `operations`. Errors leave as v1 Status objects.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

from aiohttp import web

from localkube.apiserver import errors, logreader, podexec, podlogs, tables
from localkube.apiserver.errors import ApiError
from localkube.apiserver.operations import ObjectApi, parse_propagation
from localkube.apiserver.outage import Outage
from localkube.apiserver.resources import (
    CORE_GROUP_VERSION,
    RESOURCES,
    Resource,
    resource_for,
)
from localkube.apiserver.selectors import parse_field_selector, parse_label_selector
from localkube.apiserver.store import EventType, Watcher

log = logging.getLogger("localkube.api")
DEFAULT_WATCH_TIMEOUT_S = 1800
BOOKMARK_INTERVAL_S = 5.0
DISCONNECT_CHECK_S = 1.0
TRUE_VALUES = ("true", "True", "1")
# kube-apiserver's limit on a write's body (twice etcd's 1.5 MiB request limit, since JSON
# shrinks to protobuf there): larger bodies are refused before they are read whole.
MAX_BODY_BYTES = 3 * 1024 * 1024


@dataclass
class Target:
    resource: Resource
    namespace: str  # "" for cluster-scoped or all namespaces
    name: str | None
    subresource: str | None


def json_response(body: dict, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(body).encode(), status=status, content_type="application/json"
    )


def error_response(error: ApiError) -> web.Response:
    return json_response(error.to_status(), status=error.code)


def parse_target(parts: list[str], group_version: str = CORE_GROUP_VERSION) -> Target:
    """Resolve /api/v1/<parts> (or /apis/<group_version>/<parts>); 404 for what we do not serve."""

    def unknown() -> ApiError:
        return ApiError(404, "NotFound", "the server could not find the requested resource")

    if not parts:
        raise unknown()
    if parts[0] == "namespaces" and len(parts) >= 3 and parts[2] not in ("status", "finalize"):
        namespace, rest = parts[1], parts[2:]
        info = resource_for(rest[0], group_version)
        if info is None or not info.namespaced or len(rest) > 3:
            raise unknown()
        return Target(
            info, namespace, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
        )
    info = resource_for(parts[0], group_version)
    if info is None or len(parts) > 3:
        raise unknown()
    if info.namespaced and len(parts) > 1:
        raise unknown()
    target = Target(
        info, "", parts[1] if len(parts) > 1 else None, parts[2] if len(parts) > 2 else None
    )
    if target.subresource and target.subresource not in info.subresources:
        raise unknown()
    return target


def request_entity_too_large() -> ApiError:
    return ApiError(
        413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY_BYTES}"
    )


async def read_body(request: web.Request) -> bytes:
    """The body, refused (413) from its Content-Length before reading, or once a chunked
    body passes the limit while it is read: never more than the limit is held."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise request_entity_too_large()
    chunks, size = [], 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise request_entity_too_large()
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: web.Request):
    raw = await read_body(request)
    if not raw:
        return None
    try:
        if request.content_type.endswith("yaml"):
            import yaml

            return yaml.safe_load(raw)
        return json.loads(raw)
    except ValueError as error:
        raise errors.bad_request(f"the request body is not valid JSON: {error}") from None


class CoreHandlers:
    def __init__(self, api: ObjectApi, state_dir: str, outage: Outage | None = None) -> None:
        self.api = api
        self.store = api.store
        self.state_dir = state_dir
        self.outage = outage  # the test switch (outage.py): open watches end when it begins

    async def handle_core(self, request: web.Request) -> web.StreamResponse:
        try:
            parts = [p for p in request.match_info["tail"].split("/") if p]
            watch_path = bool(parts) and parts[0] == "watch"
            if watch_path:
                parts = parts[1:]
            group, version = request.match_info.get("group"), request.match_info.get("version")
            target = parse_target(parts, f"{group}/{version}" if group else CORE_GROUP_VERSION)
            return await self._dispatch(request, target, watch_path)
        except ApiError as error:
            return error_response(error)

    async def _dispatch(
        self, request: web.Request, target: Target, watch_path: bool
    ) -> web.StreamResponse:
        query = request.rel_url.query
        method = request.method
        resource = target.resource.plural
        dry_run = bool(query.get("dryRun"))
        if target.subresource == "log":
            return await self._serve_log(request, target)
        if target.subresource == "exec":
            pod = self.api.get("pods", target.namespace, target.name)
            return await podexec.serve_exec(request, pod, self.state_dir)
        if target.name is None:
            if method == "GET":
                if watch_path or query.get("watch") in TRUE_VALUES:
                    return await self._watch(request, target)
                return self._list(target, query, request.headers.get("Accept", ""))
            if method == "POST":
                body = await read_json(request)
                created = self.api.create(resource, target.namespace, body, dry_run)
                return json_response(created, 201)
            if method == "DELETE":
                return await self._delete_collection(request, target)
            raise errors.method_not_allowed()
        if target.subresource == "binding":
            if method != "POST":
                raise errors.method_not_allowed()
            self.api.bind(target.namespace, target.name, await read_json(request))
            return json_response(errors.status_object("Success", 201), 201)
        subresource = target.subresource
        if subresource == "finalize":
            subresource = None
        if method == "GET":
            if watch_path:
                return await self._watch(request, target)
            obj = self.api.get(resource, target.namespace, target.name)
            if tables.wants_table(request.headers.get("Accept", "")) and not subresource:
                return json_response(
                    tables.build_table(target.resource, [obj], obj["metadata"]["resourceVersion"])
                )
            return json_response(obj)
        if method == "PUT":
            body = await read_json(request)
            return json_response(
                self.api.replace(
                    resource, target.namespace, target.name, body, subresource, dry_run
                )
            )
        if method == "PATCH":
            body = await read_json(request)
            return json_response(
                self.api.patch(
                    resource,
                    target.namespace,
                    target.name,
                    request.headers.get("Content-Type", ""),
                    body,
                    subresource,
                    dry_run,
                )
            )
        if method == "DELETE":
            return await self._delete(request, target, dry_run)
        raise errors.method_not_allowed()

    def _list(self, target: Target, query, accept: str = "") -> web.Response:
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
        items = self.api.list(
            target.resource.plural,
            target.namespace if target.resource.namespaced and target.namespace else None,
            labels,
            fields,
        )
        if tables.wants_table(accept):
            return json_response(tables.build_table(target.resource, items, str(self.store.rv)))
        body = {
            "kind": f"{target.resource.kind}List",
            "apiVersion": target.resource.api_version,
            "metadata": {"resourceVersion": str(self.store.rv)},
            "items": items,
        }
        return json_response(body)

    async def _delete(self, request: web.Request, target: Target, dry_run: bool) -> web.Response:
        options = await read_json(request) or {}
        query = request.rel_url.query
        grace = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        if grace is not None:
            try:
                grace = int(grace)
            except ValueError:
                raise errors.bad_request(
                    f"gracePeriodSeconds={grace!r} is not an integer"
                ) from None
        propagation = parse_propagation(
            query.get("propagationPolicy", options.get("propagationPolicy"))
        )
        if propagation is None and options.get("orphanDependents") is True:
            propagation = parse_propagation("Orphan")
        resource = target.resource.plural
        result = self.api.delete(
            resource,
            target.namespace,
            target.name,
            grace,
            propagation,
            options.get("preconditions"),
            dry_run or bool(options.get("dryRun")),
        )
        if resource in ("pods", "namespaces") or result["metadata"].get("deletionTimestamp"):
            return json_response(result)
        return json_response(
            {
                **errors.status_object("Success"),
                "details": {
                    "name": target.name,
                    "kind": resource,
                    "uid": result["metadata"].get("uid"),
                },
            }
        )

    async def _delete_collection(self, request: web.Request, target: Target) -> web.Response:
        query = request.rel_url.query
        options = await read_json(request) or {}
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
        grace = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        resource = target.resource.plural
        items = self.api.list(resource, target.namespace or None, labels, fields)
        deleted = []
        for obj in items:
            meta = obj["metadata"]
            try:
                deleted.append(
                    self.api.delete(
                        resource,
                        meta.get("namespace", ""),
                        meta["name"],
                        None if grace is None else int(grace),
                    )
                )
            except ApiError as error:
                if error.code != 404:
                    raise
        return json_response(
            {
                "kind": f"{target.resource.kind}List",
                "apiVersion": target.resource.api_version,
                "metadata": {"resourceVersion": str(self.store.rv)},
                "items": deleted,
            }
        )

    async def _serve_log(self, request: web.Request, target: Target) -> web.StreamResponse:
        """The log, streamed a block at a time (logreader.py): a bounded request reads little
        more than it returns, and a long one is never held whole in memory."""
        pod = self.api.get("pods", target.namespace, target.name)
        options = podlogs.LogOptions(request.rel_url.query)
        container = podlogs.pick_container(pod, request.rel_url.query.get("container"))
        path = podlogs.log_file(self.state_dir, pod, container, options.previous)
        if path is None or (options.limit_bytes is not None and options.limit_bytes <= 0):
            return web.Response(body=b"", content_type="text/plain")
        namespace, name, uid = target.namespace, target.name, pod["metadata"]["uid"]
        restart = int(path.stem)

        def finished() -> bool:
            if options.previous:
                return True
            current = self.store.get("pods", namespace, name)
            if current is None or current["metadata"].get("uid") != uid:
                return True
            # A restarted container writes a new file: this stream is over, as on a kubelet.
            return podlogs.is_terminated(current, container) or podlogs.current_restart(
                self.state_dir, uid, container
            ) not in (None, restart)

        try:  # the kubelet swaps a rotated file out by rename: the path always names one
            handle = path.open("rb")
        except FileNotFoundError:  # the pod's files were removed since
            return web.Response(body=b"", content_type="text/plain")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        left = options.limit_bytes
        stream = logreader.stream_log(path, handle, options.window(), options.follow, finished)
        try:
            await response.prepare(request)
            async for chunk in stream:
                if left is not None:
                    chunk = chunk[:left]
                    left -= len(chunk)
                await response.write(chunk)
                if left == 0:
                    break
        except (ConnectionResetError, asyncio.CancelledError):
            return response
        finally:
            await stream.aclose()
            handle.close()
        await response.write_eof()
        return response

    async def _watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        query = request.rel_url.query
        info = target.resource
        watcher = Watcher(
            info.plural,
            target.namespace if info.namespaced and target.namespace else None,
            parse_label_selector(query.get("labelSelector")),
            parse_field_selector(query.get("fieldSelector")),
        )
        if target.name:
            watcher.fields = watcher.fields + (("metadata.name", "=", target.name),)
        try:
            timeout = float(query.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT_S)
        except ValueError:
            raise errors.bad_request(
                f"timeoutSeconds={query.get('timeoutSeconds')!r} is not a number"
            ) from None
        bookmarks = query.get("allowWatchBookmarks") in TRUE_VALUES
        since = query.get("resourceVersion") or ""
        expired = False
        # No await between reading the backlog and registering: nothing can slip between them.
        if since in ("", "0"):
            for obj in self.api.list(
                info.plural, watcher.namespace, watcher.labels, watcher.fields
            ):
                watcher.queue.put_nowait((EventType.ADDED, obj))
        else:
            try:
                backlog = self.store.events_since(int(since), info.plural)
            except ValueError:
                raise errors.bad_request(f"resourceVersion={since!r} is not valid") from None
            if backlog is None:
                expired = True
            else:
                for event in backlog:
                    watcher.offer(event)
        self.store.watchers.add(watcher)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)
            if expired:
                status = errors.gone(
                    f"too old resource version: {since} ({self.store.oldest_rv})"
                ).to_status()
                await response.write(
                    json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"
                )
                return response
            as_table = tables.wants_table(request.headers.get("Accept", ""))
            await self._stream_events(request, response, watcher, timeout, bookmarks, as_table)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.watchers.discard(watcher)
        return response

    async def _stream_events(
        self,
        request: web.Request,
        response: web.StreamResponse,
        watcher: Watcher,
        timeout: float,
        bookmarks: bool,
        as_table: bool = False,
    ) -> None:
        loop = asyncio.get_running_loop()
        info = RESOURCES[watcher.resource]
        columns_sent = False

        def line(event_type: EventType, obj: dict) -> str:
            nonlocal columns_sent
            if as_table:
                # As kube-apiserver: each event carries a one-row Table, columns only once.
                table = tables.build_table(info, [obj], obj["metadata"]["resourceVersion"])
                if columns_sent:
                    table["columnDefinitions"] = []
                columns_sent = True
                obj = table
            return json.dumps({"type": event_type.value, "object": obj})

        deadline = loop.time() + timeout
        last_bookmark = loop.time()
        kind = watcher.resource and RESOURCES[watcher.resource].kind
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0 or (self.outage is not None and self.outage.active):
                break
            try:
                kind_of_event, obj = await asyncio.wait_for(
                    watcher.queue.get(), min(remaining, DISCONNECT_CHECK_S)
                )
            except TimeoutError:
                transport = request.transport
                if transport is None or transport.is_closing():
                    return
                if bookmarks and loop.time() - last_bookmark >= BOOKMARK_INTERVAL_S:
                    last_bookmark = loop.time()
                    await response.write(
                        json.dumps(
                            {
                                "type": "BOOKMARK",
                                "object": {
                                    "kind": kind,
                                    "apiVersion": RESOURCES[watcher.resource].api_version,
                                    "metadata": {"resourceVersion": str(self.store.rv)},
                                },
                            }
                        ).encode()
                        + b"\n"
                    )
                continue
            lines = [line(kind_of_event, obj)]
            while not watcher.queue.empty():
                lines.append(line(*watcher.queue.get_nowait()))
            await response.write(("\n".join(lines) + "\n").encode())
        await response.write_eof()
