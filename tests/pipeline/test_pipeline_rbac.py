"""The RBAC the Airflow side needs (deploy/rbac/) is valid and covers what the pipeline calls."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from harness.repo_root import REPO_ROOT

RBAC = REPO_ROOT / "deploy" / "rbac"
KUBERNETES_VERSION = kubernetes_validate.utils.latest_version()


@pytest.mark.parametrize("path", sorted(RBAC.glob("*.yaml")), ids=lambda p: p.name)
def test_every_rbac_manifest_validates_against_the_kubernetes_schema(path):
    for manifest in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def granted_by(role: dict) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) triples a role grants."""
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_role_grants_every_verb_the_pipeline_uses():
    role = yaml.safe_load((RBAC / "clusterrole.yaml").read_text())
    needed = {
        ("", "pods", "create"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods", "delete"),
        # a run's objects go by one deletecollection per kind (operators/kubeobjects.py)
        ("", "pods", "deletecollection"),
        ("", "configmaps", "deletecollection"),
        ("", "secrets", "deletecollection"),
        ("", "pods/log", "get"),
        ("", "pods/exec", "create"),
        ("", "configmaps", "create"),
        ("", "configmaps", "delete"),
        ("", "secrets", "create"),
        ("", "secrets", "delete"),
        ("", "events", "list"),
        # the run's NetworkPolicy: launch creates (or replaces) it, the janitor deletes it
        ("networking.k8s.io", "networkpolicies", "create"),
        ("networking.k8s.io", "networkpolicies", "update"),
        ("networking.k8s.io", "networkpolicies", "list"),
        ("networking.k8s.io", "networkpolicies", "delete"),
        # the quota preflight
        ("", "resourcequotas", "list"),
        ("", "limitranges", "list"),
    }
    assert needed - granted_by(role) == set()


# Kubernetes client methods -> (apiGroup, resource, verb) for what operators/ calls.
CLIENT_VERBS = {
    "create": "create",
    "read": "get",
    "list": "list",
    "replace": "update",
    "patch": "patch",
    "delete": "delete",
    "delete_collection": "deletecollection",
}
CLIENT_RESOURCES = {
    "pod": ("", "pods"),
    "pod_log": ("", "pods/log"),
    "config_map": ("", "configmaps"),
    "secret": ("", "secrets"),
    "event": ("", "events"),
    "resource_quota": ("", "resourcequotas"),
    "limit_range": ("", "limitranges"),
    "network_policy": ("networking.k8s.io", "networkpolicies"),
}
# Written as getattr(api, f"{verb}_{suffix}") in operators/janitor.py: list and delete.
JANITOR_KINDS = ("pod", "config_map", "secret", "network_policy")


def test_the_role_grants_every_namespaced_call_in_operators():
    """Every `<verb>_namespaced_<kind>` call of the Airflow side is granted: a new call needs
    a new rule (tenant administration, `tshell tenants apply`, is not the Airflow side's)."""
    import re

    role = yaml.safe_load((RBAC / "clusterrole.yaml").read_text())
    calls = set()
    for path in sorted((RBAC.parent.parent / "operators").glob("*.py")):
        if path.name == "tenancy/apply.py":
            # apply_tenant* (an administrator's command) lives there; the calls the pipeline
            # makes from it are the preflight's and the run policy's, listed explicitly.
            calls |= {
                ("list", "resource_quota"),
                ("list", "pod"),
                ("list", "limit_range"),
                ("read", "config_map"),
                ("create", "network_policy"),
                ("replace", "network_policy"),
            }
            continue
        calls |= set(
            re.findall(
                r"\b(create|read|list|replace|patch|delete|delete_collection)"
                r"_namespaced_([a-z_]+?)(?:_status)?\b",
                path.read_text(),
            )
        )
    calls |= {(verb, kind) for kind in JANITOR_KINDS for verb in ("list", "delete")}
    needed = {(*CLIENT_RESOURCES[kind], CLIENT_VERBS[verb]) for verb, kind in calls}
    assert needed - granted_by(role) == set()
