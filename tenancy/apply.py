"""Tenants on a live cluster and a live Airflow: apply them, read their quota, size their pools.

`tfjob.tenants` says what a tenant's objects should be; this module makes a
cluster hold exactly that, and is safe to run again and again: each object is
read first and created when absent, patched only when a field we own differs
(labels we set, spec), and otherwise left alone; the report says which was which.

The quota preflight and the `validate` step's admission of a request live in
`tenancy.admission`.

Airflow pools (`tfjob-tenant-<name>`, slots = max_concurrent_jobs) are
built here from the tenants file and applied the same way, through a client
of `tenancy.pools`: the REST API (`RestPoolClient`, for tshell and
scripts) or, in a process with Airflow's database configured, Airflow's own
model (`DatabasePoolClient`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING

from tenancy.pools import PoolClient, PoolSpec, RestPoolClient
from tfjob import naming
from tfjob.jsontypes import JsonObject
from tfjob.quantity import is_quantity, parse_quantity
from tfjob.tenants import (
    Tenant,
    TenantsConfig,
    build_run_network_policy,
    build_tenant_manifests,
    load_tenants,
)

if TYPE_CHECKING:  # the Kubernetes client is imported when a call needs it: `tshell --help`
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    from tfjob.manifests import RunIdentity

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


class Outcome(StrEnum):
    CREATED = "created"
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    SKIPPED = "skipped"  # the cluster does not serve the kind


@dataclass(frozen=True)
class ApplyResult:
    kind: str
    name: str
    namespace: str
    outcome: Outcome
    note: str = ""

    def describe(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        note = f" ({self.note})" if self.note else ""
        return f"{self.kind} {where}{self.name}: {self.outcome.value}{note}"


@dataclass(frozen=True)
class _KindApi:
    api: str  # attribute of `Clients`
    suffix: str  # e.g. "namespaced_resource_quota"
    namespaced: bool


_KINDS: dict[str, _KindApi] = {
    "Namespace": _KindApi("core", "namespace", False),
    "ResourceQuota": _KindApi("core", "namespaced_resource_quota", True),
    "LimitRange": _KindApi("core", "namespaced_limit_range", True),
    "ServiceAccount": _KindApi("core", "namespaced_service_account", True),
    "NetworkPolicy": _KindApi("networking", "namespaced_network_policy", True),
}


@dataclass
class Clients:
    """The typed Kubernetes APIs tenancy needs, on one ApiClient."""

    core: k8s.CoreV1Api
    networking: k8s.NetworkingV1Api

    @classmethod
    def from_api_client(cls, api_client: k8s.ApiClient) -> Clients:
        from kubernetes import client as k8s

        return cls(k8s.CoreV1Api(api_client), k8s.NetworkingV1Api(api_client))


def _call(
    clients: Clients,
    kind: str,
    verb: str,
    manifest: Mapping[str, object],
    *args: object,
    **kwargs: object,
) -> object:
    info = _KINDS[kind]
    method = getattr(getattr(clients, info.api), f"{verb}_{info.suffix}")
    name = manifest["metadata"]["name"]
    namespace = manifest["metadata"].get("namespace")
    positional: list[object] = []
    if verb != "create":
        positional.append(name)
    if info.namespaced:
        positional.append(namespace)
    return method(*positional, *args, **kwargs)


def _normalise(value: object) -> object:
    """Values as the API server may rewrite them: quantities by value ("1000m" == "1")."""
    if isinstance(value, Mapping):
        return {key: _normalise(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalise(item) for item in value]
    if isinstance(value, str) and is_quantity(value):
        return parse_quantity(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)
    return value


def _owned_fields(manifest: Mapping[str, object]) -> list[str]:
    return [key for key in manifest if key not in ("apiVersion", "kind", "metadata", "status")]


def diff_manifest(desired: Mapping[str, object], live: Mapping[str, object]) -> JsonObject:
    """A JSON merge patch turning `live` into `desired` for the fields we own; {} if none.

    We own: the labels and annotations we set (others' are kept), and every other
    top-level field of the manifest (spec, automountServiceAccountToken) as a whole.
    """
    patch: JsonObject = {}
    meta_patch: JsonObject = {}
    for key in ("labels", "annotations"):
        wanted = (desired.get("metadata") or {}).get(key) or {}
        have = (live.get("metadata") or {}).get(key) or {}
        changed = {k: v for k, v in wanted.items() if have.get(k) != v}
        if changed:
            meta_patch[key] = changed
    if meta_patch:
        patch["metadata"] = meta_patch
    for key in _owned_fields(desired):
        if _normalise(desired[key]) != _normalise(live.get(key)):
            patch[key] = _merge_replacement(desired[key], live.get(key))
    return patch


def _merge_replacement(wanted: object, have: object) -> object:
    """`wanted`, with None for map keys only `have` has (a merge patch then drops them)."""
    if not isinstance(wanted, Mapping) or not isinstance(have, Mapping):
        return wanted
    result = {key: _merge_replacement(value, have.get(key)) for key, value in wanted.items()}
    for key in have:
        if key not in wanted:
            result[key] = None
    return result


def _is_unserved(exc: ApiException) -> bool:
    """404 for the kind itself (no such API), not for one missing object."""
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        return True
    details = body.get("details") or {}
    return exc.status == 404 and not details.get("name")


def apply_manifest(clients: Clients, manifest: Mapping[str, object]) -> ApplyResult:
    """Create `manifest`, or patch what differs, or leave it; say which."""
    from kubernetes.client.exceptions import ApiException

    kind = manifest["kind"]
    name = manifest["metadata"]["name"]
    namespace = manifest["metadata"].get("namespace", "")
    api_client = getattr(clients, _KINDS[kind].api).api_client
    try:
        live = api_client.sanitize_for_serialization(_call(clients, kind, "read", manifest))
    except ApiException as exc:
        if exc.status != 404:
            raise
        try:
            _call(clients, kind, "create", manifest, dict(manifest))
        except ApiException as create_exc:
            if create_exc.status == 404 and _is_unserved(create_exc):
                return ApplyResult(
                    kind,
                    name,
                    namespace,
                    Outcome.SKIPPED,
                    f"the cluster does not serve {manifest['apiVersion']} {kind}",
                )
            raise
        return ApplyResult(kind, name, namespace, Outcome.CREATED)
    patch = diff_manifest(manifest, live)
    if not patch:
        return ApplyResult(kind, name, namespace, Outcome.UNCHANGED)
    _call(clients, kind, "patch", manifest, patch, _content_type=MERGE_PATCH)
    return ApplyResult(
        kind, name, namespace, Outcome.CHANGED, "fields " + ", ".join(sorted(_flatten_keys(patch)))
    )


def _flatten_keys(patch: Mapping[str, object], prefix: str = "") -> list[str]:
    keys = []
    for key, value in patch.items():
        path = f"{prefix}{key}"
        if (
            isinstance(value, Mapping)
            and value
            and key in ("metadata", "labels", "annotations", "spec", "hard")
        ):
            keys.extend(_flatten_keys(value, path + "."))
        else:
            keys.append(path)
    return keys


def apply_tenant(clients: Clients, tenant: Tenant, config: TenantsConfig) -> list[ApplyResult]:
    """Every object of one tenant, the namespace first."""
    return [
        apply_manifest(clients, manifest)
        for manifest in build_tenant_manifests(tenant, config.network)
    ]


def apply_tenants(
    clients: Clients, config: TenantsConfig, only: Iterable[str] | None = None
) -> list[ApplyResult]:
    """Every object of every tenant (or of the tenants named in `only`)."""
    wanted = set(only) if only is not None else None
    results = []
    for tenant in config.tenants:
        if wanted is None or tenant.name in wanted:
            results.extend(apply_tenant(clients, tenant, config))
    return results


# --- Airflow pools ------------------------------------------------------------------------


def build_pool_specs(config: TenantsConfig) -> list[PoolSpec]:
    """One pool per tenant: `tfjob-tenant-<name>` with max_concurrent_jobs slots."""
    return [
        PoolSpec(
            tenant.pool,
            tenant.max_concurrent_jobs,
            f"TF-on-K8s tenant {tenant.name}: at most {tenant.max_concurrent_jobs} "
            "concurrent job(s)",
        )
        for tenant in config.tenants
    ]


def apply_pool(pools: PoolClient, spec: PoolSpec) -> ApplyResult:
    live = pools.read_pool(spec.name)
    if live is None:
        pools.create_pool(spec)
        return ApplyResult("Pool", spec.name, "", Outcome.CREATED, f"{spec.slots} slot(s)")
    if live.slots == spec.slots and live.description == spec.description:
        return ApplyResult("Pool", spec.name, "", Outcome.UNCHANGED)
    pools.update_pool(spec)
    return ApplyResult(
        "Pool",
        spec.name,
        "",
        Outcome.CHANGED,
        f"slots {live.slots} -> {spec.slots}" if live.slots != spec.slots else "description",
    )


def apply_pools(pools: PoolClient, config: TenantsConfig) -> list[ApplyResult]:
    return [apply_pool(pools, spec) for spec in build_pool_specs(config)]


def create_run_network_policy(
    api_client: k8s.ApiClient, run: RunIdentity, tenant: str, config: TenantsConfig | None = None
) -> str | None:
    """Create the run's NetworkPolicy (its pods talk only to each other), owned by the run's
    ConfigMap so that deleting the run's objects deletes it too.

    `run` is a `tfjob.manifests.RunIdentity`; call after the run's ConfigMap exists.
    Returns `NetworkPolicy/<name>`, or None when the cluster does not serve the kind.
    """
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    config = config or load_tenants()
    core = k8s.CoreV1Api(api_client)
    networking = k8s.NetworkingV1Api(api_client)
    run_key = run.run_key
    owner = core.read_namespaced_config_map(naming.configmap_name(run_key), run.namespace)
    policy = build_run_network_policy(
        run.namespace,
        run_key,
        run.labels(tenant),
        {naming.ANNOTATION_RUN_ID: run.run_id, naming.ANNOTATION_DAG_ID: run.dag_id},
        config.network,
        owner={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": owner.metadata.name,
            "uid": owner.metadata.uid,
        },
    )
    name = policy["metadata"]["name"]
    try:
        networking.create_namespaced_network_policy(run.namespace, policy)
    except ApiException as exc:
        if exc.status == 409:  # an earlier try's: replace it (owner uid may have changed)
            networking.replace_namespaced_network_policy(name, run.namespace, policy)
        elif exc.status == 404 and _is_unserved(exc):
            log.info(
                "the cluster does not serve networking.k8s.io/v1 NetworkPolicy: run %s "
                "has no network policy",
                run_key,
            )
            return None
        else:
            raise
    return f"NetworkPolicy/{name}"


def apply_everything(
    kubeconfig: str, airflow_url: str, token: Callable[[], str], config: TenantsConfig | None = None
) -> list[ApplyResult]:
    """Tenant objects on the cluster of `kubeconfig`, then pools in the Airflow at
    `airflow_url`: what a start-up script calls once both are up."""
    import kubernetes

    config = config or load_tenants()
    api_client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    results = apply_tenants(Clients.from_api_client(api_client), config)
    return results + apply_pools(RestPoolClient(airflow_url, token), config)


__all__ = [
    "ApplyResult",
    "Clients",
    "Outcome",
    "apply_everything",
    "apply_manifest",
    "apply_pool",
    "apply_pools",
    "apply_tenant",
    "apply_tenants",
    "build_pool_specs",
    "create_run_network_policy",
    "diff_manifest",
]
