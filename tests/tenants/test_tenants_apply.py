"""`apply_tenants` and the quota preflight against a real localkube API server."""

import json
import time
from decimal import Decimal

import kubernetes
import pytest
import yaml

from harness.tfjob_fixtures import distributed_request_data, tenant_storage
from tenancy.admission import (
    TenancyRefusal,
    TenantNotAppliedError,
    admit_request,
    preflight_quota,
    read_tenant_quota,
)
from tenancy.apply import Clients, Outcome, apply_tenants, diff_manifest
from tfjob.manifests import build_container_security_context, build_pod_security_context
from tfjob.quota import Verdict
from tfjob.request.model import load_request
from tfjob.tenants import validate_tenants


def tenants_config(cpu: str = "4", jobs: int = 2, extra: dict | None = None):
    tenants = [
        {
            "name": "apply-a",
            "quota": {"cpu": cpu, "memory": "8Gi", "nvidia.com/gpu": 2, "pods": 6},
            "defaults": {"cpu": "250m", "memory": "256Mi"},
            "max_concurrent_jobs": jobs,
            **tenant_storage("apply-a"),
        },
        {
            "name": "apply-b",
            "quota": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 0, "pods": 4},
            "defaults": {"cpu": "100m", "memory": "128Mi"},
            **tenant_storage("apply-b"),
            **(extra or {}),
        },
    ]
    return validate_tenants({"tenants": tenants}, "test-tenants.yaml")


@pytest.fixture(scope="module")
def clients(localkube_api) -> Clients:
    return Clients.from_api_client(kubernetes.client.ApiClient(localkube_api.kube_configuration()))


def outcomes(results) -> dict[str, Outcome]:
    return {f"{r.kind}/{r.namespace or '-'}/{r.name}": r.outcome for r in results}


def test_apply_creates_then_leaves_everything_unchanged_then_changes_only_what_changed(clients):
    first = outcomes(apply_tenants(clients, tenants_config()))
    assert first["Namespace/-/tfjob-apply-a"] is Outcome.CREATED
    assert first["ResourceQuota/tfjob-apply-a/tfjob-quota"] is Outcome.CREATED
    assert first["LimitRange/tfjob-apply-b/tfjob-defaults"] is Outcome.CREATED
    assert first["ServiceAccount/tfjob-apply-b/tfjob-runner"] is Outcome.CREATED
    assert first["NetworkPolicy/tfjob-apply-a/tfjob-isolation"] is Outcome.CREATED

    again = outcomes(apply_tenants(clients, tenants_config()))
    assert set(again.values()) == {Outcome.UNCHANGED}
    labels = clients.core.read_namespace("tfjob-apply-a").metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "latest"
    assert labels["tfjob.io/tenant"] == "apply-a"

    changed = apply_tenants(
        clients, tenants_config(cpu="6", extra={"default_limits": {"cpu": "1", "memory": "1Gi"}})
    )
    by_key = outcomes(changed)
    assert by_key["ResourceQuota/tfjob-apply-a/tfjob-quota"] is Outcome.CHANGED
    assert by_key["LimitRange/tfjob-apply-b/tfjob-defaults"] is Outcome.CHANGED
    assert [k for k, o in by_key.items() if o is Outcome.CHANGED] == [
        "ResourceQuota/tfjob-apply-a/tfjob-quota",
        "LimitRange/tfjob-apply-b/tfjob-defaults",
    ]
    quota = clients.core.read_namespaced_resource_quota("tfjob-quota", "tfjob-apply-a")
    assert quota.spec.hard["requests.cpu"] == "6"
    limits = clients.core.read_namespaced_limit_range("tfjob-defaults", "tfjob-apply-b")
    assert limits.spec.limits[0].default == {"cpu": "1", "memory": "1Gi"}
    account = clients.core.read_namespaced_service_account("tfjob-runner", "tfjob-apply-a")
    assert account.automount_service_account_token is False
    # Back to the first file: the default limits go away again.
    apply_tenants(clients, tenants_config())
    limits = clients.core.read_namespaced_limit_range("tfjob-defaults", "tfjob-apply-b")
    assert not limits.spec.limits[0].default


def test_diff_ignores_labels_added_by_others_and_quantities_written_differently():
    desired = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "q", "labels": {"a": "1"}},
        "spec": {"hard": {"requests.cpu": "1", "requests.memory": "1Gi"}},
    }
    live = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "q", "labels": {"a": "1", "other": "x"}, "uid": "u"},
        "spec": {"hard": {"requests.cpu": "1000m", "requests.memory": "1024Mi"}},
        "status": {"used": {}},
    }
    assert diff_manifest(desired, live) == {}
    live["spec"]["hard"]["pods"] = "3"
    assert diff_manifest(desired, live) == {
        "spec": {"hard": {"requests.cpu": "1", "requests.memory": "1Gi", "pods": None}}
    }


def test_the_preflight_counts_live_pods_and_refuses_a_gang_that_no_longer_fits(clients):
    config = tenants_config()
    apply_tenants(clients, config)
    tenant = config.find("apply-a")
    request = load_request(
        distributed_request_data(
            tenant="apply-a",
            replicas={"chief": 0, "ps": 1, "worker": 2, "evaluator": 0},
            resources={
                "worker": {"cpu": "1", "memory": "1Gi", "gpu": 1},
                "ps": {"cpu": "500m", "memory": "512Mi"},
            },
        )
    )
    assert preflight_quota(clients.core, request, tenant).fits

    # Someone else's job holds one GPU and 2 cpu; its pod is Pending (no kubelets) but counts.
    # (The namespace enforces the restricted Pod Security Standard: the pod must meet it.)
    clients.core.create_namespaced_pod(
        "tfjob-apply-a",
        {
            "metadata": {"name": "other-job"},
            "spec": {
                "securityContext": build_pod_security_context(tenant.pod_user),
                "containers": [
                    {
                        "name": "c",
                        "image": "python:3.11",
                        "resources": {
                            "requests": {"cpu": "2", "nvidia.com/gpu": "1"},
                            "limits": {"nvidia.com/gpu": "1"},
                        },
                        "securityContext": build_container_security_context(),
                    }
                ],
            },
        },
    )
    try:
        hard, used = read_tenant_quota(clients.core, tenant)
        assert hard["cpu"] == Decimal(4) and hard["nvidia.com/gpu"] == Decimal(2)
        assert used["cpu"] == Decimal(2) and used["nvidia.com/gpu"] == Decimal(1)
        assert used["memory"] == Decimal(256 * 2**20)  # the LimitRange default request
        check = preflight_quota(clients.core, request, tenant)
        assert check.verdict is Verdict.EXCEEDS_QUOTA
        assert "nvidia.com/gpu: needed 2, free 1 (hard 2, used 1) SHORT by 1" in check.message
        # 2.5 for the replicas, 0.01 for the model owner's keeper container
        assert "cpu: needed 2.51, free 2 (hard 4, used 2) SHORT by 0.51" in check.message
    finally:
        clients.core.delete_namespaced_pod("other-job", "tfjob-apply-a", grace_period_seconds=0)


def test_the_preflight_of_a_tenant_never_applied_says_to_apply_it(clients):
    config = validate_tenants(
        {
            "tenants": [
                {
                    "name": "never-applied",
                    "quota": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 0, "pods": 1},
                    "defaults": {"cpu": "100m", "memory": "128Mi"},
                    **tenant_storage("never-applied"),
                }
            ]
        }
    )
    request = load_request(distributed_request_data(tenant="never-applied"))
    with pytest.raises(
        TenantNotAppliedError,
        match="namespace tfjob-never-applied does not exist.*tshell tenants apply",
    ):
        preflight_quota(clients.core, request, config.tenants[0])


def test_admission_refuses_unknown_tenants_and_gangs_that_do_not_fit(clients):
    config = tenants_config()
    apply_tenants(clients, config)
    small = load_request(
        distributed_request_data(
            tenant="apply-b",
            replicas={"chief": 0, "ps": 1, "worker": 1, "evaluator": 0},
            resources={
                "worker": {"cpu": "500m", "memory": "256Mi"},
                "ps": {"cpu": "500m", "memory": "256Mi"},
            },
        )
    )
    tenant, check = admit_request(clients.core, small, config)
    assert tenant.name == "apply-b" and check.fits

    with pytest.raises(TenancyRefusal, match="'nobody' given; known tenants .*apply-a, apply-b"):
        admit_request(clients.core, small.model_copy(update={"tenant": "nobody"}), config)

    wide = load_request(
        distributed_request_data(
            tenant="apply-b", replicas={"chief": 0, "ps": 1, "worker": 4, "evaluator": 0}
        )
    )
    with pytest.raises(TenancyRefusal, match="pods: needed 5, free 4"):
        admit_request(clients.core, wide, config)


def test_tshell_tenants_apply_then_list_shows_each_object_and_the_usage(
    localkube_api, tmp_path, capsys
):
    from tshell.cli import run

    path = tmp_path / "tenants.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "tenants": [
                    {
                        "name": "cli-a",
                        "quota": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": 1, "pods": 5},
                        "defaults": {"cpu": "100m", "memory": "128Mi"},
                        "max_concurrent_jobs": 1,
                        **tenant_storage("cli-a"),
                    }
                ]
            }
        )
    )
    common = ["--file", str(path), "--kubeconfig", localkube_api.kubeconfig]
    assert run(["tenants", "apply", *common, "--no-pools"]) == 0
    first = capsys.readouterr().out
    assert "Namespace tfjob-cli-a: created" in first
    assert "ResourceQuota tfjob-cli-a/tfjob-quota: created" in first
    assert run(["tenants", "apply", *common, "--no-pools"]) == 0
    assert "LimitRange tfjob-cli-a/tfjob-defaults: unchanged" in capsys.readouterr().out

    assert run(["tenants", "list", *common]) == 0
    listing = capsys.readouterr().out
    assert "cli-a" in listing and "tfjob-tenant-cli-a" in listing
    assert "0/2" in listing and "0/5" in listing  # used/quota of cpu and pods

    assert run(["tenants", "list", *common, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["used"] == {"cpu": "0", "memory": "0", "nvidia.com/gpu": "0", "pods": "0"}


def test_tshell_tenants_apply_names_a_bad_file_and_fails(tmp_path, capsys):
    from tshell.cli import run

    path = tmp_path / "tenants.yaml"
    path.write_text("tenants:\n  - name: Bad_Name\n")
    assert run(["tenants", "apply", "--file", str(path), "--no-pools"]) == 1
    assert "tenants[0].name: 'Bad_Name' given" in capsys.readouterr().err


def test_a_runs_network_policy_goes_when_the_runs_configmap_goes(clients):
    from tenancy.apply import create_run_network_policy
    from tfjob import naming
    from tfjob.manifests import RunIdentity, build_runtime_configmap

    config = tenants_config()
    apply_tenants(clients, config)
    run = RunIdentity(
        job="netpol",
        run_id="manual__netpol",
        dag_id="tfjob__netpol",
        namespace="tfjob-apply-a",
        run_as=config.find("apply-a").pod_user,
    )
    clients.core.create_namespaced_config_map(
        run.namespace, build_runtime_configmap(run, {"a.py": ""}, "apply-a")
    )
    api_client = clients.core.api_client
    made = create_run_network_policy(api_client, run, "apply-a", config)
    name = f"{run.run_key}-network"
    assert made == f"NetworkPolicy/{name}"
    policy = clients.networking.read_namespaced_network_policy(name, run.namespace)
    assert policy.spec.pod_selector.match_labels == {
        naming.LABEL_RUN: run.run_key,
        naming.LABEL_RUN_HASH: run.run_hash,
    }
    assert policy.metadata.owner_references[0].kind == "ConfigMap"
    # A second try of the same run replaces it rather than failing.
    assert create_run_network_policy(api_client, run, "apply-a", config) == made

    clients.core.delete_namespaced_config_map(naming.configmap_name(run.run_key), run.namespace)
    deadline = time.monotonic() + 30
    while clients.networking.list_namespaced_network_policy(
        run.namespace, label_selector=naming.run_selector(run.run_key)
    ).items:
        assert time.monotonic() < deadline, "the run's NetworkPolicy outlived its ConfigMap"
        time.sleep(0.2)
