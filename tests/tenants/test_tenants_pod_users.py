"""Each tenant's pods run as a uid and gid of their own: the tenants file's `uid`/`gid`."""

import pytest

from harness.tfjob_fixtures import tenant_storage
from tfjob.tenants import (
    DEFAULT_TENANTS_FILE,
    PodUser,
    Tenant,
    TenantsFileError,
    derive_pod_user,
    load_tenants,
    validate_tenants,
)


def tenant_data(name: str, **changes):
    return {
        "name": name,
        "quota": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": 4, "pods": 20},
        "defaults": {"cpu": "500m", "memory": "1Gi"},
        **tenant_storage(name),
        **changes,
    }


def refusal(*tenants) -> str:
    with pytest.raises(TenantsFileError) as caught:
        validate_tenants({"tenants": list(tenants)}, "t.yaml")
    return str(caught.value)


def test_the_shipped_tenants_have_distinct_explicit_uids_and_gids():
    users = {tenant.name: tenant.pod_user for tenant in load_tenants(DEFAULT_TENANTS_FILE).tenants}
    assert users == {
        "demo": PodUser(11001, 11001),
        "test": PodUser(11002, 11002),
        "research": PodUser(11003, 11003),
    }


def test_uid_and_gid_are_read_and_gid_defaults_to_uid():
    config = validate_tenants(
        {
            "tenants": [
                tenant_data("team-a", uid=30000, gid=30500),
                tenant_data("team-b", uid=30001),
            ]
        }
    )
    assert [tenant.pod_user for tenant in config.tenants] == [
        PodUser(30000, 30500),
        PodUser(30001, 30001),
    ]


def test_a_tenant_without_uid_gets_a_stable_one_derived_from_its_name():
    first = validate_tenants({"tenants": [tenant_data("team-a")]}).tenants[0].pod_user
    again = validate_tenants({"tenants": [tenant_data("x"), tenant_data("team-a")]}).tenants[1]
    assert first == again.pod_user == derive_pod_user("team-a")
    assert 20000 <= first.uid < 60000 and first.gid == first.uid
    # a Tenant built in code gets the same
    assert Tenant(name="team-a", quota={}, defaults={}).pod_user == first


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "0 given"),
        (-5, "-5 given"),
        (9999, "9999 given"),
        (65534, "65534 given"),
        (65535, "65535 given"),
        (2**31, f"{2**31} given"),
        ("20000", "'20000' given"),
        (True, "True given"),
        (20000.5, "20000.5 given"),
    ],
)
@pytest.mark.parametrize("field", ["uid", "gid"])
def test_a_uid_or_gid_outside_the_allowed_ids_is_refused_naming_the_field(field, value, shown):
    changes = {"uid": 30000, field: value}
    message = refusal(tenant_data("team-a", **changes))
    assert message.startswith(f"t.yaml: tenants[0].{field}: {shown}; ")
    assert "a whole number from 10000 to 2147483647, not 65534 or 65535" in message


def test_a_gid_without_a_uid_is_refused():
    message = refusal(tenant_data("team-a", gid=30000))
    assert message.startswith("t.yaml: tenants[0].uid: None given; ")
    assert "required when gid is given" in message


@pytest.mark.parametrize(
    ("first", "second", "field", "value"),
    [
        ({"uid": 30000}, {"uid": 30000}, "uid", 30000),
        ({"uid": 30000, "gid": 31000}, {"uid": 30001, "gid": 31000}, "gid", 31000),
        # team-b's gid defaults to its uid, which is team-a's gid
        ({"uid": 30000, "gid": 30001}, {"uid": 30001}, "gid", 30001),
    ],
)
def test_two_tenants_sharing_a_uid_or_gid_are_refused_naming_both(first, second, field, value):
    message = refusal(tenant_data("team-a", **first), tenant_data("team-b", **second))
    assert message.startswith(f"t.yaml: tenants[1].{field}: {value} given; ")
    assert f"already tenant team-a's {field} (tenants[0])" in message
    assert "of their own" in message


def test_a_derived_uid_taken_by_another_tenant_asks_for_an_explicit_one():
    taken = derive_pod_user("team-b").uid
    message = refusal(tenant_data("team-a", uid=taken), tenant_data("team-b"))
    assert message.startswith(f"t.yaml: tenants[1].uid: {taken} given; ")
    assert "already tenant team-a's uid" in message
    assert "derived from the name: set uid and gid explicitly" in message


def test_a_run_keeps_the_uid_and_gid_its_tenant_had_when_validate_described_it():
    from harness.tfjob_fixtures import valid_request_data
    from operators.runinfo import describe_run, read_run
    from tfjob.request.model import load_request

    request = load_request(valid_request_data(tenant="demo"))
    described = describe_run(request, "manual__1", "tfjob__digits", "aws_default")
    assert described["run_as"] == {"uid": 11001, "gid": 11001}
    # what validate pushed decides, not the tenants file read later
    pinned = {**described, "run_as": {"uid": 30000, "gid": 30001}}
    assert read_run(pinned).identity().run_as == PodUser(30000, 30001)
    # a run described before pods had their tenant's uid: read from the tenants file
    older = {key: value for key, value in described.items() if key != "run_as"}
    assert read_run(older).identity().run_as == PodUser(11001, 11001)
