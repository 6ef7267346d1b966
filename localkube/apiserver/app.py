"""Wiring of the API server process: store, verbs, routes, scheduler, garbage collector and node
lifecycle controller (`--node-monitor-grace-period SECONDS`, 0 turns it off).

`python -m localkube.apiserver --state-dir DIR --port P --nodes FILE` runs it in the foreground.
It serves HTTPS on 127.0.0.1:P (P=0 picks a free port) with the certificate of DIR/pki, writes
DIR/apiserver.json {"port", "pid"} once it serves, and flushes the store on SIGTERM/SIGINT.
Every request but the health checks must carry the bearer token of DIR/token; a test can make
it answer 503 for a while (localkube/apiserver/outage.py); it counts the requests it answers
(localkube/apiserver/requestcount.py). Token and
certificate are made here when `up` has not made them yet (localkube/credentials.py,
localkube/certificates.py; the check: localkube/apiserver/authentication.py).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import logging
import os
import re
import signal
import uuid
from pathlib import Path

import yaml
from aiohttp import web

from localkube.apiserver.authentication import build_authentication_middleware
from localkube.apiserver.defaults import now_rfc3339
from localkube.apiserver.discoveryroutes import discovery_routes
from localkube.apiserver.errors import ApiError
from localkube.apiserver.gc import GarbageCollector
from localkube.apiserver.nodelifecycle import DEFAULT_GRACE_PERIOD_S, NodeLifecycleController
from localkube.apiserver.operations import ObjectApi
from localkube.apiserver.outage import Outage, build_outage_middleware, outage_routes
from localkube.apiserver.requestcount import (
    RequestCounts,
    build_counting_middleware,
    request_count_routes,
)
from localkube.apiserver.resources import GROUP_RESOURCES
from localkube.apiserver.routes import MAX_BODY_BYTES, CoreHandlers, error_response
from localkube.apiserver.store import Store
from localkube.certificates import build_server_ssl_context, ensure_serving_files
from localkube.credentials import ensure_token
from localkube.scheduler import Scheduler

log = logging.getLogger("localkube.apiserver")
DEFAULT_NODES_FILE = str(Path(__file__).resolve().parent.parent / "nodes.yaml")
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public")
PRIVATE_DIR_MODE = 0o700
# Request line and header field limits: kube-apiserver (Go's net/http) accepts 1 MB of headers,
# and clients send long URLs (an exec's argv travels in its query: a ClusterSpec of a
# 1,024-replica gang is ~100 KB). aiohttp's default of 8190 bytes refused them.
MAX_REQUEST_LINE_BYTES = 1024 * 1024


def load_nodes_file(path: str) -> list[dict]:
    """Read the nodes file: a YAML list of {name, capacity, labels, taints, simulated}."""
    entries = yaml.safe_load(Path(path).read_text()) or []
    if not isinstance(entries, list):
        raise ValueError(
            f"nodes file {path}: expected a YAML list of nodes, got {type(entries).__name__}"
        )
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not entry.get("name"):
            raise ValueError(f"nodes file {path}: entry {index} needs a 'name'")
        if not isinstance(entry.get("simulated", False), bool):
            raise ValueError(
                f"nodes file {path}: node {entry['name']}: simulated: "
                f"{entry['simulated']!r} given; true or false is allowed"
            )
    return entries


def node_object(entry: dict) -> dict:
    name = entry["name"]
    capacity = {k: str(v) for k, v in (entry.get("capacity") or {}).items()}
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }
    labels.update({k: str(v) for k, v in (entry.get("labels") or {}).items()})
    spec = {}
    if entry.get("taints"):
        spec["taints"] = entry["taints"]
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "Unknown",
                    "reason": "NodeStatusNeverUpdated",
                    "message": "Kubelet never posted node status.",
                    "lastHeartbeatTime": now_rfc3339(),
                    "lastTransitionTime": now_rfc3339(),
                }
            ],
            "nodeInfo": node_info(name),
        },
    }


def node_info(name: str) -> dict:
    """Every field the clients require (the python client refuses a NodeSystemInfo without)."""
    uname = os.uname()
    return {
        "architecture": "amd64",
        "bootID": _read_first_line("/proc/sys/kernel/random/boot_id"),
        "containerRuntimeVersion": "localkube://1",
        "kernelVersion": uname.release,
        "kubeProxyVersion": "v1.30.0-localkube",
        "kubeletVersion": "v1.30.0-localkube",
        "machineID": _read_first_line("/etc/machine-id"),
        "operatingSystem": "linux",
        "osImage": "localkube",
        "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
    }


def _read_first_line(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def bootstrap_objects(api: ObjectApi, node_entries: list[dict]) -> None:
    """Namespaces, default service accounts and nodes from the nodes file; nodes found in the
    store from an earlier run get their Ready condition reset until their kubelet reports."""
    for namespace in INITIAL_NAMESPACES:
        if api.store.get("namespaces", "", namespace) is None:
            api.create("namespaces", "", {"metadata": {"name": namespace}})
    for entry in node_entries:
        fresh = node_object(entry)
        current = api.store.get("nodes", "", entry["name"])
        if current is None:
            api.create("nodes", "", fresh)
            continue
        node = copy.deepcopy(current)
        node["metadata"]["labels"] = {
            **(node["metadata"].get("labels") or {}),
            **fresh["metadata"]["labels"],
        }
        node["spec"] = {**(node.get("spec") or {}), **fresh["spec"]}
        if not fresh["spec"].get("taints"):
            node["spec"].pop("taints", None)
        status = node.setdefault("status", {})
        status["capacity"] = fresh["status"]["capacity"]
        status["allocatable"] = fresh["status"]["allocatable"]
        status["nodeInfo"] = fresh["status"]["nodeInfo"]
        status["conditions"] = [
            {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastHeartbeatTime": now_rfc3339(),
                "lastTransitionTime": now_rfc3339(),
            }
        ]
        node["metadata"].pop("resourceVersion", None)
        api.store.put("nodes", node)


@web.middleware
async def status_errors(request: web.Request, handler):
    try:
        return await handler(request)
    except ApiError as error:
        return error_response(error)
    except web.HTTPException as error:
        if error.status >= 400:
            return error_response(ApiError(error.status, error.reason, error.text or ""))
        raise


def build_app(
    state_dir: str,
    nodes_file: str = DEFAULT_NODES_FILE,
    address: str = "127.0.0.1:6443",
    node_monitor_grace_period_s: float = DEFAULT_GRACE_PERIOD_S,
) -> tuple[web.Application, ObjectApi]:
    """The app; `node_monitor_grace_period_s` 0 turns the node lifecycle controller off (nodes
    whose Ready condition a test sets by hand, with no kubelet heartbeats)."""
    Path(state_dir).mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    token = ensure_token(state_dir)
    store = Store(str(Path(state_dir) / "store.db"))
    api = ObjectApi(store)
    bootstrap_objects(api, load_nodes_file(nodes_file))
    store.flush()
    outage = Outage()
    counts = RequestCounts()
    # Authentication first: nothing, not even an error handler, runs for a stranger. Then the
    # test switch (outage.py): during an outage only the health checks and the switch answer.
    app = web.Application(
        middlewares=[
            build_authentication_middleware(token),
            build_counting_middleware(counts),
            build_outage_middleware(outage),
            status_errors,
        ],
        client_max_size=MAX_BODY_BYTES,  # routes.read_body answers 413 as kube-apiserver does
        handler_args={
            "max_line_size": MAX_REQUEST_LINE_BYTES,
            "max_field_size": MAX_REQUEST_LINE_BYTES,
        },
    )
    handlers = CoreHandlers(api, state_dir, outage)
    outage_routes(app, outage)
    request_count_routes(app, counts)
    # Group routes first: the catch-all /apis/{tail} of discovery_routes answers the rest (404).
    for group_version in GROUP_RESOURCES:
        group, version = (re.escape(part) for part in group_version.split("/"))
        app.router.add_route(
            "*", f"/apis/{{group:{group}}}/{{version:{version}}}/{{tail:.*}}", handlers.handle_core
        )
    discovery_routes(app, address)
    app.router.add_route("*", "/api/v1/{tail:.*}", handlers.handle_core)
    scheduler = Scheduler(api)
    collector = GarbageCollector(api)
    controllers = [scheduler, collector]
    if node_monitor_grace_period_s > 0:
        controllers.append(
            NodeLifecycleController(api, node_monitor_grace_period_s, paused=lambda: outage.active)
        )

    async def start_controllers(app: web.Application) -> None:
        app["tasks"] = [asyncio.ensure_future(controller.run()) for controller in controllers]

    async def stop_controllers(app: web.Application) -> None:
        for task in app["tasks"]:
            task.cancel()
        store.close()

    app.on_startup.append(start_controllers)
    app.on_cleanup.append(stop_controllers)
    return app, api


async def serve(
    state_dir: str,
    port: int,
    nodes_file: str,
    node_monitor_grace_period_s: float = DEFAULT_GRACE_PERIOD_S,
) -> None:
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    actual = sock.getsockname()[1]
    app, _api = build_app(state_dir, nodes_file, f"127.0.0.1:{actual}", node_monitor_grace_period_s)
    ssl_context = build_server_ssl_context(ensure_serving_files(state_dir))
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.SockSite(runner, sock, ssl_context=ssl_context)
    await site.start()
    info = Path(state_dir) / "apiserver.json"
    tmp = info.with_suffix(".tmp")
    tmp.write_text(json.dumps({"port": actual, "pid": os.getpid()}))
    tmp.replace(info)
    log.info("localkube API server on https://127.0.0.1:%d", actual)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localkube.apiserver")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--port", type=int, default=6443)
    parser.add_argument("--nodes", default=DEFAULT_NODES_FILE)
    parser.add_argument(
        "--node-monitor-grace-period",
        type=float,
        default=DEFAULT_GRACE_PERIOD_S,
        metavar="SECONDS",
        help="a node without a kubelet heartbeat for this long is lost, and so "
        "are its pods (0: never; localkube/apiserver/nodelifecycle.py)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(
        serve(
            os.path.abspath(args.state_dir), args.port, args.nodes, args.node_monitor_grace_period
        )
    )
    return 0
