"""Server-side printing: meta.k8s.io/v1 Table answers for kubectl, which asks for them with
`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`. Columns follow kube-apiserver's."""

from __future__ import annotations

import datetime

from localkube.apiserver.resources import Resource


def human_duration(seconds: float) -> str:
    """kubectl's HumanDuration ("45s", "3m12s", "5h", "2d3h")."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y"


def age(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    moment = datetime.datetime.strptime(timestamp[:19], "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.UTC
    )
    return human_duration((datetime.datetime.now(datetime.UTC) - moment).total_seconds())


def pod_status_text(pod: dict) -> str:
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    init_specs = (pod.get("spec") or {}).get("initContainers") or []
    for index, init in enumerate(status.get("initContainerStatuses") or []):
        state = init.get("state") or {}
        if "terminated" in state and state["terminated"].get("exitCode") == 0:
            continue
        if "terminated" in state:
            reason = f"Init:{state['terminated'].get('reason') or 'Error'}"
        elif (state.get("waiting") or {}).get("reason") not in (None, "PodInitializing"):
            reason = f"Init:{state['waiting']['reason']}"
        else:
            reason = f"Init:{index}/{len(init_specs)}"
        break
    else:
        for container in reversed(status.get("containerStatuses") or []):
            state = container.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
            elif "terminated" in state:
                reason = (
                    state["terminated"].get("reason")
                    or f"ExitCode:{state['terminated'].get('exitCode')}"
                )
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _pod_cells(pod: dict) -> list:
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for c in containers if c.get("ready"))
    restarts = sum(c.get("restartCount", 0) for c in containers)
    return [
        pod["metadata"]["name"],
        f"{ready}/{total}",
        pod_status_text(pod),
        restarts,
        age(pod["metadata"].get("creationTimestamp")),
        status.get("podIP") or "<none>",
        (pod.get("spec") or {}).get("nodeName") or "<none>",
        "<none>",
        "<none>",
    ]


def _node_cells(node: dict) -> list:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), "Unknown")
    text = {"True": "Ready", "False": "NotReady"}.get(ready, "NotReady")
    if (node.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    version = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    return [
        node["metadata"]["name"],
        text,
        "<none>",
        age(node["metadata"].get("creationTimestamp")),
        version,
    ]


def _event_cells(event: dict) -> list:
    involved = event.get("involvedObject") or {}
    return [
        age(event.get("lastTimestamp") or event.get("eventTime")),
        event.get("type", ""),
        event.get("reason", ""),
        f"{(involved.get('kind') or '').lower()}/{involved.get('name', '')}",
        event.get("message", ""),
    ]


COLUMNS = {
    "pods": (
        [
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
            "IP",
            "Node",
            "Nominated Node",
            "Readiness Gates",
        ],
        [0, 0, 0, 0, 0, 1, 1, 1, 1],
        _pod_cells,
    ),
    "nodes": (["Name", "Status", "Roles", "Age", "Version"], [0, 0, 0, 0, 0], _node_cells),
    "events": (["Last Seen", "Type", "Reason", "Object", "Message"], [0, 0, 0, 0, 0], _event_cells),
    "namespaces": (
        ["Name", "Status", "Age"],
        [0, 0, 0],
        lambda o: [
            o["metadata"]["name"],
            (o.get("status") or {}).get("phase", ""),
            age(o["metadata"].get("creationTimestamp")),
        ],
    ),
    "configmaps": (
        ["Name", "Data", "Age"],
        [0, 0, 0],
        lambda o: [
            o["metadata"]["name"],
            len(o.get("data") or {}) + len(o.get("binaryData") or {}),
            age(o["metadata"].get("creationTimestamp")),
        ],
    ),
    "secrets": (
        ["Name", "Type", "Data", "Age"],
        [0, 0, 0, 0],
        lambda o: [
            o["metadata"]["name"],
            o.get("type", "Opaque"),
            len(o.get("data") or {}),
            age(o["metadata"].get("creationTimestamp")),
        ],
    ),
    "services": (
        ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age"],
        [0, 0, 0, 0, 0, 0],
        lambda o: [
            o["metadata"]["name"],
            (o.get("spec") or {}).get("type", ""),
            (o.get("spec") or {}).get("clusterIP", ""),
            "<none>",
            ",".join(
                f"{p.get('port')}/{p.get('protocol', 'TCP')}"
                for p in (o.get("spec") or {}).get("ports") or []
            )
            or "<none>",
            age(o["metadata"].get("creationTimestamp")),
        ],
    ),
}


def wants_table(accept: str) -> bool:
    return "as=Table" in (accept or "")


def build_table(resource: Resource, items: list[dict], resource_version: str) -> dict:
    names, priorities, cells = COLUMNS.get(
        resource.plural,
        (
            ["Name", "Age"],
            [0, 0],
            lambda o: [o["metadata"]["name"], age(o["metadata"].get("creationTimestamp"))],
        ),
    )
    columns = [
        {
            "name": name,
            "type": "integer" if name in ("Restarts", "Data") else "string",
            "format": "name" if name == "Name" else "",
            "description": "",
            "priority": priority,
        }
        for name, priority in zip(names, priorities, strict=True)
    ]
    rows = [
        {
            "cells": cells(obj),
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            },
        }
        for obj in items
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": rows,
    }
