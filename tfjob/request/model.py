"""The training request: the one model of what a user asks TF-on-K8s to run.

A request arrives as YAML, JSON or an Airflow `dag_run.conf` dict and is
checked here, completely, before anything touches Kubernetes or S3. Every
failure surfaces as one `RequestError` whose message names the field, the
value given and what is allowed, e.g.
`request.replicas.ps: 0 given; distributed parameter-server jobs need at least 1`.

The request's parts (the `Role`, `Mode`... enums, limits and defaults, the
nested `Replicas`, `RoleResources`, `Toleration`) live in tfjob/request/fields.py;
the ones callers use are exported here too (`__all__`), so `tfjob.request.model`
stays the one import for the request.
"""

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from tfjob.grants import MAX_GRANT_SECONDS, max_active_deadline, run_window_seconds
from tfjob.request import recovery
from tfjob.request.affinity import NodeAffinity
from tfjob.request.checks import (
    LABEL_VALUE_PATTERN,
    check_argv,
    check_dns_label,
    check_env,
    check_label_map,
    check_request_size,
    check_s3_url,
    check_text_size,
    encoded_size,
)
from tfjob.request.errors import (
    RequestError,
    Unquoted,
    convert_validation_error,
    invalid,
)
from tfjob.request.fields import (
    DEFAULT_ACTIVE_DEADLINE,
    DEFAULT_GPU,
    DEFAULT_IMAGE,
    DEFAULT_PORT,
    DEFAULT_STARTUP_TIMEOUT,
    MAX_NAME_LENGTH,
    MAX_RETRIES,
    MAX_TENANT_LENGTH,
    ChiefTaskType,
    Mode,
    Placement,
    Replicas,
    Role,
    RoleResources,
    Strategy,
    StrictModel,
    SuccessPolicy,
    Toleration,
    default_resources,
)
from tfjob.schedule import AIRFLOW_PRESETS, explain_schedule_problem

# libyaml's loader where PyYAML was built with it: a DAG folder of request files
# parses in about half the time of the pure-Python loader.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class TrainingRequest(StrictModel):
    """A complete, validated training request."""

    name: str = Field(description="Job name: a DNS-1123 label of at most 40 characters.")
    tenant: str = Field(
        description="Tenant owning the job (DNS-1123 label); decides the namespace."
    )
    mode: Mode = Field(
        Mode.SINGLE, description="single: one worker replica; distributed: a TensorFlow cluster."
    )
    strategy: Strategy = Field(
        Strategy.PARAMETER_SERVER,
        description="Layout of a distributed job: parameter_server "
        "(ps >= 1) or multi_worker_mirrored (ps = 0).",
    )
    replicas: Replicas = Field(
        default_factory=Replicas,
        description="Replicas per role: chief 0-1, ps, worker, "
        "evaluator 0-1. single mode: exactly 1 worker.",
    )
    resources: dict[Role, RoleResources] = Field(
        default_factory=default_resources,
        description=f"Per-role cpu, memory, gpu requests and optional cpu_limit, "
        f"memory_limit; a cpu/memory left out gets the tenant's LimitRange "
        f"default, gpu {DEFAULT_GPU}.",
    )
    gpu_type: str | None = Field(
        None, description="GPU product (node label nvidia.com/gpu.product) for GPU replicas."
    )
    image: str = Field(
        DEFAULT_IMAGE, description="Container image with Python 3 and TensorFlow.", min_length=1
    )
    entrypoint: list[str] = Field(
        description="Program argv, run in the bundle's code/ "
        "directory, e.g. [python3, train.py]; $(NAME) "
        "is expanded as in args."
    )
    args: list[str] = Field(
        default_factory=list,
        description="Arguments appended to the "
        "entrypoint; $(NAME) becomes the pod's variable NAME (e.g. "
        "$(JOB_NAME), $(PS_HOSTS)), $$(NAME) is a literal $(NAME), an "
        "unset NAME stays as written (Kubernetes' rules).",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment variables; TFJOB_* and TF_CONFIG are reserved.",
    )
    bundle: str | None = Field(
        None,
        description="Code+data bundle: s3://bucket/key.tar.gz; none: the program is in the "
        "image (entrypoint runs in an empty code/ directory, DATA_DIR empty, nothing fetched).",
    )
    output: str = Field(description="Where runs are published: s3://bucket/prefix.")
    schedule: str | None = Field(
        None,
        description="None (manual), an Airflow preset "
        "(" + ", ".join(AIRFLOW_PRESETS) + ") or a 5-field cron.",
    )
    startup_timeout: int = Field(
        DEFAULT_STARTUP_TIMEOUT,
        ge=1,
        le=86400,
        description="Seconds for all replicas to start and receive the ClusterSpec.",
    )
    active_deadline: int = Field(
        DEFAULT_ACTIVE_DEADLINE,
        ge=1,
        le=30 * 86400,
        description="Seconds a replica may run in all; more than startup_timeout.",
    )
    retries: int = Field(0, ge=0, le=MAX_RETRIES, description="Airflow retries of a failed run.")
    max_restarts: recovery.MaxRestarts = recovery.DEFAULT_MAX_RESTARTS
    restart_on: recovery.RestartOnSetting = recovery.DEFAULT_RESTART_ON
    checkpoint_interval: recovery.CheckpointInterval = recovery.DEFAULT_CHECKPOINT_INTERVAL
    warm_start: recovery.WarmStart = None
    success_policy: SuccessPolicy | None = Field(
        None,
        description="Which replicas must succeed: chief, worker0 or all_workers; "
        "default chief when there is a chief, else worker0.",
    )
    placement: Placement = Field(
        Placement.SPREAD, description="spread replicas over nodes or pack them together."
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels every replica requires."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Kubernetes tolerations for every replica."
    )
    node_affinity: dict[Role, NodeAffinity] = Field(
        default_factory=dict,
        description="Per-role node affinity: required terms (a node must match one) and "
        "weighted preferred terms of match_expressions (In, NotIn, Exists, DoesNotExist, "
        "Gt, Lt), as Kubernetes' nodeAffinity.",
    )
    port: int = Field(
        DEFAULT_PORT, ge=1024, le=65535, description="TensorFlow gRPC port of every replica."
    )
    chief_task_type: ChiefTaskType = Field(
        ChiefTaskType.CHIEF,
        description="The chief's cluster key and task type in TF_CONFIG: chief, or master "
        "as a Kubeflow TFJob's Master replica has it.",
    )

    @field_validator("name", mode="before")
    @classmethod
    def _check_name(cls, value: object) -> object:
        return check_dns_label(value, MAX_NAME_LENGTH)

    @field_validator("tenant", mode="before")
    @classmethod
    def _check_tenant(cls, value: object) -> object:
        return check_dns_label(value, MAX_TENANT_LENGTH)

    @field_validator("entrypoint", "args", mode="before")
    @classmethod
    def _check_argv(cls, value: object, info: Any) -> object:
        return check_argv(value, info.field_name)

    @field_validator("env", mode="before")
    @classmethod
    def _check_env(cls, value: object) -> object:
        return check_env(value)

    @field_validator("resources", mode="before")
    @classmethod
    def _fill_default_resources(cls, value: object) -> object:
        if not isinstance(value, Mapping):
            raise invalid(
                "a mapping of role (chief, ps, worker, evaluator) to "
                "{cpu, memory, gpu, cpu_limit, memory_limit} is allowed",
                value,
            )
        filled: dict[Any, Any] = {role.value: {} for role in Role}
        for key, item in value.items():
            if str(key) not in filled:
                raise invalid(
                    "allowed roles: " + ", ".join(role.value for role in Role), key, str(key)
                )
            filled[str(key)] = {} if item is None else item
        return filled

    @field_validator("gpu_type")
    @classmethod
    def _check_gpu_type(cls, value: str | None) -> str | None:
        if value is not None and (
            len(value) > 63 or not LABEL_VALUE_PATTERN.match(value) or not value
        ):
            raise invalid("a Kubernetes label value is allowed, e.g. NVIDIA-A100-SXM4-40GB", value)
        return value

    @field_validator("bundle")
    @classmethod
    def _check_bundle(cls, value: str | None) -> str | None:
        if value is None:
            return None
        bucket, key = check_s3_url(value, "s3://bucket/key.tar.gz")
        if not key.endswith(".tar.gz") or key.endswith("/.tar.gz") or key == ".tar.gz":
            raise invalid("an s3://bucket/key.tar.gz URL is allowed (key ending in .tar.gz)", value)
        return value

    @field_validator("output")
    @classmethod
    def _check_output(cls, value: str) -> str:
        check_s3_url(value, "s3://bucket/prefix")
        return value.rstrip("/")

    @field_validator("schedule", mode="before")
    @classmethod
    def _check_schedule(cls, value: object) -> object:
        if value is None:
            return None
        if not isinstance(value, str):
            raise invalid("none, an Airflow preset or a 5-field cron string is allowed", value)
        problem = explain_schedule_problem(value.strip())
        if problem:
            raise invalid(
                f"{problem}; allowed: none, one of {', '.join(AIRFLOW_PRESETS)} or "
                'a 5-field cron like "0 3 * * *"',
                value,
            )
        return value.strip()

    @field_validator("node_selector", mode="before")
    @classmethod
    def _check_node_selector(cls, value: object) -> object:
        return check_label_map(value, "node_selector")

    @model_validator(mode="before")
    @classmethod
    def _require_mapping(cls, data: object) -> object:
        if not isinstance(data, Mapping):
            raise invalid("a mapping of request fields is allowed", data)
        # A required field given as null (e.g. an empty Airflow form field) is missing.
        return {
            key: value
            for key, value in data.items()
            if value is not None or key not in _REQUIRED_FIELDS
        }

    @model_validator(mode="after")
    def _check_mode_rules(self) -> "TrainingRequest":
        replicas = self.replicas
        if self.mode is Mode.SINGLE:
            for role in Role:
                wanted = 1 if role is Role.WORKER else 0
                if getattr(replicas, role.value) != wanted:
                    raise invalid(
                        f"single mode runs exactly 1 worker and no {role.value}"
                        if role is not Role.WORKER
                        else "single mode runs exactly 1 worker",
                        getattr(replicas, role.value),
                        f"replicas.{role.value}",
                    )
        elif self.strategy is Strategy.PARAMETER_SERVER:
            if replicas.ps < 1:
                raise invalid(
                    "distributed parameter-server jobs need at least 1", replicas.ps, "replicas.ps"
                )
            if replicas.worker < 1:
                raise invalid(
                    "distributed parameter-server jobs need at least 1",
                    replicas.worker,
                    "replicas.worker",
                )
        else:
            if replicas.ps != 0:
                raise invalid(
                    "multi_worker_mirrored jobs have no ps (0)", replicas.ps, "replicas.ps"
                )
            if replicas.worker < 1:
                raise invalid(
                    "multi_worker_mirrored jobs need at least 1", replicas.worker, "replicas.worker"
                )
        if self.active_deadline <= self.startup_timeout:
            raise invalid(
                f"must be more than startup_timeout ({self.startup_timeout})",
                self.active_deadline,
                "active_deadline",
            )
        if run_window_seconds(self.startup_timeout, self.active_deadline) > MAX_GRANT_SECONDS:
            raise invalid(
                f"at most {max_active_deadline(self.startup_timeout)} with startup_timeout "
                f"{self.startup_timeout}: the pods' S3 grants must cover startup_timeout + "
                f"active_deadline + 600 s, and a presigned grant lasts at most 7 days",
                self.active_deadline,
                "active_deadline",
            )
        if self.success_policy is SuccessPolicy.CHIEF and replicas.chief == 0:
            raise invalid(
                "policy chief needs replicas.chief = 1; use worker0 or all_workers",
                self.success_policy.value,
                "success_policy",
            )
        if self.success_policy is None:
            # frozen model: set the resolved default once, during validation
            policy = SuccessPolicy.CHIEF if replicas.chief else SuccessPolicy.WORKER0
            object.__setattr__(self, "success_policy", policy)
        return self

    def replica_count(self, role: Role) -> int:
        """How many replicas of `role` the job runs."""
        return getattr(self.replicas, Role(role).value)

    def replicas_in_order(self) -> list[tuple[Role, int]]:
        """Every (role, index) of the job, in Role order, then index order."""
        return [(role, index) for role in Role for index in range(self.replica_count(role))]

    def model_owner(self) -> tuple[Role, int]:
        """The replica that uploads the model: chief 0 if any, else worker 0."""
        return (Role.CHIEF, 0) if self.replicas.chief else (Role.WORKER, 0)

    def resources_for(self, role: Role) -> RoleResources:
        """The resources of one replica of `role` (defaults when not given)."""
        return self.resources.get(Role(role), RoleResources())

    @property
    def is_distributed(self) -> bool:
        return self.mode is Mode.DISTRIBUTED


_REQUIRED_FIELDS = frozenset(
    name for name, field in TrainingRequest.model_fields.items() if field.is_required()
)


# --- loading ---------------------------------------------------------------------------

REQUEST_FORMATS = ("yaml", "json")
_SUFFIX_FORMATS = {".yaml": "yaml", ".yml": "yaml", ".json": "json"}


def validate_request(data: object) -> TrainingRequest:
    """A TrainingRequest from already-parsed data; RequestError when invalid."""
    if not isinstance(data, Mapping):
        raise RequestError(
            "",
            data if not isinstance(data, str) else data[:40],
            "a mapping of request fields is required",
        )
    check_request_size(data)
    try:
        return TrainingRequest.model_validate(dict(data))
    except ValidationError as exc:
        raise convert_validation_error(exc, TrainingRequest) from None


def parse_request(text: str, fmt: str) -> TrainingRequest:
    """A TrainingRequest from YAML or JSON text; RequestError when invalid."""
    if fmt not in REQUEST_FORMATS:
        raise ValueError(f"request format {fmt!r} given; allowed: {', '.join(REQUEST_FORMATS)}")
    check_text_size(encoded_size(text))
    try:
        data = _load_yaml(text) if fmt == "yaml" else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise RequestError(
            "",
            Unquoted(f"text that is not valid {fmt.upper()}"),
            f"a {fmt.upper()} mapping of request fields is required ({_describe_parse_error(exc)})",
        ) from None
    return validate_request(data)


def _load_yaml(text: str) -> object:
    try:
        return yaml.load(text, Loader=YAML_LOADER)
    except yaml.YAMLError:
        # Fails again, in the pure-Python loader's words: documented messages must not
        # depend on whether PyYAML was built with libyaml.
        return yaml.safe_load(text)


def _describe_parse_error(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).strip().splitlines()[0]
    if mark is not None:
        return f"{problem} at line {mark.line + 1} column {mark.column + 1}"
    return problem


def load_request(source: "str | os.PathLike[str] | Mapping[str, object]") -> TrainingRequest:
    """A TrainingRequest from a .yaml/.yml/.json file or a dict (Airflow dag_run.conf)."""
    if isinstance(source, Mapping):
        return validate_request(source)
    path = Path(source)
    fmt = _SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(
            f"request file {str(path)!r} given; allowed suffixes: {', '.join(_SUFFIX_FORMATS)}"
        )
    check_text_size(path.stat().st_size)  # before reading it
    return parse_request(path.read_text(encoding="utf-8"), fmt)


__all__ = [
    "ChiefTaskType",
    "Mode",
    "Placement",
    "Replicas",
    "RequestError",
    "Role",
    "RoleResources",
    "Strategy",
    "SuccessPolicy",
    "Toleration",
    "TrainingRequest",
    "load_request",
    "parse_request",
    "validate_request",
]
