"""One training run as the "TFJob" tab of a DAG run shows it, built from the run's XComs.

The pipeline already passes everything worth seeing through XCom (the run
description, the pods' endpoints, the ClusterSpec, the replicas' end states,
metrics, the archive's S3 addresses); this module only gathers it, so the
routes that serve it (runview/api.py) stay thin and this is tested
without Airflow. The page itself is static (plugins/tfjob_view/): it asks for
this JSON every few seconds and draws it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tfjob.attempts import AttemptOutcome, read_attempt_outcome
from tfjob.jsontypes import JsonObject
from tfjob.pipeline_ids import (
    ARCHIVE_TASK,
    ATTEMPTS_KEY,
    CLUSTERSPEC_TASK,
    FETCH_BUNDLE_TASK,
    LAUNCH_FAILURE_KEY,
    LAUNCH_TASK,
    PIPELINE_TASKS,
    PUBLISH_TASK,
    RESTARTED_CLUSTER_KEY,
    TRAIN_TASK,
    VALIDATE_TASK,
    WARM_START_KEY,
)
from tfjob.records.replicas import ReplicaStatus
from tfjob.records.run import PartialRunDescription
from tfjob.request.model import DEFAULT_GPU, Role
from tfjob.runlayout import RunLayout

RETURN_VALUE = "return_value"

XComValues = Mapping[tuple[str, str], object]
# A DAG run that may still change: the tab polls it, Cancel may stop it.
ACTIVE_RUN_STATES = frozenset({"queued", "running"})


@dataclass(frozen=True)
class TaskTimes:
    """One task instance of the run as the timeline draws it (ISO times, or None)."""

    state: str | None
    start: str | None = None
    end: str | None = None
    try_number: int | None = None


@dataclass(frozen=True)
class RunTimes:
    """The DAG run's own state and times (ISO), as Airflow's database has them."""

    state: str | None
    start: str | None = None
    end: str | None = None
    conf: Mapping[str, object] | None = None


def summarize_run(
    dag_id: str, run_id: str, run: RunTimes, xcoms: XComValues, tasks: Mapping[str, TaskTimes]
) -> JsonObject | None:
    """The run's job view; None when the run is not a training run (validate pushed nothing
    and the run has ended; an active run's validate may not have run yet)."""
    stored = xcoms.get((VALIDATE_TASK, RETURN_VALUE))
    if not stored and run.state not in ACTIVE_RUN_STATES:
        return None
    described = (
        PartialRunDescription.from_payload(stored)
        if stored
        else PartialRunDescription(request=run.conf or {})
    )
    request = described.request
    archived = xcoms.get((ARCHIVE_TASK, RETURN_VALUE)) or {}
    attempts = xcoms.get((TRAIN_TASK, ATTEMPTS_KEY)) or []
    recorded = fill_recorded_replicas(xcoms.get((TRAIN_TASK, "replicas")) or [], request, attempts)
    cluster_spec = (
        xcoms.get((TRAIN_TASK, RESTARTED_CLUSTER_KEY))  # a restarted gang's
        or (xcoms.get((CLUSTERSPEC_TASK, RETURN_VALUE)) or {}).get("cluster")
    )
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "state": run.state,
        "active": run.state in ACTIVE_RUN_STATES,
        "start": run.start,
        "end": run.end,
        "job": {
            "name": request.get("name"),
            "tenant": request.get("tenant"),
            "mode": request.get("mode"),
            "strategy": request.get("strategy"),
            "image": request.get("image"),
            "replicas": request.get("replicas"),
            "namespace": described.namespace,
            "run_key": described.run_key,
        },
        "tasks": [
            {
                "task_id": task,
                "state": tasks[task].state,
                "start": tasks[task].start,
                "end": tasks[task].end,
                "try_number": tasks[task].try_number,
            }
            for task in PIPELINE_TASKS
            if task in tasks
        ],
        "bundle": xcoms.get((FETCH_BUNDLE_TASK, RETURN_VALUE)),
        "endpoints": xcoms.get((LAUNCH_TASK, RETURN_VALUE)),
        "launch_failure": xcoms.get((LAUNCH_TASK, LAUNCH_FAILURE_KEY)),
        "cluster_spec": cluster_spec,
        "cluster_rows": list_cluster_rows(cluster_spec),
        "attempts": attempts,
        "replicas": order_replicas(recorded),
        "replicas_from": "xcom",
        "metrics": xcoms.get((TRAIN_TASK, "metrics")),
        "model": archived.get("model"),
        "logs": archived.get("logs") or [],
        "run_json": archived.get("run_json"),
        "published": xcoms.get((PUBLISH_TASK, RETURN_VALUE)),
        "warm_start": describe_warm_start(xcoms.get((LAUNCH_TASK, WARM_START_KEY))),
    }


def describe_warm_start(staged: object) -> JsonObject | None:
    """launch's `warm_start` XCom, plus the run it restored from (`from_run`: its DAG, id and
    TensorBoard folder) when its checkpoints folder names one; None without a warm start."""
    if not isinstance(staged, Mapping):
        return None
    described = dict(staged)
    source = staged.get("source")
    try:
        layout = RunLayout.of_checkpoints(source) if isinstance(source, str) else None
    except ValueError:
        layout = None
    if layout is not None:
        dag_id, run_id = layout.run_ids
        described["from_run"] = {
            "dag_id": dag_id,
            "run_id": run_id,
            "tensorboard": layout.tensorboard.uri,
        }
    return described


def list_cluster_rows(cluster_spec: Mapping[str, object] | None) -> list[JsonObject]:
    """The ClusterSpec as rows: role, index, address (host:port), in the spec's order."""
    rows: list[JsonObject] = []
    for role, addresses in (cluster_spec or {}).items():
        if isinstance(addresses, list):
            rows += [{"role": role, "index": i, "address": a} for i, a in enumerate(addresses)]
    return rows


def order_replicas(replicas: Sequence[Mapping[str, object]]) -> list[JsonObject]:
    """Failed replicas first (a non-zero exit too), then by role and index; each row as given."""

    def rank(row: Mapping[str, object]) -> tuple[bool, str, int]:
        replica = ReplicaStatus.from_payload(row)
        return (not replica.has_failed, str(row.get("role")), replica.index)

    return sorted((dict(r) for r in replicas), key=rank)


def count_gang_restarts(attempts: Sequence[object]) -> int:
    """Restarts of every replica so far: each restarted attempt recreated the whole gang."""
    return sum(
        1 for attempt in attempts if read_attempt_outcome(attempt) is AttemptOutcome.RESTARTED
    )


def read_role_gpus(request: Mapping[str, object], role: Role | None) -> int:
    """GPUs of one replica of `role` as the request (validated, so defaults filled) asks."""
    if role is None:
        return DEFAULT_GPU
    spec = (request.get("resources") or {}).get(role.value) or {}
    gpus = spec.get("gpu", DEFAULT_GPU) if isinstance(spec, Mapping) else DEFAULT_GPU
    return gpus if isinstance(gpus, int) and not isinstance(gpus, bool) else DEFAULT_GPU


def fill_recorded_replicas(
    replicas: Sequence[Mapping[str, object]],
    request: Mapping[str, object],
    attempts: Sequence[object],
) -> list[JsonObject]:
    """train's `replicas` XCom with what it does not record: each replica's GPUs (from the
    request, as the manifests set them) and its restarts (from the attempts record)."""
    restarts = count_gang_restarts(attempts)
    rows = []
    for replica in replicas:
        row = dict(replica)
        row.setdefault("gpus", read_role_gpus(request, ReplicaStatus.from_payload(row).role))
        row.setdefault("restarts", restarts)
        rows.append(row)
    return rows
