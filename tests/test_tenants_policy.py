"""The cluster policy that puts tfjob_submit's job steps in the pool of the run's tenant."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from operators.cluster_policy import (
    JOB_STEPS,
    SUBMIT_DAG_ID,
    choose_submit_pool,
    task_instance_mutation_hook,
)


@pytest.mark.parametrize(("dag_id", "task_id", "conf", "pool"), [
    ("tfjob_submit", "launch", {"tenant": "research"}, "tfjob-tenant-research"),
    ("tfjob_submit", "teardown", {"tenant": "research"}, "tfjob-tenant-research"),
    ("tfjob_submit", "validate", {"tenant": "research"}, None),   # holds no objects
    ("tfjob_submit", "publish", {"tenant": "research"}, None),
    ("tfjob__digits", "launch", {"tenant": "research"}, None),    # pool set when parsed
    ("tfjob_submit", "launch", {}, None),                         # validate refuses it
    ("tfjob_submit", "launch", {"tenant": "Not A Name"}, None),
    ("tfjob_submit", "launch", {"tenant": "x" * 58}, None),
    ("tfjob_submit", "launch", None, None),
])
def test_only_submit_job_steps_of_a_valid_tenant_get_its_pool(dag_id, task_id, conf, pool):
    assert choose_submit_pool(dag_id, task_id, conf) == pool


def test_the_hook_sets_the_pool_when_airflow_gives_the_run():
    ti = SimpleNamespace(dag_id="tfjob_submit", task_id="train", pool="default_pool")
    task_instance_mutation_hook(task_instance=ti, dag_run=None)
    assert ti.pool == "default_pool"
    task_instance_mutation_hook(task_instance=ti,
                                dag_run=SimpleNamespace(conf={"tenant": "demo"}))
    assert ti.pool == "tfjob-tenant-demo"


def test_the_policy_is_registered_and_airflow_calls_it_when_creating_task_instances():
    import airflow.settings
    from airflow.settings import get_policy_plugin_manager

    impls = get_policy_plugin_manager().hook.task_instance_mutation_hook.get_hookimpls()
    assert "tfjob" in [impl.plugin_name for impl in impls], "pip install -e . registers it"
    # else DagRun.verify_integrity would create task instances without calling any hook
    assert airflow.settings.task_instance_mutation_hook.is_noop is False


def test_the_policy_and_the_dag_factory_agree_on_the_job_steps():
    from operators.dag_factory import SUBMIT_DAG_ID as FACTORY_SUBMIT_DAG_ID
    from operators.dag_factory import build_training_dag

    assert SUBMIT_DAG_ID == FACTORY_SUBMIT_DAG_ID
    dag = build_training_dag("tfjob__x", params={}, pool="tfjob-tenant-x")
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
        run = DagRun(dag_id="tfjob_submit", run_id="manual__1", conf={"tenant": "demo"},
                     run_type="manual")
        session.add(run)
        yield session, run


def test_steps_of_a_tenant_whose_pool_is_missing_run_in_the_default_pool(scheduler_session):
    from airflow.models.pool import Pool

    session, run = scheduler_session
    submit = SimpleNamespace(dag_id="tfjob_submit", task_id="launch", pool="default_pool")
    request = SimpleNamespace(dag_id="tfjob__x", task_id="train", pool="tfjob-tenant-demo")
    for ti in (submit, request):
        task_instance_mutation_hook(task_instance=ti, dag_run=run)
        assert ti.pool == "default_pool", ti  # else they would wait forever

    from sqlalchemy import insert

    with session.no_autoflush:
        session.execute(insert(Pool.__table__).values(pool="tfjob-tenant-demo", slots=1,
                                                      include_deferred=True))
    submit.pool, request.pool = "default_pool", "tfjob-tenant-demo"
    for ti in (submit, request):
        task_instance_mutation_hook(task_instance=ti, dag_run=run)
        assert ti.pool == "tfjob-tenant-demo", ti
