"""What the tests of the pod's checkpoint and summaries syncs share: starting the bootstrap,
waiting, reading S3, the credential check."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from harness.repo_root import REPO_ROOT
from harness.s3_fixtures import S3Server

REPO = REPO_ROOT
BOOTSTRAP = ("-m", "runtime.bootstrap")  # as protocol.BOOTSTRAP_COMMAND runs it
DAG = "tfjob__job"
DEADLINE_S = 30.0
POINTER_TEXT = 'model_checkpoint_path: "ckpt-{n}"\nall_model_checkpoint_paths: "ckpt-{n}"\n'


def wait_for(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def list_keys(server: S3Server, prefix: str) -> list[str]:
    answer = server.client().list_objects_v2(Bucket=server.bucket, Prefix=prefix)
    return sorted(o["Key"] for o in answer.get("Contents", []))


def read_object(server: S3Server, key: str) -> bytes | None:
    try:
        return server.client().get_object(Bucket=server.bucket, Key=key)["Body"].read()
    except server.client().exceptions.NoSuchKey:
        return None


def assert_no_credentials(text: str, *grants: dict) -> None:
    assert "X-Amz-Signature" not in text and "X-Amz-Credential" not in text
    for grant in grants:
        for fields in (g["fields"] for g in grant["grants"].values()):
            for value in (fields["policy"], fields["x-amz-signature"], fields["x-amz-credential"]):
                assert value not in text


def start_bootstrap(dirs: dict[str, Path], **extra: str) -> subprocess.Popen[str]:
    """The bootstrap running `prog.py` in dirs' workspace, with no ClusterSpec to wait for."""
    env = {
        "PATH": os.environ["PATH"],
        "TFJOB_WORKSPACE": str(dirs["workspace"]),
        "TFJOB_CONFIG_DIR": str(dirs["config"]),
        "TFJOB_ACCESS_DIR": str(dirs["access"]),
        "TFJOB_WAIT_CLUSTERSPEC": "0",
        **extra,
    }
    return subprocess.Popen(
        [sys.executable, "-I", *BOOTSTRAP, "--", sys.executable, "prog.py"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
