"""Cancel from the TFJob tab, with `tshell cancel`'s semantics: teardown still runs.

Why this exists: the procedure (fail the run's started, unfinished tasks but
its cleanup, in up to three passes; a run with no task started is marked
failed) is `tfjob.cancellation.cancel_run_tasks`, shared with `tshell cancel`;
this module gives it Airflow's models: the task instances from the database,
a task failed through the DAG's own `set_task_instance_state` (as Airflow's
REST route for a task instance's state does), a run failed through
`set_dag_run_state_to_failed` (as the REST route for a run's state does). The
caller's right (the run's edit permission) is checked by the route
(runview/api.py); a run recorded for another tenant than its DAG's
is refused (runview/db.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runview.db import build_http_error, find_tenant_run
from runview.run import ACTIVE_RUN_STATES
from tfjob.cancellation import TaskInstanceRef, cancel_run_tasks, select_cleanup_tasks
from tfjob.jsontypes import JsonObject

if TYPE_CHECKING:
    from airflow.models.dagbag import DBDagBag
    from sqlalchemy.orm import Session


def cancel_run(session: Session, dag_bag: DBDagBag, dag_id: str, run_id: str) -> JsonObject:
    """Fail the run's active tasks but its cleanup; {"failed": [task ids], "spared": [...]}."""
    from airflow.api.common.mark_tasks import set_dag_run_state_to_failed
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    dag_run, _described = find_tenant_run(session, dag_id, run_id)
    if str(dag_run.state) not in ACTIVE_RUN_STATES:
        raise build_http_error(
            409,
            f"run {run_id!r} of DAG {dag_id!r} is {dag_run.state}: only a "
            "queued or running run can be cancelled",
        )
    dag = dag_bag.get_dag_for_run(dag_run, session=session)
    if dag is None:
        raise build_http_error(
            404, f"DAG {dag_id!r} of run {run_id!r} is not in Airflow's database"
        )
    spared = select_cleanup_tasks(
        (t.task_id, str(getattr(t.trigger_rule, "value", t.trigger_rule))) for t in dag.tasks
    )

    def list_instances() -> list[TaskInstanceRef]:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.state, TaskInstance.map_index).where(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id
            )
        ).all()
        return [
            TaskInstanceRef(row.task_id, row.state and str(row.state), row.map_index)
            for row in rows
        ]

    def fail_task(instance: TaskInstanceRef) -> None:
        dag.set_task_instance_state(
            task_id=instance.task_id,
            run_id=run_id,
            state=TaskInstanceState.FAILED,
            map_indexes=None if instance.map_index < 0 else [instance.map_index],
            commit=True,
            session=session,
        )

    def mark_run_failed() -> None:
        set_dag_run_state_to_failed(dag=dag, run_id=run_id, commit=True, session=session)

    outcome = cancel_run_tasks(list_instances, fail_task, mark_run_failed, spared)
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "failed": list(outcome.failed),
        "spared": list(outcome.spared),
        "run_marked_failed": outcome.run_marked_failed,
    }
