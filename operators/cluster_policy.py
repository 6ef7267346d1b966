"""Airflow cluster policy: a job step whose tenant pool does not exist runs in default_pool.

Every training DAG belongs to one tenant, known when it is parsed, and its
job steps (launch .. teardown) name the tenant's pool (`tfjob-tenant-<name>`,
operators/dag_factory.py), which caps the tenant's concurrent jobs. That pool
is made by `tshell tenants apply`; in an Airflow where it was never made, the
scheduler would hold those steps forever, with nothing in the UI saying why.

Airflow 3.3 calls `task_instance_mutation_hook` scheduler-side when it
creates a run's task instances (`DagRun.verify_integrity`, before any is
scheduled) and when it clears one or refreshes it from its task. There a job
step naming a tenant pool this Airflow does not have is moved to
`default_pool` (uncapped), and the scheduler's log says so.

Registered through the `airflow.policy` entry point (pyproject.toml), so
every Airflow process of this installation loads it; it touches nothing but
job steps in tenant pools. The hook runs inside the scheduler's transaction:
one read of the pool table, nothing slow, no write.
"""

from __future__ import annotations

import logging
from typing import Any

import pluggy

from tfjob.pipeline_ids import (
    ARCHIVE_TASK,
    CLUSTERSPEC_TASK,
    LAUNCH_TASK,
    TEARDOWN_TASK,
    TRAIN_TASK,
)

# The steps during which a run's objects may exist: from the launch to the teardown.
JOB_STEPS = frozenset({LAUNCH_TASK, CLUSTERSPEC_TASK, TRAIN_TASK, ARCHIVE_TASK, TEARDOWN_TASK})
TENANT_POOL_PREFIX = "tfjob-tenant-"  # tfjob.tenants.pool_name (not imported: start-up cost)
DEFAULT_POOL = "default_pool"

log = logging.getLogger(__name__)


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
    """Move a job step out of a tenant pool that does not exist (tenants not applied to this
    Airflow), into `default_pool`: uncapped, but it runs, and the scheduler's log says so."""
    if dag_run is None:  # early construction; Airflow calls again with the run
        return
    pool = str(task_instance.pool or "")
    if task_instance.task_id not in JOB_STEPS or not pool.startswith(TENANT_POOL_PREFIX):
        return
    if read_pool_exists(dag_run, pool) is False:
        log.warning(
            "pool %s does not exist (run `tshell tenants apply`): %s.%s of run %s "
            "runs in %s, not capped by its tenant",
            pool,
            task_instance.dag_id,
            task_instance.task_id,
            getattr(dag_run, "run_id", "?"),
            DEFAULT_POOL,
        )
        task_instance.pool = DEFAULT_POOL


# Airflow 3.3 marks its mutation hook "noop" unless an airflow_local_settings module is
# found (settings.import_local_settings), whatever entry-point policies are registered;
# DagRun.verify_integrity then creates task instances without calling any hook. This
# module is loaded by settings.initialize() just before that check: unmark it here.
import airflow.settings  # noqa: E402  (last: the hook above exists when Airflow loads us)

airflow.settings.task_instance_mutation_hook.is_noop = False  # type: ignore[attr-defined]

__all__ = ["JOB_STEPS", "read_pool_exists", "task_instance_mutation_hook"]
