"""The records that cross a package as JSON read what earlier versions wrote and write it back
byte for byte (tfjob/records/)."""

from __future__ import annotations

import json

import pytest

from harness.tfjob_fixtures import distributed_request_data
from tfjob.clusterspec import ClusterSpecError, Endpoint
from tfjob.records.replicas import PodPhase, ReplicaStatus, TrainingEvent, TrainingState
from tfjob.records.run import GangEndpoints, GrantPlan, PartialRunDescription, RunDescription
from tfjob.request.model import Role, load_request
from tfjob.tenants.model import PodUser

# A replica as `ReplicaStatus.as_dict()` wrote it into train's XCom and the trigger's event.
WRITTEN_REPLICA = {
    "role": "worker",
    "index": 1,
    "pod": "job-1234abcd-worker-1",
    "phase": "Failed",
    "ip": "10.0.0.7",
    "node": "node-a",
    "exit_code": 137,
    "reason": "OOMKilled",
    "message": None,
    "init_exit_code": 0,
    "started_at": "2026-12-03T06:00:00Z",
    "finished_at": "2026-12-03T06:10:00Z",
    "owns_model": False,
    "pod_reason": "Evicted",
    "deleted": True,
}


def as_stored(payload: object) -> str:
    """The JSON text Airflow keeps (key order included)."""
    return json.dumps(payload)


def test_a_replica_written_before_the_records_reads_typed_and_writes_back_the_same():
    replica = ReplicaStatus.from_payload(json.loads(as_stored(WRITTEN_REPLICA)))
    assert replica.role is Role.WORKER and replica.phase is PodPhase.FAILED
    assert replica.replica_id == "worker-1" and replica.has_failed and not replica.has_trained
    assert as_stored(replica.to_payload()) == as_stored(WRITTEN_REPLICA)


def test_a_replica_without_a_role_label_keeps_the_empty_role_it_always_had():
    gone = ReplicaStatus(role=None, index=0, pod="job-1234abcd-worker-0", phase=PodPhase.GONE)
    payload = gone.to_payload()
    assert payload["role"] == "" and payload["phase"] == "Gone"
    assert ReplicaStatus.from_payload(payload) == gone
    assert gone.replica_id == "-0"


def test_a_replica_of_a_role_the_request_does_not_know_reads_as_no_role():
    assert ReplicaStatus.from_payload({**WRITTEN_REPLICA, "role": "master"}).role is None


def test_the_trigger_event_reads_what_the_trigger_wrote_and_its_replicas_are_typed():
    written = {
        "state": "failed",
        "replicas": [WRITTEN_REPLICA],
        "failed": WRITTEN_REPLICA,
        "deciding": ["chief-0"],
        "streamed": {"worker-1": 4},
        "api_error": "503 Service Unavailable",
    }
    event = TrainingEvent.from_payload(json.loads(as_stored(written)))
    assert event.state is TrainingState.FAILED
    assert event.failed is not None and event.failed.exit_code == 137
    assert [replica.replica_id for replica in event.replicas] == ["worker-1"]
    assert as_stored(event.to_payload()) == as_stored(written)


def test_an_event_without_an_api_error_writes_none():
    event = TrainingEvent(TrainingState.SUCCEEDED, deciding=("chief-0",))
    assert event.to_payload() == {
        "state": "succeeded",
        "replicas": [],
        "failed": None,
        "deciding": ["chief-0"],
        "streamed": {},
    }
    assert TrainingEvent.from_payload(event.to_payload()) == event


def described_payload(**changes: object) -> dict[str, object]:
    """A run description as `operators.runinfo.describe_run` wrote it."""
    request = load_request(distributed_request_data()).model_dump(mode="json")
    payload = {
        "request": request,
        "run_id": "manual__1",
        "dag_id": "tfjob__digits",
        "namespace": "tfjob-demo",
        "run_key": "digits-1234abcd",
        "run_prefix": "s3://models/digits/runs/tfjob__digits/manual__1",
        "aws_conn_id": "aws_default",
        "run_as": {"uid": 11001, "gid": 11001},
    }
    payload.update(changes)
    return payload


def test_a_run_description_round_trips_byte_for_byte():
    written = described_payload()
    described = RunDescription.from_payload(json.loads(as_stored(written)))
    assert described.run_as == PodUser(11001, 11001)
    assert described.request.name == written["request"]["name"]
    assert described.tenant == written["request"]["tenant"]
    assert as_stored(described.to_payload()) == as_stored(written)


def test_a_run_described_before_pods_had_their_tenants_uid_has_no_run_as():
    written = described_payload()
    del written["run_as"]
    described = RunDescription.from_payload(written)
    assert described.run_as is None
    assert as_stored(described.to_payload()) == as_stored(written)


def test_the_gang_endpoints_read_and_write_launchs_mapping():
    written = {"chief": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "[fd00::3]:2222"]}
    endpoints = GangEndpoints.from_payload(written)
    assert endpoints.endpoints[2] == Endpoint(Role.WORKER, 1, "fd00::3", 2222)
    assert endpoints.to_payload() == written
    with pytest.raises(ClusterSpecError, match="role 'master' given"):
        GangEndpoints.from_payload({"master": ["10.0.0.1:2222"]})


def grant_payload() -> dict[str, object]:
    return {
        "aws_conn_id": "team_a_s3",
        "presign_conn_id": "tfjob_pods_team_a",
        "namespace": "tfjob-team-a",
        "run_key": "digits-1234abcd",
        "dag_id": "tfjob__digits",
        "run_id": "manual__1",
        "snapshot_uri": "s3://models/digits/runs/tfjob__digits/manual__1/bundle.tar.gz",
        "output_uri": "s3://models/digits",
        "lifetime": 3600,
        "refresh_every": 1800.0,
        "replicas": ["chief-0", "worker-0", "worker-1"],
    }


def test_the_grants_plan_round_trips_and_reads_a_plan_older_than_pods_identities():
    written = grant_payload()
    assert as_stored(GrantPlan.from_payload(written).to_payload()) == as_stored(written)
    assert GrantPlan.from_payload(written).replicas == ("chief-0", "worker-0", "worker-1")
    older = {key: value for key, value in written.items() if key != "presign_conn_id"}
    assert GrantPlan.from_payload(older).presign_conn_id == "tfjob_pods_team_a"
    # A plan from before summaries (a trigger deferred across the upgrade) signs none.
    before = {key: value for key, value in written.items() if key != "replicas"}
    assert GrantPlan.from_payload(before).replicas == ()


def test_a_partial_description_reads_what_is_there_and_none_for_the_rest():
    full = PartialRunDescription.from_payload(described_payload())
    assert (full.namespace, full.run_key) == ("tfjob-demo", "digits-1234abcd")
    assert full.tenant == described_payload()["request"]["tenant"]
    assert full.request == described_payload()["request"]  # as stored, not validated again
    partial = PartialRunDescription.from_payload({"run_prefix": "s3://b/x", "dag_id": 7})
    assert partial.run_prefix == "s3://b/x" and partial.dag_id is None
    assert partial.request == {} and partial.tenant is None and partial.aws_conn_id is None
    assert PartialRunDescription.from_payload({"request": {"tenant": ["demo"]}}).tenant is None
