"""The tenants page's routes: `/tfjob/tenants` (JSON) and `/tfjob/tenants/view` (the page).

Why this exists: a person sharing the cluster wants one page per tenant they act
for: what runs now, how much of the quota and which nodes and GPUs it holds,
how many of its job slots are taken. The cards are computed by the pure
`tfjob.tenants.usage`; this module gathers what it needs:
- which tenants the caller may see: Airflow's auth manager says which DAGs the
  caller may read, and each DAG's tenant comes from its `tenant:<name>` tag (the
  DAG decides, docs/architecture.md); nothing in the request names a tenant;
- the active runs of those DAGs (queued or running) from Airflow's database;
- the tfjob pods and the ResourceQuotas from Kubernetes, each listed once for
  all namespaces through the API server's one `LiveReads` (runview/live.py):
  at most one read per kind per 2 s, whatever the number of open pages.
A caller who may see no tenant gets an empty list, not another tenant's card.
FastAPI and Airflow's API server are imported when the routes are added (runview/api.py
says why); the routes' annotations are evaluated then, so this module does without
`from __future__ import annotations`.
"""

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from operators.kubeobjects import to_plain
from runview.live import LiveReads
from tfjob import naming
from tfjob.jsontypes import JsonObject
from tfjob.pipeline_ids import tenant_of_tags
from tfjob.tenants import load_tenants
from tfjob.tenants.objects import QUOTA_NAME
from tfjob.tenants.usage import ActiveRun, summarize_tenant

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
    from fastapi import FastAPI
    from kubernetes import client as k8s
    from sqlalchemy.orm import Session

PAGE = Path(__file__).resolve().parent.parent / "plugins" / "tfjob_view" / "tenants.html"
ACTIVE_STATES = ("queued", "running")
TFJOB_PODS = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"


def list_all_tfjob_pods(api: "k8s.CoreV1Api") -> list[JsonObject]:
    """Every pod the pipeline made, in every namespace, as the API's dicts."""
    return [
        to_plain(api, pod)
        for pod in api.list_pod_for_all_namespaces(label_selector=TFJOB_PODS).items
    ]


def list_all_tenant_quotas(api: "k8s.CoreV1Api") -> dict[str, JsonObject]:
    """namespace -> the tenant ResourceQuota (`tfjob-quota`) there, as the API's dicts."""
    quotas = {}
    for quota in api.list_resource_quota_for_all_namespaces().items:
        plain = to_plain(api, quota)
        meta = plain.get("metadata") or {}
        if meta.get("name") == QUOTA_NAME:
            quotas[str(meta.get("namespace"))] = plain
    return quotas


def read_visible_tenant_dags(session: "Session", user: "BaseUser") -> dict[str, set[str]]:
    """tenant -> the DAG ids of that tenant the caller may read (Airflow's auth manager)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.models.dag import DagTag

    readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session)
    if not readable:
        return {}
    tags: dict[str, list[str]] = {}
    for dag_id, tag in session.execute(
        select(DagTag.dag_id, DagTag.name).where(DagTag.dag_id.in_(readable))
    ):
        tags.setdefault(dag_id, []).append(tag)
    visible: dict[str, set[str]] = {}
    for dag_id, names in tags.items():
        tenant = tenant_of_tags(names)
        if tenant:
            visible.setdefault(tenant, set()).add(dag_id)
    return visible


def read_active_runs(session: "Session", dag_ids: set[str]) -> list[ActiveRun]:
    from airflow.models.dagrun import DagRun

    if not dag_ids:
        return []
    rows = session.execute(
        select(DagRun.dag_id, DagRun.run_id, DagRun.state, DagRun.start_date).where(
            DagRun.dag_id.in_(dag_ids), DagRun.state.in_(ACTIVE_STATES)
        )
    )
    return [
        ActiveRun(
            row.dag_id,
            row.run_id,
            str(row.state),
            row.start_date.isoformat() if row.start_date else None,
        )
        for row in rows
    ]


class TenantsView:
    """The tenants page's answer, around the API server's shared `LiveReads`."""

    def __init__(self, live: LiveReads, connect: Callable[[], "k8s.CoreV1Api"]) -> None:
        self.live, self.connect = live, connect

    def read_cluster(self) -> tuple[list[JsonObject], dict[str, JsonObject], str | None]:
        """(pods, quotas by namespace, error): at most one listing of each per 2 s."""
        try:
            pods = self.live.share_read(
                ("tenants", "pods"), lambda: list_all_tfjob_pods(self.connect())
            )
            quotas = self.live.share_read(
                ("tenants", "quotas"), lambda: list_all_tenant_quotas(self.connect())
            )
        except Exception as error:  # noqa: BLE001 - Airflow's runs still answer
            return [], {}, f"Kubernetes could not be read: {type(error).__name__}"
        return pods, quotas, None

    def answer(self, session: "Session", user: "BaseUser") -> JsonObject:
        visible = read_visible_tenant_dags(session, user)
        config = load_tenants()
        tenants = [t for t in config.tenants if t.name in visible]
        if not tenants:
            return {"tenants": [], "kubernetes_error": None}
        pods, quotas, error = self.read_cluster()
        runs = read_active_runs(session, set().union(*visible.values()))
        cards = []
        for tenant in tenants:
            own_runs = [run for run in runs if run.dag_id in visible[tenant.name]]
            own_pods = [
                pod
                for pod in pods
                if (pod.get("metadata") or {}).get("namespace") == tenant.namespace
            ]
            cards.append(summarize_tenant(tenant, quotas.get(tenant.namespace), own_pods, own_runs))
        return {"tenants": cards, "kubernetes_error": error}


def add_tenant_routes(
    app: "FastAPI", live: LiveReads, connect: Callable[[], "k8s.CoreV1Api"]
) -> TenantsView:
    """The tenants routes on the job view's app (runview/api.py)."""
    from airflow.api_fastapi.common.db.common import SessionDep
    from airflow.api_fastapi.core_api.security import GetUserDep
    from fastapi.responses import FileResponse, HTMLResponse

    view = TenantsView(live, connect)

    @app.get("/tenants")
    def get_tenants(session: SessionDep, user: GetUserDep) -> dict[str, Any]:
        return view.answer(session, user)

    @app.get("/tenants/view", response_class=HTMLResponse)
    def view_tenants(user: GetUserDep) -> FileResponse:  # only signed-in users get the page
        return FileResponse(PAGE, media_type="text/html", headers={"Cache-Control": "no-store"})

    return view
