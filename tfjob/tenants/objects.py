"""The Kubernetes objects of a tenant, and the NetworkPolicy of each run, as plain dicts.

One builder per object so that `tshell tenants apply` (through
`tenancy.apply`), the tests and the docs agree on what a tenant's
namespace holds. The Namespace enforces the `restricted` Pod Security
Standard: the API server itself refuses a pod that could run as root, escalate
privileges or keep Linux capabilities, whoever creates it; the pods TF-on-K8s
builds (`tfjob.manifests`) meet it. Import these names from `tfjob.tenants`.
"""

from __future__ import annotations

from collections.abc import Mapping

from tfjob import naming
from tfjob.jsontypes import JsonObject
from tfjob.tenants.model import SERVICE_ACCOUNT_NAME, NetworkSettings, Tenant

QUOTA_NAME = "tfjob-quota"
LIMIT_RANGE_NAME = "tfjob-defaults"
TENANT_NETWORK_POLICY_NAME = "tfjob-isolation"
RUN_NETWORK_POLICY_SUFFIX = "network"
LABEL_COMPONENT = "app.kubernetes.io/component"
TENANT_COMPONENT = "tenant"
# Pod Security Admission: pods of the namespace must meet the `restricted` standard of
# the API server's own version.
POD_SECURITY_LABELS = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
# On the namespace: the uid and gid the tenant's pods run as (docs/tenants.md). Informative:
# what holds a pod to them is that only the product creates pods (deploy/rbac).
ANNOTATION_UID = "tfjob.io/uid"
ANNOTATION_GID = "tfjob.io/gid"


def tenant_labels(tenant: Tenant) -> dict[str, str]:
    """Labels of a tenant's own objects (no tfjob.io/run: the janitor never touches them)."""
    return {
        naming.LABEL_MANAGED_BY: naming.MANAGED_BY,
        naming.LABEL_TENANT: tenant.name,
        LABEL_COMPONENT: TENANT_COMPONENT,
    }


def _metadata(tenant: Tenant, name: str) -> JsonObject:
    return {"name": name, "namespace": tenant.namespace, "labels": tenant_labels(tenant)}


def build_namespace(tenant: Tenant) -> JsonObject:
    """The tenant's namespace, enforcing the `restricted` Pod Security Standard and
    annotated with the uid/gid of the tenant's pods."""
    metadata: JsonObject = {
        "name": tenant.namespace,
        "labels": {**tenant_labels(tenant), **POD_SECURITY_LABELS},
    }
    user = tenant.pod_user
    annotations = {ANNOTATION_UID: str(user.uid), ANNOTATION_GID: str(user.gid)}
    if tenant.description:
        annotations["tfjob.io/description"] = tenant.description
    metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def build_resource_quota(tenant: Tenant) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _metadata(tenant, QUOTA_NAME),
        "spec": {"hard": tenant.hard_quota()},
    }


def build_limit_range(tenant: Tenant) -> JsonObject:
    """Container defaults: `defaults` become defaultRequest, `default_limits` default."""
    item: JsonObject = {"type": "Container", "defaultRequest": dict(tenant.defaults)}
    if tenant.default_limits:
        item["default"] = dict(tenant.default_limits)
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": _metadata(tenant, LIMIT_RANGE_NAME),
        "spec": {"limits": [item]},
    }


def build_service_account(tenant: Tenant) -> JsonObject:
    """The account training pods run as: no RoleBinding names it, so it has no API rights."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(tenant, SERVICE_ACCOUNT_NAME),
        "automountServiceAccountToken": False,
    }


def build_egress_rules(network: NetworkSettings) -> list[JsonObject]:
    """Egress every training pod needs outside its run: DNS (UDP and TCP) and the S3 port."""
    dns = {
        "ports": [
            {"protocol": "UDP", "port": network.dns_port},
            {"protocol": "TCP", "port": network.dns_port},
        ]
    }
    s3: JsonObject = {"ports": [{"protocol": "TCP", "port": network.s3_port}]}
    if network.s3_cidr:
        s3["to"] = [{"ipBlock": {"cidr": network.s3_cidr}}]
    return [dns, s3]


def build_tenant_network_policy(tenant: Tenant, network: NetworkSettings) -> JsonObject:
    """Default deny for the namespace: no ingress, egress only to DNS and S3.

    Policies add up: each run's own policy (`build_run_network_policy`) then
    lets the run's pods talk to each other, and to nothing else.
    """
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(tenant, TENANT_NETWORK_POLICY_NAME),
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": build_egress_rules(network),
        },
    }


def run_network_policy_name(run_key: str) -> str:
    """`<runkey>-network` (a run key is at most 49 characters)."""
    return f"{run_key}-{RUN_NETWORK_POLICY_SUFFIX}"


def build_run_network_policy(
    namespace: str,
    run_key: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    network: NetworkSettings,
    owner: Mapping[str, object] | None = None,
) -> JsonObject:
    """The run's pods accept traffic only from each other and reach only each other, DNS, S3.

    `labels`/`annotations` are the run's (naming.run_labels and the run-id/dag-id
    annotations), so the janitor finds it with the run. `owner` (an object of the
    run, e.g. its ConfigMap: apiVersion, kind, name, uid) makes Kubernetes' garbage
    collector delete the policy when teardown deletes that object.
    """
    # The run's key and its run-hash label: not the pods of another run whose key is the same.
    run_pods = {naming.LABEL_RUN: run_key}
    if naming.LABEL_RUN_HASH in labels:
        run_pods[naming.LABEL_RUN_HASH] = labels[naming.LABEL_RUN_HASH]
    same_run = {"podSelector": {"matchLabels": run_pods}}
    metadata: JsonObject = {
        "name": run_network_policy_name(run_key),
        "namespace": namespace,
        "labels": dict(labels),
        "annotations": dict(annotations),
    }
    if owner:
        metadata["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["name"],
                "uid": owner["uid"],
                "blockOwnerDeletion": False,
            }
        ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {
            "podSelector": {"matchLabels": dict(run_pods)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [same_run]}],
            "egress": [{"to": [same_run]}, *build_egress_rules(network)],
        },
    }


def build_tenant_manifests(tenant: Tenant, network: NetworkSettings) -> list[JsonObject]:
    """Every object of a tenant, the Namespace first (the others live in it)."""
    return [
        build_namespace(tenant),
        build_resource_quota(tenant),
        build_limit_range(tenant),
        build_service_account(tenant),
        build_tenant_network_policy(tenant, network),
    ]
