"""Scheduler decisions: pure filter/score tests, and binding through a running API server."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import pytest
from kubernetes.client.exceptions import ApiException

from harness.localkube_fixtures import mark_node_ready, start_localkube, stop_localkube
from localkube.placement import choose_node, unschedulable_message
from localkube.scheduler import allocate_gpu_ids


def node(
    name: str, gpus: int = 4, cpu: str = "8", labels: dict | None = None, taints: list | None = None
) -> dict:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or []},
        "status": {
            "capacity": {"cpu": cpu, "memory": "16Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
            "allocatable": {
                "cpu": cpu,
                "memory": "16Gi",
                "pods": "110",
                "nvidia.com/gpu": str(gpus),
            },
        },
    }


def pod(
    name: str,
    labels: dict | None = None,
    gpu: int = 0,
    cpu: str | None = None,
    node_name: str | None = None,
    **spec,
) -> dict:
    requests = {}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    if cpu:
        requests["cpu"] = cpu
    body = {
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:1",
                    "resources": {"requests": requests, "limits": requests},
                }
            ],
            **spec,
        },
        "status": {"phase": "Running" if node_name else "Pending"},
    }
    if node_name:
        body["spec"]["nodeName"] = node_name
    return body


NODES = [node("node-1"), node("node-2")]


def test_gpu_requests_that_fit_nowhere_are_reported_like_kube_scheduler():
    decision = choose_node(pod("big", gpu=5), NODES, {"node-1": [], "node-2": []})
    assert decision.node is None
    assert decision.message == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


def test_gpus_in_use_count_against_the_node():
    on_nodes = {
        "node-1": [pod("a", gpu=3, node_name="node-1")],
        "node-2": [pod("b", gpu=2, node_name="node-2")],
    }
    assert choose_node(pod("x", gpu=2), NODES, on_nodes).node == "node-2"
    finished = dict(pod("b", gpu=2, node_name="node-2"), status={"phase": "Succeeded"})
    assert (
        choose_node(
            pod("x", gpu=4), NODES, {"node-1": on_nodes["node-1"], "node-2": [finished]}
        ).node
        == "node-2"
    )


def test_node_selector_and_required_node_affinity():
    nodes = [node("node-1", labels={"zone": "a"}), node("node-2", labels={"zone": "b"})]
    empty = {"node-1": [], "node-2": []}
    assert choose_node(pod("x", nodeSelector={"zone": "b"}), nodes, empty).node == "node-2"
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}
                ]
            }
        }
    }
    assert choose_node(pod("y", affinity=affinity), nodes, empty).node == "node-1"
    nowhere = choose_node(pod("z", nodeSelector={"zone": "c"}), nodes, empty)
    assert (
        nowhere.message
        == "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    )


def required_node_affinity(*terms: dict) -> dict:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def expressions(*items: tuple) -> dict:
    return {
        "matchExpressions": [
            {"key": key, "operator": op, **({"values": list(values)} if values else {})}
            for key, op, *values in items
        ]
    }


ZONED = [
    node("node-1", labels={"zone": "a", "cores": "4"}),
    node("node-2", labels={"zone": "b", "cores": "16", "ssd": "yes"}),
]


@pytest.mark.parametrize(
    ("term", "where"),
    [
        (expressions(("zone", "In", "b", "c")), "node-2"),
        (expressions(("zone", "NotIn", "b")), "node-1"),
        (expressions(("ssd", "Exists")), "node-2"),
        (expressions(("ssd", "DoesNotExist")), "node-1"),
        (expressions(("cores", "Gt", "8")), "node-2"),
        (expressions(("cores", "Lt", "8")), "node-1"),
        (expressions(("zone", "In", "a", "b"), ("cores", "Gt", "8")), "node-2"),  # AND
        (
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]},
            "node-1",
        ),
    ],
)
def test_required_node_affinity_operators_choose_the_only_matching_node(term, where):
    empty = {"node-1": [], "node-2": []}
    chosen = choose_node(pod("x", affinity=required_node_affinity(term)), ZONED, empty)
    assert chosen.node == where, chosen.message


@pytest.mark.parametrize(
    "terms",
    [
        [expressions(("zone", "In", "c"))],
        [expressions(("cores", "Gt", "64"))],
        [expressions(("zone", "Gt", "1"))],  # not an integer: matches nothing, as in Kubernetes
        [expressions(("zone", "In", "a"), ("ssd", "Exists"))],  # each holds on another node
        [{"matchExpressions": []}],  # an empty term matches no node
    ],
)
def test_a_pod_no_node_matches_by_required_node_affinity_is_not_placed(terms):
    empty = {"node-1": [], "node-2": []}
    nowhere = choose_node(pod("x", affinity=required_node_affinity(*terms)), ZONED, empty)
    assert nowhere.node is None
    assert (
        nowhere.message
        == "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    )


def test_required_terms_are_ored_and_preferred_terms_weigh_among_the_matching_nodes():
    empty = {"node-1": [], "node-2": []}
    either = required_node_affinity(
        expressions(("zone", "In", "a")), expressions(("ssd", "Exists"))
    )
    prefer_b = [{"weight": 10, "preference": expressions(("zone", "In", "b"))}]
    prefer_a = [{"weight": 10, "preference": expressions(("zone", "In", "a"))}]
    for preferred, where in ((prefer_b, "node-2"), (prefer_a, "node-1")):
        affinity = {
            "nodeAffinity": {
                **either["nodeAffinity"],
                "preferredDuringSchedulingIgnoredDuringExecution": preferred,
            }
        }
        assert choose_node(pod("x", affinity=affinity), ZONED, empty).node == where


def test_taints_need_tolerations():
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    nodes = [node("node-1", taints=[taint]), node("node-2", taints=[taint])]
    empty = {"node-1": [], "node-2": []}
    refused = choose_node(pod("x"), nodes, empty)
    assert (
        refused.message
        == "0/2 nodes are available: 2 node(s) had untolerated taint {dedicated: gpu}."
    )
    tolerating = pod(
        "y",
        tolerations=[
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
        ],
    )
    assert choose_node(tolerating, nodes, empty).node == "node-1"


def _anti(kind: str, mode: str, labels: dict) -> dict:
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
    if mode == "preferred":
        return {
            kind: {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": term}
                ]
            }
        }
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_required_anti_affinity_spreads_and_refuses_a_third_replica():
    labels = {"app": "ps"}
    affinity = _anti("podAntiAffinity", "required", labels)
    placed: dict[str, list] = {"node-1": [], "node-2": []}
    for i in range(2):
        decision = choose_node(pod(f"ps-{i}", labels, affinity=affinity), NODES, placed)
        placed[decision.node].append(
            dict(pod(f"ps-{i}", labels, affinity=affinity), status={"phase": "Running"})
        )
    assert sorted(len(p) for p in placed.values()) == [1, 1]
    third = choose_node(pod("ps-2", labels, affinity=affinity), NODES, placed)
    assert (
        third.message == "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
    )


def test_required_affinity_follows_the_first_pod():
    labels = {"app": "w"}
    affinity = _anti("podAffinity", "required", labels)
    placed = {"node-1": [], "node-2": [pod("w-0", labels, node_name="node-2")]}
    assert choose_node(pod("w-1", labels, affinity=affinity), NODES, placed).node == "node-2"
    alone = choose_node(pod("w-0", labels, affinity=affinity), NODES, {"node-1": [], "node-2": []})
    assert alone.node is not None


@pytest.mark.parametrize("kind, spread", [("podAntiAffinity", True), ("podAffinity", False)])
def test_preferred_anti_affinity_spreads_and_preferred_affinity_packs(kind, spread):
    labels = {"job": "j"}
    affinity = _anti(kind, "preferred", labels)
    placed: dict[str, list] = {"node-1": [], "node-2": []}
    for i in range(4):
        decision = choose_node(pod(f"r{i}", labels, cpu="1", affinity=affinity), NODES, placed)
        placed[decision.node].append(pod(f"r{i}", labels, cpu="1", node_name=decision.node))
    counts = sorted(len(p) for p in placed.values())
    assert counts == ([2, 2] if spread else [0, 4])


def test_least_allocated_breaks_ties():
    placed = {"node-1": [pod("a", cpu="4", node_name="node-1")], "node-2": []}
    assert choose_node(pod("x", cpu="1"), NODES, placed).node == "node-2"


def test_gpu_ids_are_the_lowest_free_on_the_node():
    holder = pod("a", gpu=2, node_name="node-1")
    holder["metadata"]["annotations"] = {"localkube.io/gpu-ids": "0,2"}
    assert allocate_gpu_ids(pod("x", gpu=2), NODES[0], [holder]) == [1, 3]
    assert allocate_gpu_ids(pod("y"), NODES[0], [holder]) == []


def test_message_lists_every_reason_with_its_count():
    reasons = Counter({"Insufficient cpu": 1, "Insufficient nvidia.com/gpu": 2})
    assert (
        unschedulable_message(2, reasons)
        == "0/2 nodes are available: 1 Insufficient cpu, 2 Insufficient nvidia.com/gpu."
    )


# -- through the API server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    handle = start_localkube(tmp_path_factory.mktemp("sched"), kubelets=False)
    mark_node_ready(handle, "node-1")
    mark_node_ready(handle, "node-2")
    yield handle
    stop_localkube(handle)


def wait_for(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_scheduler_binds_with_gpu_ids_and_reports_unschedulable(cluster):
    core = cluster.core_v1()
    ns = f"s-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})

    def gpu_pod(name: str, gpus: int) -> dict:
        body = pod(name, gpu=gpus)
        del body["status"]
        del body["metadata"]["namespace"]
        return body

    for i in range(2):
        core.create_namespaced_pod(ns, gpu_pod(f"g{i}", 3))
    bound = [
        wait_for(
            lambda n=f"g{i}": (
                core.read_namespaced_pod(n, ns).spec.node_name and core.read_namespaced_pod(n, ns)
            )
        )
        for i in range(2)
    ]
    assert {p.spec.node_name for p in bound} == {"node-1", "node-2"}
    assert all(p.metadata.annotations["localkube.io/gpu-ids"] == "0,1,2" for p in bound)
    assert [c.type for c in bound[0].status.conditions] == ["PodScheduled"]

    core.create_namespaced_pod(ns, gpu_pod("toobig", 2))
    condition = wait_for(
        lambda: next(
            (
                c
                for c in core.read_namespaced_pod("toobig", ns).status.conditions or []
                if c.status == "False"
            ),
            None,
        )
    )
    assert condition.reason == "Unschedulable"
    assert condition.message == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    events = wait_for(
        lambda: (
            core.list_namespaced_event(
                ns, field_selector="involvedObject.name=toobig,reason=FailedScheduling"
            ).items
        )
    )
    assert events[0].type == "Warning" and events[0].message == condition.message

    # Freeing GPUs (the pod finishes) lets the waiting pod in, on the freed device ids.
    core.patch_namespaced_pod_status(bound[0].metadata.name, ns, {"status": {"phase": "Succeeded"}})
    late = wait_for(
        lambda: (
            core.read_namespaced_pod("toobig", ns).spec.node_name
            and core.read_namespaced_pod("toobig", ns)
        )
    )
    assert late.spec.node_name == bound[0].spec.node_name
    assert late.metadata.annotations["localkube.io/gpu-ids"] == "0,1"


def test_a_pod_whose_required_node_affinity_no_node_matches_stays_pending(cluster):
    core = cluster.core_v1()
    ns = f"s-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    body = pod("nowhere", affinity=required_node_affinity(expressions(("zone", "In", "mars"))))
    del body["status"]
    del body["metadata"]["namespace"]
    core.create_namespaced_pod(ns, body)
    message = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    events = wait_for(
        lambda: (
            core.list_namespaced_event(
                ns, field_selector="involvedObject.name=nowhere,reason=FailedScheduling"
            ).items
        )
    )
    assert events[0].type == "Warning" and events[0].message == message
    read = core.read_namespaced_pod("nowhere", ns)
    assert read.status.phase == "Pending" and read.spec.node_name is None
    (condition,) = [c for c in read.status.conditions if c.type == "PodScheduled"]
    assert (condition.status, condition.reason) == ("False", "Unschedulable")


def test_a_node_affinity_kube_apiserver_would_refuse_is_422_naming_the_field(cluster):
    core = cluster.core_v1()
    ns = f"s-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    body = pod(
        "bad",
        affinity={
            "nodeAffinity": {
                **required_node_affinity(
                    expressions(("zone", "Near", "a"), ("zone", "In"), ("ssd", "Exists", "x"))
                )["nodeAffinity"],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 0, "preference": expressions(("cores", "Gt", "1", "2"))}
                ],
            }
        },
    )
    del body["status"]
    del body["metadata"]["namespace"]
    with pytest.raises(ApiException) as error:
        core.create_namespaced_pod(ns, body)
    assert error.value.status == 422
    message = json.loads(error.value.body)["message"]
    required = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    preferred = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
    term = f"{required}.nodeSelectorTerms[0].matchExpressions"
    for cause in (
        f'{term}[0].operator: Invalid value: "Near": not a valid selector operator',
        f"{term}[1].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
        f"{term}[2].values: Forbidden: may not be specified when `operator` is 'Exists'",
        f"{preferred}.weight: Invalid value: 0: must be in the range 1-100",
        f"{preferred}.preference.matchExpressions[0].values: Required value: must be specified "
        "single value when `operator` is 'Lt' or 'Gt'",
    ):
        assert cause in message, message
    assert core.list_namespaced_pod(ns).items == []


def test_nodes_without_a_ready_kubelet_are_counted_in_the_message():
    decision = choose_node(pod("x", gpu=5), NODES[:1], {"node-1": []}, not_ready=1)
    assert decision.message == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "1 node(s) had untolerated taint "
        "{node.kubernetes.io/not-ready: }."
    )
