"""The DAG files: what Airflow sees when it parses dags/ (no cluster, no S3, no network)."""

from __future__ import annotations

import importlib.util
import shutil
import socket
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DAGS = REPO / "dags"
PIPELINE = [
    "validate",
    "fetch_bundle",
    "launch",
    "clusterspec",
    "train",
    "archive",
    "teardown",
    "publish",
]


def load_dag_module(name: str):
    spec = importlib.util.spec_from_file_location(f"tfjob_test_{name}", DAGS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS), safe_mode=False)


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access at parse time: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_every_request_file_and_the_submit_dag_parse_without_errors(dagbag):
    assert dagbag.import_errors == {}
    names = {yaml.safe_load(p.read_text())["name"] for p in (DAGS / "requests").glob("*.yaml")}
    assert {f"tfjob__{n}" for n in names} | {"tfjob_submit"} <= set(dagbag.dag_ids)


def test_every_training_dag_runs_the_pipeline_in_order(dagbag):
    dag = dagbag.dags["tfjob__digits-ps"]
    assert [t.task_id for t in dag.topological_sort()] == PIPELINE
    # archive and teardown run whenever the bundle was fetched, even after a failed launch.
    for name in ("archive", "teardown"):
        task = dag.get_task(name)
        assert task.is_teardown and task.trigger_rule == "all_done_setup_success", name
        assert {"fetch_bundle", "launch"} <= task.upstream_task_ids, name
    assert dag.get_task("launch").is_setup and dag.get_task("fetch_bundle").is_setup
    assert dag.get_task("publish").upstream_task_ids == {"train", "archive", "teardown"}
    assert dag.get_task("train").__class__.__name__ == "TrainingWaitOperator"
    # Tries lost to Airflow (apache/airflow#67287) are retried; a failed training is not.
    assert dag.get_task("train").retries == 2


def test_the_request_schedule_becomes_the_dag_schedule(tmp_path, no_network):
    request = yaml.safe_load((DAGS / "requests" / "digits-single.yaml").read_text())
    request.update(name="nightly", schedule="0 3 * * *", retries=2)
    (tmp_path / "nightly.yaml").write_text(yaml.safe_dump(request))
    module = load_dag_module("tfjob_requests")
    dags = module.build_all(tmp_path)
    dag = dags["tfjob__nightly"]
    assert dag.timetable.expression == "0 3 * * *"
    assert dag.get_task("launch").retries == 2
    assert [o.uri for o in dag.get_task("publish").outlets] == [f"{request['output']}/latest"]


def test_an_invalid_request_file_gets_a_visible_dag_that_fails_validate(tmp_path, no_network):
    request = yaml.safe_load((DAGS / "requests" / "digits-ps.yaml").read_text())
    request["replicas"]["ps"] = 0
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(request))
    shutil.copy(DAGS / "requests" / "digits-single.yaml", tmp_path / "good.yaml")
    dags = load_dag_module("tfjob_requests").build_all(tmp_path)
    assert set(dags) == {"tfjob__broken", "tfjob__digits-single"}
    broken = dags["tfjob__broken"]
    assert "replicas.ps" in broken.description
    assert type(broken.timetable).__name__ == "NullTimetable"


def test_the_submit_form_shows_every_request_field(dagbag):
    from tfjob.schema import request_json_schema

    dag = dagbag.dags["tfjob_submit"]
    assert set(dag.params.keys()) == set(request_json_schema()["properties"])
    assert dag.params.get_param("replicas").schema["type"] in ("object", ["object", "null"])


def test_submit_params_refuse_conf_of_the_wrong_shape_naming_the_field(dagbag):
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.dags["tfjob_submit"]
    params = ParamsDict(dag.params)
    with pytest.raises(
        ParamValidationError, match="param port: 'not-a-port' is not of type 'integer'"
    ):
        params.update({"port": "not-a-port"})


def test_building_many_request_dags_needs_no_network(tmp_path, no_network):
    base = yaml.safe_load((DAGS / "requests" / "digits-ps.yaml").read_text())
    for i in range(50):
        (tmp_path / f"job-{i}.yaml").write_text(yaml.safe_dump({**base, "name": f"job-{i}"}))
    dags = load_dag_module("tfjob_requests").build_all(tmp_path)
    assert len(dags) == 50
