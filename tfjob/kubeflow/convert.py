"""A TFJob's records mapped onto a `TrainingRequest`, or refused field by field.

The request runs one image, command, args, env, port, node selector, tolerations and
restart policy for every replica (resources and node affinity are per role), so a TFJob
whose replica types differ in one of them is refused at the first type that differs.
Replica types become roles (Chief and Master are our chief; a Master keeps its name in
TF_CONFIG through `chief_task_type: master`), and the job's mode follows Kubeflow's own
test of a distributed job (training-operator `isDistributed`: more than one replica in
all): one replica runs in single mode, without TF_CONFIG, as Kubeflow gives none. Where
the platform behaves differently from Kubeflow but close enough to run the job (pods
removed when the run ends, gang restarts instead of pod restarts), the conversion says so
in a note. docs/kubeflow.md is the table.
"""

from dataclasses import dataclass

from tfjob.jsontypes import JsonObject
from tfjob.kubeflow.errors import Refusal, TFJobRefused
from tfjob.kubeflow.manifest import (
    BUNDLE_ANNOTATION,
    OUTPUT_ANNOTATION,
    TENANT_ANNOTATION,
    CleanPodPolicy,
    ReplicaSpec,
    ReplicaType,
    RestartPolicy,
    TFJobManifest,
)
from tfjob.kubeflow.podtemplate import GPU_RESOURCE
from tfjob.request.errors import NOTHING
from tfjob.request.model import RequestError, Role, TrainingRequest, validate_request
from tfjob.restart_policy import MAX_RESTARTS, RestartOn

ROLE_OF = {
    ReplicaType.CHIEF: Role.CHIEF,
    ReplicaType.MASTER: Role.CHIEF,
    ReplicaType.PS: Role.PS,
    ReplicaType.WORKER: Role.WORKER,
    ReplicaType.EVALUATOR: Role.EVALUATOR,
}
ONE_FOR_ALL = (
    "every replica here runs one image, command, args, env, port, node selector, "
    "tolerations and restart policy"
)
RESTART_ON = {RestartPolicy.EXIT_CODE: RestartOn.RETRYABLE, RestartPolicy.ON_FAILURE: "any_failure"}


@dataclass(frozen=True)
class Conversion:
    """The request a TFJob became, and what a person should know about the mapping."""

    request: TrainingRequest
    notes: tuple[str, ...]

    def request_data(self) -> JsonObject:
        """The request as a request file holds it (fields left at their defaults left out)."""
        return self.request.model_dump(mode="json", exclude_defaults=True)


@dataclass(frozen=True)
class Destination:
    """Where a converted job's code comes from and goes to: options before annotations."""

    bundle: str | None = None
    tenant: str | None = None
    output: str | None = None


def _shared_fields(spec: ReplicaSpec) -> dict[str, tuple[str, object]]:
    container_path = spec.template.container_path
    container = spec.template.container
    return {
        "image": (f"{container_path}.image", container.image),
        "entrypoint": (f"{container_path}.command", container.command),
        "args": (f"{container_path}.args", container.args),
        "env": (f"{container_path}.env", container.env),
        "port": (f"{container_path}.ports", container.port),
        "node_selector": (f"{spec.path}.template.spec.nodeSelector", spec.template.node_selector),
        "tolerations": (f"{spec.path}.template.spec.tolerations", spec.template.tolerations),
        "restart": (f"{spec.path}.restartPolicy", spec.restart_policy),
    }


class _Mapping:
    """One conversion: the request's fields, the refusals and notes, where each field came from."""

    def __init__(self, manifest: TFJobManifest, destination: Destination) -> None:
        self.manifest = manifest
        self.destination = destination
        self.refusals: list[Refusal] = []
        self.notes: list[str] = list(manifest.notes)
        self.sources: dict[str, str] = {"name": "metadata.name"}
        self.data: JsonObject = {"name": manifest.name}

    def refuse(self, path: str, given: object, allowed: str) -> None:
        self.refusals.append(Refusal(path, given, allowed))

    def take_place(
        self, field: str, option: str | None, annotation: str, fallback: str = ""
    ) -> None:
        """bundle, tenant or output: the option, else the annotation (else `fallback`'s value)."""
        if option:
            self.data[field], self.sources[field] = option, f"--{field}"
            return
        value = self.manifest.annotation(annotation)
        where = f'metadata.annotations["{annotation}"]'
        if value:
            self.data[field], self.sources[field] = value, where
        elif fallback == "metadata.namespace" and self.manifest.namespace:
            self.data[field], self.sources[field] = self.manifest.namespace, fallback
        elif field == "bundle":
            self.notes.append(
                f"{where}: no bundle: the program is in the image, its command runs in an "
                "empty code/ directory (DATA_DIR empty); give --bundle or this annotation "
                "to run it from a bundle"
            )
        else:
            needed = {
                "tenant": "a tenant is required",
                "output": "an output is required (where the run's model and logs go)",
            }[field]
            self.refuse(where, NOTHING, f"{needed}: give --{field} or this annotation")

    def map_shared(self, specs: tuple[ReplicaSpec, ...]) -> None:
        first = _shared_fields(specs[0])
        for spec in specs[1:]:
            for key, (path, value) in _shared_fields(spec).items():
                if value != first[key][1]:
                    self.refuse(path, value, f"the same as {first[key][0]}; {ONE_FOR_ALL}")
        self.sources |= {key: path for key, (path, _) in first.items()}
        container = specs[0].template.container
        if container.command is None:
            self.refuse(
                first["entrypoint"][0],
                NOTHING,
                "a command is required: the program runs in the bundle's code/ directory "
                "(e.g. [python3, train.py]), or as the image has it when there is no bundle "
                "(e.g. [python3, -m, trainer]); the image's own entrypoint is not read",
            )
        self.data |= {
            "image": container.image,
            "entrypoint": list(container.command or []),
            "args": list(container.args),
            "env": dict(container.env),
            "port": container.port,
            "node_selector": dict(specs[0].template.node_selector),
            "tolerations": [dict(t) for t in specs[0].template.tolerations],
        }

    def map_replicas(self, specs: tuple[ReplicaSpec, ...]) -> None:
        counts = {ROLE_OF[spec.type]: spec.replicas for spec in specs}
        path_of = {ROLE_OF[spec.type]: spec.path for spec in specs}
        for role, path in path_of.items():
            self.sources[f"replicas.{role.value}"] = f"{path}.replicas"
        chief = next((s for s in specs if ROLE_OF[s.type] is Role.CHIEF), None)
        if chief is not None and chief.replicas != 1:
            self.refuse(f"{chief.path}.replicas", chief.replicas, "supported: 1")
        for spec in specs:
            if spec.replicas == 0 and spec.type in (ReplicaType.PS, ReplicaType.WORKER):
                # Kubeflow's TF_CONFIG would name an empty job; ours names none.
                self.refuse(
                    f"{spec.path}.replicas", 0, f"at least 1; leave {spec.type.value} out instead"
                )
        total = sum(counts.values())
        if total == 1:
            only = next(s for s in specs if s.replicas)
            if ROLE_OF[only.type] not in (Role.CHIEF, Role.WORKER):
                self.refuse(
                    f"{only.path}.replicas",
                    1,
                    "a job of one replica needs a Chief, Master or Worker",
                )
            self.data["replicas"] = {"worker": 1}  # single mode: one worker, no TF_CONFIG
            self._map_resources(Role.WORKER, only)
            self._map_node_affinity(Role.WORKER, only)
            return
        if total == 0:
            self.refuse("spec.tfReplicaSpecs", 0, "at least one replica is required")
            return
        ps, workers = counts.get(Role.PS, 0), counts.get(Role.WORKER, 0)
        if Role.WORKER not in counts:
            needs = "parameter-server" if ps else "multi-worker"
            self.refuse(
                path_of.get(Role.WORKER, "spec.tfReplicaSpecs.Worker") + ".replicas",
                workers,
                f"a distributed {needs} job needs at least 1 Worker here",
            )
        self.data |= {
            "mode": "distributed",
            "strategy": "parameter_server" if ps else "multi_worker_mirrored",
            "replicas": {role.value: count for role, count in counts.items()},
        }
        if chief is not None and chief.type is ReplicaType.MASTER:
            self.data["chief_task_type"] = "master"
        for spec in specs:
            self._map_resources(ROLE_OF[spec.type], spec)
            self._map_node_affinity(ROLE_OF[spec.type], spec)

    def _map_node_affinity(self, role: Role, spec: ReplicaSpec) -> None:
        """A replica type's nodeAffinity is its role's (pod affinity was refused when read)."""
        if spec.template.node_affinity:
            self.data.setdefault("node_affinity", {})[role.value] = spec.template.node_affinity
            self.sources[f"node_affinity.{role.value}"] = (
                f"{spec.path}.template.spec.affinity.nodeAffinity"
            )

    def _map_resources(self, role: Role, spec: ReplicaSpec) -> None:
        container = spec.template.container
        path = f"{spec.template.container_path}.resources"
        self.sources[f"resources.{role.value}"] = path
        requests, limits = dict(container.requests), dict(container.limits)
        resources: JsonObject = {}
        for key, value in (("cpu", requests.get("cpu")), ("memory", requests.get("memory"))):
            if value is not None:
                resources[key] = value
        for key, value in (
            ("cpu_limit", limits.get("cpu")),
            ("memory_limit", limits.get("memory")),
        ):
            if value is not None:
                resources[key] = value
        gpus = {limits.get(GPU_RESOURCE), requests.get(GPU_RESOURCE)} - {None}
        if len(gpus) > 1:
            self.refuse(
                f"{path}.requests.{GPU_RESOURCE}", requests[GPU_RESOURCE], "the same as its limit"
            )
        elif gpus:
            gpu = gpus.pop()
            if not gpu.isdigit():
                self.refuse(f"{path}.limits.{GPU_RESOURCE}", gpu, "a whole number of GPUs")
            else:
                resources["gpu"] = int(gpu)
        self.data.setdefault("resources", {})[role.value] = resources

    def map_policies(self, restart: RestartPolicy, restart_path: str) -> None:
        policy = self.manifest.run_policy
        limit = policy.backoff_limit
        if restart is RestartPolicy.ALWAYS:
            self.refuse(
                restart_path,
                restart.value,
                "Always restarts replicas that succeeded too, and a run here ends when its "
                "training replicas succeed; supported: Never, OnFailure, ExitCode",
            )
        elif restart is RestartPolicy.NEVER:
            if limit is not None:
                self.notes.append(
                    "spec.runPolicy.backoffLimit: no restarts with Never, as in Kubeflow"
                )
        else:
            self.sources["max_restarts"] = "spec.runPolicy.backoffLimit"
            self.data["restart_on"] = RESTART_ON[restart]
            self.data["max_restarts"] = MAX_RESTARTS if limit is None else limit
            self.notes.append(
                f"{restart_path}: {restart.value}: a failed replica restarts the whole gang "
                f"(from its last checkpoint), at most {self.data['max_restarts']} times"
                + ("" if limit is not None else " (no backoffLimit given)")
            )
        clean = policy.clean_pod_policy
        if clean is CleanPodPolicy.NONE:
            self.refuse(
                "spec.runPolicy.cleanPodPolicy",
                clean.value,
                "a run's pods are removed when it ends (their logs are archived to the run's "
                "output); supported: All, Running, or leave it out",
            )
        elif clean is not CleanPodPolicy.ALL:
            self.notes.append(
                "spec.runPolicy.cleanPodPolicy: every pod is removed when the run ends "
                "(as All); logs are archived to the run's output"
            )
        if policy.ttl_seconds_after_finished is not None:
            self.notes.append(
                "spec.runPolicy.ttlSecondsAfterFinished: nothing of a run is left in the "
                "cluster when it ends; its record stays in Airflow"
            )
        if policy.active_deadline_seconds is not None:
            self.data["active_deadline"] = policy.active_deadline_seconds
            self.sources["active_deadline"] = "spec.runPolicy.activeDeadlineSeconds"
        if policy.schedule_timeout_seconds is not None:
            self.data["startup_timeout"] = policy.schedule_timeout_seconds
            self.sources["startup_timeout"] = (
                "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds"
            )
        total = sum(spec.replicas for spec in self.manifest.replica_specs)
        if policy.min_available is not None and policy.min_available != total:
            self.refuse(
                "spec.runPolicy.schedulingPolicy.minAvailable",
                policy.min_available,
                f"the whole gang starts together here; supported: {total} (every replica) "
                "or leave it out",
            )
        if self.manifest.all_workers_succeed:
            self.data["success_policy"] = "all_workers"
            self.sources["success_policy"] = "spec.successPolicy"

    def validate(self) -> TrainingRequest:
        try:
            return validate_request(self.data)
        except RequestError as exc:
            head = exc.field.split(".")[0].split("[")[0]
            two = ".".join(exc.field.split(".")[:2])
            path = self.sources.get(two) or self.sources.get(head) or f"request.{exc.field}"
            raise TFJobRefused(
                [Refusal(path, exc.given, f"{exc.allowed} (the request's {exc.field})")]
            ) from None


def convert_tfjob(manifest: TFJobManifest, destination: Destination | None = None) -> Conversion:
    """The request `manifest` maps onto; TFJobRefused naming every field that does not map."""
    destination = destination or Destination()
    mapping = _Mapping(manifest, destination)
    mapping.take_place("bundle", destination.bundle, BUNDLE_ANNOTATION)
    mapping.take_place("tenant", destination.tenant, TENANT_ANNOTATION, "metadata.namespace")
    mapping.take_place("output", destination.output, OUTPUT_ANNOTATION)
    specs = manifest.replica_specs
    mapping.map_shared(specs)
    mapping.map_replicas(specs)
    mapping.map_policies(specs[0].restart_policy, f"{specs[0].path}.restartPolicy")
    if mapping.refusals:
        raise TFJobRefused(mapping.refusals)
    return Conversion(mapping.validate(), tuple(mapping.notes))
