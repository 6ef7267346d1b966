"""Cancelling a run so that its cleanup still runs: the one procedure tshell and the tab share.

Why this exists: marking a DAG run failed makes Airflow mark every task that
has not started SKIPPED, teardown included (`_set_dag_run_terminal_state` in
airflow/api/common/mark_tasks.py), so a run's pods would stay behind. Instead:
fail every started, unfinished task except those that run whatever happened
upstream (archive, teardown); the scheduler then runs those and marks the run
failed. A task may be scheduled between listing and failing, so the passes
repeat (at most CANCEL_ROUNDS) until one finds nothing left to fail. A run in
which no task had started is marked failed itself: nothing of it exists yet.

`tshell cancel` (through Airflow's REST API) and the TFJob tab's Cancel
(runview/cancel.py, through Airflow's models) give `cancel_run_tasks`
their own readers and writers; the procedure is the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

ACTIVE_TASK_STATES = frozenset(
    {
        "scheduled",
        "queued",
        "running",
        "deferred",
        "up_for_retry",
        "up_for_reschedule",
        "restarting",
        "awaiting_input",
    }
)
# Trigger rules of tasks that run whatever happened upstream (teardown: all_done_setup_success).
CLEANUP_TRIGGER_RULES = frozenset({"all_done", "all_done_setup_success", "always"})
CANCEL_ROUNDS = 3


@dataclass(frozen=True)
class TaskInstanceRef:
    """One task instance as the cancel sees it."""

    task_id: str
    state: str | None
    map_index: int = -1


@dataclass(frozen=True)
class CancelOutcome:
    failed: tuple[str, ...]  # task ids failed, sorted, once each
    spared: tuple[str, ...]  # the cleanup tasks left to run
    run_marked_failed: bool  # no task had started: the run itself was marked failed


def select_cleanup_tasks(tasks: Iterable[tuple[str, str]]) -> set[str]:
    """(task id, trigger rule) pairs -> the tasks that run whatever happened upstream."""
    return {task_id for task_id, rule in tasks if str(rule) in CLEANUP_TRIGGER_RULES}


def select_tasks_to_fail(
    instances: Iterable[TaskInstanceRef], spared: set[str]
) -> list[TaskInstanceRef]:
    return [
        ti
        for ti in instances
        if ti.task_id not in spared and str(ti.state or "none") in ACTIVE_TASK_STATES
    ]


def cancel_run_tasks(
    list_instances: Callable[[], Iterable[TaskInstanceRef]],
    fail_task: Callable[[TaskInstanceRef], None],
    mark_run_failed: Callable[[], None],
    spared: set[str],
    rounds: int = CANCEL_ROUNDS,
) -> CancelOutcome:
    """Fail the run's active tasks but the spared, in up to `rounds` passes; if none had
    started, mark the run failed. The caller has checked the run is still active."""
    failed: list[str] = []
    for _ in range(rounds):
        newly = select_tasks_to_fail(list_instances(), spared)
        if not newly:
            break
        for instance in newly:
            fail_task(instance)  # failing an already failed task again is harmless
        failed += [instance.task_id for instance in newly]
    if not failed:
        mark_run_failed()
    return CancelOutcome(tuple(sorted(set(failed))), tuple(sorted(spared)), not failed)
