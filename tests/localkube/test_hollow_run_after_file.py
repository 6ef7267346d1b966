"""A simulated pod whose run waits for a file, through a real localkube (issue 18): its clock
starts only once the file is written into its simulated filesystem by exec, as a program that
waits for its ClusterSpec; the rule may come from the containers' environment."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes.stream import stream

from harness.localkube_fixtures import start_localkube, stop_localkube, wait_until

NODES = """
- name: sim-1
  simulated: true
  capacity: {cpu: "8", memory: 16Gi, pods: "110"}
"""
WAIT_S = 30.0


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory):
    directory = tmp_path_factory.mktemp("hollow-file")
    nodes = directory / "nodes.yaml"
    nodes.write_text(NODES)
    handle = start_localkube(directory, nodes_file=str(nodes))
    try:
        yield handle.core_v1()
    finally:
        stop_localkube(handle)


def read_phase(core, name: str) -> str:
    return core.read_namespaced_pod(name, "default").status.phase


def test_the_run_starts_once_the_file_is_delivered(core, tmp_path: Path) -> None:
    env = [
        {"name": "LOCALKUBE_SIMULATE_RUN_SECONDS", "value": "0.5"},
        {"name": "LOCALKUBE_SIMULATE_RUN_AFTER_FILE", "value": "/tfjob/config/cluster.json"},
    ]
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "waits"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "tensorflow",
                        "image": "busybox",
                        "env": env,
                        "volumeMounts": [{"name": "config", "mountPath": "/tfjob/config"}],
                    }
                ],
                "volumes": [{"name": "config", "emptyDir": {}}],
            },
        },
    )
    wait_until(lambda: read_phase(core, "waits") == "Running", WAIT_S, "pod Running")
    time.sleep(2.0)  # four times its run: without the file it must still run
    assert read_phase(core, "waits") == "Running"
    client = stream(
        core.connect_get_namespaced_pod_exec,
        "waits",
        "default",
        container="tensorflow",
        command=["sh", "-c", "echo {} > /tfjob/config/cluster.json"],
        stdout=True,
        stderr=True,
        stdin=False,
        tty=False,
        _preload_content=False,
    )
    client.run_forever(timeout=10)
    wait_until(lambda: read_phase(core, "waits") == "Succeeded", WAIT_S, "pod Succeeded")
