"""Each phase of a run stays its own task: a failure names its phase, teardown still runs.

Issue 29 cut the time Airflow spends between the phases, not the phases: every
phase keeps its own task (state, log, failure), `tshell status` names the phase
that failed first, the TFJob tab's timeline shows every phase, and teardown (an
Airflow teardown task of fetch_bundle and launch) runs after a failure in any
phase once the bundle was fetched. The end-to-end files show each failure for
real (tests/pipeline/test_pipeline_e2e.py: validate, fetch_bundle, launch,
train; tests/tshell/test_tshell_run_commands.py: status and cancel).
"""

from __future__ import annotations

import pytest

from operators.dag_factory import build_submit_dag
from runview.run import RunTimes, TaskTimes, summarize_run
from tfjob.pipeline_ids import FETCH_BUNDLE_TASK, LAUNCH_TASK, PIPELINE_TASKS, TEARDOWN_TASK
from tfjob.tenants import Tenant
from tshell.runs.failure import find_failed_task

DAG = build_submit_dag(Tenant(name="team-a", quota={}, defaults={}))
DESCRIBED = {
    "request": {"name": "digits", "tenant": "team-a", "mode": "distributed"},
    "namespace": "tfjob-team-a",
    "run_key": "digits-1234abcd",
}


def states_after_failure(failed: str) -> dict[str, str]:
    """Every task's state once `failed` failed, as Airflow's trigger rules decide it: earlier
    tasks succeeded; a teardown task runs when one of its setups succeeded; the rest are
    upstream_failed."""
    states: dict[str, str] = {}
    for task_id in PIPELINE_TASKS:
        task = DAG.get_task(task_id)
        if task_id == failed:
            states[task_id] = "failed"
        elif task_id not in states and PIPELINE_TASKS.index(task_id) < PIPELINE_TASKS.index(failed):
            states[task_id] = "success"
        elif task.is_teardown:
            setups = {up.task_id for up in task.upstream_list if up.is_setup}
            ran = any(states.get(setup) == "success" for setup in setups)
            states[task_id] = "success" if ran else "upstream_failed"
        else:
            states[task_id] = "upstream_failed"
    return states


def test_teardown_is_a_teardown_of_the_bundle_and_the_launch():
    teardown = DAG.get_task(TEARDOWN_TASK)
    assert teardown.is_teardown and teardown.trigger_rule == "all_done_setup_success"
    setups = {up.task_id for up in teardown.upstream_list if up.is_setup}
    assert setups == {FETCH_BUNDLE_TASK, LAUNCH_TASK}
    assert [task.task_id for task in DAG.topological_sort()] == list(PIPELINE_TASKS)


@pytest.mark.parametrize("failed", PIPELINE_TASKS)
def test_a_failure_in_each_phase_is_named_and_every_phase_stays_on_the_timeline(failed):
    states = states_after_failure(failed)
    tasks = [{"task_id": t, "state": s, "try_number": 1} for t, s in states.items()]
    assert find_failed_task(tasks)["task_id"] == failed
    summary = summarize_run(
        DAG.dag_id,
        "manual__1",
        RunTimes("failed", "2026-12-07T10:00:00+00:00"),
        {("validate", "return_value"): DESCRIBED},
        {task: TaskTimes(state, None, None, 1) for task, state in states.items()},
    )
    assert [(t["task_id"], t["state"]) for t in summary["tasks"]] == list(states.items())
    fetched = PIPELINE_TASKS.index(failed) > PIPELINE_TASKS.index(FETCH_BUNDLE_TASK)
    assert (states[TEARDOWN_TASK] in ("success", "failed")) == fetched, states
