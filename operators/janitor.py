"""The janitor: removes Kubernetes objects whose Airflow run is over or gone.

Teardown removes a run's objects when the run ends, but not when the run
never gets there: a worker killed mid-task, a DagRun deleted from Airflow
while its pods live, a teardown that timed out. Kubernetes keeps those pods
(and their GPUs and quota) forever. Every object of a run carries the run's
labels and the `tfjob.io/dag-id` / `tfjob.io/run-id` annotations
(docs/architecture.md), so the janitor can ask Airflow about each run:

- DagRun running or queued: keep (the run's own teardown is responsible);
- DagRun ended (success/failed): delete (its teardown did not finish the job);
- DagRun no longer exists: delete;
- annotations missing: keep, and say so (we cannot tell whose it is).

Objects are grouped by their run key *and* the run their own annotations name:
of two runs whose keys collide, each is judged by its own DagRun.

Only objects labelled `app.kubernetes.io/managed-by=tfjob` *and* carrying a
`tfjob.io/run` label are considered: tenant objects (namespace, quota, ...)
have no run label and are never touched. In Airflow it looks in the namespaces
of the tenants file (per-namespace RBAC suffices). Deletes accept 404.

Between the list and the delete, a run may be cleared and relaunched, its
fresh objects taking the same names. So every delete carries the uid the list
saw (`preconditions.uid`): the API server then deletes only that object, and
answers 409 Conflict for a newer one of the same name, which the janitor
skips and reports ("not ours any more").
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from operators.kubeobjects import RUN_KINDS, RunKind
from operators.settings import KUBERNETES_CONN_ID
from tenancy.apply import Clients
from tfjob import naming
from tfjob.tenants import load_tenants

if TYPE_CHECKING:  # the Task SDK: the janitor's DAG task only
    from airflow.sdk.types import RuntimeTaskInstanceProtocol

log = logging.getLogger(__name__)

RUN_OBJECTS_SELECTOR = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY},{naming.LABEL_RUN}"
# Pods get a short grace: the run is over, nothing waits for their output.
JANITOR_GRACE_SECONDS = 5
# A read: no lock to wait for, but a busy Airflow can take a while to answer.
REST_TIMEOUT_S = 60.0


class RunState(StrEnum):
    """What Airflow says about the run that owns some objects."""

    ACTIVE = "active"
    ENDED = "ended"
    MISSING = "missing"


class Verdict(StrEnum):
    KEEP = "keep"
    DELETE = "delete"


# Airflow DagRunState values.
ACTIVE_STATES = frozenset({"queued", "running"})
ENDED_STATES = frozenset({"success", "failed"})


def classify_dag_run_state(state: object) -> RunState:
    """A DagRun's state (None: no such run) as the janitor sees it."""
    if state is None:
        return RunState.MISSING
    # The Task SDK's DagRunState is a (str, Enum): str() of it is "DagRunState.SUCCESS".
    value = str(getattr(state, "value", state)).lower()
    return RunState.ENDED if value in ENDED_STATES else RunState.ACTIVE


# Every kind of object a run has, by name (the one list: operators/kubeobjects.py).
RUN_KINDS_BY_NAME: dict[str, RunKind] = {run_kind.kind: run_kind for run_kind in RUN_KINDS}


@dataclass(frozen=True)
class RunObject:
    kind: str
    namespace: str
    name: str
    uid: str | None = None  # as listed: the delete applies to this object only

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass
class RunGroup:
    """The objects of one run, with the Airflow run they name."""

    namespace: str
    run_key: str
    dag_id: str | None
    run_id: str | None
    objects: list[RunObject] = field(default_factory=list)


@dataclass(frozen=True)
class Decision:
    group: RunGroup
    verdict: Verdict
    reason: str


def decide(group: RunGroup, state: RunState | None) -> Decision:
    """Keep or delete one run's objects, given what Airflow says (None: not asked)."""
    if not group.dag_id or not group.run_id:
        return Decision(
            group,
            Verdict.KEEP,
            "no tfjob.io/dag-id or tfjob.io/run-id "
            "annotation: cannot tell which Airflow run owns it",
        )
    where = f"dag {group.dag_id} run {group.run_id}"
    if state is RunState.MISSING:
        return Decision(group, Verdict.DELETE, f"{where} no longer exists in Airflow")
    if state is RunState.ENDED:
        return Decision(group, Verdict.DELETE, f"{where} has ended")
    return Decision(group, Verdict.KEEP, f"{where} is still active")


class RunStateLookup(Protocol):
    def __call__(self, dag_id: str, run_id: str) -> RunState: ...


def _list_kind(clients: Clients, run_kind: RunKind, namespace: str | None) -> list[object]:
    api = getattr(clients, run_kind.api)
    kind = run_kind.kind
    try:
        if namespace is None:
            return getattr(api, run_kind.list_all)(label_selector=RUN_OBJECTS_SELECTOR).items
        return getattr(api, run_kind.list)(namespace, label_selector=RUN_OBJECTS_SELECTOR).items
    except ApiException as exc:
        if exc.status == 404 and namespace is not None and kind != "NetworkPolicy":
            return []  # the tenant's namespace does not exist (yet)
        if exc.status == 404:  # the cluster does not serve this kind
            log.info("janitor: the cluster does not serve %s; skipped", kind)
            return []
        raise


def collect_run_groups(clients: Clients, namespaces: Iterable[str] | None = None) -> list[RunGroup]:
    """Every run that still has objects, with those objects, sorted by namespace and run.

    `namespaces`: where to look (the tenants' namespaces, which per-namespace RBAC
    allows); None: every namespace (needs cluster-wide list rights).
    """
    groups: dict[tuple[str, str, str, str], RunGroup] = {}
    places: list[str | None] = list(namespaces) if namespaces is not None else [None]
    for run_kind in RUN_KINDS:
        for item in (found for place in places for found in _list_kind(clients, run_kind, place)):
            meta = item.metadata
            labels = meta.labels or {}
            annotations = meta.annotations or {}
            dag_id = annotations.get(naming.ANNOTATION_DAG_ID)
            run_id = annotations.get(naming.ANNOTATION_RUN_ID)
            # Each object goes by its own annotations: two runs whose keys collide are two
            # groups, and the end of one never deletes the other's objects.
            key = (meta.namespace, labels.get(naming.LABEL_RUN, ""), dag_id or "", run_id or "")
            group = groups.setdefault(key, RunGroup(meta.namespace, key[1], dag_id, run_id))
            group.objects.append(RunObject(run_kind.kind, meta.namespace, meta.name, meta.uid))
    return [groups[key] for key in sorted(groups)]


def build_delete_options(obj: RunObject) -> k8s.V1DeleteOptions:
    """Delete this object only (the uid it was listed with); pods with the janitor's grace."""
    return k8s.V1DeleteOptions(
        grace_period_seconds=JANITOR_GRACE_SECONDS if obj.kind == "Pod" else None,
        preconditions=k8s.V1Preconditions(uid=obj.uid) if obj.uid else None,
    )


def delete_objects(
    clients: Clients, objects: Iterable[RunObject], skipped: list[RunObject] | None = None
) -> list[RunObject]:
    """Delete each object (404 is fine: someone was faster); return those we deleted.

    An object recreated under the same name since it was listed (409 Conflict:
    its uid differs) is not ours any more: it is left alone, logged, and added
    to `skipped` when given.
    """
    deleted = []
    for obj in objects:
        run_kind = RUN_KINDS_BY_NAME[obj.kind]
        delete = getattr(getattr(clients, run_kind.api), run_kind.delete)
        try:
            delete(obj.name, obj.namespace, body=build_delete_options(obj))
        except ApiException as exc:
            if exc.status == 404:
                continue
            if exc.status == 409:
                log.info(
                    "janitor: %s was recreated since it was listed (uid %s): not ours "
                    "any more; skipped",
                    obj.describe(),
                    obj.uid,
                )
                if skipped is not None:
                    skipped.append(obj)
                continue
            raise
        deleted.append(obj)
    return deleted


@dataclass
class SweepReport:
    decisions: list[Decision]
    deleted: list[RunObject]
    # Recreated under the same name between the list and the delete: left alone.
    skipped: list[RunObject] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        for decision in self.decisions:
            names = ", ".join(o.describe() for o in decision.group.objects)
            out.append(
                f"{decision.verdict.value} run {decision.group.run_key} in "
                f"{decision.group.namespace}: {decision.reason}: {names}"
            )
        out.extend(
            f"skipped {obj.describe()}: recreated since it was listed, not ours any more"
            for obj in self.skipped
        )
        return out


def sweep(
    clients: Clients,
    lookup: RunStateLookup,
    dry_run: bool = False,
    namespaces: Iterable[str] | None = None,
) -> SweepReport:
    """Find every run's objects (in `namespaces`, None: all), ask Airflow about each run
    once, delete what is over."""
    decisions = []
    states: dict[tuple[str, str], RunState] = {}
    for group in collect_run_groups(clients, namespaces):
        state = None
        if group.dag_id and group.run_id:
            key = (group.dag_id, group.run_id)
            if key not in states:
                states[key] = lookup(group.dag_id, group.run_id)
            state = states[key]
        decisions.append(decide(group, state))
    deleted: list[RunObject] = []
    skipped: list[RunObject] = []
    for decision in decisions:
        if decision.verdict is Verdict.DELETE and not dry_run:
            gone = delete_objects(clients, decision.group.objects, skipped)
            deleted.extend(gone)
            log.info(
                "janitor: removed %s (%s)",
                ", ".join(o.describe() for o in gone) or "nothing (already gone, or recreated)",
                decision.reason,
            )
        else:
            log.info(
                "janitor: %s run %s in %s (%s)",
                "would remove" if decision.verdict is Verdict.DELETE else "kept",
                decision.group.run_key,
                decision.group.namespace,
                decision.reason,
            )
    return SweepReport(decisions, deleted, skipped)


# --- asking Airflow -----------------------------------------------------------------------


def lookup_from_task_instance(ti: RuntimeTaskInstanceProtocol) -> RunStateLookup:
    """Inside an Airflow task: the Task SDK's DagRun queries (no database access needed)."""

    def lookup(dag_id: str, run_id: str) -> RunState:
        count = ti.get_dr_count(dag_id=dag_id, run_ids=[run_id])
        if not count:
            return RunState.MISSING
        state = ti.get_dagrun_state(dag_id=dag_id, run_id=run_id)
        log.info("janitor: Airflow has dag %s run %s in state %r", dag_id, run_id, state)
        return classify_dag_run_state(state)

    return lookup


def lookup_from_rest(
    base_url: str, token: Callable[[], str], timeout: float = REST_TIMEOUT_S
) -> RunStateLookup:
    """Outside Airflow: `GET /api/v2/dags/{dag_id}/dagRuns/{run_id}` (404: missing)."""

    def lookup(dag_id: str, run_id: str) -> RunState:
        path = (
            f"/api/v2/dags/{urllib.parse.quote(dag_id, safe='')}/dagRuns/"
            f"{urllib.parse.quote(run_id, safe='')}"
        )
        request = urllib.request.Request(
            base_url.rstrip("/") + path,
            headers={"Authorization": f"Bearer {token()}", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return classify_dag_run_state(json.loads(response.read()).get("state"))
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return RunState.MISSING
            raise

    return lookup


def sweep_in_task() -> list[str]:
    """The janitor DAG's task: sweep with the Kubernetes connection, log and return what went."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from airflow.sdk import get_current_context

    context = get_current_context()
    hook = KubernetesHook(conn_id=KUBERNETES_CONN_ID)
    clients = Clients.from_api_client(hook.api_client)
    # The tenants' namespaces: where runs live, and what per-namespace RBAC grants.
    namespaces = [tenant.namespace for tenant in load_tenants().tenants]
    report = sweep(clients, lookup_from_task_instance(context["ti"]), namespaces=namespaces)
    for line in report.lines():
        log.info("%s", line)
    removed = [o.describe() for o in report.deleted]
    log.info(
        "janitor: %d object(s) removed%s",
        len(removed),
        ": " + ", ".join(removed) if removed else "",
    )
    return removed


__all__ = [
    "Decision",
    "RunGroup",
    "RunObject",
    "RunState",
    "SweepReport",
    "Verdict",
    "build_delete_options",
    "classify_dag_run_state",
    "collect_run_groups",
    "decide",
    "delete_objects",
    "lookup_from_rest",
    "lookup_from_task_instance",
    "sweep",
    "sweep_in_task",
]
