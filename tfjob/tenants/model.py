"""What a tenant is: the dataclasses and errors that `tfjob.tenants` exports.

Kept apart from the file reader (`tfjob.tenants.file`) and the object builders
(`tfjob.tenants.objects`) so that both, and `tfjob.tenants.policy`, import the
model without importing each other. Import these names from `tfjob.tenants`.

A tenant says who acts for it (Airflow roles), where its data lives (S3
prefixes it may read bundles from and write outputs to), with which Airflow
connection its S3 calls are made, who its pods are (a uid/gid no other tenant
has) and what its pods may ask for (images, node selectors, tolerations).
A request names its tenant; whether the request may run is
`tfjob.tenants.policy.check_request_policy`'s verdict.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from tfjob import naming
from tfjob.errors import TfjobError

POOL_PREFIX = "tfjob-tenant-"
SERVICE_ACCOUNT_NAME = "tfjob-runner"
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_DNS_PORT = 53
DEFAULT_S3_PORT = 9000
# Used for a tenant's S3 calls when its entry names no aws_conn_id.
DEFAULT_AWS_CONN_ID = "aws_default"
# The pods-only presigning identity's connection when the entry names no presign_conn_id.
PRESIGN_CONN_ID_PREFIX = "tfjob_pods_"
DEFAULT_IMAGES = ("tensorflow/tensorflow:*",)
# A tenant's DAGs allow this many active runs per pool slot unless max_active_runs says.
ACTIVE_RUNS_PER_JOB = 2
DEMO_USER_SUFFIX = "-user"
# A tenant without `uid` in the file gets one derived from its name in
# [DEFAULT_UID_BASE, DEFAULT_UID_BASE + DEFAULT_UID_SPAN): stable across edits of the
# file and below 65534, so it also fits clusters that map pod users into 16 bits.
DEFAULT_UID_BASE = 20000
DEFAULT_UID_SPAN = 40000

# The quota keys of the file and the ResourceQuota keys they become. Extended
# resources (GPUs) may only be quota'd on requests in Kubernetes.
QUOTA_FIELDS: dict[str, str] = {
    "cpu": "requests.cpu",
    "memory": "requests.memory",
    GPU_RESOURCE: f"requests.{GPU_RESOURCE}",
    "pods": "pods",
}


class TenantsFileError(TfjobError):
    """The tenants file is invalid: where, what was given, what is allowed."""

    def __init__(self, source: str, where: str, given: object, allowed: str) -> None:
        self.source = source
        self.where = where
        self.given = given
        self.allowed = allowed
        place = f"{source}: {where}" if where else source
        super().__init__(f"{place}: {given!r} given; {allowed}")


class UnknownTenantError(TfjobError):
    """A request names a tenant that the tenants file does not declare."""

    def __init__(self, tenant: str, known: list[str], source: str) -> None:
        self.tenant = tenant
        self.known = known
        shown = ", ".join(known) if known else "none"
        super().__init__(
            f"request.tenant: {tenant!r} given; known tenants (from {source}): "
            f"{shown}. Ask an administrator to add it to the tenants file and "
            f"run `tshell tenants apply`"
        )


@dataclass(frozen=True)
class NetworkSettings:
    """What a training pod may reach outside its run: DNS and the S3 endpoint."""

    s3_port: int = DEFAULT_S3_PORT
    s3_cidr: str | None = None
    dns_port: int = DEFAULT_DNS_PORT


@dataclass(frozen=True)
class PodUser:
    """Who a tenant's pods are: runAsUser `uid`, runAsGroup and fsGroup `gid`.

    No two tenants share either (the tenants file's reader checks), so a file one
    tenant's pod leaves anywhere is not another tenant's by its mode.
    """

    uid: int
    gid: int


def derive_pod_user(tenant: str) -> PodUser:
    """The uid/gid of a tenant whose entry names none: from sha256 of its name."""
    digest = int(hashlib.sha256(tenant.encode("utf-8")).hexdigest()[:8], 16)
    uid = DEFAULT_UID_BASE + digest % DEFAULT_UID_SPAN
    return PodUser(uid, uid)


@dataclass(frozen=True)
class Tenant:
    """One tenant: namespace, quota, concurrency, who acts for it and what its runs may do.

    Built by `tfjob.tenants.validate_tenants`, which checks every field; the
    defaults here are the file's defaults, except the prefixes: a Tenant built
    without them may read and write nowhere.
    """

    name: str
    quota: dict[str, str]  # file keys (cpu, memory, nvidia.com/gpu, pods) -> quantity
    defaults: dict[str, str]  # LimitRange defaultRequest: cpu, memory
    default_limits: dict[str, str] = field(default_factory=dict)  # LimitRange default
    max_concurrent_jobs: int = 1
    description: str = ""
    roles: tuple[str, ...] = ()  # Airflow roles acting for the tenant; () means (name,)
    bundle_prefixes: tuple[str, ...] = ()  # s3://bucket/prefix/ a request's bundle is under
    output_prefixes: tuple[str, ...] = ()  # s3://bucket/prefix/ a request's output is under
    aws_conn_id: str | None = None  # Airflow connection of every S3 call; None: aws_default
    presign_conn_id: str | None = None  # signs the pods' grants; None: tfjob_pods_<name>
    images: tuple[str, ...] = DEFAULT_IMAGES  # fnmatch patterns
    node_selectors: dict[str, tuple[str, ...]] = field(default_factory=dict)  # key -> patterns
    tolerations: tuple[dict[str, str], ...] = ()  # key and any of operator, value, effect
    max_active_runs: int | None = None  # of each of the tenant's DAGs; None: 2 x jobs
    run_as: PodUser | None = None  # None: derive_pod_user(name); never None once built

    def __post_init__(self) -> None:
        if not self.roles:
            # frozen: fill the documented default once, at construction
            object.__setattr__(self, "roles", (self.name,))
        if self.run_as is None:
            object.__setattr__(self, "run_as", derive_pod_user(self.name))

    @property
    def pod_user(self) -> PodUser:
        """The uid/gid the tenant's pods run as."""
        return self.run_as or derive_pod_user(self.name)

    @property
    def namespace(self) -> str:
        return naming.tenant_namespace(self.name)

    @property
    def pool(self) -> str:
        return pool_name(self.name)

    @property
    def active_runs_limit(self) -> int:
        """Airflow max_active_runs of each of the tenant's DAGs."""
        if self.max_active_runs is not None:
            return self.max_active_runs
        return ACTIVE_RUNS_PER_JOB * self.max_concurrent_jobs

    @property
    def s3_conn_id(self) -> str:
        """The Airflow connection every S3 call of the tenant's runs uses."""
        return self.aws_conn_id or DEFAULT_AWS_CONN_ID

    @property
    def pods_conn_id(self) -> str:
        """The Airflow connection that presigns the pods' grants, and nothing else."""
        return self.presign_conn_id or default_presign_conn_id(self.name)

    def hard_quota(self) -> dict[str, str]:
        """The ResourceQuota `spec.hard` of the tenant."""
        return {QUOTA_FIELDS[key]: value for key, value in self.quota.items()}


@dataclass(frozen=True)
class TenantsConfig:
    """Every tenant of the tenants file, plus the network settings they share."""

    tenants: tuple[Tenant, ...]
    network: NetworkSettings = NetworkSettings()
    source: str = "tenants file"

    def names(self) -> list[str]:
        return [tenant.name for tenant in self.tenants]

    def find(self, name: str) -> Tenant | None:
        return next((tenant for tenant in self.tenants if tenant.name == name), None)


def pool_name(tenant: str) -> str:
    """The Airflow pool capping a tenant's concurrent jobs: `tfjob-tenant-<name>`."""
    return f"{POOL_PREFIX}{tenant}"


def tenant_user_name(role: str) -> str:
    """The demo user created for an Airflow role acting for a tenant: `<role>-user`."""
    return f"{role}{DEMO_USER_SUFFIX}"


def resolve_tenant(config: TenantsConfig, name: str) -> Tenant:
    """The tenant a request names; UnknownTenantError listing the known ones otherwise."""
    tenant = config.find(name)
    if tenant is None:
        raise UnknownTenantError(name, config.names(), config.source)
    return tenant


def resolve_namespace(config: TenantsConfig, name: str) -> str:
    """The namespace a request of tenant `name` runs in (never chosen by the request)."""
    return resolve_tenant(config, name).namespace


def default_presign_conn_id(tenant: str) -> str:
    """`tfjob_pods_<tenant name with '-' as '_'>` (an AIRFLOW_CONN_ variable can name it)."""
    return PRESIGN_CONN_ID_PREFIX + tenant.replace("-", "_")
