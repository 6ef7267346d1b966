"""The archive task's work: what a run leaves in S3, whatever happened to it.

Runs before teardown (the pods and their logs still exist) whatever happened
to launch and train (a teardown task of fetch_bundle and launch), so a failed
run, even a gang that never started, is archived too:

- `<run prefix>/logs/<role>-<index>.log`: the replica's init container log and
  main container log, each under a header line (a pod still Pending with no
  log at all gets none). A replica's log is untrusted and may be huge: at most
  ARCHIVE_LOG_MAX_BYTES of the main container's log (ARCHIVE_INIT_LOG_MAX_BYTES
  of the init container's) is kept, then a line saying it was cut and the
  log's last lines; it goes to S3 through a temporary file, never whole in memory.
  A replica without one is named in run.json's `logs_missing`, with the
  reason (its pod was deleted before archive ran, or it wrote nothing);
- `<run prefix>/model/`: uploaded by the bootstrap; checked here (object
  count and bytes go into the manifest). When the owner's upload failed (its
  `tensorflow` container exited 74), or it exited 0 and S3 holds no model,
  the model is copied out of the owner pod's keeper container and uploaded
  here (`operators.modelrecovery`; run.json says `recovered_from_pod`);
- `<run prefix>/run.json`: the run manifest (request, ClusterSpec, bundle
  identity, image, per-replica exit codes, timings, model, metrics, whether
  launch got the gang running or why it failed, and `attempts`: each gang of
  the run, as the restart policy ended it; operators/restart.py).

Every S3 call is retried through a short outage (`operators.s3retry`): the
pods, and the model in the owner's emptyDir, are gone once teardown ran.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import tempfile
from typing import IO, TYPE_CHECKING, Any

from kubernetes import client as k8s

from operators import kubeobjects
from operators.logreads import copy_log, read_newest_lines
from operators.modelrecovery import (
    RecoveryAction,
    RecoveryError,
    decide_recovery,
    recover_model_from_pod,
)
from operators.replicas import describe_vanished_pod, read_replica_status
from operators.restart import attempts_to_payload, recall_attempts
from operators.runinfo import RunInfo, request_as_dict
from operators.s3retry import call_with_s3_retries
from operators.settings import (
    ARCHIVE_INIT_LOG_MAX_BYTES,
    ARCHIVE_LOG_MAX_BYTES,
    LOG_END_LINES,
    LOG_TAIL_MAX_BYTES,
)
from runtime.protocol import INIT_CONTAINER, MAIN_CONTAINER
from tfjob import naming
from tfjob.jsontypes import JsonObject
from tfjob.runlayout import S3Path

if TYPE_CHECKING:
    from botocore.client import BaseClient

log = logging.getLogger("airflow.task")

RUN_MANIFEST_VERSION = 1
# A replica's log is copied to S3 through a temporary file held in memory up to this size.
SPOOL_IN_MEMORY_BYTES = 1024**2
# Kubernetes keeps a container's log with its pod: a pod deleted before archive took it along.
LOG_OF_A_GONE_POD = "its pod was deleted before archive ran, and its log went with it"


def describe_cut_log(kept_bytes: int) -> bytes:
    """The line archive writes where it cut a replica's log."""
    return (
        f"\u2026 [log cut after {kept_bytes} bytes: archive keeps at most that much of a "
        f"container's log; the log's last lines (at most {LOG_END_LINES}, "
        f"{LOG_TAIL_MAX_BYTES} bytes) follow]\n"
    ).encode()


def spool_container_log(
    api: k8s.CoreV1Api, namespace: str, pod: str, container: str, out: IO[bytes], max_bytes: int
) -> int:
    """Append the container's log, under a header line, to `out`: at most `max_bytes` of it,
    then (when it goes on) the cut line and its last lines. Returns the log bytes written."""
    out.write(f"===== {container} =====\n".encode())
    written, truncated = copy_log(api, namespace, pod, container, out, max_bytes)
    if truncated:
        out.write(b"\n" + describe_cut_log(written))
        tail = read_newest_lines(
            api, namespace, pod, container, LOG_END_LINES, LOG_TAIL_MAX_BYTES
        ).encode()
        out.write(tail)
        written += len(tail)
        log.warning("log of %s/%s cut after %d bytes in the archive", pod, container, max_bytes)
    out.seek(-1, io.SEEK_END)  # the header at least was written
    ends_line = out.read(1) == b"\n"
    out.seek(0, io.SEEK_END)
    if not ends_line:
        out.write(b"\n")
    return written


def archive_replica_log(
    api: k8s.CoreV1Api, s3: BaseClient, namespace: str, pod: str, target: S3Path
) -> bool:
    """Copy the pod's init and main container logs into the S3 object `target`, through a
    temporary file (memory stays bounded whatever the log's size); False when both are empty
    (nothing is written then)."""
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY_BYTES) as spool:
        written = spool_container_log(
            api, namespace, pod, INIT_CONTAINER, spool, ARCHIVE_INIT_LOG_MAX_BYTES
        )
        written += spool_container_log(
            api, namespace, pod, MAIN_CONTAINER, spool, ARCHIVE_LOG_MAX_BYTES
        )
        if not written:
            return False

        def put() -> None:
            spool.seek(0)
            s3.put_object(
                Bucket=target.bucket, Key=target.key, Body=spool, ContentType="text/plain"
            )

        call_with_s3_retries(put, f"put {target}")
    return True


def summarise_prefix(s3: BaseClient, folder: S3Path) -> JsonObject:
    """Object count and bytes under an S3 folder."""
    bucket, key = folder.prefix.bucket, folder.prefix.key

    def count_objects() -> tuple[int, int]:
        count = size = 0
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
            for item in page.get("Contents", []):
                count += 1
                size += item["Size"]
        return count, size

    count, size = call_with_s3_retries(count_objects, f"list s3://{bucket}/{key}")
    return {"uri": f"s3://{bucket}/{key}", "objects": count, "bytes": size}


def read_json_object(s3: BaseClient, path: S3Path) -> Any:
    bucket, key, uri = path.bucket, path.key, path.uri
    try:
        body = call_with_s3_retries(
            lambda: s3.get_object(Bucket=bucket, Key=key)["Body"].read(), f"get {uri}"
        )
    except s3.exceptions.NoSuchKey:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def put_text(s3: BaseClient, target: S3Path, text: str, content_type: str = "text/plain") -> None:
    body = text.encode("utf-8")
    call_with_s3_retries(
        lambda: s3.put_object(
            Bucket=target.bucket, Key=target.key, Body=body, ContentType=content_type
        ),
        f"put {target}",
    )


def recover_model(
    api: k8s.CoreV1Api,
    s3: BaseClient,
    run: RunInfo,
    pods: dict[str, JsonObject],
    model_objects: int,
) -> JsonObject:
    """Copy the model out of the owner pod's keeper when its upload failed; say what happened.

    Returns run.json's additions to `model`: `recovered_from_pod` (bool), and
    `recovery` (why, and what was copied or why it could not be).
    """
    from kubernetes.client.exceptions import ApiException

    owner = naming.pod_name(run.run_key, *run.request.model_owner())
    decision = decide_recovery(pods.get(owner), model_objects)
    if decision.action is not RecoveryAction.RECOVER:
        if decision.reason != "nothing to recover":
            log.warning(
                "model of run %s not recovered from pod %s: %s", run.run_key, owner, decision.reason
            )
        return {"recovered_from_pod": False}
    log.info("recovering the model of run %s from pod %s: %s", run.run_key, owner, decision.reason)
    try:
        copied = recover_model_from_pod(api, s3, run.namespace, owner, run.layout)
    except (RecoveryError, ApiException) as exc:
        problem = str(exc) if isinstance(exc, RecoveryError) else f"exec: {exc.status} {exc.reason}"
        log.error(
            "model of run %s could not be recovered from pod %s: %s", run.run_key, owner, problem
        )
        return {
            "recovered_from_pod": False,
            "recovery": {"pod": owner, "reason": decision.reason, "error": problem},
        }
    log.info(
        "recovered %d file(s), %d bytes, of run %s from pod %s into %s",
        copied["files"],
        copied["bytes"],
        run.run_key,
        owner,
        run.layout.root,
    )
    return {
        "recovered_from_pod": copied["files"] > 0,
        "recovery": {
            "pod": owner,
            "reason": decision.reason,
            "files": copied["files"],
            "bytes": copied["bytes"],
        },
    }


def archive_run(
    api: k8s.CoreV1Api,
    s3: BaseClient,
    run: RunInfo,
    *,
    bundle: JsonObject | None,
    cluster_spec: JsonObject | None,
    train_replicas: list[JsonObject] | None,
    metrics: JsonObject | None,
    timings: JsonObject,
    launch: JsonObject | None = None,
    attempts: list[JsonObject] | None = None,
    warm_start: JsonObject | None = None,
) -> JsonObject:
    """Write logs and run.json under the run's prefix; return the run manifest.

    `attempts` are train's (XCom); without them (train killed, or never
    reached) those a restarted gang's pods carry, else null. `warm_start` is
    launch's (what the first gang restored), null without one.
    """
    pods = {
        p["metadata"]["name"]: p
        for p in kubeobjects.list_run_pods(api, run.namespace, run.selector)
    }
    if attempts is None:
        recalled = recall_attempts(pods.values())
        attempts = attempts_to_payload(recalled) if recalled else None
    replicas = []
    logs_written = []
    logs_missing: dict[str, str] = {}  # replica id: why its log cannot be archived
    for name in run.pod_names():
        pod = pods.get(name)
        if pod is None:  # gone: as train last saw it
            recorded = next((r for r in train_replicas or () if r.get("pod") == name), None)
            replicas.append(recorded or {"pod": name, "phase": "Gone"})
            logs_missing[describe_vanished_pod(name, "").replica_id] = LOG_OF_A_GONE_POD
            continue
        replica = read_replica_status(pod)
        target = run.layout.replica_log(replica.role, replica.index)
        if archive_replica_log(api, s3, run.namespace, name, target):
            logs_written.append(target.uri)
        else:  # a pod that never started (e.g. not scheduled) has no log to keep
            logs_missing[replica.replica_id] = (
                f"its pod {name} wrote no log (phase {replica.phase.value}"
                + (f", {replica.reason}" if replica.reason else "")
                + ")"
            )
        replicas.append(replica.to_payload())

    model = summarise_prefix(s3, run.layout.model)
    recovery = recover_model(api, s3, run, pods, model["objects"])
    if "recovery" in recovery:  # files were (maybe partly) copied: count again
        model = summarise_prefix(s3, run.layout.model)
    model.update(recovery)
    uploaded_metrics = read_json_object(s3, run.layout.metrics)
    manifest = {
        "version": RUN_MANIFEST_VERSION,
        "run_id": run.run_id,
        "dag_id": run.dag_id,
        "run_key": run.run_key,
        "namespace": run.namespace,
        "request": request_as_dict(run.request),
        "image": run.request.image,
        "launch": launch,
        "attempts": attempts,
        "warm_start": warm_start,
        "checkpoints": summarise_prefix(s3, run.layout.checkpoints),
        "bundle": bundle,
        "cluster_spec": cluster_spec,
        "replicas": replicas,
        "model": model,
        "metrics": uploaded_metrics if uploaded_metrics is not None else metrics,
        "logs": logs_written,
        "logs_missing": logs_missing,
        "timings": {**timings, "archived_at": dt.datetime.now(dt.UTC).isoformat()},
    }
    put_text(
        s3,
        run.layout.manifest,
        json.dumps(manifest, indent=2, sort_keys=True),
        "application/json",
    )
    return manifest
