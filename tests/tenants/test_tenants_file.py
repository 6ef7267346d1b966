"""The tenants file: what it declares, the objects built from it, and every refusal."""

import kubernetes_validate
import pytest
import yaml

from harness.repo_root import REPO_ROOT
from harness.tfjob_fixtures import tenant_storage
from tfjob import naming
from tfjob.tenants import (
    DEFAULT_TENANTS_FILE,
    TENANTS_FILE_ENV,
    TenantsFileError,
    UnknownTenantError,
    build_run_network_policy,
    build_tenant_manifests,
    load_tenants,
    parse_tenants,
    pool_name,
    resolve_namespace,
    resolve_tenant,
    tenant_user_name,
    validate_tenants,
)

KUBERNETES_VERSION = kubernetes_validate.utils.latest_version()
DEPLOY = REPO_ROOT / "deploy"


def tenant_data(**changes):
    name = changes.get("name", "team-a")
    data = {
        "name": name,
        "quota": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": 4, "pods": 20},
        "defaults": {"cpu": "500m", "memory": "1Gi"},
        "max_concurrent_jobs": 2,
        **(tenant_storage(name) if isinstance(name, str) else {}),
    }
    data.update(changes)
    return data


def config_data(*tenants, **top):
    return {"tenants": list(tenants) or [tenant_data()], **top}


def refusal(data) -> str:
    with pytest.raises(TenantsFileError) as caught:
        validate_tenants(data, "t.yaml")
    return str(caught.value)


def validate_manifest(manifest: dict) -> None:
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def test_the_shipped_tenants_file_loads_with_demo_and_test_tenants():
    config = load_tenants(DEFAULT_TENANTS_FILE)
    assert {"demo", "test"} <= set(config.names())
    demo = config.find("demo")
    assert demo.namespace == "tfjob-demo"
    assert demo.pool == "tfjob-tenant-demo"
    assert config.network.s3_port == 9000


def test_the_shipped_tenants_say_where_their_data_lives_and_what_their_pods_may_run():
    config = load_tenants(DEFAULT_TENANTS_FILE)
    demo, test, research = (config.find(name) for name in ("demo", "test", "research"))
    assert demo.bundle_prefixes == ("s3://tfjob-demo/bundles/",)
    assert demo.output_prefixes == ("s3://tfjob-demo/outputs/",)
    assert demo.images == ("tensorflow/tensorflow:*",)
    # the end-to-end tests' buckets and stand-in image
    assert test.bundle_prefixes == ("s3://tfjob-test/bundles/", "s3://tfjob-other/bundles/")
    assert test.output_prefixes == ("s3://tfjob-test/outputs/", "s3://tfjob-other/outputs/")
    assert test.images == ("tensorflow/tensorflow:*", "python:*")
    assert research.bundle_prefixes == (
        "s3://tfjob-demo/research/bundles/",
        "s3://tfjob-test/research/bundles/",
    )
    assert research.output_prefixes == (
        "s3://tfjob-demo/research/outputs/",
        "s3://tfjob-test/research/outputs/",
    )
    for tenant in (demo, test, research):
        assert tenant.roles == (tenant.name,)
        assert tenant.aws_conn_id is None and tenant.s3_conn_id == "aws_default"
        assert tenant.node_selectors == {} and tenant.tolerations == ()
        assert tenant.active_runs_limit == 2 * tenant.max_concurrent_jobs


def test_tfjob_tenants_is_the_one_import_path_and_exports_what_it_lists():
    import tfjob.tenants

    assert [name for name in tfjob.tenants.__all__ if not hasattr(tfjob.tenants, name)] == []
    for name in (
        "Tenant",
        "TenantsConfig",
        "TenantsFileError",
        "UnknownTenantError",
        "load_tenants",
        "validate_tenants",
        "build_tenant_manifests",
        "build_run_network_policy",
        "pool_name",
        "resolve_tenant",
        "GPU_RESOURCE",
        "SERVICE_ACCOUNT_NAME",
        "TENANTS_FILE_ENV",
        "tenant_user_name",
    ):
        assert name in tfjob.tenants.__all__, name


def test_the_header_of_the_shipped_file_documents_every_tenant_field():
    from tfjob.tenants import TENANT_FIELDS

    header = DEFAULT_TENANTS_FILE.read_text().split("\ntenants:", 1)[0]
    for field in TENANT_FIELDS:
        assert f"#   {field} " in header, field


def test_a_tenant_left_to_the_defaults_gets_its_own_role_the_tensorflow_images_and_no_more():
    (tenant,) = validate_tenants(config_data()).tenants
    assert tenant.roles == ("team-a",)
    assert tenant_user_name("team-a") == "team-a-user"
    assert tenant.images == ("tensorflow/tensorflow:*",)
    assert tenant.node_selectors == {} and tenant.tolerations == ()
    assert tenant.aws_conn_id is None
    assert tenant.max_active_runs is None and tenant.active_runs_limit == 4


def test_every_new_tenant_field_is_read_as_written():
    (tenant,) = validate_tenants(
        config_data(
            tenant_data(
                roles=["team-a-admins", "Team.A_ops"],
                aws_conn_id="s3_team_a",
                bundle_prefixes=["s3://shared-bundles/", "s3://team-a/code/"],
                output_prefixes=["s3://team-a/outputs/"],
                images=["python:3.*", "tensorflow/*"],
                node_selectors={"pool": ["train-*", "eval"], "example.com/zone": ["*"]},
                tolerations=[
                    {
                        "key": "dedicated",
                        "operator": "Equal",
                        "value": "team-a",
                        "effect": "NoSchedule",
                    },
                    {"key": "nvidia.com/gpu"},
                    {"key": "", "operator": "Exists"},
                ],
                max_active_runs=3,
            )
        )
    ).tenants
    assert tenant.roles == ("team-a-admins", "Team.A_ops")
    assert [tenant_user_name(role) for role in tenant.roles] == [
        "team-a-admins-user",
        "Team.A_ops-user",
    ]
    assert tenant.aws_conn_id == tenant.s3_conn_id == "s3_team_a"
    assert tenant.bundle_prefixes == ("s3://shared-bundles/", "s3://team-a/code/")
    assert tenant.output_prefixes == ("s3://team-a/outputs/",)
    assert tenant.images == ("python:3.*", "tensorflow/*")
    assert tenant.node_selectors == {"pool": ("train-*", "eval"), "example.com/zone": ("*",)}
    assert tenant.tolerations == (
        {"key": "dedicated", "operator": "Equal", "value": "team-a", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu"},
        {"key": "", "operator": "Exists"},
    )
    assert tenant.max_active_runs == tenant.active_runs_limit == 3


def test_the_tenants_file_is_found_through_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "tenants.yaml"
    path.write_text(yaml.safe_dump(config_data(tenant_data(name="solo"))))
    monkeypatch.setenv(TENANTS_FILE_ENV, str(path))
    assert load_tenants().names() == ["solo"]


def test_every_manifest_in_deploy_validates_against_the_kubernetes_schema():
    checked = 0
    for path in sorted(DEPLOY.rglob("*.y*ml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and "apiVersion" in document and "kind" in document:
                validate_manifest(document)
                checked += 1
    config = load_tenants(DEPLOY / "tenants.yaml")
    for tenant in config.tenants:
        for manifest in build_tenant_manifests(tenant, config.network):
            validate_manifest(manifest)
            checked += 1
    assert checked >= 5 * len(config.tenants)


def test_schema_validation_would_catch_a_wrong_network_policy_field():
    config = validate_tenants(config_data())
    policy = build_tenant_manifests(config.tenants[0], config.network)[-1]
    policy["spec"]["podSelectors"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_manifest(policy)


def test_tenant_objects_carry_namespace_quota_defaults_and_no_api_rights():
    config = validate_tenants(
        config_data(tenant_data(default_limits={"cpu": "2", "memory": "4Gi"}))
    )
    namespace, quota, limits, account, policy = build_tenant_manifests(
        config.tenants[0], config.network
    )
    assert namespace["metadata"]["name"] == "tfjob-team-a"
    assert quota["metadata"]["namespace"] == "tfjob-team-a"
    assert quota["spec"]["hard"] == {
        "requests.cpu": "8",
        "requests.memory": "16Gi",
        "requests.nvidia.com/gpu": "4",
        "pods": "20",
    }
    assert limits["spec"]["limits"] == [
        {
            "type": "Container",
            "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
            "default": {"cpu": "2", "memory": "4Gi"},
        }
    ]
    assert account["automountServiceAccountToken"] is False
    assert account["metadata"]["name"] == "tfjob-runner"
    # Tenant objects are not run objects: the janitor selects on tfjob.io/run.
    for manifest in (namespace, quota, limits, account, policy):
        assert naming.LABEL_RUN not in manifest["metadata"]["labels"]
        assert manifest["metadata"]["labels"][naming.LABEL_TENANT] == "team-a"


def test_the_tenants_namespace_enforces_the_restricted_pod_security_standard():
    config = validate_tenants(config_data(tenant_data(description="Team A.")))
    namespace = build_tenant_manifests(config.tenants[0], config.network)[0]
    assert namespace["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "tfjob",
        "tfjob.io/tenant": "team-a",
        "app.kubernetes.io/component": "tenant",
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    user = config.tenants[0].pod_user
    assert namespace["metadata"]["annotations"] == {
        "tfjob.io/description": "Team A.",
        "tfjob.io/uid": str(user.uid),
        "tfjob.io/gid": str(user.gid),
    }
    validate_manifest(namespace)


def test_the_tenant_network_policy_denies_ingress_and_allows_only_dns_and_s3_egress():
    config = validate_tenants(config_data(network={"s3_port": 9443, "s3_cidr": "10.9.0.0/16"}))
    policy = build_tenant_manifests(config.tenants[0], config.network)[-1]
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    spec = policy["spec"]
    assert spec["podSelector"] == {}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == []
    assert spec["egress"] == [
        {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        {
            "ports": [{"protocol": "TCP", "port": 9443}],
            "to": [{"ipBlock": {"cidr": "10.9.0.0/16"}}],
        },
    ]


def test_a_run_network_policy_lets_only_the_runs_pods_talk_to_each_other():
    config = validate_tenants(config_data())
    run_hash = naming.run_hash("d1", "r1")
    labels = naming.run_labels("digits", "digits-1234abcd", "team-a", run_hash)
    policy = build_run_network_policy(
        "tfjob-team-a",
        "digits-1234abcd",
        labels,
        {naming.ANNOTATION_RUN_ID: "r1", naming.ANNOTATION_DAG_ID: "d1"},
        config.network,
    )
    validate_manifest(policy)
    # the run hash too: not the pods of another run whose key is the same
    same_run = {
        "podSelector": {
            "matchLabels": {"tfjob.io/run": "digits-1234abcd", "tfjob.io/run-hash": run_hash}
        }
    }
    assert policy["metadata"]["name"] == "digits-1234abcd-network"
    assert policy["metadata"]["labels"] == labels
    assert policy["spec"]["podSelector"] == same_run["podSelector"]
    assert policy["spec"]["ingress"] == [{"from": [same_run]}]
    assert policy["spec"]["egress"][0] == {"to": [same_run]}
    assert {"protocol": "TCP", "port": 9000} in policy["spec"]["egress"][2]["ports"]
    assert "ownerReferences" not in policy["metadata"]


def test_a_run_network_policy_can_be_owned_by_the_runs_configmap():
    config = validate_tenants(config_data())
    owned = build_run_network_policy(
        "tfjob-team-a",
        "digits-1234abcd",
        {},
        {},
        config.network,
        owner={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "digits-1234abcd-runtime",
            "uid": "0f6c7a9e-1111-2222-3333-444455556666",
        },
    )
    validate_manifest(owned)
    assert owned["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "digits-1234abcd-runtime",
            "uid": "0f6c7a9e-1111-2222-3333-444455556666",
            "blockOwnerDeletion": False,
        }
    ]


def test_an_unknown_tenant_is_refused_with_the_known_ones_listed():
    config = validate_tenants(config_data(tenant_data(), tenant_data(name="team-b")), "t.yaml")
    assert resolve_namespace(config, "team-b") == "tfjob-team-b"
    with pytest.raises(UnknownTenantError) as caught:
        resolve_tenant(config, "team-c")
    message = str(caught.value)
    assert "request.tenant: 'team-c' given" in message
    assert "known tenants (from t.yaml): team-a, team-b" in message


def test_the_pool_of_a_tenant_is_named_after_it():
    assert pool_name("team-a") == "tfjob-tenant-team-a"


def test_a_namespace_other_than_the_tenants_own_is_refused():
    message = refusal(config_data(tenant_data(namespace="tfjob-team-b")))
    assert "t.yaml: tenants[0].namespace: 'tfjob-team-b' given" in message
    assert "always tfjob-<name>: tfjob-team-a" in message
    # Writing the right one explicitly is fine.
    validate_tenants(config_data(tenant_data(namespace="tfjob-team-a")))


@pytest.mark.parametrize(
    "change, where, allowed",
    [
        ({"name": "Team_A"}, "tenants[0].name", "DNS-1123 label"),
        ({"name": "x" * 58}, "tenants[0].name", "at most 57 characters"),
        (
            {"quota": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": 4}},
            "tenants[0].quota.pods",
            "the field is required",
        ),
        (
            {"quota": {"cpu": "lots", "memory": "16Gi", "nvidia.com/gpu": 4, "pods": 1}},
            "tenants[0].quota.cpu",
            "a Kubernetes quantity",
        ),
        (
            {"quota": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "1.5", "pods": 1}},
            "tenants[0].quota.nvidia.com/gpu",
            "a whole number",
        ),
        (
            {"quota": {"cpu": "8", "memory": "1Gi", "gpu": 1, "nvidia.com/gpu": 1, "pods": 1}},
            "tenants[0].quota.gpu",
            "allowed fields: cpu, memory, nvidia.com/gpu, pods",
        ),
        ({"defaults": {"cpu": "1"}}, "tenants[0].defaults.memory", "the field is required"),
        (
            {"default_limits": {"cpu": "100m"}},
            "tenants[0].default_limits.cpu",
            "at least defaults.cpu (500m)",
        ),
        ({"max_concurrent_jobs": 0}, "tenants[0].max_concurrent_jobs", "from 1 to 1000"),
        ({"max_concurrent_jobs": True}, "tenants[0].max_concurrent_jobs", "from 1 to 1000"),
        ({"gpus": 2}, "tenants[0].gpus", "unknown field; allowed fields: name, namespace"),
        ({"max_active_runs": 0}, "tenants[0].max_active_runs", "from 1 to 2000"),
        ({"max_active_runs": "3"}, "tenants[0].max_active_runs", "a whole number"),
        ({"roles": []}, "tenants[0].roles", "a non-empty list"),
        ({"roles": "team-a"}, "tenants[0].roles", "a non-empty list"),
        ({"roles": ["ok", "has space"]}, "tenants[0].roles[1]", "1-64 letters, digits"),
        ({"roles": ["x" * 65]}, "tenants[0].roles[0]", "1-64 letters, digits"),
        ({"roles": [""]}, "tenants[0].roles[0]", "1-64 letters, digits"),
        ({"roles": ["a", "a"]}, "tenants[0].roles[1]", "each role is listed once"),
        ({"roles": ["Admin"]}, "tenants[0].roles[0]", "Airflow's built-in roles"),
        ({"roles": ["public"]}, "tenants[0].roles[0]", "Airflow's built-in roles"),
        ({"name": "viewer"}, "tenants[0].roles", "Airflow's built-in roles"),
        ({"bundle_prefixes": None}, "tenants[0].bundle_prefixes", "the field is required"),
        ({"output_prefixes": []}, "tenants[0].output_prefixes", "a non-empty list"),
        ({"output_prefixes": "s3://team-a/out/"}, "tenants[0].output_prefixes", "a non-empty list"),
        (
            {"output_prefixes": ["s3://team-a/out"]},
            "tenants[0].output_prefixes[0]",
            "ends with '/' (write s3://team-a/out/)",
        ),
        ({"output_prefixes": ["s3://team-a"]}, "tenants[0].output_prefixes[0]", "ends with '/'"),
        (
            {"output_prefixes": ["https://team-a/out/"]},
            "tenants[0].output_prefixes[0]",
            "an s3://<bucket>/<prefix>/ URL",
        ),
        (
            {"bundle_prefixes": ["s3://Team_A/b/"]},
            "tenants[0].bundle_prefixes[0]",
            "valid bucket name",
        ),
        ({"bundle_prefixes": ["s3://ab/b/"]}, "tenants[0].bundle_prefixes[0]", "valid bucket name"),
        (
            {"bundle_prefixes": ["s3://team-a/b/../c/"]},
            "tenants[0].bundle_prefixes[0]",
            "no empty, '.' or '..' path segments",
        ),
        (
            {"bundle_prefixes": ["s3://team-a/b//c/"]},
            "tenants[0].bundle_prefixes[0]",
            "no empty, '.' or '..' path segments",
        ),
        (
            {"bundle_prefixes": ["s3://team-a//"]},
            "tenants[0].bundle_prefixes[0]",
            "no empty, '.' or '..' path segments",
        ),
        (
            {"bundle_prefixes": ["s3://team-a/./"]},
            "tenants[0].bundle_prefixes[0]",
            "no empty, '.' or '..' path segments",
        ),
        ({"bundle_prefixes": [7]}, "tenants[0].bundle_prefixes[0]", "a string is required"),
        ({"aws_conn_id": "my conn"}, "tenants[0].aws_conn_id", "an Airflow connection id"),
        ({"aws_conn_id": ""}, "tenants[0].aws_conn_id", "an Airflow connection id"),
        ({"images": []}, "tenants[0].images", "a non-empty list"),
        ({"images": ["python:3 "]}, "tenants[0].images[0]", "a pattern without spaces"),
        ({"images": [""]}, "tenants[0].images[0]", "a pattern without spaces"),
        ({"node_selectors": ["pool"]}, "tenants[0].node_selectors", "a mapping of node label"),
        (
            {"node_selectors": {"pool": "train-*"}},
            "tenants[0].node_selectors.pool",
            "a non-empty list",
        ),
        (
            {"node_selectors": {"bad key!": ["x"]}},
            "tenants[0].node_selectors.bad key!",
            "Kubernetes label keys",
        ),
        ({"tolerations": {"key": "a"}}, "tenants[0].tolerations", "a list"),
        (
            {"tolerations": [{"operator": "Exists"}]},
            "tenants[0].tolerations[0].key",
            "the field is required",
        ),
        (
            {"tolerations": [{"key": "a", "operator": "In"}]},
            "tenants[0].tolerations[0].operator",
            "allowed: Equal, Exists",
        ),
        (
            {"tolerations": [{"key": "a", "effect": "Never"}]},
            "tenants[0].tolerations[0].effect",
            "allowed: NoSchedule, PreferNoSchedule, NoExecute",
        ),
        (
            {"tolerations": [{"key": "a", "operator": "Exists", "value": "v"}]},
            "tenants[0].tolerations[0].value",
            "no value is allowed with operator Exists",
        ),
        (
            {"tolerations": [{"key": ""}]},
            "tenants[0].tolerations[0].operator",
            "an empty key (every taint) needs operator Exists",
        ),
        (
            {"tolerations": [{"key": "a", "tolerationSeconds": 5}]},
            "tenants[0].tolerations[0].tolerationSeconds",
            "allowed fields: key, operator",
        ),
        (
            {"tolerations": [{"key": "a", "value": 1}]},
            "tenants[0].tolerations[0].value",
            "a string is required",
        ),
    ],
)
def test_each_invalid_tenant_field_is_named_with_what_is_allowed(change, where, allowed):
    message = refusal(config_data(tenant_data(**change)))
    assert f"t.yaml: {where}: " in message
    assert allowed in message


def test_a_tenants_prefixes_may_not_overlap_another_tenants_output_prefixes():
    reads_others_outputs = refusal(
        config_data(
            tenant_data(),
            tenant_data(name="team-b", bundle_prefixes=["s3://tfjob-output/team-a/models/"]),
        )
    )
    assert (
        "t.yaml: tenants[1].bundle_prefixes[0]: 's3://tfjob-output/team-a/models/' given; "
        "overlaps s3://tfjob-output/team-a/, in tenant team-a's output_prefixes "
        "(tenants[0])"
    ) in reads_others_outputs
    writes_others_bundles = refusal(
        config_data(
            tenant_data(), tenant_data(name="team-b", output_prefixes=["s3://tfjob-bundles/"])
        )
    )
    assert (
        "tenants[1].output_prefixes[0]: 's3://tfjob-bundles/' given; overlaps "
        "s3://tfjob-bundles/team-a/, in tenant team-a's bundle_prefixes" in writes_others_bundles
    )
    same_outputs = refusal(
        config_data(
            tenant_data(), tenant_data(name="team-b", output_prefixes=["s3://tfjob-output/team-a/"])
        )
    )
    assert "tenants[1].output_prefixes[0]" in same_outputs
    # Bundles may be shared (both only read there); a sibling prefix is no overlap.
    config = validate_tenants(
        config_data(
            tenant_data(bundle_prefixes=["s3://shared/bundles/"]),
            tenant_data(
                name="team-b",
                bundle_prefixes=["s3://shared/bundles/b/"],
                output_prefixes=["s3://tfjob-output/team-a-other/"],
            ),
        )
    )
    assert config.names() == ["team-a", "team-b"]


def test_a_tenant_declared_twice_is_refused():
    message = refusal(config_data(tenant_data(), tenant_data()))
    assert "tenants[1].name: 'team-a' given; tenant names must be unique" in message


@pytest.mark.parametrize(
    "data, where, allowed",
    [
        ([], "", "a mapping with `tenants:`"),
        ({"tenants": []}, "tenants", "a non-empty list"),
        (
            {"tenants": [tenant_data()], "network": {"s3_port": 70000}},
            "network.s3_port",
            "from 1 to 65535",
        ),
        (
            {"tenants": [tenant_data()], "network": {"s3_cidr": "everywhere"}},
            "network.s3_cidr",
            "a CIDR",
        ),
        ({"tenants": [tenant_data()], "pools": {}}, "pools", "allowed fields: network, tenants"),
    ],
)
def test_each_invalid_top_level_field_is_named(data, where, allowed):
    message = refusal(data)
    assert message.startswith(f"t.yaml: {where}: " if where else "t.yaml: ")
    assert allowed in message


def test_a_file_that_is_not_yaml_or_missing_is_refused_with_the_file_named(tmp_path):
    with pytest.raises(TenantsFileError) as caught:
        parse_tenants("tenants: [\n  - {name: a", "broken.yaml")
    assert "broken.yaml: line" in str(caught.value)
    with pytest.raises(TenantsFileError) as caught:
        load_tenants(tmp_path / "absent.yaml")
    assert "absent.yaml" in str(caught.value)
    assert "TFJOB_TENANTS_FILE" in str(caught.value)
