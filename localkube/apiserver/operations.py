"""The verbs on objects (create, get, list, replace, patch, delete, bind), shared by the HTTP layer
and the in-process controllers (scheduler, garbage collector), so both obey the same rules.

Deletion follows the localkube contract: a pod bound to a node whose kubelet reports Ready is
deleted gracefully (deletionTimestamp + deletionGracePeriodSeconds, a MODIFIED event); the kubelet
finishes it with gracePeriodSeconds=0. Anything with finalizers stays until they are removed.
"""

from __future__ import annotations

import copy
import datetime
import random
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from localkube.apiserver import admission, errors
from localkube.apiserver.defaults import apply_defaults, new_uid, now_rfc3339
from localkube.apiserver.patch import apply_patch
from localkube.apiserver.resources import RESOURCES
from localkube.apiserver.selectors import fields_match, labels_match
from localkube.apiserver.store import Store
from localkube.apiserver.validation import check_kind, validate_name, validate_object

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")
FOREGROUND_FINALIZER = "foregroundDeletion"
# Resources whose main endpoint ignores status changes (they have a status subresource).
STATUS_SUBRESOURCE = ("pods", "nodes", "namespaces", "services", "resourcequotas")


class Propagation(StrEnum):
    ORPHAN = "Orphan"
    BACKGROUND = "Background"
    FOREGROUND = "Foreground"


def parse_propagation(value: str | None) -> Propagation | None:
    if value in (None, ""):
        return None
    try:
        return Propagation(value)
    except ValueError:
        raise errors.bad_request(
            f"propagationPolicy {value!r} is not valid; allowed: Orphan, Background, Foreground"
        ) from None


def _later_rfc3339(seconds: int) -> str:
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class ObjectApi:
    def __init__(self, store: Store) -> None:
        self.store = store
        # Called with (removed object, resource, propagation) after an object leaves the store.
        self.on_removed: list[Callable[[str, dict, Propagation | None], None]] = []
        self._propagation: dict[str, Propagation] = {}
        # Set by the garbage collector: does the object with this uid own anything?
        self.has_dependents: Callable[[dict], bool] = lambda obj: False

    # -- reads ---------------------------------------------------------------------------------
    def get(self, resource: str, namespace: str, name: str) -> dict:
        obj = self.store.get(resource, namespace, name)
        if obj is None:
            raise errors.not_found(resource, name)
        return obj

    def list(
        self, resource: str, namespace: str | None, labels: tuple = (), fields: tuple = ()
    ) -> list[dict]:
        items = self.store.list(resource, namespace)
        if labels or fields:
            items = [
                o
                for o in items
                if labels_match(labels, o["metadata"].get("labels")) and fields_match(fields, o)
            ]
        return sorted(
            items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])
        )

    def node_ready(self, name: str) -> bool:
        node = self.store.get("nodes", "", name)
        if node is None:
            return False
        return any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (node.get("status") or {}).get("conditions") or []
        )

    # -- create --------------------------------------------------------------------------------
    def create(self, resource: str, namespace: str, body: Any, dry_run: bool = False) -> dict:
        info = RESOURCES[resource]
        if not isinstance(body, dict):
            raise errors.bad_request(f"the body of a {info.kind} create must be a JSON object")
        obj = copy.deepcopy(body)
        check_kind(info, obj)
        meta = obj.setdefault("metadata", {})
        if info.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match "
                    "the namespace sent on the request"
                )
            meta["namespace"] = namespace
            self._check_namespace_open(namespace)
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise errors.invalid(
                    info.kind,
                    "",
                    [("metadata.name", "Required value: name or generateName is required")],
                )
            meta["name"] = self._generate_name(resource, namespace, meta["generateName"])
        validate_name(info.kind, meta["name"])
        if self.store.get(resource, namespace if info.namespaced else "", meta["name"]):
            raise errors.already_exists(resource, meta["name"])
        obj["kind"], obj["apiVersion"] = info.kind, info.api_version
        meta["uid"] = new_uid()
        meta["creationTimestamp"] = now_rfc3339()
        for key in (
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
        ):
            meta.pop(key, None)
        if "spec" in obj or resource == "pods":
            meta["generation"] = 1
        validate_object(resource, obj)
        if resource == "pods":
            admission.apply_limit_ranges(self.store, obj)
        taken = (
            {s["spec"].get("clusterIP") for s in self.store.list("services")}
            if resource == "services"
            else None
        )
        apply_defaults(resource, obj, taken)
        if resource == "pods":
            obj.setdefault("status", {})["phase"] = "Pending"
            for key in (
                "conditions",
                "containerStatuses",
                "initContainerStatuses",
                "podIP",
                "podIPs",
                "hostIP",
                "startTime",
            ):
                obj["status"].pop(key, None)
            admission.check_pod_security(self.store, obj)
            admission.check_pod_quota(self.store, obj)
        else:
            admission.check_object_count_quota(self.store, resource, obj)
        if resource == "resourcequotas":
            obj["status"] = admission.quota_status(self.store, obj)
        if dry_run:
            return obj
        stored = self.store.put(resource, obj)
        if resource == "namespaces":
            self._create_default_service_account(meta["name"])
        return stored

    def _create_default_service_account(self, namespace: str) -> None:
        if self.store.get("serviceaccounts", namespace, "default") is None:
            self.create("serviceaccounts", namespace, {"metadata": {"name": "default"}})

    def _check_namespace_open(self, namespace: str) -> None:
        ns = self.store.get("namespaces", "", namespace)
        if ns is None:
            raise errors.not_found("namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise errors.forbidden(
                "namespaces",
                namespace,
                f"unable to create new content in namespace {namespace} "
                "because it is being terminated",
            )

    def _generate_name(self, resource: str, namespace: str, prefix: str) -> str:
        for _ in range(20):
            name = prefix[:58] + "".join(random.choices(_GENERATE_ALPHABET, k=5))
            if self.store.get(resource, namespace, name) is None:
                return name
        raise errors.already_exists(resource, prefix)

    # -- update --------------------------------------------------------------------------------
    def replace(
        self,
        resource: str,
        namespace: str,
        name: str,
        body: Any,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict:
        info = RESOURCES[resource]
        current = self.get(resource, namespace, name)
        if not isinstance(body, dict):
            raise errors.bad_request(f"the body of a {info.kind} update must be a JSON object")
        new = copy.deepcopy(body)
        check_kind(info, new)
        meta = new.setdefault("metadata", {})
        if meta.get("name") not in (None, name):
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not "
                f"match the name on the URL ({name})"
            )
        given_rv = meta.get("resourceVersion")
        if given_rv and given_rv != current["metadata"]["resourceVersion"]:
            raise errors.stale_version(resource, name)
        return self._store_update(resource, current, new, subresource, dry_run)

    def patch(
        self,
        resource: str,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict:
        current = self.get(resource, namespace, name)
        patched = apply_patch(content_type, current, body)
        if not isinstance(patched, dict):
            raise errors.bad_request("the patch did not produce an object")
        given_rv = (patched.get("metadata") or {}).get("resourceVersion")
        if given_rv and given_rv != current["metadata"]["resourceVersion"]:
            raise errors.stale_version(resource, name)
        return self._store_update(resource, current, patched, subresource, dry_run)

    def _store_update(
        self, resource: str, current: dict, new: dict, subresource: str | None, dry_run: bool
    ) -> dict:
        info = RESOURCES[resource]
        old_meta = current["metadata"]
        if subresource == "status":
            merged = copy.deepcopy(current)
            merged["status"] = new.get("status", {})
            # Status writers (the kubelet) may also touch annotations/labels, as on a real node.
            new_meta = new.get("metadata") or {}
            for key in ("labels", "annotations"):
                if key in new_meta:
                    merged["metadata"][key] = new_meta[key]
            new = merged
        else:
            if resource in STATUS_SUBRESOURCE and "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            meta = new.setdefault("metadata", {})
            for key in (
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ):
                if key in old_meta:
                    meta[key] = old_meta[key]
                else:
                    meta.pop(key, None)
            if "spec" in new and new.get("spec") != current.get("spec"):
                meta["generation"] = old_meta.get("generation", 0) + 1
            if resource == "resourcequotas":
                new["status"] = admission.quota_status(self.store, new)
        new["kind"], new["apiVersion"] = info.kind, info.api_version
        new["metadata"].pop("resourceVersion", None)
        if resource == "secrets":
            apply_defaults("secrets", new)
        if dry_run:
            return new
        if (
            new["metadata"].get("deletionTimestamp")
            and not new["metadata"].get("finalizers")
            and self._removable(resource, new)
        ):
            return self._remove(resource, new)
        return self.store.put(resource, new)

    # -- delete --------------------------------------------------------------------------------
    def delete(
        self,
        resource: str,
        namespace: str,
        name: str,
        grace: int | None = None,
        propagation: Propagation | None = None,
        preconditions: dict | None = None,
        dry_run: bool = False,
    ) -> dict:
        current = self.get(resource, namespace, name)
        meta = current["metadata"]
        preconditions = preconditions or {}
        if preconditions.get("uid") and preconditions["uid"] != meta.get("uid"):
            raise errors.conflict(
                resource,
                name,
                f"Precondition failed: UID in precondition: "
                f"{preconditions['uid']}, UID in object meta: {meta.get('uid')}",
            )
        if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != meta.get(
            "resourceVersion"
        ):
            raise errors.conflict(
                resource,
                name,
                "Precondition failed: ResourceVersion in "
                f"precondition: {preconditions['resourceVersion']}, "
                f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
            )
        if dry_run:
            return current
        if propagation is not None and meta.get("uid"):
            self._propagation[meta["uid"]] = propagation
        if resource == "namespaces":
            return self._delete_namespace(current)
        if resource == "pods":
            return self._delete_pod(current, grace)
        if propagation == Propagation.FOREGROUND and self.has_dependents(current):
            # The owner stays (deletionTimestamp + foregroundDeletion finalizer) until the
            # garbage collector has removed its dependents, as in Kubernetes.
            held = copy.deepcopy(current)
            finalizers = held["metadata"].setdefault("finalizers", [])
            if FOREGROUND_FINALIZER not in finalizers:
                finalizers.append(FOREGROUND_FINALIZER)
            return self._mark_deleting(resource, held, 0)
        if meta.get("finalizers"):
            return self._mark_deleting(resource, current, 0)
        return self._remove(resource, current)

    def _delete_namespace(self, current: dict) -> dict:
        name = current["metadata"]["name"]
        if name in PROTECTED_NAMESPACES:
            raise errors.forbidden("namespaces", name, "this namespace may not be deleted")
        if current["metadata"].get("deletionTimestamp"):
            return current
        new = copy.deepcopy(current)
        new["metadata"]["deletionTimestamp"] = now_rfc3339()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        new.setdefault("status", {})["phase"] = "Terminating"
        return self.store.put("namespaces", new)

    def _delete_pod(self, current: dict, grace: int | None) -> dict:
        meta, spec = current["metadata"], current.get("spec") or {}
        if grace is None:
            grace = meta.get("deletionGracePeriodSeconds")
            if grace is None:
                grace = spec.get("terminationGracePeriodSeconds", 30)
        grace = max(int(grace), 0)
        if grace > 0 and self._has_kubelet(current):
            if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds", 0) <= grace:
                return current
            return self._mark_deleting("pods", current, grace)
        if meta.get("finalizers"):
            return self._mark_deleting("pods", current, 0)
        return self._remove("pods", current)

    def _has_kubelet(self, pod: dict) -> bool:
        node = (pod.get("spec") or {}).get("nodeName")
        return bool(node) and self.node_ready(node)

    def _removable(self, resource: str, obj: dict) -> bool:
        if resource != "pods":
            return resource != "namespaces"
        return obj["metadata"].get("deletionGracePeriodSeconds", 0) == 0 or not self._has_kubelet(
            obj
        )

    def _mark_deleting(self, resource: str, current: dict, grace: int) -> dict:
        new = copy.deepcopy(current)
        new["metadata"]["deletionTimestamp"] = _later_rfc3339(grace)
        new["metadata"]["deletionGracePeriodSeconds"] = grace
        return self.store.put(resource, new)

    def _remove(self, resource: str, obj: dict) -> dict:
        meta = obj["metadata"]
        removed = self.store.remove(resource, meta.get("namespace", ""), meta["name"], obj)
        if removed is None:
            return obj
        propagation = self._propagation.pop(meta.get("uid", ""), None)
        for callback in self.on_removed:
            callback(resource, removed, propagation)
        return removed

    def remove_namespace(self, name: str) -> None:
        ns = self.store.get("namespaces", "", name)
        if ns is not None:
            self._remove("namespaces", ns)

    # -- binding -------------------------------------------------------------------------------
    def bind(
        self, namespace: str, name: str, binding: Any, annotations: dict[str, str] | None = None
    ) -> dict:
        pod = self.get("pods", namespace, name)
        target = (binding or {}).get("target") or {}
        node = target.get("name")
        if not node:
            raise errors.invalid("Binding", name, [("target.name", "Required value")])
        if pod["spec"].get("nodeName"):
            raise errors.conflict(
                "pods/binding",
                name,
                f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"',
            )
        if pod["metadata"].get("deletionTimestamp"):
            raise errors.conflict(
                "pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host"
            )
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = node
        if annotations:
            new["metadata"].setdefault("annotations", {}).update(annotations)
        conditions = [
            c for c in new["status"].get("conditions") or [] if c.get("type") != "PodScheduled"
        ]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(),
            }
        )
        new["status"]["conditions"] = conditions
        return self.store.put("pods", new)
