"""launch restarts a gang that lost a replica to the infrastructure before it ran, under the
run's restart policy, as train restarts one; anything else still fails the start at once."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.repo_root import REPO_ROOT
from operators import gang, restart
from operators.gang import GangStartError
from operators.launch import TrainingLaunchOperator
from operators.replicas import describe_vanished_pod
from tfjob.records.replicas import PodPhase, ReplicaStatus
from tfjob.request.model import Role, load_request

REQUEST = REPO_ROOT / "dags" / "requests" / "digits-ps.yaml"
POD = "digits-ps-1a2b3c4d-worker-1"


def make_run(**fields: object) -> SimpleNamespace:
    data = load_request(REQUEST).model_dump(mode="json")
    return SimpleNamespace(request=load_request({**data, **fields}), run_key="digits-ps-1a2b3c4d")


@pytest.fixture
def stops(monkeypatch) -> list[object]:
    stopped: list[object] = []
    monkeypatch.setattr(gang, "stop_gang", lambda api, run, log: stopped.append(run) or [])
    return stopped


class PushedXComs(dict):
    def xcom_push(self, key: str, value: object) -> None:
        self[key] = value


def make_operator() -> TrainingLaunchOperator:
    operator = TrainingLaunchOperator(task_id="launch")
    operator.__dict__["client"] = object()  # stop_gang is the fake above: no API is asked
    return operator


def lost_worker() -> GangStartError:
    gone = describe_vanished_pod(POD, "the pod was deleted during the gang start")
    return GangStartError(f"gang start: replicas failed to start\npod {POD}", [gone])


def test_a_replica_deleted_during_the_start_restarts_the_gang_keeping_the_warm_start(stops):
    run = make_run(max_restarts=1)
    first = restart.first_attempt(1_800_000_000.0, restored_step=7)
    ti = PushedXComs()

    attempts = make_operator().restart_lost_gang(run, first, lost_worker(), ti)

    assert stops == [run]
    assert [(a.number, a.outcome.value) for a in attempts] == [(1, "restarted"), (2, "running")]
    assert (attempts[0].failed_replica, attempts[0].kind) == ("worker-1", "deleted")
    assert attempts[1].restored_checkpoint_step == 7  # the new gang restores what the first did
    assert [a["outcome"] for a in ti["attempts"]] == ["restarted", "running"]


def test_past_max_restarts_the_start_fails_at_once_with_the_verdict(stops):
    run = make_run(max_restarts=1)
    first = restart.first_attempt(1_800_000_000.0)
    second = make_operator().restart_lost_gang(run, first, lost_worker(), PushedXComs())
    ti = PushedXComs()

    with pytest.raises(GangStartError) as failed:
        make_operator().restart_lost_gang(run, second, lost_worker(), ti)

    assert len(stops) == 1
    message = str(failed.value)
    assert f"pod {POD}" in message and "worker-1 was deleted" in message
    assert "max_restarts" in message
    assert failed.value.failed[0].pod == POD
    assert [a["outcome"] for a in ti["attempts"]] == ["restarted", "failed"]  # for run.json


def test_with_max_restarts_0_a_deleted_replica_fails_naming_the_deletion(stops):
    with pytest.raises(GangStartError, match="worker-1 was deleted"):
        make_operator().restart_lost_gang(
            make_run(), restart.first_attempt(1_800_000_000.0), lost_worker(), PushedXComs()
        )
    assert stops == []


def test_a_replica_that_failed_by_itself_is_not_restarted(stops):
    broken = ReplicaStatus(
        role=Role.WORKER, index=1, pod=POD, phase=PodPhase.PENDING, init_exit_code=1
    )
    lost = GangStartError("gang start: replicas failed to start", [broken])
    timed_out = GangStartError("not every replica was running after startup_timeout=300s")

    for error in (lost, timed_out):
        with pytest.raises(GangStartError) as raised:
            make_operator().restart_lost_gang(
                make_run(max_restarts=3),
                restart.first_attempt(1_800_000_000.0),
                error,
                PushedXComs(),
            )
        assert raised.value is error
    assert stops == []
