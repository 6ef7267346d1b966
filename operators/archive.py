"""The archive task's work: what a run leaves in S3, whatever happened to it.

Runs before teardown (the pods and their logs still exist) whatever happened
to launch and train (a teardown task of fetch_bundle and launch), so a failed
run, even a gang that never started, is archived too:

- `<run prefix>/logs/<role>-<index>.log`: the replica's init container log and
  main container log, each under a header line (a pod still Pending with no
  log at all gets none);
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
import json
import logging
from typing import Any

from operators import kubeobjects
from operators.replicas import read_replica_status
from operators.runinfo import RunInfo, request_as_dict
from operators.s3retry import call_with_s3_retries
from runtime.protocol import INIT_CONTAINER, MAIN_CONTAINER
from tfjob.s3url import parse_s3_url

log = logging.getLogger("airflow.task")

RUN_MANIFEST_VERSION = 1


def format_replica_log(init_log: str, main_log: str) -> str:
    return (
        f"===== {INIT_CONTAINER} =====\n{init_log}"
        + ("" if init_log.endswith("\n") or not init_log else "\n")
        + f"===== {MAIN_CONTAINER} =====\n{main_log}"
    )


def summarise_prefix(s3: Any, uri: str) -> dict[str, Any]:
    """Object count and bytes under an S3 prefix."""
    bucket, key = parse_s3_url(uri.rstrip("/") + "/")

    def count_objects() -> tuple[int, int]:
        count = size = 0
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
            for item in page.get("Contents", []):
                count += 1
                size += item["Size"]
        return count, size

    count, size = call_with_s3_retries(count_objects, f"list s3://{bucket}/{key}")
    return {"uri": f"s3://{bucket}/{key}", "objects": count, "bytes": size}


def read_json_object(s3: Any, uri: str) -> Any:
    bucket, key = parse_s3_url(uri)
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


def put_text(s3: Any, uri: str, text: str, content_type: str = "text/plain") -> None:
    bucket, key = parse_s3_url(uri)
    body = text.encode("utf-8")
    call_with_s3_retries(
        lambda: s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType=content_type),
        f"put {uri}",
    )


def recover_model(
    api: Any, s3: Any, run: RunInfo, pods: dict[str, dict[str, Any]], model_objects: int
) -> dict[str, Any]:
    """Copy the model out of the owner pod's keeper when its upload failed; say what happened.

    Returns run.json's additions to `model`: `recovered_from_pod` (bool), and
    `recovery` (why, and what was copied or why it could not be).
    """
    from kubernetes.client.exceptions import ApiException

    from operators.modelrecovery import (
        RecoveryAction,
        RecoveryError,
        decide_recovery,
        recover_model_from_pod,
    )
    from tfjob import naming

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
        copied = recover_model_from_pod(api, s3, run.namespace, owner, run.run_prefix)
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
        "recovered %d file(s), %d bytes, of run %s from pod %s into %s/",
        copied["files"],
        copied["bytes"],
        run.run_key,
        owner,
        run.run_prefix,
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
    api: Any,
    s3: Any,
    run: RunInfo,
    *,
    bundle: dict[str, Any] | None,
    cluster_spec: dict[str, Any] | None,
    train_replicas: list[dict[str, Any]] | None,
    metrics: dict[str, Any] | None,
    timings: dict[str, Any],
    launch: dict[str, Any] | None = None,
    attempts: list[dict[str, Any]] | None = None,
    warm_start: dict[str, Any] | None = None,
) -> dict[str, Any]:
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
        from operators.restart import attempts_to_payload, recall_attempts

        recalled = recall_attempts(pods.values())
        attempts = attempts_to_payload(recalled) if recalled else None
    replicas = []
    logs_written = []
    for name in run.pod_names():
        pod = pods.get(name)
        status = read_replica_status(pod).as_dict() if pod else None
        if status is None and train_replicas:
            status = next((r for r in train_replicas if r.get("pod") == name), None)
        if pod is not None:
            init_log = kubeobjects.read_container_log(api, run.namespace, name, INIT_CONTAINER)
            main_log = kubeobjects.read_container_log(api, run.namespace, name, MAIN_CONTAINER)
            if not (init_log or main_log) and status.get("phase") == "Pending":
                replicas.append(status)  # never started (e.g. not scheduled): no log to keep
                continue
            role = status["role"]
            index = status["index"]
            uri = f"{run.run_prefix}/logs/{role}-{index}.log"
            put_text(s3, uri, format_replica_log(init_log, main_log))
            logs_written.append(uri)
        replicas.append(status or {"pod": name, "phase": "Gone"})

    model = summarise_prefix(s3, f"{run.run_prefix}/model")
    recovery = recover_model(api, s3, run, pods, model["objects"])
    if "recovery" in recovery:  # files were (maybe partly) copied: count again
        model = summarise_prefix(s3, f"{run.run_prefix}/model")
    model.update(recovery)
    uploaded_metrics = read_json_object(s3, f"{run.run_prefix}/metrics.json")
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
        "checkpoints": summarise_prefix(s3, f"{run.run_prefix}/checkpoints"),
        "bundle": bundle,
        "cluster_spec": cluster_spec,
        "replicas": replicas,
        "model": model,
        "metrics": uploaded_metrics if uploaded_metrics is not None else metrics,
        "logs": logs_written,
        "timings": {**timings, "archived_at": dt.datetime.now(dt.UTC).isoformat()},
    }
    put_text(
        s3,
        f"{run.run_prefix}/run.json",
        json.dumps(manifest, indent=2, sort_keys=True),
        "application/json",
    )
    return manifest
