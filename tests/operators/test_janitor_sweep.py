"""The janitor's sweep against a real localkube API server (Airflow's answers given per run),
and, with fakes, the uid precondition on every delete."""

import enum
import logging
from types import SimpleNamespace

import kubernetes
import pytest

from operators.janitor import (
    JANITOR_GRACE_SECONDS,
    RunObject,
    RunState,
    Verdict,
    build_delete_options,
    classify_dag_run_state,
    sweep,
)
from tenancy.apply import Clients
from tfjob import naming

NAMESPACE = "tfjob-janitor"


@pytest.fixture(scope="module")
def clients(localkube_api) -> Clients:
    made = Clients.from_api_client(kubernetes.client.ApiClient(localkube_api.kube_configuration()))
    made.core.create_namespace({"metadata": {"name": NAMESPACE}})
    return made


def create_run(clients: Clients, job: str, run_id: str | None, dag_id: str | None) -> str:
    """A pod and a ConfigMap labelled as one run's objects; returns the run key."""
    key = naming.run_key(job, dag_id or "no-annotations", run_id or "no-annotations")
    annotations = {}
    if run_id:
        annotations[naming.ANNOTATION_RUN_ID] = run_id
    if dag_id:
        annotations[naming.ANNOTATION_DAG_ID] = dag_id
    run_hash = naming.run_hash(dag_id or "no-annotations", run_id or "no-annotations")
    labels = naming.run_labels(job, key, "janitor", run_hash)
    metadata = {"labels": labels, "annotations": annotations}
    clients.core.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {"name": f"{key}-worker-0", **metadata},
            "spec": {"containers": [{"name": "c", "image": "python:3.11"}]},
        },
    )
    clients.core.create_namespaced_config_map(
        NAMESPACE, {"metadata": {"name": f"{key}-runtime", **metadata}, "data": {"a": "b"}}
    )
    return key


def objects_of(clients: Clients, key: str) -> list[str]:
    selector = naming.run_selector(key)
    pods = clients.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
    maps = clients.core.list_namespaced_config_map(NAMESPACE, label_selector=selector).items
    return sorted(
        [f"Pod/{p.metadata.name}" for p in pods] + [f"ConfigMap/{c.metadata.name}" for c in maps]
    )


def test_airflow_states_map_to_what_the_janitor_does():
    assert classify_dag_run_state(None) is RunState.MISSING
    assert classify_dag_run_state("success") is RunState.ENDED
    assert classify_dag_run_state("failed") is RunState.ENDED
    assert classify_dag_run_state("running") is RunState.ACTIVE
    assert classify_dag_run_state("queued") is RunState.ACTIVE

    class SdkDagRunState(str, enum.Enum):  # noqa: UP042  (the Task SDK's shape)
        SUCCESS = "success"

    assert classify_dag_run_state(SdkDagRunState.SUCCESS) is RunState.ENDED


def test_the_sweep_removes_objects_of_ended_and_missing_runs_and_keeps_the_rest(clients):
    airflow = {
        ("tfjob__a", "run-active"): RunState.ACTIVE,
        ("tfjob__a", "run-ended"): RunState.ENDED,
    }
    asked = []

    def lookup(dag_id: str, run_id: str) -> RunState:
        asked.append((dag_id, run_id))
        return airflow.get((dag_id, run_id), RunState.MISSING)

    active = create_run(clients, "a", "run-active", "tfjob__a")
    ended = create_run(clients, "a", "run-ended", "tfjob__a")
    deleted_run = create_run(clients, "b", "run-deleted", "tfjob__b")
    anonymous = create_run(clients, "c", None, None)
    # A tenant object: managed by tfjob but no run label; never touched.
    clients.core.create_namespaced_config_map(
        NAMESPACE,
        {
            "metadata": {
                "name": "tenant-thing",
                "labels": {naming.LABEL_MANAGED_BY: naming.MANAGED_BY},
            }
        },
    )

    dry = sweep(clients, lookup, dry_run=True)
    assert dry.deleted == []
    assert objects_of(clients, ended)
    asked.clear()

    report = sweep(clients, lookup)
    verdicts = {d.group.run_key: (d.verdict, d.reason) for d in report.decisions}
    assert verdicts[active][0] is Verdict.KEEP
    assert verdicts[ended] == (Verdict.DELETE, "dag tfjob__a run run-ended has ended")
    assert verdicts[deleted_run] == (
        Verdict.DELETE,
        "dag tfjob__b run run-deleted no longer exists in Airflow",
    )
    assert verdicts[anonymous][0] is Verdict.KEEP
    assert "cannot tell which Airflow run" in verdicts[anonymous][1]
    # Airflow is asked once per run, not once per object.
    assert asked.count(("tfjob__a", "run-ended")) == 1

    removed = sorted(f"{o.kind}/{o.name}" for o in report.deleted)
    assert removed == sorted(objects_of_names(ended) + objects_of_names(deleted_run))
    assert objects_of(clients, ended) == []
    assert objects_of(clients, deleted_run) == []
    assert objects_of(clients, active) == objects_of_names(active)
    assert objects_of(clients, anonymous) == objects_of_names(anonymous)
    assert clients.core.read_namespaced_config_map("tenant-thing", NAMESPACE)
    assert any("has ended" in line and ended in line for line in report.lines())


def test_the_sweep_looks_only_in_the_namespaces_it_is_given(clients):
    clients.core.create_namespace({"metadata": {"name": "tfjob-elsewhere"}})
    key = naming.run_key("far", "tfjob__far", "run-far")
    clients.core.create_namespaced_config_map(
        "tfjob-elsewhere",
        {
            "metadata": {
                "name": f"{key}-runtime",
                "labels": naming.run_labels(
                    "far", key, "elsewhere", naming.run_hash("tfjob__far", "run-far")
                ),
                "annotations": {
                    naming.ANNOTATION_DAG_ID: "tfjob__far",
                    naming.ANNOTATION_RUN_ID: "run-far",
                },
            },
            "data": {},
        },
    )

    def nobody_has_it(dag_id: str, run_id: str) -> RunState:
        return RunState.MISSING

    report = sweep(clients, nobody_has_it, namespaces=[NAMESPACE])
    assert all(d.group.namespace == NAMESPACE for d in report.decisions)
    assert clients.core.read_namespaced_config_map(f"{key}-runtime", "tfjob-elsewhere")
    report = sweep(clients, nobody_has_it, namespaces=["tfjob-elsewhere"])
    assert [f"{o.kind}/{o.name}" for o in report.deleted] == [f"ConfigMap/{key}-runtime"]


def objects_of_names(key: str) -> list[str]:
    return sorted([f"Pod/{key}-worker-0", f"ConfigMap/{key}-runtime"])


# --- deletes name the uid the list saw (fakes: no server) -----------------------------------


class FakeKindApi:
    """list_/delete_namespaced_<kind> over listed objects; a delete whose uid precondition does
    not match the object's current uid gets the API server's 409 Conflict."""

    def __init__(self, listed: dict[str, list], current_uids: dict[tuple[str, str], str]) -> None:
        self.listed, self.current_uids = listed, current_uids
        self.deletes: list[tuple[str, str, object]] = []

    def __getattr__(self, method: str):
        kind = method.split("namespaced_", 1)[-1]
        if method.startswith("list_namespaced_"):
            return lambda namespace, label_selector=None: SimpleNamespace(
                items=[o for o in self.listed.get(kind, []) if o.metadata.namespace == namespace]
            )
        if method.startswith("delete_namespaced_"):

            def delete(name, namespace, body=None):
                self.deletes.append((kind, name, body))
                current = self.current_uids.get((kind, name))
                wanted = body.preconditions.uid if body and body.preconditions else None
                if current is None:
                    raise kubernetes.client.exceptions.ApiException(status=404)
                if wanted and wanted != current:
                    raise kubernetes.client.exceptions.ApiException(status=409, reason="Conflict")

            return delete
        raise AttributeError(method)


def listed_object(name: str, uid: str, key: str = "job-0000aaaa") -> SimpleNamespace:
    return SimpleNamespace(
        metadata=SimpleNamespace(
            namespace="tfjob-a",
            name=name,
            uid=uid,
            labels={naming.LABEL_RUN: key, naming.LABEL_MANAGED_BY: naming.MANAGED_BY},
            annotations={naming.ANNOTATION_DAG_ID: "tfjob__job", naming.ANNOTATION_RUN_ID: "r1"},
        )
    )


def test_each_delete_carries_the_listed_uid_and_a_recreated_object_is_skipped(caplog):
    pod = listed_object("job-0000aaaa-worker-0", "uid-pod-old")
    config_map = listed_object("job-0000aaaa-runtime", "uid-cm")
    # Between the list and the delete the run was cleared and relaunched: a new pod, same name.
    core = FakeKindApi(
        {"pod": [pod], "config_map": [config_map]},
        {
            ("pod", pod.metadata.name): "uid-pod-new",
            ("config_map", config_map.metadata.name): "uid-cm",
        },
    )
    networking = FakeKindApi({}, {})
    clients = Clients(core, networking)

    with caplog.at_level(logging.INFO, logger="operators.janitor"):
        report = sweep(clients, lambda dag_id, run_id: RunState.ENDED, namespaces=["tfjob-a"])

    sent = {(kind, name): body for kind, name, body in core.deletes}
    assert sent[("pod", pod.metadata.name)].preconditions.uid == "uid-pod-old"
    assert sent[("pod", pod.metadata.name)].grace_period_seconds == JANITOR_GRACE_SECONDS
    assert sent[("config_map", config_map.metadata.name)].preconditions.uid == "uid-cm"
    assert [o.name for o in report.deleted] == [config_map.metadata.name]
    assert [o.name for o in report.skipped] == [pod.metadata.name]
    assert any(
        "recreated since it was listed" in line and pod.metadata.name in line
        for line in report.lines()
    )
    assert "not ours any more" in caplog.text


def test_an_object_already_gone_is_neither_deleted_nor_skipped():
    gone = listed_object("job-0000aaaa-runtime", "uid-cm")
    clients = Clients(FakeKindApi({"config_map": [gone]}, {}), FakeKindApi({}, {}))
    report = sweep(clients, lambda dag_id, run_id: RunState.MISSING, namespaces=["tfjob-a"])
    assert report.deleted == [] and report.skipped == []


def test_delete_options_pin_the_uid_and_give_pods_the_janitors_grace():
    options = build_delete_options(RunObject("Pod", "ns", "p", "uid-1"))
    assert options.preconditions.uid == "uid-1"
    assert options.grace_period_seconds == JANITOR_GRACE_SECONDS
    options = build_delete_options(RunObject("Secret", "ns", "s", "uid-2"))
    assert options.preconditions.uid == "uid-2" and options.grace_period_seconds is None
