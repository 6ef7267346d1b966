"""The HTTP side of the TFJob tab: a FastAPI app the API server mounts at /tfjob.

Routes under `/runs/{dag_id}/{run_id}`:
- ``            `` the job view as JSON (runview/run.py), its replicas read
  from Kubernetes while the run is active (runview/live.py: at most one
  read per run per 2 s, whatever the number of open tabs), from train's XCom after;
- `/view`        the page (static files in plugins/tfjob_view/) that polls it;
- `/curves`      the scalars of the run's TensorBoard event files in S3, live and
  after (runview/eventcurves.py, cached per run); when they hold none, the
  `TFJOB_METRIC` points of each replica, from the live pods'
  logs while active, from the archived logs' ends after; computed once per run
  and shared by every request (2 s while live, per archive after);
- `/logs/{replica}` a replica's last lines (live, else archived), with a filter;
  every read bounded in bytes (a log is untrusted and may be huge);
- `/cancel`      (POST) tshell cancel's semantics (runview/cancel.py);
- `/files`, `/files/{path}` the run's archived files (runview/files.py: read
  with the run's own S3 connection, never a presigned URL).
`/tenants` and `/tenants/view` are the tenants page (runview/tenants.py).
Every route asks Airflow's auth manager whether the caller may read the DAG's
XComs (a bearer token, or the UI's `_token` cookie), as the REST API's own
XCom routes do; cancel asks for the run's edit permission. Each also holds
the run to its DAG's tenant (runview/db.py `find_tenant_run`): a
run recorded for another tenant than the DAG's now is answered 403. A refused page
(`/view`) is answered as an HTML 403 page, the rest as JSON.

Every Airflow process loads the plugin (plugins/tfjob_plugin.py), which imports this
module; only the API server builds the app. So FastAPI and Airflow's API server (about
1.5 s) are imported when `build_app` runs, and the routes' annotations are evaluated
then, where those names are bound: this module does without
`from __future__ import annotations` (FastAPI reads a route's annotations at run time).
"""

import functools
import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from operators.kubeobjects import list_run_pods
from operators.logreads import read_newest_lines
from operators.replicas import read_replica_status
from operators.settings import KUBERNETES_CONN_ID, LOG_TAIL_MAX_BYTES
from runtime.protocol import MAIN_CONTAINER
from runview import db as run_view_db
from runview.cancel import cancel_run
from runview.eventcurves import EventCurves
from runview.files import (
    RunFileNotFoundError,
    RunFilesError,
    RunStorage,
    build_content_disposition,
    check_run_file_path,
    connect_run_storage,
    list_run_files,
    locate_run_storage,
    open_run_file,
    read_run_file_tail,
)
from runview.live import LiveReads, describe_live_replicas
from runview.logs import (
    ARCHIVED_CURVES_TTL_S,
    DEFAULT_TAIL_LINES,
    MAX_LOG_BYTES,
    MAX_PANE_LOG_BYTES,
    LogRequestError,
    check_log_query,
    check_replica_id,
    collect_curves,
    describe_archive_version,
    replica_of_log_name,
    select_log_lines,
)
from runview.run import order_replicas
from runview.tenants import add_tenant_routes
from tfjob.jsontypes import JsonObject
from tfjob.request.model import Role
from tfjob.runlayout import replica_log_path

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.models.dagbag import DBDagBag
    from fastapi import FastAPI, Request
    from fastapi.params import Depends
    from fastapi.responses import JSONResponse, Response
    from kubernetes import client as k8s
    from sqlalchemy.orm import Session

REPO = Path(__file__).resolve().parent.parent
PAGE_DIR = REPO / "plugins" / "tfjob_view"
# The only files the app serves as assets: name -> file (the chart library from `npm ci`).
ASSETS = {
    "run.css": PAGE_DIR / "run.css",
    "page.js": PAGE_DIR / "page.js",
    "run.js": PAGE_DIR / "run.js",
    "tenants.js": PAGE_DIR / "tenants.js",
    "chart.umd.min.js": REPO / "node_modules" / "chart.js" / "dist" / "chart.umd.min.js",
}
CANCEL_HEADER = "x-tfjob-cancel"  # a cross-site form cannot set it: no CSRF through cookies

# Kept for the tests that replace the database reads (tests/test_run_files.py).
read_run_summary = run_view_db.read_run_summary
read_run_storage = run_view_db.read_run_storage


@functools.cache
def require_xcom_read() -> "list[Depends]":
    """The routes' check: the caller may read the DAG's XComs (once: tests override it)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from fastapi import Depends

    return [Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.XCOM))]


@functools.cache
def require_run_edit() -> "list[Depends]":
    """The cancel's check: the caller may edit the DAG's runs."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from fastapi import Depends

    return [Depends(requires_access_dag(method="PUT", access_entity=DagAccessEntity.RUN))]


@functools.cache
def connect_kubernetes() -> "k8s.CoreV1Api":
    """One client for the API server's life, from the pipeline's Kubernetes connection."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    return KubernetesHook(conn_id=KUBERNETES_CONN_ID).core_v1_client


def read_kubernetes_pods(namespace: str, selector: str) -> list[JsonObject]:
    return list_run_pods(connect_kubernetes(), namespace, selector)


def read_kubernetes_log(namespace: str, pod: str, tail_lines: int) -> str:
    """The pod's last `tail_lines` lines, within LOG_TAIL_MAX_BYTES (operators/logreads.py)."""
    return read_newest_lines(
        connect_kubernetes(), namespace, pod, MAIN_CONTAINER, tail_lines, LOG_TAIL_MAX_BYTES
    )


def is_allowed(user: "BaseUser", method: str, entity: "DagAccessEntity", dag_id: str) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    return get_auth_manager().is_authorized_dag(
        method=method, access_entity=entity, details=DagDetails(id=dag_id), user=user
    )


class RunView:
    """The answers of the routes, around one `LiveReads` shared by every request, and the
    runs' event-file curves (`EventCurves`; without one the curves are TFJOB_METRIC's)."""

    def __init__(self, live: LiveReads, events: EventCurves | None = None) -> None:
        self.live, self.events = live, events

    def live_pods(self, summary: JsonObject) -> list[JsonObject] | None:
        """The run's pods while it is active (None when it is not, or Kubernetes failed)."""
        job = summary["job"]
        if not summary["active"] or not job.get("namespace") or not job.get("run_key"):
            return None
        try:
            return self.live.list_pods(job["namespace"], job["run_key"])
        except Exception as error:  # noqa: BLE001 - the XCom view still answers
            summary["live_error"] = f"Kubernetes could not be read: {type(error).__name__}"
            return None

    def answer_run(self, summary: JsonObject) -> JsonObject:
        pods = self.live_pods(summary)
        if pods:
            summary["replicas"] = order_replicas(describe_live_replicas(pods))
            summary["replicas_from"] = "kubernetes"
        return summary

    def read_log_text(
        self, session: "Session", summary: JsonObject, replica: str
    ) -> tuple[str, str]:
        """(source, text) of a replica's log: its live pod's tail, else its archived log."""
        pods = self.live_pods(summary)
        for status in map(read_replica_status, pods or []):
            if status.replica_id == replica:
                return "live", self.live.read_log_tail(summary["job"]["namespace"], status.pod)
        storage = read_run_storage(session, summary["dag_id"], summary["run_id"])
        try:
            text = read_run_file_tail(
                connect_run_storage(storage), storage, replica_log_path(replica), MAX_PANE_LOG_BYTES
            )
        except RunFileNotFoundError:
            return "none", ""
        return "archive", text

    def answer_curves(self, session: "Session", summary: JsonObject) -> JsonObject:
        """The run's curves: from its event files when they hold any scalar, else from its
        TFJOB_METRIC lines; with where its TensorBoard folder is and the command to open it."""
        storage = find_run_storage(session, summary) if self.events is not None else None
        if storage is None:
            return self.answer_log_curves(session, summary)
        tensorboard = {
            "folder": storage.layout.tensorboard.uri,
            "under": storage.layout.path_of(storage.layout.tensorboard.key),
            "command": f"tshell tensorboard {summary['run_id']}",
            "warm_start_from": (summary.get("warm_start") or {}).get("from_run"),
        }
        try:
            answer = self.read_event_curves(storage, summary)
        except RunFilesError as error:
            answer = {"curves": {}, "events_error": str(error)}
        if not answer["curves"]:  # a program that writes no summaries (yet)
            read = {k: v for k, v in answer.items() if k in ("event_files", "events_error")}
            answer = {**self.answer_log_curves(session, summary), **read}
        return {**answer, "tensorboard": tensorboard}

    def read_event_curves(self, storage: RunStorage, summary: JsonObject) -> JsonObject:
        """The event files' curves, listed at most once per 2 s for every tab (then cached)."""
        assert self.events is not None
        key = (summary["dag_id"], summary["run_id"])
        answer = self.events.find_recent_answer(key)
        if answer is None:
            answer = self.events.read_run(key, connect_run_storage(storage), storage)
        return answer

    def answer_log_curves(self, session: "Session", summary: JsonObject) -> JsonObject:
        """The TFJOB_METRIC curves, computed once per run for every tab (runview/live.py)."""
        pods = self.live_pods(summary)
        if pods:
            namespace = summary["job"]["namespace"]

            def read_live() -> JsonObject:
                logs = {
                    status.replica_id: self.live.read_log_tail(namespace, status.pod)
                    for status in map(read_replica_status, pods)
                    if status.role is not Role.PS
                }
                return {"source": "live", "curves": collect_curves(logs)}

            return self.live.share_read(("curves", namespace, summary["job"]["run_key"]), read_live)
        replicas = [r for r in (replica_of_log_name(uri) for uri in summary["logs"]) if r]
        if not replicas:
            return {"source": "none", "curves": {}}

        def read_archived() -> JsonObject:
            storage = read_run_storage(session, summary["dag_id"], summary["run_id"])
            s3 = connect_run_storage(storage)
            logs = {}
            for replica in replicas:
                try:
                    logs[replica] = read_run_file_tail(
                        s3, storage, replica_log_path(replica), MAX_LOG_BYTES
                    )
                except RunFileNotFoundError:
                    continue
            return {"source": "archive", "curves": collect_curves(logs)}

        key = ("curves", summary["dag_id"], summary["run_id"], describe_archive_version(summary))
        return self.live.share_read(key, read_archived, ttl_s=ARCHIVED_CURVES_TTL_S)


def find_run_storage(session: "Session", summary: JsonObject) -> RunStorage | None:
    """Where the run's files are, None before its validate task described it (or when the
    description names no prefix of this run); held to the DAG's tenant (runview/db.py)."""
    dag_id, run_id = summary["dag_id"], summary["run_id"]
    _dag_run, described = run_view_db.find_tenant_run(session, dag_id, run_id)
    if described is None:
        return None
    try:
        return locate_run_storage(described, dag_id, run_id)
    except RunFilesError:
        return None


@functools.cache
def dag_bag() -> "DBDagBag":
    """The serialized DAGs, as Airflow's own routes read them (cached, one per process)."""
    from airflow.api_fastapi.common.dagbag import create_dag_bag

    return create_dag_bag()


def render_refusal_page(status: int, detail: str, css: str = "../../../static/run.css") -> str:
    title = {401: "401 Not signed in", 403: "403 Forbidden"}.get(status, f"{status} Error")
    return (
        "<!doctype html><html><head><meta charset=utf-8>"
        f"<title>{title}</title><link rel=stylesheet href={css}>"
        f"</head><body><main class=refused><h1>{title}</h1><p>{html.escape(detail)}</p>"
        "</main></body></html>"
    )


async def answer_http_error(request: "Request", error: Exception) -> "Response":
    from fastapi import HTTPException
    from fastapi.exception_handlers import http_exception_handler
    from fastapi.responses import HTMLResponse

    assert isinstance(error, HTTPException)
    if request.url.path.endswith("/view") and error.status_code in (401, 403, 404):
        css = (
            "../static/run.css"
            if request.url.path.endswith("/tenants/view")
            else "../../../static/run.css"
        )
        return HTMLResponse(
            render_refusal_page(error.status_code, str(error.detail), css),
            status_code=error.status_code,
        )
    return await http_exception_handler(request, error)


def answer_run_files_error(_request: "Request", error: Exception) -> "JSONResponse":
    from fastapi.responses import JSONResponse

    status = error.status if isinstance(error, RunFilesError) else 500
    return JSONResponse({"detail": str(error)}, status_code=status)


def answer_log_request_error(_request: "Request", error: Exception) -> "JSONResponse":
    from fastapi.responses import JSONResponse

    return JSONResponse({"detail": str(error)}, status_code=400)


def build_app(live: LiveReads | None = None) -> "FastAPI":
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.common.db.common import SessionDep
    from airflow.api_fastapi.core_api.security import GetUserDep
    from fastapi import FastAPI, Header, HTTPException
    from fastapi.responses import FileResponse, HTMLResponse, StreamingResponse

    app = FastAPI(title="TF-on-K8s job view", docs_url=None, redoc_url=None)
    view = RunView(live or LiveReads(read_kubernetes_pods, read_kubernetes_log), EventCurves())
    app.state.run_view = view
    app.state.tenants_view = add_tenant_routes(app, view.live, connect_kubernetes)

    @app.get("/static/{name}", include_in_schema=False)
    def get_asset(name: str) -> FileResponse:
        path = ASSETS.get(name)
        if path is None or not path.is_file():
            raise HTTPException(
                404, f"no asset {name[:60]!r} (run `make setup` for the chart library)"
            )
        return FileResponse(path, headers={"Cache-Control": "max-age=300"})

    # The routes' annotations stay as they are: FastAPI reads them at runtime (parameters
    # become query, path or body; a return type becomes the response model).
    @app.get("/runs/{dag_id}/{run_id}", dependencies=require_xcom_read())
    def get_run(dag_id: str, run_id: str, session: SessionDep, user: GetUserDep) -> dict[str, Any]:
        summary = view.answer_run(read_run_summary(session, dag_id, run_id))
        summary["can_cancel"] = is_allowed(user, "PUT", DagAccessEntity.RUN, dag_id)
        return summary

    @app.get(
        "/runs/{dag_id}/{run_id}/view",
        dependencies=require_xcom_read(),
        response_class=HTMLResponse,
    )
    def view_run(dag_id: str, run_id: str, session: SessionDep) -> FileResponse:
        run_view_db.find_tenant_run(session, dag_id, run_id)
        return FileResponse(
            PAGE_DIR / "run.html", media_type="text/html", headers={"Cache-Control": "no-store"}
        )

    @app.get("/runs/{dag_id}/{run_id}/curves", dependencies=require_xcom_read())
    def get_curves(dag_id: str, run_id: str, session: SessionDep) -> dict[str, Any]:
        return view.answer_curves(session, read_run_summary(session, dag_id, run_id))

    @app.get("/runs/{dag_id}/{run_id}/logs/{replica}", dependencies=require_xcom_read())
    def get_log(
        dag_id: str,
        run_id: str,
        replica: str,
        session: SessionDep,
        tail: int = DEFAULT_TAIL_LINES,
        filter: str = "",
    ) -> dict[str, Any]:  # noqa: A002
        check_replica_id(replica)
        check_log_query(tail, filter)
        summary = read_run_summary(session, dag_id, run_id)
        source, text = view.read_log_text(session, summary, replica)
        return {"replica": replica, "source": source, "lines": select_log_lines(text, tail, filter)}

    @app.post("/runs/{dag_id}/{run_id}/cancel", dependencies=require_run_edit())
    def post_cancel(
        dag_id: str, run_id: str, session: SessionDep, x_tfjob_cancel: str = Header("")
    ) -> dict[str, Any]:
        if x_tfjob_cancel != "1":
            raise HTTPException(
                400,
                f"header {CANCEL_HEADER}: '1' is required (the page sends "
                "it; a form from another site cannot)",
            )
        return cancel_run(session, dag_bag(), dag_id, run_id)

    @app.get("/runs/{dag_id}/{run_id}/files", dependencies=require_xcom_read())
    def list_files(
        dag_id: str, run_id: str, session: SessionDep, under: str = ""
    ) -> dict[str, Any]:
        check_run_file_path(under, directory=True)
        storage = read_run_storage(session, dag_id, run_id)
        return list_run_files(connect_run_storage(storage), storage, under).as_json()

    @app.get(
        "/runs/{dag_id}/{run_id}/files/{path:path}",
        dependencies=require_xcom_read(),
        response_class=StreamingResponse,
    )
    def download_file(
        dag_id: str, run_id: str, path: str, session: SessionDep
    ) -> StreamingResponse:
        check_run_file_path(path)
        storage = read_run_storage(session, dag_id, run_id)
        stream = open_run_file(connect_run_storage(storage), storage, path)
        # Bytes, never a page: a file a run wrote must not render in Airflow's origin.
        headers = {
            "Content-Length": str(stream.size),
            "Content-Disposition": build_content_disposition(stream.filename),
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-store",
        }
        return StreamingResponse(
            stream.iter_chunks(), media_type="application/octet-stream", headers=headers
        )

    app.add_exception_handler(RunFilesError, answer_run_files_error)
    app.add_exception_handler(LogRequestError, answer_log_request_error)
    app.add_exception_handler(HTTPException, answer_http_error)
    return app
