"""The scheduler: binds pending pods to nodes, as kube-scheduler would, inside the API server.

The decision is pure and lives in `localkube.placement`; `Scheduler` is the thin loop that
watches the store, binds, allocates GPU device ids (annotation `localkube.io/gpu-ids`) and
reports unschedulable pods with the real scheduler's wording
(`0/2 nodes are available: 2 Insufficient nvidia.com/gpu.`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from localkube.apiserver.defaults import new_uid, now_rfc3339
from localkube.apiserver.errors import ApiError
from localkube.apiserver.quantity import parse_quantity
from localkube.placement import GPU, choose_node, is_active, not_ready_reason, pod_requests

log = logging.getLogger("localkube.scheduler")
GPU_IDS_ANNOTATION = "localkube.io/gpu-ids"
RETRY_INTERVAL_S = 5.0


def allocate_gpu_ids(pod: dict, node: dict, pods_on_node: list[dict]) -> list[int]:
    """The lowest free device ids on the node for the pod's nvidia.com/gpu request."""
    wanted = int(pod_requests(pod)[GPU])
    if wanted <= 0:
        return []
    taken = set()
    for other in pods_on_node:
        if is_active(other):
            ids = (other["metadata"].get("annotations") or {}).get(GPU_IDS_ANNOTATION, "")
            taken.update(int(i) for i in ids.split(",") if i.strip().isdigit())
    capacity = int(parse_quantity(((node.get("status") or {}).get("capacity") or {}).get(GPU, "0")))
    free = [i for i in range(capacity) if i not in taken]
    return free[:wanted]


def is_pending(pod: dict) -> bool:
    return (
        not (pod.get("spec") or {}).get("nodeName")
        and not pod["metadata"].get("deletionTimestamp")
        and is_active(pod)
        and (pod.get("spec") or {}).get("schedulerName", "default-scheduler") == "default-scheduler"
    )


class Scheduler:
    """The loop: wakes on pod/node changes, binds what fits, reports what does not."""

    def __init__(self, api) -> None:  # api: localkube.apiserver.operations.ObjectApi
        self.api = api
        self.store = api.store
        self._wake = asyncio.Event()
        self._reported: dict[str, str] = {}  # pod uid -> last FailedScheduling message
        # (namespace, name) of the pending pods, kept from the store's events: a pass with
        # nothing pending must not walk every pod (a gang's start and teardown wake it per event).
        self._pending: set[tuple[str, str]] = {
            (p["metadata"].get("namespace", ""), p["metadata"]["name"])
            for p in self.store.list("pods")
            if is_pending(p)
        }
        self.store.listeners.append(self._on_event)

    def _on_event(self, event) -> None:
        if event.resource == "pods":
            key = (event.obj["metadata"].get("namespace", ""), event.obj["metadata"]["name"])
            if event.type != "DELETED" and is_pending(event.obj):
                self._pending.add(key)
            else:
                self._pending.discard(key)
        if event.resource == "nodes" or (
            event.resource == "pods"
            and (
                event.type != "MODIFIED"
                or is_pending(event.obj)
                or (event.old or {}).get("status", {}).get("phase")
                != event.obj.get("status", {}).get("phase")
            )
        ):
            self._wake.set()

    def schedule_pending(self) -> None:
        if not self._pending:
            return
        found = (self.store.get("pods", namespace, name) for namespace, name in self._pending)
        pending = sorted(
            (p for p in found if p is not None and is_pending(p)),
            key=lambda p: p["metadata"].get("creationTimestamp", ""),
        )
        if not pending:
            return
        every_node = sorted(self.store.list("nodes"), key=lambda n: n["metadata"]["name"])
        nodes = [n for n in every_node if self.api.node_ready(n["metadata"]["name"])]
        not_ready = Counter(not_ready_reason(n) for n in every_node if n not in nodes)
        pods_by_node: dict[str, list[dict]] = {n["metadata"]["name"]: [] for n in nodes}
        for pod in self.store.list("pods"):
            node = (pod.get("spec") or {}).get("nodeName")
            if node in pods_by_node:
                pods_by_node[node].append(pod)
        for pod in pending:
            decision = choose_node(pod, nodes, pods_by_node, not_ready)
            if decision.node is None:
                self._report_unschedulable(pod, decision.message)
                continue
            bound = self._bind(pod, decision.node, nodes, pods_by_node)
            if bound is not None:
                pods_by_node[decision.node].append(bound)

    def _bind(
        self, pod: dict, node_name: str, nodes: list[dict], pods_by_node: dict[str, list[dict]]
    ) -> dict | None:
        meta = pod["metadata"]
        node = next(n for n in nodes if n["metadata"]["name"] == node_name)
        annotations = {}
        gpu_ids = allocate_gpu_ids(pod, node, pods_by_node[node_name])
        if gpu_ids:
            annotations[GPU_IDS_ANNOTATION] = ",".join(str(i) for i in gpu_ids)
        try:
            bound = self.api.bind(
                meta["namespace"],
                meta["name"],
                {"target": {"kind": "Node", "name": node_name}},
                annotations,
            )
        except ApiError as error:
            log.info("binding %s/%s failed: %s", meta["namespace"], meta["name"], error.message)
            return None
        self._reported.pop(meta.get("uid", ""), None)
        self._record_event(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {meta['namespace']}/{meta['name']} to {node_name}",
        )
        return bound

    def _report_unschedulable(self, pod: dict, message: str) -> None:
        uid = pod["metadata"].get("uid", "")
        if self._reported.get(uid) == message:
            return
        self._reported[uid] = message
        meta = pod["metadata"]
        status = dict(pod.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(),
                "reason": "Unschedulable",
                "message": message,
            }
        )
        try:
            self.api.patch(
                "pods",
                meta["namespace"],
                meta["name"],
                "application/merge-patch+json",
                {"status": {"conditions": conditions}},
                subresource="status",
            )
        except ApiError:
            return
        self._record_event(pod, "Warning", "FailedScheduling", message)

    def _record_event(self, pod: dict, kind: str, reason: str, message: str) -> None:
        meta = pod["metadata"]
        stamp = now_rfc3339()
        event = {
            "metadata": {
                "name": f"{meta['name']}.{new_uid().replace('-', '')[:16]}",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta.get("uid"),
                "apiVersion": "v1",
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "default-scheduler"},
            "reportingComponent": "default-scheduler",
            "reportingInstance": "localkube",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.api.create("events", meta["namespace"], event)
        except ApiError as error:
            log.info("event for %s not recorded: %s", meta["name"], error.message)

    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), RETRY_INTERVAL_S)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                self.schedule_pending()
            except Exception:  # keep scheduling other pods after a bad one
                log.exception("scheduling pass failed")
