"""The cluster policy: a job step whose tenant pool this Airflow lacks runs in default_pool.

Every tenant DAG names its tenant's pool when it is built (operators/dag_factory.py);
the policy only keeps a step from waiting forever for a pool that was never made.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from operators.cluster_policy import JOB_STEPS, task_instance_mutation_hook
from tfjob.tenants import Tenant


def test_the_hook_leaves_a_task_alone_until_airflow_gives_the_run():
    ti = SimpleNamespace(dag_id="tfjob_submit__demo", task_id="train", pool="tfjob-tenant-demo")
    task_instance_mutation_hook(task_instance=ti, dag_run=None)
    assert ti.pool == "tfjob-tenant-demo"


def test_the_policy_is_registered_and_airflow_calls_it_when_creating_task_instances():
    import airflow.settings
    from airflow.settings import get_policy_plugin_manager

    impls = get_policy_plugin_manager().hook.task_instance_mutation_hook.get_hookimpls()
    assert "tfjob" in [impl.plugin_name for impl in impls], "pip install -e . registers it"
    # else DagRun.verify_integrity would create task instances without calling any hook
    assert airflow.settings.task_instance_mutation_hook.is_noop is False


def test_the_policy_and_the_dag_factory_agree_on_the_job_steps():
    from operators.dag_factory import build_training_dag

    tenant = Tenant(name="x", quota={}, defaults={})
    dag = build_training_dag("tfjob__x", tenant=tenant, params={})
    pooled = {t.task_id for t in dag.tasks if t.pool == "tfjob-tenant-x"}
    assert pooled == JOB_STEPS
    weights = {t.task_id: t.weight_rule for t in dag.tasks if t.task_id in JOB_STEPS}
    assert set(map(str, weights.values())) == {"upstream"}


@pytest.fixture
def scheduler_session():
    """A session holding a DagRun, as the scheduler's is when it calls the hook (only the
    pool table exists: the hook must read pools and nothing else, without flushing)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.pool import Pool
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    engine = create_engine("sqlite://")
    Pool.__table__.create(engine)
    with Session(engine) as session:
        run = DagRun(dag_id="tfjob_submit__demo", run_id="manual__1", conf={}, run_type="manual")
        session.add(run)
        yield session, run


def test_steps_of_a_tenant_whose_pool_is_missing_run_in_the_default_pool(scheduler_session):
    from airflow.models.pool import Pool

    session, run = scheduler_session
    submit = SimpleNamespace(
        dag_id="tfjob_submit__demo", task_id="launch", pool="tfjob-tenant-demo"
    )
    request = SimpleNamespace(dag_id="tfjob__x", task_id="train", pool="tfjob-tenant-demo")
    for ti in (submit, request):
        task_instance_mutation_hook(task_instance=ti, dag_run=run)
        assert ti.pool == "default_pool", ti  # else they would wait forever

    from sqlalchemy import insert

    with session.no_autoflush:
        session.execute(
            insert(Pool.__table__).values(pool="tfjob-tenant-demo", slots=1, include_deferred=True)
        )
    submit.pool = request.pool = "tfjob-tenant-demo"
    for ti in (submit, request):
        task_instance_mutation_hook(task_instance=ti, dag_run=run)
        assert ti.pool == "tfjob-tenant-demo", ti


@pytest.mark.parametrize(
    ("task_id", "pool"),
    [
        ("validate", "tfjob-tenant-demo"),  # holds no objects: never in a tenant pool
        ("publish", "tfjob-tenant-demo"),
        ("launch", "default_pool"),  # not a tenant pool: nothing to check
        ("launch", "team-pool"),
    ],
)
def test_only_job_steps_in_a_tenant_pool_are_checked(scheduler_session, task_id, pool):
    _session, run = scheduler_session
    ti = SimpleNamespace(dag_id="tfjob__x", task_id=task_id, pool=pool)
    task_instance_mutation_hook(task_instance=ti, dag_run=run)
    assert ti.pool == pool
