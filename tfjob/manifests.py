"""Kubernetes objects of a run as plain dicts (Kubernetes JSON, camelCase).

The pod shape is the pod protocol of docs/architecture.md: four volumes, an
init container that fetches the bundle, a `tensorflow` container that runs
the bootstrap, TFJOB_* environment and a named port. Every pod meets the
`restricted` Pod Security Standard its tenant's namespace enforces
(docs/tenants.md, "What a tenant's pods may do"): the tenant's API-less
service account, no token, its tenant's own non-root uid/gid, no privilege escalation, no
capabilities, the runtime's default seccomp profile. Keeping the shape here,
in pure functions, lets tests validate every manifest against the Kubernetes
OpenAPI schema without a server, and keeps operators free of dict plumbing.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass

from runtime import protocol
from runtime.expansion import escape
from runtime.protocol import (
    ACCESS_DIR,
    BOOTSTRAP_COMMAND,
    BUNDLE_URL_FILE,
    CONFIG_DIR,
    FETCH_COMMAND,
    INIT_CONTAINER,
    KEEPER_COMMAND,
    KEEPER_CONTAINER,
    MAIN_CONTAINER,
    PACKAGE_ROOT,
    RESTORE_FILE,
    RUNTIME_DIR,
    TENSORBOARD_GRANT_FILE,
    UPLOAD_FILE,
    WORKSPACE_DIR,
)
from tfjob import naming
from tfjob.checkpoints import build_empty_restore
from tfjob.jsontypes import JsonObject
from tfjob.request.model import Mode, Placement, Role, TrainingRequest
from tfjob.tenants.model import SERVICE_ACCOUNT_NAME, PodUser, derive_pod_user
from tfjob.timeline import clusterspec_wait_seconds

TERMINATION_GRACE_SECONDS = 10
PORT_NAME = "tfjob"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
HOSTNAME_TOPOLOGY_KEY = "kubernetes.io/hostname"
PLACEMENT_WEIGHT = 100

VOLUME_RUNTIME = "tfjob-runtime"
VOLUME_ACCESS = "tfjob-access"
VOLUME_UPLOAD = "tfjob-upload"
VOLUME_WORKSPACE = "tfjob-workspace"
VOLUME_CONFIG = "tfjob-config"

# How long the model owner's bootstrap keeps trying to upload (S3 down, a grant
# that expired before its refresh reached the pod); runtime/bootstrap.py.
UPLOAD_PATIENCE_SECONDS = 600
# ConfigMaps and Secrets are limited to 1 MiB in all.
MAX_OBJECT_DATA_BYTES = 1024 * 1024
# A summaries grant is ~1.2-1.6 KiB: a gang's (up to 1,102 replicas) would not fit one Secret.
TENSORBOARD_GRANTS_PER_SECRET = 200
CONFIGMAP_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._")

# Who a replica's processes are: their tenant's uid/gid (`Tenant.pod_user`, never
# another tenant's), not root, and not a uid of the image (which has no user for it),
# so HOME points at a directory every uid may write. The gid is also the fsGroup:
# volumes (secrets, emptyDirs) are group-owned by it, hence readable.
HOME_DIR = "/tmp"
SECRET_FILE_MODE = 0o400
CONFIG_FILE_MODE = 0o444


def build_pod_security_context(user: PodUser) -> JsonObject:
    """The pod's securityContext: the tenant's uid/gid (also fsGroup), RuntimeDefault seccomp."""
    return {
        "runAsNonRoot": True,
        "runAsUser": user.uid,
        "runAsGroup": user.gid,
        "fsGroup": user.gid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def build_container_security_context() -> JsonObject:
    """Every container's securityContext: no privilege escalation, no capabilities."""
    return {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def build_home_env() -> dict[str, str]:
    """HOME for a uid without a home (Python, Keras and pip write under it)."""
    return {"name": "HOME", "value": HOME_DIR}


@dataclass(frozen=True)
class RunIdentity:
    """Which run the objects belong to, where they live, and who its pods are."""

    job: str
    run_id: str
    dag_id: str
    namespace: str
    # The run's tenant's `pod_user` (operators/runinfo.py fills it from the tenants file).
    # None only where who the pods are does not matter (the quota preflight, tests): the
    # uid/gid the tenants file gives a tenant whose entry names none.
    run_as: PodUser | None = None

    def pod_user(self, tenant: str) -> PodUser:
        return self.run_as or derive_pod_user(tenant)

    @property
    def run_key(self) -> str:
        return naming.run_key(self.job, self.dag_id, self.run_id)

    @property
    def run_hash(self) -> str:
        return naming.run_hash(self.dag_id, self.run_id)

    def labels(self, tenant: str) -> dict[str, str]:
        """The labels every object of the run carries."""
        return naming.run_labels(self.job, self.run_key, tenant, self.run_hash)


def _metadata(run: RunIdentity, name: str, labels: dict[str, str]) -> JsonObject:
    return {
        "name": name,
        "namespace": run.namespace,
        "labels": labels,
        "annotations": {naming.ANNOTATION_RUN_ID: run.run_id, naming.ANNOTATION_DAG_ID: run.dag_id},
    }


def build_replica_env(
    request: TrainingRequest, role: Role, index: int, upload_patience: int = UPLOAD_PATIENCE_SECONDS
) -> list[JsonObject]:
    """The `tensorflow` container's environment, TFJOB_* first, then the request's."""
    distributed = request.mode is Mode.DISTRIBUTED
    owner = request.model_owner() == (role, index)
    env: list[JsonObject] = [
        {"name": protocol.ENV_ROLE, "value": role.value},
        {"name": protocol.ENV_INDEX, "value": str(index)},
        {"name": protocol.ENV_WAIT_CLUSTERSPEC, "value": "1" if distributed else "0"},
        # From the replica's own start until the latest possible delivery (tfjob/timeline.py).
        {
            "name": protocol.ENV_CLUSTERSPEC_TIMEOUT,
            "value": str(
                clusterspec_wait_seconds(request.startup_timeout, request.active_deadline)
            ),
        },
        {"name": protocol.ENV_UPLOAD_MODEL, "value": "1" if owner else "0"},
        {"name": protocol.ENV_UPLOAD_PATIENCE, "value": str(upload_patience)},
        *([{"name": protocol.ENV_SYNC_CHECKPOINTS, "value": "1"}] if owner else []),
        # Every replica copies its TENSORBOARD_DIR, at the checkpoints' interval.
        {"name": protocol.ENV_SYNC_TENSORBOARD, "value": "1"},
        {"name": protocol.ENV_CHECKPOINT_INTERVAL, "value": str(request.checkpoint_interval)},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    if "HOME" not in request.env:
        env.append(build_home_env())
    env.extend({"name": name, "value": value} for name, value in request.env.items())
    return env


def build_resources(request: TrainingRequest, role: Role, *, with_gpu: bool = True) -> dict:
    """Requests and limits of one replica; a GPU count is both request and limit.

    A cpu/memory the request leaves out is left out here too, so that the
    namespace's LimitRange fills it in at pod creation (the tenant's
    `defaults`); a limit without a request is also the request, as Kubernetes'
    own defaulting makes it (written out so every API server agrees).
    """
    spec = request.resources_for(role)
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    for name, amount, limit in (
        ("cpu", spec.cpu, spec.cpu_limit),
        ("memory", spec.memory, spec.memory_limit),
    ):
        if amount is not None or limit is not None:
            requests[name] = amount if amount is not None else limit
        if limit is not None:
            limits[name] = limit
    if with_gpu and spec.gpu > 0:
        requests[GPU_RESOURCE] = str(spec.gpu)
        limits[GPU_RESOURCE] = str(spec.gpu)
    return {key: value for key, value in (("requests", requests), ("limits", limits)) if value}


def build_affinity(request: TrainingRequest, run_key: str, role: Role) -> JsonObject:
    """spread: prefer nodes without the run's pods; pack: prefer nodes with them.

    The role's `node_affinity`, when given, is its pods' `nodeAffinity`.
    """
    term = {
        "weight": PLACEMENT_WEIGHT,
        "podAffinityTerm": {
            "labelSelector": {"matchLabels": {naming.LABEL_RUN: run_key}},
            "topologyKey": HOSTNAME_TOPOLOGY_KEY,
        },
    }
    kind = "podAntiAffinity" if request.placement is Placement.SPREAD else "podAffinity"
    affinity: JsonObject = {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [term]}}
    node_affinity = request.node_affinity.get(Role(role))
    if node_affinity is not None and node_affinity.to_manifest():
        affinity["nodeAffinity"] = node_affinity.to_manifest()
    return affinity


def locate_tensorboard_shard(request: TrainingRequest, role: Role, index: int) -> int:
    """Which `<runkey>-tensorboard-<n>` holds the replica's summaries grant: its place in
    `replicas_in_order` (GrantPlan.replicas' order), TENSORBOARD_GRANTS_PER_SECRET a Secret."""
    roles = list(Role)
    before = sum(request.replica_count(other) for other in roles[: roles.index(Role(role))])
    return (before + index) // TENSORBOARD_GRANTS_PER_SECRET


def build_volumes(run_key: str, *, owner: bool, replica: str, shard: int) -> list[JsonObject]:
    """The pod's volumes. Of the grants' Secrets each pod sees only its own files: the model
    owner's upload.json on the owner, and `replica`'s summaries grant as tensorboard.json
    (from Secret `<runkey>-tensorboard-<shard>`), one projected volume."""
    own = {"key": naming.tensorboard_grant_key(replica), "path": TENSORBOARD_GRANT_FILE}
    # Optional: a gang restarted within a run launched before summaries had grants (a plan
    # without replicas) still starts; its sync then logs that tensorboard.json is missing.
    summaries = naming.tensorboard_secret_name(run_key, shard)
    sources = [{"secret": {"name": summaries, "items": [own], "optional": True}}]
    if owner:
        items = [{"key": UPLOAD_FILE, "path": UPLOAD_FILE}]
        sources.insert(0, {"secret": {"name": naming.upload_secret_name(run_key), "items": items}})
    upload = [
        {
            "name": VOLUME_UPLOAD,
            "projected": {"sources": sources, "defaultMode": SECRET_FILE_MODE},
        }
    ]
    return [
        {
            "name": VOLUME_RUNTIME,
            "configMap": {"name": naming.configmap_name(run_key), "defaultMode": CONFIG_FILE_MODE},
        },
        {
            "name": VOLUME_ACCESS,
            "secret": {"secretName": naming.secret_name(run_key), "defaultMode": SECRET_FILE_MODE},
        },
        *upload,
        {"name": VOLUME_WORKSPACE, "emptyDir": {}},
        {"name": VOLUME_CONFIG, "emptyDir": {}},
    ]


# The ConfigMap's files make the package `runtime` below PACKAGE_ROOT, the containers'
# working directory, from where `python3 -m runtime.<entry>` imports it.
_RUNTIME_MOUNT = {"name": VOLUME_RUNTIME, "mountPath": RUNTIME_DIR, "readOnly": True}
# The bundle URL for the init container; the upload grants for the main container, at
# the same path (the bootstrap reads $TFJOB_ACCESS_DIR/upload.json and tensorboard.json).
_ACCESS_MOUNT = {"name": VOLUME_ACCESS, "mountPath": ACCESS_DIR, "readOnly": True}
_UPLOAD_MOUNT = {"name": VOLUME_UPLOAD, "mountPath": ACCESS_DIR, "readOnly": True}
_WORKSPACE_MOUNT = {"name": VOLUME_WORKSPACE, "mountPath": WORKSPACE_DIR}
_CONFIG_MOUNT = {"name": VOLUME_CONFIG, "mountPath": CONFIG_DIR}

# The keeper sleeps; archive's `keeper.py read` execs (4 MiB base64 chunks) run in
# its cgroups, hence a little CPU and memory headroom above the request.
KEEPER_RESOURCES = {
    "requests": {"cpu": "10m", "memory": "32Mi"},
    "limits": {"cpu": "500m", "memory": "128Mi"},
}


def build_keeper_container(request: TrainingRequest) -> JsonObject:
    """The model owner's second container: keeps the workspace readable after `tensorflow` ends.

    Same image, `runtime/keeper.py`, the workspace read-only, no credentials and
    no environment but HOME: archive copies the model out of it by exec when the
    bootstrap's upload failed (docs/architecture.md, "The pod protocol").
    """
    return {
        "name": KEEPER_CONTAINER,
        "image": request.image,
        "command": list(KEEPER_COMMAND),
        "workingDir": PACKAGE_ROOT,
        "env": [build_home_env()],
        "resources": {kind: dict(amounts) for kind, amounts in KEEPER_RESOURCES.items()},
        "volumeMounts": [_RUNTIME_MOUNT, {**_WORKSPACE_MOUNT, "readOnly": True}],
        "securityContext": build_container_security_context(),
    }


def build_pod_manifest(
    request: TrainingRequest,
    run: RunIdentity,
    role: Role,
    index: int,
    upload_patience: int = UPLOAD_PATIENCE_SECONDS,
) -> JsonObject:
    """The pod of one replica, following the pod protocol of docs/architecture.md."""
    role = Role(role)
    count = request.replica_count(role)
    if not 0 <= index < count:
        raise ValueError(f"replica {role}-{index} given; the request has {count} {role} replica(s)")
    run_key = run.run_key
    resources = request.resources_for(role)
    node_selector = dict(request.node_selector)
    if request.gpu_type and resources.gpu > 0:
        node_selector[GPU_PRODUCT_LABEL] = request.gpu_type
    labels = naming.replica_labels(run.job, run_key, request.tenant, run.run_hash, role, index)
    owner = request.model_owner() == (role, index)
    # A request without a bundle: the program is in the image, the init container fetches none.
    no_bundle = [{"name": protocol.ENV_NO_BUNDLE, "value": "1"}] if request.bundle is None else []
    spec: JsonObject = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": request.active_deadline,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "enableServiceLinks": False,
        "serviceAccountName": SERVICE_ACCOUNT_NAME,
        "automountServiceAccountToken": False,
        "securityContext": build_pod_security_context(run.pod_user(request.tenant)),
        "affinity": build_affinity(request, run_key, role),
        "volumes": build_volumes(
            run_key,
            owner=owner,
            replica=naming.name_replica(role, index),
            shard=locate_tensorboard_shard(request, role, index),
        ),
        "initContainers": [
            {
                "name": INIT_CONTAINER,
                "image": request.image,
                "command": list(FETCH_COMMAND),
                "workingDir": PACKAGE_ROOT,
                "env": [
                    {"name": protocol.ENV_ROLE, "value": role.value},
                    {"name": protocol.ENV_INDEX, "value": str(index)},
                    *no_bundle,
                    build_home_env(),
                ],
                "resources": build_resources(request, role, with_gpu=False),
                "volumeMounts": [_RUNTIME_MOUNT, _ACCESS_MOUNT, _WORKSPACE_MOUNT],
                "securityContext": build_container_security_context(),
            }
        ],
        "containers": [
            {
                "name": MAIN_CONTAINER,
                "image": request.image,
                # `$` doubled: Kubernetes' own $(NAME) expansion hands the argv over unchanged,
                # and the bootstrap expands it once, with the cluster's variables (pod-protocol.md).
                "command": [
                    *BOOTSTRAP_COMMAND,
                    "--",
                    *(escape(item) for item in [*request.entrypoint, *request.args]),
                ],
                "workingDir": PACKAGE_ROOT,
                "env": build_replica_env(request, role, index, upload_patience),
                "ports": [{"name": PORT_NAME, "containerPort": request.port, "protocol": "TCP"}],
                "resources": build_resources(request, role),
                "volumeMounts": [
                    _RUNTIME_MOUNT,
                    _UPLOAD_MOUNT,
                    _WORKSPACE_MOUNT,
                    _CONFIG_MOUNT,
                ],
                "securityContext": build_container_security_context(),
            },
            *([build_keeper_container(request)] if owner else []),
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if request.tolerations:
        spec["tolerations"] = [toleration.to_manifest() for toleration in request.tolerations]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(run, naming.pod_name(run_key, role, index), labels),
        "spec": spec,
    }


def build_pod_manifests(
    request: TrainingRequest, run: RunIdentity, upload_patience: int = UPLOAD_PATIENCE_SECONDS
) -> list[JsonObject]:
    """One pod per replica, in Role order, then index order."""
    return [
        build_pod_manifest(request, run, role, index, upload_patience)
        for role, index in request.replicas_in_order()
    ]


def _check_object_data(kind: str, data: Mapping[str, str]) -> None:
    total = 0
    for key, value in data.items():
        if not key or not set(key) <= CONFIGMAP_KEY_CHARS or key in (".", ".."):
            raise ValueError(f"{kind} key {key!r} given; allowed: letters, digits, '-', '_', '.'")
        if not isinstance(value, str):
            raise ValueError(f"{kind} value of {key!r} is {type(value).__name__}; allowed: str")
        total += len(key) + len(value.encode("utf-8"))
    if total > MAX_OBJECT_DATA_BYTES:
        raise ValueError(
            f"{kind} data of {total} bytes given; allowed: at most {MAX_OBJECT_DATA_BYTES}"
        )


def build_runtime_configmap(run: RunIdentity, files: Mapping[str, str], tenant: str) -> JsonObject:
    """The run's ConfigMap with the runtime package's files (one key per file name)."""
    _check_object_data("ConfigMap", files)
    run_key = run.run_key
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(run, naming.configmap_name(run_key), run.labels(tenant)),
        "data": dict(files),
    }


def build_access_secret(
    run: RunIdentity, bundle_url: str, tenant: str, restore: Mapping[str, object] | None = None
) -> JsonObject:
    """The Secret every init container mounts: the presigned GET URL of the bundle, and
    the checkpoint files to restore (tfjob/checkpoints.py; none by default)."""
    document = dict(restore) if restore is not None else build_empty_restore()
    return _build_secret(
        run,
        naming.secret_name(run.run_key),
        {BUNDLE_URL_FILE: bundle_url, RESTORE_FILE: json.dumps(document, sort_keys=True)},
        tenant,
    )


def build_upload_secret(run: RunIdentity, upload: Mapping[str, object], tenant: str) -> JsonObject:
    """The Secret only the model owner's main container mounts: its upload grants."""
    return _build_secret(
        run,
        naming.upload_secret_name(run.run_key),
        {UPLOAD_FILE: json.dumps(dict(upload), sort_keys=True)},
        tenant,
    )


def build_tensorboard_files(
    tensorboard: Mapping[str, Mapping[str, object]],
) -> dict[int, dict[str, str]]:
    """Shard -> files of the summaries grants' Secrets: `tensorboard-<role>-<index>.json` each,
    `tensorboard` in `replicas_in_order` (GrantPlan.replicas), as locate_tensorboard_shard
    finds them."""
    shards: dict[int, dict[str, str]] = {}
    for position, (replica, grant) in enumerate(tensorboard.items()):
        files = shards.setdefault(position // TENSORBOARD_GRANTS_PER_SECRET, {})
        files[naming.tensorboard_grant_key(replica)] = json.dumps(dict(grant), sort_keys=True)
    return shards


def build_tensorboard_secrets(
    run: RunIdentity, tensorboard: Mapping[str, Mapping[str, object]], tenant: str
) -> list[JsonObject]:
    """The Secrets of every replica's summaries grant (each pod mounts only its own)."""
    return [
        _build_secret(run, naming.tensorboard_secret_name(run.run_key, shard), files, tenant)
        for shard, files in build_tensorboard_files(tensorboard).items()
    ]


def _build_secret(run: RunIdentity, name: str, data: dict[str, str], tenant: str) -> JsonObject:
    _check_object_data("Secret", data)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _metadata(run, name, run.labels(tenant)),
        "stringData": data,
    }
