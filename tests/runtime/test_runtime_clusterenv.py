"""The pod's cluster variables from cluster.json (runtime/clusterenv.py): TF_CONFIG as sent,
the TF1-style variables derived from it, and errors that name the field."""

import json

import pytest

from runtime.clusterenv import cluster_environment, derive_legacy_env

CLUSTER = {
    "chief": ["10.0.0.1:2222"],
    "ps": ["10.0.0.2:2222", "10.0.0.3:2222"],
    "worker": ["10.0.0.4:2222", "10.0.0.5:2222"],
}


def test_a_worker_gets_tf_config_as_sent_and_every_host_list():
    tf_config = {"cluster": CLUSTER, "task": {"type": "worker", "index": 1}}
    env = cluster_environment({"tf_config": tf_config})
    assert json.loads(env["TF_CONFIG"]) == tf_config
    assert env["PS_HOSTS"] == "10.0.0.2:2222,10.0.0.3:2222"
    assert env["WORKER_HOSTS"] == "10.0.0.4:2222,10.0.0.5:2222"
    assert env["CHIEF_HOSTS"] == "10.0.0.1:2222"
    assert (env["JOB_NAME"], env["TASK_INDEX"]) == ("worker", "1")


def test_a_mirrored_job_has_empty_ps_hosts_and_no_chief_hosts():
    env = derive_legacy_env(
        {"cluster": {"worker": ["10.0.0.4:2222"]}, "task": {"type": "worker", "index": 0}}
    )
    assert env == {
        "PS_HOSTS": "",
        "WORKER_HOSTS": "10.0.0.4:2222",
        "JOB_NAME": "worker",
        "TASK_INDEX": "0",
    }


def test_the_evaluator_is_named_by_its_task_though_the_cluster_does_not_list_it():
    env = derive_legacy_env({"cluster": CLUSTER, "task": {"type": "evaluator", "index": 0}})
    assert (env["JOB_NAME"], env["TASK_INDEX"]) == ("evaluator", "0")
    assert env["CHIEF_HOSTS"] == "10.0.0.1:2222"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ([], "cluster.json: list given"),
        ({}, "cluster.json: tf_config: NoneType given"),
        ({"tf_config": {"task": {"type": "ps", "index": 0}}}, "tf_config.cluster: NoneType"),
        ({"tf_config": {"cluster": CLUSTER}}, "tf_config.task: NoneType"),
        (
            {"tf_config": {"cluster": {"ps": "10.0.0.2:2222"}, "task": {"type": "ps", "index": 0}}},
            "tf_config.cluster.ps: '10.0.0.2:2222' given",
        ),
        ({"tf_config": {"cluster": {}, "task": {"type": "", "index": 0}}}, "tf_config.task.type"),
        (
            {"tf_config": {"cluster": {}, "task": {"type": "ps", "index": "0"}}},
            "tf_config.task.index: '0' given; an integer >= 0 is required",
        ),
        (
            {"tf_config": {"cluster": {}, "task": {"type": "ps", "index": True}}},
            "tf_config.task.index: True given",
        ),
    ],
)
def test_a_malformed_cluster_json_is_refused_naming_the_field(spec, field):
    with pytest.raises(ValueError, match="^" + field.replace(".", r"\.")) as caught:
        cluster_environment(spec)
    assert field in str(caught.value)
