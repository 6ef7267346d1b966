"""Recovering a model from the owner pod's keeper container into S3.

The model-owning replica uploads its model itself (runtime/bootstrap.py). When
that upload fails (S3 down, a grant that expired) its main container exits 74
and the model is only in the pod's emptyDir, which teardown is about to
delete. The owner pod therefore runs a second container, `tfjob-keeper`
(runtime/keeper.py), that keeps running with the workspace mounted read-only.
`archive` asks it, over exec, what it holds (`keeper.py list`), copies each
file out in bounded chunks (`keeper.py read PATH OFFSET LENGTH`, base64 on
stdout), checks size and sha256, and uploads it with Airflow's own S3 client
to `<run prefix>/model/...` and `<run prefix>/metrics.json`.

`decide_recovery` is pure (pod dict in, decision out); the rest does I/O.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import json
import logging
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubernetes import client as k8s

from operators.errors import PipelineError
from operators.kubeobjects import exec_in_container
from operators.replicas import container_state
from operators.s3retry import call_with_s3_retries
from operators.settings import MODEL_RECOVERY_CHUNK_BYTES, MODEL_RECOVERY_EXEC_TIMEOUT_SECONDS
from runtime.protocol import EXIT_UPLOAD_FAILED, KEEPER_COMMAND, KEEPER_CONTAINER, MAIN_CONTAINER
from tfjob.jsontypes import JsonObject
from tfjob.runlayout import METRICS_FILE, MODEL_DIR, RunLayout

if TYPE_CHECKING:
    from botocore.client import BaseClient

log = logging.getLogger("airflow.task")


class RecoveryError(PipelineError, RuntimeError):
    """The model could not be copied out of the owner pod."""


class RecoveryAction(enum.StrEnum):
    RECOVER = "recover"
    SKIP = "skip"


@dataclass(frozen=True)
class RecoveryDecision:
    action: RecoveryAction
    reason: str


def decide_recovery(owner_pod: Mapping[str, object] | None, model_objects: int) -> RecoveryDecision:
    """Should archive copy the model out of the owner pod?

    Yes when its `tensorflow` container exited 74 (the upload failed, maybe
    half-way), or exited 0 while S3 holds no model, and its keeper still runs.
    """
    if owner_pod is None:
        return RecoveryDecision(RecoveryAction.SKIP, "the owner pod does not exist")
    main = container_state(owner_pod, MAIN_CONTAINER)
    exit_code = (main.get("terminated") or {}).get("exitCode")
    if exit_code == EXIT_UPLOAD_FAILED:
        why = f"{MAIN_CONTAINER} exited {EXIT_UPLOAD_FAILED} (model upload failed)"
    elif exit_code == 0 and model_objects == 0:
        why = f"{MAIN_CONTAINER} exited 0 but S3 holds no model"
    else:
        return RecoveryDecision(RecoveryAction.SKIP, "nothing to recover")
    if "running" not in container_state(owner_pod, KEEPER_CONTAINER):
        return RecoveryDecision(
            RecoveryAction.SKIP, f"{why}, but container {KEEPER_CONTAINER} is not running"
        )
    return RecoveryDecision(RecoveryAction.RECOVER, why)


def exec_keeper(
    api: k8s.CoreV1Api,
    namespace: str,
    pod: str,
    args: list[str],
    timeout: float = MODEL_RECOVERY_EXEC_TIMEOUT_SECONDS,
) -> str:
    """stdout of `python3 -m runtime.keeper <args>` in the pod's keeper container."""
    done = exec_in_container(
        api, namespace, pod, KEEPER_CONTAINER, [*KEEPER_COMMAND, *args], timeout
    )
    out, err, code = done.stdout, done.stderr, done.returncode
    what = f"pod {pod}: keeper.py {args[0]}"
    if code is None:
        raise RecoveryError(f"{what} did not finish within {timeout:g}s")
    if code != 0:
        raise RecoveryError(f"{what} exited with code {code}: {err.strip()}")
    return out


def list_keeper_files(api: k8s.CoreV1Api, namespace: str, pod: str) -> list[JsonObject]:
    """The keeper's `list`: [{"path", "size", "sha256"}], paths relative to the workspace."""
    text = exec_keeper(api, namespace, pod, ["list"])
    try:
        files = [
            {"path": str(e["path"]), "size": int(e["size"]), "sha256": str(e["sha256"])}
            for e in json.loads(text)["files"]
        ]
        for entry in files:
            path = entry["path"]
            parts = path.split("/")
            if not (path == METRICS_FILE or f"{parts[0]}/" == MODEL_DIR) or ".." in parts:
                raise ValueError(f"unexpected path {path!r}")
    except (ValueError, KeyError, TypeError) as exc:
        raise RecoveryError(f"pod {pod}: keeper.py list answered something else: {exc}") from None
    return files


def copy_keeper_file(
    api: k8s.CoreV1Api,
    namespace: str,
    pod: str,
    entry: Mapping[str, object],
    sink: Any,
    chunk_bytes: int = MODEL_RECOVERY_CHUNK_BYTES,
) -> None:
    """Write the file `entry` names into the binary file object `sink`, chunk by chunk."""
    digest = hashlib.sha256()
    size = int(entry["size"])
    offset = 0
    while offset < size:
        length = min(chunk_bytes, size - offset)
        text = exec_keeper(api, namespace, pod, ["read", entry["path"], str(offset), str(length)])
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise RecoveryError(
                f"pod {pod}: {entry['path']} at {offset}: not base64: {exc}"
            ) from None
        if not data:
            raise RecoveryError(f"pod {pod}: {entry['path']} ends at {offset}, not at {size}")
        sink.write(data)
        digest.update(data)
        offset += len(data)
    if offset != size or digest.hexdigest() != entry["sha256"]:
        raise RecoveryError(
            f"pod {pod}: {entry['path']}: copied {offset} bytes with sha256 "
            f"{digest.hexdigest()}; the keeper listed {size} bytes with {entry['sha256']}"
        )


def recover_model_from_pod(
    api: k8s.CoreV1Api,
    s3: BaseClient,
    namespace: str,
    pod: str,
    layout: RunLayout,
    chunk_bytes: int = MODEL_RECOVERY_CHUNK_BYTES,
) -> JsonObject:
    """Copy every file the keeper lists to `<run prefix>/<path>`; return {"files", "bytes", "keys"}.

    One file at a time goes through a temporary file on the worker's disk
    (bounded memory), is checked against the keeper's size and sha256, then
    uploaded (S3 errors retried).
    """
    bucket = layout.bucket
    files = list_keeper_files(api, namespace, pod)
    keys = []
    total = 0
    for entry in files:
        key = layout.file(entry["path"]).key
        with tempfile.TemporaryFile(prefix="tfjob-recovery-") as spool:
            copy_keeper_file(api, namespace, pod, entry, spool, chunk_bytes)

            def upload(spool: Any = spool, key: str = key) -> None:
                spool.seek(0)
                s3.upload_fileobj(spool, bucket, key)

            call_with_s3_retries(upload, f"put s3://{bucket}/{key}")
        log.info(
            "recovered %s (%d bytes, sha256 %s) from pod %s into s3://%s/%s",
            entry["path"],
            entry["size"],
            entry["sha256"],
            pod,
            bucket,
            key,
        )
        keys.append(f"s3://{bucket}/{key}")
        total += int(entry["size"])
    return {"files": len(keys), "bytes": total, "keys": keys}
