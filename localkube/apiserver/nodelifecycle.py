"""The node lifecycle controller: a node whose kubelet stops posting status is lost, and so are
its pods, as kube-controller-manager's node lifecycle controller decides.

Why: a kubelet that dies (a power-off: `python -m localkube node-stop`) can report nothing, so
without this its pods would read Running forever and clients waiting on them would wait too.
What it guarantees, checked every NODE_MONITOR_PERIOD_S:

- A heartbeat is a write that leaves a node's Ready condition True and changes it (the kubelet's
  status PATCH carries a new lastHeartbeatTime every 10 s). The time is this process's own clock
  when it saw the write (kube-controller-manager's probe timestamp), so clocks never disagree.
- When a node's last heartbeat (or this controller's start) is more than the grace period
  (`--node-monitor-grace-period`, 40 s by default) ago: Ready becomes Unknown, reason
  NodeStatusUnknown, "Kubelet stopped posting node status."; the node gets the taints
  `node.kubernetes.io/unreachable` NoSchedule and NoExecute; every pod bound to it that has
  not ended becomes Failed, reason NodeLost, "Node <node> which was running pod <pod> is
  unresponsive", its containers terminated (reason NodeLost, exit code 137), a MODIFIED event.
  The scheduler binds nothing to a node that is not Ready, and a pod on it is deleted at once
  (operations.py), as nothing is left to kill its processes.
- When the kubelet reports Ready again, the taints go; the pods stay Failed.
- An outage (the test switch, outage.py) keeps heartbeats out without any node being at fault:
  silence is counted only from its end, as it is from this controller's start (an API server
  restart), so kubelets get a whole grace period to report again.

Not faithful: Kubernetes (since 1.5) only marks such pods not Ready and leaves their eviction
to the NoExecute taint (tolerationSeconds, 300 s by default); localkube fails them at once,
which is what earlier Kubernetes did and what a test of lost replicas needs.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable

from localkube.apiserver.admission import TERMINAL_PHASES
from localkube.apiserver.defaults import now_rfc3339
from localkube.apiserver.errors import ApiError
from localkube.apiserver.store import WatchEvent

log = logging.getLogger("localkube.apiserver.nodelifecycle")

# kube-controller-manager's default --node-monitor-grace-period.
DEFAULT_GRACE_PERIOD_S = 40.0
# How often nodes are checked (kube-controller-manager's --node-monitor-period is 5 s; a
# shorter one keeps tests short and costs a scan of nodes and pods).
NODE_MONITOR_PERIOD_S = 1.0
UNREACHABLE_TAINT_KEY = "node.kubernetes.io/unreachable"
UNREACHABLE_EFFECTS = ("NoSchedule", "NoExecute")
NODE_LOST_REASON = "NodeLost"
NODE_LOST_EXIT_CODE = 137


def ready_condition(node: dict | None) -> dict | None:
    for condition in ((node or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition
    return None


def is_heartbeat(event: WatchEvent) -> bool:
    """A node write that leaves Ready True and changes it: the kubelet reported."""
    if event.resource != "nodes" or event.type == "DELETED":
        return False
    ready = ready_condition(event.obj)
    return bool(ready) and ready.get("status") == "True" and ready != ready_condition(event.old)


def has_unreachable_taint(node: dict) -> bool:
    return any(
        t.get("key") == UNREACHABLE_TAINT_KEY for t in (node.get("spec") or {}).get("taints") or []
    )


def unreachable_taints() -> list[dict]:
    stamp = now_rfc3339()
    return [
        {"key": UNREACHABLE_TAINT_KEY, "effect": effect, "timeAdded": stamp}
        for effect in UNREACHABLE_EFFECTS
    ]


def lost_node_status(node: dict) -> dict:
    """The node's status with Ready Unknown (its last heartbeat time kept)."""
    status = copy.deepcopy(node.get("status") or {})
    stamp = now_rfc3339()
    conditions = []
    for condition in status.get("conditions") or []:
        if condition.get("status") != "Unknown":
            condition = {**condition, "status": "Unknown", "lastTransitionTime": stamp}
        condition.update(reason="NodeStatusUnknown", message="Kubelet stopped posting node status.")
        conditions.append(condition)
    if not any(c.get("type") == "Ready" for c in conditions):
        conditions.append(
            {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
        )
    status["conditions"] = conditions
    return status


def lost_pod_status(pod: dict, node_name: str) -> dict:
    """Failed, NodeLost; containers that had not ended are terminated with exit code 137."""
    status = copy.deepcopy(pod.get("status") or {})
    stamp = now_rfc3339()
    message = f"Node {node_name} which was running pod {pod['metadata']['name']} is unresponsive"
    status.update(phase="Failed", reason=NODE_LOST_REASON, message=message)
    for key in ("containerStatuses", "initContainerStatuses"):
        for container in status.get(key) or []:
            state = container.get("state") or {}
            if state.get("terminated"):
                continue
            container["state"] = {
                "terminated": {
                    "exitCode": NODE_LOST_EXIT_CODE,
                    "reason": NODE_LOST_REASON,
                    "message": message,
                    "startedAt": (state.get("running") or {}).get("startedAt"),
                    "finishedAt": stamp,
                    "containerID": container.get("containerID"),
                }
            }
            container["ready"] = False
            container["started"] = False
    conditions = []
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") in ("Ready", "ContainersReady")
            and condition.get("status") != "False"
        ):
            condition = {
                **condition,
                "status": "False",
                "reason": NODE_LOST_REASON,
                "lastTransitionTime": stamp,
            }
        conditions.append(condition)
    status["conditions"] = conditions
    return status


class NodeLifecycleController:
    """Marks nodes without heartbeats lost (and their pods); lifts the taints when they return."""

    def __init__(
        self,
        api,
        grace_period_s: float = DEFAULT_GRACE_PERIOD_S,
        paused: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # api: localkube.apiserver.operations.ObjectApi; paused: whether the outage switch
        # (outage.py) keeps the kubelets' heartbeats out now.
        self.api = api
        self.grace_period_s = grace_period_s
        self.paused = paused
        self.clock = clock
        # Silence is counted from the latest of a node's heartbeat, this controller's start
        # and the last moment of an outage.
        self.counting_since = clock()
        self.last_heartbeat: dict[str, float] = {}
        api.store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if is_heartbeat(event):
            self.last_heartbeat[event.obj["metadata"]["name"]] = self.clock()

    def check_nodes(self) -> None:
        now = self.clock()
        if self.paused():
            self.counting_since = now
            return
        for node in self.api.store.list("nodes"):
            name = node["metadata"]["name"]
            ready = ready_condition(node) or {}
            silent_s = now - max(self.last_heartbeat.get(name, 0.0), self.counting_since)
            if silent_s > self.grace_period_s:
                if ready.get("status") != "Unknown" or not has_unreachable_taint(node):
                    log.warning("node %s: no status for %.0f s; marking it lost", name, silent_s)
                    self._mark_lost(node)
                self._fail_pods(name)
            elif ready.get("status") == "True" and has_unreachable_taint(node):
                log.info("node %s: its kubelet reports Ready again; removing its taints", name)
                self._set_taints(node, [])

    def _mark_lost(self, node: dict) -> None:
        name = node["metadata"]["name"]
        if ready_condition(node) is None or ready_condition(node).get("status") != "Unknown":
            node = self.api.replace(
                "nodes", "", name, {**node, "status": lost_node_status(node)}, subresource="status"
            )
        if not has_unreachable_taint(node):
            self._set_taints(node, unreachable_taints())

    def _set_taints(self, node: dict, added: list[dict]) -> None:
        spec = copy.deepcopy(node.get("spec") or {})
        taints = [t for t in spec.get("taints") or [] if t.get("key") != UNREACHABLE_TAINT_KEY]
        taints += added
        if taints:
            spec["taints"] = taints
        else:
            spec.pop("taints", None)
        self.api.replace("nodes", "", node["metadata"]["name"], {**node, "spec": spec})

    def _fail_pods(self, node_name: str) -> None:
        for pod in self.api.store.list("pods"):
            if (pod.get("spec") or {}).get("nodeName") != node_name or (
                pod.get("status") or {}
            ).get("phase") in TERMINAL_PHASES:
                continue
            meta = pod["metadata"]
            try:
                self.api.replace(
                    "pods",
                    meta["namespace"],
                    meta["name"],
                    {**pod, "status": lost_pod_status(pod, node_name)},
                    subresource="status",
                )
            except ApiError as error:  # deleted meanwhile: nothing to mark
                log.info(
                    "pod %s/%s not marked lost: %s", meta["namespace"], meta["name"], error.message
                )

    async def run(self) -> None:
        while True:
            await asyncio.sleep(NODE_MONITOR_PERIOD_S)
            try:
                self.check_nodes()
            except Exception:  # keep watching the other nodes after a bad one
                log.exception("node lifecycle pass failed")
