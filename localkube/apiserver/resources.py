"""The kinds localkube serves (core/v1, and NetworkPolicy of networking.k8s.io/v1, which the
kubelets enforce), with what discovery and the handlers need to know."""

from __future__ import annotations

from dataclasses import dataclass, field

CORE_GROUP_VERSION = "v1"
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = field(default=ALL_VERBS)
    group_version: str = CORE_GROUP_VERSION  # "v1" for core, else "<group>/<version>"

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def api_version(self) -> str:
        return self.group_version


RESOURCES: dict[str, Resource] = {
    r.plural: r
    for r in (
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
        # Stored and served; the kubelets enforce them (kubelet/policyenforcer.py).
        Resource(
            "networkpolicies",
            "NetworkPolicy",
            True,
            ("netpol",),
            group_version="networking.k8s.io/v1",
        ),
    )
}

KIND_TO_PLURAL = {r.kind: r.plural for r in RESOURCES.values()}


# The API groups besides core, e.g. {"networking.k8s.io/v1": [Resource, ...]}.
GROUP_RESOURCES: dict[str, list[Resource]] = {}
for _resource in RESOURCES.values():
    if _resource.group_version != CORE_GROUP_VERSION:
        GROUP_RESOURCES.setdefault(_resource.group_version, []).append(_resource)


def resource_for(plural: str, group_version: str = CORE_GROUP_VERSION) -> Resource | None:
    """The resource `plural` if it is served under `group_version`."""
    info = RESOURCES.get(plural)
    return info if info is not None and info.group_version == group_version else None
