"""Whether a request may run now: its tenant exists and is applied, and its gang fits the quota.

The `validate` step's tenancy check (`admit_request`) and `tshell tenants list`'s quota
figures (`read_tenant_quota`). The quota preflight reads a tenant's ResourceQuota and the
namespace's pods. The quota's `status.used` is updated by a controller and may lag behind
pods created a moment ago, so used = the larger of status.used and the sum over the live
pods (`tfjob.quota.sum_usage`); replicas that name no cpu/memory are counted with the
defaults the namespace's LimitRanges really apply. Applying tenants is `tenancy.apply`'s.
"""

from __future__ import annotations

import dataclasses
import logging
from decimal import Decimal
from typing import TYPE_CHECKING

from tenancy.errors import TenancyError
from tfjob.quota import QuotaCheck, check_gang_fits, read_quota_amounts, sum_usage
from tfjob.request.model import TrainingRequest
from tfjob.tenants import (
    Tenant,
    TenantsConfig,
    UnknownTenantError,
    load_tenants,
    resolve_tenant,
)

if TYPE_CHECKING:  # the Kubernetes client is imported when a call needs it: `tshell --help`
    from kubernetes import client as k8s

log = logging.getLogger(__name__)


class TenantNotAppliedError(TenancyError, RuntimeError):
    """The tenant's namespace does not exist on the cluster."""


def read_tenant_quota(
    core: k8s.CoreV1Api, tenant: Tenant
) -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    """(hard, used) of the tenant's namespace as the preflight needs them.

    hard: the tightest of the namespace's ResourceQuotas, or the tenants file's
    quota when the namespace has none yet; used: the larger of the quotas'
    status.used and the sum over the namespace's live pods.
    """
    from kubernetes.client.exceptions import ApiException

    namespace = tenant.namespace
    try:
        core.read_namespace(namespace)
    except ApiException as exc:
        if exc.status == 404:
            raise TenantNotAppliedError(
                f"tenant {tenant.name}: namespace {namespace} does not exist on the cluster; "
                "run `tshell tenants apply` first"
            ) from None
        # 403: namespaces are cluster-scoped, and a RoleBinding in the tenant's namespace
        # does not grant reading them; the namespaced reads below still work.
        if exc.status != 403:
            raise
    quotas = core.list_namespaced_resource_quota(namespace).items
    hard: dict[str, Decimal] = {}
    used = {name: Decimal(0) for name in ("cpu", "memory", "nvidia.com/gpu", "pods")}
    for quota in quotas:
        for name, value in read_quota_amounts((quota.spec and quota.spec.hard) or {}).items():
            hard[name] = min(hard.get(name, value), value)
        status_used = read_quota_amounts((quota.status and quota.status.used) or {})
        for name, value in status_used.items():
            used[name] = max(used.get(name, Decimal(0)), value)
    if not quotas:
        log.warning(
            "tenant %s: no ResourceQuota in %s; checking against the tenants file",
            tenant.name,
            namespace,
        )
        hard = read_quota_amounts(tenant.hard_quota())
    pods = core.list_namespaced_pod(namespace).items
    plain = [core.api_client.sanitize_for_serialization(pod) for pod in pods]
    # Live pods already went through LimitRanger: no defaults to apply again.
    for name, value in sum_usage(plain).items():
        used[name] = max(used.get(name, Decimal(0)), value)
    return hard, used


def read_limit_range_defaults(core: k8s.CoreV1Api, tenant: Tenant) -> Tenant:
    """`tenant` with the container defaults its namespace's LimitRanges really apply.

    A request that names no cpu/memory gets them from the LimitRange at pod
    creation, so the preflight counts what the cluster will fill in: the
    `Container` items of every LimitRange, the first one naming a resource
    winning (LimitRanger never overrides a value already set). Without a
    LimitRange (or without the right to list them) the tenants file's
    `defaults` / `default_limits` stand in.
    """
    from kubernetes.client.exceptions import ApiException

    try:
        ranges = core.list_namespaced_limit_range(tenant.namespace).items
    except ApiException as exc:
        if exc.status not in (403, 404):
            raise
        log.warning(
            "tenant %s: cannot list LimitRanges in %s (HTTP %s); using the tenants file's defaults",
            tenant.name,
            tenant.namespace,
            exc.status,
        )
        return tenant
    defaults: dict[str, str] = {}
    default_limits: dict[str, str] = {}
    for limit_range in ranges:
        for item in (limit_range.spec and limit_range.spec.limits) or []:
            if item.type != "Container":
                continue
            for name, value in (item.default_request or {}).items():
                defaults.setdefault(name, str(value))
            for name, value in (item.default or {}).items():
                default_limits.setdefault(name, str(value))
    if not ranges:
        return tenant
    return dataclasses.replace(tenant, defaults=defaults, default_limits=default_limits)


def preflight_quota(core: k8s.CoreV1Api, request: TrainingRequest, tenant: Tenant) -> QuotaCheck:
    """Would the request's whole gang fit in what is left of the tenant's quota now?

    Replicas that name no cpu/memory are counted with the namespace's LimitRange
    defaults (`read_limit_range_defaults`).
    """
    hard, used = read_tenant_quota(core, tenant)
    return check_gang_fits(request, read_limit_range_defaults(core, tenant), hard, used)


class TenancyRefusal(TenancyError, ValueError):
    """The request may not run now: unknown tenant, tenant not applied, or no room in quota."""


def admit_request(
    core: k8s.CoreV1Api, request: TrainingRequest, config: TenantsConfig | None = None
) -> tuple[Tenant, QuotaCheck]:
    """The `validate` step's tenancy check: resolve the tenant, then the quota preflight.

    Raises TenancyRefusal with the message to show the user; returns the tenant
    and the (fitting) check otherwise. `config` defaults to the tenants file
    (`tfjob.tenants.load_tenants()`: $TFJOB_TENANTS_FILE, else deploy/tenants.yaml).
    """
    config = config or load_tenants()
    try:
        tenant = resolve_tenant(config, request.tenant)
    except UnknownTenantError as exc:
        raise TenancyRefusal(str(exc)) from None
    try:
        check = preflight_quota(core, request, tenant)
    except TenantNotAppliedError as exc:
        raise TenancyRefusal(str(exc)) from None
    if not check.fits:
        raise TenancyRefusal(check.message)
    return tenant, check


__all__ = [
    "TenancyRefusal",
    "TenantNotAppliedError",
    "admit_request",
    "preflight_quota",
    "read_limit_range_defaults",
    "read_tenant_quota",
]
