"""The quota preflight: the whole gang against what is left of the tenant's quota."""

from decimal import Decimal

from harness.tfjob_fixtures import distributed_request_data, tenant_storage, valid_request_data
from tfjob.quota import (
    Verdict,
    apply_limit_range_defaults,
    check_gang_fits,
    format_amount,
    gang_usage,
    pod_usage,
    read_quota_amounts,
    sum_usage,
)
from tfjob.request.model import load_request
from tfjob.tenants import validate_tenants

TENANT = validate_tenants(
    {
        "tenants": [
            {
                "name": "team-a",
                "quota": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": 4, "pods": 10},
                "defaults": {"cpu": "250m", "memory": "512Mi"},
                "max_concurrent_jobs": 2,
                **tenant_storage("team-a"),
            }
        ]
    }
).tenants[0]
LIMITED = validate_tenants(
    {
        "tenants": [
            {
                "name": "team-a",
                "quota": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": 4, "pods": 10},
                "defaults": {"cpu": "250m", "memory": "512Mi"},
                "default_limits": {"cpu": "1", "memory": "2Gi"},
                **tenant_storage("team-a"),
            }
        ]
    }
).tenants[0]
HARD = TENANT.hard_quota()
GPU_JOB = load_request(
    distributed_request_data(
        replicas={"chief": 0, "ps": 1, "worker": 4, "evaluator": 0},
        resources={
            "worker": {"cpu": "1", "memory": "2Gi", "gpu": 1},
            "ps": {"cpu": "500m", "memory": "1Gi"},
        },
    )
)
# The model owner's pod also runs the keeper container (tfjob.manifests.KEEPER_RESOURCES).
KEEPER_CPU = Decimal("0.01")
KEEPER_MEMORY = Decimal(32 * 2**20)


def test_the_gang_usage_adds_up_every_replica():
    usage = gang_usage(GPU_JOB, TENANT)
    assert usage == {
        "cpu": Decimal("4.5") + KEEPER_CPU,
        "memory": Decimal(9 * 2**30) + KEEPER_MEMORY,
        "nvidia.com/gpu": Decimal(4),
        "pods": Decimal(5),
    }


def test_a_gang_that_fits_is_accepted_and_says_so():
    check = check_gang_fits(GPU_JOB, TENANT, HARD, {})
    assert check.fits and check.verdict is Verdict.FITS
    assert "the gang fits" in check.message


def test_a_gang_that_does_not_fit_is_refused_with_needed_vs_free_per_resource():
    used = {
        "cpu": Decimal(2),
        "memory": Decimal(2 * 2**30),
        "nvidia.com/gpu": Decimal(1),
        "pods": Decimal(2),
    }
    check = check_gang_fits(GPU_JOB, TENANT, HARD, used)
    assert check.verdict is Verdict.EXCEEDS_QUOTA
    message = check.message
    assert "does not fit in the remaining quota (nvidia.com/gpu)" in message
    assert "nvidia.com/gpu: needed 4, free 3 (hard 4, used 1) SHORT by 1" in message
    assert "cpu: needed 4.51, free 6 (hard 8, used 2) ok" in message
    assert "memory: needed 9.031Gi, free 14Gi" in message
    assert "pods: needed 5, free 8" in message
    assert "no pod was created" in message


def test_a_gang_bigger_than_the_whole_quota_never_fits():
    big = load_request(
        distributed_request_data(replicas={"chief": 0, "ps": 1, "worker": 12, "evaluator": 0})
    )
    check = check_gang_fits(big, TENANT, HARD, {})
    assert not check.fits
    assert "pods: needed 13, free 10" in check.message
    assert "needs more pods than the tenant's whole quota" in check.message


def test_a_gang_that_fits_an_idle_tenant_is_told_to_wait():
    check = check_gang_fits(GPU_JOB, TENANT, HARD, {"nvidia.com/gpu": Decimal(3)})
    assert not check.fits
    assert "Wait for the tenant's running jobs to end" in check.message


def test_resources_the_quota_does_not_limit_are_shown_as_such():
    check = check_gang_fits(GPU_JOB, TENANT, {"requests.nvidia.com/gpu": "8"}, {})
    assert check.fits
    assert "cpu: needed 4.51, not limited" in check.message


def test_limit_range_defaults_apply_as_kubernetes_applies_them():
    defaulted = apply_limit_range_defaults({"name": "c"}, {"cpu": "250m"}, {"memory": "2Gi"})
    # memory: no request, a default limit -> the request takes the limit.
    assert defaulted == {"requests": {"cpu": "250m", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}
    explicit = apply_limit_range_defaults(
        {"name": "c", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "3"}}},
        {"cpu": "250m", "memory": "512Mi"},
        {"cpu": "1"},
    )
    assert explicit == {"requests": {"cpu": "2", "memory": "512Mi"}, "limits": {"cpu": "3"}}


def test_a_bare_pod_counts_the_tenant_defaults_and_init_containers_by_their_maximum():
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "3"}}}],
            "containers": [{"name": "a"}, {"name": "b", "resources": {"requests": {"cpu": "1"}}}],
        },
    }
    usage = pod_usage(pod, {"cpu": "250m", "memory": "512Mi"})
    assert usage["cpu"] == Decimal(3)  # max(3, 0.25 + 1)
    assert usage["memory"] == Decimal(2**30)  # two containers defaulted to 512Mi
    assert usage["pods"] == 1


def test_finished_pods_hold_no_quota():
    running = {
        "metadata": {"name": "a"},
        "status": {"phase": "Running"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }
    done = {**running, "status": {"phase": "Succeeded"}}
    failed = {**running, "status": {"phase": "Failed"}}
    assert sum_usage([running, done, failed])["cpu"] == Decimal(1)
    assert sum_usage([running, done, failed])["pods"] == Decimal(1)


def test_a_replica_above_the_tenants_default_limit_is_refused_before_kubernetes_would():
    request = load_request(valid_request_data(resources={"worker": {"cpu": "2", "memory": "1Gi"}}))
    check = check_gang_fits(request, LIMITED, HARD, {})
    assert check.verdict is Verdict.REFUSED_BY_LIMITS
    assert (
        "resources.worker.cpu: request 2 is above the limit 1 (the tenant's default "
        "limit applies when a replica sets none); set resources.worker.cpu_limit to at "
        "least 2"
    ) in check.message
    with_limit = load_request(
        valid_request_data(resources={"worker": {"cpu": "2", "memory": "1Gi", "cpu_limit": "2"}})
    )
    assert check_gang_fits(with_limit, LIMITED, HARD, {}).fits


def test_quota_maps_accept_bare_and_requests_prefixed_keys():
    amounts = read_quota_amounts(
        {
            "requests.cpu": "4",
            "cpu": "2",
            "memory": "1Gi",
            "requests.nvidia.com/gpu": "2",
            "pods": "3",
            "configmaps": "10",
        }
    )
    assert amounts == {
        "cpu": Decimal(2),
        "memory": Decimal(2**30),
        "nvidia.com/gpu": Decimal(2),
        "pods": Decimal(3),
    }


def test_amounts_are_shown_in_readable_units():
    assert format_amount("memory", Decimal(3 * 2**30)) == "3Gi"
    assert format_amount("memory", Decimal(1536 * 2**20)) == "1.5Gi"
    assert format_amount("memory", Decimal(128 * 2**20)) == "128Mi"
    assert format_amount("cpu", Decimal("0.25")) == "0.25"
    assert format_amount("pods", Decimal(4)) == "4"


def test_a_request_naming_no_resources_is_counted_with_the_tenants_limitrange_defaults():
    bare = load_request(
        distributed_request_data(
            replicas={"chief": 0, "ps": 1, "worker": 2, "evaluator": 0}, resources={}
        )
    )
    usage = gang_usage(bare, TENANT)
    # 3 pods, each one main container at the tenant's defaults (the init container, also
    # defaulted, is not larger), plus the owner's keeper
    assert usage == {
        "cpu": Decimal("0.75") + KEEPER_CPU,
        "memory": Decimal(3 * 512 * 2**20) + KEEPER_MEMORY,
        "nvidia.com/gpu": Decimal(0),
        "pods": Decimal(3),
    }
    other = validate_tenants(
        {
            "tenants": [
                {
                    "name": "team-b",
                    "quota": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": 0, "pods": 10},
                    "defaults": {"cpu": "1", "memory": "1Gi"},
                    **tenant_storage("team-b"),
                }
            ]
        }
    ).tenants[0]
    assert gang_usage(bare, other)["cpu"] == Decimal(3) + KEEPER_CPU


def test_a_limit_the_container_sets_is_its_request_before_the_tenants_default():
    defaulted = apply_limit_range_defaults(
        {"name": "c", "resources": {"limits": {"cpu": "3"}}}, {"cpu": "250m"}, {}
    )
    assert defaulted == {"requests": {"cpu": "3"}, "limits": {"cpu": "3"}}
