"""The ids a run has in Airflow (tfjob/pipeline_ids.py): one home for DAG ids, task ids, XCom keys.

The pipeline (operators/dag_factory.py), the TFJob tab and tshell all read a run by
these; the DAG built from them is checked here against the ids themselves.
"""

from __future__ import annotations

import pytest

from tfjob import pipeline_ids
from tfjob.tenants.model import Tenant


def test_a_request_dag_id_reads_back_as_its_request():
    dag_id = pipeline_ids.request_dag_id("digits-ps")
    assert dag_id == "tfjob__digits-ps"
    assert pipeline_ids.request_name_of_dag(dag_id) == "digits-ps"
    assert pipeline_ids.tenant_of_submit_dag(dag_id) is None


def test_a_submit_dag_id_reads_back_as_its_tenant_and_refuses_a_bad_tenant():
    dag_id = pipeline_ids.submit_dag_id("team-a")
    assert pipeline_ids.tenant_of_submit_dag(dag_id) == "team-a"
    assert pipeline_ids.request_name_of_dag(dag_id) is None
    with pytest.raises(ValueError, match="tenant 'Team_A' given; allowed: a DNS-1123 label"):
        pipeline_ids.submit_dag_id("Team_A")


def test_the_maintenance_dag_is_neither_a_request_nor_a_submit_dag():
    assert pipeline_ids.request_name_of_dag(pipeline_ids.JANITOR_DAG_ID) is None
    assert pipeline_ids.tenant_of_submit_dag(pipeline_ids.JANITOR_DAG_ID) is None


def test_the_built_pipeline_has_exactly_these_tasks_in_this_order():
    from operators.dag_factory import build_submit_dag

    dag = build_submit_dag(Tenant(name="team-a", quota={}, defaults={}))
    assert dag.dag_id == pipeline_ids.submit_dag_id("team-a")
    assert {task.task_id for task in dag.tasks} == set(pipeline_ids.PIPELINE_TASKS)
    position = {task_id: at for at, task_id in enumerate(pipeline_ids.PIPELINE_TASKS)}
    for task in dag.tasks:  # every task comes after the tasks it depends on
        assert all(position[up] < position[task.task_id] for up in task.upstream_task_ids), task
