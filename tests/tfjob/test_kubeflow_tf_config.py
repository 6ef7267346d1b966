"""For any TFJob we accept, each pod's TF_CONFIG has the cluster keys and task indexes
Kubeflow's operator would give it.

The reference below is Kubeflow's rule, written from training-operator's Go source
(pkg/controller.v1/tensorflow: `genClusterSpec`, `genTFConfigJSONStr`, util.go's
`isDistributed`; pkg/apis/kubeflow.org/v1 tensorflow_defaults.go): replica type names
lower-cased are the cluster keys and task types (so `Master` stays `master`), the
Evaluator is left out of the cluster but gets its task, `replicas` defaults to 1, and a
job of exactly one replica in all gets no TF_CONFIG. Addresses differ by design (Kubeflow
names Services, we name pod IPs), so keys, task lists' lengths and tasks are compared.
"""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tfjob.clusterspec import Endpoint, build_cluster_files
from tfjob.kubeflow.convert import Destination, convert_tfjob
from tfjob.kubeflow.errors import TFJobRefused
from tfjob.kubeflow.manifest import ReplicaType, read_tfjob
from tfjob.request.model import Role, TrainingRequest

PLACE = Destination(
    bundle="s3://tfjob-bundles/x/bundle.tar.gz", tenant="team-a", output="s3://tfjob-output/x"
)


def kubeflow_tf_configs(manifest: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """(task type, index) -> the TF_CONFIG Kubeflow's operator sets; {} when it sets none."""
    specs = {}
    for key, spec in manifest["spec"]["tfReplicaSpecs"].items():
        canonical = next(t.value for t in ReplicaType if t.value.lower() == key.lower())
        specs[canonical] = spec.get("replicas", 1)  # setDefaultReplicas(spec, 1)
    if sum(specs.values()) == 1:  # isDistributed: the count of all replicas is not 1
        return {}
    name, namespace = manifest["metadata"]["name"], manifest["metadata"].get("namespace", "")
    cluster = {
        rtype.lower(): [f"{name}-{rtype.lower()}-{i}.{namespace}.svc:2222" for i in range(n)]
        for rtype, n in specs.items()
        if rtype != "Evaluator"  # "evaluator is not part of training cluster"
    }
    return {
        (rtype.lower(), index): {
            "cluster": cluster,
            "task": {"type": rtype.lower(), "index": index},
            "environment": "cloud",
        }
        for rtype, n in specs.items()
        for index in range(n)
    }


def our_tf_configs(request: TrainingRequest) -> dict[tuple[str, int], dict[str, Any]]:
    """(task type, index) -> the TF_CONFIG our pods get; {} in single mode (no ClusterSpec)."""
    if not request.is_distributed:
        return {}
    endpoints = [
        Endpoint(role, index, f"10.0.{number // 250}.{number % 250 + 1}", request.port)
        for number, (role, index) in enumerate(request.replicas_in_order())
    ]
    files = build_cluster_files(request, endpoints)
    configs = {}
    for (role, index), content in files.items():
        tf_config = content["tf_config"]
        assert tf_config["task"]["index"] == index
        if role is not Role.CHIEF:
            assert tf_config["task"]["type"] == role.value
        configs[(tf_config["task"]["type"], index)] = tf_config
    return configs


def layout(configs: dict[tuple[str, int], dict[str, Any]]) -> dict[tuple[str, int], Any]:
    """What must agree: each pod's cluster keys with their task counts, and its task."""
    return {
        pod: (
            sorted((key, len(tasks)) for key, tasks in config["cluster"].items()),
            config["task"],
        )
        for pod, config in configs.items()
    }


def spelled(name: str) -> st.SearchStrategy[str]:
    return st.sampled_from([name, name.lower(), name.upper()])


@st.composite
def tfjobs(draw: st.DrawFn) -> dict[str, Any]:
    """TFJob manifests of every replica layout, accepted or not, in any letter case."""
    specs: dict[str, Any] = {}
    chief = draw(st.sampled_from([None, "Chief", "Master"]))
    counts = {
        chief: draw(st.sampled_from([1, 1, 1, 0, 2, None])),
        "PS": draw(st.sampled_from([None, 0, 1, 2, 3])),
        "Worker": draw(st.sampled_from([None, 0, 1, 2, 3, 5])),
        "Evaluator": draw(st.sampled_from([None, None, 0, 1])),
    }
    for rtype, count in counts.items():
        if rtype is None or (count is None and draw(st.booleans())):
            continue  # the type left out
        container = {"name": "tensorflow", "image": "tf:2", "command": ["python3", "train.py"]}
        spec: dict[str, Any] = {"template": {"spec": {"containers": [container]}}}
        if count is not None:
            spec["replicas"] = count
        specs[draw(spelled(rtype))] = spec
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "job", "namespace": "team-a"},
        "spec": {"tfReplicaSpecs": specs},
    }


@settings(max_examples=400, deadline=None)
@given(tfjobs())
def test_every_accepted_tfjob_gives_each_pod_the_tf_config_layout_kubeflow_gives(manifest):
    try:
        request = convert_tfjob(read_tfjob(manifest), PLACE).request
    except TFJobRefused:
        return  # the property is about what we accept; refusals have their own tests
    assert layout(our_tf_configs(request)) == layout(kubeflow_tf_configs(manifest))


def test_the_reference_gives_a_master_job_the_layout_kubeflow_documents():
    manifest = {
        "metadata": {"name": "mnist", "namespace": "ns"},
        "spec": {
            "tfReplicaSpecs": {"Master": {}, "PS": {"replicas": 1}, "Worker": {"replicas": 2}}
        },
    }
    configs = kubeflow_tf_configs(manifest)
    assert configs[("master", 0)]["cluster"] == {
        "master": ["mnist-master-0.ns.svc:2222"],
        "ps": ["mnist-ps-0.ns.svc:2222"],
        "worker": ["mnist-worker-0.ns.svc:2222", "mnist-worker-1.ns.svc:2222"],
    }
    assert sorted(configs) == [("master", 0), ("ps", 0), ("worker", 0), ("worker", 1)]
