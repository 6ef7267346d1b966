"""ClusterSpec delivery into real localkube pods: every replica gets its own cluster.json,
written by the contract's exec, in parallel, and a failure names the pod."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid

import pytest

from operators import delivery
from operators.delivery import DeliveryError, deliver_cluster_files

READY_TIMEOUT_S = 60.0
NAMESPACE = "default"


def make_replica_pod(name: str) -> dict:
    """A pod shaped like a replica's: container `tensorflow`, /tfjob/config an emptyDir."""
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "tensorflow",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", "sleep 300"],
                    "volumeMounts": [{"name": "tfjob-config", "mountPath": "/tfjob/config"}],
                }
            ],
            "volumes": [{"name": "tfjob-config", "emptyDir": {}}],
            "terminationGracePeriodSeconds": 1,
        },
    }


def await_running(core, names: list[str]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        phases = {
            p.metadata.name: p.status.phase for p in core.list_namespaced_pod(NAMESPACE).items
        }
        if all(phases.get(name) == "Running" for name in names):
            return
        time.sleep(0.2)
    raise AssertionError(f"pods not Running within {READY_TIMEOUT_S}s: {phases}")


def read_cluster_file(core, pod: str) -> str:
    from kubernetes.stream import stream

    # the preloading form hands back a repr of the parsed JSON, not the bytes: read the channel
    client = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        NAMESPACE,
        command=["cat", "/tfjob/config/cluster.json"],
        container="tensorflow",
        stderr=True,
        stdout=True,
        stdin=False,
        tty=False,
        _preload_content=False,
    )
    try:
        client.run_forever(timeout=10)
        return client.read_stdout()
    finally:
        client.close()


@pytest.fixture
def replica_pods(localkube):
    core = localkube.core_v1()
    tag = uuid.uuid4().hex[:6]
    names = [f"job-{tag}-worker-{i}" for i in range(6)]
    for name in names:
        core.create_namespaced_pod(NAMESPACE, make_replica_pod(name))
    await_running(core, names)
    return core, names


def test_every_replica_gets_its_own_cluster_file_through_parallel_execs(replica_pods, monkeypatch):
    core, names = replica_pods
    contents = {
        name: json.dumps({"tf_config": {"task": {"index": i}}, "pod": name})
        for i, name in enumerate(names)
    }
    lock, running, most = threading.Lock(), [0], [0]
    deliver_one = delivery.deliver_cluster_file

    def counting(api, namespace, pod, content):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            deliver_one(api, namespace, pod, content)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(delivery, "deliver_cluster_file", counting)
    deliver_cluster_files(core, NAMESPACE, contents, workers=3)
    for name in names:
        assert json.loads(read_cluster_file(core, name)) == json.loads(contents[name])
    assert 2 <= most[0] <= 3, f"at most 3 execs at once were allowed, {most[0]} seen"
    # the caller's client still makes plain REST calls (stream() did not leave it patched)
    assert core.read_namespaced_pod(names[0], NAMESPACE).metadata.name == names[0]


def test_a_failed_delivery_names_the_pod_and_the_others_still_get_theirs(replica_pods):
    core, names = replica_pods
    contents = {name: json.dumps({"pod": name}) for name in names[:3]}
    contents["job-missing-ps-0"] = "{}"
    with pytest.raises(DeliveryError) as error:
        deliver_cluster_files(core, NAMESPACE, contents, workers=4)
    message = str(error.value)
    assert "job-missing-ps-0" in message and "3 of 4 pods" in message
    assert not any(name in message for name in names[:3])
    for name in names[:3]:
        assert json.loads(read_cluster_file(core, name)) == {"pod": name}


def test_a_delivery_whose_first_execs_meet_an_api_outage_is_retried_until_it_lands(
    replica_pods, localkube, monkeypatch
):
    # localkube's outage switch: the API server answers 503 to everything for 6 s (as a real
    # one does while its storage elects a leader); the delivery starts inside it. Retries
    # after 1, 2 and 4 s: the third lands after the outage.
    core, names = replica_pods
    contents = {name: json.dumps({"pod": name}) for name in names}
    tries: dict[str, int] = {}
    deliver_one = delivery.deliver_cluster_file

    def counting(api, namespace, pod, content):
        tries[pod] = tries.get(pod, 0) + 1
        deliver_one(api, namespace, pod, content)

    monkeypatch.setattr(delivery, "deliver_cluster_file", counting)
    blinked = subprocess.run(
        [
            sys.executable,
            "-m",
            "localkube",
            "blink",
            "--state-dir",
            localkube.state_dir,
            "--seconds",
            "6",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert blinked.returncode == 0, blinked.stderr
    deliver_cluster_files(core, NAMESPACE, contents, workers=3)
    assert max(tries.values()) >= 2, tries  # at least the first execs met the 503s
    for name in names:
        assert json.loads(read_cluster_file(core, name)) == {"pod": name}


def test_a_write_that_fails_in_the_container_reports_its_exit_code(localkube):
    core = localkube.core_v1()
    name = f"job-{uuid.uuid4().hex[:6]}-chief-0"
    pod = make_replica_pod(name)
    del pod["spec"]["containers"][0]["volumeMounts"], pod["spec"]["volumes"]
    core.create_namespaced_pod(NAMESPACE, pod)
    await_running(core, [name])
    with pytest.raises(DeliveryError, match=rf"pod {name}: writing cluster.json exited with code"):
        deliver_cluster_files(core, NAMESPACE, {name: "{}", name + "x": "{}"}, workers=2)


def test_workers_below_one_are_refused():
    with pytest.raises(ValueError, match="workers: 0 given"):
        deliver_cluster_files(None, NAMESPACE, {"p": "{}"}, workers=0)
