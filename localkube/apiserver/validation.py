"""What the API server refuses in an object's shape before storing it: a kind or apiVersion
that is not the resource's, a name that is not an RFC 1123 label or subdomain, a pod spec
(containers, restart policy, node affinity) the real API server would call Invalid. Pure
checks over the body; the verbs that call them are operations.py's, admission (quota,
limits, pod security) is admission.py's.
"""

from __future__ import annotations

import re

from localkube.apiserver import errors
from localkube.apiserver.resources import Resource

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_LABEL_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def check_kind(info: Resource, obj: dict) -> None:
    """The body's kind and apiVersion, when given, are the resource's."""
    kind = info.kind
    if obj.get("kind") not in (None, "", kind):
        raise errors.bad_request(
            f"the object kind {obj['kind']!r} does not match the resource; expected {kind!r}"
        )
    if obj.get("apiVersion") not in (None, "", info.api_version):
        raise errors.bad_request(
            f"apiVersion {obj['apiVersion']!r} is not served for "
            f"{kind}; localkube serves {info.api_version}"
        )


def validate_name(kind: str, name: str) -> None:
    """An RFC 1123 label (namespaces, services) or subdomain; events are not checked."""
    pattern = _LABEL_NAME_RE if kind in ("Namespace", "Service") else _NAME_RE
    limit = 63 if kind in ("Namespace", "Service") else 253
    if kind == "Event":
        return
    if not pattern.match(name) or len(name) > limit:
        raise errors.invalid(
            kind,
            name,
            [
                (
                    "metadata.name",
                    f'Invalid value: "{name}": a lowercase RFC 1123 '
                    f"{'label' if limit == 63 else 'subdomain'} must consist of lower case "
                    "alphanumeric characters, '-' or '.', and must start and end with an "
                    f"alphanumeric character (at most {limit} characters)",
                )
            ],
        )


def validate_object(resource: str, obj: dict) -> None:
    """What the real API server refuses in a pod's spec before storing it."""
    if resource != "pods":
        return
    name = obj["metadata"]["name"]
    spec = obj.get("spec") or {}
    causes = []
    if not spec.get("containers"):
        causes.append(("spec.containers", "Required value"))
    for group in ("initContainers", "containers"):
        seen = set()
        for i, container in enumerate(spec.get(group) or []):
            if not container.get("name"):
                causes.append((f"spec.{group}[{i}].name", "Required value"))
            elif container["name"] in seen:
                causes.append(
                    (f"spec.{group}[{i}].name", f'Duplicate value: "{container["name"]}"')
                )
            seen.add(container.get("name"))
            if not container.get("image"):
                causes.append((f"spec.{group}[{i}].image", "Required value"))
    policy = spec.get("restartPolicy")
    if policy not in (None, "Always", "OnFailure", "Never"):
        causes.append(
            (
                "spec.restartPolicy",
                f'Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"',
            )
        )
    causes += _node_affinity_causes(spec)
    if causes:
        raise errors.invalid("Pod", name, causes)


_NODE_OPERATORS = ("DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn")


def _node_affinity_causes(spec: dict) -> list[tuple[str, str]]:
    """kube-apiserver's checks of a pod's nodeAffinity (ValidateNodeSelectorRequirement)."""
    where = "spec.affinity.nodeAffinity"
    node = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    causes: list[tuple[str, str]] = []
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms: list[tuple[str, dict]] = []
    if required is not None:
        at = f"{where}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        if not required.get("nodeSelectorTerms"):
            causes.append((at, "Required value: must have at least one node selector term"))
        terms += [(f"{at}[{i}]", t) for i, t in enumerate(required.get("nodeSelectorTerms") or [])]
    for i, item in enumerate(node.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        at = f"{where}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        weight = item.get("weight")
        if not isinstance(weight, int) or not 1 <= weight <= 100:
            causes.append((f"{at}.weight", f"Invalid value: {weight}: must be in the range 1-100"))
        terms.append((f"{at}.preference", item.get("preference") or {}))
    for at, term in terms:
        for j, requirement in enumerate(term.get("matchExpressions") or []):
            causes += _requirement_causes(f"{at}.matchExpressions[{j}]", requirement)
    return causes


def _requirement_causes(at: str, requirement: dict) -> list[tuple[str, str]]:
    operator, values = requirement.get("operator"), requirement.get("values") or []
    if operator in ("In", "NotIn") and not values:
        return [
            (f"{at}.values", "Required value: must be specified when `operator` is 'In' or 'NotIn'")
        ]
    if operator in ("Exists", "DoesNotExist") and values:
        return [
            (
                f"{at}.values",
                "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )
        ]
    if operator in ("Gt", "Lt") and len(values) != 1:
        return [
            (
                f"{at}.values",
                "Required value: must be specified single value when `operator` is 'Lt' or 'Gt'",
            )
        ]
    if operator not in _NODE_OPERATORS:
        return [(f"{at}.operator", f'Invalid value: "{operator}": not a valid selector operator')]
    return []
