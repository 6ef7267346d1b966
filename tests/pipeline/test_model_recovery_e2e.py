"""End to end through localkube and the S3 server: an owner pod whose upload fails keeps
its model in the keeper container, and archive copies it into S3 byte for byte.

The pod is the one launch would create (tfjob.manifests), its runtime files the real
runtime/*.py; only its upload grant points at a closed port (S3 "down" for the pod), so
the bootstrap exits 74. archive_run then execs into the keeper through the real API server.
"""

from __future__ import annotations

import hashlib
import json
import socket
import textwrap
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from harness.localkube_fixtures import start_localkube, stop_localkube
from harness.repo_root import REPO_ROOT
from harness.s3_fixtures import start_s3_server, stop_s3_server
from harness.tfjob_fixtures import valid_request_data
from operators.archive import archive_run
from operators.launch import read_runtime_files
from operators.runinfo import describe_run, read_run
from operators.s3access import presign_bundle_url, presign_tensorboard_upload, presign_upload
from runtime.bundle import write_bundle
from runtime.protocol import KEEPER_CONTAINER
from tfjob import naming
from tfjob.manifests import build_pod_manifest, build_runtime_configmap
from tfjob.request.model import Role, load_request

pytestmark = [pytest.mark.e2e, pytest.mark.root]

REPO = REPO_ROOT
RUN_ID = "manual__2026-12-03T09:00:00+00:00"
BIG_SIZE = 5 * 2**20 + 12345  # more than one 4 MiB chunk

PROGRAM = textwrap.dedent(
    f"""
    import hashlib, json, os
    def stream(seed, size):
        out, block = bytearray(), hashlib.sha256(seed).digest()
        while len(out) < size:
            block = hashlib.sha256(block).digest()
            out += block
        return bytes(out[:size])
    model = os.environ["MODEL_DIR"]
    os.makedirs(os.path.join(model, "variables"), exist_ok=True)
    open(os.path.join(model, "big.bin"), "wb").write(stream(b"big", {BIG_SIZE}))
    open(os.path.join(model, "variables", "small.txt"), "wb").write(b"small file\\n")
    json.dump({{"accuracy": 0.93}}, open(os.environ["METRICS_FILE"], "w"))
    print("trained", flush=True)
    """
)


def expected_stream(seed: bytes, size: int) -> bytes:
    out, block = bytearray(), hashlib.sha256(seed).digest()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def container_states(pod: Any) -> dict[str, Any]:
    return {s.name: s.state for s in (pod.status.container_statuses or [])}


def test_archive_recovers_the_model_an_owner_could_not_upload(tmp_path: Path) -> None:
    s3_info, s3_process = start_s3_server(tmp_path)
    port = int(s3_info.endpoint.rsplit(":", 1)[1].strip("/"))
    kube = None
    try:
        kube = start_localkube(tmp_path, forward_ports=(port,))
        s3 = s3_info.client()
        signer = boto3.client(
            "s3",
            endpoint_url=s3_info.endpoint,
            aws_access_key_id=s3_info.access_key,
            aws_secret_access_key=s3_info.secret_key,
            region_name=s3_info.region,
            config=Config(signature_version="s3v4"),
        )
        bucket = s3_info.bucket
        src = tmp_path / "src"
        (src / "code").mkdir(parents=True)
        (src / "code" / "train.py").write_text(PROGRAM)
        write_bundle(src, tmp_path / "bundle.tar.gz", "keeper-e2e")
        s3.upload_file(str(tmp_path / "bundle.tar.gz"), bucket, "bundles/keeper.tar.gz")

        request = load_request(
            valid_request_data(
                name="keeper",
                image="python:3.11",
                bundle=f"s3://{bucket}/bundles/keeper.tar.gz",
                output=f"s3://{bucket}/outputs/keeper",
                startup_timeout=60,
                active_deadline=300,
                resources={"worker": {"cpu": "200m", "memory": "256Mi"}},
            )
        )
        run = read_run(describe_run(request, RUN_ID, "tfjob__keeper", "aws_default"))
        identity = run.identity()
        api = kube.core_v1()
        api.create_namespace({"metadata": {"name": run.namespace}})

        pod = build_pod_manifest(request, identity, Role.WORKER, 0)
        main = pod["spec"]["containers"][0]
        # S3 is "down" for the pod: its grant points at a port nobody listens on.
        upload = presign_upload(signer, request.output, run.dag_id, RUN_ID, 3600)
        upload["url"] = f"http://127.0.0.1:{closed_port()}/{bucket}"
        main["env"] = [e for e in main["env"] if e["name"] != "TFJOB_UPLOAD_PATIENCE"]
        main["env"].append({"name": "TFJOB_UPLOAD_PATIENCE", "value": "2"})
        summaries = presign_tensorboard_upload(
            signer, request.output, run.dag_id, RUN_ID, "worker-0", 3600
        )
        summaries["url"] = upload["url"]
        access = {
            "bundle_url": presign_bundle_url(signer, request.bundle, 3600),
            "upload.json": json.dumps(upload),
            naming.tensorboard_grant_key("worker-0"): json.dumps(summaries),
        }
        secrets = [v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v]
        secrets += [
            source["secret"]["name"]
            for volume in pod["spec"]["volumes"]
            for source in volume.get("projected", {}).get("sources", [])
            if "secret" in source
        ]
        for secret in secrets:  # every Secret the pod mounts, whatever its split
            api.create_namespaced_secret(
                run.namespace,
                {
                    "metadata": {
                        "name": secret,
                        "labels": naming.run_labels(
                            request.name, run.run_key, request.tenant, run.run_hash
                        ),
                    },
                    "stringData": access,
                },
            )
        api.create_namespaced_config_map(
            run.namespace, build_runtime_configmap(identity, read_runtime_files(), request.tenant)
        )
        api.create_namespaced_pod(run.namespace, pod)
        name = pod["metadata"]["name"]

        def main_ended() -> Any:
            live = api.read_namespaced_pod(name, run.namespace)
            states = container_states(live)
            if live.status.phase == "Failed":
                raise AssertionError(f"pod failed: {live.status}")
            ended = states.get("tensorflow") and states["tensorflow"].terminated
            return live if ended else None

        live = wait_for(main_ended, 120, "the tensorflow container to end")
        states = container_states(live)
        log = api.read_namespaced_pod_log(name, run.namespace, container="tensorflow")
        assert states["tensorflow"].terminated.exit_code == 74, log
        assert "model upload failed" in log
        assert states[KEEPER_CONTAINER].running is not None
        assert live.status.phase == "Running"  # the keeper holds the pod
        prefix = f"outputs/keeper/runs/tfjob__keeper/{RUN_ID}/"
        assert run.layout.uri == f"s3://{bucket}/{prefix.rstrip('/')}"
        assert s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}model/").get("KeyCount") == 0

        manifest = archive_run(
            api,
            s3,
            run,
            bundle=None,
            cluster_spec=None,
            train_replicas=None,
            metrics=None,
            timings={},
        )

        assert manifest["model"]["recovered_from_pod"] is True
        assert manifest["model"]["objects"] == 2
        assert manifest["replicas"][0]["exit_code"] == 74
        assert manifest["replicas"][0]["phase"] == "Failed"

        def body(key: str) -> bytes:
            return s3.get_object(Bucket=bucket, Key=prefix + key)["Body"].read()

        assert body("model/big.bin") == expected_stream(b"big", BIG_SIZE)
        assert body("model/variables/small.txt") == b"small file\n"
        assert json.loads(body("metrics.json")) == {"accuracy": 0.93}
        assert json.loads(body("run.json"))["model"]["recovered_from_pod"] is True
        assert "model upload failed" in body("logs/worker-0.log").decode()

        # Teardown: the keeper exits on SIGTERM, so the pod goes well within its grace period.
        started = time.monotonic()
        api.delete_namespaced_pod(name, run.namespace, grace_period_seconds=30)
        wait_for(lambda: not api.list_namespaced_pod(run.namespace).items, 60, "pod deletion")
        assert time.monotonic() - started < 20
    finally:
        if kube is not None:
            stop_localkube(kube)
        stop_s3_server(s3_process)
