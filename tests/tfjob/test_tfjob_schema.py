"""The exported JSON Schema, the Airflow Param specs and the generated field reference."""

import jsonschema
import pytest

from harness.repo_root import REPO_ROOT
from harness.tfjob_fixtures import distributed_request_data, valid_request_data
from tfjob.request.model import TrainingRequest, load_request
from tfjob.schema import airflow_param_specs, render_request_reference, request_json_schema

REPO = REPO_ROOT


def test_schema_is_valid_draft_2020_12_with_descriptions_and_defaults():
    schema = request_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert set(schema["properties"]) == set(TrainingRequest.model_fields)
    for name, prop in schema["properties"].items():
        assert prop.get("description"), name
        if name not in schema["required"]:
            assert "default" in prop, name
    assert set(schema["required"]) == {"name", "tenant", "entrypoint", "output"}
    # cpu/memory default to the tenant's LimitRange: the form shows them empty
    assert schema["properties"]["resources"]["default"]["worker"]["cpu"] is None
    assert schema["properties"]["resources"]["default"]["worker"]["gpu"] == 0


@pytest.mark.parametrize(
    "data",
    [
        valid_request_data(),
        distributed_request_data(
            resources={"worker": {"gpu": 1}}, tolerations=[{"key": "a", "operator": "Exists"}]
        ),
        distributed_request_data(
            args=["--ps_hosts=$(PS_HOSTS)", "--job_name=$(JOB_NAME)", "--literal=$$(JOB_NAME)"]
        ),
        valid_request_data(
            max_restarts=2,
            restart_on=[137, 143],
            checkpoint_interval=30,
            warm_start="scheduled__2026-12-01T03:00:00+00:00",
        ),
        valid_request_data(restart_on="any_failure", warm_start="latest"),
    ],
)
def test_valid_requests_satisfy_the_schema(data):
    jsonschema.Draft202012Validator(request_json_schema()).validate(data)
    dumped = load_request(data).model_dump(mode="json", by_alias=True)
    jsonschema.Draft202012Validator(request_json_schema()).validate(dumped)


@pytest.mark.parametrize(
    "data",
    [
        valid_request_data(mode="cluster"),
        valid_request_data(name="Not_A_Label"),
        valid_request_data(unknown=1),
        valid_request_data(port=80),
        valid_request_data(max_restarts=11),
        valid_request_data(restart_on="always"),
        valid_request_data(restart_on=[]),
        valid_request_data(restart_on=[0]),
        valid_request_data(restart_on=[137, 137]),
        valid_request_data(restart_on=["137"]),
        valid_request_data(checkpoint_interval=5),
        valid_request_data(warm_start="runs/manual__1"),
        valid_request_data(warm_start=".."),
    ],
)
def test_schema_refuses_what_the_model_refuses(data):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(request_json_schema()).validate(data)


def test_param_specs_cover_every_field_without_refs():
    specs = airflow_param_specs()
    assert set(specs) == set(TrainingRequest.model_fields)
    for name, spec in specs.items():
        assert "$ref" not in repr(spec), name
        assert {"default", "type", "description"} <= set(spec), name
        jsonschema.Draft202012Validator.check_schema(
            {k: v for k, v in spec.items() if k != "description"}
        )
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
    bare = {
        name: Param(spec.pop("default"), **spec) for name, spec in airflow_param_specs().items()
    }
    assert bare["tenant"].resolve() is None  # the form opens; the model names what is missing


def test_docs_field_reference_is_the_generated_one():
    text = (REPO / "docs/request.md").read_text()
    begin, end = "<!-- BEGIN GENERATED FIELDS -->\n", "<!-- END GENERATED FIELDS -->"
    generated = text[text.index(begin) + len(begin) : text.index(end)]
    assert generated == render_request_reference()


def test_the_args_field_documents_the_expansion_of_references():
    description = request_json_schema()["properties"]["args"]["description"]
    assert "$(NAME)" in description and "$$(NAME)" in description


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("retryable", True),
        ("any_failure", True),
        ([137, 143], True),
        ("always", False),
        ([], False),
        ([137, 137], False),
        ([0], False),
        (137, False),
    ],
)
def test_the_restart_on_param_takes_a_name_or_a_list_of_exit_codes(value, accepted):
    from airflow.sdk import Param
    from airflow.sdk.definitions.param import ParamValidationError

    spec = airflow_param_specs()["restart_on"]
    assert spec["default"] == "retryable"
    # Several kinds in one "type": Airflow's form offers a field that takes text or JSON.
    assert spec["type"] == ["string", "array"]
    param = Param(spec.pop("default"), **spec)
    if accepted:
        assert param.resolve(value) == value
        load_request(valid_request_data(restart_on=value))
    else:
        with pytest.raises(ParamValidationError):
            param.resolve(value)


def test_the_warm_start_param_checks_the_run_id_shape():
    spec = airflow_param_specs()["warm_start"]
    assert spec["default"] is None and spec["type"] == ["string", "null"]
    assert spec["maxLength"] == 250
    validator = jsonschema.Draft202012Validator(
        {k: v for k, v in spec.items() if k not in ("default", "description")}
    )
    for value in (None, "latest", "manual__2026-12-02T12:00:00+00:00"):
        validator.validate(value)
    for value in ("a/b", "..", "", "x" * 251):
        assert not validator.is_valid(value), value


def test_the_reference_describes_a_choice_of_kinds():
    line = next(
        line
        for line in render_request_reference().splitlines()
        if line.startswith("| `restart_on` |")
    )
    assert '| `retryable` \\| `any_failure` or list of integer | `"retryable"` |' in line
