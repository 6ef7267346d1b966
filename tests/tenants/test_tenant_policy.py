"""What a tenant's runs may do: where they read and write, which images, nodes and taints."""

import pickle

import pytest

from harness.repo_root import REPO_ROOT
from harness.tfjob_fixtures import valid_request_data
from tfjob.request.model import load_request
from tfjob.tenants import DEFAULT_TENANTS_FILE, load_tenants, validate_tenants
from tfjob.tenants.policy import (
    TenantPolicyError,
    check_request_policy,
    describe_prefix_problem,
    find_unsafe_segment,
    is_within_prefix,
)

REPO = REPO_ROOT


def make_tenant(**changes):
    data = {
        "name": "team-a",
        "quota": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": 4, "pods": 20},
        "defaults": {"cpu": "500m", "memory": "1Gi"},
        "bundle_prefixes": ["s3://tfjob-bundles/digits/", "s3://team-a/code/"],
        "output_prefixes": ["s3://tfjob-output/"],
    }
    data.update(changes)
    return validate_tenants({"tenants": [data]}, "t.yaml").tenants[0]


TENANT = make_tenant()


def refusal(owner=TENANT, **request_changes) -> TenantPolicyError:
    """The refusal of a request (fixture data with `request_changes`) by tenant `owner`."""
    request = load_request(valid_request_data(**request_changes))
    with pytest.raises(TenantPolicyError) as caught:
        check_request_policy(request, owner)
    return caught.value


def allows(owner=TENANT, **request_changes) -> bool:
    check_request_policy(load_request(valid_request_data(**request_changes)), owner)
    return True


def test_a_request_within_every_rule_of_its_tenant_runs():
    assert allows()


def test_the_error_names_the_field_what_was_given_and_what_the_tenant_allows():
    demo = load_tenants(DEFAULT_TENANTS_FILE).find("demo")
    error = refusal(
        demo,
        tenant="demo",
        bundle="s3://tfjob-demo/bundles/d.tar.gz",
        output="s3://tfjob-demo/research/outputs/x",
    )
    assert str(error) == (
        "request.output: 's3://tfjob-demo/research/outputs/x' given; tenant "
        "demo may write outputs only under s3://tfjob-demo/outputs/"
    )
    assert (error.field, error.given) == ("request.output", "s3://tfjob-demo/research/outputs/x")
    assert error.allowed == "tenant demo may write outputs only under s3://tfjob-demo/outputs/"
    assert isinstance(error, ValueError)
    copied = pickle.loads(pickle.dumps(error))
    assert (copied.field, copied.given, str(copied)) == (error.field, error.given, str(error))


def test_the_shipped_example_requests_are_allowed_for_the_demo_tenant():
    demo = load_tenants(DEFAULT_TENANTS_FILE).find("demo")
    paths = sorted((REPO / "dags" / "requests").glob("*.yaml"))
    assert paths
    for path in paths:
        check_request_policy(load_request(path), demo)


# --- the tenant ---------------------------------------------------------------------------


def test_a_request_naming_another_tenant_is_refused():
    error = refusal(tenant="team-b")
    assert error.field == "request.tenant"
    assert "'team-b' given; this run is tenant team-a's" in str(error)
    assert "the request must name tenant team-a" in str(error)


# --- where data lives ---------------------------------------------------------------------


def test_a_bundle_outside_the_tenants_bundle_prefixes_is_refused():
    error = refusal(bundle="s3://tfjob-bundles/other/bundle.tar.gz")
    assert error.field == "request.bundle"
    assert str(error).endswith(
        "tenant team-a may read bundles only under s3://tfjob-bundles/digits/, s3://team-a/code/"
    )
    assert allows(bundle="s3://team-a/code/deep/er/b.tar.gz")


def test_a_bundle_in_another_bucket_with_the_same_key_is_refused():
    assert refusal(bundle="s3://tfjob-bundles-x/digits/b.tar.gz").field == "request.bundle"
    assert refusal(bundle="s3://team-b/code/b.tar.gz").field == "request.bundle"


def test_a_bundle_key_with_dot_dot_or_empty_segments_is_refused_even_under_a_prefix():
    for bundle in (
        "s3://tfjob-bundles/digits/../secret/b.tar.gz",
        "s3://tfjob-bundles/digits/./b.tar.gz",
        "s3://tfjob-bundles/digits//b.tar.gz",
    ):
        error = refusal(bundle=bundle)
        assert error.field == "request.bundle"
        assert "empty, '.' or '..' path segments are not allowed" in str(error)


def test_an_output_outside_the_tenants_output_prefixes_is_refused():
    tenant = make_tenant(output_prefixes=["s3://tfjob-output/team-a/"])
    error = refusal(tenant, output="s3://tfjob-output/team-b/run")
    assert error.field == "request.output"
    assert allows(tenant, output="s3://tfjob-output/team-a/run")


def test_an_output_equal_to_the_prefix_without_its_slash_is_not_inside_it():
    tenant = make_tenant(output_prefixes=["s3://tfjob-output/outputs/"])
    # the request drops a trailing '/': both name the prefix itself, not a place inside it
    for output in ("s3://tfjob-output/outputs", "s3://tfjob-output/outputs/"):
        assert refusal(tenant, output=output).field == "request.output"
    # a sibling whose name merely starts like the prefix is outside too
    assert refusal(tenant, output="s3://tfjob-output/outputs-x/y").field == "request.output"
    assert allows(tenant, output="s3://tfjob-output/outputs/x")


def test_an_output_key_with_dot_dot_segments_is_refused():
    error = refusal(output="s3://tfjob-output/a/../../etc")
    assert error.field == "request.output"
    assert "'..'" in str(error)


def test_a_whole_bucket_prefix_allows_every_key_of_that_bucket_only():
    tenant = make_tenant(output_prefixes=["s3://team-a/"])
    assert allows(tenant, output="s3://team-a/anything/below")
    assert refusal(tenant, output="s3://team-ab/x").field == "request.output"


@pytest.mark.parametrize(
    ("url", "prefix", "inside"),
    [
        ("s3://bucket-a/outputs/x", "s3://bucket-a/outputs/", True),
        ("s3://bucket-a/outputs/x/y/", "s3://bucket-a/outputs/", True),
        ("s3://bucket-a/outputs/", "s3://bucket-a/outputs/", True),
        ("s3://bucket-a/outputs", "s3://bucket-a/outputs/", False),
        ("s3://bucket-a/outputs-x/y", "s3://bucket-a/outputs/", False),
        ("s3://bucket-a/outputs-x/y", "s3://bucket-a/outputs", False),  # a prefix is a directory
        ("s3://bucket-a/outputs/x", "s3://bucket-a/outputs", True),
        ("s3://bucket-b/outputs/x", "s3://bucket-a/outputs/", False),
        ("s3://bucket-ab/outputs/x", "s3://bucket-a/outputs/", False),
        ("s3://bucket-a/x", "s3://bucket-a/", True),
        ("s3://bucket-a", "s3://bucket-a/", True),
        ("s3://bucket-a/outputs/../x", "s3://bucket-a/outputs/", False),
        ("s3://bucket-a/outputs/./x", "s3://bucket-a/outputs/", False),
        ("s3://bucket-a/outputs//x", "s3://bucket-a/outputs/", False),
        ("https://bucket-a/outputs/x", "s3://bucket-a/outputs/", False),
        ("s3://bucket-a/outputs/x", "https://bucket-a/outputs/", False),
        ("s3://Bucket_A/outputs/x", "s3://Bucket_A/outputs/", False),
    ],
)
def test_is_within_prefix(url, prefix, inside):
    assert is_within_prefix(url, prefix) is inside


def test_unsafe_segments_and_prefix_problems_are_named():
    assert find_unsafe_segment("a/b/c") is None
    assert find_unsafe_segment("a/b/") is None
    assert find_unsafe_segment("a/../b") == ".."
    assert find_unsafe_segment("/a") == ""
    assert describe_prefix_problem("s3://bucket-a/") is None
    assert describe_prefix_problem("s3://bucket-a/x/y/") is None
    assert "ends with '/'" in describe_prefix_problem("s3://bucket-a/x")
    assert "valid bucket" in describe_prefix_problem("s3://x/y/")
    assert "segments" in describe_prefix_problem("s3://bucket-a/x/../")


# --- images -------------------------------------------------------------------------------


def test_an_image_matching_no_allowed_pattern_is_refused():
    error = refusal(image="python:3.11")
    assert str(error) == (
        "request.image: 'python:3.11' given; tenant team-a may run only "
        "images matching tensorflow/tensorflow:*"
    )
    assert refusal(image="evil.io/tensorflow/tensorflow:2").field == "request.image"
    assert allows(image="tensorflow/tensorflow:2.21.0-gpu")


def test_the_tenants_image_patterns_are_its_allow_list():
    tenant = make_tenant(images=["python:3.*", "registry.local/team-a/*"])
    assert allows(tenant, image="python:3.11")
    assert allows(tenant, image="registry.local/team-a/trainer:1")
    assert refusal(tenant, image="tensorflow/tensorflow:2.21.0").field == "request.image"
    assert refusal(tenant, image="PYTHON:3.11").field == "request.image"  # case matters


# --- node selectors -----------------------------------------------------------------------


def test_a_node_selector_is_refused_when_the_tenant_allows_none():
    error = refusal(node_selector={"pool": "train"})
    assert error.field == "request.node_selector.pool"
    assert error.given == "train"
    assert "tenant team-a may not select nodes by label" in str(error)


def test_node_selectors_are_allowed_by_key_and_value_pattern():
    tenant = make_tenant(node_selectors={"pool": ["train-*", "eval"]})
    assert allows(tenant, node_selector={"pool": "train-a100"})
    assert allows(tenant, node_selector={"pool": "eval"})
    error = refusal(tenant, node_selector={"pool": "prod"})
    assert error.field == "request.node_selector.pool"
    assert "may select nodes only by: pool matching train-*, eval" in str(error)
    assert (
        refusal(tenant, node_selector={"pool": "eval", "zone": "a"}).field
        == "request.node_selector.zone"
    )


def test_a_request_without_a_bundle_reads_none_and_meets_the_bundle_prefixes():
    assert allows(make_tenant(bundle_prefixes=["s3://elsewhere/code/"]), bundle=None)


def node_affinity(*expressions: dict) -> dict:
    return {"worker": {"required": [{"match_expressions": list(expressions)}]}}


def test_node_affinity_selects_only_by_the_tenants_node_selector_keys_and_in_values():
    tenant = make_tenant(node_selectors={"pool": ["train-*"]})
    assert allows(
        tenant,
        node_affinity=node_affinity({"key": "pool", "operator": "In", "values": ["train-a"]}),
    )
    assert allows(
        tenant, node_affinity=node_affinity({"key": "pool", "operator": "NotIn", "values": ["x"]})
    )
    error = refusal(
        tenant, node_affinity=node_affinity({"key": "pool", "operator": "In", "values": ["prod"]})
    )
    assert error.field == "request.node_affinity.worker.required[0].match_expressions[0]"
    assert "may select nodes only by: pool matching train-*" in str(error)
    preferred = {
        "worker": {
            "preferred": [
                {
                    "weight": 1,
                    "preference": {"match_expressions": [{"key": "zone", "operator": "Exists"}]},
                }
            ]
        }
    }
    assert (
        refusal(tenant, node_affinity=preferred).field
        == "request.node_affinity.worker.preferred[0].preference.match_expressions[0]"
    )
    assert refusal(node_affinity=node_affinity({"key": "pool", "operator": "Exists"})).field


def test_the_gpu_type_selector_the_pipeline_adds_is_always_allowed():
    assert allows(gpu_type="NVIDIA-A100-SXM4-40GB", resources={"worker": {"gpu": 1}})
    # ... but naming the same label as a request node selector is the request's choice
    assert (
        refusal(node_selector={"nvidia.com/gpu.product": "X"}).field
        == "request.node_selector.nvidia.com/gpu.product"
    )


# --- tolerations --------------------------------------------------------------------------

GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_a_toleration_is_refused_when_the_tenant_allows_none():
    error = refusal(tolerations=[GPU_TAINT])
    assert error.field == "request.tolerations[0]"
    assert error.given == GPU_TAINT
    assert "tenant team-a may not tolerate taints" in str(error)


def test_a_toleration_needs_an_entry_with_its_key_and_every_field_the_entry_names():
    tenant = make_tenant(
        tolerations=[
            {"key": "nvidia.com/gpu", "operator": "Exists"},
            {"key": "dedicated", "operator": "Equal", "value": "team-a", "effect": "NoSchedule"},
            {"key": "spot"},
        ]
    )
    assert allows(tenant, tolerations=[GPU_TAINT])
    assert allows(
        tenant, tolerations=[{"key": "dedicated", "value": "team-a", "effect": "NoSchedule"}]
    )
    assert allows(
        tenant,
        tolerations=[
            {"key": "spot", "operator": "Exists"},
            {"key": "spot", "value": "yes", "effect": "NoExecute", "tolerationSeconds": 60},
        ],
    )
    for toleration in (
        {"key": "dedicated", "value": "team-b", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "team-a"},  # every effect: broader
        {"key": "nvidia.com/gpu", "value": "x"},  # Equal, entry says Exists
        {"key": "other", "operator": "Exists"},
    ):
        error = refusal(tenant, tolerations=[GPU_TAINT, toleration])
        assert error.field == "request.tolerations[1]"
        assert (
            "may tolerate only: key nvidia.com/gpu (operator Exists); key dedicated "
            "(operator Equal, value team-a, effect NoSchedule); key spot" in str(error)
        )


def test_tolerating_every_taint_needs_an_entry_with_an_empty_key_and_exists():
    everything = {"operator": "Exists"}
    with_key = make_tenant(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    assert refusal(with_key, tolerations=[everything]).field == "request.tolerations[0]"
    assert (
        refusal(with_key, tolerations=[{"key": "", "operator": "Exists"}]).field
        == "request.tolerations[0]"
    )
    listed = make_tenant(tolerations=[{"key": "", "operator": "Exists"}])
    assert allows(listed, tolerations=[everything])
    assert "every taint (key '' with operator Exists)" in str(
        refusal(listed, tolerations=[GPU_TAINT])
    )


# --- order --------------------------------------------------------------------------------


def test_the_first_broken_rule_is_reported():
    error = refusal(tenant="team-b", image="python:3.11", output="s3://elsewhere/x")
    assert error.field == "request.tenant"
    error = refusal(
        image="python:3.11", output="s3://elsewhere/x", bundle="s3://elsewhere/b.tar.gz"
    )
    assert error.field == "request.bundle"
    error = refusal(image="python:3.11", output="s3://elsewhere/x")
    assert error.field == "request.output"
    error = refusal(image="python:3.11", node_selector={"pool": "x"})
    assert error.field == "request.image"
