"""Admission: LimitRange defaults and limits, Pod Security Admission, and ResourceQuota
enforcement and usage.

The refusals are worded like the real admission plugins, since users and tests match on them:
`pods "x" is forbidden: exceeded quota: q, requested: requests.cpu=2, used: requests.cpu=1,
limited: requests.cpu=2`; `pods "x" is forbidden: violates PodSecurity "restricted:latest":
allowPrivilegeEscalation != false (container "main" must set
securityContext.allowPrivilegeEscalation=false)` (the standards live in podsecurity.py).
"""

from __future__ import annotations

from fractions import Fraction

from localkube.apiserver import podsecurity
from localkube.apiserver.errors import forbidden
from localkube.apiserver.quantity import format_like, parse_quantity
from localkube.apiserver.store import Store

TERMINAL_PHASES = ("Succeeded", "Failed")
COMPUTE = ("cpu", "memory", "ephemeral-storage")
OBJECT_COUNTS = {
    "configmaps": "configmaps",
    "secrets": "secrets",
    "services": "services",
    "serviceaccounts": "serviceaccounts",
    "resourcequotas": "resourcequotas",
}


def apply_limit_ranges(store: Store, pod: dict) -> None:
    """Fill container requests/limits from LimitRange defaults; refuse what exceeds max/min."""
    namespace = pod["metadata"]["namespace"]
    name = pod["metadata"].get("name") or pod["metadata"].get("generateName", "")
    for limit_range in store.list("limitranges", namespace):
        for item in (limit_range.get("spec") or {}).get("limits") or []:
            if item.get("type") != "Container":
                continue
            for container in (pod["spec"].get("containers") or []) + (
                pod["spec"].get("initContainers") or []
            ):
                _default_container(container, item)
                _check_container(name, container, item)


def _default_container(container: dict, item: dict) -> None:
    resources = container.setdefault("resources", {})
    limits = resources.setdefault("limits", {})
    for resource, value in (item.get("default") or {}).items():
        limits.setdefault(resource, value)
    requests = resources.setdefault("requests", {})
    for resource, value in (item.get("defaultRequest") or {}).items():
        requests.setdefault(resource, value)
    for resource, value in limits.items():
        requests.setdefault(resource, value)
    if not limits:
        resources.pop("limits")
    if not requests:
        resources.pop("requests")


def _check_container(pod_name: str, container: dict, item: dict) -> None:
    resources = container.get("resources") or {}
    for resource, maximum in (item.get("max") or {}).items():
        limit = (resources.get("limits") or {}).get(resource)
        if limit is None:
            raise forbidden(
                "pods",
                pod_name,
                f"maximum {resource} usage per Container is {maximum}.  No limit is specified",
            )
        if parse_quantity(limit) > parse_quantity(maximum):
            raise forbidden(
                "pods",
                pod_name,
                f"maximum {resource} usage per Container is {maximum}, but limit is {limit}",
            )
    for resource, minimum in (item.get("min") or {}).items():
        request = (resources.get("requests") or {}).get(resource)
        if request is not None and parse_quantity(request) < parse_quantity(minimum):
            raise forbidden(
                "pods",
                pod_name,
                f"minimum {resource} usage per Container is {minimum}, but request is {request}",
            )


def check_pod_security(store: Store, pod: dict) -> None:
    """Pod Security Admission (enforce mode): refuse a pod its namespace's level forbids."""
    namespace = store.get("namespaces", "", pod["metadata"]["namespace"])
    level, version = podsecurity.read_enforced_policy(namespace)
    violations = podsecurity.evaluate_pod(level, pod)
    if violations:
        raise forbidden(
            "pods",
            pod["metadata"]["name"],
            podsecurity.describe_violations(level, version, violations),
        )


def pod_usage(pod: dict) -> dict[str, Fraction]:
    """The quota resources one pod uses: pods, requests.*, limits.* and bare names."""
    usage: dict[str, Fraction] = {"pods": Fraction(1), "count/pods": Fraction(1)}
    spec = pod.get("spec") or {}
    totals: dict[str, dict[str, Fraction]] = {"requests": {}, "limits": {}}
    for kind in ("requests", "limits"):
        for container in spec.get("containers") or []:
            for resource, value in ((container.get("resources") or {}).get(kind) or {}).items():
                totals[kind][resource] = totals[kind].get(resource, Fraction(0)) + parse_quantity(
                    value
                )
        # Init containers run one at a time: the pod needs the max of them, if larger.
        for container in spec.get("initContainers") or []:
            for resource, value in ((container.get("resources") or {}).get(kind) or {}).items():
                totals[kind][resource] = max(
                    totals[kind].get(resource, Fraction(0)), parse_quantity(value)
                )
    for kind, values in totals.items():
        for resource, value in values.items():
            usage[f"{kind}.{resource}"] = value
            if kind == "requests":
                usage[resource] = value
    return usage


def is_counted(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def namespace_usage(store: Store, namespace: str, hard: dict) -> dict[str, Fraction]:
    used = {name: Fraction(0) for name in hard}
    for pod in store.list("pods", namespace):
        if not is_counted(pod):
            continue
        usage = pod_usage(pod)
        for name in hard:
            used[name] += usage.get(name, Fraction(0))
    for resource, name in OBJECT_COUNTS.items():
        for key in (name, f"count/{name}"):
            if key in hard:
                used[key] = Fraction(len(store.list(resource, namespace)))
    return used


def check_pod_quota(store: Store, pod: dict) -> None:
    namespace = pod["metadata"]["namespace"]
    name = pod["metadata"]["name"]
    requested = pod_usage(pod)
    for quota in store.list("resourcequotas", namespace):
        hard = (quota.get("spec") or {}).get("hard") or {}
        if not hard:
            continue
        missing = sorted(
            h
            for h in hard
            if (h.split(".", 1)[-1] in COMPUTE and h != "pods") and h not in requested
        )
        if missing:
            raise forbidden(
                "pods",
                name,
                f"failed quota: {quota['metadata']['name']}: must specify {','.join(missing)}",
            )
        used = namespace_usage(store, namespace, hard)
        over = sorted(
            h for h in hard if h in requested and used[h] + requested[h] > parse_quantity(hard[h])
        )
        if over:

            def listing(values: dict, keys: list[str] = over) -> str:
                return ",".join(f"{h}={format_like(h, values[h])}" for h in keys)

            limited = {h: parse_quantity(hard[h]) for h in over}
            raise forbidden(
                "pods",
                name,
                f"exceeded quota: {quota['metadata']['name']}, "
                f"requested: {listing(requested)}, used: {listing(used)}, "
                f"limited: {listing(limited)}",
            )


def check_object_count_quota(store: Store, resource: str, obj: dict) -> None:
    name = OBJECT_COUNTS.get(resource)
    if name is None:
        return
    namespace = obj["metadata"]["namespace"]
    for quota in store.list("resourcequotas", namespace):
        hard = (quota.get("spec") or {}).get("hard") or {}
        for key in (name, f"count/{name}"):
            if key in hard:
                used = len(store.list(resource, namespace))
                if used + 1 > parse_quantity(hard[key]):
                    raise forbidden(
                        resource,
                        obj["metadata"]["name"],
                        f"exceeded quota: {quota['metadata']['name']}, requested: "
                        f"{key}=1, used: {key}={used}, limited: {key}={hard[key]}",
                    )


def quota_status(store: Store, quota: dict) -> dict:
    hard = (quota.get("spec") or {}).get("hard") or {}
    used = namespace_usage(store, quota["metadata"]["namespace"], hard)
    return {"hard": dict(hard), "used": {h: format_like(h, v) for h, v in used.items()}}
