"""What the chaos soak reads back from its world once the runs ended: the invariants' inputs.

Why this exists: bench/chaos_invariants.py judges plain records; this module fills them from
the outside, as a user or an auditor would look: Airflow's REST API (run states, task states,
the failed tasks' logs), S3 (run.json, the model, the archived logs, `latest`), localkube's
API (run objects left) and the files of the state dir (every log, searched for the secret
values the world generated). Every read is bounded: logs are scanned in chunks, whatever
their size, and S3 objects other than logs are read only under a size limit.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.chaos_invariants import RunSeen, find_secrets, standin_model_sha256
from bench.chaos_plan import FaultKind, PlannedRun
from bench.chaos_world import (
    BUCKET,
    ChaosWorld,
    chief_of,
    output_of,
    replicas_of,
    run_deadline_s,
)
from scripts import airflow_server
from scripts.s3_identities import (
    POD_IDENTITIES_FILE,
    ensure_admin_credentials,
    parse_pod_identities,
)
from tfjob.attempts import AttemptOutcome
from tfjob.naming import LABEL_RUN
from tfjob.runlayout import (
    REPLICA_LOG_SUFFIX,
    RunLayout,
    S3Path,
    locate_output_latest,
)

SMALL_OBJECT_MAX = 8 * 1024 * 1024  # run.json, model.json, latest: far smaller
CHUNK = 1024 * 1024
LOG_SUFFIXES = (".log", ".out", ".err", ".jsonl")
REASON_MAX = 4000
RUN_OBJECT_KINDS = ("pod", "secret", "config_map", "network_policy")


@dataclass
class TrackedRun:
    """A planned run once submitted: its Airflow ids and the faults that hit it."""

    planned: PlannedRun
    dag_id: str
    run_id: str | None
    submitted_at: float
    faults: list[FaultKind] = field(default_factory=list)
    state: str | None = None
    ended_at: float | None = None


def read_task_states(airflow: Any, dag_id: str, run_id: str) -> dict[str, str | None]:
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
    return {ti["task_id"]: ti.get("state") for ti in airflow.request("GET", path)["task_instances"]}


def read_small_object(s3: Any, path: S3Path) -> bytes | None:
    """An object's bytes when it exists and is at most SMALL_OBJECT_MAX; None when absent."""
    try:
        head = s3.head_object(Bucket=path.bucket, Key=path.key)
    except s3.exceptions.ClientError:
        return None
    if head["ContentLength"] > SMALL_OBJECT_MAX:
        raise ValueError(f"{path.uri}: {head['ContentLength']} bytes, more than {SMALL_OBJECT_MAX}")
    return s3.get_object(Bucket=path.bucket, Key=path.key)["Body"].read(SMALL_OBJECT_MAX + 1)


def read_failure_reason(airflow: Any, dag_id: str, run_id: str, manifest: Any) -> str:
    """The failed tasks and their logs' error lines, and run.json's attempts' causes."""
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
    parts = []
    for ti in airflow.request("GET", path)["task_instances"]:
        if ti.get("state") not in ("failed", "upstream_failed"):
            continue
        parts.append(f"{ti['task_id']} {ti['state']}")
        if ti.get("state") != "failed":
            continue
        logs = airflow.request(
            "GET", f"{path}/{ti['task_id']}/logs/{max(1, ti.get('try_number') or 1)}"
        )
        for event in logs.get("content") or []:
            text = json.dumps(event) if isinstance(event, dict) else str(event)
            if any(word in text for word in ("error", "Error", "failed", "killed")):
                parts.append(text[:500])
    if isinstance(manifest, dict):
        parts.append(json.dumps(manifest.get("attempts")))
        parts.append(json.dumps([r.get("phase") for r in manifest.get("replicas") or []]))
    return "\n".join(parts)[-REASON_MAX:]


def list_archived_logs(s3: Any, layout: RunLayout) -> tuple[str, ...]:
    answer = s3.list_objects_v2(Bucket=layout.logs.bucket, Prefix=layout.logs.key)
    names = [item["Key"][len(layout.logs.key) :] for item in answer.get("Contents", [])]
    return tuple(sorted(n.removesuffix(REPLICA_LOG_SUFFIX) for n in names if "/" not in n))


def observe_run(world: ChaosWorld, tracked: TrackedRun) -> RunSeen:
    planned = tracked.planned
    seen = RunSeen(
        name=planned.name,
        output=output_of(planned),
        run_id=tracked.run_id,
        state=tracked.state,
        submitted_at=tracked.submitted_at,
        ended_at=tracked.ended_at,
        deadline_s=run_deadline_s(planned),
        faults=tuple(tracked.faults),
        max_restarts=planned.max_restarts,
        chief=chief_of(planned),
        replicas=replicas_of(planned),
    )
    if tracked.run_id is None:
        return seen
    airflow, s3 = world.airflow(), world.s3()
    run = airflow.request("GET", f"/api/v2/dags/{tracked.dag_id}/dagRuns/{tracked.run_id}")
    layout = RunLayout.for_run(seen.output, tracked.dag_id, tracked.run_id)
    raw = read_small_object(s3, layout.manifest)
    manifest = json.loads(raw) if raw else None
    attempts = (manifest or {}).get("attempts") or []
    model = read_small_object(s3, layout.model.child("model.json"))
    states = read_task_states(airflow, tracked.dag_id, tracked.run_id)
    return RunSeen(
        **{
            **seen.__dict__,
            "run_after": run.get("run_after"),
            "failure_reason": (
                read_failure_reason(airflow, tracked.dag_id, tracked.run_id, manifest)
                if tracked.state == "failed"
                else ""
            ),
            "restarts": sum(a.get("outcome") == AttemptOutcome.RESTARTED for a in attempts),
            "model_sha256": hashlib.sha256(model).hexdigest() if model is not None else None,
            "expected_model_sha256": standin_model_sha256(seen.chief),
            "reached_archive": states.get("archive") in ("success", "failed"),
            "archived_logs": list_archived_logs(s3, layout),
            "logs_explained": tuple(sorted((manifest or {}).get("logs_missing") or {})),
        }
    )


def read_latest(world: ChaosWorld, output: str) -> str | None:
    raw = read_small_object(world.s3(), locate_output_latest(output))
    return json.loads(raw).get("run_id") if raw else None


def find_objects_left(world: ChaosWorld, namespaces: list[str]) -> list[str]:
    """Every pod, Secret, ConfigMap and NetworkPolicy of a run still in a tenant namespace."""
    api = world.kube.kube_configuration()
    core, net = (
        client.CoreV1Api(client.ApiClient(api)),
        client.NetworkingV1Api(client.ApiClient(api)),
    )
    lists = {
        "pod": core.list_namespaced_pod,
        "secret": core.list_namespaced_secret,
        "config_map": core.list_namespaced_config_map,
        "network_policy": net.list_namespaced_network_policy,
    }
    left = []
    for namespace in namespaces:
        for kind, list_ in lists.items():
            for item in list_(namespace, label_selector=LABEL_RUN).items:
                left.append(f"{kind} {namespace}/{item.metadata.name}")
    return left


def collect_secrets(state: Path) -> dict[str, str]:
    """name -> value of every secret the world generated: the S3 admin key
    (s3/credentials.json), each pod identity (s3/pod_identities.json), the Airflow users'
    passwords."""
    admin = ensure_admin_credentials(state / "s3")
    found = {"s3 admin secret_key": admin.secret_key}
    path = state / "s3" / POD_IDENTITIES_FILE
    for identity in parse_pod_identities(json.loads(path.read_text()), str(path)).values():
        found[f"pod identity of {identity.tenant}"] = identity.secret_key
    users = airflow_server.read_users(state / "airflow")
    found |= {f"airflow password of {user}": password for user, password in users.items()}
    return found


def scan_chunks(chunks: Iterator[bytes], overlap: int) -> Iterator[bytes]:
    """The chunks with the last `overlap` bytes of the previous one in front (a secret may
    straddle two chunks)."""
    tail = b""
    for chunk in chunks:
        yield tail + chunk
        tail = (tail + chunk)[-overlap:] if overlap else b""


def read_file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            yield chunk


def find_credential_hits(world: ChaosWorld) -> list[str]:
    """Secrets found in any log: the state dir's files (the services', Airflow's task logs)
    and the archived replica logs in S3."""
    secrets = collect_secrets(world.state)
    overlap = max((len(v) for v in secrets.values()), default=0)
    hits: list[str] = []
    for path in sorted(world.state.rglob("*")):
        is_log = path.suffix in LOG_SUFFIXES or "logs" in path.parts
        if is_log and path.is_file() and not path.is_symlink():
            for chunk in scan_chunks(read_file_chunks(path), overlap):
                hits += find_secrets([(str(path), chunk)], secrets)
    s3 = world.s3()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for item in page.get("Contents", []):
            if "/logs/" in item["Key"] and item["Key"].endswith(REPLICA_LOG_SUFFIX):
                body = s3.get_object(Bucket=BUCKET, Key=item["Key"])["Body"]
                where = f"s3://{BUCKET}/{item['Key']}"
                for chunk in scan_chunks(body.iter_chunks(CHUNK), overlap):
                    hits += find_secrets([(where, chunk)], secrets)
    return sorted(set(hits))
