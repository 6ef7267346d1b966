"""Scoped, expiring S3 access for pods, made from a boto3 client.

Pods never hold cloud credentials. Airflow (with `S3Hook().get_conn()`) or
tshell (with a plain boto3 client) turns its own credentials into:

- a presigned GET URL for the run's bundle (`bundle_url` in the access Secret);
- a presigned POST policy (`upload.json`) whose conditions pin the bucket,
  require every key to start with `<output>/runs/<run_id>/`, cap the size of
  each file, and expire. The pod side (`runtime/transfer.py`) posts each file
  with the standard library only.

Both are credentials: callers put them in a Secret, never in a pod spec, a
log line or an XCom. Nothing here imports Airflow.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

UPLOAD_POLICY_VERSION = 1
DEFAULT_MAX_UPLOAD_FILE_BYTES = 5 * 1024**3  # S3's limit for a single POST
RUNS_DIR = "runs"


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/some/key` -> ("bucket", "some/key"); the key may be empty."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise ValueError(f"S3 URI: {uri!r} given; expected s3://<bucket>/<key>")
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError(f"S3 URI: {uri!r} given; the bucket name is missing (s3://<bucket>/<key>)")
    return bucket, key


def run_output_prefix(output_uri: str, run_id: str) -> tuple[str, str]:
    """(bucket, key prefix ending in '/') of a run's outputs: `<output>/runs/<run_id>/`."""
    if not run_id or "/" in run_id:
        raise ValueError(f"run_id: {run_id!r} given; a non-empty id without '/' is required")
    bucket, key = parse_s3_uri(output_uri)
    base = key.strip("/")
    prefix = f"{base}/{RUNS_DIR}/{run_id}/" if base else f"{RUNS_DIR}/{run_id}/"
    return bucket, prefix


def presign_bundle_url(s3_client: Any, bundle_uri: str, expires: int) -> str:
    """A presigned GET URL for the bundle at `bundle_uri`, valid for `expires` seconds."""
    bucket, key = parse_s3_uri(bundle_uri)
    if not key or key.endswith("/"):
        raise ValueError(f"bundle_uri: {bundle_uri!r} given; it must name an object, not a prefix")
    _check_expires(expires)
    return str(
        s3_client.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires
        )
    )


def presign_upload(
    s3_client: Any,
    output_uri: str,
    run_id: str,
    expires: int,
    max_file_bytes: int = DEFAULT_MAX_UPLOAD_FILE_BYTES,
) -> dict[str, Any]:
    """The content of upload.json: a presigned POST limited to the run's prefix.

    {"version", "method": "POST", "url", "fields", "bucket", "prefix", "expires_at"};
    the pod sets the form field `key` to `prefix + <relative name>` for each file.
    """
    _check_expires(expires)
    bucket, prefix = run_output_prefix(output_uri, run_id)
    # A Key ending in ${filename} makes botocore add ["starts-with", "$key", prefix]
    # instead of pinning one key.
    post = s3_client.generate_presigned_post(
        Bucket=bucket,
        Key=prefix + "${filename}",
        Conditions=[["content-length-range", 0, max_file_bytes]],
        ExpiresIn=expires,
    )
    expires_at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=expires)
    return {
        "version": UPLOAD_POLICY_VERSION,
        "method": "POST",
        "url": post["url"],
        "fields": dict(post["fields"]),
        "bucket": bucket,
        "prefix": prefix,
        "expires_at": expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _check_expires(expires: int) -> None:
    # SigV4 presigned URLs allow at most 7 days.
    if not isinstance(expires, int) or not 1 <= expires <= 7 * 24 * 3600:
        raise ValueError(f"expires: {expires!r} given; between 1 and 604800 seconds is allowed")
