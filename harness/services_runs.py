"""Runs submitted to an embedded default started by `scripts/services.py up` in a state dir.

Why this exists: the tests that start the real services (not a pipeline world)
submit a stand-in run as a tenant's user would, with tshell and the credentials
`services.json` records; each wrote the same upload-and-submit steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import yaml

from harness.repo_root import REPO_ROOT
from harness.standin import write_standin_bundle
from scripts import airflow_server
from tfjob.tenants import TENANTS_FILE_ENV

STANDIN_KEY = "bundles/standin.tar.gz"


def submit_standin_run(
    state: Path, folder: Path, request: dict, tenants: Path | None = None
) -> tuple[str, str]:
    """Upload the stand-in bundle to STANDIN_KEY in the bucket of `request`'s output, then
    submit `request` with that bundle through tshell as test-user: (dag_id, run_id)."""
    record = json.loads((state / "services.json").read_text())
    s3 = record["s3"]
    bucket = request["output"].removeprefix("s3://").split("/", 1)[0]
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": s3["endpoint_url"],
        "AWS_ACCESS_KEY_ID": s3["access_key"],
        "AWS_SECRET_ACCESS_KEY": s3["secret_key"],
        "AWS_DEFAULT_REGION": s3["region"],
        "KUBECONFIG": record["localkube"]["kubeconfig"],
        "TSHELL_AIRFLOW_URL": record["airflow"]["url"],
        "TSHELL_USERNAME": "test-user",
        "TSHELL_PASSWORD": airflow_server.read_users(state / "airflow")["test-user"],
    }
    if tenants is not None:
        env[TENANTS_FILE_ENV] = str(tenants)
    client = boto3.client(
        "s3",
        endpoint_url=s3["endpoint_url"],
        region_name=s3["region"],
        aws_access_key_id=s3["access_key"],
        aws_secret_access_key=s3["secret_key"],
    )
    client.upload_file(str(write_standin_bundle(folder)), bucket, STANDIN_KEY)
    request = {**request, "bundle": f"s3://{bucket}/{STANDIN_KEY}"}
    (folder / "request.yaml").write_text(yaml.safe_dump(request))
    submitted = subprocess.run(
        [sys.executable, "-m", "tshell", "submit", str(folder / "request.yaml"), "--json"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    summary = json.loads(submitted.stdout)
    return summary["dag_id"], summary["run_id"]
