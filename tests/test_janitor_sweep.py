"""The janitor's sweep against a real localkube API server; Airflow's answers given per run."""

import enum

import kubernetes
import pytest
from localkube_fixtures import localkube_api  # noqa: F401  (pytest fixture)

from operators.janitor import RunState, Verdict, classify_dag_run_state, sweep
from operators.tenancy import Clients
from tfjob import naming

NAMESPACE = "tfjob-janitor"


@pytest.fixture(scope="module")
def clients(localkube_api) -> Clients:  # noqa: F811
    made = Clients.from_api_client(
        kubernetes.client.ApiClient(localkube_api.kube_configuration()))
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
    metadata = {"labels": naming.run_labels(job, key, "janitor"), "annotations": annotations}
    clients.core.create_namespaced_pod(NAMESPACE, {
        "metadata": {"name": f"{key}-worker-0", **metadata},
        "spec": {"containers": [{"name": "c", "image": "python:3.11"}]}})
    clients.core.create_namespaced_config_map(NAMESPACE, {
        "metadata": {"name": f"{key}-runtime", **metadata}, "data": {"a": "b"}})
    return key


def objects_of(clients: Clients, key: str) -> list[str]:
    selector = naming.run_selector(key)
    pods = clients.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
    maps = clients.core.list_namespaced_config_map(NAMESPACE, label_selector=selector).items
    return sorted([f"Pod/{p.metadata.name}" for p in pods] +
                  [f"ConfigMap/{c.metadata.name}" for c in maps])


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
    airflow = {("tfjob__a", "run-active"): RunState.ACTIVE,
               ("tfjob__a", "run-ended"): RunState.ENDED}
    asked = []

    def lookup(dag_id: str, run_id: str) -> RunState:
        asked.append((dag_id, run_id))
        return airflow.get((dag_id, run_id), RunState.MISSING)

    active = create_run(clients, "a", "run-active", "tfjob__a")
    ended = create_run(clients, "a", "run-ended", "tfjob__a")
    deleted_run = create_run(clients, "b", "run-deleted", "tfjob__b")
    anonymous = create_run(clients, "c", None, None)
    # A tenant object: managed by tfjob but no run label; never touched.
    clients.core.create_namespaced_config_map(NAMESPACE, {"metadata": {
        "name": "tenant-thing", "labels": {naming.LABEL_MANAGED_BY: naming.MANAGED_BY}}})

    dry = sweep(clients, lookup, dry_run=True)
    assert dry.deleted == []
    assert objects_of(clients, ended)
    asked.clear()

    report = sweep(clients, lookup)
    verdicts = {d.group.run_key: (d.verdict, d.reason) for d in report.decisions}
    assert verdicts[active][0] is Verdict.KEEP
    assert verdicts[ended] == (Verdict.DELETE, "dag tfjob__a run run-ended has ended")
    assert verdicts[deleted_run] == (Verdict.DELETE,
                                     "dag tfjob__b run run-deleted no longer exists in Airflow")
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
    clients.core.create_namespaced_config_map("tfjob-elsewhere", {"metadata": {
        "name": f"{key}-runtime", "labels": naming.run_labels("far", key, "elsewhere"),
        "annotations": {naming.ANNOTATION_DAG_ID: "tfjob__far",
                        naming.ANNOTATION_RUN_ID: "run-far"}}, "data": {}})

    def nobody_has_it(dag_id: str, run_id: str) -> RunState:
        return RunState.MISSING

    report = sweep(clients, nobody_has_it, namespaces=[NAMESPACE])
    assert all(d.group.namespace == NAMESPACE for d in report.decisions)
    assert clients.core.read_namespaced_config_map(f"{key}-runtime", "tfjob-elsewhere")
    report = sweep(clients, nobody_has_it, namespaces=["tfjob-elsewhere"])
    assert [f"{o.kind}/{o.name}" for o in report.deleted] == [f"ConfigMap/{key}-runtime"]


def objects_of_names(key: str) -> list[str]:
    return sorted([f"Pod/{key}-worker-0", f"ConfigMap/{key}-runtime"])
