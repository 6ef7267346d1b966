"""Airflow cluster policy: a `tfjob_submit` run's job steps join its tenant's pool.

The tenant's Airflow pool (`tfjob-tenant-<name>`, docs/tenants.md) caps its
concurrent jobs. A request file's DAG knows its tenant when it is parsed, so
`operators.dag_factory` gives its job steps the pool directly. `tfjob_submit`
serves every tenant and learns the tenant only from the trigger conf, which no
parse-time argument can see.

Airflow 3.3 calls `task_instance_mutation_hook` scheduler-side with the DagRun
(hence its `conf`) when it creates a run's task instances
(`DagRun.verify_integrity`, before any is scheduled) and when it clears one or
refreshes it from its task. There the job steps of a `tfjob_submit` run get
the pool of `conf["tenant"]`. A tenant that is not a valid name leaves the
pool alone: `validate` refuses the run, so those steps never run. A tenant
pool that this Airflow does not have (tenants not applied) would hold any
step forever: such steps, of request DAGs too, fall back to `default_pool`
with a warning.

Registered through the `airflow.policy` entry point (pyproject.toml), so
every Airflow process of this installation loads it; it touches nothing but
`tfjob_submit`'s job steps. The hook runs inside the scheduler's transaction:
no database access and nothing slow here.
"""

from __future__ import annotations

import logging
from typing import Any

import pluggy

from operators.settings import (
    ARCHIVE_TASK,
    CLUSTERSPEC_TASK,
    LAUNCH_TASK,
    TEARDOWN_TASK,
    TRAIN_TASK,
)

# Kept equal to operators.dag_factory.SUBMIT_DAG_ID (importing it would load the SDK's DAG
# machinery into every Airflow process at start-up); a test checks both.
SUBMIT_DAG_ID = "tfjob_submit"
# The steps during which a run's objects may exist: from the launch to the teardown.
JOB_STEPS = frozenset({LAUNCH_TASK, CLUSTERSPEC_TASK, TRAIN_TASK, ARCHIVE_TASK, TEARDOWN_TASK})
TENANT_CONF_KEY = "tenant"
TENANT_POOL_PREFIX = "tfjob-tenant-"  # tfjob.tenants.pool_name
DEFAULT_POOL = "default_pool"

log = logging.getLogger(__name__)


def choose_submit_pool(dag_id: str, task_id: str, conf: Any) -> str | None:
    """The pool a task instance of `dag_id` should use for a run with `conf`; None: leave it."""
    if dag_id != SUBMIT_DAG_ID or task_id not in JOB_STEPS or not isinstance(conf, dict):
        return None
    from tfjob.request import MAX_TENANT_LENGTH
    from tfjob.request_checks import DNS_LABEL_PATTERN
    from tfjob.tenants import pool_name

    tenant = conf.get(TENANT_CONF_KEY)
    if not isinstance(tenant, str) or len(tenant) > MAX_TENANT_LENGTH or \
            not DNS_LABEL_PATTERN.match(tenant):
        return None
    return pool_name(tenant)


# airflow.policies.hookimpl, made here: importing airflow first would make a process that
# imports this module before Airflow register it half-loaded (Airflow's start-up loads the
# entry point), without its hook.
hookimpl = pluggy.HookimplMarker("airflow.policy")
def read_pool_exists(dag_run: Any, name: str) -> bool | None:
    """Does Airflow have the pool `name`? Asked in the scheduler's own transaction (the
    session `dag_run` belongs to; no commit, no flush); None when there is no session."""
    from sqlalchemy import select
    from sqlalchemy.exc import NoInspectionAvailable
    from sqlalchemy.orm import object_session
    from sqlalchemy.orm.exc import UnmappedInstanceError

    try:
        session = object_session(dag_run)
    except (NoInspectionAvailable, UnmappedInstanceError):
        return None
    if session is None:
        return None
    from airflow.models.pool import Pool

    with session.no_autoflush:
        return session.scalar(select(Pool.id).where(Pool.pool == name)) is not None


@hookimpl
def task_instance_mutation_hook(task_instance: Any, dag_run: Any) -> None:
    """Put a `tfjob_submit` run's job steps in the pool of the run's tenant.

    A tenant pool that does not exist (tenants not applied to this Airflow) would
    keep the steps waiting forever: they then run in `default_pool`, uncapped, and
    the scheduler's log says so. This holds for request DAGs' steps too.
    """
    if dag_run is None:  # early construction; Airflow calls again with the run
        return
    wanted = choose_submit_pool(task_instance.dag_id, task_instance.task_id, dag_run.conf)
    if wanted is None and task_instance.task_id in JOB_STEPS and \
            str(task_instance.pool or "").startswith(TENANT_POOL_PREFIX):
        wanted = task_instance.pool  # a request DAG's pool, named when it was parsed
    if wanted is None:
        return
    if read_pool_exists(dag_run, wanted) is False:
        log.warning("pool %s does not exist (run `tshell tenants apply`): %s.%s of run %s "
                    "runs in %s, not capped by its tenant", wanted, task_instance.dag_id,
                    task_instance.task_id, getattr(dag_run, "run_id", "?"), DEFAULT_POOL)
        task_instance.pool = DEFAULT_POOL
        return
    task_instance.pool = wanted


# Airflow 3.3 marks its mutation hook "noop" unless an airflow_local_settings module is
# found (settings.import_local_settings), whatever entry-point policies are registered;
# DagRun.verify_integrity then creates task instances without calling any hook. This
# module is loaded by settings.initialize() just before that check: unmark it here.
import airflow.settings  # noqa: E402  (last: the hook above exists when Airflow loads us)

airflow.settings.task_instance_mutation_hook.is_noop = False  # type: ignore[attr-defined]

__all__ = ["JOB_STEPS", "SUBMIT_DAG_ID", "choose_submit_pool", "task_instance_mutation_hook"]
