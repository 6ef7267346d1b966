"""A Kubeflow `kubeflow.org/v1` TFJob read into typed records, every unknown field refused.

Kubeflow's API (training-operator `pkg/apis/kubeflow.org/v1`: tensorflow_types.go,
common_types.go, tensorflow_defaults.go) is read here as its operator reads it: replica
types in any letter case (`setTensorflowTypeNamesToCamelCase`), `replicas` defaulting to 1,
`restartPolicy` to Never, the port of the `tensorflow` container's port named `tfjob-port`
defaulting to 2222. Nothing is dropped in silence: a field that this reader does not map is
a `Refusal` naming its path, and a field that maps loosely adds a note. The mapping onto a
request is convert.py's.
"""

from dataclasses import dataclass, field
from enum import StrEnum

import yaml

from tfjob.kubeflow.errors import Refusal, TFJobRefused
from tfjob.kubeflow.podtemplate import PodTemplate, read_pod_template
from tfjob.kubeflow.reader import REFUSAL_REASONS, FieldReader, join_path
from tfjob.request.checks import MAX_REQUEST_BYTES, encoded_size

API_VERSION = "kubeflow.org/v1"
KIND = "TFJob"
# A TFJob is a request by another name: the same cap as a request file, checked before parsing.
MAX_MANIFEST_BYTES = MAX_REQUEST_BYTES
# Annotations this platform reads on a TFJob (docs/kubeflow.md).
BUNDLE_ANNOTATION = "tf-on-k8s.io/bundle"
TENANT_ANNOTATION = "tf-on-k8s.io/tenant"
OUTPUT_ANNOTATION = "tf-on-k8s.io/output"
OUR_ANNOTATIONS = (BUNDLE_ANNOTATION, TENANT_ANNOTATION, OUTPUT_ANNOTATION)


class ReplicaType(StrEnum):
    """Kubeflow's TFReplicaType; declaration order follows our Role order."""

    CHIEF = "Chief"
    MASTER = "Master"
    PS = "PS"
    WORKER = "Worker"
    EVALUATOR = "Evaluator"


class RestartPolicy(StrEnum):
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(StrEnum):
    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


@dataclass(frozen=True)
class ReplicaSpec:
    """One entry of `spec.tfReplicaSpecs`; `path` is where it was written."""

    type: ReplicaType
    path: str
    replicas: int
    restart_policy: RestartPolicy
    template: PodTemplate


@dataclass(frozen=True)
class RunPolicy:
    clean_pod_policy: CleanPodPolicy | None = None
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    backoff_limit: int | None = None
    min_available: int | None = None
    schedule_timeout_seconds: int | None = None


@dataclass(frozen=True)
class TFJobManifest:
    name: str
    namespace: str | None
    annotations: tuple[tuple[str, str], ...]
    replica_specs: tuple[ReplicaSpec, ...]  # in ReplicaType order
    run_policy: RunPolicy
    all_workers_succeed: bool  # successPolicy AllWorkers; else Kubeflow's default
    notes: tuple[str, ...] = field(default=())

    def annotation(self, key: str) -> str | None:
        return dict(self.annotations).get(key)


def parse_tfjob(text: str) -> TFJobManifest:
    """A TFJob manifest from YAML or JSON text; TFJobRefused naming every field that stops it."""
    size = encoded_size(text)
    if size > MAX_MANIFEST_BYTES:
        raise TFJobRefused(
            [Refusal("manifest", f"{size} bytes", f"at most {MAX_MANIFEST_BYTES} bytes")]
        )
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problem = str(exc).strip().splitlines()[0]
        raise TFJobRefused(
            [Refusal("manifest", "text that is not YAML", f"one YAML document ({problem})")]
        ) from None
    return read_tfjob(data)


def is_tfjob(data: object) -> bool:
    """Whether parsed YAML is (meant to be) a Kubeflow TFJob rather than a request."""
    return isinstance(data, dict) and (
        data.get("kind") == KIND or str(data.get("apiVersion", "")).startswith("kubeflow.org/")
    )


def read_tfjob(data: object) -> TFJobManifest:
    """A TFJob manifest from parsed YAML; TFJobRefused naming every field that stops it."""
    reader = FieldReader()
    top = reader.mapping(data, "manifest", ("apiVersion", "kind", "metadata", "spec"))
    if top.get("apiVersion") != API_VERSION:
        reader.refuse("apiVersion", top.get("apiVersion"), f"supported: {API_VERSION}")
    if top.get("kind") != KIND:
        reader.refuse("kind", top.get("kind"), f"supported: {KIND}")
    metadata = reader.mapping(
        top.get("metadata"), "metadata", ("name", "namespace", "labels", "annotations")
    )
    name = reader.string(metadata.get("name"), "metadata.name", required=True) or ""
    namespace = reader.string(metadata.get("namespace"), "metadata.namespace")
    if reader.string_map(metadata.get("labels"), "metadata.labels"):
        reader.notes.append(
            "metadata.labels: not carried; a run's objects carry the platform's labels"
        )
    annotations = reader.string_map(metadata.get("annotations"), "metadata.annotations")
    others = [key for key, _ in annotations if key not in OUR_ANNOTATIONS]
    if others:
        reader.notes.append(f"metadata.annotations: not carried: {', '.join(others)}")
    spec = reader.mapping(
        top.get("spec"),
        "spec",
        ("tfReplicaSpecs", "runPolicy", "successPolicy", "enableDynamicWorker"),
    )
    if spec.get("enableDynamicWorker") not in (None, False):
        reader.refuse(
            "spec.enableDynamicWorker",
            spec["enableDynamicWorker"],
            REFUSAL_REASONS["enableDynamicWorker"],
        )
    success = spec.get("successPolicy")
    if success not in (None, "", "AllWorkers"):
        reader.refuse("spec.successPolicy", success, 'supported: "" (the default) and "AllWorkers"')
    replica_specs = _read_replica_specs(reader, spec.get("tfReplicaSpecs"))
    run_policy = _read_run_policy(reader, spec.get("runPolicy"))
    if reader.refusals:
        raise TFJobRefused(reader.refusals)
    return TFJobManifest(
        name=name,
        namespace=namespace,
        annotations=annotations,
        replica_specs=replica_specs,
        run_policy=run_policy,
        all_workers_succeed=success == "AllWorkers",
        notes=tuple(reader.notes),
    )


def _read_replica_specs(reader: FieldReader, value: object) -> tuple[ReplicaSpec, ...]:
    path = "spec.tfReplicaSpecs"
    if not isinstance(value, dict) or not value:
        reader.refuse(
            path,
            value,
            "a mapping of replica type (Chief, Master, PS, Worker, "
            "Evaluator) to its replica spec is required",
        )
        return ()
    found: dict[ReplicaType, ReplicaSpec] = {}
    for key, item in value.items():
        where = join_path(path, key)
        kind = next((t for t in ReplicaType if t.value.lower() == str(key).lower()), None)
        if kind is None:
            reader.refuse(where, key, f"allowed: {', '.join(t.value for t in ReplicaType)}")
            continue
        if kind in found:
            reader.refuse(where, key, f"{kind.value} is given twice (replica types ignore case)")
            continue
        spec = _read_replica_spec(reader, kind, where, item)
        if spec is not None:
            found[kind] = spec
    if ReplicaType.CHIEF in found and ReplicaType.MASTER in found:
        reader.refuse(
            found[ReplicaType.MASTER].path, "Master", "a job has a Chief or a Master, not both"
        )
    return tuple(found[kind] for kind in ReplicaType if kind in found)


def _read_replica_spec(
    reader: FieldReader, kind: ReplicaType, path: str, value: object
) -> ReplicaSpec | None:
    before = len(reader.refusals)
    spec = reader.mapping(value, path, ("replicas", "restartPolicy", "template"))
    replicas = reader.integer(spec.get("replicas", 1), f"{path}.replicas", 0)
    restart = reader.choice(spec.get("restartPolicy"), f"{path}.restartPolicy", RestartPolicy)
    template = read_pod_template(reader, spec.get("template"), f"{path}.template")
    if len(reader.refusals) > before or template is None or replicas is None:
        return None
    return ReplicaSpec(kind, path, replicas, restart or RestartPolicy.NEVER, template)


def _read_run_policy(reader: FieldReader, value: object) -> RunPolicy:
    path = "spec.runPolicy"
    policy = reader.mapping(
        value,
        path,
        (
            "cleanPodPolicy",
            "ttlSecondsAfterFinished",
            "activeDeadlineSeconds",
            "backoffLimit",
            "schedulingPolicy",
        ),
    )
    scheduling = reader.mapping(
        policy.get("schedulingPolicy"),
        f"{path}.schedulingPolicy",
        ("minAvailable", "scheduleTimeoutSeconds"),
    )
    return RunPolicy(
        clean_pod_policy=reader.choice(
            policy.get("cleanPodPolicy"), f"{path}.cleanPodPolicy", CleanPodPolicy
        ),
        ttl_seconds_after_finished=reader.integer(
            policy.get("ttlSecondsAfterFinished"), f"{path}.ttlSecondsAfterFinished", 0
        ),
        active_deadline_seconds=reader.integer(
            policy.get("activeDeadlineSeconds"), f"{path}.activeDeadlineSeconds", 1
        ),
        backoff_limit=reader.integer(policy.get("backoffLimit"), f"{path}.backoffLimit", 0),
        min_available=reader.integer(
            scheduling.get("minAvailable"), f"{path}.schedulingPolicy.minAvailable", 1
        ),
        schedule_timeout_seconds=reader.integer(
            scheduling.get("scheduleTimeoutSeconds"),
            f"{path}.schedulingPolicy.scheduleTimeoutSeconds",
            1,
        ),
    )
