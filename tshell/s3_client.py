"""tshell's one way to S3: the client, and where a destination URL puts a file.

`upload` and `push` (pack_commands.py) talk to S3 directly; every other
command reads a run's files through Airflow (run_files.py), so this is the
only S3 client tshell makes. Endpoint, credentials and region come from
boto3's usual places (AWS_* environment, ~/.aws) and TSHELL_S3_ENDPOINT_URL,
or, with --aws-conn-id, from an Airflow AWS connection. boto3 is imported
when a client is made, so `tshell --help` stays fast.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tfjob.s3url import parse_s3_url

if TYPE_CHECKING:
    from botocore.client import BaseClient

ENDPOINT_VARIABLES = ("TSHELL_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL")
DESTINATION_SHAPE = "s3://bucket/prefix/ or s3://bucket/key"


def s3_destination(dest: str, file_name: str) -> tuple[str, str]:
    """`s3://b/prefix/` -> (b, prefix + file_name); `s3://b/key` -> (b, key)."""
    bucket, key = parse_s3_url(dest, "destination", DESTINATION_SHAPE)
    if not key or key.endswith("/"):
        key += file_name
    return bucket, key


def make_s3_client(aws_conn_id: str | None = None) -> BaseClient:
    """A boto3 S3 client from the usual places (or an Airflow connection)."""
    if aws_conn_id:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        return S3Hook(aws_conn_id=aws_conn_id).get_conn()
    import boto3
    from botocore.config import Config

    endpoint = next((os.environ[name] for name in ENDPOINT_VARIABLES if os.environ.get(name)), None)
    # Custom endpoints (MinIO, moto) rarely resolve virtual-hosted bucket names.
    config = Config(
        signature_version="s3v4",
        s3={"addressing_style": "path" if endpoint else "auto"},
        retries={"max_attempts": 5, "mode": "standard"},
    )
    return boto3.session.Session().client("s3", endpoint_url=endpoint, config=config)
