"""Scoped, expiring S3 access for pods, made from a boto3 client.

Pods never hold cloud credentials. Airflow turns its own credentials into
narrow grants, always signed with SigV4 (botocore signs with SigV2 in
us-east-1 unless the client says `s3v4`, and S3 refuses SigV2 for buckets
made since 2020; a client that would sign otherwise is refused here):

- a presigned GET URL for the run's bundle snapshot (`bundle_url`, in the
  Secret only the init containers mount);
- `upload.json` (in the Secret only the model owner's main container mounts):
  two presigned POST policies, one whose keys must start with
  `<run prefix>model/` and one for exactly `<run prefix>metrics.json`, where
  the run prefix is `<output>/runs/<dag_id>/<run_id>/`;
- `tensorboard-<role>-<index>.json` (in Secrets `<runkey>-tensorboard-<n>`, each mounted as
  `tensorboard.json` by its own replica's main container only): one
  presigned POST policy whose keys must start with that replica's
  `<run prefix>tensorboard/<role>-<index>/`. Nothing
  a pod holds can write the bundle snapshot, the logs or run.json: those are
  Airflow's. The pod side (`runtime/transfer.py`) posts each file with the
  standard library only.

Both are credentials: callers put them in a Secret, never in a pod spec, a
log line or an XCom. Nothing here imports Airflow.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from tfjob.jsontypes import JsonObject
from tfjob.runlayout import (
    CHECKPOINTS_DIR,
    METRICS_FILE,
    MODEL_DIR,
    RunLayout,
    replica_tensorboard_path,
)
from tfjob.s3url import parse_s3_url

if TYPE_CHECKING:
    from botocore.client import BaseClient

UPLOAD_POLICY_VERSION = 2
DEFAULT_MAX_UPLOAD_FILE_BYTES = 5 * 1024**3  # S3's limit for a single POST
SIGNATURE_VERSION = "s3v4"
MAX_PRESIGN_SECONDS = 7 * 24 * 3600  # SigV4's limit for a presigned request


def presign_bundle_url(s3_client: BaseClient, bundle_uri: str, expires: int) -> str:
    """A presigned GET URL for the bundle at `bundle_uri`, valid for `expires` seconds."""
    bucket, key = parse_s3_url(bundle_uri)
    if not key or key.endswith("/"):
        raise ValueError(f"bundle_uri: {bundle_uri!r} given; it must name an object, not a prefix")
    _check_expires(expires)
    url = str(
        s3_client.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires
        )
    )
    if "X-Amz-Signature=" not in url:
        raise _not_sigv4()
    return url


def presign_upload(
    s3_client: BaseClient,
    output_uri: str,
    dag_id: str,
    run_id: str,
    expires: int,
    max_file_bytes: int = DEFAULT_MAX_UPLOAD_FILE_BYTES,
) -> JsonObject:
    """The content of upload.json: the model owner's presigned POST policies.

    {"version": 2, "method": "POST", "url", "bucket", "prefix", "expires_at",
     "grants": {"model/": {"fields"}, "checkpoints/": {"fields"},
                "metrics.json": {"fields"}}}: the pod sets the form field `key` to
    `prefix + model/<relative name>` with the `model/` grant's fields (the same
    for `checkpoints/`), and `prefix + metrics.json` with the last one's.
    """
    _check_expires(expires)
    layout = RunLayout.for_run(output_uri, dag_id, run_id)
    size = ["content-length-range", 0, max_file_bytes]
    # A Key ending in ${filename} makes botocore add ["starts-with", "$key", ...]
    # instead of pinning one key.
    model = s3_client.generate_presigned_post(
        Bucket=layout.bucket,
        Key=layout.model.key + "${filename}",
        Conditions=[size],
        ExpiresIn=expires,
    )
    checkpoints = s3_client.generate_presigned_post(
        Bucket=layout.bucket,
        Key=layout.checkpoints.key + "${filename}",
        Conditions=[size],
        ExpiresIn=expires,
    )
    metrics = s3_client.generate_presigned_post(
        Bucket=layout.bucket, Key=layout.metrics.key, Conditions=[size], ExpiresIn=expires
    )
    # What the model owner may write under its run's prefix: key prefixes, one exact key.
    posts = {MODEL_DIR: model, CHECKPOINTS_DIR: checkpoints, METRICS_FILE: metrics}
    return build_upload_grants(layout, posts, expires)


def presign_tensorboard_upload(
    s3_client: BaseClient,
    output_uri: str,
    dag_id: str,
    run_id: str,
    replica: str,
    expires: int,
    max_file_bytes: int = DEFAULT_MAX_UPLOAD_FILE_BYTES,
) -> JsonObject:
    """One replica's tensorboard.json: upload.json's format, one grant, its own summaries folder.

    `replica` is `<role>-<index>`; the grant's name is `tensorboard/<replica>/`
    under `prefix`, and its policy requires the key to start with that folder.
    """
    _check_expires(expires)
    layout = RunLayout.for_run(output_uri, dag_id, run_id)
    folder = replica_tensorboard_path(replica)
    post = s3_client.generate_presigned_post(
        Bucket=layout.bucket,
        Key=layout.file(folder).key + "${filename}",
        Conditions=[["content-length-range", 0, max_file_bytes]],
        ExpiresIn=expires,
    )
    return build_upload_grants(layout, {folder: post}, expires)


def build_upload_grants(
    layout: RunLayout, posts: dict[str, JsonObject], expires: int
) -> JsonObject:
    """upload.json's format: one presigned POST per name under the run's prefix."""
    if not all("x-amz-signature" in post["fields"] for post in posts.values()):
        raise _not_sigv4()
    expires_at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=expires)
    return {
        "version": UPLOAD_POLICY_VERSION,
        "method": "POST",
        "url": next(iter(posts.values()))["url"],
        "bucket": layout.bucket,
        "prefix": layout.root.key,
        "grants": {name: {"fields": dict(post["fields"])} for name, post in posts.items()},
        "expires_at": expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _not_sigv4() -> ValueError:
    # botocore presigns with SigV2 in us-east-1 unless the client's Config names
    # s3v4 explicitly, and its config reads "s3v4" either way: judge the result.
    return ValueError(
        "the S3 client presigned without SigV4; presigned grants are SigV4 only "
        f"(make the client with botocore.config.Config(signature_version={SIGNATURE_VERSION!r}))"
    )


def _check_expires(expires: int) -> None:
    if not isinstance(expires, int) or not 1 <= expires <= MAX_PRESIGN_SECONDS:
        raise ValueError(
            f"expires: {expires!r} given; between 1 and {MAX_PRESIGN_SECONDS} seconds is allowed"
        )
