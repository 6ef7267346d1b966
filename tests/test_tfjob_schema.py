"""The exported JSON Schema, the Airflow Param specs and the generated field reference."""

from pathlib import Path

import jsonschema
import pytest
from tfjob_fixtures import distributed_request_data, valid_request_data

from tfjob.request import TrainingRequest, load_request
from tfjob.schema import airflow_param_specs, render_request_reference, request_json_schema

REPO = Path(__file__).resolve().parents[1]


def test_schema_is_valid_draft_2020_12_with_descriptions_and_defaults():
    schema = request_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert set(schema["properties"]) == set(TrainingRequest.model_fields)
    for name, prop in schema["properties"].items():
        assert prop.get("description"), name
        if name not in schema["required"]:
            assert "default" in prop, name
    assert set(schema["required"]) == {"name", "tenant", "entrypoint", "bundle", "output"}
    # cpu/memory default to the tenant's LimitRange: the form shows them empty
    assert schema["properties"]["resources"]["default"]["worker"]["cpu"] is None
    assert schema["properties"]["resources"]["default"]["worker"]["gpu"] == 0


@pytest.mark.parametrize("data", [valid_request_data(), distributed_request_data(
    resources={"worker": {"gpu": 1}}, tolerations=[{"key": "a", "operator": "Exists"}]),
    distributed_request_data(args=["--ps_hosts=$(PS_HOSTS)", "--job_name=$(JOB_NAME)",
                                   "--literal=$$(JOB_NAME)"])])
def test_valid_requests_satisfy_the_schema(data):
    jsonschema.Draft202012Validator(request_json_schema()).validate(data)
    dumped = load_request(data).model_dump(mode="json", by_alias=True)
    jsonschema.Draft202012Validator(request_json_schema()).validate(dumped)


@pytest.mark.parametrize("data", [
    valid_request_data(mode="cluster"),
    valid_request_data(name="Not_A_Label"),
    valid_request_data(unknown=1),
    valid_request_data(port=80),
])
def test_schema_refuses_what_the_model_refuses(data):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(request_json_schema()).validate(data)


def test_param_specs_cover_every_field_without_refs():
    specs = airflow_param_specs()
    assert set(specs) == set(TrainingRequest.model_fields)
    for name, spec in specs.items():
        assert "$ref" not in repr(spec), name
        assert {"default", "type", "description"} <= set(spec), name
        jsonschema.Draft202012Validator.check_schema({k: v for k, v in spec.items()
                                                      if k != "description"})
    assert specs["mode"]["enum"] == ["single", "distributed"]
    assert specs["mode"]["default"] == "single"
    assert specs["port"]["default"] == 2222


def test_param_specs_take_defaults_from_a_given_request_and_accept_them():
    request = load_request(distributed_request_data(env={"EPOCHS": "3"}))
    specs = airflow_param_specs(request)
    assert specs["replicas"]["default"] == {"chief": 1, "ps": 2, "worker": 3, "evaluator": 1}
    assert specs["env"]["default"] == {"EPOCHS": "3"}
    for spec in specs.values():
        schema = {k: v for k, v in spec.items() if k not in ("default", "description")}
        jsonschema.validate(spec["default"], schema)
    conf = {name: spec["default"] for name, spec in specs.items()}
    assert load_request(conf) == request


def test_param_specs_build_airflow_params_that_resolve():
    from airflow.sdk import Param

    specs = airflow_param_specs(load_request(valid_request_data()))
    params = {name: Param(spec.pop("default"), **spec) for name, spec in specs.items()}
    assert params["name"].resolve() == "digits"
    assert params["success_policy"].resolve() == "worker0"
    bare = {name: Param(spec.pop("default"), **spec)
            for name, spec in airflow_param_specs().items()}
    assert bare["tenant"].resolve() is None  # the form opens; the model names what is missing


def test_docs_field_reference_is_the_generated_one():
    text = (REPO / "docs/request.md").read_text()
    begin, end = "<!-- BEGIN GENERATED FIELDS -->\n", "<!-- END GENERATED FIELDS -->"
    generated = text[text.index(begin) + len(begin):text.index(end)]
    assert generated == render_request_reference()


def test_the_args_field_documents_the_expansion_of_references():
    description = request_json_schema()["properties"]["args"]["description"]
    assert "$(NAME)" in description and "$$(NAME)" in description
