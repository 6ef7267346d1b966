"""A request's name is its file's stem: who builds a DAG (processor or task runner) picks one file.

Issue 27: a file `aaa.yaml` of tenant research declaring `name: digits-single`
became the DAG `tfjob__digits-single` in the UI while its tasks ran demo's
`digits-single.yaml`. Now the file picks the DAG, never the name inside it.
"""

from __future__ import annotations

import importlib.util

import pytest
import yaml

from harness.repo_root import REPO_ROOT
from operators.request_files import (
    RequestNameError,
    check_request_name,
    select_request_sources,
)

DAGS = REPO_ROOT / "dags"
TENANTS = {
    "tenants": [
        {
            "name": name,
            "quota": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "0", "pods": "10"},
            "defaults": {"cpu": "100m", "memory": "128Mi"},
            "max_concurrent_jobs": 2,
            "bundle_prefixes": [f"s3://{name}/bundles/"],
            "output_prefixes": [f"s3://{name}/outputs/"],
        }
        for name in ("demo", "research")
    ]
}


def request_of(tenant: str, name: str) -> dict:
    request = yaml.safe_load((DAGS / "requests" / "digits-single.yaml").read_text())
    request.update(
        name=name,
        tenant=tenant,
        bundle=f"s3://{tenant}/bundles/b.tar.gz",
        output=f"s3://{tenant}/outputs/{name}",
    )
    return request


def write(folder, file_name: str, body: dict) -> None:
    (folder / file_name).write_text(yaml.safe_dump(body))


@pytest.fixture
def folder(tmp_path, monkeypatch):
    from tfjob.tenants import TENANTS_FILE_ENV

    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(yaml.safe_dump(TENANTS))
    monkeypatch.setenv(TENANTS_FILE_ENV, str(tenants))
    monkeypatch.delenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", raising=False)
    requests = tmp_path / "requests"
    requests.mkdir()
    return requests


def build_all(folder, running: str | None = None, monkeypatch=None) -> dict:
    """The DAGs dags/tfjob_requests.py builds from `folder` (as a task of `running` would)."""
    if running:
        monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", running)
    spec = importlib.util.spec_from_file_location("tfjob_test_requests", DAGS / "tfjob_requests.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_all(folder)


def test_a_request_named_after_its_file_is_accepted(tmp_path):
    check_request_name(tmp_path / "digits-single.yaml", "digits-single")


def test_a_request_named_otherwise_is_refused_naming_the_name_and_what_is_allowed(
    tmp_path,
):
    with pytest.raises(RequestNameError) as refused:
        check_request_name(tmp_path / "aaa.yaml", "digits-single")
    message = str(refused.value)
    assert message.startswith("request.name 'digits-single' given")
    assert "allowed: 'aaa', the file's stem" in message


def test_each_stem_is_one_source_and_two_files_with_one_stem_name_each_other(folder):
    write(folder, "digits.yaml", request_of("demo", "digits"))
    write(folder, "digits.yml", request_of("research", "digits"))
    write(folder, "other.json", request_of("demo", "other"))
    (folder / "notes.txt").write_text("not a request")
    sources = {s.dag_id: s for s in select_request_sources(folder)}
    assert set(sources) == {"tfjob__digits", "tfjob__other"}
    assert sources["tfjob__other"].conflict is None
    conflict = sources["tfjob__digits"].conflict
    assert "digits.yaml" in conflict and "digits.yml" in conflict


def test_the_task_runner_picks_the_source_of_its_dag_only(folder):
    write(folder, "aaa.yaml", request_of("research", "digits-single"))
    write(folder, "digits-single.yaml", request_of("demo", "digits-single"))
    [source] = select_request_sources(folder, "tfjob__digits-single")
    assert source.files == (folder / "digits-single.yaml",)
    assert select_request_sources(folder, "tfjob__gone") == []


def test_a_stem_that_cannot_be_a_dag_id_is_left_out_not_fatal(folder):
    write(folder, "has space.yaml", request_of("demo", "x"))
    write(folder, "fine.yaml", request_of("demo", "fine"))
    assert [s.stem for s in select_request_sources(folder)] == ["fine"]


def test_another_tenants_file_declaring_a_name_does_not_take_its_dag(folder, monkeypatch):
    write(folder, "aaa.yaml", request_of("research", "digits-single"))
    write(folder, "digits-single.yaml", request_of("demo", "digits-single"))
    dags = build_all(folder)
    assert set(dags) == {"tfjob__aaa", "tfjob__digits-single"}
    demo = dags["tfjob__digits-single"]
    assert "tenant:demo" in demo.tags and set(demo.access_control) == {"demo"}
    assert demo.get_task("validate").op_args == (str(folder / "digits-single.yaml"), "demo")
    invalid = dags["tfjob__aaa"]
    assert invalid.description.startswith("INVALID request file aaa.yaml: request.name")
    assert "request.name 'digits-single' given; allowed: 'aaa'" in invalid.description
    assert not invalid.access_control and "invalid" in invalid.tags
    # the worker running demo's DAG builds the very same DAG from the very same file
    [ran] = build_all(folder, "tfjob__digits-single", monkeypatch).values()
    assert ran.get_task("validate").op_args == demo.get_task("validate").op_args
    assert ran.tags == demo.tags


def test_two_files_with_one_name_make_one_invalid_dag_naming_both(folder, monkeypatch):
    write(folder, "digits.yaml", request_of("demo", "digits"))
    write(folder, "digits.json", request_of("research", "digits"))
    dags = build_all(folder)
    assert set(dags) == {"tfjob__digits"}
    dag = dags["tfjob__digits"]
    assert "digits.json" in dag.description and "digits.yaml" in dag.description
    assert not dag.access_control and not [t for t in dag.tags if t.startswith("tenant:")]
    ran = build_all(folder, "tfjob__digits", monkeypatch)["tfjob__digits"]
    assert ran.description == dag.description


def test_every_example_request_is_named_after_its_file():
    for path in sorted((DAGS / "requests").iterdir()):
        check_request_name(path, yaml.safe_load(path.read_text())["name"])
