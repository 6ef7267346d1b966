"""The archive task's work: what a run leaves in S3, whatever happened to it.

Runs before teardown (the pods and their logs still exist) whatever happened
to launch and train (a teardown task of fetch_bundle and launch), so a failed
run, even a gang that never started, is archived too:

- `<run prefix>/logs/<role>-<index>.log`: the replica's init container log and
  main container log, each under a header line (a pod still Pending with no
  log at all gets none);
- `<run prefix>/model/`: uploaded by the bootstrap; checked here (object
  count and bytes go into the manifest);
- `<run prefix>/run.json`: the run manifest (request, ClusterSpec, bundle
  identity, image, per-replica exit codes, timings, model, metrics, and
  whether launch got the gang running or why it failed).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from operators import kubeobjects
from operators.replicas import INIT_CONTAINER, MAIN_CONTAINER, read_replica_status
from operators.runinfo import RunInfo, request_as_dict
from operators.s3access import parse_s3_uri

RUN_MANIFEST_VERSION = 1


def format_replica_log(init_log: str, main_log: str) -> str:
    return (
        f"===== {INIT_CONTAINER} =====\n{init_log}"
        + ("" if init_log.endswith("\n") or not init_log else "\n")
        + f"===== {MAIN_CONTAINER} =====\n{main_log}"
    )


def summarise_prefix(s3: Any, uri: str) -> dict[str, Any]:
    """Object count and bytes under an S3 prefix."""
    bucket, key = parse_s3_uri(uri.rstrip("/") + "/")
    count = size = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
        for item in page.get("Contents", []):
            count += 1
            size += item["Size"]
    return {"uri": f"s3://{bucket}/{key}", "objects": count, "bytes": size}


def read_json_object(s3: Any, uri: str) -> Any:
    bucket, key = parse_s3_uri(uri)
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def put_text(s3: Any, uri: str, text: str, content_type: str = "text/plain") -> None:
    bucket, key = parse_s3_uri(uri)
    s3.put_object(Bucket=bucket, Key=key, Body=text.encode("utf-8"), ContentType=content_type)


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
) -> dict[str, Any]:
    """Write logs and run.json under the run's prefix; return the run manifest."""
    pods = {
        p["metadata"]["name"]: p
        for p in kubeobjects.list_run_pods(api, run.namespace, run.selector)
    }
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
