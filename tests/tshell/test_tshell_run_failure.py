"""`tshell status` of a failed run ends with why: the error its first failed task raised."""

from __future__ import annotations

from typing import Any

import pytest

from tshell.airflow_client import AirflowNotFoundError
from tshell.runs.failure import (
    MAX_MESSAGE_LINES,
    RunFailure,
    find_failed_task,
    pick_raised_error,
    read_run_failure,
)
from tshell.runs.lookup import RunRef

REF = RunRef("tfjob__digits-ps", "manual__1")
TRAIN_MESSAGE = (
    "training failed: attempt 1: worker-1 exited 1 (not restarted: a permanent failure under "
    "restart_on=retryable)\nreplica worker-1 (pod p-worker-1) failed with exit code 1; last 20 "
    "log lines:\n  [worker-1] Traceback (most recent call last):\n  [worker-1] ValueError: bad"
)


def tasks(**states: str) -> list[dict[str, Any]]:
    return [
        {"task_id": task, "state": state, "try_number": 2 if task == "train" else 1}
        for task, state in states.items()
    ]


class FakeSession:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[tuple[str, Any]] = []

    def get_json(self, path: str, params: dict[str, Any] | None = None) -> Any:
        self.asked.append((path, params))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_the_first_failed_task_of_the_pipeline_is_the_cause():
    found = find_failed_task(
        tasks(
            publish="upstream_failed",
            teardown="success",
            archive="failed",
            train="failed",
            launch="success",
        )
    )
    assert found is not None and found["task_id"] == "train"
    assert find_failed_task(tasks(train="success", publish="upstream_failed")) is None


def test_the_raised_exception_is_read_and_its_causes_are_not():
    content = [
        {"event": "starting"},
        "a plain line",
        {
            "event": "Task failed with exception",
            "error_detail": [
                {"exc_type": "TrainingFailed", "exc_value": TRAIN_MESSAGE, "is_cause": False},
                {"exc_type": "GangStartError", "exc_value": "the cause", "is_cause": True},
            ],
        },
        {"event": "Task instance state updated"},
    ]
    assert pick_raised_error(content) == ("TrainingFailed", TRAIN_MESSAGE)
    assert pick_raised_error([{"event": "no error here"}]) is None


def test_status_of_a_failed_train_names_the_replica_exit_code_and_last_lines():
    session = FakeSession(
        {
            "content": [
                {
                    "event": "Task failed",
                    "error_detail": [{"exc_type": "TrainingFailed", "exc_value": TRAIN_MESSAGE}],
                }
            ]
        }
    )
    failure = read_run_failure(session, REF, tasks(train="failed", archive="success"))
    assert failure == RunFailure("train", 2, "TrainingFailed", TRAIN_MESSAGE)
    assert session.asked == [(f"{REF.path}/taskInstances/train/logs/2", {"full_content": "true"})]
    lines = failure.describe()
    assert lines[0] == "failed   train (try 2): TrainingFailed"
    assert lines[1].startswith("  training failed: attempt 1: worker-1 exited 1")
    assert lines[-1] == "    [worker-1] ValueError: bad"
    assert failure.to_payload()["message"] == TRAIN_MESSAGE


def test_a_long_message_is_cut_and_says_where_the_rest_is():
    text = "\n".join(f"line {n}" for n in range(MAX_MESSAGE_LINES + 5))
    lines = RunFailure("launch", 1, "AirflowFailException", text).describe()
    assert len(lines) == 1 + MAX_MESSAGE_LINES + 1
    assert lines[-1] == "  … 5 more lines (tshell logs launch)"


@pytest.mark.parametrize(
    "answer, because",
    [
        (AirflowNotFoundError("log not found"), "log not found"),
        ({"content": [{"event": "killed"}]}, "it records no exception"),
    ],
)
def test_an_unreadable_failure_says_why_and_where_to_look(answer, because):
    failure = read_run_failure(FakeSession(answer), REF, tasks(validate="failed"))
    assert failure == RunFailure("validate", 1, None, None, because)
    assert failure.describe() == [
        f"failed   validate (try 1): its log could not be read ({because}); "
        "`tshell logs` or the Airflow UI shows it"
    ]
