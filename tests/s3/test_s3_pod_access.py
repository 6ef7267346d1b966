"""What a pod reaches at its 127.0.0.1:<S3 port>: the S3 server's pod-facing listener.

A real S3 server process and a real localkube whose pods get the S3 port relayed to
the pod-facing listener (`--forward PORT=127.0.0.2:PORT`, as scripts/services.py
wires it). From inside a pod a GET presigned by the tenant's pods identity works (its
URL names 127.0.0.1:PORT, as Airflow presigns it), while a URL presigned with the admin
key, the admin key itself (an Authorization header) and moto's /moto-api/ are refused.
Needs root.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from harness.localkube_fixtures import start_localkube, stop_localkube
from harness.s3_fixtures import S3Server

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the kubelet needs root"),
]

POD_TIMEOUT_S = 60.0

# Runs in the pod: four requests to the pod's own 127.0.0.1:<port>, their statuses as JSON.
POD_PROGRAM = """
import json, sys, urllib.error, urllib.request
url, admin_url, base = sys.argv[1], sys.argv[2], sys.argv[3]
def status(request):
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
print(json.dumps({
    "presigned": status(url),
    "admin_presigned": status(admin_url),
    "authorization": status(urllib.request.Request(
        base + "/tfjob-test/outputs/job/runs/dag/run-1/bundle.tar.gz",
        headers={"Authorization": "AWS4-HMAC-SHA256 Credential=tfjob-test-key/x"})),
    "moto_api": status(base + "/moto-api/data.json"),
}))
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server):
    handle = start_localkube(
        tmp_path_factory.mktemp("pods-s3"), forward_ports=(s3_server.pod_forward(),)
    )
    yield handle
    stop_localkube(handle)


def test_a_pod_gets_presigned_objects_but_not_the_key_or_the_moto_api(
    cluster, s3_server: S3Server
) -> None:
    key = "outputs/job/runs/dag/run-1/bundle.tar.gz"  # a run's snapshot: pods may read it
    s3_server.client().put_object(Bucket=s3_server.bucket, Key=key, Body=b"bundle")
    params = {"Bucket": s3_server.bucket, "Key": key}
    url = s3_server.pods_presigner("test").generate_presigned_url(
        "get_object", Params=params, ExpiresIn=120
    )
    admin_url = s3_server.presigner().generate_presigned_url(
        "get_object", Params=params, ExpiresIn=120
    )
    assert url.startswith(s3_server.endpoint)  # 127.0.0.1:PORT, the pod's own loopback
    v1 = cluster.core_v1()
    name = "s3-pod-access"
    container = {
        "name": "main",
        "image": "python:3.11",
        "command": ["python3", "-c", POD_PROGRAM, url, admin_url, s3_server.endpoint],
    }
    v1.create_namespaced_pod(
        "default",
        {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [container]}},
    )
    deadline = time.monotonic() + POD_TIMEOUT_S
    while (phase := v1.read_namespaced_pod(name, "default").status.phase) not in (
        "Succeeded",
        "Failed",
    ):
        assert time.monotonic() < deadline, f"pod still {phase} after {POD_TIMEOUT_S:.0f} s"
        time.sleep(0.2)
    log = v1.read_namespaced_pod_log(name, "default", _preload_content=False).data.decode()
    v1.delete_namespaced_pod(name, "default")
    assert phase == "Succeeded", log
    seen = json.loads(log.strip().splitlines()[-1])
    assert seen["presigned"] == [200, "bundle"]
    assert seen["admin_presigned"][0] == 403
    assert "only grants signed by a pods identity" in seen["admin_presigned"][1]
    assert seen["authorization"][0] == 403 and "Authorization header" in seen["authorization"][1]
    assert seen["moto_api"][0] == 403
    # The host's own listener still serves the key and /moto-api/.
    assert s3_server.client().get_object(Bucket=s3_server.bucket, Key=key)
