"""Garbage collection: ownerReference cascades, namespace termination, quota usage upkeep.

Runs as asyncio tasks inside the API server. Dependents of a removed owner are deleted (or, with
propagationPolicy=Orphan, released) right away; a periodic sweep catches dependents whose owner
vanished before they were created. A terminating namespace has its content deleted (pods
gracefully, through the kubelet) and disappears once empty.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import datetime
import logging

from localkube.apiserver import admission
from localkube.apiserver.errors import ApiError
from localkube.apiserver.operations import FOREGROUND_FINALIZER, ObjectApi, Propagation
from localkube.apiserver.resources import KIND_TO_PLURAL, RESOURCES
from localkube.apiserver.store import EventType, WatchEvent

log = logging.getLogger("localkube.gc")
SWEEP_INTERVAL_S = 2.0
EVENT_TTL_S = 3600  # kube-apiserver's default --event-ttl
QUOTA_REFRESH_S = 0.1


class GarbageCollector:
    def __init__(self, api: ObjectApi) -> None:
        self.api = api
        self.store = api.store
        self._wake = asyncio.Event()
        self._dirty_quota_namespaces: set[str] = set()
        self._foreground: set[tuple[str, str, str]] = set()  # owners held by foregroundDeletion
        # owner uid -> (resource, namespace, name) of the objects naming it in ownerReferences:
        # scanning every object for each removed owner made removing a gang's pods quadratic
        # (bench/bench_scale.py: a third of the API server's time for 512 pods).
        self._dependents: collections.defaultdict[str, set[tuple[str, str, str]]] = (
            collections.defaultdict(set)
        )
        for resource in RESOURCES:
            for obj in self.store.list(resource):
                self._index(resource, obj, None)
        api.on_removed.append(self.handle_removed)
        api.has_dependents = lambda obj: bool(
            self._dependents_of(obj["metadata"].get("uid", ""), obj["metadata"].get("namespace"))
        )
        self.store.listeners.append(self.handle_event)

    def _index(self, resource: str, obj: dict | None, old: dict | None) -> None:
        """Move `old`'s ownerReferences out of the index and `obj`'s in (None: none)."""
        for source, add in ((old, False), (obj, True)):
            if source is None:
                continue
            meta = source["metadata"]
            key = (resource, meta.get("namespace") or "", meta["name"])
            for ref in meta.get("ownerReferences") or []:
                uid = ref.get("uid")
                if not uid:
                    continue
                if add:
                    self._dependents[uid].add(key)
                else:
                    self._dependents[uid].discard(key)
                    if not self._dependents[uid]:
                        del self._dependents[uid]

    def handle_event(self, event: WatchEvent) -> None:
        if event.type == EventType.DELETED:
            self._index(event.resource, None, event.obj)
        else:  # an entry left stale (no `old`) is harmless: _dependents_of checks the object
            self._index(event.resource, event.obj, event.old)
        namespace = event.obj["metadata"].get("namespace")
        if event.resource == "pods" or event.resource in admission.OBJECT_COUNTS:
            if namespace and self.store.objects["resourcequotas"]:
                self._dirty_quota_namespaces.add(namespace)
        meta = event.obj["metadata"]
        if (
            event.type != EventType.DELETED
            and meta.get("deletionTimestamp")
            and FOREGROUND_FINALIZER in (meta.get("finalizers") or [])
        ):
            self._foreground.add((event.resource, meta.get("namespace", ""), meta["name"]))
            self._wake.set()
        if event.resource == "namespaces" and meta.get("deletionTimestamp"):
            self._wake.set()

    def handle_removed(self, resource: str, owner: dict, propagation: Propagation | None) -> None:
        uid = owner["metadata"].get("uid")
        if not uid:
            return
        namespace = owner["metadata"].get("namespace")
        for dependent_resource, dependent in self._dependents_of(uid, namespace):
            if propagation == Propagation.ORPHAN or self._other_owner_alive(dependent, uid):
                self._release(dependent_resource, dependent, uid)
            else:
                self._delete_quietly(dependent_resource, dependent)
        self._wake.set()

    def _dependents_of(self, uid: str, namespace: str | None) -> list[tuple[str, dict]]:
        found = []
        for resource, object_namespace, name in sorted(self._dependents.get(uid, ())):
            if namespace and (not RESOURCES[resource].namespaced or object_namespace != namespace):
                continue
            obj = self.store.get(resource, object_namespace, name)
            if obj is not None and any(
                ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or []
            ):
                found.append((resource, obj))
        return found

    def _other_owner_alive(self, obj: dict, gone_uid: str) -> bool:
        return any(
            ref.get("uid") != gone_uid and self.store.find_uid(ref.get("uid", ""))
            for ref in obj["metadata"].get("ownerReferences") or []
        )

    def _release(self, resource: str, obj: dict, uid: str) -> None:
        new = copy.deepcopy(obj)
        new["metadata"]["ownerReferences"] = [
            r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != uid
        ]
        if not new["metadata"]["ownerReferences"]:
            del new["metadata"]["ownerReferences"]
        self.store.put(resource, new)

    def _delete_quietly(self, resource: str, obj: dict) -> None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and resource != "pods":
            return
        try:
            self.api.delete(resource, meta.get("namespace", ""), meta["name"])
        except ApiError as error:
            if error.code != 404:
                log.warning(
                    "garbage collection of %s %s failed: %s", resource, meta["name"], error.message
                )

    def advance_foreground_deletions(self) -> bool:
        """Delete the dependents of owners held by foregroundDeletion; release the owners whose
        dependents are all gone. True while some owners are still waiting."""
        for resource, namespace, name in list(self._foreground):
            obj = self.store.get(resource, namespace, name)
            meta = (obj or {}).get("metadata") or {}
            if FOREGROUND_FINALIZER not in (meta.get("finalizers") or []):
                self._foreground.discard((resource, namespace, name))
                continue
            for dependent_resource, dependent in self._dependents_of(
                meta.get("uid", ""), meta.get("namespace")
            ):
                self._delete_quietly(dependent_resource, dependent)
            if self._dependents_of(meta.get("uid", ""), meta.get("namespace")):
                continue
            self._foreground.discard((resource, namespace, name))
            rest = [f for f in meta["finalizers"] if f != FOREGROUND_FINALIZER]
            self.api.patch(
                resource,
                namespace,
                name,
                "application/merge-patch+json",
                {"metadata": {"finalizers": rest or None}},
            )
        return bool(self._foreground)

    def sweep_orphans(self) -> None:
        """Delete objects all of whose owners (of kinds we serve) are gone."""
        for resource in RESOURCES:
            for obj in self.store.list(resource):
                refs = obj["metadata"].get("ownerReferences") or []
                known = [
                    r
                    for r in refs
                    if r.get("kind") in KIND_TO_PLURAL and r.get("apiVersion", "v1") == "v1"
                ]
                if (
                    known
                    and len(known) == len(refs)
                    and not any(self.store.find_uid(r.get("uid", "")) for r in known)
                ):
                    self._delete_quietly(resource, obj)

    def expire_events(self) -> None:
        cutoff = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=EVENT_TTL_S)
        stamp = cutoff.strftime("%Y-%m-%dT%H:%M:%SZ")
        for event in self.store.list("events"):
            last = event.get("lastTimestamp") or event["metadata"].get("creationTimestamp", "")
            if last and last[:19] + "Z" < stamp:
                meta = event["metadata"]
                self.store.remove("events", meta.get("namespace", ""), meta["name"])

    def terminate_namespaces(self) -> bool:
        """Advance every terminating namespace; True while some are still terminating."""
        pending = False
        for ns in self.store.list("namespaces"):
            if not ns["metadata"].get("deletionTimestamp"):
                continue
            name = ns["metadata"]["name"]
            left = 0
            for resource, info in RESOURCES.items():
                if not info.namespaced:
                    continue
                for obj in self.store.list(resource, name):
                    left += 1
                    self._delete_quietly(resource, obj)
            if left == 0 or not any(
                self.store.list(r, name) for r, i in RESOURCES.items() if i.namespaced
            ):
                self.api.remove_namespace(name)
            else:
                pending = True
        return pending

    def refresh_quotas(self) -> None:
        dirty, self._dirty_quota_namespaces = self._dirty_quota_namespaces, set()
        for namespace in dirty:
            for quota in self.store.list("resourcequotas", namespace):
                status = admission.quota_status(self.store, quota)
                if status != quota.get("status"):
                    self.store.put(
                        "resourcequotas",
                        dict(quota, status=status, metadata=dict(quota["metadata"])),
                    )

    async def run(self) -> None:
        last_sweep = 0.0
        loop = asyncio.get_running_loop()
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), QUOTA_REFRESH_S)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                self.refresh_quotas()
                busy = self.terminate_namespaces()
                busy = self.advance_foreground_deletions() or busy
                if busy:
                    loop.call_later(0.2, self._wake.set)
                if loop.time() - last_sweep > SWEEP_INTERVAL_S:
                    last_sweep = loop.time()
                    self.sweep_orphans()
                    self.expire_events()
            except Exception:  # a controller must survive a bad object; log and carry on
                log.exception("garbage collector pass failed")
