"""What the TFJob tab reads from Airflow's database: the run, its task instances, its XComs.

Why this exists: the routes (runview/api.py) and the cancel
(runview/cancel.py) need the same lookups, each a 404 naming the
ids when the run is not there or not a training run. Imported only by the
API server.

Every lookup that serves a run's data or acts on it also holds the run to its
DAG's tenant (`check_run_tenant`): the tenant `validate` recorded in the run's
description must be the tenant the DAG belongs to now (its `tenant:` tag,
which decides who may read it). Airflow's rights are per DAG; a run made when
the DAG was another tenant's (its request file changed hands) keeps that
tenant's prefixes and connection, and is answered 403, never served.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from sqlalchemy import select

from runview.files import RunStorage, locate_run_storage
from runview.run import RETURN_VALUE, RunTimes, TaskTimes, summarize_run
from tfjob.jsontypes import JsonObject
from tfjob.pipeline_ids import VALIDATE_TASK, tenant_of_submit_dag, tenant_of_tags
from tfjob.records.run import PartialRunDescription

if TYPE_CHECKING:
    from airflow.models.dagrun import DagRun
    from fastapi import HTTPException
    from sqlalchemy.orm import Session

MAX_ID_CHARS = 250  # Airflow's own limit on dag_id and run_id columns


def build_http_error(status: int, detail: str) -> HTTPException:
    """FastAPI's HTTPException: the routes answer it as JSON, a page (`/view`) as HTML."""
    from fastapi import HTTPException

    return HTTPException(status, detail)


def check_run_ids(dag_id: str, run_id: str) -> None:
    for name, value in (("dag_id", dag_id), ("run_id", run_id)):
        if len(value) > MAX_ID_CHARS:
            raise build_http_error(
                400,
                f"{name} {value[:60]!r}… ({len(value)} characters): at "
                f"most {MAX_ID_CHARS} characters are allowed",
            )


def find_dag_run(session: Session, dag_id: str, run_id: str) -> DagRun:
    """The DAG run; 404 naming both ids when there is none."""
    from airflow.models.dagrun import DagRun

    check_run_ids(dag_id, run_id)
    dag_run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if dag_run is None:
        raise build_http_error(404, f"DAG {dag_id!r} has no run {run_id!r}")
    return dag_run


def read_dag_tenant(session: Session, dag_id: str) -> str | None:
    """The tenant the DAG belongs to now: its `tenant:` tag (and its id, for a submit DAG)."""
    from airflow.models.dag import DagTag

    tenant = tenant_of_tags(session.scalars(select(DagTag.name).where(DagTag.dag_id == dag_id)))
    by_id = tenant_of_submit_dag(dag_id)
    return None if by_id is not None and by_id != tenant else tenant


def read_run_description(
    session: Session, dag_id: str, run_id: str
) -> PartialRunDescription | None:
    """The run description validate pushed (operators/runinfo.py), None when there is none."""
    from airflow.models.xcom import XComModel

    row = session.execute(
        select(XComModel.value).where(
            XComModel.dag_id == dag_id,
            XComModel.run_id == run_id,
            XComModel.map_index == -1,
            XComModel.task_id == VALIDATE_TASK,
            XComModel.key == RETURN_VALUE,
        )
    ).first()
    described = XComModel.deserialize_value(row) if row is not None else None
    return PartialRunDescription.from_payload(described) if isinstance(described, dict) else None


def check_run_tenant(
    dag_id: str, run_id: str, dag_tenant: str | None, described: PartialRunDescription | None
) -> None:
    """403 unless the tenant recorded for the run is the DAG's tenant now.

    A run without a description (validate has not run, or failed) has nothing
    recorded and nothing of a tenant to serve; the caller decides what it shows.
    """
    if described is None:
        return
    recorded = described.tenant
    if recorded is not None and recorded == dag_tenant:
        return
    now = f"tenant {dag_tenant!r}" if dag_tenant else "no tenant"
    raise build_http_error(
        403,
        f"run {run_id!r} of DAG {dag_id!r} was recorded for tenant {recorded!r}, but the DAG "
        f"belongs to {now} now: the run's data is served only while both agree",
    )


def find_tenant_run(
    session: Session, dag_id: str, run_id: str
) -> tuple[DagRun, PartialRunDescription | None]:
    """(the DAG run, its description or None), held to the DAG's tenant; 404 or 403."""
    dag_run = find_dag_run(session, dag_id, run_id)
    described = read_run_description(session, dag_id, run_id)
    check_run_tenant(dag_id, run_id, read_dag_tenant(session, dag_id), described)
    return dag_run, described


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def read_run_summary(session: Session, dag_id: str, run_id: str) -> JsonObject:
    """The job view of one run from Airflow's database; 404 when there is none."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel

    dag_run, _described = find_tenant_run(session, dag_id, run_id)
    rows = session.execute(
        select(XComModel.task_id, XComModel.key, XComModel.value).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.map_index == -1
        )
    )
    xcoms = {(row.task_id, row.key): XComModel.deserialize_value(row) for row in rows}
    instances = session.execute(
        select(
            TaskInstance.task_id,
            TaskInstance.state,
            TaskInstance.start_date,
            TaskInstance.end_date,
            TaskInstance.try_number,
        ).where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id == run_id,
            TaskInstance.map_index == -1,
        )
    ).all()
    tasks = {
        ti.task_id: TaskTimes(
            ti.state and str(ti.state), _iso(ti.start_date), _iso(ti.end_date), ti.try_number
        )
        for ti in instances
    }
    conf = dag_run.conf if isinstance(dag_run.conf, dict) else None
    run = RunTimes(
        dag_run.state and str(dag_run.state), _iso(dag_run.start_date), _iso(dag_run.end_date), conf
    )
    summary = summarize_run(dag_id, run_id, run, xcoms, tasks)
    if summary is None:
        raise build_http_error(
            404,
            f"run {run_id!r} of DAG {dag_id!r} is not a training run "
            "(its validate task pushed no run description)",
        )
    return summary


def read_run_storage(session: Session, dag_id: str, run_id: str) -> RunStorage:
    """Where the run's files are, from the description its validate task pushed; else 404."""
    _dag_run, described = find_tenant_run(session, dag_id, run_id)
    if described is None:
        raise build_http_error(
            404,
            f"run {run_id!r} of DAG {dag_id!r} has no files to serve: its "
            f"{VALIDATE_TASK} task pushed no run description",
        )
    return locate_run_storage(described, dag_id, run_id)
