"""Cancel from the TFJob tab, with `tshell cancel`'s semantics: teardown still runs.

Why this exists: marking a DAG run failed makes Airflow skip every task not
yet started, teardown included, leaving the run's pods behind
(tshell/run_cancel.py says where). Like tshell, this fails the run's started,
unfinished tasks except those that run whatever happened upstream (archive,
teardown); the scheduler then runs those and marks the run failed. It goes
through the DAG's own `set_task_instance_state`, as Airflow's REST route for
a task instance's state does. The caller's right (the run's edit permission)
is checked by the route (operators/run_view_api.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from operators.run_view_db import find_dag_run

ACTIVE_TASK_STATES = {"scheduled", "queued", "running", "deferred", "up_for_retry",
                      "up_for_reschedule", "restarting", "awaiting_input"}
CLEANUP_TRIGGER_RULES = {"all_done", "all_done_setup_success", "always"}
ACTIVE_RUN_STATES = {"queued", "running"}


def cancel_run(session: Any, dag_bag: Any, dag_id: str, run_id: str) -> dict[str, Any]:
    """Fail the run's active tasks but its cleanup; {"failed": [task ids], "spared": [...]}."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    dag_run = find_dag_run(session, dag_id, run_id)
    if str(dag_run.state) not in ACTIVE_RUN_STATES:
        raise HTTPException(409, f"run {run_id!r} of DAG {dag_id!r} is {dag_run.state}: only a "
                                 "queued or running run can be cancelled")
    dag = dag_bag.get_dag_for_run(dag_run, session=session)
    if dag is None:
        raise HTTPException(404, f"DAG {dag_id!r} of run {run_id!r} is not in Airflow's database")
    spared = sorted(t.task_id for t in dag.tasks
                    if str(getattr(t.trigger_rule, "value", t.trigger_rule))
                    in CLEANUP_TRIGGER_RULES)
    instances = session.execute(select(TaskInstance.task_id, TaskInstance.state).where(
        TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)).all()
    failed = []
    for task_id, state in instances:
        if task_id in spared or str(state) not in ACTIVE_TASK_STATES:
            continue
        dag.set_task_instance_state(task_id=task_id, run_id=run_id,
                                    state=TaskInstanceState.FAILED, commit=True,
                                    session=session)
        failed.append(task_id)
    return {"dag_id": dag_id, "run_id": run_id, "failed": sorted(set(failed)),
            "spared": spared}
