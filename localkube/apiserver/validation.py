"""What the API server refuses in an object's shape before storing it: a kind or apiVersion
that is not the resource's, a name that is not an RFC 1123 label or subdomain, a pod spec
the real API server would call Invalid. Pure checks over the body; the verbs that call
them are operations.py's, admission (quota, limits, pod security) is admission.py's.
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
    if causes:
        raise errors.invalid("Pod", name, causes)
