"""The kinds localkube serves (all core/v1), with what discovery and the handlers need to know."""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = field(default=ALL_VERBS)

    @property
    def singular(self) -> str:
        return self.kind.lower()


RESOURCES: dict[str, Resource] = {r.plural: r for r in (
    Resource("namespaces", "Namespace", False, ("ns",), ("status", "finalize")),
    Resource("nodes", "Node", False, ("no",), ("status",)),
    Resource("pods", "Pod", True, ("po",), ("status", "binding", "log", "exec")),
    Resource("services", "Service", True, ("svc",), ("status",)),
    Resource("configmaps", "ConfigMap", True, ("cm",)),
    Resource("secrets", "Secret", True),
    Resource("events", "Event", True, ("ev",)),
    Resource("resourcequotas", "ResourceQuota", True, ("quota",), ("status",)),
    Resource("limitranges", "LimitRange", True, ("limits",)),
    Resource("serviceaccounts", "ServiceAccount", True, ("sa",)),
)}

KIND_TO_PLURAL = {r.kind: r.plural for r in RESOURCES.values()}


def resource_for(plural: str) -> Resource | None:
    return RESOURCES.get(plural)
