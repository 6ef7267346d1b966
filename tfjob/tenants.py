"""Tenants: who may run jobs, where, and within which limits.

TensorFlow has no notion of a tenant; Kubernetes has namespaces, quotas and
network policies. This module is the one reader of `deploy/tenants.yaml` and
the one builder of every per-tenant object (Namespace, ResourceQuota,
LimitRange, NetworkPolicy, ServiceAccount), so `tshell tenants apply`, the
pipeline's `validate` task and the tests all agree on what a tenant is.

Guarantees:
- a tenant's namespace is always `naming.tenant_namespace(name)`: a request
  names only its tenant, never a namespace, so it cannot land in another
  tenant's namespace;
- an unknown tenant is refused with the list of known ones;
- every error names the file, the field, the value given and what is allowed.

Pure: `load_tenants` reads the file it is given; nothing else touches disk,
network or Airflow.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tfjob import naming
from tfjob.quantity import is_quantity, parse_quantity

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TENANTS_FILE = REPO_ROOT / "deploy" / "tenants.yaml"
# Where the pipeline and tshell look for the tenants file when not told otherwise.
TENANTS_FILE_ENV = "TFJOB_TENANTS_FILE"

POOL_PREFIX = "tfjob-tenant-"
QUOTA_NAME = "tfjob-quota"
LIMIT_RANGE_NAME = "tfjob-defaults"
TENANT_NETWORK_POLICY_NAME = "tfjob-isolation"
RUN_NETWORK_POLICY_SUFFIX = "network"
SERVICE_ACCOUNT_NAME = "tfjob-runner"
GPU_RESOURCE = "nvidia.com/gpu"
LABEL_COMPONENT = "app.kubernetes.io/component"
TENANT_COMPONENT = "tenant"

DEFAULT_DNS_PORT = 53
DEFAULT_S3_PORT = 9000
MAX_TENANT_NAME = 57  # "tfjob-<name>" is a namespace name (63 characters)
MAX_POOL_SLOTS = 1000

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CIDR = re.compile(r"^[0-9a-fA-F.:]+/[0-9]{1,3}$")

# The quota keys of the file and the ResourceQuota keys they become. Extended
# resources (GPUs) may only be quota'd on requests in Kubernetes.
QUOTA_FIELDS: dict[str, str] = {
    "cpu": "requests.cpu",
    "memory": "requests.memory",
    GPU_RESOURCE: f"requests.{GPU_RESOURCE}",
    "pods": "pods",
}
DEFAULT_FIELDS = ("cpu", "memory")
_TOP_FIELDS = ("network", "tenants")
_NETWORK_FIELDS = ("s3_port", "s3_cidr", "dns_port")
_TENANT_FIELDS = ("name", "namespace", "description", "quota", "defaults", "default_limits",
                  "max_concurrent_jobs")


class TenantsFileError(ValueError):
    """The tenants file is invalid: where, what was given, what is allowed."""

    def __init__(self, source: str, where: str, given: Any, allowed: str) -> None:
        self.source = source
        self.where = where
        self.given = given
        self.allowed = allowed
        place = f"{source}: {where}" if where else source
        super().__init__(f"{place}: {given!r} given; {allowed}")


class UnknownTenantError(ValueError):
    """A request names a tenant that the tenants file does not declare."""

    def __init__(self, tenant: str, known: list[str], source: str) -> None:
        self.tenant = tenant
        self.known = known
        shown = ", ".join(known) if known else "none"
        super().__init__(f"request.tenant: {tenant!r} given; known tenants (from {source}): "
                         f"{shown}. Ask an administrator to add it to the tenants file and "
                         f"run `tshell tenants apply`")


@dataclass(frozen=True)
class NetworkSettings:
    """What a training pod may reach outside its run: DNS and the S3 endpoint."""

    s3_port: int = DEFAULT_S3_PORT
    s3_cidr: str | None = None
    dns_port: int = DEFAULT_DNS_PORT


@dataclass(frozen=True)
class Tenant:
    """One tenant: its namespace, hard quota, container defaults and job concurrency."""

    name: str
    quota: dict[str, str]  # file keys (cpu, memory, nvidia.com/gpu, pods) -> quantity
    defaults: dict[str, str]  # LimitRange defaultRequest: cpu, memory
    default_limits: dict[str, str] = field(default_factory=dict)  # LimitRange default
    max_concurrent_jobs: int = 1
    description: str = ""

    @property
    def namespace(self) -> str:
        return naming.tenant_namespace(self.name)

    @property
    def pool(self) -> str:
        return pool_name(self.name)

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


def resolve_tenant(config: TenantsConfig, name: str) -> Tenant:
    """The tenant a request names; UnknownTenantError listing the known ones otherwise."""
    tenant = config.find(name)
    if tenant is None:
        raise UnknownTenantError(name, config.names(), config.source)
    return tenant


def resolve_namespace(config: TenantsConfig, name: str) -> str:
    """The namespace a request of tenant `name` runs in (never chosen by the request)."""
    return resolve_tenant(config, name).namespace


# --- loading ------------------------------------------------------------------------------

class Unreadable(str):
    """A description standing in for a value that could not be read (shown in <>)."""

    def __repr__(self) -> str:
        return f"<{self}>"


def tenants_file_path(path: str | os.PathLike[str] | None = None) -> Path:
    """`path`, else $TFJOB_TENANTS_FILE, else deploy/tenants.yaml of this repository."""
    if path:
        return Path(path)
    return Path(os.environ.get(TENANTS_FILE_ENV) or DEFAULT_TENANTS_FILE)


def load_tenants(path: str | os.PathLike[str] | None = None) -> TenantsConfig:
    """Read and validate the tenants file (see `tenants_file_path` for which one)."""
    file = tenants_file_path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise TenantsFileError(str(file), "", Unreadable(exc.strerror or str(exc)),
                               f"a readable YAML file is required (set {TENANTS_FILE_ENV} "
                               f"or pass --file)") from None
    return parse_tenants(text, str(file))


def parse_tenants(text: str, source: str = "tenants file") -> TenantsConfig:
    """A TenantsConfig from YAML text; TenantsFileError when invalid."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise TenantsFileError(source, where, Unreadable("text that is not YAML"),
                               "a YAML mapping with `tenants:` is required") from None
    return validate_tenants(data, source)


def validate_tenants(data: Any, source: str = "tenants file") -> TenantsConfig:
    """A TenantsConfig from parsed data; TenantsFileError naming the first problem."""
    def fail(where: str, given: Any, allowed: str) -> TenantsFileError:
        return TenantsFileError(source, where, given, allowed)

    if not isinstance(data, Mapping):
        raise fail("", data, "a mapping with `tenants:` (a list) and optional `network:`")
    _check_known_keys(fail, "", data, _TOP_FIELDS)
    network = _read_network(fail, data.get("network") or {})
    items = data.get("tenants")
    if not isinstance(items, list) or not items:
        raise fail("tenants", items, "a non-empty list of tenants is required")
    tenants: list[Tenant] = []
    for index, item in enumerate(items):
        tenant = _read_tenant(fail, f"tenants[{index}]", item)
        if any(other.name == tenant.name for other in tenants):
            raise fail(f"tenants[{index}].name", tenant.name,
                       "tenant names must be unique; this one is declared twice")
        tenants.append(tenant)
    return TenantsConfig(tuple(tenants), network, source)


def _check_known_keys(fail: Any, where: str, data: Mapping, allowed: tuple[str, ...]) -> None:
    for key in data:
        if key not in allowed:
            prefix = f"{where}." if where else ""
            raise fail(f"{prefix}{key}", data[key],
                       "unknown field; allowed fields: " + ", ".join(allowed))


def _read_port(fail: Any, where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise fail(where, value, "a port number from 1 to 65535 is allowed")
    return value


def _read_network(fail: Any, data: Any) -> NetworkSettings:
    if not isinstance(data, Mapping):
        raise fail("network", data, "a mapping of s3_port, s3_cidr, dns_port is allowed")
    _check_known_keys(fail, "network", data, _NETWORK_FIELDS)
    cidr = data.get("s3_cidr")
    if cidr is not None and (not isinstance(cidr, str) or not _CIDR.match(cidr)):
        raise fail("network.s3_cidr", cidr, "a CIDR such as 10.0.0.0/8 is allowed")
    return NetworkSettings(
        s3_port=_read_port(fail, "network.s3_port", data.get("s3_port", DEFAULT_S3_PORT)),
        s3_cidr=cidr,
        dns_port=_read_port(fail, "network.dns_port", data.get("dns_port", DEFAULT_DNS_PORT)),
    )


def _read_quantity(fail: Any, where: str, value: Any, whole: bool = False) -> str:
    if isinstance(value, bool) or value is None:
        raise fail(where, value, "a Kubernetes quantity such as 500m, 4, 16Gi is required")
    text = str(value)
    if not is_quantity(text):
        raise fail(where, value, "a Kubernetes quantity such as 500m, 4, 16Gi is required")
    if whole and parse_quantity(text) != int(parse_quantity(text)):
        raise fail(where, value, "a whole number is required")
    return text


def _read_resources(fail: Any, where: str, data: Any, allowed: tuple[str, ...],
                    required: bool) -> dict[str, str]:
    if data is None and not required:
        return {}
    if not isinstance(data, Mapping):
        raise fail(where, data, "a mapping of " + ", ".join(allowed) + " is required")
    _check_known_keys(fail, where, data, allowed)
    values = {}
    for key in allowed:
        if key not in data:
            if required:
                raise fail(f"{where}.{key}", None, "the field is required (a quantity; "
                           "0 to forbid the resource)")
            continue
        values[key] = _read_quantity(fail, f"{where}.{key}", data[key],
                                     whole=key in (GPU_RESOURCE, "pods"))
    return values


def _read_tenant(fail: Any, where: str, data: Any) -> Tenant:
    if not isinstance(data, Mapping):
        raise fail(where, data, "a mapping of " + ", ".join(_TENANT_FIELDS) + " is required")
    _check_known_keys(fail, where, data, _TENANT_FIELDS)
    name = data.get("name")
    if not isinstance(name, str) or len(name) > MAX_TENANT_NAME or not _DNS_LABEL.match(name):
        raise fail(f"{where}.name", name, "a DNS-1123 label (lowercase letters, digits, '-') "
                   f"of at most {MAX_TENANT_NAME} characters is required")
    expected = naming.tenant_namespace(name)
    if data.get("namespace", expected) != expected:
        raise fail(f"{where}.namespace", data.get("namespace"),
                   f"a tenant's namespace is always {naming.NAMESPACE_PREFIX}<name>: "
                   f"{expected} (leave it out or write that)")
    quota = _read_resources(fail, f"{where}.quota", data.get("quota"), tuple(QUOTA_FIELDS),
                            required=True)
    defaults = _read_resources(fail, f"{where}.defaults", data.get("defaults"), DEFAULT_FIELDS,
                               required=True)
    limits = _read_resources(fail, f"{where}.default_limits", data.get("default_limits"),
                             DEFAULT_FIELDS, required=False)
    for key, limit in limits.items():
        if parse_quantity(limit) < parse_quantity(defaults[key]):
            raise fail(f"{where}.default_limits.{key}", limit,
                       f"must be at least defaults.{key} ({defaults[key]})")
    jobs = data.get("max_concurrent_jobs", 1)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MAX_POOL_SLOTS:
        raise fail(f"{where}.max_concurrent_jobs", jobs,
                   f"a whole number from 1 to {MAX_POOL_SLOTS} is required (the tenant's "
                   "Airflow pool slots)")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise fail(f"{where}.description", description, "a string is allowed")
    return Tenant(name=name, quota=quota, defaults=defaults, default_limits=limits,
                  max_concurrent_jobs=jobs, description=description)


# --- manifests ----------------------------------------------------------------------------

def tenant_labels(tenant: Tenant) -> dict[str, str]:
    """Labels of a tenant's own objects (no tfjob.io/run: the janitor never touches them)."""
    return {naming.LABEL_MANAGED_BY: naming.MANAGED_BY, naming.LABEL_TENANT: tenant.name,
            LABEL_COMPONENT: TENANT_COMPONENT}


def _metadata(tenant: Tenant, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": tenant.namespace, "labels": tenant_labels(tenant)}


def build_namespace(tenant: Tenant) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": tenant.namespace, "labels": tenant_labels(tenant)}
    if tenant.description:
        metadata["annotations"] = {"tfjob.io/description": tenant.description}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def build_resource_quota(tenant: Tenant) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": _metadata(tenant, QUOTA_NAME),
            "spec": {"hard": tenant.hard_quota()}}


def build_limit_range(tenant: Tenant) -> dict[str, Any]:
    """Container defaults: `defaults` become defaultRequest, `default_limits` default."""
    item: dict[str, Any] = {"type": "Container", "defaultRequest": dict(tenant.defaults)}
    if tenant.default_limits:
        item["default"] = dict(tenant.default_limits)
    return {"apiVersion": "v1", "kind": "LimitRange",
            "metadata": _metadata(tenant, LIMIT_RANGE_NAME),
            "spec": {"limits": [item]}}


def build_service_account(tenant: Tenant) -> dict[str, Any]:
    """The account training pods run as: no RoleBinding names it, so it has no API rights."""
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": _metadata(tenant, SERVICE_ACCOUNT_NAME),
            "automountServiceAccountToken": False}


def build_egress_rules(network: NetworkSettings) -> list[dict[str, Any]]:
    """Egress every training pod needs outside its run: DNS (UDP and TCP) and the S3 port."""
    dns = {"ports": [{"protocol": "UDP", "port": network.dns_port},
                     {"protocol": "TCP", "port": network.dns_port}]}
    s3: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": network.s3_port}]}
    if network.s3_cidr:
        s3["to"] = [{"ipBlock": {"cidr": network.s3_cidr}}]
    return [dns, s3]


def build_tenant_network_policy(tenant: Tenant, network: NetworkSettings) -> dict[str, Any]:
    """Default deny for the namespace: no ingress, egress only to DNS and S3.

    Policies add up: each run's own policy (`build_run_network_policy`) then
    lets the run's pods talk to each other, and to nothing else.
    """
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _metadata(tenant, TENANT_NETWORK_POLICY_NAME),
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                     "ingress": [], "egress": build_egress_rules(network)}}


def run_network_policy_name(run_key: str) -> str:
    """`<runkey>-network` (a run key is at most 49 characters)."""
    return f"{run_key}-{RUN_NETWORK_POLICY_SUFFIX}"


def build_run_network_policy(namespace: str, run_key: str, labels: Mapping[str, str],
                             annotations: Mapping[str, str], network: NetworkSettings,
                             owner: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run's pods accept traffic only from each other and reach only each other, DNS, S3.

    `labels`/`annotations` are the run's (naming.run_labels and the run-id/dag-id
    annotations), so the janitor finds it with the run. `owner` (an object of the
    run, e.g. its ConfigMap: apiVersion, kind, name, uid) makes Kubernetes' garbage
    collector delete the policy when teardown deletes that object.
    """
    same_run = {"podSelector": {"matchLabels": {naming.LABEL_RUN: run_key}}}
    metadata: dict[str, Any] = {"name": run_network_policy_name(run_key), "namespace": namespace,
                                "labels": dict(labels), "annotations": dict(annotations)}
    if owner:
        metadata["ownerReferences"] = [{
            "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["name"],
            "uid": owner["uid"], "blockOwnerDeletion": False}]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": metadata,
            "spec": {"podSelector": {"matchLabels": {naming.LABEL_RUN: run_key}},
                     "policyTypes": ["Ingress", "Egress"],
                     "ingress": [{"from": [same_run]}],
                     "egress": [{"to": [same_run]}, *build_egress_rules(network)]}}


def build_tenant_manifests(tenant: Tenant, network: NetworkSettings) -> list[dict[str, Any]]:
    """Every object of a tenant, the Namespace first (the others live in it)."""
    return [build_namespace(tenant), build_resource_quota(tenant), build_limit_range(tenant),
            build_service_account(tenant), build_tenant_network_policy(tenant, network)]


__all__ = [
    "DEFAULT_TENANTS_FILE", "NetworkSettings", "TENANTS_FILE_ENV", "Tenant", "TenantsConfig",
    "TenantsFileError", "UnknownTenantError", "build_limit_range", "build_namespace",
    "build_resource_quota", "build_run_network_policy", "build_service_account",
    "build_tenant_manifests", "build_tenant_network_policy", "load_tenants", "parse_tenants",
    "pool_name", "resolve_namespace", "resolve_tenant", "run_network_policy_name",
    "tenants_file_path", "validate_tenants",
]
