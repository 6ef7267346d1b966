"""The HTTP side of the TFJob tab: a FastAPI app the API server mounts at /tfjob.

`GET /tfjob/runs/{dag_id}/{run_id}` answers the job view as JSON and
`.../view` as the HTML page the tab shows. Both ask Airflow's auth manager
whether the caller may read the DAG's XComs (a bearer token, or the UI's
session cookie), exactly as the REST API's own XCom routes do. Imported only
by the API server (plugins/tfjob_plugin.py builds the app on demand).
"""

from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse
from sqlalchemy import select

from operators.run_view import render_run_page, summarize_run

CAN_READ_XCOM = [Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.XCOM))]


def read_run_summary(session: Any, dag_id: str, run_id: str) -> dict[str, Any]:
    """The job view of one run from Airflow's database; 404 when there is none."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel

    dag_run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id,
                                                  DagRun.run_id == run_id))
    if dag_run is None:
        raise HTTPException(404, f"DAG {dag_id!r} has no run {run_id!r}")
    rows = session.execute(select(XComModel.task_id, XComModel.key, XComModel.value).where(
        XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.map_index == -1))
    xcoms = {(row.task_id, row.key): XComModel.deserialize_value(row) for row in rows}
    states = dict(session.execute(select(TaskInstance.task_id, TaskInstance.state).where(
        TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id,
        TaskInstance.map_index == -1)).all())
    summary = summarize_run(dag_id, run_id, dag_run.state, xcoms, states)
    if summary is None:
        raise HTTPException(404, f"run {run_id!r} of DAG {dag_id!r} is not a training run "
                                 "(its validate task pushed no run description)")
    return summary


def build_app() -> FastAPI:
    app = FastAPI(title="TF-on-K8s job view", docs_url=None, redoc_url=None)

    @app.get("/runs/{dag_id}/{run_id}", dependencies=CAN_READ_XCOM)
    def get_run(dag_id: str, run_id: str, session: SessionDep) -> dict[str, Any]:
        return read_run_summary(session, dag_id, run_id)

    @app.get("/runs/{dag_id}/{run_id}/view", dependencies=CAN_READ_XCOM,
             response_class=HTMLResponse)
    def view_run(dag_id: str, run_id: str, session: SessionDep) -> str:
        return render_run_page(read_run_summary(session, dag_id, run_id))

    return app
