# ruff: noqa: E501  (the expected messages are kept whole, as users read them)
"""The request model: what loads, the defaults it fills in, and every documented error."""

import json
import re

import pytest

from harness.repo_root import REPO_ROOT
from harness.tfjob_fixtures import distributed_request_data, valid_request_data
from tfjob.request.model import (
    Mode,
    RequestError,
    Role,
    Strategy,
    SuccessPolicy,
    load_request,
    parse_request,
)
from tfjob.restart_policy import RestartOn

REPO = REPO_ROOT
DROP = object()  # marks a field removed from the valid request

ERROR_CASES = [
    pytest.param(
        {"mode": "distributed", "replicas": {"worker": 2}},
        "request.replicas.ps: 0 given; distributed parameter-server jobs need at least 1",
        id="ps_zero",
    ),
    pytest.param(
        {"mode": "distributed", "replicas": {"ps": 1, "worker": 0}},
        "request.replicas.worker: 0 given; distributed parameter-server jobs need at least 1",
        id="ps_workers_zero",
    ),
    pytest.param(
        {
            "mode": "distributed",
            "strategy": "multi_worker_mirrored",
            "replicas": {"ps": 1, "worker": 2},
        },
        "request.replicas.ps: 1 given; multi_worker_mirrored jobs have no ps (0)",
        id="mwms_ps",
    ),
    pytest.param(
        {"mode": "distributed", "strategy": "multi_worker_mirrored", "replicas": {"worker": 0}},
        "request.replicas.worker: 0 given; multi_worker_mirrored jobs need at least 1",
        id="mwms_workers_zero",
    ),
    pytest.param(
        {"replicas": {"worker": 2}},
        "request.replicas.worker: 2 given; single mode runs exactly 1 worker",
        id="single_two_workers",
    ),
    pytest.param(
        {"replicas": {"chief": 1, "worker": 1}},
        "request.replicas.chief: 1 given; single mode runs exactly 1 worker and no chief",
        id="single_chief",
    ),
    pytest.param(
        {"mode": "distributed", "replicas": {"chief": 2, "ps": 1, "worker": 1}},
        "request.replicas.chief: 2 given; at most 1 is allowed",
        id="two_chiefs",
    ),
    pytest.param(
        {"name": "My_Job"},
        "request.name: \"My_Job\" given; a DNS-1123 label is allowed: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 40 characters",
        id="name_invalid",
    ),
    pytest.param(
        {"name": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
        "request.name: \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" given; a DNS-1123 label is allowed: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 40 characters",
        id="name_too_long",
    ),
    pytest.param(
        {"tenant": DROP},
        "request.tenant: nothing given; the field is required (Tenant owning the job (DNS-1123 label); decides the namespace.)",
        id="tenant_missing",
    ),
    pytest.param(
        {"mode": "cluster"},
        'request.mode: "cluster" given; allowed: single or distributed',
        id="mode_unknown",
    ),
    pytest.param(
        {"strategy": "mirrored"},
        'request.strategy: "mirrored" given; allowed: parameter_server or multi_worker_mirrored',
        id="strategy_unknown",
    ),
    pytest.param(
        {"replica": {"worker": 1}},
        'request.replica: {"worker": 1} given; unknown field; allowed fields: name, tenant, mode, strategy, replicas, resources, gpu_type, image, entrypoint, args, env, bundle, output, schedule, startup_timeout, active_deadline, retries, max_restarts, restart_on, checkpoint_interval, warm_start, success_policy, placement, node_selector, tolerations, node_affinity, port, chief_task_type',
        id="unknown_field",
    ),
    pytest.param(
        {"entrypoint": "python3 train.py"},
        'request.entrypoint: "python3 train.py" given; an argv list is allowed, e.g. ["python3", "train.py"]; shell strings are not run',
        id="entrypoint_string",
    ),
    pytest.param(
        {"entrypoint": []},
        'request.entrypoint: [] given; a non-empty argv list is required, e.g. ["python3", "train.py"]',
        id="entrypoint_empty",
    ),
    pytest.param(
        {"args": ["--epochs", 5]},
        "request.args[1]: 5 given; every argument must be a string (quote numbers in YAML)",
        id="args_number",
    ),
    pytest.param(
        {"env": {"TFJOB_ROLE": "chief"}},
        'request.env.TFJOB_ROLE: "TFJOB_ROLE" given; the name is reserved for TF-on-K8s (names starting with TFJOB_, and CHIEF_HOSTS, DATA_DIR, JOB_NAME, LOG_DIR, METRICS_FILE, MODEL_DIR, POD_IP, POD_NAME, PS_HOSTS, TASK_INDEX, TF_CONFIG, WORKER_HOSTS); choose another',
        id="env_reserved_prefix",
    ),
    pytest.param(
        {"env": {"TF_CONFIG": "{}"}},
        'request.env.TF_CONFIG: "TF_CONFIG" given; the name is reserved for TF-on-K8s (names starting with TFJOB_, and CHIEF_HOSTS, DATA_DIR, JOB_NAME, LOG_DIR, METRICS_FILE, MODEL_DIR, POD_IP, POD_NAME, PS_HOSTS, TASK_INDEX, TF_CONFIG, WORKER_HOSTS); choose another',
        id="env_tf_config",
    ),
    pytest.param(
        {"env": {"1BAD": "x"}},
        "request.env.1BAD: \"1BAD\" given; environment names are letters, digits and '_', not starting with a digit",
        id="env_bad_name",
    ),
    pytest.param(
        {"env": {"EPOCHS": 5}},
        "request.env.EPOCHS: 5 given; environment values must be strings (quote them in YAML)",
        id="env_number",
    ),
    pytest.param(
        {"resources": {"worker": {"cpu": "two"}}},
        'request.resources.worker.cpu: "two" given; a Kubernetes quantity such as 500m, 2, 1Gi is allowed',
        id="cpu_bad",
    ),
    pytest.param(
        {"resources": {"master": {"cpu": "1"}}},
        'request.resources.master: "master" given; allowed roles: chief, ps, worker, evaluator',
        id="role_unknown",
    ),
    pytest.param(
        {"resources": {"worker": {"memory": "2Gi", "memory_limit": "1Gi"}}},
        'request.resources.worker.memory_limit: "1Gi" given; the limit must be at least the memory request (2Gi)',
        id="limit_below_request",
    ),
    pytest.param(
        {"resources": {"worker": {"gpus": 1}}},
        "request.resources.worker.gpus: 1 given; unknown field; allowed fields: cpu, memory, gpu, cpu_limit, memory_limit",
        id="resources_unknown_key",
    ),
    pytest.param(
        {"resources": {"worker": {"gpu": 17}}},
        "request.resources.worker.gpu: 17 given; at most 16 is allowed",
        id="gpu_too_many",
    ),
    pytest.param(
        {"bundle": "s3://tfjob-bundles/digits.zip"},
        'request.bundle: "s3://tfjob-bundles/digits.zip" given; an s3://bucket/key.tar.gz URL is allowed (key ending in .tar.gz)',
        id="bundle_not_targz",
    ),
    pytest.param(
        {"bundle": "https://example.com/digits.tar.gz"},
        'request.bundle: "https://example.com/digits.tar.gz" given; an s3://bucket/key.tar.gz URL is allowed',
        id="bundle_not_s3",
    ),
    pytest.param(
        {"output": "s3://tfjob-output"},
        'request.output: "s3://tfjob-output" given; an s3://bucket/prefix URL with a non-empty key is allowed',
        id="output_no_prefix",
    ),
    pytest.param(
        {"schedule": "@sometimes"},
        'request.schedule: "@sometimes" given; unknown preset; allowed: none, one of @once, @hourly, @daily, @weekly, @monthly, @quarterly, @yearly, @annually or a 5-field cron like "0 3 * * *"',
        id="schedule_preset",
    ),
    pytest.param(
        {"schedule": "0 3 * *"},
        'request.schedule: "0 3 * *" given; a cron expression has 5 fields, this one has 4; allowed: none, one of @once, @hourly, @daily, @weekly, @monthly, @quarterly, @yearly, @annually or a 5-field cron like "0 3 * * *"',
        id="schedule_fields",
    ),
    pytest.param(
        {"schedule": "0 25 * * *"},
        'request.schedule: "0 25 * * *" given; the hour value \'25\' is outside 0-23; allowed: none, one of @once, @hourly, @daily, @weekly, @monthly, @quarterly, @yearly, @annually or a 5-field cron like "0 3 * * *"',
        id="schedule_range",
    ),
    pytest.param(
        {"startup_timeout": 600, "active_deadline": 600},
        "request.active_deadline: 600 given; must be more than startup_timeout (600)",
        id="deadline_not_after_startup",
    ),
    pytest.param(
        {"startup_timeout": 300, "active_deadline": 604000},
        "request.active_deadline: 604000 given; at most 603900 with startup_timeout 300: the pods' S3 grants must cover startup_timeout + active_deadline + 600 s, and a presigned grant lasts at most 7 days",
        id="deadline_longer_than_a_grant",
    ),
    pytest.param(
        {"retries": 11}, "request.retries: 11 given; at most 10 is allowed", id="retries_too_many"
    ),
    pytest.param(
        {"max_restarts": 11},
        "request.max_restarts: 11 given; at most 10 is allowed",
        id="max_restarts_too_many",
    ),
    pytest.param(
        {"restart_on": "always"},
        'request.restart_on: "always" given; allowed: retryable, any_failure or a list of exit codes from 1 to 255, e.g. [137, 143]',
        id="restart_on_unknown",
    ),
    pytest.param(
        {"restart_on": []},
        "request.restart_on: [] given; allowed: retryable, any_failure or a list of exit codes from 1 to 255, e.g. [137, 143]",
        id="restart_on_empty",
    ),
    pytest.param(
        {"restart_on": [137, "143"]},
        'request.restart_on[1]: "143" given; exit codes are whole numbers from 1 to 255 (unquoted in YAML)',
        id="restart_on_quoted_code",
    ),
    pytest.param(
        {"restart_on": [0]},
        "request.restart_on[0]: 0 given; exit codes from 1 to 255 are allowed (0 is success)",
        id="restart_on_zero",
    ),
    pytest.param(
        {"restart_on": [137, 143, 137]},
        "request.restart_on[2]: 137 given; each exit code once; 137 is already at [0]",
        id="restart_on_duplicate",
    ),
    pytest.param(
        {"checkpoint_interval": 5},
        "request.checkpoint_interval: 5 given; at least 10 is allowed",
        id="checkpoint_interval_too_short",
    ),
    pytest.param(
        {"warm_start": "s3://tfjob-output/digits/latest"},
        "request.warm_start: \"s3://tfjob-output/digits/latest\" given; allowed: none, latest or a run id of this DAG (Airflow's run id characters: letters, digits, '_', '.', '~', ':', '+', '-'; at most 250), e.g. scheduled__2026-12-01T03:00:00+00:00",
        id="warm_start_url",
    ),
    pytest.param(
        {"success_policy": "chief"},
        'request.success_policy: "chief" given; policy chief needs replicas.chief = 1; use worker0 or all_workers',
        id="success_chief_without_chief",
    ),
    pytest.param(
        {"port": 80}, "request.port: 80 given; at least 1024 is allowed", id="port_privileged"
    ),
    pytest.param(
        {"port": "grpc"},
        'request.port: "grpc" given; a whole number is allowed',
        id="port_not_number",
    ),
    pytest.param(
        {"placement": "scatter"},
        'request.placement: "scatter" given; allowed: spread or pack',
        id="placement_unknown",
    ),
    pytest.param(
        {"tolerations": [{"key": "gpu", "operator": "Exists", "value": "yes"}]},
        'request.tolerations[0].value: "yes" given; no value is allowed with operator Exists',
        id="toleration_exists_value",
    ),
    pytest.param(
        {
            "tolerations": [
                {
                    "key": "gpu",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                    "tolerationSeconds": 30,
                }
            ]
        },
        "request.tolerations[0].tolerationSeconds: 30 given; tolerationSeconds needs effect NoExecute",
        id="toleration_seconds_effect",
    ),
    pytest.param(
        {"tolerations": [{"key": "gpu", "operator": "Exists", "effects": "NoSchedule"}]},
        'request.tolerations[0].effects: "NoSchedule" given; unknown field; allowed fields: key, operator, value, effect, tolerationSeconds',
        id="toleration_unknown_key",
    ),
    pytest.param(
        {"node_selector": {"pool": 1}},
        "request.node_selector.pool: 1 given; node_selector values must be Kubernetes label values (strings of at most 63 letters, digits, '-', '_', '.'; quote numbers in YAML)",
        id="node_selector_number",
    ),
    pytest.param(
        {
            "node_affinity": {
                "worker": {"required": [{"match_expressions": [{"key": "zone", "operator": "In"}]}]}
            }
        },
        "request.node_affinity.worker.required[0].match_expressions[0].values: [] given; operator In needs at least one value",
        id="node_affinity_in_without_values",
    ),
    pytest.param(
        {
            "node_affinity": {
                "worker": {
                    "required": [
                        {
                            "match_expressions": [
                                {"key": "cores", "operator": "Gt", "values": ["many"]}
                            ]
                        }
                    ]
                }
            }
        },
        'request.node_affinity.worker.required[0].match_expressions[0].values: ["many"] given; operator Gt needs exactly one integer value',
        id="node_affinity_gt_not_integer",
    ),
    pytest.param(
        {"node_affinity": {"boss": {}}},
        'request.node_affinity.boss: "boss" given; allowed: chief, ps, worker or evaluator',
        id="node_affinity_unknown_role",
    ),
    pytest.param(
        {"gpu_type": "A100 80GB"},
        'request.gpu_type: "A100 80GB" given; a Kubernetes label value is allowed, e.g. NVIDIA-A100-SXM4-40GB',
        id="gpu_type_invalid",
    ),
    pytest.param(
        {"env": {"BIG": "x" * 32769}},
        "request.env.BIG: 32769 bytes given; at most 32768 bytes are allowed in one environment value",
        id="env_value_too_large",
    ),
    pytest.param(
        {"env": {f"V{i}": "1" for i in range(257)}},
        "request.env: 257 variables given; at most 256 variables are allowed",
        id="env_too_many",
    ),
    pytest.param(
        {"args": ["--note", "é" * 20000]},
        "request.args[1]: 40000 bytes given; at most 32768 bytes are allowed in one argument",
        id="arg_too_large",
    ),
    pytest.param(
        {"args": ["-v"] * 1025},
        "request.args: 1025 items given; at most 1024 items are allowed",
        id="args_too_many",
    ),
    pytest.param(
        {"env": {f"V{i}": "x" * 30000 for i in range(9)}},
        "request: 270084 bytes or more as JSON given; at most 262144 bytes are allowed for a whole request",
        id="request_too_large",
    ),
]


def apply_overrides(overrides: dict) -> dict:
    data = valid_request_data(**overrides)
    return {key: value for key, value in data.items() if value is not DROP}


@pytest.mark.parametrize(("overrides", "message"), ERROR_CASES)
def test_invalid_request_fails_with_its_documented_message(overrides, message):
    with pytest.raises(RequestError) as caught:
        load_request(apply_overrides(overrides))
    assert str(caught.value) == message


def test_every_documented_error_message_has_a_test_and_back():
    text = (REPO / "docs/request.md").read_text()
    documented = set(re.findall(r"\| `(request[.:][^`]*)` \|$", text, flags=re.MULTILINE))
    tested = {case.values[1] for case in ERROR_CASES} | set(PARSE_ERROR_MESSAGES)
    assert documented == tested


def test_request_error_carries_field_given_and_allowed():
    with pytest.raises(RequestError) as caught:
        load_request(valid_request_data(mode="distributed", replicas={"worker": 2}))
    assert caught.value.field == "replicas.ps"
    assert caught.value.given == 0
    assert caught.value.allowed == "distributed parameter-server jobs need at least 1"


PARSE_ERROR_MESSAGES = [
    'request: ["just", "a list"] given; a mapping of request fields is required',
    "request: text that is not valid YAML given; a YAML mapping of request fields is required "
    "(expected ',' or ']', but got '<stream end>' at line 2 column 1)",
    "request: text that is not valid JSON given; a JSON mapping of request fields is required "
    "(Expecting value at line 1 column 10)",
]


@pytest.mark.parametrize(
    ("text", "fmt", "message"),
    [
        ("- just\n- a list\n", "yaml", PARSE_ERROR_MESSAGES[0]),
        ("name: [digits\n", "yaml", PARSE_ERROR_MESSAGES[1]),
        ('{"name": ', "json", PARSE_ERROR_MESSAGES[2]),
    ],
    ids=["not_a_mapping", "bad_yaml", "bad_json"],
)
def test_unparsable_text_fails_with_its_documented_message(text, fmt, message):
    with pytest.raises(RequestError) as caught:
        parse_request(text, fmt)
    assert str(caught.value) == message


def test_minimal_request_gets_documented_defaults():
    request = load_request(valid_request_data())
    assert request.mode is Mode.SINGLE
    assert request.strategy is Strategy.PARAMETER_SERVER
    assert request.replicas_in_order() == [(Role.WORKER, 0)]
    assert request.port == 2222
    assert (request.startup_timeout, request.active_deadline, request.retries) == (300, 3600, 0)
    assert request.success_policy is SuccessPolicy.WORKER0
    assert (request.max_restarts, request.restart_on) == (0, RestartOn.RETRYABLE)
    assert (request.checkpoint_interval, request.warm_start) == (60, None)
    for role in Role:
        resources = request.resources[role]
        # cpu/memory left to the tenant's LimitRange (docs/tenants.md)
        assert (resources.cpu, resources.memory, resources.gpu) == (None, None, 0)
        assert resources.cpu_limit is None and resources.memory_limit is None


def test_partial_resources_leave_the_rest_to_the_tenant():
    request = load_request(valid_request_data(resources={"worker": {"cpu": 2, "gpu": 1}}))
    assert request.resources[Role.WORKER].cpu == "2"
    assert request.resources[Role.WORKER].memory is None
    assert request.resources[Role.WORKER].gpu == 1
    assert request.resources[Role.PS].cpu is None


def test_a_limit_alone_is_allowed_and_a_limit_below_its_request_is_not():
    request = load_request(valid_request_data(resources={"worker": {"memory_limit": "2Gi"}}))
    assert (request.resources[Role.WORKER].memory, request.resources[Role.WORKER].memory_limit) == (
        None,
        "2Gi",
    )
    with pytest.raises(RequestError, match="at least the cpu request"):
        load_request(valid_request_data(resources={"worker": {"cpu": "2", "cpu_limit": "1"}}))


def test_distributed_request_orders_replicas_by_role_then_index():
    request = load_request(distributed_request_data())
    assert request.replicas_in_order() == [
        (Role.CHIEF, 0),
        (Role.PS, 0),
        (Role.PS, 1),
        (Role.WORKER, 0),
        (Role.WORKER, 1),
        (Role.WORKER, 2),
        (Role.EVALUATOR, 0),
    ]
    assert request.replica_count(Role.PS) == 2
    assert request.model_owner() == (Role.CHIEF, 0)
    assert request.success_policy is SuccessPolicy.CHIEF


def test_job_without_chief_has_worker0_as_model_owner_and_policy():
    request = load_request(distributed_request_data(replicas={"ps": 1, "worker": 2}))
    assert request.model_owner() == (Role.WORKER, 0)
    assert request.success_policy is SuccessPolicy.WORKER0


def test_multi_worker_mirrored_job_needs_no_ps():
    request = load_request(
        valid_request_data(
            mode="distributed", strategy="multi_worker_mirrored", replicas={"worker": 3}
        )
    )
    assert request.replica_count(Role.PS) == 0
    assert request.replica_count(Role.WORKER) == 3


def test_explicit_success_policy_is_kept():
    request = load_request(distributed_request_data(success_policy="all_workers"))
    assert request.success_policy is SuccessPolicy.ALL_WORKERS


@pytest.mark.parametrize(
    "schedule",
    [
        None,
        "@daily",
        "@hourly",
        "@once",
        "0 3 * * *",
        "*/15 * * * 1-5",
        "0 0 1 jan,jul *",
        "30 2 * * sun",
        "0 0-23/2 * * *",
    ],
)
def test_valid_schedules_load(schedule):
    assert load_request(valid_request_data(schedule=schedule)).schedule == schedule


def test_output_prefix_loses_its_trailing_slash():
    request = load_request(valid_request_data(output="s3://tfjob-output/digits/"))
    assert request.output == "s3://tfjob-output/digits"


def test_tolerations_keep_kubernetes_keys():
    toleration = {
        "key": "nvidia.com/gpu",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 60,
    }
    request = load_request(valid_request_data(tolerations=[toleration]))
    assert request.tolerations[0].to_manifest() == toleration


def test_same_request_loads_from_yaml_json_file_and_dict(tmp_path):
    data = distributed_request_data(env={"EPOCHS": "3"}, args=["--epochs", "3"])
    yaml_path = tmp_path / "request.yaml"
    yaml_path.write_text(
        "\n".join(f"{key}: {json.dumps(value)}" for key, value in data.items()) + "\n"
    )
    json_path = tmp_path / "request.json"
    json_path.write_text(json.dumps(data))
    from_dict = load_request(data)
    assert load_request(yaml_path) == from_dict
    assert load_request(str(json_path)) == from_dict
    assert parse_request(json.dumps(data), "json") == from_dict


def test_request_file_with_unknown_suffix_is_refused(tmp_path):
    path = tmp_path / "request.txt"
    path.write_text("name: digits\n")
    with pytest.raises(ValueError, match=r"allowed suffixes: \.yaml, \.yml, \.json"):
        load_request(path)


def test_a_request_without_a_bundle_runs_the_images_program():
    data = valid_request_data(entrypoint=["python3", "-m", "trainer"])
    del data["bundle"]
    request = load_request(data)
    assert request.bundle is None
    assert load_request(request.model_dump(mode="json")) == request
    assert load_request(valid_request_data(bundle=None)).bundle is None  # an empty form field


def test_request_round_trips_through_its_json_dump():
    request = load_request(
        distributed_request_data(
            tolerations=[{"key": "gpu", "operator": "Exists"}], node_selector={"pool": "train"}
        )
    )
    assert load_request(request.model_dump(mode="json", by_alias=True)) == request


@pytest.mark.parametrize(
    "path",
    sorted(REPO.glob("bundles/*/request*.yaml")),
    ids=lambda path: f"{path.parent.name}/{path.name}",
)
def test_example_bundle_requests_load(path):
    request = load_request(path)
    assert request.name


SEED_ERA_ARGS = [
    "--ps_hosts=$(PS_HOSTS)",
    "--worker_hosts=$(WORKER_HOSTS)",
    "--job_name=$(JOB_NAME)",
    "--task_index=$(TASK_INDEX)",
    "--chief_hosts=$(CHIEF_HOSTS)",
    "--literal=$$(JOB_NAME)",
    "--open=$(",
    "$(UNKNOWN)",
    "$()",
]


def test_args_with_references_are_kept_as_written_for_the_pod_to_expand():
    request = load_request(
        distributed_request_data(entrypoint=["python3", "$(SCRIPT)"], args=SEED_ERA_ARGS)
    )
    assert request.args == SEED_ERA_ARGS
    assert request.entrypoint == ["python3", "$(SCRIPT)"]
    assert load_request(request.model_dump(mode="json")).args == SEED_ERA_ARGS


def test_chief_hosts_is_reserved_because_the_pod_sets_it():
    with pytest.raises(RequestError) as caught:
        load_request(valid_request_data(env={"CHIEF_HOSTS": "10.0.0.1:2222"}))
    assert caught.value.field == "env.CHIEF_HOSTS"
    assert "the name is reserved for TF-on-K8s" in str(caught.value)


def test_required_field_given_as_null_is_reported_missing():
    with pytest.raises(RequestError) as caught:
        load_request(valid_request_data(tenant=None))
    assert str(caught.value).startswith("request.tenant: nothing given; the field is required")


def test_request_error_survives_pickling():
    import pickle

    error = pickle.loads(pickle.dumps(RequestError("replicas.ps", 0, "at least 1")))
    assert (error.field, error.given, str(error)) == (
        "replicas.ps",
        0,
        "request.replicas.ps: 0 given; at least 1",
    )
    with pytest.raises(RequestError) as caught:
        load_request(valid_request_data(tenant=None))
    assert str(pickle.loads(pickle.dumps(caught.value))) == str(caught.value)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"max_restarts": 2}, {"max_restarts": 2, "restart_on": RestartOn.RETRYABLE}),
        (
            {"max_restarts": 10, "restart_on": "any_failure"},
            {"max_restarts": 10, "restart_on": RestartOn.ANY_FAILURE},
        ),
        ({"max_restarts": 1, "restart_on": [143, 1, 137]}, {"restart_on": [143, 1, 137]}),
        ({"restart_on": [255]}, {"restart_on": [255]}),
        ({"checkpoint_interval": 10}, {"checkpoint_interval": 10}),
        ({"checkpoint_interval": 3600}, {"checkpoint_interval": 3600}),
        ({"warm_start": "latest"}, {"warm_start": "latest"}),
        (
            {"warm_start": "scheduled__2026-12-01T03:00:00+00:00"},
            {"warm_start": "scheduled__2026-12-01T03:00:00+00:00"},
        ),
        (
            {"warm_start": "manual__2026-12-02T12:00:00.123456+00:00"},
            {"warm_start": "manual__2026-12-02T12:00:00.123456+00:00"},
        ),
        ({"warm_start": "nightly-retrain_v2.1~a"}, {"warm_start": "nightly-retrain_v2.1~a"}),
        ({"warm_start": None}, {"warm_start": None}),
    ],
    ids=lambda value: "-".join(map(str, value.values())) if isinstance(value, dict) else "",
)
def test_restart_and_warm_start_fields_load(fields, expected):
    request = load_request(valid_request_data(**fields))
    for name, value in expected.items():
        assert getattr(request, name) == value
    assert load_request(request.model_dump(mode="json")) == request


@pytest.mark.parametrize("run_id", [".", "..", "run/1", "run 1", "a" * 251, "", "läuft"])
def test_warm_start_refuses_what_is_not_an_airflow_run_id(run_id):
    with pytest.raises(RequestError) as caught:
        load_request(valid_request_data(warm_start=run_id))
    assert caught.value.field == "warm_start"
    assert "a run id of this DAG" in caught.value.allowed


@pytest.mark.parametrize(
    ("restart_on", "field"),
    [
        (137, "restart_on"),
        ({"codes": [137]}, "restart_on"),
        ([256], "restart_on[0]"),
        ([True], "restart_on[0]"),
        ([1.5], "restart_on[0]"),
        (None, "restart_on"),
    ],
)
def test_restart_on_names_the_bad_item(restart_on, field):
    with pytest.raises(RequestError) as caught:
        load_request(valid_request_data(restart_on=restart_on))
    assert caught.value.field == field
