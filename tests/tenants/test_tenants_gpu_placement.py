"""GPU placement on localkube's default two nodes x four fake GPUs, through its real scheduler.

The pods are the core's manifests (`build_pod_manifests`) created in an applied tenant's
namespace; no kubelet runs them, since only the scheduler's binding is under test.
"""

import time

import kubernetes
import pytest

from harness.localkube_fixtures import mark_node_ready
from harness.tfjob_fixtures import distributed_request_data, tenant_storage
from tenancy.apply import Clients, apply_tenants
from tfjob import naming, pipeline_ids
from tfjob.manifests import RunIdentity, build_pod_manifests
from tfjob.request.model import load_request
from tfjob.tenants import validate_tenants

TENANT = "gpus"
NAMESPACE = naming.tenant_namespace(TENANT)
SCHEDULE_TIMEOUT_S = 30.0
NODES = ("node-1", "node-2")


@pytest.fixture(scope="module")
def core(localkube_api):
    for node in NODES:
        mark_node_ready(localkube_api, node)
    clients = Clients.from_api_client(
        kubernetes.client.ApiClient(localkube_api.kube_configuration())
    )
    config = validate_tenants(
        {
            "tenants": [
                {
                    "name": TENANT,
                    "quota": {"cpu": "32", "memory": "64Gi", "nvidia.com/gpu": 16, "pods": 40},
                    "defaults": {"cpu": "100m", "memory": "128Mi"},
                    **tenant_storage(TENANT),
                }
            ]
        }
    )
    apply_tenants(clients, config)
    return clients.core


def gpu_job(job: str, placement: str, gpus: int = 1, workers: int = 4, **changes):
    request = load_request(
        distributed_request_data(
            name=job,
            tenant=TENANT,
            strategy="multi_worker_mirrored",
            placement=placement,
            replicas={"chief": 0, "ps": 0, "worker": workers, "evaluator": 0},
            resources={"worker": {"cpu": "500m", "memory": "512Mi", "gpu": gpus}},
            **changes,
        )
    )
    run = RunIdentity(
        job=job,
        run_id=f"manual__{job}",
        dag_id=f"{pipeline_ids.REQUEST_DAG_PREFIX}{job}",
        namespace=NAMESPACE,
    )
    return request, run


def launch(core, job: str, placement: str, **kwargs) -> str:
    request, run = gpu_job(job, placement, **kwargs)
    for pod in build_pod_manifests(request, run):
        core.create_namespaced_pod(NAMESPACE, pod)
    return run.run_key


def await_pods(core, run_key: str, settled) -> list:
    deadline = time.monotonic() + SCHEDULE_TIMEOUT_S
    while True:
        pods = core.list_namespaced_pod(
            NAMESPACE, label_selector=naming.run_selector(run_key)
        ).items
        if settled(pods):
            return pods
        if time.monotonic() > deadline:
            raise AssertionError(
                f"pods of {run_key} did not settle: "
                f"{[(p.metadata.name, p.spec.node_name) for p in pods]}"
            )
        time.sleep(0.2)


def all_bound(pods) -> bool:
    return bool(pods) and all(p.spec.node_name for p in pods)


def unschedulable_message(pod) -> str | None:
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
            return condition.message
    return None


def remove(core, run_key: str) -> None:
    core.delete_collection_namespaced_pod(
        NAMESPACE, label_selector=naming.run_selector(run_key), grace_period_seconds=0
    )
    await_pods(core, run_key, lambda pods: not pods)


def test_spread_puts_a_four_worker_one_gpu_job_on_both_nodes(core):
    key = launch(core, "spread4", "spread")
    try:
        pods = await_pods(core, key, all_bound)
        per_node = sorted(p.spec.node_name for p in pods)
        assert per_node == ["node-1", "node-1", "node-2", "node-2"]
    finally:
        remove(core, key)


def test_pack_puts_a_four_worker_one_gpu_job_on_one_node(core):
    key = launch(core, "pack4", "pack")
    try:
        pods = await_pods(core, key, all_bound)
        assert len({p.spec.node_name for p in pods}) == 1
        # Each replica got its own fake device.
        ids = sorted(p.metadata.annotations["localkube.io/gpu-ids"] for p in pods)
        assert ids == ["0", "1", "2", "3"]
    finally:
        remove(core, key)


def test_more_gpus_than_any_node_has_stays_pending_with_the_schedulers_reason(core):
    key = launch(core, "toobig", "spread", gpus=5, workers=1)
    try:
        pods = await_pods(core, key, lambda ps: ps and all(unschedulable_message(p) for p in ps))
        assert pods[0].spec.node_name is None
        assert pods[0].status.phase == "Pending"
        assert (
            unschedulable_message(pods[0])
            == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
        )
    finally:
        remove(core, key)


def test_a_gpu_type_becomes_a_node_selector_that_the_scheduler_honours(core):
    fits = launch(core, "typed", "spread", workers=1, gpu_type="FAKE-H100")
    missing = launch(core, "typed-a100", "spread", workers=1, gpu_type="NVIDIA-A100-SXM4-40GB")
    try:
        bound = await_pods(core, fits, all_bound)
        assert bound[0].spec.node_selector == {"nvidia.com/gpu.product": "FAKE-H100"}
        pending = await_pods(
            core, missing, lambda ps: ps and all(unschedulable_message(p) for p in ps)
        )
        assert unschedulable_message(pending[0]) == (
            "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
        )
    finally:
        remove(core, fits)
        remove(core, missing)
