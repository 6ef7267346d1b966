"""Gang start and end-of-training verdicts from pod dicts (operators.replicas, .podlogs)."""

from __future__ import annotations

import pytest

from operators.podlogs import extract_metrics, prefix_lines, tail_lines
from operators.replicas import (
    GangState,
    PodPhase,
    TrainingState,
    deciding_replicas,
    describe_startup_failure,
    judge_gang_start,
    judge_training,
    read_replica_status,
)


def make_pod(
    role, index, phase="Pending", ip=None, main=None, init=None, reason=None, message=None
):
    status = {"phase": phase}
    if ip:
        status["podIP"] = ip
    if main is not None:
        status["containerStatuses"] = [{"name": "tensorflow", "state": main}]
    if init is not None:
        status["initContainerStatuses"] = [{"name": "fetch-bundle", "state": init}]
    if reason:
        status["reason"], status["message"] = reason, message
    return {
        "metadata": {
            "name": f"job-1234abcd-{role}-{index}",
            "labels": {"tfjob.io/role": role, "tfjob.io/index": str(index)},
        },
        "spec": {"nodeName": "node-1"},
        "status": status,
    }


def names(*replicas):
    return [f"job-1234abcd-{r}-{i}" for r, i in replicas]


RUNNING = {"running": {"startedAt": "2026-12-02T12:00:00Z"}}


def exited(code):
    return {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}


def test_gang_is_ready_only_when_every_pod_runs_with_an_ip():
    expected = names(("ps", 0), ("worker", 0))
    pods = [make_pod("ps", 0, "Running", "10.0.0.2", RUNNING), make_pod("worker", 0, "Pending")]
    assert judge_gang_start(pods, expected).state is GangState.STARTING
    pods[1] = make_pod("worker", 0, "Running", None, RUNNING)
    assert judge_gang_start(pods, expected).state is GangState.STARTING
    pods[1] = make_pod("worker", 0, "Running", "10.0.0.3", RUNNING)
    verdict = judge_gang_start(pods, expected)
    assert verdict.state is GangState.READY
    assert [(r.role, r.index, r.ip) for r in verdict.ready] == [
        ("ps", 0, "10.0.0.2"),
        ("worker", 0, "10.0.0.3"),
    ]


def test_gang_waits_for_a_pod_not_yet_seen():
    verdict = judge_gang_start([], names(("worker", 0)))
    assert verdict.state is GangState.STARTING
    assert verdict.waiting[0].phase is PodPhase.GONE


def test_gang_fails_at_once_when_the_init_container_failed():
    pod = make_pod("worker", 0, "Failed", init={"terminated": {"exitCode": 3, "reason": "Error"}})
    verdict = judge_gang_start([pod], names(("worker", 0)))
    assert verdict.state is GangState.FAILED
    assert verdict.failed[0].init_exit_code == 3


def test_gang_fails_on_an_invalid_image_but_waits_on_a_pull_backoff():
    bad = make_pod("worker", 0, "Pending", main={"waiting": {"reason": "InvalidImageName"}})
    assert judge_gang_start([bad], names(("worker", 0))).state is GangState.FAILED
    backoff = make_pod("worker", 0, "Pending", main={"waiting": {"reason": "ImagePullBackOff"}})
    assert judge_gang_start([backoff], names(("worker", 0))).state is GangState.STARTING


def test_a_single_replica_that_already_finished_counts_as_started():
    pod = make_pod("worker", 0, "Succeeded", "10.0.0.9", exited(0))
    assert judge_gang_start([pod], names(("worker", 0))).state is GangState.READY


def test_startup_failure_names_scheduler_reason_and_init_log():
    replica = read_replica_status(
        make_pod("worker", 1, "Failed", init={"terminated": {"exitCode": 2, "reason": "Error"}})
    )
    events = [
        {
            "type": "Warning",
            "reason": "FailedScheduling",
            "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
        },
        {
            "type": "Warning",
            "reason": "FailedScheduling",
            "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
        },
        {"type": "Normal", "reason": "Scheduled", "message": "ignored"},
    ]
    text = describe_startup_failure(
        replica, events, "fetch: bundle refused: code/../x: path escapes\n"
    )
    assert "job-1234abcd-worker-1 (worker-1)" in text
    assert "init container fetch-bundle exited with code 2" in text
    assert "| fetch: bundle refused: code/../x: path escapes" in text
    assert (
        text.count("FailedScheduling: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu.") == 1
    )
    assert "ignored" not in text


@pytest.mark.parametrize(
    "policy,replicas,single,expected",
    [
        ("chief", [("chief", 0), ("ps", 0), ("worker", 0)], False, ("chief-0",)),
        ("worker0", [("ps", 0), ("worker", 0), ("worker", 1)], False, ("worker-0",)),
        (
            "all_workers",
            [("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1), ("evaluator", 0)],
            False,
            ("chief-0", "worker-0", "worker-1"),
        ),
        ("worker0", [("worker", 0)], True, ("worker-0",)),
    ],
)
def test_deciding_replicas_never_include_ps_or_evaluator(policy, replicas, single, expected):
    assert deciding_replicas(policy, replicas, single) == expected


def test_a_policy_without_its_replica_is_refused_with_the_replicas_present():
    with pytest.raises(ValueError, match="success_policy: 'chief' given.*ps-0, worker-0"):
        deciding_replicas("chief", [("ps", 0), ("worker", 0)])


def test_training_succeeds_when_the_chief_exits_0_while_ps_and_workers_still_run():
    expected = names(("chief", 0), ("ps", 0), ("worker", 0))
    pods = [
        make_pod("chief", 0, "Succeeded", "10.0.0.1", exited(0)),
        make_pod("ps", 0, "Running", "10.0.0.2", RUNNING),
        make_pod("worker", 0, "Running", "10.0.0.3", RUNNING),
    ]
    verdict = judge_training(pods, ["chief-0"], expected)
    assert verdict.state is TrainingState.SUCCEEDED


def test_training_fails_at_once_when_a_worker_exits_non_zero():
    expected = names(("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1))
    pods = [
        make_pod("chief", 0, "Running", "10.0.0.1", RUNNING),
        make_pod("ps", 0, "Running", "10.0.0.2", RUNNING),
        make_pod("worker", 0, "Running", "10.0.0.3", RUNNING),
        make_pod("worker", 1, "Failed", "10.0.0.4", exited(7)),
    ]
    verdict = judge_training(pods, ["chief-0"], expected)
    assert verdict.state is TrainingState.FAILED
    assert verdict.failed_replica.replica_id == "worker-1"
    assert verdict.failed_replica.exit_code == 7


def test_a_failed_ps_does_not_decide_the_run():
    expected = names(("chief", 0), ("ps", 0))
    pods = [
        make_pod("chief", 0, "Running", "10.0.0.1", RUNNING),
        make_pod("ps", 0, "Failed", None, exited(1)),
    ]
    assert judge_training(pods, ["chief-0"], expected).state is TrainingState.RUNNING


def test_a_vanished_worker_pod_fails_the_run():
    expected = names(("worker", 0))
    verdict = judge_training([], ["worker-0"], expected)
    assert verdict.state is TrainingState.FAILED
    assert verdict.failed_replica.reason == "PodGone"
    assert verdict.failed_replica.replica_id == "worker-0"


def test_a_pod_killed_by_its_deadline_fails_with_the_kubelet_reason():
    pod = make_pod(
        "worker",
        0,
        "Failed",
        "10.0.0.3",
        reason="DeadlineExceeded",
        message="Pod was active on the node longer than the specified deadline",
    )
    verdict = judge_training([pod], ["worker-0"], names(("worker", 0)))
    assert verdict.state is TrainingState.FAILED
    assert verdict.failed_replica.reason == "DeadlineExceeded"


def test_all_workers_policy_waits_for_every_worker():
    expected = names(("worker", 0), ("worker", 1))
    pods = [
        make_pod("worker", 0, "Succeeded", None, exited(0)),
        make_pod("worker", 1, "Running", "x", RUNNING),
    ]
    assert judge_training(pods, ["worker-0", "worker-1"], expected).state is TrainingState.RUNNING
    pods[1] = make_pod("worker", 1, "Succeeded", None, exited(0))
    assert judge_training(pods, ["worker-0", "worker-1"], expected).state is TrainingState.SUCCEEDED


def test_log_lines_are_prefixed_with_role_and_index():
    assert prefix_lines("worker-1", "a\nb\n") == ["[worker-1] a", "[worker-1] b"]
    assert tail_lines("1\n2\n3\n", 2) == "2\n3"


def test_lines_the_trigger_streamed_live_are_not_written_again():
    # The trigger counts newline-terminated lines (and a last unterminated one).
    assert prefix_lines("ps-0", "a\r\nb\nc", skip=2) == ["[ps-0] c"]
    assert prefix_lines("ps-0", "a\nb\n", skip=2) == []
    assert prefix_lines("ps-0", "a\n\nb\n", skip=1) == ["[ps-0] ", "[ps-0] b"]


def test_the_last_metrics_line_wins_and_garbage_is_ignored():
    text = (
        'x\nTFJOB_METRICS {"accuracy": 0.5}\nTFJOB_METRICS not-json\n'
        'TFJOB_METRICS {"accuracy": 0.9}\n'
    )
    assert extract_metrics(text) == {"accuracy": 0.9}
    assert extract_metrics("no metrics here") is None


def test_a_run_is_admitted_while_the_runs_holding_objects_stay_within_the_cap():
    from operators.launch import is_admitted

    assert is_admitted({"own"}, "own", 1)
    assert is_admitted(set(), "own", 1)
    assert not is_admitted({"other", "own"}, "own", 1)
    assert is_admitted({"other", "own"}, "own", 2)
    # Two launches whose tickets both exist each count both: with one place, neither starts
    # (both back off and ask again later), never both.
    assert not is_admitted({"a", "b"}, "a", 1) and not is_admitted({"a", "b"}, "b", 1)


def with_keeper(pod):
    """The model owner's pod: its spec has the keeper container beside `tensorflow`."""
    pod["spec"]["containers"] = [{"name": "tensorflow"}, {"name": "tfjob-keeper"}]
    return pod


def test_an_owner_whose_only_the_upload_failed_has_trained_and_archive_recovers_the_model():
    expected = names(("chief", 0), ("worker", 0))
    owner = with_keeper(make_pod("chief", 0, "Running", "10.0.0.1", exited(74)))
    pods = [owner, make_pod("worker", 0, "Running", "10.0.0.3", RUNNING)]
    verdict = judge_training(pods, ["chief-0"], expected)
    assert verdict.state is TrainingState.SUCCEEDED
    assert read_replica_status(owner).owns_model and read_replica_status(owner).exit_code == 74
    # The same exit code of a replica that owns no model is a failure like any other.
    pods = [
        with_keeper(make_pod("chief", 0, "Running", "10.0.0.1", RUNNING)),
        make_pod("worker", 0, "Failed", "10.0.0.3", exited(74)),
    ]
    verdict = judge_training(pods, ["chief-0"], expected)
    assert verdict.state is TrainingState.FAILED and verdict.failed_replica.exit_code == 74


def test_the_upload_failed_exit_code_is_the_bootstraps():
    from runtime import protocol
    from tfjob.records import replicas

    assert replicas.EXIT_UPLOAD_FAILED == protocol.EXIT_UPLOAD_FAILED == 74


def test_a_pod_being_deleted_or_gone_after_it_was_seen_fails_the_gang_start():
    expected = names(("ps", 0), ("worker", 0), ("worker", 1))
    deleting = make_pod("worker", 0, "Pending")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-07T23:00:00Z"
    pods = [make_pod("ps", 0, "Running", "10.0.0.2", RUNNING), deleting]

    verdict = judge_gang_start(pods, expected, vanished=[expected[2]])

    assert verdict.state is GangState.FAILED
    assert [r.replica_id for r in verdict.failed] == ["worker-0", "worker-1"]
    gone = verdict.failed[1]
    assert (gone.phase, gone.reason, gone.deleted) == (PodPhase.GONE, "PodGone", True)
    assert "worker-1 was deleted" in describe_startup_failure(gone, [])
    # a pod never seen yet still counts as waiting, not as gone
    assert judge_gang_start(pods[:1], expected[::2]).state is GangState.STARTING


def test_a_start_failure_of_a_lost_node_names_the_node():
    pod = make_pod("worker", 1, "Failed", reason="NodeShutdown", message="node shut down")

    text = describe_startup_failure(read_replica_status(pod), [])

    assert "worker-1 lost its node node-1 (NodeShutdown)" in text
