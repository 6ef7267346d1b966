"""NetworkPolicies enforced on the pods of one node, kept up to date as the cluster changes.

The kubelet's `PolicyEnforcer` lists and watches every pod, namespace and
NetworkPolicy (three list+watch loops, relisting after 410 Gone or a dropped
connection), keeping only what the rules need: peer pods (with an IP, not
finished, on a node with real networking: simulated nodes' pods are skipped)
reduced to their labels, ports, IP and phase; namespaces' labels; policies'
specs. A change that alters any of these marks the node dirty; the apply loop
waits DEBOUNCE_S (so a gang's hundred status updates cost one pass), computes
each local pod's table (policymodel.py, nftables.py) and runs `nft` only for
pods whose table text changed.

A new pod is secured before it runs anything: `secure()` waits until all three
lists have been read once, then installs the pod's table (or finds it needs
none) and only then returns to the pod worker, which starts the containers
after it. Until the enforcer knows a peer's IP the peer is not allowed (closed,
then opened). A pod adopted after a kubelet restart has its table rewritten,
whatever the previous kubelet left. Forgetting a pod only stops updating it: its
table goes with its network namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from localkube.forwarding import Forward
from localkube.kubelet.apiclient import ApiClient, ApiRequestError, RelistRequired
from localkube.kubelet.network import NetworkError
from localkube.kubelet.nftables import OPEN_SCRIPT, apply_pod_table, render_pod_table
from localkube.kubelet.policymodel import (
    ClusterView,
    DirectionRules,
    ForwardVerdict,
    PodRules,
    compute_pod_rules,
    is_peer_pod,
)

log = logging.getLogger(__name__)

# How long a change waits for others before the tables are computed again.
DEBOUNCE_S = 0.05
# After an `nft` that failed, when the pass is tried again.
APPLY_RETRY_S = 1.0
RELIST_PAUSE_S = 0.5
PARALLEL_APPLIES = 4

COLLECTIONS = {
    "pods": "/api/v1/pods",
    "namespaces": "/api/v1/namespaces",
    "policies": "/apis/networking.k8s.io/v1/networkpolicies",
}


def slim_pod(pod: dict) -> dict:
    """What the rules read of a pod (selectors, named ports, IP, phase)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    return {
        "metadata": {
            "uid": meta.get("uid"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "labels": dict(meta.get("labels") or {}),
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            "hostNetwork": bool(spec.get("hostNetwork")),
            "containers": [{"ports": c.get("ports") or []} for c in spec.get("containers") or []],
        },
        "status": {"podIP": status.get("podIP"), "phase": status.get("phase")},
    }


def slim_policy(policy: dict) -> dict:
    meta = policy.get("metadata") or {}
    return {
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "spec": policy.get("spec") or {},
    }


@dataclass
class EnforcedPod:
    """A pod of this node whose namespace holds (or needs) a table."""

    pod: dict
    netns: str
    applied: str | None  # the script in force; None: unknown (rewrite it)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class PolicyEnforcer:
    def __init__(
        self, api: ApiClient, forwards: list[Forward], is_simulated_node: Callable[[str], bool]
    ) -> None:
        self.api = api
        self.forwards = list(forwards)
        self.is_simulated_node = is_simulated_node
        self.pods: dict[str, dict] = {}  # uid -> slim peer pod
        self.namespaces: dict[str, dict[str, str]] = {}  # name -> labels
        self.policies: dict[tuple[str, str], dict] = {}  # (namespace, name) -> slim policy
        self.synced = {kind: asyncio.Event() for kind in COLLECTIONS}
        self.targets: dict[str, EnforcedPod] = {}
        self.dirty = asyncio.Event()
        self.apply_slots = asyncio.Semaphore(PARALLEL_APPLIES)
        # a pod whose rules cannot be computed: loopback and replies only, every forward shut
        self.closed_script = render_pod_table(
            PodRules(
                ingress=DirectionRules(isolated=True),
                egress=DirectionRules(isolated=True),
                forwards=tuple(ForwardVerdict(f.pod_port, False) for f in self.forwards),
            )
        )

    # ---- the pod worker's side ----------------------------------------------------
    async def secure(self, pod: dict, netns: str, adopted: bool = False) -> None:
        """Install the pod's table before it runs (NetworkError when nft refuses)."""
        for event in self.synced.values():
            await event.wait()
        uid = pod["metadata"]["uid"]
        cached = self.pods.get(uid)
        target = EnforcedPod(cached or slim_pod(pod), netns, None if adopted else OPEN_SCRIPT)
        self.targets[uid] = target
        try:
            await self.enforce(target, self.view(), raise_errors=True)
        except NetworkError:
            self.targets.pop(uid, None)
            raise

    def forget(self, uid: str) -> None:
        self.targets.pop(uid, None)

    # ---- keeping the tables right -------------------------------------------------
    def view(self) -> ClusterView:
        return ClusterView(
            pods=list(self.pods.values()),
            namespaces=dict(self.namespaces),
            policies=list(self.policies.values()),
        )

    async def enforce(self, target: EnforcedPod, view: ClusterView, raise_errors=False) -> None:
        async with target.lock:
            try:
                script = render_pod_table(compute_pod_rules(target.pod, view, self.forwards))
            except Exception:  # noqa: BLE001 - a bug here must not end enforcement for all pods
                log.exception("NetworkPolicy rules of pod %s not computed", target.netns)
                script = self.closed_script
            if script == target.applied:
                return
            try:
                async with self.apply_slots:
                    await asyncio.to_thread(apply_pod_table, target.netns, script)
            except NetworkError as exc:
                if raise_errors:
                    raise
                if target.pod["metadata"]["uid"] in self.targets:
                    log.warning("NetworkPolicy rules not updated: %s; trying again", exc)
                    asyncio.get_running_loop().call_later(APPLY_RETRY_S, self.dirty.set)
                return
            target.applied = script

    async def apply_changes(self) -> None:
        """Forever: after a change (and DEBOUNCE_S), every local pod's table brought up to date."""
        while True:
            await self.dirty.wait()
            await asyncio.sleep(DEBOUNCE_S)
            self.dirty.clear()
            view = self.view()
            await asyncio.gather(*(self.enforce(t, view) for t in list(self.targets.values())))

    # ---- the cluster's objects ----------------------------------------------------
    def remember(self, kind: str, obj: dict, present: bool) -> bool:
        """Keep (or drop) one object; True when what the rules read changed."""
        meta = obj.get("metadata") or {}
        if kind == "namespaces":
            labels = dict(meta.get("labels") or {}) if present else None
            before = self.namespaces.get(meta.get("name"))
            if labels is None:
                self.namespaces.pop(meta.get("name"), None)
            else:
                self.namespaces[meta.get("name")] = labels
            return before != labels
        if kind == "policies":
            key = (meta.get("namespace"), meta.get("name"))
            before = self.policies.pop(key, None)
            if present:
                self.policies[key] = slim_policy(obj)
            return before != self.policies.get(key)
        uid = meta.get("uid")
        slim = slim_pod(obj)
        changed = False
        target = self.targets.get(uid)
        if target is not None and present and target.pod != slim:
            target.pod, changed = slim, True
        node = slim["spec"]["nodeName"]
        keep = present and is_peer_pod(slim) and not (node and self.is_simulated_node(node))
        before = self.pods.pop(uid, None)
        if keep:
            self.pods[uid] = slim
        return changed or before != self.pods.get(uid)

    def replace_all(self, kind: str, items: list[dict]) -> bool:
        """A fresh listing: objects not in it are gone; True when what the rules read changed."""
        held: dict[Any, Any] = {
            "pods": self.pods,
            "namespaces": self.namespaces,
            "policies": self.policies,
        }[kind]
        before = dict(held)
        local_before = {uid: t.pod for uid, t in self.targets.items()}
        held.clear()
        for item in items:
            self.remember(kind, item, True)
        local_after = {uid: t.pod for uid, t in self.targets.items()}
        return before != held or local_before != local_after

    async def follow(self, kind: str) -> None:
        """List, then watch one collection for ever (relist after 410 or a lost connection)."""
        path = COLLECTIONS[kind]
        resource_version = None
        while True:
            try:
                if resource_version is None:
                    listing = await self.api.list_collection(path)
                    if self.replace_all(kind, listing.get("items") or []):
                        self.dirty.set()
                    resource_version = (listing.get("metadata") or {}).get("resourceVersion")
                    self.synced[kind].set()
                async for event in self.api.watch_collection(path, resource_version or "0"):
                    obj = event.get("object") or {}
                    meta = obj.get("metadata") or {}
                    resource_version = meta.get("resourceVersion") or resource_version
                    if event.get("type") == "BOOKMARK":
                        continue
                    if self.remember(kind, obj, event.get("type") != "DELETED"):
                        self.dirty.set()
            except RelistRequired:
                resource_version = None
            except (TimeoutError, ApiRequestError, aiohttp.ClientError, ValueError, OSError) as exc:
                log.warning("NetworkPolicy watch of %s interrupted: %s; relisting", kind, exc)
                resource_version = None
                await asyncio.sleep(RELIST_PAUSE_S)

    async def run(self) -> None:
        tasks = [asyncio.create_task(self.follow(kind)) for kind in COLLECTIONS]
        tasks.append(asyncio.create_task(self.apply_changes()))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
