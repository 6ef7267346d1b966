"""tshell cancel: stop a run so that its cleanup still runs.

Why this exists: `PATCH /dagRuns/{run}` with `state=failed` makes Airflow mark
every task that has not started SKIPPED, teardown tasks included
(`_set_dag_run_terminal_state` in airflow/api/common/mark_tasks.py), so pods
launched by the run would stay behind. Failing the active tasks instead lets
the scheduler run `archive` and `teardown`; the run is marked failed after.
The procedure is `tfjob.cancellation.cancel_run_tasks`, the same the TFJob
tab's Cancel runs; here it reads and writes through Airflow's REST API, then
waits for the cleanup.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, TextIO

from tfjob.cancellation import TaskInstanceRef, cancel_run_tasks, select_cleanup_tasks
from tshell.airflow_client import AirflowSession
from tshell.command import open_session, set_command
from tshell.exitcodes import CommandError, ExitCode
from tshell.runs.commands import (
    FINISHED_TASK_STATES,
    POLL_INTERVAL_S,
    RunState,
    add_common,
    call_patiently,
    list_task_instances,
)
from tshell.runs.lookup import RunRef, explain_forbidden_on_run, find_run, quote

CANCEL_NOTE = "cancelled with tshell"
CANCEL_TIMEOUT_S = 600.0


def list_cleanup_task_ids(session: AirflowSession, dag_id: str) -> set[str]:
    """Tasks that run whatever happened upstream (teardown, archive): cancel spares them."""
    tasks = session.get_json(f"/api/v2/dags/{quote(dag_id)}/tasks")["tasks"]
    return select_cleanup_tasks((t["task_id"], t.get("trigger_rule") or "") for t in tasks)


def list_task_refs(session: AirflowSession, ref: RunRef) -> list[TaskInstanceRef]:
    return [
        TaskInstanceRef(t["task_id"], t.get("state"), t.get("map_index", -1))
        for t in call_patiently(lambda: list_task_instances(session, ref))
    ]


def fail_task(session: AirflowSession, ref: RunRef, instance: TaskInstanceRef) -> None:
    """Mark one task instance failed, with tshell's note."""
    from airflow_client.client.api.task_instance_api import TaskInstanceApi
    from airflow_client.client.models.patch_task_instance_body import PatchTaskInstanceBody
    from airflow_client.client.models.task_instance_state import TaskInstanceState

    def patch(api: Any) -> Any:
        body = PatchTaskInstanceBody(new_state=TaskInstanceState.FAILED, note=CANCEL_NOTE)
        return TaskInstanceApi(api).patch_task_instance(
            ref.dag_id,
            ref.run_id,
            instance.task_id,
            body,
            map_index=None if instance.map_index < 0 else instance.map_index,
        )

    # Setting failed again is harmless: a call whose answer was lost may be repeated.
    call_patiently(lambda: session.call(patch, f"cancel of task {instance.task_id!r}"))


def cmd_cancel(args: argparse.Namespace, out: TextIO) -> ExitCode:
    _, session = open_session()
    run = find_run(session, args.run, args.dag, deed="cancel")
    ref = RunRef(run["dag_id"], run["dag_run_id"])
    with explain_forbidden_on_run(session, "cancel", ref):
        if RunState(run["state"]).is_finished:
            out.write(f"run {ref.run_id} already ended: {run['state']}\n")
            return ExitCode.OK
        # Not PATCH dagRun state=failed first: Airflow then marks every task that has not
        # started SKIPPED, teardown included, so pods would stay behind. Failing the active
        # tasks lets the scheduler run archive and teardown; the run is marked failed after.
        spared = list_cleanup_task_ids(session, ref.dag_id)
        outcome = cancel_run_tasks(
            lambda: list_task_refs(session, ref),
            lambda instance: fail_task(session, ref, instance),
            lambda: mark_run_failed(session, ref),
            spared,
        )
        if outcome.run_marked_failed:
            out.write(f"run {ref.run_id} marked failed before any task started\n")
            return ExitCode.OK
        failed = list(outcome.failed)
        kept = ", ".join(sorted(spared)) or "none"
        out.write(
            f"run {ref.run_id}: failed {', '.join(failed)}; cleanup tasks ({kept}) still run\n"
        )
        if args.no_wait:
            return ExitCode.OK
        await_tasks_finished(session, ref, args.timeout, args.poll_interval)
        # A DAG whose leaves are cleanup tasks would otherwise end "success".
        if session.get_json(ref.path)["state"] != RunState.FAILED:
            mark_run_failed(session, ref)
        out.write(f"run {ref.run_id} cancelled: failed, cleanup done\n")
        return ExitCode.OK


def mark_run_failed(session: AirflowSession, ref: RunRef) -> None:
    from airflow_client.client.api.dag_run_api import DagRunApi
    from airflow_client.client.models.dag_run_mutable_states import DagRunMutableStates
    from airflow_client.client.models.dag_run_patch_body import DAGRunPatchBody

    def patch_run(api: Any) -> Any:
        body = DAGRunPatchBody(state=DagRunMutableStates.FAILED, note=CANCEL_NOTE)
        return DagRunApi(api).patch_dag_run(ref.dag_id, ref.run_id, body)

    call_patiently(lambda: session.call(patch_run, f"cancel of run {ref.run_id!r}"))


def await_tasks_finished(
    session: AirflowSession, ref: RunRef, timeout: float, poll_interval: float
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        tasks = call_patiently(lambda: list_task_instances(session, ref))
        unfinished = [
            t["task_id"] for t in tasks if (t.get("state") or "none") not in FINISHED_TASK_STATES
        ]
        if not unfinished:
            return
        if time.monotonic() > deadline:
            raise CommandError(
                f"run {ref.run_id}: tasks {', '.join(unfinished)} still not finished "
                f"after {timeout:.0f} s; see `tshell status {ref.run_id}`",
                ExitCode.AIRFLOW_ERROR,
            )
        time.sleep(poll_interval)


def register(subparsers: Any) -> None:
    """Add `cancel` to tshell's subcommands."""
    cancel = subparsers.add_parser(
        "cancel", help="stop a run: its active tasks fail, teardown still removes the pods"
    )
    add_common(cancel, json_arg=False)
    cancel.add_argument(
        "--no-wait",
        action="store_true",
        help="return once the active tasks are failed, before cleanup ends",
    )
    cancel.add_argument(
        "--timeout",
        type=float,
        default=CANCEL_TIMEOUT_S,
        help=f"seconds to wait for cleanup (default {CANCEL_TIMEOUT_S:.0f})",
    )
    cancel.add_argument(
        "--poll-interval", type=float, default=POLL_INTERVAL_S, help=argparse.SUPPRESS
    )
    set_command(cancel, cmd_cancel)
