"""What one try of a run writes under the run's prefix, and clearing it before a new try.

A run's prefix `<output>/runs/<dag_id>/<run_id>/` outlives a try: a cleared
DAG run keeps its run_id, so a try that trains nothing would otherwise find the
model and metrics of an earlier try, and `publish` would publish them. Every
try therefore starts by removing the outputs a try writes: `model/` and
`metrics.json` (by the model owner's bootstrap, or by archive when it
recovers them from the pod), and `checkpoints/` (the owner's bootstrap):
a new try trains from scratch (or from its warm start), while a gang
restart within a try keeps them to resume from. Nothing else is touched: the bundle snapshot,
the logs and run.json are Airflow's and are rewritten by each try anyway, and the
replicas' summaries (`tensorboard/`) are the whole run's: a restarted replica's new
event files land beside the earlier ones.

`fetch_bundle` clears them (a cleared run re-runs it), and `launch` does
again right before it creates pods, once an earlier try's pods are gone.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from operators.errors import PipelineError
from operators.s3retry import call_with_s3_retries
from tfjob.jsontypes import JsonObject
from tfjob.runlayout import CHECKPOINTS_DIR, METRICS_FILE, MODEL_DIR, RunLayout

if TYPE_CHECKING:
    from botocore.client import BaseClient

log = logging.getLogger("airflow.task")

# DeleteObjects takes at most 1000 keys per call.
DELETE_BATCH = 1000


class ClearFailed(PipelineError, RuntimeError):
    """S3 refused to delete some of an earlier try's outputs."""


def clear_run_outputs(s3: BaseClient, layout: RunLayout, *, checkpoints: bool = False) -> list[str]:
    """Delete `<run_prefix>/model/` and `<run_prefix>/metrics.json`, and with `checkpoints`
    also `<run_prefix>/checkpoints/` (a new try's, not a gang restart's); return the
    deleted keys.

    Deleting what is not there is no error (a first try deletes nothing).
    S3 errors are retried (operators.s3retry).
    """
    bucket, model_prefix, metrics_key = layout.bucket, layout.model.key, layout.metrics.key
    prefixes = [model_prefix]
    if checkpoints:
        prefixes.append(layout.checkpoints.key)

    def list_keys() -> list[str]:
        keys = []
        for prefix in prefixes:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                keys.extend(item["Key"] for item in page.get("Contents", []))
        return keys

    def metrics_exists() -> bool:
        answer = s3.list_objects_v2(Bucket=bucket, Prefix=metrics_key, MaxKeys=1)
        return any(item["Key"] == metrics_key for item in answer.get("Contents", []))

    where = f"s3://{bucket}/"
    keys = call_with_s3_retries(list_keys, f"list {where}{model_prefix}")
    if call_with_s3_retries(metrics_exists, f"look up {where}{metrics_key}"):
        keys.append(metrics_key)
    for start in range(0, len(keys), DELETE_BATCH):
        batch = keys[start : start + DELETE_BATCH]

        def delete(batch: list[str] = batch) -> JsonObject:
            return s3.delete_objects(
                Bucket=bucket,
                Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True},
            )

        answer = call_with_s3_retries(delete, f"delete {len(batch)} object(s) under {where}")
        errors = answer.get("Errors") or []
        if errors:
            first = errors[0]
            raise ClearFailed(
                f"clearing the outputs of an earlier try under {layout.uri}: S3 refused to delete "
                f"{len(errors)} object(s), e.g. {first.get('Key')}: {first.get('Code')} "
                f"{first.get('Message')}"
            )
    if keys:
        log.info(
            "cleared %d object(s) an earlier try left under %s (%s, %s%s)",
            len(keys),
            layout.uri,
            MODEL_DIR,
            METRICS_FILE,
            f", {CHECKPOINTS_DIR}" if checkpoints else "",
        )
    return keys
