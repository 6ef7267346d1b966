"""The tenants page's pure part: per tenant, runs, quota used vs hard, jobs vs slots, nodes."""

from __future__ import annotations

from typing import Any

from tfjob.tenants.model import Tenant
from tfjob.tenants.usage import (
    ActiveRun,
    count_running_jobs,
    summarize_placements,
    summarize_quota,
    summarize_tenant,
)

TENANT = Tenant(
    name="team-a",
    quota={"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "4", "pods": "20"},
    defaults={"cpu": "500m", "memory": "1Gi"},
    max_concurrent_jobs=3,
)


def a_pod(
    run: str,
    index: int,
    phase: str = "Running",
    node: str = "node-1",
    gpus: int = 0,
    gpu_ids: str = "",
    dag_id: str = "tfjob_submit__team-a",
    run_id: str = "manual__1",
    namespace: str = "tfjob-team-a",
) -> dict[str, Any]:
    annotations = {"tfjob.io/dag-id": dag_id, "tfjob.io/run-id": run_id}
    if gpu_ids:
        annotations["localkube.io/gpu-ids"] = gpu_ids
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "metadata": {
            "name": f"{run}-worker-{index}",
            "namespace": namespace,
            "labels": {"tfjob.io/run": run, "tfjob.io/job": run.rsplit("-", 1)[0]},
            "annotations": annotations,
        },
        "spec": {
            "nodeName": node if phase != "Pending" else None,
            "containers": [{"resources": {"limits": limits}}],
        },
        "status": {"phase": phase},
    }


QUOTA = {
    "spec": {
        "hard": {
            "requests.cpu": "8",
            "requests.memory": "16Gi",
            "requests.nvidia.com/gpu": "4",
            "pods": "20",
        }
    },
    "status": {
        "hard": {
            "requests.cpu": "8",
            "requests.memory": "16Gi",
            "requests.nvidia.com/gpu": "4",
            "pods": "20",
        },
        "used": {
            "requests.cpu": "1500m",
            "requests.memory": "3Gi",
            "requests.nvidia.com/gpu": "2",
            "pods": "3",
        },
    },
}


def test_quota_lines_show_used_against_hard_in_the_checked_order():
    lines = summarize_quota(QUOTA)
    assert [(line["resource"], line["used"], line["hard"]) for line in lines] == [
        ("cpu", "1.5", "8"),
        ("memory", "3Gi", "16Gi"),
        ("nvidia.com/gpu", "2", "4"),
        ("pods", "3", "20"),
    ]
    assert [line["fraction"] for line in lines] == [0.1875, 0.1875, 0.5, 0.15]


def test_a_quota_the_controller_has_not_counted_yet_reads_spec_hard_and_zero_use():
    lines = summarize_quota({"spec": QUOTA["spec"]})
    assert lines[0] == {"resource": "cpu", "used": "0", "hard": "8", "fraction": 0.0}


def test_no_quota_object_gives_no_lines_and_says_it_is_not_applied():
    card = summarize_tenant(TENANT, None, [], [])
    assert card["quota"] == [] and card["quota_applied"] is False


def test_jobs_running_counts_runs_with_a_live_pod_only():
    pods = [
        a_pod("a-1", 0),
        a_pod("a-1", 1, phase="Pending"),
        a_pod("b-2", 0, phase="Pending"),
        a_pod("c-3", 0, phase="Succeeded"),
        a_pod("d-4", 0, phase="Failed"),
    ]
    assert count_running_jobs(pods) == 2
    deleting = a_pod("e-5", 0)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-04T10:00:00Z"
    assert count_running_jobs([deleting]) == 0


def test_placements_group_live_pods_by_node_with_their_gpus_and_device_ids():
    pods = [
        a_pod("a-1", 0, node="node-2", gpus=2, gpu_ids="0,1"),
        a_pod("a-1", 1, node="node-1", gpus=1, gpu_ids="3"),
        a_pod("a-1", 2, node="node-2"),
        a_pod("a-1", 3, phase="Pending"),
        a_pod("old-9", 0, node="node-1", gpus=4, phase="Succeeded"),
    ]
    assert summarize_placements(pods) == [
        {"node": "", "pods": ["a-1-worker-3"], "gpus": 0, "gpu_ids": []},
        {"node": "node-1", "pods": ["a-1-worker-1"], "gpus": 1, "gpu_ids": ["3"]},
        {
            "node": "node-2",
            "pods": ["a-1-worker-0", "a-1-worker-2"],
            "gpus": 2,
            "gpu_ids": ["0", "1"],
        },
    ]


def test_runs_are_joined_to_their_pods_by_dag_and_run_id_oldest_first():
    pods = [
        a_pod("job-aaaa", 0, gpus=1, run_id="r1"),
        a_pod("job-aaaa", 1, phase="Pending", run_id="r1"),
        # same run id in another DAG of the tenant: another run
        a_pod("job-bbbb", 0, dag_id="tfjob__other", run_id="r1"),
    ]
    runs = [
        ActiveRun("tfjob__other", "r1", "running", "2026-12-04T10:05:00+00:00"),
        ActiveRun("tfjob_submit__team-a", "r1", "running", "2026-12-04T10:00:00+00:00"),
        ActiveRun("tfjob_submit__team-a", "r2", "queued", None),
    ]
    card = summarize_tenant(TENANT, QUOTA, pods, runs)
    assert [
        (r["dag_id"], r["run_id"], r["pods"], r["pods_running"], r["gpus"], r["job"])
        for r in card["runs"]
    ] == [
        ("tfjob_submit__team-a", "r1", 2, 1, 1, "job"),
        ("tfjob__other", "r1", 1, 1, 0, "job"),
        ("tfjob_submit__team-a", "r2", 0, 0, 0, None),
    ]
    assert card["jobs_running"] == 2 and card["max_concurrent_jobs"] == 3


def test_pods_of_another_namespace_never_count_for_the_tenant():
    pods = [a_pod("x-1", 0, namespace="tfjob-team-b", gpus=2)]
    card = summarize_tenant(TENANT, QUOTA, pods, [])
    assert card["jobs_running"] == 0 and card["placements"] == []
    assert card["namespace"] == "tfjob-team-a" and card["name"] == "team-a"
