"""The quota preflight: does a job's whole gang fit in what is left of its tenant's quota?

Kubernetes checks quota one pod at a time, at creation: a gang of eight
replicas may get five pods created and three refused, leaving a job that can
never start holding resources. The pipeline's `validate` task asks this module
first, for the whole gang at once, and refuses the run before any pod exists,
with a message showing needed vs free for every resource.

The gang's usage is computed from the very pod manifests the launch creates
(`tfjob.manifests`), with the tenant's LimitRange defaults applied the way the
LimitRanger admission plugin applies them, and each pod counted the way the
quota plugin counts it: requests of all containers added up, init containers
(which run one at a time) counted by the largest of them if that is more.

Pure: quota and usage come in as plain dicts (a ResourceQuota's `status`,
a pod list); the I/O lives in `tenancy/admission.py`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from tfjob import naming
from tfjob.jsontypes import JsonObject
from tfjob.manifests import RunIdentity, build_pod_manifests
from tfjob.quantity import parse_quantity
from tfjob.request.model import TrainingRequest
from tfjob.tenants import GPU_RESOURCE, Tenant

# The resources the preflight checks, in the order messages show them.
CHECKED_RESOURCES = ("cpu", "memory", GPU_RESOURCE, "pods")
TERMINAL_PHASES = ("Succeeded", "Failed")
# Stand-in identity: usage does not depend on names.
_PREFLIGHT_RUN = RunIdentity(
    job="preflight", run_id="preflight", dag_id="preflight", namespace="preflight"
)


class Verdict(StrEnum):
    FITS = "fits"
    EXCEEDS_QUOTA = "exceeds_quota"
    REFUSED_BY_LIMITS = "refused_by_limits"


@dataclass(frozen=True)
class ResourceLine:
    """One resource of the preflight: what the gang needs against what is free."""

    resource: str
    needed: Decimal
    hard: Decimal | None  # None: the quota does not limit this resource
    used: Decimal

    @property
    def free(self) -> Decimal | None:
        return None if self.hard is None else max(self.hard - self.used, Decimal(0))

    @property
    def fits(self) -> bool:
        return self.hard is None or self.needed <= self.free

    def describe(self) -> str:
        needed = format_amount(self.resource, self.needed)
        if self.hard is None:
            return f"{self.resource}: needed {needed}, not limited"
        free = format_amount(self.resource, self.free)
        mark = (
            "ok"
            if self.fits
            else "SHORT by " + format_amount(self.resource, self.needed - self.free)
        )
        return (
            f"{self.resource}: needed {needed}, free {free} (hard "
            f"{format_amount(self.resource, self.hard)}, used "
            f"{format_amount(self.resource, self.used)}) {mark}"
        )


@dataclass(frozen=True)
class QuotaCheck:
    """The preflight's answer; `message` is what the user sees."""

    verdict: Verdict
    tenant: str
    namespace: str
    lines: tuple[ResourceLine, ...]
    problems: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        return self.verdict is Verdict.FITS

    @property
    def message(self) -> str:
        table = "; ".join(line.describe() for line in self.lines)
        if self.verdict is Verdict.REFUSED_BY_LIMITS:
            return (
                f"tenant {self.tenant} (namespace {self.namespace}): Kubernetes would "
                f"refuse the pods: {'; '.join(self.problems)}"
            )
        if self.verdict is Verdict.EXCEEDS_QUOTA:
            short = ", ".join(line.resource for line in self.lines if not line.fits)
            never = [
                line.resource
                for line in self.lines
                if line.hard is not None and line.needed > line.hard
            ]
            hint = (
                f"it needs more {', '.join(never)} than the tenant's whole quota, so it "
                "cannot run even when the tenant is idle: ask for fewer/smaller replicas "
                "or a larger quota in the tenants file"
                if never
                else "wait for the tenant's running jobs to end, ask for fewer/smaller "
                "replicas, or raise the tenant's quota in the tenants file"
            )
            return (
                f"tenant {self.tenant} (namespace {self.namespace}): the job's gang does "
                f"not fit in the remaining quota ({short}); no pod was created. {table}. "
                f"{hint[0].upper()}{hint[1:]}"
            )
        return f"tenant {self.tenant} (namespace {self.namespace}): the gang fits. {table}"


def format_amount(resource: str, value: Decimal) -> str:
    """A readable quantity: cpu in cores (1.75), memory in binary units (4Gi)."""
    if resource == "memory":
        for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= size:
                return f"{_trim(value / size)}{suffix}"
        return _trim(value)
    return _trim(value)


def _trim(value: Decimal) -> str:
    rounded = value.quantize(Decimal("0.001")) if value != value.to_integral_value() else value
    text = f"{rounded:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def apply_limit_range_defaults(
    container: Mapping[str, object], defaults: Mapping[str, str], default_limits: Mapping[str, str]
) -> JsonObject:
    """The container's resources as Kubernetes admits them: a limit the container sets is
    also its missing request (the API server's defaulting, before admission); then
    LimitRanger fills missing requests from `defaults` and missing limits from
    `default_limits`, and a request still missing takes its (default) limit."""
    resources = copy.deepcopy(dict(container.get("resources") or {}))
    limits = dict(resources.get("limits") or {})
    requests = dict(resources.get("requests") or {})
    for name, value in limits.items():
        requests.setdefault(name, value)
    for name, value in defaults.items():
        requests.setdefault(name, value)
    for name, value in default_limits.items():
        limits.setdefault(name, value)
    for name, value in limits.items():
        requests.setdefault(name, value)
    return {"requests": requests, "limits": limits}


def _container_problems(
    pod: Mapping[str, object],
    container: Mapping[str, object],
    resources: Mapping[str, Mapping[str, str]],
) -> list[str]:
    role = (pod["metadata"].get("labels") or {}).get(naming.LABEL_ROLE, "?")
    problems = []
    for name, limit in resources["limits"].items():
        request = resources["requests"].get(name)
        if request is not None and parse_quantity(request) > parse_quantity(limit):
            problems.append(
                f"resources.{role}.{name}: request {request} is above the limit "
                f"{limit} (the tenant's default limit applies when a replica sets "
                f"none); set resources.{role}.{name}_limit to at least {request}"
            )
    return problems


def pod_usage(
    pod: Mapping[str, object],
    defaults: Mapping[str, str] | None = None,
    default_limits: Mapping[str, str] | None = None,
) -> dict[str, Decimal]:
    """What one pod counts against a quota, per CHECKED_RESOURCES (requests; pods = 1)."""
    spec = pod.get("spec") or {}

    def requests_of(containers: Iterable[Mapping[str, object]]) -> list[dict[str, Decimal]]:
        found = []
        for container in containers:
            resources = apply_limit_range_defaults(container, defaults or {}, default_limits or {})
            found.append(
                {name: parse_quantity(str(value)) for name, value in resources["requests"].items()}
            )
        return found

    usage = {name: Decimal(0) for name in CHECKED_RESOURCES}
    for requests in requests_of(spec.get("containers") or []):
        for name in CHECKED_RESOURCES:
            usage[name] += requests.get(name, Decimal(0))
    for requests in requests_of(spec.get("initContainers") or []):
        for name in CHECKED_RESOURCES:
            usage[name] = max(usage[name], requests.get(name, Decimal(0)))
    usage["pods"] = Decimal(1)
    return usage


def sum_usage(
    pods: Iterable[Mapping[str, object]],
    defaults: Mapping[str, str] | None = None,
    default_limits: Mapping[str, str] | None = None,
    skip_terminal: bool = True,
) -> dict[str, Decimal]:
    """Usage of many pods; terminated pods (Succeeded/Failed) hold no quota."""
    total = {name: Decimal(0) for name in CHECKED_RESOURCES}
    for pod in pods:
        if skip_terminal and (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        for name, value in pod_usage(pod, defaults, default_limits).items():
            total[name] += value
    return total


def build_gang_pods(request: TrainingRequest) -> list[JsonObject]:
    """The pod manifests of the request's gang (names are stand-ins; resources are real)."""
    return build_pod_manifests(request, _PREFLIGHT_RUN)


def gang_usage(request: TrainingRequest, tenant: Tenant) -> dict[str, Decimal]:
    """The whole gang's quota usage, with the tenant's LimitRange defaults applied."""
    return sum_usage(
        build_gang_pods(request), tenant.defaults, tenant.default_limits, skip_terminal=False
    )


def read_quota_amounts(values: Mapping[str, object]) -> dict[str, Decimal]:
    """A ResourceQuota's hard/used map as CHECKED_RESOURCES amounts (missing keys left out).

    `requests.cpu` and bare `cpu` mean the same in Kubernetes; the smaller wins.
    """
    amounts: dict[str, Decimal] = {}
    for name in CHECKED_RESOURCES:
        for key in (name, f"requests.{name}"):
            if key in values and values[key] is not None:
                value = parse_quantity(str(values[key]))
                amounts[name] = min(amounts.get(name, value), value)
    return amounts


def check_gang_fits(
    request: TrainingRequest,
    tenant: Tenant,
    hard: Mapping[str, object],
    used: Mapping[str, Decimal],
) -> QuotaCheck:
    """Compare the gang's usage with `hard` (a quota's spec.hard) minus `used`.

    `used` is in CHECKED_RESOURCES amounts (`read_quota_amounts` of a quota's
    status.used, or `sum_usage` of the namespace's pods).
    """
    pods = build_gang_pods(request)
    problems = []
    for pod in pods:
        for container in (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]:
            resources = apply_limit_range_defaults(
                container, tenant.defaults, tenant.default_limits
            )
            for problem in _container_problems(pod, container, resources):
                if problem not in problems:
                    problems.append(problem)
    needed = sum_usage(pods, tenant.defaults, tenant.default_limits, skip_terminal=False)
    limits = read_quota_amounts(hard)
    lines = tuple(
        ResourceLine(name, needed[name], limits.get(name), Decimal(used.get(name, 0)))
        for name in CHECKED_RESOURCES
    )
    if problems:
        verdict = Verdict.REFUSED_BY_LIMITS
    elif all(line.fits for line in lines):
        verdict = Verdict.FITS
    else:
        verdict = Verdict.EXCEEDS_QUOTA
    return QuotaCheck(verdict, tenant.name, tenant.namespace, lines, tuple(problems))


__all__ = [
    "CHECKED_RESOURCES",
    "QuotaCheck",
    "ResourceLine",
    "Verdict",
    "apply_limit_range_defaults",
    "check_gang_fits",
    "format_amount",
    "gang_usage",
    "pod_usage",
    "read_quota_amounts",
    "sum_usage",
]
