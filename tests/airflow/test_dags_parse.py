"""The DAG files: what Airflow sees when it parses dags/ (no cluster, no S3, no network)."""

from __future__ import annotations

import importlib.util
import shutil
import socket

import pytest
import yaml

from harness.repo_root import REPO_ROOT

REPO = REPO_ROOT
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


def test_every_request_file_and_each_tenants_submit_dag_parse_without_errors(dagbag):
    from tfjob.pipeline_ids import submit_dag_id
    from tfjob.tenants import load_tenants

    assert dagbag.import_errors == {}
    names = {yaml.safe_load(p.read_text())["name"] for p in (DAGS / "requests").glob("*.yaml")}
    submit = {submit_dag_id(tenant) for tenant in load_tenants().names()}
    assert {"tfjob_submit__demo", "tfjob_submit__test", "tfjob_submit__research"} <= submit
    assert {f"tfjob__{n}" for n in names} | submit <= set(dagbag.dag_ids)
    assert "tfjob_submit" not in dagbag.dag_ids  # no DAG serves every tenant


def test_every_request_file_meets_its_tenants_policy():
    """Else its DAG's validate refuses every run of it."""
    from tfjob.request.model import load_request
    from tfjob.tenants import load_tenants, resolve_tenant
    from tfjob.tenants.policy import check_request_policy

    config = load_tenants()
    for path in sorted((DAGS / "requests").glob("*.yaml")):
        request = load_request(path)
        check_request_policy(request, resolve_tenant(config, request.tenant))


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
    # publish names the asset `<output>/latest` through the alias, only when latest moved
    assert [o.name for o in dag.get_task("publish").outlets] == ["tfjob__nightly__model"]


def test_an_invalid_request_file_gets_a_visible_dag_that_fails_validate(tmp_path, no_network):
    request = yaml.safe_load((DAGS / "requests" / "digits-ps.yaml").read_text())
    request["replicas"]["ps"] = 0
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(request))
    shutil.copy(DAGS / "requests" / "digits-single.yaml", tmp_path / "digits-single.yaml")
    dags = load_dag_module("tfjob_requests").build_all(tmp_path)
    assert set(dags) == {"tfjob__broken", "tfjob__digits-single"}
    broken = dags["tfjob__broken"]
    assert "replicas.ps" in broken.description
    assert type(broken.timetable).__name__ == "NullTimetable"


def test_the_submit_form_shows_every_request_field(dagbag):
    from tfjob.schema import request_json_schema

    dag = dagbag.dags["tfjob_submit__demo"]
    assert set(dag.params.keys()) == set(request_json_schema()["properties"])
    assert dag.params.get_param("replicas").schema["type"] in ("object", ["object", "null"])


def test_submit_params_refuse_conf_of_the_wrong_shape_naming_the_field(dagbag):
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.dags["tfjob_submit__demo"]
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


# --- tenants: each DAG belongs to one, fixed when it is built ------------------------------

TEAM_TENANTS = {
    "tenants": [
        {
            "name": "team-a",
            "quota": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "0", "pods": "10"},
            "defaults": {"cpu": "100m", "memory": "128Mi"},
            "max_concurrent_jobs": 3,
            "max_active_runs": 5,
            "roles": ["ml-team", "ml-oncall"],
            "bundle_prefixes": ["s3://team-a/bundles/"],
            "output_prefixes": ["s3://team-a/outputs/"],
        },
        {
            "name": "team-b",
            "quota": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "0", "pods": "10"},
            "defaults": {"cpu": "100m", "memory": "128Mi"},
            "max_concurrent_jobs": 2,
            "bundle_prefixes": ["s3://team-b/bundles/"],
            "output_prefixes": ["s3://team-b/outputs/"],
        },
    ]
}
TENANT_PERMISSIONS = {
    "DAGs": {"can_read", "can_edit"},
    "DAG Runs": {"can_read", "can_create", "can_delete"},
}
JOB_STEPS = {"launch", "clusterspec", "train", "archive", "teardown"}


@pytest.fixture
def team_tenants(tmp_path, monkeypatch):
    from tfjob.tenants import TENANTS_FILE_ENV

    path = tmp_path / "tenants.yaml"
    path.write_text(yaml.safe_dump(TEAM_TENANTS))
    monkeypatch.setenv(TENANTS_FILE_ENV, str(path))
    monkeypatch.delenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", raising=False)
    return path


def request_of(tenant: str, name: str) -> dict:
    request = yaml.safe_load((DAGS / "requests" / "digits-single.yaml").read_text())
    request.update(
        name=name,
        tenant=tenant,
        bundle=f"s3://{tenant}/bundles/b.tar.gz",
        output=f"s3://{tenant}/outputs/{name}",
    )
    return request


def test_each_tenant_gets_a_submit_dag_only_its_roles_may_trigger(team_tenants, no_network):
    dags = load_dag_module("tfjob_submit").build_all()
    assert set(dags) == {"tfjob_submit__team-a", "tfjob_submit__team-b"}
    team_a = dags["tfjob_submit__team-a"]
    assert team_a.access_control == {"ml-team": TENANT_PERMISSIONS, "ml-oncall": TENANT_PERMISSIONS}
    assert team_a.max_active_runs == 5
    assert "tenant:team-a" in team_a.tags
    assert {t.task_id for t in team_a.tasks if t.pool == "tfjob-tenant-team-a"} == JOB_STEPS
    team_b = dags["tfjob_submit__team-b"]
    assert team_b.access_control == {"team-b": TENANT_PERMISSIONS}  # roles default: [name]
    assert team_b.max_active_runs == 4  # 2 x max_concurrent_jobs
    assert [o.name for o in team_b.get_task("publish").outlets] == ["tfjob_submit__team-b__model"]


def test_the_submit_dags_tenant_param_allows_only_its_tenant(team_tenants, no_network):
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    dag = load_dag_module("tfjob_submit").build_all()["tfjob_submit__team-a"]
    params = ParamsDict(dag.params)
    assert params["tenant"] == "team-a"  # the trigger form opens with it
    assert dag.params.get_param("tenant").schema["enum"] == ["team-a"]
    with pytest.raises(ParamValidationError, match="param tenant: 'team-b' is not one of"):
        params.update({"tenant": "team-b"})
    with pytest.raises(ParamValidationError, match="param tenant: None is not of type .string."):
        params.update({"tenant": None})
    # validate is told the tenant by the DAG, whatever the conf says
    assert dag.get_task("validate").op_args == (None, "team-a")


def test_while_a_task_runs_only_its_tenants_submit_dag_is_built(team_tenants, monkeypatch):
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "tfjob_submit__team-b")
    assert set(load_dag_module("tfjob_submit").build_all()) == {"tfjob_submit__team-b"}


def test_a_request_dag_belongs_to_its_files_tenant(team_tenants, tmp_path, no_network):
    folder = tmp_path / "requests"
    folder.mkdir()
    (folder / "mine.yaml").write_text(yaml.safe_dump(request_of("team-a", "mine")))
    dag = load_dag_module("tfjob_requests").build_all(folder)["tfjob__mine"]
    assert dag.access_control == {"ml-team": TENANT_PERMISSIONS, "ml-oncall": TENANT_PERMISSIONS}
    assert dag.max_active_runs == 5
    assert "tenant:team-a" in dag.tags
    assert {t.task_id for t in dag.tasks if t.pool == "tfjob-tenant-team-a"} == JOB_STEPS
    assert dag.get_task("validate").op_args == (str(folder / "mine.yaml"), "team-a")


def test_a_request_file_of_an_unknown_tenant_gets_an_invalid_dag_without_roles(
    team_tenants, tmp_path, no_network
):
    folder = tmp_path / "requests"
    folder.mkdir()
    (folder / "stray.yaml").write_text(yaml.safe_dump(request_of("nobody", "stray")))
    dag = load_dag_module("tfjob_requests").build_all(folder)["tfjob__stray"]
    assert "INVALID" in dag.description and "'nobody' given; known tenants" in dag.description
    assert not dag.access_control
    assert "invalid" in dag.tags and not [t for t in dag.tags if t.startswith("tenant:")]
    assert {t.pool for t in dag.tasks} == {"default_pool"}
    assert dag.get_task("validate").op_args == (str(folder / "stray.yaml"), None)


def test_an_unreadable_tenants_file_makes_every_request_dag_invalid_saying_why(
    tmp_path, monkeypatch, no_network
):
    from tfjob.tenants import TENANTS_FILE_ENV

    monkeypatch.setenv(TENANTS_FILE_ENV, str(tmp_path / "missing.yaml"))
    folder = tmp_path / "requests"
    folder.mkdir()
    (folder / "job.yaml").write_text(yaml.safe_dump(request_of("team-a", "job")))
    dag = load_dag_module("tfjob_requests").build_all(folder)["tfjob__job"]
    assert "the tenants file cannot be read" in dag.description
    assert not dag.access_control
