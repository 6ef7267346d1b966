"""Two runs whose run keys collide: neither one's launch, teardown or janitor touches the
other's objects. Against a real localkube API server; the other run's objects carry the same
`tfjob.io/run` key label (a run id chosen to collide) but their own run-hash and annotations,
as the pipeline labels every object of a run."""

from __future__ import annotations

from types import SimpleNamespace

import kubernetes
import pytest
from airflow.sdk.exceptions import AirflowFailException

from harness.tfjob_fixtures import valid_request_data
from operators import kubeobjects, steps
from operators.janitor import RunState, sweep
from operators.launch import TrainingLaunchOperator
from operators.runinfo import RunInfo, describe_run, read_run
from tenancy.apply import Clients
from tfjob import naming
from tfjob.pipeline_ids import VALIDATE_TASK
from tfjob.request.model import load_request

NAMESPACE = "tfjob-collide"
DAG_ID = "tfjob__digits"


@pytest.fixture(scope="module")
def clients(localkube_api) -> Clients:
    made = Clients.from_api_client(kubernetes.client.ApiClient(localkube_api.kube_configuration()))
    made.core.create_namespace({"metadata": {"name": NAMESPACE}})
    return made


def describe(run_id: str) -> dict:
    request = load_request(valid_request_data())
    described = describe_run(request, run_id, DAG_ID, "aws_default")
    return {**described, "namespace": NAMESPACE}


def create_objects_of(clients: Clients, run: RunInfo, key: str, names: tuple[str, ...]) -> None:
    """A pod per name `<key>-<role>-<index>` and a ConfigMap `<key>-<suffix>` otherwise, all
    labelled with `key` and with `run`'s own run-hash and annotations."""
    metadata = {
        "labels": naming.run_labels("digits", key, "team-a", run.run_hash),
        "annotations": {naming.ANNOTATION_DAG_ID: run.dag_id, naming.ANNOTATION_RUN_ID: run.run_id},
    }
    for suffix in names:
        name = f"{key}-{suffix}"
        if naming.parse_pod_name(name):
            clients.core.create_namespaced_pod(
                NAMESPACE,
                {
                    "metadata": {"name": name, **metadata},
                    "spec": {"containers": [{"name": "c", "image": "python:3.11"}]},
                },
            )
        else:
            clients.core.create_namespaced_config_map(
                NAMESPACE, {"metadata": {"name": name, **metadata}, "data": {"a": "b"}}
            )


def names_with_key(clients: Clients, key: str) -> list[str]:
    return kubeobjects.list_run_objects(clients.core, NAMESPACE, naming.run_selector(key))


def colliding_runs(clients: Clients, case: str) -> tuple[RunInfo, RunInfo, str]:
    """Run `mine` and run `theirs`, both with objects labelled with mine's run key."""
    mine = read_run(describe(f"manual__{case}-mine"))
    theirs = read_run(describe(f"manual__{case}-theirs"))
    assert mine.run_hash != theirs.run_hash
    create_objects_of(clients, mine, mine.run_key, ("worker-0", "runtime"))
    create_objects_of(clients, theirs, mine.run_key, ("worker-1", "other"))
    return mine, theirs, mine.run_key


def test_teardown_deletes_its_runs_objects_and_leaves_another_runs_with_the_same_key(
    clients, monkeypatch
):
    mine, _, key = colliding_runs(clients, "teardown")
    described = describe(mine.run_id)
    ti = SimpleNamespace(
        xcom_pull=lambda task_ids: described if task_ids == VALIDATE_TASK else None
    )
    monkeypatch.setattr(steps, "get_current_context", lambda: {"ti": ti})
    monkeypatch.setattr(steps, "_kube", lambda: clients.core)

    deleted = steps.teardown()

    assert deleted == [f"Pod/{key}-worker-0", f"ConfigMap/{key}-runtime"]
    assert names_with_key(clients, key) == [f"ConfigMap/{key}-other", f"Pod/{key}-worker-1"]


def test_launch_refuses_a_key_that_another_runs_objects_carry_and_deletes_nothing(clients):
    mine, theirs, key = colliding_runs(clients, "launch")
    before = names_with_key(clients, key)
    operator = TrainingLaunchOperator(task_id="launch")
    operator.__dict__["client"] = clients.core  # the provider's cached client

    with pytest.raises(AirflowFailException) as refused:
        operator.remove_leftovers(mine)

    message = str(refused.value)
    assert f"run key {key}: " in message
    assert f"Pod/{key}-worker-1 (dag {DAG_ID}, run {theirs.run_id})" in message
    assert f"ConfigMap/{key}-other (dag {DAG_ID}, run {theirs.run_id})" in message
    assert "trigger it again with another run id" in message
    assert names_with_key(clients, key) == before


def test_an_object_of_another_run_with_the_same_name_is_never_replaced(clients):
    mine = read_run(describe("manual__replace-mine"))
    theirs = read_run(describe("manual__replace-theirs"))
    create_objects_of(clients, theirs, mine.run_key, ("runtime",))
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{mine.run_key}-runtime",
            "labels": naming.run_labels("digits", mine.run_key, "team-a", mine.run_hash),
            "annotations": {
                naming.ANNOTATION_DAG_ID: mine.dag_id,
                naming.ANNOTATION_RUN_ID: mine.run_id,
            },
        },
        "data": {"mine": "yes"},
    }

    with pytest.raises(kubeobjects.ForeignObjectError, match="belong to another run"):
        kubeobjects.create_objects(clients.core, NAMESPACE, [body])

    kept = clients.core.read_namespaced_config_map(f"{mine.run_key}-runtime", NAMESPACE)
    assert kept.data == {"a": "b"}
    # the run's own object of that name (an earlier try) is replaced as before
    clients.core.delete_namespaced_config_map(f"{mine.run_key}-runtime", NAMESPACE)
    create_objects_of(clients, mine, mine.run_key, ("runtime",))
    assert kubeobjects.create_objects(clients.core, NAMESPACE, [body]) == [
        f"ConfigMap/{mine.run_key}-runtime"
    ]
    replaced = clients.core.read_namespaced_config_map(f"{mine.run_key}-runtime", NAMESPACE)
    assert replaced.data == {"mine": "yes"}


def test_the_janitor_judges_each_run_of_a_shared_key_by_its_own_dag_run(clients):
    mine, theirs, key = colliding_runs(clients, "janitor")
    ended = {(DAG_ID, mine.run_id)}  # the other tests' runs (same namespace) stay active

    def lookup(dag_id: str, run_id: str) -> RunState:
        return RunState.ENDED if (dag_id, run_id) in ended else RunState.ACTIVE

    report = sweep(clients, lookup, namespaces=[NAMESPACE])

    removed = sorted(f"{o.kind}/{o.name}" for o in report.deleted)
    assert removed == [f"ConfigMap/{key}-runtime", f"Pod/{key}-worker-0"]
    assert names_with_key(clients, key) == [f"ConfigMap/{key}-other", f"Pod/{key}-worker-1"]
