"""Pod, ConfigMap and Secret manifests: the pod protocol, and valid Kubernetes objects."""

import copy
import json

import kubernetes_validate
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.tfjob_fixtures import RUN, TEAM_A_USER, distributed_request_data, valid_request_data
from runtime.protocol import MAIN_CONTAINER
from tfjob import naming
from tfjob.manifests import (
    TERMINATION_GRACE_SECONDS,
    build_access_secret,
    build_pod_manifest,
    build_pod_manifests,
    build_runtime_configmap,
    build_tensorboard_secrets,
    build_upload_secret,
)
from tfjob.request.model import Role, load_request

# The newest Kubernetes minor kubernetes-validate ships schemas for (1.37 with 1.37.0).
KUBERNETES_VERSION = kubernetes_validate.utils.latest_version()

GPU_REQUEST = load_request(
    distributed_request_data(
        resources={
            "worker": {
                "cpu": "2",
                "memory": "4Gi",
                "gpu": 2,
                "cpu_limit": "3",
                "memory_limit": "6Gi",
            }
        },
        gpu_type="NVIDIA-A100-SXM4-40GB",
        node_selector={"pool": "train"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        env={"EPOCHS": "3"},
        args=["--epochs", "3"],
        port=2345,
        active_deadline=1200,
        startup_timeout=120,
    )
)


def validate(manifest: dict) -> None:
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def env_of(container: dict) -> dict:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def test_every_generated_object_validates_against_the_kubernetes_schema():
    for request in (GPU_REQUEST, load_request(valid_request_data())):
        for pod in build_pod_manifests(request, RUN):
            validate(pod)
    validate(build_runtime_configmap(RUN, {"fetch.py": "print()", "bundle.py": ""}, "team-a"))
    validate(build_access_secret(RUN, "http://127.0.0.1:9000/b/k?sig=1", "team-a"))
    validate(build_upload_secret(RUN, {"url": "http://127.0.0.1:9000/b", "grants": {}}, "team-a"))


def test_schema_validation_catches_a_misspelt_field():
    pod = copy.deepcopy(build_pod_manifest(GPU_REQUEST, RUN, Role.WORKER, 0))
    pod["spec"]["restartPolicyy"] = "Never"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(pod)


def test_one_pod_per_replica_in_role_order():
    pods = build_pod_manifests(GPU_REQUEST, RUN)
    key = RUN.run_key
    assert [pod["metadata"]["name"] for pod in pods] == [
        f"{key}-chief-0",
        f"{key}-ps-0",
        f"{key}-ps-1",
        f"{key}-worker-0",
        f"{key}-worker-1",
        f"{key}-worker-2",
        f"{key}-evaluator-0",
    ]
    assert all(pod["metadata"]["namespace"] == "tfjob-team-a" for pod in pods)


def test_pod_carries_run_labels_and_annotations():
    pod = build_pod_manifest(GPU_REQUEST, RUN, Role.PS, 1)
    assert pod["metadata"]["labels"] == naming.replica_labels(
        "digits", RUN.run_key, "team-a", naming.run_hash(RUN.dag_id, RUN.run_id), Role.PS, 1
    )
    assert pod["metadata"]["annotations"] == {
        "tfjob.io/run-id": RUN.run_id,
        "tfjob.io/dag-id": "tfjob__digits",
    }


def test_pod_follows_the_pod_protocol():
    pod = build_pod_manifest(GPU_REQUEST, RUN, Role.WORKER, 1)
    spec = pod["spec"]
    key = RUN.run_key
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 1200
    assert spec["terminationGracePeriodSeconds"] == TERMINATION_GRACE_SECONDS
    assert spec["enableServiceLinks"] is False
    assert spec["automountServiceAccountToken"] is False
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert volumes["tfjob-runtime"]["configMap"]["name"] == f"{key}-runtime"
    assert volumes["tfjob-access"]["secret"]["secretName"] == f"{key}-access"
    assert "emptyDir" in volumes["tfjob-workspace"] and "emptyDir" in volumes["tfjob-config"]
    (init,) = spec["initContainers"]
    assert init["name"] == "fetch-bundle"
    assert init["command"] == ["python3", "-m", "runtime.fetch"]
    assert init["workingDir"] == "/tfjob/python"
    assert init["image"] == GPU_REQUEST.image
    (main,) = spec["containers"]
    assert main["name"] == "tensorflow"
    assert main["workingDir"] == "/tfjob/python"
    assert main["command"] == [
        "python3",
        "-m",
        "runtime.bootstrap",
        "--",
        "python3",
        "train.py",
        "--epochs",
        "3",
    ]
    assert main["ports"] == [{"name": "tfjob", "containerPort": 2345, "protocol": "TCP"}]
    mounts = {mount["name"]: mount["mountPath"] for mount in main["volumeMounts"]}
    # worker-1 does not own the model: its program gets only its summaries grant.
    assert mounts == {
        "tfjob-runtime": "/tfjob/python/runtime",
        "tfjob-upload": "/tfjob/access",
        "tfjob-workspace": "/tfjob/workspace",
        "tfjob-config": "/tfjob/config",
    }
    assert volumes["tfjob-upload"]["projected"]["sources"] == [
        {
            "secret": {
                "name": f"{key}-tensorboard-0",
                "items": [{"key": "tensorboard-worker-1.json", "path": "tensorboard.json"}],
                "optional": True,
            }
        }
    ]
    init_mounts = {mount["name"]: mount["mountPath"] for mount in init["volumeMounts"]}
    assert init_mounts["tfjob-workspace"] == "/tfjob/workspace"
    assert init_mounts["tfjob-access"] == "/tfjob/access"


def test_each_main_container_mounts_only_its_own_upload_grants():
    for (role, index), pod in zip(
        GPU_REQUEST.replicas_in_order(), build_pod_manifests(GPU_REQUEST, RUN), strict=True
    ):
        volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
        mounts = {m["name"]: m for c in pod["spec"]["containers"] for m in c["volumeMounts"]}
        init_mounts = {m["name"] for m in pod["spec"]["initContainers"][0]["volumeMounts"]}
        owner = (role, index) == (Role.CHIEF, 0)
        assert "tfjob-access" not in mounts and "tfjob-upload" not in init_mounts
        projected = volumes["tfjob-upload"]["projected"]
        assert projected["defaultMode"] == 0o400
        # The model owner's upload.json on the owner only; every replica its own summaries.
        own = [{"key": f"tensorboard-{role.value}-{index}.json", "path": "tensorboard.json"}]
        upload = [{"key": "upload.json", "path": "upload.json"}]
        assert projected["sources"] == [
            *([{"secret": {"name": f"{RUN.run_key}-upload", "items": upload}}] if owner else []),
            {"secret": {"name": f"{RUN.run_key}-tensorboard-0", "items": own, "optional": True}},
        ]
        assert mounts["tfjob-upload"]["mountPath"] == "/tfjob/access"
        assert mounts["tfjob-upload"]["readOnly"] is True
        keeper = [c for c in pod["spec"]["containers"] if c["name"] != "tensorflow"]
        assert all("tfjob-upload" not in {m["name"] for m in c["volumeMounts"]} for c in keeper)


def test_main_container_environment_names_the_replica():
    env = env_of(build_pod_manifest(GPU_REQUEST, RUN, Role.WORKER, 1)["spec"]["containers"][0])
    assert env == {
        "TFJOB_ROLE": "worker",
        "TFJOB_INDEX": "1",
        "TFJOB_WAIT_CLUSTERSPEC": "1",
        "TFJOB_CLUSTERSPEC_TIMEOUT": "540",
        "TFJOB_UPLOAD_MODEL": "0",
        "TFJOB_UPLOAD_PATIENCE": "600",
        "TFJOB_SYNC_TENSORBOARD": "1",
        "TFJOB_CHECKPOINT_INTERVAL": str(GPU_REQUEST.checkpoint_interval),
        "POD_IP": {"fieldRef": {"fieldPath": "status.podIP"}},
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "HOME": "/tmp",
        "EPOCHS": "3",
    }


def test_a_request_that_sets_home_keeps_its_own():
    request = load_request(valid_request_data(env={"HOME": "/tfjob/workspace"}))
    (pod,) = build_pod_manifests(request, RUN)
    env = pod["spec"]["containers"][0]["env"]
    assert [item["value"] for item in env if item["name"] == "HOME"] == ["/tfjob/workspace"]


def all_containers(pod: dict) -> list[dict]:
    return [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]


def test_every_pod_runs_as_the_tenants_runner_without_a_token_as_its_tenants_uid_and_gid():
    assert TEAM_A_USER.uid != TEAM_A_USER.gid  # so that a mix-up shows
    for pod in build_pod_manifests(GPU_REQUEST, RUN):
        spec = pod["spec"]
        assert spec["serviceAccountName"] == "tfjob-runner"
        assert spec["automountServiceAccountToken"] is False
        assert spec["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": TEAM_A_USER.uid,
            "runAsGroup": TEAM_A_USER.gid,
            "fsGroup": TEAM_A_USER.gid,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        # no container (the keeper included) runs as anyone else
        for container in all_containers(pod):
            context = container["securityContext"]
            assert "runAsUser" not in context and "runAsGroup" not in context


def test_pods_of_the_shipped_tenants_run_as_their_own_tenants_uid_and_gid():
    import dataclasses

    from tfjob.tenants import load_tenants

    seen = {}
    for tenant in load_tenants().tenants:
        run = dataclasses.replace(RUN, namespace=tenant.namespace, run_as=tenant.pod_user)
        request = load_request(distributed_request_data(tenant=tenant.name))
        contexts = {
            json.dumps(pod["spec"]["securityContext"], sort_keys=True)
            for pod in build_pod_manifests(request, run)
        }
        assert len(contexts) == 1
        context = json.loads(contexts.pop())
        assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (
            tenant.pod_user.uid,
            tenant.pod_user.gid,
            tenant.pod_user.gid,
        )
        seen[tenant.name] = context["runAsUser"]
    assert seen == {"demo": 11001, "test": 11002, "research": 11003}


def test_every_container_drops_all_capabilities_cannot_escalate_and_has_a_home():
    pods = build_pod_manifests(GPU_REQUEST, RUN)
    names = set()
    for pod in pods:
        for container in all_containers(pod):
            names.add(container["name"])
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "runAsNonRoot": True,
                "capabilities": {"drop": ["ALL"]},
            }
            assert env_of(container)["HOME"] == "/tmp"
    assert names == {"fetch-bundle", "tensorflow", "tfjob-keeper"}


def test_pods_meet_the_restricted_pod_security_standard():
    # What the `restricted` profile checks (kubernetes.io/docs/concepts/security/
    # pod-security-standards): volume types, non-root, no escalation, capabilities, seccomp.
    allowed_volumes = {
        "configMap",
        "secret",
        "emptyDir",
        "projected",
        "downwardAPI",
        "csi",
        "ephemeral",
        "persistentVolumeClaim",
    }
    for pod in build_pod_manifests(GPU_REQUEST, RUN):
        spec = pod["spec"]
        for volume in spec["volumes"]:
            assert set(volume) - {"name"} <= allowed_volumes, volume
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert not spec.get("hostNetwork") and not spec.get("hostPID")
        for container in all_containers(pod):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
            assert "add" not in context["capabilities"] and not context.get("privileged")
            assert not any("hostPort" in port for port in container.get("ports", []))


def test_secret_volumes_are_readable_by_their_owner_only_and_config_by_all():
    owner_pod = build_pod_manifest(GPU_REQUEST, RUN, Role.CHIEF, 0)
    volumes = {volume["name"]: volume for volume in owner_pod["spec"]["volumes"]}
    assert volumes["tfjob-access"]["secret"]["defaultMode"] == 0o400 == 256
    assert volumes["tfjob-upload"]["projected"]["defaultMode"] == 0o400
    assert volumes["tfjob-runtime"]["configMap"]["defaultMode"] == 0o444


def test_only_the_model_owner_uploads():
    uploads = {
        (role, index): env_of(pod["spec"]["containers"][0])["TFJOB_UPLOAD_MODEL"]
        for (role, index), pod in zip(
            GPU_REQUEST.replicas_in_order(), build_pod_manifests(GPU_REQUEST, RUN), strict=True
        )
    }
    assert [replica for replica, flag in uploads.items() if flag == "1"] == [(Role.CHIEF, 0)]
    no_chief = load_request(distributed_request_data(replicas={"ps": 1, "worker": 2}))
    flags = [
        env_of(pod["spec"]["containers"][0])["TFJOB_UPLOAD_MODEL"]
        for pod in build_pod_manifests(no_chief, RUN)
    ]
    assert flags == ["0", "1", "0"]  # ps-0, worker-0, worker-1


def test_only_the_model_owner_syncs_checkpoints_and_every_replica_its_summaries():
    request = load_request(
        distributed_request_data(replicas={"ps": 1, "worker": 2}, checkpoint_interval=15)
    )
    envs = [env_of(pod["spec"]["containers"][0]) for pod in build_pod_manifests(request, RUN)]
    assert [env.get("TFJOB_SYNC_CHECKPOINTS") for env in envs] == [None, "1", None]
    assert [env.get("TFJOB_SYNC_TENSORBOARD") for env in envs] == ["1", "1", "1"]
    assert [env["TFJOB_CHECKPOINT_INTERVAL"] for env in envs] == ["15", "15", "15"]


def test_a_big_gangs_summaries_grants_are_split_over_secrets_each_pod_finds_its_own():
    request = load_request(
        distributed_request_data(replicas={"chief": 1, "ps": 100, "worker": 1000, "evaluator": 1})
    )
    replicas = [f"{role.value}-{index}" for role, index in request.replicas_in_order()]
    grant = {"prefix": "x" * 1500}  # as large as a real one
    secrets = build_tensorboard_secrets(RUN, {name: grant for name in replicas}, "team-a")
    assert len(secrets) == 6  # 1,102 grants, 200 a Secret: each far below 1 MiB
    where = {key: secret["metadata"]["name"] for secret in secrets for key in secret["stringData"]}
    assert len(where) == len(replicas)
    for role, index in request.replicas_in_order():
        pod = build_pod_manifest(request, RUN, role, index)
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "tfjob-upload"]
        (mounted,) = [
            s["secret"]
            for s in volume["projected"]["sources"]
            if "items" in s["secret"] and s["secret"]["items"][0]["path"] == "tensorboard.json"
        ]
        assert where[mounted["items"][0]["key"]] == mounted["name"], (role, index)
        assert mounted["items"][0]["key"] == f"tensorboard-{role.value}-{index}.json"


def test_single_replica_does_not_wait_for_a_clusterspec_and_uploads():
    (pod,) = build_pod_manifests(load_request(valid_request_data()), RUN)
    env = env_of(pod["spec"]["containers"][0])
    assert (env["TFJOB_WAIT_CLUSTERSPEC"], env["TFJOB_UPLOAD_MODEL"]) == ("0", "1")


def test_gpu_replica_requests_and_limits_gpus_and_selects_the_gpu_type():
    spec = build_pod_manifest(GPU_REQUEST, RUN, Role.WORKER, 0)["spec"]
    assert spec["containers"][0]["resources"] == {
        "requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "2"},
        "limits": {"cpu": "3", "memory": "6Gi", "nvidia.com/gpu": "2"},
    }
    assert "nvidia.com/gpu" not in spec["initContainers"][0]["resources"]["requests"]
    assert spec["nodeSelector"] == {
        "pool": "train",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    }
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_replica_without_resources_leaves_them_to_the_namespaces_limitrange():
    spec = build_pod_manifest(GPU_REQUEST, RUN, Role.PS, 0)["spec"]
    assert spec["containers"][0]["resources"] == {}
    assert spec["initContainers"][0]["resources"] == {}
    assert spec["nodeSelector"] == {"pool": "train"}
    validate(build_pod_manifest(GPU_REQUEST, RUN, Role.PS, 0))


def test_a_limit_without_a_request_is_also_the_request():
    request = load_request(
        distributed_request_data(resources={"worker": {"cpu": "1", "memory_limit": "2Gi"}})
    )
    resources = build_pod_manifest(request, RUN, Role.WORKER, 0)["spec"]["containers"][0][
        "resources"
    ]
    assert resources == {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}


@pytest.mark.parametrize(
    ("placement", "kind"), [("spread", "podAntiAffinity"), ("pack", "podAffinity")]
)
def test_placement_prefers_nodes_by_the_runs_pods(placement, kind):
    request = load_request(distributed_request_data(placement=placement))
    affinity = build_pod_manifest(request, RUN, Role.WORKER, 0)["spec"]["affinity"]
    assert list(affinity) == [kind]
    (term,) = affinity[kind]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"] == {
        "labelSelector": {"matchLabels": {"tfjob.io/run": RUN.run_key}},
        "topologyKey": "kubernetes.io/hostname",
    }


def test_a_roles_node_affinity_goes_into_its_pods_only_beside_the_placement_term():
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}
    cores = {"key": "example.com/cores", "operator": "Gt", "values": ["8"]}
    disk = {"key": "example.com/disk", "operator": "Exists"}
    node_affinity = {
        "worker": {
            "required": [{"match_expressions": [zone, cores]}, {"match_expressions": [disk]}],
            "preferred": [{"weight": 50, "preference": {"match_expressions": [disk]}}],
        }
    }
    request = load_request(distributed_request_data(node_affinity=node_affinity))
    worker = build_pod_manifest(request, RUN, Role.WORKER, 0)
    validate(worker)
    assert worker["spec"]["affinity"]["nodeAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [zone, cores]},
                {"matchExpressions": [disk]},
            ]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "preference": {"matchExpressions": [disk]}}
        ],
    }
    assert "podAntiAffinity" in worker["spec"]["affinity"]
    ps = build_pod_manifest(request, RUN, Role.PS, 0)
    assert "nodeAffinity" not in ps["spec"]["affinity"]


def test_a_request_without_a_bundle_tells_the_init_container_to_fetch_none():
    def init_env(request_data: dict) -> dict:
        pod = build_pod_manifest(load_request(request_data), RUN, Role.WORKER, 0)
        validate(pod)
        (init,) = pod["spec"]["initContainers"]
        return {e["name"]: e.get("value") for e in init["env"]}

    data = distributed_request_data()
    assert "TFJOB_NO_BUNDLE" not in init_env(data)
    del data["bundle"]
    assert init_env(data)["TFJOB_NO_BUNDLE"] == "1"


def test_pod_for_a_replica_the_request_lacks_is_refused():
    with pytest.raises(ValueError, match=r"replica ps-0 given; the request has 0 ps"):
        build_pod_manifest(load_request(valid_request_data()), RUN, Role.PS, 0)


def test_runtime_configmap_holds_the_files_under_run_labels():
    configmap = build_runtime_configmap(RUN, {"fetch.py": "x = 1\n"}, "team-a")
    assert configmap["metadata"]["name"] == f"{RUN.run_key}-runtime"
    assert configmap["metadata"]["labels"] == naming.run_labels(
        "digits", RUN.run_key, "team-a", naming.run_hash(RUN.dag_id, RUN.run_id)
    )
    assert configmap["data"] == {"fetch.py": "x = 1\n"}


def test_runtime_configmap_refuses_nested_file_names():
    with pytest.raises(ValueError, match=r"ConfigMap key 'sub/fetch.py' given"):
        build_runtime_configmap(RUN, {"sub/fetch.py": ""}, "team-a")


def test_access_secret_holds_the_bundle_url_and_upload_secret_the_upload_grants():
    secret = build_access_secret(RUN, "http://s3/bundle?sig", "team-a")
    assert secret["metadata"]["name"] == f"{RUN.run_key}-access"
    assert secret["stringData"]["bundle_url"] == "http://s3/bundle?sig"
    assert json.loads(secret["stringData"]["restore.json"]) == {
        "version": 1,
        "source": None,
        "step": None,
        "files": [],
    }  # a first gang restores nothing
    restoring = build_access_secret(
        RUN, "http://s3/bundle?sig", "team-a", {"version": 1, "files": [{"path": "ckpt-1.index"}]}
    )
    assert json.loads(restoring["stringData"]["restore.json"])["files"] == [
        {"path": "ckpt-1.index"}
    ]
    upload = build_upload_secret(RUN, {"prefix": "runs/1/"}, "team-a")
    assert upload["metadata"]["name"] == f"{RUN.run_key}-upload"
    assert json.loads(upload["stringData"]["upload.json"]) == {"prefix": "runs/1/"}


@st.composite
def distributed_requests(draw):
    strategy = draw(st.sampled_from(["parameter_server", "multi_worker_mirrored"]))
    replicas = {
        "chief": draw(st.integers(0, 1)),
        "worker": draw(st.integers(1, 4)),
        "evaluator": draw(st.integers(0, 1)),
        "ps": draw(st.integers(1, 3)) if strategy == "parameter_server" else 0,
    }
    gpu = draw(st.integers(0, 4))
    return load_request(
        valid_request_data(
            name=draw(st.from_regex(r"\A[a-z]([-a-z0-9]{0,38}[a-z0-9])?\Z")),
            mode="distributed",
            strategy=strategy,
            replicas=replicas,
            placement=draw(st.sampled_from(["spread", "pack"])),
            resources={"worker": {"gpu": gpu, "cpu": draw(st.sampled_from(["1", "250m", "1.5"]))}},
            gpu_type=draw(st.sampled_from([None, "Tesla-T4"])),
        )
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(distributed_requests(), st.text(min_size=1, max_size=60))
def test_pods_of_any_valid_request_validate(request, run_id):
    run = RUN.__class__(
        job=request.name,
        run_id=run_id,
        dag_id=f"tfjob_{request.name}",
        namespace="tfjob-team-a",
        run_as=TEAM_A_USER,
    )
    pods = build_pod_manifests(request, run)
    assert len({pod["metadata"]["name"] for pod in pods}) == len(pods)
    for pod in pods:
        validate(pod)


def test_argv_references_pass_kubernetes_expansion_unchanged_for_the_bootstrap():
    from runtime.expansion import expand

    args = ["--job_name=$(JOB_NAME)", "--pod=$(POD_NAME)", "--literal=$$(JOB_NAME)", "cost$5"]
    request = load_request(distributed_request_data(args=args))
    (main,) = [
        c
        for c in build_pod_manifest(request, RUN, Role.WORKER, 0)["spec"]["containers"]
        if c["name"] == MAIN_CONTAINER
    ]
    kubernetes_env = {"POD_NAME": "p", "TFJOB_ROLE": "worker", "JOB_NAME": "set-too-early"}
    argv = main["command"][main["command"].index("--") + 1 :]
    assert [expand(a, kubernetes_env) for a in argv] == [*request.entrypoint, *args]
