"""What a tenant holds now: its active runs, quota used vs hard, jobs vs slots, nodes and GPUs.

Why this exists: the tenants page (runview/tenants.py) shows, per
tenant, what a person sharing the cluster wants to know at a glance, from three
sources read elsewhere: the runs Airflow has active, the pods Kubernetes has in
the tenant's namespace, and the namespace's ResourceQuota status. Joining and
counting them is pure and lives here, tested without any server.

- Quota lines come from the ResourceQuota's `status` (`used`, `hard`; `spec.hard`
  when the quota controller has not filled `status.hard` yet), in
  `tfjob.quota.CHECKED_RESOURCES` order. No quota object: no lines, `quota_applied`
  False (the tenant was never applied with `tshell tenants apply`).
- A job is running while one of its run's pods is Pending or Running; these
  count against `max_concurrent_jobs` (the tenant pool's slots).
- A run is joined to its pods by the pods' `tfjob.io/dag-id` and `tfjob.io/run-id`
  annotations (a run key alone does not say which DAG run it is).
- Placements: per node, the tenant's live pods there and their GPUs (the device ids
  when the cluster writes them, as localkube does in `localkube.io/gpu-ids`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from tfjob import naming
from tfjob.jsontypes import JsonObject
from tfjob.quota import CHECKED_RESOURCES, format_amount, read_quota_amounts
from tfjob.tenants.model import GPU_RESOURCE, Tenant

LIVE_PHASES = ("Pending", "Running")
GPU_IDS_ANNOTATION = "localkube.io/gpu-ids"
UNSCHEDULED_NODE = ""  # a Pending pod not yet bound


@dataclass(frozen=True)
class ActiveRun:
    """One of the tenant's DAG runs Airflow has queued or running."""

    dag_id: str
    run_id: str
    state: str
    started: str | None = None  # ISO time, None while queued


def count_pod_gpus(pod: Mapping[str, object]) -> int:
    """GPUs the pod's containers ask for (limits, as Kubernetes schedules extended resources)."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        limit = ((container.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE)
        try:
            total += int(limit or 0)
        except (TypeError, ValueError):
            continue
    return total


def _phase(pod: Mapping[str, object]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _meta(pod: Mapping[str, object]) -> tuple[JsonObject, JsonObject]:
    meta = pod.get("metadata") or {}
    return meta.get("labels") or {}, meta.get("annotations") or {}


def is_live(pod: Mapping[str, object]) -> bool:
    return _phase(pod) in LIVE_PHASES and not (pod.get("metadata") or {}).get("deletionTimestamp")


def summarize_quota(quota: Mapping[str, object] | None) -> list[JsonObject]:
    """used vs hard per checked resource of a ResourceQuota object (none: [])."""
    if not quota:
        return []
    status = quota.get("status") or {}
    hard = read_quota_amounts(status.get("hard") or (quota.get("spec") or {}).get("hard") or {})
    used = read_quota_amounts(status.get("used") or {})
    lines = []
    for resource in CHECKED_RESOURCES:
        if resource not in hard:
            continue
        amount, limit = used.get(resource, Decimal(0)), hard[resource]
        share = float(amount / limit) if limit else (0.0 if not amount else 1.0)
        lines.append(
            {
                "resource": resource,
                "used": format_amount(resource, amount),
                "hard": format_amount(resource, limit),
                "fraction": round(share, 4),
            }
        )
    return lines


def summarize_placements(pods: Iterable[Mapping[str, object]]) -> list[JsonObject]:
    """Per node (name order; unscheduled pods under ""), the live pods there and their GPUs."""
    nodes: dict[str, JsonObject] = {}
    for pod in pods:
        if not is_live(pod):
            continue
        node = str((pod.get("spec") or {}).get("nodeName") or UNSCHEDULED_NODE)
        entry = nodes.setdefault(node, {"node": node, "pods": [], "gpus": 0, "gpu_ids": []})
        _, annotations = _meta(pod)
        entry["pods"].append(str((pod.get("metadata") or {}).get("name") or ""))
        entry["gpus"] += count_pod_gpus(pod)
        ids = str(annotations.get(GPU_IDS_ANNOTATION) or "")
        entry["gpu_ids"].extend(i for i in ids.split(",") if i)
    for entry in nodes.values():
        entry["pods"].sort()
    return [nodes[name] for name in sorted(nodes)]


def summarize_runs(
    runs: Iterable[ActiveRun], pods: Iterable[Mapping[str, object]]
) -> list[JsonObject]:
    """The active runs (oldest first), each with its pods' counts and GPUs."""
    by_run: dict[tuple[str, str], list[Mapping[str, object]]] = {}
    for pod in pods:
        _, annotations = _meta(pod)
        key = (
            str(annotations.get(naming.ANNOTATION_DAG_ID) or ""),
            str(annotations.get(naming.ANNOTATION_RUN_ID) or ""),
        )
        by_run.setdefault(key, []).append(pod)
    rows = []
    for run in sorted(runs, key=lambda r: (r.started or "~", r.dag_id, r.run_id)):
        own = by_run.get((run.dag_id, run.run_id), [])
        live = [pod for pod in own if is_live(pod)]
        labels = _meta(own[0])[0] if own else {}
        rows.append(
            {
                "dag_id": run.dag_id,
                "run_id": run.run_id,
                "state": run.state,
                "started": run.started,
                "job": labels.get(naming.LABEL_JOB),
                "pods": len(live),
                "pods_running": sum(_phase(pod) == "Running" for pod in live),
                "gpus": sum(count_pod_gpus(pod) for pod in live),
            }
        )
    return rows


def count_running_jobs(pods: Iterable[Mapping[str, object]]) -> int:
    """Runs (by run key) with a Pending or Running pod."""
    return len(
        {
            _meta(pod)[0].get(naming.LABEL_RUN)
            for pod in pods
            if is_live(pod) and _meta(pod)[0].get(naming.LABEL_RUN)
        }
    )


def summarize_tenant(
    tenant: Tenant,
    quota: Mapping[str, object] | None,
    pods: Iterable[Mapping[str, object]],
    runs: Iterable[ActiveRun],
) -> JsonObject:
    """One tenant's card on the tenants page. `pods` are the tfjob pods of its namespace."""
    pods = [
        pod
        for pod in pods
        if (pod.get("metadata") or {}).get("namespace") in (None, tenant.namespace)
    ]
    return {
        "name": tenant.name,
        "description": tenant.description,
        "namespace": tenant.namespace,
        "quota_applied": bool(quota),
        "quota": summarize_quota(quota),
        "jobs_running": count_running_jobs(pods),
        "max_concurrent_jobs": tenant.max_concurrent_jobs,
        "runs": summarize_runs(runs, pods),
        "placements": summarize_placements(pods),
    }
