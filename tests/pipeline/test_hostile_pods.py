"""A tenant's own program stays in its box: hostile code of tenant `test` against tenant `research`.

The victim: tenant `research`'s objects in S3 (a model, `latest`, a bundle and a
run's snapshot under its prefixes) and a pod of one of its runs, which keeps a
file in its `/dev/shm` and `/var/tmp` and listens on TensorFlow's port 2222,
behind the NetworkPolicies `tshell tenants apply` and `launch` create. The
attacker: a program submitted through `tfjob_submit__test` and run by the real
pipeline (harness/hostile_program.py). Every attempt must be refused, what its own
grant allows must still work, and afterwards the victim's objects and files are
byte-for-byte what they were and nothing of the run is left.
"""

from __future__ import annotations

import json
import re
import secrets

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from kubernetes import utils as kube_utils
from kubernetes.client.rest import ApiException

from harness.hostile_program import write_hostile_bundle
from harness.pipeline_fixtures import run_keys, wait_for
from harness.repo_root import REPO_ROOT
from harness.world_fixtures import start_own_pipeline_world
from tfjob import naming
from tfjob.manifests import build_container_security_context, build_pod_security_context
from tfjob.tenants import (
    TENANTS_FILE_ENV,
    build_run_network_policy,
    build_tenant_manifests,
    load_tenants,
)

VICTIM = "research"
VICTIM_NAMESPACE = f"tfjob-{VICTIM}"
ATTACKER = "test"
VICTIM_RUN = f"victim-{secrets.token_hex(8)}"
VICTIM_SECRET_TEXT = "the victim's private bytes"
VICTIM_FILES = ("/dev/shm/victim.txt", "/var/tmp/victim.txt")
TF_PORT = 2222


@pytest.fixture(scope="module")
def pipeline_world(tmp_path_factory):  # type: ignore[no-untyped-def]
    """A world of this file's own: it applies the attacker's and the victim's tenant objects
    (quota, NetworkPolicy) to the world's namespaces."""
    yield from start_own_pipeline_world(tmp_path_factory)


VICTIM_POD_PROGRAM = f"""
import socket, sys, time
for path in {VICTIM_FILES!r}:
    with open(path, "w") as handle:
        handle.write({VICTIM_SECRET_TEXT!r})
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", {TF_PORT}))
server.listen(8)
print("victim listening", flush=True)
while True:
    peer, address = server.accept()
    print("VICTIM-ACCEPTED", address, flush=True)
    peer.close()
"""


def world_tenants(world):  # type: ignore[no-untyped-def]
    """The tenants file the world's Airflow reads (its network names the test S3's port)."""
    return load_tenants(world.env[TENANTS_FILE_ENV])


def apply_tenant_objects(world, tenant_name: str) -> None:  # type: ignore[no-untyped-def]
    """The tenant's Namespace, quota, ServiceAccount and default-deny NetworkPolicy, as
    `tshell tenants apply` creates them (a Namespace already there is kept)."""
    api_client = world.kube.core_v1().api_client
    config = world_tenants(world)
    tenant = config.find(tenant_name)
    assert tenant is not None
    for manifest in build_tenant_manifests(tenant, config.network):
        try:
            kube_utils.create_from_dict(api_client, manifest)
        except kube_utils.FailToCreateError as failure:
            if not all(
                isinstance(e, ApiException) and e.status == 409 for e in failure.api_exceptions
            ):
                raise


def start_victim_pod(world) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """A running pod of a research run (labels and run NetworkPolicy as launch makes them);
    returns (pod name, IP)."""
    api = world.kube.core_v1()
    config = world_tenants(world)
    dag_id, run_id = "tfjob_submit__research", "manual__v"
    labels = {
        **naming.run_labels("victim", VICTIM_RUN, VICTIM, naming.run_hash(dag_id, run_id)),
        naming.LABEL_ROLE: "worker",
    }
    annotations = {naming.ANNOTATION_DAG_ID: dag_id, naming.ANNOTATION_RUN_ID: run_id}
    policy = build_run_network_policy(
        VICTIM_NAMESPACE, VICTIM_RUN, labels, annotations, config.network
    )
    kube_utils.create_from_dict(api.api_client, policy)
    name = f"{VICTIM_RUN}-worker-0"
    security = build_pod_security_context(config.find(VICTIM).pod_user)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": security,
            "containers": [
                {
                    "name": "tensorflow",
                    "image": "python:3.11",
                    "command": ["python3", "-c", VICTIM_POD_PROGRAM],
                    "ports": [{"containerPort": TF_PORT}],
                    "securityContext": build_container_security_context(),
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                }
            ],
        },
    }
    api.create_namespaced_pod(VICTIM_NAMESPACE, pod)

    def listening() -> str | None:
        current = api.read_namespaced_pod(name, VICTIM_NAMESPACE)
        if current.status.phase != "Running" or not current.status.pod_ip:
            return None
        log = api.read_namespaced_pod_log(name, VICTIM_NAMESPACE, container="tensorflow")
        return current.status.pod_ip if "victim listening" in log else None

    return name, wait_for(listening, 120, "the victim pod listening on its port")


def read_victim_file(world, pod: str, path: str) -> str:  # type: ignore[no-untyped-def]
    from kubernetes.stream import stream

    api = world.kube.core_v1()
    return stream(
        api.connect_get_namespaced_pod_exec,
        pod,
        VICTIM_NAMESPACE,
        container="tensorflow",
        command=["cat", path],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )


def victim_objects(world) -> dict[str, bytes]:  # type: ignore[no-untyped-def]
    """Every object under the victim's prefixes in the world's bucket, with its bytes."""
    client = world.s3.client()
    found = {}
    for key in world.s3_keys(f"{VICTIM}/"):
        found[key] = client.get_object(Bucket=world.bucket, Key=key)["Body"].read()
    return found


def put_victim_objects(world) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The victim's model, `latest`, bundle and run snapshot; returns their keys."""
    run = f"{VICTIM}/outputs/victim/runs/tfjob_submit__research/manual__v/"
    keys = {
        "victim_model": run + "model/model.json",
        "victim_latest": f"{VICTIM}/outputs/victim/latest",
        "victim_bundle": f"{VICTIM}/bundles/victim.tar.gz",
        "victim_snapshot": run + "bundle.tar.gz",
        "victim_plant": run + "model/planted.txt",
        "victim_prefix": f"{VICTIM}/",
    }
    client = world.s3.client()
    for name in ("victim_model", "victim_latest", "victim_bundle", "victim_snapshot"):
        client.put_object(
            Bucket=world.bucket, Key=keys[name], Body=f"{name}: {secrets.token_hex(16)}".encode()
        )
    return keys


def parse_lines(log: str, kind: str) -> list[dict]:
    return [
        json.loads(line.split(" ", 1)[1])
        for line in log.splitlines()
        if line.startswith(kind + " ")
    ]


@pytest.fixture(scope="module")
def hostile_run(pipeline_world, tmp_path_factory):  # type: ignore[no-untyped-def]
    world = pipeline_world
    api = world.kube.core_v1()
    apply_tenant_objects(world, ATTACKER)
    apply_tenant_objects(world, VICTIM)
    keys = put_victim_objects(world)
    victim_pod, victim_ip = start_victim_pod(world)
    before = victim_objects(world)
    s3_state = world.home.parent / "s3-state"  # start_s3_server's default state dir
    targets = {
        **keys,
        "endpoint": world.s3.endpoint,
        "bucket": world.bucket,
        "victim_ip": victim_ip,
        "victim_port": TF_PORT,
        "victim_files": list(VICTIM_FILES),
        "keys": {
            "leaked admin key": [world.s3.access_key, world.s3.secret_key],
            "the old default key": ["tfjob-local", "tfjob-local-secret"],
            "a guessed pods key": [f"tfjob-pods-{ATTACKER}", secrets.token_urlsafe(24)],
            "a guessed key": ["AKIAIOSFODNN7EXAMPLE", secrets.token_urlsafe(24)],
        },
        "host_files": [
            str(REPO_ROOT / "deploy" / "tenants.yaml"),
            str(REPO_ROOT / "README.md"),
            str(REPO_ROOT / "tfjob" / "manifests.py"),
            str(s3_state / "credentials.json"),
            str(s3_state / "pod_identities.json"),
            str(s3_state / "server.log"),
            str(world.home / "airflow.cfg"),
            str(world.kube.state_dir) + "/kubeconfig",
            str(world.kube.state_dir) + "/token",
            "/etc/shadow",
        ],
        "host_dirs": [
            str(REPO_ROOT),
            str(REPO_ROOT / ".state"),
            str(world.home),
            str(world.kube.state_dir),
            "/var/lib",
            "/home",
            "/run/netns",
        ],
    }
    folder = tmp_path_factory.mktemp("hostile")
    bundle = write_hostile_bundle(folder, json.dumps(targets))
    world.s3.client().upload_file(str(bundle), world.bucket, "bundles/hostile.tar.gz")
    body = world.request("hostile", bundle=f"s3://{world.bucket}/bundles/hostile.tar.gz")
    try:
        result = world.run_submit(body)
        yield world, result, keys, before, victim_pod
    finally:
        api.delete_namespaced_pod(victim_pod, VICTIM_NAMESPACE, grace_period_seconds=0)


def test_every_hostile_attempt_from_a_tenant_pod_is_refused(hostile_run) -> None:
    world, result, _keys, _before, _victim = hostile_run
    assert result.state == "success", result
    prefix = run_keys(result, "hostile")
    logs = [key for key in world.s3_keys(prefix + "logs/") if key.endswith(".log")]
    log = "\n".join(world.s3_text(key) for key in logs)
    assert "HOSTILE-DONE" in log, log[-4000:]
    controls = parse_lines(log, "CONTROL")
    assert controls and all(c["outcome"] == "ok" for c in controls), controls
    attempts = parse_lines(log, "HOSTILE")
    allowed = [a for a in attempts if a["outcome"] != "refused"]
    assert not allowed, json.dumps(allowed, indent=1)
    # S3 refused them (an answer, 400 or 403), not a network that lost the request.
    s3_attempts = [a for a in attempts if ": " in a["attempt"] or a["attempt"].startswith("smug")]
    assert s3_attempts and all(a["detail"][:3] in ("400", "403") for a in s3_attempts), s3_attempts
    named = {a["attempt"] for a in attempts}
    for who in ("leaked admin key", "the old default key", "a guessed key", "a guessed pods key"):
        for what in ("GET the victim's model", "PUT into the victim's outputs", "list", "POST"):
            assert any(n.startswith(f"{who}: {what}") for n in named), (who, what, named)
    assert sum(n.startswith("smuggle:") for n in named) == 4
    assert "connect to the victim's pod" in named
    assert sum(n.startswith("read /") for n in named) >= 12


def test_the_victims_objects_files_and_port_are_untouched(hostile_run) -> None:
    world, result, keys, before, victim_pod = hostile_run
    after = victim_objects(world)
    assert after == before, sorted(set(after) ^ set(before)) or "an object's bytes changed"
    assert keys["victim_plant"] not in after
    for path in VICTIM_FILES:
        assert read_victim_file(world, victim_pod, path) == VICTIM_SECRET_TEXT
    api = world.kube.core_v1()
    log = api.read_namespaced_pod_log(victim_pod, VICTIM_NAMESPACE, container="tensorflow")
    assert "VICTIM-ACCEPTED" not in log
    # The smuggled key of the attacker's own prefix was not written either.
    prefix = run_keys(result, "hostile")
    stored = world.s3_keys(prefix + "model/")
    assert prefix + "model/smuggled.txt" not in stored
    assert prefix + "model/control.txt" in stored


def test_nothing_of_the_hostile_run_is_left(hostile_run) -> None:
    world, *_ = hostile_run
    wait_for(lambda: world.run_objects("hostile") == [], 60, "the hostile run's objects gone")


def host_client(world, access_key: str, secret_key: str):  # type: ignore[no-untyped-def]
    return boto3.client(
        "s3",
        endpoint_url=world.s3.endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=world.s3.region,
        config=Config(retries={"max_attempts": 1}),
    )


def test_header_authentication_on_the_host_listener_needs_the_real_secret(pipeline_world) -> None:
    world = pipeline_world
    wrong = host_client(world, world.s3.access_key, secrets.token_urlsafe(24))
    with pytest.raises(ClientError) as refused:
        wrong.list_objects_v2(Bucket=world.bucket)
    assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    with pytest.raises(ClientError) as refused:
        wrong.put_object(Bucket=world.bucket, Key=f"{VICTIM}/planted", Body=b"x")
    assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    made_up = host_client(world, "AKIAIOSFODNN7EXAMPLE", secrets.token_urlsafe(24))
    with pytest.raises(ClientError) as refused:
        made_up.get_object(Bucket=world.bucket, Key="bundles/standin.tar.gz")
    assert refused.value.response["Error"]["Code"] in ("InvalidAccessKeyId", "AccessDenied")
    # The real key still works: the refusals above are about the secret, nothing else.
    right = host_client(world, world.s3.access_key, world.s3.secret_key)
    assert right.head_object(Bucket=world.bucket, Key="bundles/standin.tar.gz")
    assert f"{VICTIM}/planted" not in world.s3_keys(f"{VICTIM}/")


def test_no_secret_of_the_local_s3_is_a_constant_of_the_source() -> None:
    text = "\n".join(
        path.read_text(errors="replace")
        for folder in ("scripts", "tests", "docs", "operators", "tshell", "localkube")
        for path in (REPO_ROOT / folder).rglob("*")
        if path.suffix in (".py", ".md", ".yaml", ".cfg", ".env", ".json") and path.is_file()
    )
    text += (REPO_ROOT / "README.md").read_text()
    found = re.findall(r"(?:secret_key|SECRET_KEY|password)\s*[=:]\s*['\"]([^'\"]{8,})['\"]", text)
    assert not [value for value in found if "{" not in value], found
