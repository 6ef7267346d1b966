"""Why a failed run failed, for `tshell status`: the error its failed task raised.

Why this exists: `train failed` alone sends the user to the Airflow UI. Every
step of the pipeline fails with one message written for people: validate's
`request.<field>: … given; …`, launch's scheduler reason for a gang that
cannot start, train's `training failed: attempt 1: worker-1 exited 1 (…)`
followed by the failed replica, its exit code and its last log lines.
Airflow keeps that exception in the task's structured log (`error_detail`:
the raised exception first, then its causes); this module reads it back
through the REST API for the first task of the pipeline that failed
(`upstream_failed` tasks did not run) and shapes it for the terminal and for
`--json`. Reading is bounded by the session's JSON limit; the message shown
is cut at MAX_MESSAGE_LINES.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tfjob.jsontypes import JsonObject
from tfjob.pipeline_ids import PIPELINE_TASKS
from tshell.airflow_client import AirflowClientError, AirflowSession
from tshell.runs.lookup import RunRef, quote

MAX_MESSAGE_LINES = 40


@dataclass(frozen=True)
class RunFailure:
    """The failed task, the try that failed, and what it raised (None when unreadable)."""

    task_id: str
    try_number: int
    error_type: str | None
    message: str | None
    unread_because: str | None = None

    def to_payload(self) -> JsonObject:
        return {
            "task": self.task_id,
            "try": self.try_number,
            "error": self.error_type,
            "message": self.message,
            "unread_because": self.unread_because,
        }

    def describe(self) -> list[str]:
        """The lines `tshell status` ends with."""
        head = f"failed   {self.task_id} (try {self.try_number})"
        if self.message is None:
            return [
                f"{head}: its log could not be read ({self.unread_because}); "
                "`tshell logs` or the Airflow UI shows it"
            ]
        lines = self.message.rstrip("\n").splitlines() or [""]
        shown = lines[:MAX_MESSAGE_LINES]
        cut = len(lines) - len(shown)
        return [
            f"{head}: {self.error_type}",
            *(f"  {line}" for line in shown),
            *([f"  … {cut} more lines (tshell logs {self.task_id})"] if cut else []),
        ]


def find_failed_task(tasks: Sequence[JsonObject]) -> JsonObject | None:
    """The first task of the pipeline in state `failed` (any other failed task after them)."""
    failed = [t for t in tasks if t.get("state") == "failed"]
    # The first failed task in the pipeline's order is the cause; the tasks after it
    # failed or were skipped because of it.
    order = {task_id: at for at, task_id in enumerate(PIPELINE_TASKS)}
    failed.sort(key=lambda t: order.get(t["task_id"], len(order)))
    return failed[0] if failed else None


def pick_raised_error(content: Sequence[object]) -> tuple[str, str] | None:
    """(type, message) of the last exception a structured task log records; None if none."""
    for item in reversed(content):
        if not isinstance(item, dict):
            continue
        errors = [e for e in item.get("error_detail") or [] if isinstance(e, dict)]
        raised = next((e for e in errors if not e.get("is_cause")), errors[0] if errors else None)
        if raised is not None:
            return str(raised.get("exc_type") or "Exception"), str(raised.get("exc_value") or "")
    return None


def read_run_failure(
    session: AirflowSession, ref: RunRef, tasks: Sequence[JsonObject]
) -> RunFailure | None:
    """Why the run failed: its first failed task's error; None when no task failed."""
    task = find_failed_task(tasks)
    if task is None:
        return None
    try_number = int(task.get("try_number") or 1)
    path = f"{ref.path}/taskInstances/{quote(task['task_id'])}/logs/{try_number}"
    try:
        body = session.get_json(path, {"full_content": "true"})
    except AirflowClientError as exc:
        return RunFailure(task["task_id"], try_number, None, None, str(exc))
    content = body.get("content") if isinstance(body, dict) else None
    raised = pick_raised_error(content if isinstance(content, list) else [])
    if raised is None:
        return RunFailure(task["task_id"], try_number, None, None, "it records no exception")
    return RunFailure(task["task_id"], try_number, *raised)


__all__ = [
    "MAX_MESSAGE_LINES",
    "RunFailure",
    "find_failed_task",
    "pick_raised_error",
    "read_run_failure",
]
