"""Kubeflow TFJob manifests, shaped as Kubeflow documents them, become requests or are refused.

The three shapes of the issue: a PS/worker job like Kubeflow's dist-mnist example, a
MultiWorkerMirrored job, and a job with a Chief and an Evaluator; and every field that does
not map refused with its path before anything starts.
"""

import copy
from typing import Any

import pytest
import yaml

from harness.repo_root import REPO_ROOT
from tfjob.kubeflow.convert import Destination, convert_tfjob
from tfjob.kubeflow.errors import TFJobRefused
from tfjob.kubeflow.manifest import MAX_MANIFEST_BYTES, parse_tfjob, read_tfjob
from tfjob.manifests import build_affinity
from tfjob.request.model import ChiefTaskType, Mode, Role, Strategy, SuccessPolicy, load_request
from tfjob.restart_policy import MAX_RESTARTS, RestartOn

PLACE = Destination(
    bundle="s3://tfjob-bundles/mnist/bundle.tar.gz", output="s3://tfjob-output/mnist"
)


def replica(
    replicas: int = 1, image: str = "tensorflow/tensorflow:2.21.0", **container: Any
) -> dict[str, Any]:
    spec = {"name": "tensorflow", "image": image, "command": ["python3", "train.py"]}
    return {
        "replicas": replicas,
        "restartPolicy": "Never",
        "template": {"spec": {"containers": [spec | container]}},
    }


def tfjob(specs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "dist-mnist", "namespace": "team-a"},
        "spec": {"tfReplicaSpecs": specs, **spec},
    }


def convert(data: dict[str, Any], destination: Destination = PLACE):
    return convert_tfjob(read_tfjob(data), destination)


def refusals(data: dict[str, Any], destination: Destination = PLACE) -> dict[str, str]:
    with pytest.raises(TFJobRefused) as caught:
        convert(data, destination)
    return {refusal.path: str(refusal) for refusal in caught.value.refusals}


def test_a_dist_mnist_like_ps_worker_job_becomes_a_parameter_server_request():
    data = tfjob(
        {
            "PS": replica(2, resources={"requests": {"cpu": "1", "memory": "2Gi"}}),
            "Worker": replica(4, resources={"limits": {"nvidia.com/gpu": 1, "memory": "4Gi"}}),
        },
        runPolicy={"backoffLimit": 3, "activeDeadlineSeconds": 1800},
    )
    request = convert(data).request
    assert (request.mode, request.strategy) == (Mode.DISTRIBUTED, Strategy.PARAMETER_SERVER)
    assert (request.replicas.ps, request.replicas.worker, request.replicas.chief) == (2, 4, 0)
    assert request.resources_for(Role.PS).cpu == "1"
    assert request.resources_for(Role.WORKER).gpu == 1
    assert request.resources_for(Role.WORKER).memory_limit == "4Gi"
    assert (request.name, request.tenant) == ("dist-mnist", "team-a")
    assert request.entrypoint == ["python3", "train.py"]
    assert request.active_deadline == 1800
    assert request.success_policy is SuccessPolicy.WORKER0  # Kubeflow's default without a chief
    assert request.max_restarts == 0  # restartPolicy Never


def test_a_multi_worker_mirrored_job_with_all_workers_success_becomes_its_request():
    data = tfjob(
        {"Worker": replica(3, env=[{"name": "STEPS", "value": "300"}])},
        successPolicy="AllWorkers",
    )
    request = convert(data).request
    assert (request.mode, request.strategy) == (Mode.DISTRIBUTED, Strategy.MULTI_WORKER_MIRRORED)
    assert (request.replicas.worker, request.replicas.ps) == (3, 0)
    assert request.env == {"STEPS": "300"}
    assert request.success_policy is SuccessPolicy.ALL_WORKERS


def test_a_job_with_a_chief_and_an_evaluator_keeps_both_roles():
    data = tfjob({"Chief": replica(), "Worker": replica(2), "Evaluator": replica()})
    request = convert(data).request
    assert (request.replicas.chief, request.replicas.worker, request.replicas.evaluator) == (
        1,
        2,
        1,
    )
    assert request.chief_task_type is ChiefTaskType.CHIEF
    assert request.success_policy is SuccessPolicy.CHIEF


def test_a_master_keeps_its_name_and_replica_types_ignore_letter_case():
    request = convert(tfjob({"master": replica(), "ps": replica(), "WORKER": replica(2)})).request
    assert request.chief_task_type is ChiefTaskType.MASTER
    assert (request.replicas.chief, request.replicas.ps, request.replicas.worker) == (1, 1, 2)


def test_one_replica_runs_in_single_mode_as_kubeflow_gives_it_no_tf_config():
    request = convert(tfjob({"Chief": replica()})).request
    assert request.mode is Mode.SINGLE and request.replicas.worker == 1


@pytest.mark.parametrize(
    ("policy", "backoff", "restart_on", "max_restarts"),
    [
        ("ExitCode", 2, RestartOn.RETRYABLE, 2),
        ("OnFailure", None, RestartOn.ANY_FAILURE, MAX_RESTARTS),
    ],
)
def test_restart_policies_become_gang_restarts_with_a_note(
    policy, backoff, restart_on, max_restarts
):
    specs = {"Worker": replica(2) | {"restartPolicy": policy}}
    conversion = convert(tfjob(specs, runPolicy={"backoffLimit": backoff}))
    assert conversion.request.restart_on == restart_on
    assert conversion.request.max_restarts == max_restarts
    assert any("restarts the whole gang" in note for note in conversion.notes)


def test_the_examples_tfjob_files_convert_to_their_own_request_files():
    for bundle in ("digits-ps", "digits-mwms"):
        folder = REPO_ROOT / "bundles" / bundle
        conversion = convert_tfjob(parse_tfjob((folder / "tfjob.yaml").read_text()))
        expected = load_request(yaml.safe_load((folder / "request.yaml").read_text()))
        assert conversion.request == expected, bundle
        assert conversion.notes == ()
        assert load_request(conversion.request_data()) == expected  # what convert prints


def test_the_master_example_converts_to_digits_mwms_with_a_master_in_place_of_worker_1():
    folder = REPO_ROOT / "bundles" / "digits-mwms"
    request = convert_tfjob(parse_tfjob((folder / "tfjob-master.yaml").read_text())).request
    mwms = load_request(yaml.safe_load((folder / "request.yaml").read_text()))
    assert request.chief_task_type is ChiefTaskType.MASTER
    assert (request.replicas.chief, request.replicas.worker) == (1, 1)
    assert request.success_policy is SuccessPolicy.CHIEF
    assert (request.bundle, request.entrypoint, request.env) == (
        mwms.bundle,
        mwms.entrypoint,
        mwms.env,
    )


def test_an_unsupported_field_is_refused_with_its_path_what_was_given_and_what_is_supported():
    worker = replica(2)
    worker["template"]["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    found = refusals(tfjob({"Worker": worker}))
    path = "spec.tfReplicaSpecs.Worker.template.spec.volumes[0]"
    assert list(found) == [path]
    assert found[path].startswith(f'{path}: {{"name": "data", "emptyDir": {{}}}} given; volumes')


def with_affinity(spec: dict[str, Any], affinity: dict[str, Any]) -> dict[str, Any]:
    spec["template"]["spec"]["affinity"] = affinity
    return spec


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
ZONE_A = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}
GPU_NODE = {"key": "example.com/gpu-node", "operator": "Exists"}


def test_node_affinity_maps_onto_its_roles_node_affinity_and_reaches_the_pods():
    worker_affinity = {
        "nodeAffinity": {
            REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [ZONE_A, GPU_NODE]}]},
            PREFERRED: [{"weight": 20, "preference": {"matchExpressions": [ZONE_A]}}],
        }
    }
    ps_affinity = {
        "nodeAffinity": {
            REQUIRED: {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]}
                ]
            }
        }
    }
    data = tfjob(
        {
            "PS": with_affinity(replica(), ps_affinity),
            "Worker": with_affinity(replica(2), worker_affinity),
        }
    )
    request = convert(data).request
    assert set(request.node_affinity) == {Role.PS, Role.WORKER}
    assert (
        build_affinity(request, "run", Role.WORKER)["nodeAffinity"]
        == worker_affinity["nodeAffinity"]
    )
    assert build_affinity(request, "run", Role.PS)["nodeAffinity"] == ps_affinity["nodeAffinity"]


def test_a_one_replica_jobs_node_affinity_is_its_single_workers():
    only = with_affinity(
        replica(),
        {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [GPU_NODE]}]}}},
    )
    request = convert(tfjob({"Chief": only})).request
    assert list(request.node_affinity) == [Role.WORKER]


def test_pod_affinity_and_match_fields_are_refused_by_their_paths():
    worker = with_affinity(
        replica(2),
        {
            "podAffinity": {REQUIRED: []},
            "podAntiAffinity": {PREFERRED: []},
            "nodeAffinity": {
                REQUIRED: {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["n"]}
                            ]
                        }
                    ]
                }
            },
        },
    )
    found = refusals(tfjob({"Worker": worker}))
    base = "spec.tfReplicaSpecs.Worker.template.spec.affinity"
    terms = f"{base}.nodeAffinity.{REQUIRED}.nodeSelectorTerms[0]"
    assert sorted(found) == sorted(
        [
            f"{base}.podAffinity",
            f"{base}.podAntiAffinity",
            f"{terms}.matchFields[0]",
            f"{terms}.matchExpressions",
        ]
    )
    assert "the request's placement" in found[f"{base}.podAntiAffinity"]
    assert "select nodes by their labels" in found[f"{terms}.matchFields[0]"]


def test_a_node_affinity_kubernetes_would_refuse_is_refused_at_its_nodeaffinity():
    bad = {"key": "zone", "operator": "In"}  # In needs values
    worker = with_affinity(
        replica(2),
        {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [bad]}]}}},
    )
    found = refusals(tfjob({"Worker": worker}))
    path = "spec.tfReplicaSpecs.Worker.template.spec.affinity.nodeAffinity"
    assert list(found) == [path]
    assert "operator In needs at least one value" in found[path]
    assert "node_affinity.worker.required[0].match_expressions[0].values" in found[path]


def test_every_refused_field_of_a_manifest_is_named_at_once():
    worker = replica(2, env=[{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s"}}}])
    worker["template"]["spec"]["containers"].append({"name": "sidecar", "image": "envoy"})
    worker["template"]["spec"]["affinity"] = {"podAntiAffinity": {}}
    data = tfjob({"Worker": worker}, enableDynamicWorker=True)
    data["spec"]["runPolicy"] = {"schedulingPolicy": {"queue": "gpu"}, "suspend": True}
    base = "spec.tfReplicaSpecs.Worker.template.spec"
    assert sorted(refusals(data)) == sorted(
        [
            "spec.enableDynamicWorker",
            f"{base}.containers[0].env[0].valueFrom",
            f"{base}.containers[1]",
            f"{base}.affinity.podAntiAffinity",
            "spec.runPolicy.suspend",
            "spec.runPolicy.schedulingPolicy.queue",
        ]
    )


@pytest.mark.parametrize(
    ("change", "path", "allowed"),
    [
        (
            lambda d: d["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][
                0
            ].update(image="other:1"),
            "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image",
            "the same as spec.tfReplicaSpecs.PS.template.spec.containers[0].image",
        ),
        (
            lambda d: d["spec"]["tfReplicaSpecs"]["PS"].update(restartPolicy="Always"),
            "spec.tfReplicaSpecs.PS.restartPolicy",
            "Always restarts replicas that succeeded too",
        ),
        (
            lambda d: d["spec"].update(runPolicy={"cleanPodPolicy": "None"}),
            "spec.runPolicy.cleanPodPolicy",
            "a run's pods are removed when it ends",
        ),
        (
            lambda d: d["spec"].update(runPolicy={"schedulingPolicy": {"minAvailable": 1}}),
            "spec.runPolicy.schedulingPolicy.minAvailable",
            "supported: 3 (every replica)",
        ),
        (
            lambda d: d["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0].pop(
                "command"
            ),
            "spec.tfReplicaSpecs.PS.template.spec.containers[0].command",
            "a command is required",
        ),
        (
            lambda d: d["spec"].update(tfReplicaSpecs={"PS": replica(2)}),
            "spec.tfReplicaSpecs.Worker.replicas",
            "a distributed parameter-server job needs at least 1 Worker",
        ),
        (
            lambda d: d["metadata"].update(name="a" * 41),
            "metadata.name",
            "(the request's name)",
        ),
        (
            lambda d: d["spec"].update(runPolicy={"backoffLimit": 11}),
            "spec.runPolicy.backoffLimit",
            "",
        ),
    ],
)
def test_what_does_not_map_is_refused_naming_the_tfjob_field(change, path, allowed):
    data = tfjob({"PS": replica(), "Worker": replica(2)})
    if path == "spec.runPolicy.backoffLimit":
        data["spec"]["tfReplicaSpecs"]["PS"]["restartPolicy"] = "OnFailure"
        data["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "OnFailure"
    change(data)
    found = refusals(data)
    assert path in found, found
    assert allowed in found[path]


def test_a_missing_tenant_or_output_names_the_option_and_the_annotation():
    data = tfjob({"Worker": replica()})
    del data["metadata"]["namespace"]
    found = refusals(data, Destination())
    assert sorted(found) == [
        f'metadata.annotations["tf-on-k8s.io/{name}"]' for name in ("output", "tenant")
    ]
    assert "--output" in found['metadata.annotations["tf-on-k8s.io/output"]']


def test_a_tfjob_with_no_bundle_runs_its_images_program_and_says_so():
    image_only = replica(2, image="registry.local/team-a/trainer:1")
    image_only["template"]["spec"]["containers"][0]["command"] = ["python3", "-m", "trainer"]
    conversion = convert(tfjob({"Worker": image_only}), Destination(output=PLACE.output))
    assert conversion.request.bundle is None
    assert conversion.request.entrypoint == ["python3", "-m", "trainer"]
    assert "bundle" not in conversion.request_data()
    (note,) = [n for n in conversion.notes if "no bundle" in n]
    assert note.startswith('metadata.annotations["tf-on-k8s.io/bundle"]: no bundle: the program')


def test_a_tfjob_with_no_command_is_refused_as_the_images_entrypoint_is_not_read():
    entrypoint_only = replica(2)
    del entrypoint_only["template"]["spec"]["containers"][0]["command"]
    found = refusals(tfjob({"Worker": entrypoint_only}), Destination(output=PLACE.output))
    path = "spec.tfReplicaSpecs.Worker.template.spec.containers[0].command"
    assert list(found) == [path]
    assert "the image's own entrypoint is not read" in found[path]


def test_options_come_before_annotations_and_the_namespace():
    data = tfjob({"Worker": replica()})
    data["metadata"]["annotations"] = {"tf-on-k8s.io/tenant": "team-b", "owner": "x"}
    conversion = convert(data)
    assert conversion.request.tenant == "team-b"
    assert conversion.request.bundle == PLACE.bundle
    assert any("owner" in note for note in conversion.notes)  # not carried, and said so
    assert convert(data, Destination(**vars(PLACE) | {"tenant": "team-c"})).request.tenant == (
        "team-c"
    )


def test_a_manifest_over_the_size_limit_is_refused_before_it_is_parsed():
    text = "# " + "x" * MAX_MANIFEST_BYTES + "\n"
    with pytest.raises(TFJobRefused) as caught:
        parse_tfjob(text)
    assert caught.value.refusals[0].path == "manifest"
    assert f"at most {MAX_MANIFEST_BYTES} bytes" in str(caught.value)


def test_a_manifest_of_another_kind_is_refused():
    data = copy.deepcopy(tfjob({"Worker": replica()}))
    data["kind"] = "PyTorchJob"
    assert "kind" in refusals(data)


def test_a_chief_and_a_master_together_or_a_type_given_twice_are_refused():
    both = refusals(tfjob({"Chief": replica(), "Master": replica(), "Worker": replica()}))
    assert "a job has a Chief or a Master, not both" in both["spec.tfReplicaSpecs.Master"]
    twice = refusals(tfjob({"Worker": replica(), "worker": replica()}))
    assert "given twice" in twice["spec.tfReplicaSpecs.worker"]
