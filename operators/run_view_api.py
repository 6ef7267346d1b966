"""The HTTP side of the TFJob tab: a FastAPI app the API server mounts at /tfjob.

`GET /tfjob/runs/{dag_id}/{run_id}` answers the job view as JSON and
`.../view` as the HTML page the tab shows. `.../files` lists the run's
archived files and `.../files/{path}` streams one (operators/run_files.py:
read with the run's own S3 connection, never a presigned URL). Every route
asks Airflow's auth manager whether the caller may read the DAG's XComs (a
bearer token, or the UI's session cookie), exactly as the REST API's own
XCom routes do. Imported only by the API server (plugins/tfjob_plugin.py
builds the app on demand).
"""

from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from sqlalchemy import select

from operators.run_files import (
    RunFilesError,
    RunStorage,
    build_content_disposition,
    check_run_file_path,
    connect_run_storage,
    list_run_files,
    locate_run_storage,
    open_run_file,
)
from operators.run_view import RETURN_VALUE, render_run_page, summarize_run
from tfjob.pipeline_ids import VALIDATE_TASK

CAN_READ_XCOM = [Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.XCOM))]
MAX_ID_CHARS = 250  # Airflow's own limit on dag_id and run_id columns


def check_run_ids(dag_id: str, run_id: str) -> None:
    for name, value in (("dag_id", dag_id), ("run_id", run_id)):
        if len(value) > MAX_ID_CHARS:
            raise HTTPException(400, f"{name} {value[:60]!r}… ({len(value)} characters): at "
                                     f"most {MAX_ID_CHARS} characters are allowed")


def find_dag_run(session: Any, dag_id: str, run_id: str) -> Any:
    """The DAG run; 404 naming both ids when there is none."""
    from airflow.models.dagrun import DagRun

    check_run_ids(dag_id, run_id)
    dag_run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id,
                                                  DagRun.run_id == run_id))
    if dag_run is None:
        raise HTTPException(404, f"DAG {dag_id!r} has no run {run_id!r}")
    return dag_run


def read_run_summary(session: Any, dag_id: str, run_id: str) -> dict[str, Any]:
    """The job view of one run from Airflow's database; 404 when there is none."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel

    dag_run = find_dag_run(session, dag_id, run_id)
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


def read_run_storage(session: Any, dag_id: str, run_id: str) -> RunStorage:
    """Where the run's files are, from the description its validate task pushed; else 404."""
    from airflow.models.xcom import XComModel

    find_dag_run(session, dag_id, run_id)
    row = session.execute(select(XComModel.value).where(
        XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.map_index == -1,
        XComModel.task_id == VALIDATE_TASK, XComModel.key == RETURN_VALUE)).first()
    described = XComModel.deserialize_value(row) if row is not None else None
    if not isinstance(described, dict):
        raise HTTPException(404, f"run {run_id!r} of DAG {dag_id!r} has no files to serve: its "
                                 f"{VALIDATE_TASK} task pushed no run description")
    return locate_run_storage(described, dag_id, run_id)


def answer_run_files_error(_request: Request, error: Exception) -> JSONResponse:
    status = error.status if isinstance(error, RunFilesError) else 500
    return JSONResponse({"detail": str(error)}, status_code=status)


def build_app() -> FastAPI:
    app = FastAPI(title="TF-on-K8s job view", docs_url=None, redoc_url=None)

    @app.get("/runs/{dag_id}/{run_id}", dependencies=CAN_READ_XCOM)
    def get_run(dag_id: str, run_id: str, session: SessionDep) -> dict[str, Any]:
        return read_run_summary(session, dag_id, run_id)

    @app.get("/runs/{dag_id}/{run_id}/view", dependencies=CAN_READ_XCOM,
             response_class=HTMLResponse)
    def view_run(dag_id: str, run_id: str, session: SessionDep) -> str:
        return render_run_page(read_run_summary(session, dag_id, run_id))

    @app.get("/runs/{dag_id}/{run_id}/files", dependencies=CAN_READ_XCOM)
    def list_files(dag_id: str, run_id: str, session: SessionDep,
                   under: str = "") -> dict[str, Any]:
        check_run_file_path(under, directory=True)
        storage = read_run_storage(session, dag_id, run_id)
        return list_run_files(connect_run_storage(storage), storage, under).as_json()

    @app.get("/runs/{dag_id}/{run_id}/files/{path:path}", dependencies=CAN_READ_XCOM,
             response_class=StreamingResponse)
    def download_file(dag_id: str, run_id: str, path: str,
                      session: SessionDep) -> StreamingResponse:
        check_run_file_path(path)
        storage = read_run_storage(session, dag_id, run_id)
        stream = open_run_file(connect_run_storage(storage), storage, path)
        # Bytes, never a page: a file a run wrote must not render in Airflow's origin.
        headers = {"Content-Length": str(stream.size),
                   "Content-Disposition": build_content_disposition(stream.filename),
                   "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
        return StreamingResponse(stream.iter_chunks(), media_type="application/octet-stream",
                                 headers=headers)

    app.add_exception_handler(RunFilesError, answer_run_files_error)
    return app
