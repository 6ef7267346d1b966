"""The parts of a training request: its enums, its limits and defaults, its nested models.

`tfjob/request/model.py`'s `TrainingRequest` is built from these; they live apart so that the
request model's module holds the request's own rules. `Role` declaration order (chief, ps,
worker, evaluator) is the deterministic order used everywhere: pod lists, ClusterSpec keys,
replica iteration.
"""

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tfjob.quantity import parse_quantity
from tfjob.request.checks import check_quantity
from tfjob.request.errors import invalid


class Role(StrEnum):
    """A TensorFlow task type; declaration order is the order used everywhere."""

    CHIEF = "chief"
    PS = "ps"
    WORKER = "worker"
    EVALUATOR = "evaluator"


class Mode(StrEnum):
    SINGLE = "single"
    DISTRIBUTED = "distributed"


class Strategy(StrEnum):
    """How a distributed job is laid out: with parameter servers or all-reduce workers."""

    PARAMETER_SERVER = "parameter_server"
    MULTI_WORKER_MIRRORED = "multi_worker_mirrored"


class SuccessPolicy(StrEnum):
    """Which replicas must succeed for the run to succeed; ps never counts."""

    CHIEF = "chief"
    WORKER0 = "worker0"
    ALL_WORKERS = "all_workers"


class ChiefTaskType(StrEnum):
    """The chief's name in TF_CONFIG (cluster key, task type); master is Kubeflow's old name."""

    CHIEF = "chief"
    MASTER = "master"


class Placement(StrEnum):
    """Spread replicas over nodes, or pack them onto as few as possible."""

    SPREAD = "spread"
    PACK = "pack"


# A role that names no cpu/memory request gets its tenant's LimitRange defaults (the
# namespace's `defaultRequest`, applied by Kubernetes at pod creation; docs/tenants.md).
DEFAULT_GPU = 0
MAX_GPU_PER_REPLICA = 16
DEFAULT_IMAGE = "tensorflow/tensorflow:2.21.0"
DEFAULT_PORT = 2222
DEFAULT_STARTUP_TIMEOUT = 300
DEFAULT_ACTIVE_DEADLINE = 3600
MAX_RETRIES = 10
# 40 leaves room for "-<h8>" and "-evaluator-<index>" within 63 characters.
MAX_NAME_LENGTH = 40
# "tfjob-<tenant>" must be a namespace name (63 characters).
MAX_TENANT_LENGTH = 57


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", use_enum_values=False, frozen=True)


class Replicas(StrictModel):
    """How many replicas of each role the job runs."""

    chief: int = Field(0, ge=0, le=1, description="Coordinator replicas (0 or 1).")
    ps: int = Field(0, ge=0, le=100, description="Parameter-server replicas.")
    worker: int = Field(1, ge=0, le=1000, description="Worker replicas.")
    evaluator: int = Field(0, ge=0, le=1, description="Side-car evaluator replicas (0 or 1).")


class RoleResources(StrictModel):
    """Requests (and optional limits) of one replica of a role."""

    cpu: str | None = Field(
        None,
        description="CPU request, a Kubernetes quantity; unset: "
        "the tenant's default (or cpu_limit when set).",
    )
    memory: str | None = Field(
        None,
        description="Memory request, a Kubernetes quantity; "
        "unset: the tenant's default (or memory_limit "
        "when set).",
    )
    gpu: int = Field(
        DEFAULT_GPU,
        ge=0,
        le=MAX_GPU_PER_REPLICA,
        description="nvidia.com/gpu, used as both request and limit.",
    )
    cpu_limit: str | None = Field(None, description="CPU limit; none when unset.")
    memory_limit: str | None = Field(None, description="Memory limit; none when unset.")

    @field_validator("cpu", "memory", "cpu_limit", "memory_limit", mode="before")
    @classmethod
    def _check_quantities(cls, value: object) -> object:
        return value if value is None else check_quantity(value)

    @model_validator(mode="after")
    def _check_limits_cover_requests(self) -> "RoleResources":
        for limit_name, request_name in (("cpu_limit", "cpu"), ("memory_limit", "memory")):
            limit = getattr(self, limit_name)
            request = getattr(self, request_name)
            if (
                limit is not None
                and request is not None
                and parse_quantity(limit) < parse_quantity(request)
            ):
                raise invalid(
                    f"the limit must be at least the {request_name} request ({request})",
                    limit,
                    limit_name,
                )
        return self


class Toleration(StrictModel):
    """A Kubernetes toleration, with Kubernetes' own keys."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    key: str | None = None
    operator: str = "Equal"
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = Field(None, alias="tolerationSeconds", ge=0)

    @field_validator("operator")
    @classmethod
    def _check_operator(cls, value: str) -> str:
        if value not in ("Equal", "Exists"):
            raise invalid("allowed: Equal, Exists", value)
        return value

    @field_validator("effect")
    @classmethod
    def _check_effect(cls, value: str | None) -> str | None:
        if value not in (None, "", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise invalid("allowed: NoSchedule, PreferNoSchedule, NoExecute", value)
        return value

    @model_validator(mode="after")
    def _check_combination(self) -> "Toleration":
        if self.operator == "Exists" and self.value:
            raise invalid("no value is allowed with operator Exists", self.value, "value")
        if not self.key and self.operator != "Exists":
            raise invalid("an empty key needs operator Exists", self.operator, "operator")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise invalid(
                "tolerationSeconds needs effect NoExecute",
                self.toleration_seconds,
                "tolerationSeconds",
            )
        return self

    def to_manifest(self) -> dict[str, Any]:
        """The toleration as Kubernetes JSON (camelCase, unset keys left out)."""
        return self.model_dump(by_alias=True, exclude_none=True)


def default_resources() -> dict[Role, RoleResources]:
    return {role: RoleResources() for role in Role}
