"""The restart verdict: which failed attempts may restart the gang, and what the user reads."""

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.tfjob_fixtures import valid_request_data
from operators.replicas import judge_training, read_replica_status
from tfjob.attempts import Attempt, AttemptOutcome, describe_run_failure, read_attempt_outcome
from tfjob.records.replicas import ReplicaStatus
from tfjob.request.model import load_request
from tfjob.restart_policy import (
    MAX_RESTARTS,
    Decision,
    FailureKind,
    ReplicaFailure,
    RestartOn,
    RestartPolicy,
    describe_failure,
    judge_restart,
)

RETRYABLE = RestartPolicy(max_restarts=2)
DELETED = ReplicaFailure("worker-1", exit_code=143, deleted=True)
EXITED_1 = ReplicaFailure("worker-1", exit_code=1, reason="Error")


def test_a_deleted_worker_restarts_the_gang_while_restarts_are_left():
    verdict = judge_restart(RETRYABLE, 1, DELETED)
    assert verdict.decision is Decision.RESTART
    assert verdict.kind is FailureKind.DELETED
    assert verdict.next_attempt == 2
    assert verdict.reason == "worker-1 was deleted (exit code 143); restarting as attempt 2 of 3"


def test_a_program_that_exits_1_is_a_permanent_failure():
    verdict = judge_restart(RETRYABLE, 1, EXITED_1)
    assert verdict.decision is Decision.FAIL
    assert verdict.next_attempt is None
    assert verdict.reason == "worker-1 exited 1: a permanent failure under restart_on=retryable"


def test_the_last_attempt_is_not_restarted():
    verdict = judge_restart(RETRYABLE, 3, DELETED)
    assert verdict.decision is Decision.FAIL
    assert verdict.reason == (
        "worker-1 was deleted (exit code 143): no restarts left: "
        "max_restarts=2, and this was attempt 3 of 3"
    )


def test_without_max_restarts_nothing_restarts():
    verdict = judge_restart(RestartPolicy(), 1, DELETED)
    assert verdict.decision is Decision.FAIL
    assert verdict.reason == (
        "worker-1 was deleted (exit code 143): not restarted: max_restarts is 0"
    )


@pytest.mark.parametrize(
    ("failure", "kind", "cause"),
    [
        (
            ReplicaFailure("worker-1", exit_code=143, deleted=True),
            FailureKind.DELETED,
            "worker-1 was deleted (exit code 143)",
        ),
        (
            ReplicaFailure("worker-1", reason="PodGone", message="the pod no longer exists"),
            FailureKind.DELETED,
            "worker-1 was deleted",
        ),
        (
            ReplicaFailure("ps-0", reason="Evicted", exit_code=137),
            FailureKind.EVICTED,
            "ps-0 was evicted (exit code 137)",
        ),
        (
            ReplicaFailure(
                "ps-0",
                reason="Error",
                pod_reason="PreemptionByScheduler",
                exit_code=143,
                deleted=True,
            ),
            FailureKind.EVICTED,
            "ps-0 was evicted (PreemptionByScheduler, exit code 143)",
        ),
        (
            ReplicaFailure("chief-0", reason="NodeLost", node="node-b"),
            FailureKind.NODE_LOST,
            "chief-0 lost its node node-b (NodeLost)",
        ),
        (
            ReplicaFailure("worker-0", reason="OOMKilled", exit_code=137),
            FailureKind.OOM_KILLED,
            "worker-0 ran out of memory (OOMKilled, exit code 137)",
        ),
        (
            ReplicaFailure("worker-0", reason="Error", exit_code=137),
            FailureKind.SIGNALED,
            "worker-0 was killed by SIGKILL (exit code 137)",
        ),
        (
            ReplicaFailure("worker-0", reason="Error", exit_code=139),
            FailureKind.SIGNALED,
            "worker-0 was killed by SIGSEGV (exit code 139)",
        ),
        (ReplicaFailure("worker-0", exit_code=128), FailureKind.SIGNALED, "worker-0 exited 128"),
        (ReplicaFailure("worker-0", exit_code=127), FailureKind.EXITED, "worker-0 exited 127"),
        (
            ReplicaFailure(
                "worker-0", reason="Error", pod_reason="DeadlineExceeded", exit_code=143
            ),
            FailureKind.DEADLINE_EXCEEDED,
            "worker-0 ran past the run's active_deadline (DeadlineExceeded, exit code 143)",
        ),
        (
            ReplicaFailure("worker-0", reason="ContainerStatusUnknown"),
            FailureKind.UNKNOWN,
            "worker-0 failed (ContainerStatusUnknown, no exit code)",
        ),
    ],
)
def test_each_failure_is_classified_and_worded(failure, kind, cause):
    assert failure.kind is kind
    assert describe_failure(failure) == cause


@pytest.mark.parametrize(
    ("failure", "decision"),
    [
        (DELETED, Decision.RESTART),
        (ReplicaFailure("ps-0", reason="Evicted"), Decision.RESTART),
        (ReplicaFailure("ps-0", reason="NodeLost"), Decision.RESTART),
        (ReplicaFailure("worker-0", reason="OOMKilled", exit_code=137), Decision.RESTART),
        (ReplicaFailure("worker-0", exit_code=130), Decision.RESTART),
        (ReplicaFailure("worker-0", exit_code=137), Decision.RESTART),
        (ReplicaFailure("worker-0", exit_code=143), Decision.RESTART),
        (ReplicaFailure("worker-0", exit_code=255), Decision.RESTART),
        (ReplicaFailure("worker-0", exit_code=1), Decision.FAIL),
        (ReplicaFailure("worker-0", exit_code=64), Decision.FAIL),
        (ReplicaFailure("worker-0", exit_code=127), Decision.FAIL),
        (ReplicaFailure("worker-0", reason="ContainerStatusUnknown"), Decision.FAIL),
        (ReplicaFailure("worker-0", pod_reason="DeadlineExceeded", exit_code=137), Decision.FAIL),
    ],
    ids=lambda value: value.kind.value if isinstance(value, ReplicaFailure) else value.value,
)
def test_retryable_follows_tfjob_exit_code_policy(failure, decision):
    assert judge_restart(RETRYABLE, 1, failure).decision is decision


def test_any_failure_restarts_everything_but_the_deadline():
    policy = RestartPolicy(1, RestartOn.ANY_FAILURE)
    for failure in (EXITED_1, ReplicaFailure("worker-0", reason="ContainerStatusUnknown")):
        assert judge_restart(policy, 1, failure).decision is Decision.RESTART
    deadline = judge_restart(policy, 1, ReplicaFailure("worker-0", reason="DeadlineExceeded"))
    assert deadline.decision is Decision.FAIL
    assert deadline.why == "a run past its active_deadline is never restarted"


def test_an_exit_code_list_restarts_those_codes_and_infrastructure_losses_only():
    policy = RestartPolicy(3, (1, 137))
    assert judge_restart(policy, 1, EXITED_1).decision is Decision.RESTART
    assert judge_restart(policy, 1, DELETED).decision is Decision.RESTART
    assert (
        judge_restart(policy, 1, ReplicaFailure("ps-0", reason="NodeLost")).decision
        is Decision.RESTART
    )
    oom = ReplicaFailure("worker-0", reason="OOMKilled", exit_code=137)
    assert judge_restart(policy, 1, oom).decision is Decision.RESTART
    killed = judge_restart(policy, 1, ReplicaFailure("worker-0", exit_code=143))
    assert killed.reason == (
        "worker-0 was killed by SIGTERM (exit code 143): exit code 143 is "
        "not in restart_on=[1, 137]"
    )
    unknown = judge_restart(policy, 1, ReplicaFailure("worker-0", reason="Unknown"))
    assert unknown.why == "no exit code, and restart_on=[1, 137] names exit codes only"


def test_the_policy_comes_from_the_request():
    request = load_request(valid_request_data(max_restarts=2, restart_on=[137, 143]))
    policy = RestartPolicy.of(request)
    assert policy == RestartPolicy(2, (137, 143))
    assert policy.max_attempts == 3
    assert RestartPolicy.of(load_request(valid_request_data())) == RestartPolicy()


@pytest.mark.parametrize(
    ("max_restarts", "restart_on", "message"),
    [
        (11, "retryable", "max_restarts: 11 given; allowed: 0 to 10"),
        (1, "always", "'always' is not a valid RestartOn"),
        (1, (), "restart_on: [] given; a non-empty list of exit codes is allowed, e.g. [137, 143]"),
        (1, (0,), "restart_on[0]: 0 given; exit codes from 1 to 255 are allowed (0 is success)"),
        (1, (137, 137), "restart_on[1]: 137 given; each exit code once; 137 is already at [0]"),
        (1, (137, "143"), "restart_on[1]: '143' given; exit codes are whole numbers from 1 to 255"),
    ],
)
def test_a_policy_built_in_code_is_checked_too(max_restarts, restart_on, message):
    with pytest.raises(ValueError) as caught:
        RestartPolicy(max_restarts, restart_on)
    assert str(caught.value).startswith(message)


def test_the_attempt_number_starts_at_one():
    with pytest.raises(ValueError, match="failed_attempt: 0 given; allowed: 1 or more"):
        judge_restart(RETRYABLE, 0, DELETED)


def running_pod(name: str, role: str, index: int, **status: object) -> dict:
    return {
        "metadata": {"name": name, "labels": {"tfjob.io/role": role, "tfjob.io/index": str(index)}},
        "spec": {"nodeName": "node-a", "containers": [{"name": "tensorflow"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1", **status},
    }


def test_the_failed_replica_of_judge_training_feeds_the_verdict():
    """operators/replicas.py already names the failed replica; its facts are the input."""
    pods = [
        running_pod("r-chief-0", "chief", 0),
        running_pod(
            "r-worker-0",
            "worker",
            0,
            phase="Failed",
            containerStatuses=[
                {
                    "name": "tensorflow",
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                }
            ],
        ),
    ]
    expected = ["r-chief-0", "r-worker-0", "r-worker-1"]
    verdict = judge_training(pods, ["chief-0"], expected)
    failure = ReplicaFailure.from_replica(verdict.failed_replica)
    assert (failure.replica, failure.pod, failure.exit_code, failure.node) == (
        "worker-0",
        "r-worker-0",
        137,
        "node-a",
    )
    assert judge_restart(RETRYABLE, 1, failure).reason == (
        "worker-0 ran out of memory (OOMKilled, exit code 137); restarting as attempt 2 of 3"
    )
    # The trigger's event carries the same replica as a payload.
    carried = ReplicaStatus.from_payload(
        json.loads(json.dumps(verdict.failed_replica.to_payload()))
    )
    assert ReplicaFailure.from_replica(carried) == failure


def test_a_vanished_pod_counts_as_deleted():
    verdict = judge_training(
        [running_pod("r-chief-0", "chief", 0)], ["chief-0"], ["r-chief-0", "r-worker-1"]
    )
    failure = ReplicaFailure.from_replica(verdict.failed_replica)
    assert failure.deleted and failure.kind is FailureKind.DELETED
    assert describe_failure(failure) == "worker-1 was deleted"


def test_a_pod_reason_the_container_hides_still_reaches_the_verdict():
    pod = running_pod(
        "r-worker-1",
        "worker",
        1,
        phase="Failed",
        reason="Evicted",
        containerStatuses=[
            {"name": "tensorflow", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
        ],
    )
    replica = read_replica_status(pod)
    assert replica.reason == "Error"  # replicas.py keeps the container's reason
    assert replica.pod_reason == "Evicted"  # and the pod's, for the verdict
    carried = ReplicaStatus.from_payload(json.loads(json.dumps(replica.to_payload())))
    for shape in (replica, carried):  # the trigger's event carries it as a payload
        failure = ReplicaFailure.from_replica(shape)
        assert failure.kind is FailureKind.EVICTED
        assert judge_restart(RestartPolicy(1, (2,)), 1, failure).decision is Decision.RESTART


def test_a_pod_with_a_deletion_timestamp_counts_as_deleted():
    pod = running_pod(
        "r-worker-1",
        "worker",
        1,
        phase="Failed",
        containerStatuses=[
            {"name": "tensorflow", "state": {"terminated": {"exitCode": 143, "reason": "Error"}}}
        ],
    )
    pod["metadata"]["deletionTimestamp"] = "2026-12-02T12:00:00Z"
    failure = ReplicaFailure.from_replica(read_replica_status(pod))
    assert failure.deleted and failure.kind is FailureKind.DELETED
    assert describe_failure(failure) == "worker-1 was deleted (exit code 143)"


START = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
END = datetime(2026, 12, 2, 12, 30, tzinfo=UTC)


def test_an_attempt_round_trips_through_run_json():
    verdict = judge_restart(RETRYABLE, 1, DELETED)
    attempt = Attempt.ended_by(
        1, verdict, DELETED, started=START, ended=END, restored_checkpoint_step=None
    )
    data = json.loads(json.dumps(attempt.to_payload()))
    assert data == {
        "number": 1,
        "started": "2026-12-02T12:00:00+00:00",
        "ended": "2026-12-02T12:30:00+00:00",
        "outcome": "restarted",
        "failed_replica": "worker-1",
        "kind": "deleted",
        "reason": "worker-1 was deleted (exit code 143)",
        "exit_code": 143,
        "restored_checkpoint_step": None,
    }
    assert Attempt.from_payload(data) == attempt
    second = Attempt(2, START, outcome=AttemptOutcome.RUNNING, restored_checkpoint_step=1200)
    assert Attempt.from_payload(second.to_payload()) == second


def test_an_attempt_from_kubernetes_times_and_a_newer_writer():
    attempt = Attempt.from_payload(
        {"number": 2, "started": "2026-12-02T12:00:00Z", "outcome": "succeeded", "gpu_seconds": 10}
    )
    assert attempt.started == START and attempt.outcome is AttemptOutcome.SUCCEEDED


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"started": None}, "a mapping with at least a number"),
        ({"number": 0}, "attempt number: 0 given; allowed: 1 or more"),
        ({"number": 1, "started": "noon"}, "attempt.started: 'noon' given; an ISO 8601 time"),
        ({"number": 1, "outcome": "lost"}, "'lost' is not a valid AttemptOutcome"),
        ({"number": 1, "kind": "meteor"}, "'meteor' is not a valid FailureKind"),
    ],
)
def test_a_damaged_attempt_record_says_what_is_wrong(data, message):
    with pytest.raises(ValueError, match=message):
        Attempt.from_payload(data)


def test_the_final_failure_names_every_attempt_and_why_the_last_was_not_restarted():
    failures = [DELETED, ReplicaFailure("ps-0", reason="NodeLost", node="node-b"), EXITED_1]
    attempts, verdict = [], None
    for number, failure in enumerate(failures, start=1):
        verdict = judge_restart(RETRYABLE, number, failure)
        attempts.append(Attempt.ended_by(number, verdict, failure))
    assert verdict is not None and verdict.decision is Decision.FAIL
    assert [a.outcome for a in attempts] == [AttemptOutcome.RESTARTED] * 2 + [AttemptOutcome.FAILED]
    assert describe_run_failure(attempts, verdict) == (
        "training failed after 3 attempts: attempt 1: worker-1 was deleted (exit code 143); "
        "attempt 2: ps-0 lost its node node-b (NodeLost); attempt 3: worker-1 exited 1 "
        "(not restarted: a permanent failure under restart_on=retryable)"
    )


def test_a_single_attempt_failure_reads_as_today():
    verdict = judge_restart(RestartPolicy(), 1, DELETED)
    attempts = [Attempt.ended_by(1, verdict, DELETED)]
    assert describe_run_failure(attempts, verdict) == (
        "training failed: attempt 1: worker-1 was deleted (exit code 143) "
        "(not restarted: max_restarts is 0)"
    )


# --- properties --------------------------------------------------------------------------

policies = st.builds(
    RestartPolicy,
    max_restarts=st.integers(0, MAX_RESTARTS),
    restart_on=st.one_of(
        st.sampled_from(list(RestartOn)),
        st.lists(st.integers(1, 255), min_size=1, max_size=5, unique=True).map(tuple),
    ),
)
failures = st.builds(
    ReplicaFailure,
    replica=st.sampled_from(["chief-0", "worker-0", "worker-1", "ps-0"]),
    exit_code=st.one_of(st.none(), st.integers(-1, 300)),
    reason=st.sampled_from(
        [
            None,
            "Error",
            "OOMKilled",
            "Evicted",
            "NodeLost",
            "PodGone",
            "DeadlineExceeded",
            "ContainerStatusUnknown",
            "Completed",
        ]
    ),
    pod_reason=st.sampled_from(
        [None, "Evicted", "NodeLost", "DeadlineExceeded", "PreemptionByScheduler"]
    ),
    node=st.one_of(st.none(), st.just("node-a")),
    deleted=st.booleans(),
)
attempt_numbers = st.integers(1, MAX_RESTARTS + 3)


@given(policies, attempt_numbers, failures)
def test_never_restarts_past_max_restarts(policy, attempt, failure):
    verdict = judge_restart(policy, attempt, failure)
    if attempt > policy.max_restarts:
        assert verdict.decision is Decision.FAIL
    if verdict.decision is Decision.RESTART:
        assert verdict.next_attempt == attempt + 1 <= policy.max_attempts
        assert verdict.reason.endswith(f"attempt {attempt + 1} of {policy.max_attempts}")
    else:
        assert verdict.next_attempt is None


@given(policies, attempt_numbers, failures)
def test_every_verdict_names_the_replica_and_its_cause(policy, attempt, failure):
    verdict = judge_restart(policy, attempt, failure)
    assert verdict.reason.startswith(failure.replica + " ")
    assert verdict.cause == describe_failure(failure)
    if failure.exit_code is not None and failure.kind is not FailureKind.EXITED:
        assert f"exit code {failure.exit_code}" in verdict.cause or verdict.cause.endswith(
            f"exited {failure.exit_code}"
        )


@given(policies, attempt_numbers, failures)
def test_infrastructure_losses_restart_and_deadlines_never_do(policy, attempt, failure):
    verdict = judge_restart(policy, attempt, failure)
    room = 1 <= attempt <= policy.max_restarts
    if failure.kind in (FailureKind.DELETED, FailureKind.EVICTED, FailureKind.NODE_LOST):
        assert (verdict.decision is Decision.RESTART) == room
    if failure.kind is FailureKind.DEADLINE_EXCEEDED:
        assert verdict.decision is Decision.FAIL


@given(attempt_numbers, st.integers(1, 255), st.booleans())
def test_retryable_exit_codes_are_those_of_signals(attempt, code, oom):
    failure = ReplicaFailure("worker-0", exit_code=code, reason="OOMKilled" if oom else "Error")
    verdict = judge_restart(RestartPolicy(MAX_RESTARTS), attempt, failure)
    retryable = code >= 128 or oom
    assert (verdict.decision is Decision.RESTART) == (retryable and attempt <= MAX_RESTARTS)


@given(policies, attempt_numbers, failures, st.one_of(st.none(), st.integers(0, 10**9)))
def test_attempt_records_round_trip(policy, attempt, failure, step):
    verdict = judge_restart(policy, attempt, failure)
    record = Attempt.ended_by(
        attempt, verdict, failure, started=START, ended=END, restored_checkpoint_step=step
    )
    assert Attempt.from_payload(json.loads(json.dumps(record.to_payload()))) == record


def test_an_attempts_outcome_reads_leniently_where_the_record_would_refuse_it():
    assert read_attempt_outcome({"outcome": "restarted"}) is AttemptOutcome.RESTARTED  # no number
    assert read_attempt_outcome({"number": 1}) is AttemptOutcome.RUNNING
    assert read_attempt_outcome({"outcome": "exploded"}) is None
    assert read_attempt_outcome("junk") is None
