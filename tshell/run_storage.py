"""A run's published files in S3: where they are, listing, reading and downloading them.

Why this exists: `tshell logs` and `tshell download` read what the pipeline's
`archive` task wrote under `<output>/runs/<dag_id>/<run_id>/` (architecture.md,
S3 layout; the same run id can exist in several DAGs). boto3 is imported only
when a command needs it; S3 failures become CommandErrors that name the bucket
and key.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

from tshell.config import TshellConfig
from tshell.run_errors import CommandError, ExitCode


def split_s3_url(url: str) -> tuple[str, str]:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise CommandError(
            f"output {url!r}: an s3://bucket/prefix URL is required", ExitCode.INVALID_REQUEST
        )
    return parsed.netloc, parsed.path.strip("/")


def run_output_prefix(
    run: dict[str, Any], output_override: str | None, described: dict[str, Any] | None = None
) -> tuple[str, str]:
    """(bucket, key prefix) of the run's published files: <output>/runs/<dag_id>/<run_id>/.

    `<output>` comes from --output, else the run's conf, else the request `validate`
    recorded (runs of request-file DAGs have an empty conf).
    """
    output = (
        output_override
        or (run.get("conf") or {}).get("output")
        or ((described or {}).get("request") or {}).get("output")
    )
    if not output:
        raise CommandError(
            f"run {run['dag_run_id']!r} has no 'output' in its conf; give it "
            f"with --output s3://bucket/prefix",
            ExitCode.NOT_FOUND,
        )
    bucket, prefix = split_s3_url(output)
    key = "/".join(p for p in (prefix, "runs", run["dag_id"], run["dag_run_id"]) if p)
    return bucket, key + "/"


def make_s3_client(config: TshellConfig) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=config.s3.endpoint_url,
        region_name=config.s3.region or "us-east-1",
        aws_access_key_id=config.s3.access_key,
        aws_secret_access_key=config.s3.secret_key,
    )


def list_s3_keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    from botocore.exceptions import BotoCoreError, ClientError

    keys: list[str] = []
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
    except ClientError as exc:
        raise CommandError(
            f"s3://{bucket}/{prefix}: {exc.response['Error'].get('Message', exc)}",
            ExitCode.NOT_FOUND,
        ) from None
    except BotoCoreError as exc:
        raise CommandError(
            f"S3 is not reachable for s3://{bucket}/{prefix}: {exc}", ExitCode.AIRFLOW_ERROR
        ) from None
    return keys


def download_prefix(s3: Any, bucket: str, prefix: str, target: Path) -> list[Path]:
    keys = list_s3_keys(s3, bucket, prefix)
    if not keys:
        raise CommandError(
            f"no objects under s3://{bucket}/{prefix}: the run has not archived "
            f"them (yet); `tshell status` shows how far it got",
            ExitCode.NOT_FOUND,
        )
    written = []
    for key in keys:
        relative = key[len(prefix) :]
        if not relative or relative.endswith("/"):
            continue
        destination = (target / relative).resolve()
        if not destination.is_relative_to(target.resolve()):
            raise CommandError(
                f"s3://{bucket}/{key}: refusing a key that leaves {target}", ExitCode.NOT_FOUND
            )
        destination.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, key, str(destination))
        written.append(destination)
    return written


def read_s3_text(s3: Any, bucket: str, key: str) -> str | None:
    from botocore.exceptions import ClientError

    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode(errors="replace")
    except ClientError as exc:
        if exc.response["Error"].get("Code") in ("NoSuchKey", "404", "NoSuchBucket"):
            return None
        raise
