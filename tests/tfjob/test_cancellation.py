"""The cancel procedure tshell and the TFJob tab share (tfjob.cancellation), with fakes."""

from __future__ import annotations

from tfjob.cancellation import (
    CANCEL_ROUNDS,
    TaskInstanceRef,
    cancel_run_tasks,
    select_cleanup_tasks,
)

PIPELINE_RULES = [
    ("validate", "all_success"),
    ("launch", "all_success"),
    ("train", "all_success"),
    ("archive", "all_done"),
    ("teardown", "all_done_setup_success"),
    ("publish", "all_success"),
]


class FakeRun:
    """Task instances whose states change as the fake scheduler would between passes."""

    def __init__(self, passes: list[dict[str, str | None]]) -> None:
        self.passes, self.listed = passes, 0
        self.failed: list[tuple[str, int]] = []
        self.run_failed = False

    def list_instances(self) -> list[TaskInstanceRef]:
        states = self.passes[min(self.listed, len(self.passes) - 1)]
        self.listed += 1
        return [
            TaskInstanceRef(task, state, 0 if task == "train" else -1)
            for task, state in states.items()
            if (task, 0 if task == "train" else -1) not in self.failed
        ]

    def fail(self, instance: TaskInstanceRef) -> None:
        self.failed.append((instance.task_id, instance.map_index))

    def mark_failed(self) -> None:
        self.run_failed = True


def cancel(run: FakeRun, rounds: int = CANCEL_ROUNDS):
    return cancel_run_tasks(
        run.list_instances, run.fail, run.mark_failed, select_cleanup_tasks(PIPELINE_RULES), rounds
    )


def test_active_tasks_fail_and_the_cleanup_tasks_are_spared_to_run():
    run = FakeRun(
        [
            {
                "validate": "success",
                "launch": "success",
                "train": "deferred",
                "archive": None,
                "teardown": None,
                "publish": None,
            },
            {},
        ]
    )
    outcome = cancel(run)
    assert outcome.failed == ("train",) and run.failed == [("train", 0)]
    assert outcome.spared == ("archive", "teardown") and not outcome.run_marked_failed
    assert not run.run_failed


def test_a_task_scheduled_between_listing_and_failing_is_caught_by_the_next_pass():
    run = FakeRun(
        [
            {"launch": "running", "train": None},
            {"launch": "failed", "train": "scheduled"},
            {"launch": "failed", "train": "upstream_failed"},
        ]
    )
    outcome = cancel(run)
    assert outcome.failed == ("launch", "train") and run.listed == 3


def test_passes_stop_after_cancel_rounds_even_if_tasks_keep_appearing():
    states = [{f"task{i}": "queued"} for i in range(10)]
    run = FakeRun(states)
    outcome = cancel(run)
    assert run.listed == CANCEL_ROUNDS and len(outcome.failed) == CANCEL_ROUNDS


def test_a_run_in_which_no_task_started_is_marked_failed_itself():
    run = FakeRun([{"validate": None, "launch": None, "archive": "queued"}])
    outcome = cancel(run)
    assert outcome.failed == () and outcome.run_marked_failed and run.run_failed
    assert run.failed == []  # archive, a cleanup task, is never failed
