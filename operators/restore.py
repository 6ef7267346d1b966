"""Staging a gang's restore: list checkpoints in S3, sign a GET for each, hand them over.

Why this exists: before a gang's programs start, each replica's init
container fills `CHECKPOINT_DIR` from `restore.json` in the run's access
Secret (docs/architecture.md, "The pod protocol"). Airflow writes that file,
because pods hold no credentials of their own: it lists the checkpoints with
the run's tenant's S3 connection and signs one GET per object, nothing wider,
with the tenant's pods-only identity (`presign_conn_id`, operators/grants.py).

Two callers: a gang restart restores the run's own `checkpoints/`
(operators/restart.py), after the failed gang is gone (its owner's last sync
runs within its grace period); `launch` restores a warm start's before the
first gang. The choice of files and the limits are tfjob/checkpoints.py.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubernetes import client as k8s

from operators.errors import PipelineError
from operators.grants import find_presign_conn_id, make_presigning_client
from operators.latest import read_latest
from operators.runinfo import RunInfo
from operators.s3retry import call_with_s3_retries
from runtime.protocol import RESTORE_FILE
from tfjob import naming
from tfjob.checkpoints import (
    MAX_POINTER_BYTES,
    MAX_RESTORE_FILES,
    build_empty_restore,
    build_restore_document,
    find_pointer,
    parse_checkpoint_step,
    select_checkpoint_files,
)
from tfjob.jsontypes import JsonObject
from tfjob.request.recovery import WARM_START_LATEST
from tfjob.runlayout import RunLayout, S3Path, locate_output_latest, locate_output_runs

if TYPE_CHECKING:
    from botocore.client import BaseClient

log = logging.getLogger("airflow.task")


@dataclass(frozen=True)
class StagedRestore:
    """What a gang will restore: restore.json's content, and what to say about it."""

    document: JsonObject
    source: str | None  # s3:// URI of the checkpoints prefix; None when nothing to restore
    step: int | None
    files: int
    size: int

    def describe(self) -> str:
        if not self.files:
            return "no checkpoint to restore: the programs start from scratch"
        step = f"step {self.step}" if self.step is not None else "step unknown"
        return (
            f"restoring {self.files} checkpoint files ({self.size} bytes, {step}) "
            f"from {self.source}"
        )


def list_objects(s3: BaseClient, bucket: str, prefix: str) -> list[tuple[str, int]]:
    """(key, size) under prefix; stops one past MAX_RESTORE_FILES (enough to refuse)."""

    def page_through() -> list[tuple[str, int]]:
        found: list[tuple[str, int]] = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            found.extend((item["Key"], int(item["Size"])) for item in page.get("Contents", []))
            if len(found) > MAX_RESTORE_FILES:
                break
        return found

    return call_with_s3_retries(page_through, f"list s3://{bucket}/{prefix}")


def read_pointer_step(s3: BaseClient, bucket: str, key: str, size: int) -> int | None:
    """The step the `checkpoint` pointer names; None when it is too large or names none."""
    if size > MAX_POINTER_BYTES:
        return None
    body = call_with_s3_retries(
        lambda: s3.get_object(Bucket=bucket, Key=key)["Body"].read(MAX_POINTER_BYTES + 1),
        f"get s3://{bucket}/{key}",
    )
    return parse_checkpoint_step(body[:MAX_POINTER_BYTES].decode("utf-8", "replace"))


def stage_checkpoints(s3: BaseClient, signer: Any, source: S3Path, expires: int) -> StagedRestore:
    """restore.json for the checkpoints under the folder `source`.

    RestoreTooLarge (tfjob.checkpoints) when they are over the limits.
    """
    bucket, prefix = source.bucket, source.key
    files = select_checkpoint_files(list_objects(s3, bucket, prefix), prefix)
    if not files:
        return StagedRestore(build_empty_restore(), None, None, 0, 0)
    pointer = find_pointer(files)
    step = read_pointer_step(s3, bucket, pointer.key, pointer.size) if pointer else None
    urls = {
        item.key: signer.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": item.key}, ExpiresIn=expires
        )
        for item in files
    }
    return StagedRestore(
        build_restore_document(source.uri, step, files, urls),
        source.uri,
        step,
        len(files),
        sum(item.size for item in files),
    )


def stage_run_checkpoints(run: RunInfo, source: S3Path, expires: int) -> StagedRestore:
    """`stage_checkpoints` with the run's tenant's S3 connection (listing and signing)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    s3 = S3Hook(aws_conn_id=run.aws_conn_id).get_conn()
    return stage_checkpoints(s3, make_presigning_client(find_presign_conn_id(run)), source, expires)


class WarmStartError(PipelineError, ValueError):
    """The warm start the request names cannot be had; the run starts nothing."""


def find_warm_start_source(s3: BaseClient, run: RunInfo) -> S3Path | None:
    """The checkpoints folder the request's `warm_start` names; None when none is asked
    for, or for `latest` when the output has no published run yet.

    `latest` is the run `<output>/latest` points to (operators/latest.py); it must lie
    under this output's `runs/`. A run id names a run of this DAG.
    """
    wanted = run.request.warm_start
    if wanted is None:
        return None
    output = run.request.output
    if wanted != WARM_START_LATEST:
        return RunLayout.for_run(output, run.dag_id, wanted).checkpoints
    latest, runs = locate_output_latest(output), locate_output_runs(output)
    pointer, _ = read_latest(s3, latest)
    if pointer is None:
        return None
    published = pointer.get("run") if isinstance(pointer, dict) else None
    if not isinstance(published, str) or not published.startswith(runs.uri):
        raise WarmStartError(
            f"warm_start: {WARM_START_LATEST!r} given, but {latest.uri} names no run "
            f"under {runs.uri} ({str(published)[:200]!r}); publish a run first or name one"
        )
    return RunLayout.parse(published).checkpoints


def stage_warm_start(run: RunInfo, expires: int) -> StagedRestore | None:
    """What the first gang restores for `warm_start` (the tenant's S3 connection); None
    when nothing is asked for or `latest` has nothing yet. WarmStartError when a run named
    by id has no checkpoints, RestoreTooLarge when they are over the limits."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    s3 = S3Hook(aws_conn_id=run.aws_conn_id).get_conn()
    source = find_warm_start_source(s3, run)
    if source is None:
        return None
    signer = make_presigning_client(find_presign_conn_id(run))
    staged = stage_checkpoints(s3, signer, source, expires)
    if not staged.files and run.request.warm_start != WARM_START_LATEST:
        raise WarmStartError(
            f"warm_start: run {run.request.warm_start!r} given, but {source} holds no "
            "checkpoint; name a run whose model owner wrote to CHECKPOINT_DIR, or 'latest'"
        )
    return staged


def write_restore(api: k8s.CoreV1Api, run: RunInfo, staged: StagedRestore) -> None:
    """Put restore.json into the run's access Secret (the next gang's init containers read it)."""
    text = json.dumps(staged.document, sort_keys=True)
    patch = {"data": {RESTORE_FILE: base64.b64encode(text.encode()).decode("ascii")}}
    api.patch_namespaced_secret(naming.secret_name(run.run_key), run.namespace, patch)


__all__ = [
    "StagedRestore",
    "WarmStartError",
    "find_warm_start_source",
    "stage_checkpoints",
    "stage_run_checkpoints",
    "stage_warm_start",
    "write_restore",
]
