"""A gang at scale (issue 18): creates in a bounded pool, the gang-start verdict kept
incrementally, a run's objects deleted by one deletecollection per kind.

The unit tests use fakes; the end-to-end test drives the same code against a real localkube
of simulated nodes (localkube/README.md, "Simulated nodes"): its pods are created in
parallel, start, get their ClusterSpec by exec, and are stopped with their grace period.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from harness.localkube_fixtures import start_localkube, stop_localkube
from operators import gang, kubeobjects, runobjects
from operators.gang import GangStartTracker, create_replica_pods
from operators.replicas import GangState, judge_gang_start

log = logging.getLogger(__name__)
RUNNING = {"running": {"startedAt": "2026-12-04T12:00:00Z"}}


def make_pod(
    name: str,
    version: int,
    phase: str = "Pending",
    ip: str | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if ip:
        status["podIP"] = ip
        status["containerStatuses"] = [{"name": "tensorflow", "state": RUNNING}]
    if reason:
        status["reason"] = reason
    role, index = name.rsplit("-", 2)[-2:]
    return {
        "metadata": {
            "name": name,
            "resourceVersion": str(version),
            "labels": {"tfjob.io/role": role, "tfjob.io/index": index},
        },
        "spec": {"nodeName": "n"},
        "status": status,
    }


def test_the_tracker_agrees_with_the_whole_gang_verdict_after_every_change():
    expected = [f"job-ab-worker-{i}" for i in range(4)]
    tracker = GangStartTracker(expected)
    pods: dict[str, dict[str, Any]] = {}
    version = 0

    def change(name: str, **status: Any) -> None:
        nonlocal version
        version += 1
        pods[name] = make_pod(name, version, **status)

    for name in expected:  # launch creates every pod before it watches
        change(name)
    steps = [
        lambda: change(expected[1]),
        lambda: change(expected[0], phase="Running", ip="10.0.0.1"),
        lambda: change(expected[2], phase="Running", ip="10.0.0.2"),
        lambda: change(expected[3], phase="Running", ip="10.0.0.3"),
        lambda: pods.pop(expected[2]),  # deleted after it was seen: the start failed
        lambda: change(expected[2], phase="Running", ip="10.0.0.4"),  # back: judged again
        lambda: change(expected[1], phase="Running", ip="10.0.0.5"),  # all ready
        lambda: change(expected[1], phase="Failed", reason="Evicted"),  # one failed
        lambda: change(expected[1], phase="Running", ip="10.0.0.6"),  # ready again
    ]
    verdicts = []
    for step in steps:
        step()
        listed = list(pods.values())
        settled = tracker.settled(listed)
        whole = judge_gang_start(listed, expected, tracker.vanished).state
        assert settled == (whole is not GangState.STARTING)
        verdicts.append(whole)
    S, F, R = GangState.STARTING, GangState.FAILED, GangState.READY
    assert verdicts == [S, S, S, S, F, S, R, F, R]
    # a listing without the gang's pods (all created before the watch): every one was deleted
    assert GangStartTracker(expected).settled([])
    # A pod of another run listed with ours counts for nothing.
    assert tracker.settled(list(pods.values()) + [make_pod("other-x-worker-9", 1)])


def test_creates_run_in_a_bounded_pool_and_return_the_names_in_order():
    manifests = [{"metadata": {"name": f"p-{i}"}} for i in range(40)]
    lock, running, most, made = threading.Lock(), [0], [0], []

    def create(body: dict[str, Any]) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1
            made.append(body["metadata"]["name"])

    names = create_replica_pods(create, manifests, log, workers=6)
    assert names == [f"p-{i}" for i in range(40)]
    assert sorted(made) == sorted(names)
    assert 1 < most[0] <= 6


def test_every_pod_is_tried_and_the_first_failure_is_raised():
    made = []

    def create(body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        if name in ("p-3", "p-7"):
            raise ApiException(status=403, reason=f"Forbidden {name}")
        made.append(name)

    with pytest.raises(ApiException, match="Forbidden p-3"):
        create_replica_pods(create, [{"metadata": {"name": f"p-{i}"}} for i in range(10)], log)
    assert sorted(made) == sorted(f"p-{i}" for i in range(10) if i not in (3, 7))
    with pytest.raises(ValueError, match="workers: 0 given; at least 1"):
        create_replica_pods(create, [], log, workers=0)


# ---- end to end: a gang on simulated nodes ----------------------------------------------------

NODES = """
- name: sim-1
  simulated: true
  capacity: {cpu: "64", memory: 64Gi, pods: "110"}
- name: sim-2
  simulated: true
  capacity: {cpu: "64", memory: 64Gi, pods: "110"}
"""


def build_run(replicas: dict[str, int]) -> Any:
    from operators.runinfo import RunInfo
    from tfjob import naming
    from tfjob.request.model import load_request

    small = {"cpu": "10m", "memory": "16Mi"}
    name = f"gang-{uuid.uuid4().hex[:6]}"
    request = load_request(
        {
            "name": name,
            "tenant": "scale",
            "mode": "distributed",
            "strategy": "parameter_server",
            "replicas": replicas,
            "success_policy": "chief",
            "image": "python:3.11",
            "entrypoint": ["python3", "train.py"],
            "bundle": "s3://bench/bundle.tar.gz",
            "output": f"s3://bench/out/{name}",
            "startup_timeout": 60,
            "resources": {r: small for r in replicas},
        }
    )
    run_id, dag_id = f"test__{uuid.uuid4().hex[:8]}", f"tfjob__{name}"
    return RunInfo(
        request=request,
        run_id=run_id,
        dag_id=dag_id,
        namespace=naming.tenant_namespace("scale"),
        run_key=naming.run_key(name, dag_id, run_id),
        aws_conn_id="aws_default",
    )


def test_a_gang_on_simulated_nodes_starts_gets_its_clusterspec_and_stops_with_grace(tmp_path):
    from operators.delivery import deliver_run_cluster_spec
    from tfjob.manifests import build_pod_manifests

    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(NODES)
    handle = start_localkube(tmp_path, nodes_file=str(nodes))
    try:
        core = handle.core_v1()
        run = build_run({"chief": 1, "ps": 2, "worker": 21})
        core.create_namespace({"metadata": {"name": run.namespace}})
        manifests = build_pod_manifests(run.request, run.identity())
        # The chief takes 3 s to end after SIGTERM, within its grace period.
        manifests[0]["metadata"].setdefault("annotations", {})[
            "localkube.io/simulate-stop-seconds"
        ] = "3"
        names = create_replica_pods(
            lambda m: core.create_namespaced_pod(run.namespace, m), manifests, log
        )
        assert sorted(names) == sorted(run.pod_names())
        endpoints = gang.await_gang_start(core, run, None, log)
        assert len(endpoints.endpoints) == 24
        deliver_run_cluster_spec(core, run, endpoints)
        for pod in core.list_namespaced_pod(run.namespace, label_selector=run.selector).items:
            path = (
                Path(handle.state_dir)
                / "kubelet"
                / "pods"
                / pod.metadata.uid
                / "rootfs"
                / "tfjob"
                / "config"
                / "cluster.json"
            )
            task = json.loads(path.read_text())["tf_config"]["task"]
            assert pod.metadata.name.endswith(f"-{task['type']}-{task['index']}")

        requests_before = handle.request("GET", "/localkube/v1/requests")["counts"]
        deleted = kubeobjects.delete_run_objects(
            core, run.namespace, run.selector, kinds=runobjects.POD_KINDS
        )
        counts = handle.request("GET", "/localkube/v1/requests")["counts"]
        assert sorted(deleted) == sorted(f"Pod/{n}" for n in names)
        assert (
            counts.get("DELETECOLLECTION pods", 0) - requests_before.get("DELETECOLLECTION pods", 0)
            == 1
        )
        # Grace honoured: the chief is still there, terminating, after the delete returned.
        chief = core.read_namespaced_pod(manifests[0]["metadata"]["name"], run.namespace)
        assert chief.metadata.deletion_timestamp is not None
        started = time.monotonic()
        assert f"Pod/{chief.metadata.name}" in gang.stop_gang(core, run, log)
        assert time.monotonic() - started > 1.0  # it waited for the chief's 3 s stop
        assert core.list_namespaced_pod(run.namespace, label_selector=run.selector).items == []
    finally:
        stop_localkube(handle)
