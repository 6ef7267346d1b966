"""Tenants: who may run jobs, where, and within which limits.

TensorFlow has no notion of a tenant; Kubernetes has namespaces, quotas and
network policies, Airflow has roles. This module is the one public surface of
tenants: import from here. It gathers three layers that import only downward:

- `tfjob.tenants.model`: the `Tenant` / `TenantsConfig` dataclasses, their
  errors, and resolving a request's tenant;
- `tfjob.tenants.file`: the one reader and validator of `deploy/tenants.yaml`;
- `tfjob.tenants.objects`: the one builder of every per-tenant object
  (Namespace, ResourceQuota, LimitRange, ServiceAccount, NetworkPolicy) and
  of each run's NetworkPolicy.

Whether a tenant may run a given request (its S3 prefixes, images, node
selectors, tolerations) is `tfjob.tenants.policy`'s verdict.

Guarantees:
- a tenant's namespace is always `naming.tenant_namespace(name)`: a request
  names only its tenant, never a namespace, so it cannot land in another
  tenant's namespace;
- an unknown tenant is refused with the list of known ones;
- every error names the file, the field, the value given and what is allowed.

Pure: `load_tenants` reads the file it is given; nothing else touches disk,
network or Airflow.
"""

from tfjob.tenants.file import (
    DEFAULT_FIELDS,
    DEFAULT_TENANTS_FILE,
    MAX_POOL_SLOTS,
    MAX_TENANT_NAME,
    REPO_ROOT,
    TENANT_FIELDS,
    TENANTS_FILE_ENV,
    Unreadable,
    load_tenants,
    parse_tenants,
    tenants_file_path,
    validate_tenants,
)
from tfjob.tenants.model import (
    DEFAULT_AWS_CONN_ID,
    DEFAULT_DNS_PORT,
    DEFAULT_IMAGES,
    DEFAULT_S3_PORT,
    GPU_RESOURCE,
    POOL_PREFIX,
    QUOTA_FIELDS,
    SERVICE_ACCOUNT_NAME,
    NetworkSettings,
    PodUser,
    Tenant,
    TenantsConfig,
    TenantsFileError,
    UnknownTenantError,
    derive_pod_user,
    pool_name,
    resolve_namespace,
    resolve_tenant,
    tenant_user_name,
)
from tfjob.tenants.objects import (
    LABEL_COMPONENT,
    LIMIT_RANGE_NAME,
    POD_SECURITY_LABELS,
    QUOTA_NAME,
    RUN_NETWORK_POLICY_SUFFIX,
    TENANT_COMPONENT,
    TENANT_NETWORK_POLICY_NAME,
    build_egress_rules,
    build_limit_range,
    build_namespace,
    build_resource_quota,
    build_run_network_policy,
    build_service_account,
    build_tenant_manifests,
    build_tenant_network_policy,
    run_network_policy_name,
    tenant_labels,
)

__all__ = [
    "DEFAULT_AWS_CONN_ID",
    "DEFAULT_DNS_PORT",
    "DEFAULT_FIELDS",
    "DEFAULT_IMAGES",
    "DEFAULT_S3_PORT",
    "DEFAULT_TENANTS_FILE",
    "GPU_RESOURCE",
    "LABEL_COMPONENT",
    "LIMIT_RANGE_NAME",
    "MAX_POOL_SLOTS",
    "MAX_TENANT_NAME",
    "NetworkSettings",
    "POD_SECURITY_LABELS",
    "PodUser",
    "POOL_PREFIX",
    "QUOTA_FIELDS",
    "QUOTA_NAME",
    "REPO_ROOT",
    "RUN_NETWORK_POLICY_SUFFIX",
    "SERVICE_ACCOUNT_NAME",
    "TENANTS_FILE_ENV",
    "TENANT_COMPONENT",
    "TENANT_FIELDS",
    "TENANT_NETWORK_POLICY_NAME",
    "Tenant",
    "TenantsConfig",
    "TenantsFileError",
    "UnknownTenantError",
    "Unreadable",
    "build_egress_rules",
    "build_limit_range",
    "build_namespace",
    "build_resource_quota",
    "build_run_network_policy",
    "build_service_account",
    "build_tenant_manifests",
    "build_tenant_network_policy",
    "derive_pod_user",
    "load_tenants",
    "parse_tenants",
    "pool_name",
    "resolve_namespace",
    "resolve_tenant",
    "run_network_policy_name",
    "tenant_labels",
    "tenant_user_name",
    "tenants_file_path",
    "validate_tenants",
]
