"""ClusterSpec and TF_CONFIG from endpoints: order, strictness and round trips."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.tfjob_fixtures import distributed_request_data, valid_request_data
from runtime.clusterenv import cluster_environment
from tfjob.clusterspec import (
    ClusterSpecError,
    Endpoint,
    build_cluster_files,
    build_cluster_spec,
    build_legacy_env,
    build_tf_config,
    endpoints_from_mapping,
    endpoints_to_mapping,
)
from tfjob.request.model import Role, TrainingRequest, load_request


def endpoints_for(request: TrainingRequest, port: int = 2222) -> list[Endpoint]:
    return [
        Endpoint(role, index, f"10.0.{number // 250}.{number % 250 + 1}", port)
        for number, (role, index) in enumerate(request.replicas_in_order())
    ]


FULL = load_request(distributed_request_data())


def test_cluster_spec_lists_every_role_in_role_order_and_index_order():
    endpoints = list(reversed(endpoints_for(FULL)))  # arrival order must not matter
    cluster = build_cluster_spec(FULL, endpoints)
    assert list(cluster) == ["chief", "ps", "worker", "evaluator"]
    assert cluster == {
        "chief": ["10.0.0.1:2222"],
        "ps": ["10.0.0.2:2222", "10.0.0.3:2222"],
        "worker": ["10.0.0.4:2222", "10.0.0.5:2222", "10.0.0.6:2222"],
        "evaluator": ["10.0.0.7:2222"],
    }


def test_roles_without_replicas_are_left_out():
    request = load_request(valid_request_data())
    assert build_cluster_spec(request, [Endpoint(Role.WORKER, 0, "10.1.1.1", 2222)]) == {
        "worker": ["10.1.1.1:2222"]
    }


def test_tf_config_names_the_task_and_leaves_the_evaluator_out_of_the_cluster():
    cluster = build_cluster_spec(FULL, endpoints_for(FULL))
    for role, index in FULL.replicas_in_order():
        tf_config = build_tf_config(cluster, role, index)
        assert tf_config["task"] == {"type": role.value, "index": index}
        assert list(tf_config["cluster"]) == ["chief", "ps", "worker"]
    assert build_tf_config(cluster, Role.EVALUATOR, 0)["cluster"]["worker"] == cluster["worker"]


def test_legacy_env_joins_hosts_and_names_the_task():
    cluster = build_cluster_spec(FULL, endpoints_for(FULL))
    assert build_legacy_env(cluster, Role.WORKER, 1) == {
        "PS_HOSTS": "10.0.0.2:2222,10.0.0.3:2222",
        "WORKER_HOSTS": "10.0.0.4:2222,10.0.0.5:2222,10.0.0.6:2222",
        "CHIEF_HOSTS": "10.0.0.1:2222",
        "JOB_NAME": "worker",
        "TASK_INDEX": "1",
    }


def test_legacy_env_describes_the_whole_training_cluster_on_every_replica():
    """With JOB_NAME=chief a TF1 program's ClusterSpec({chief, ps, worker}) names its own task."""
    cluster = build_cluster_spec(FULL, endpoints_for(FULL))
    for role, index in FULL.replicas_in_order():
        legacy = build_legacy_env(cluster, role, index)
        tf1_cluster = {
            job: legacy[f"{job.upper()}_HOSTS"].split(",") for job in ("chief", "ps", "worker")
        }
        assert tf1_cluster == build_tf_config(cluster, role, index)["cluster"]
        if role is not Role.EVALUATOR:
            assert (
                tf1_cluster[legacy["JOB_NAME"]][int(legacy["TASK_INDEX"])]
                == cluster[role.value][index]
            )


def test_legacy_env_of_a_job_without_chief_has_no_chief_hosts():
    request = load_request(distributed_request_data(replicas={"ps": 1, "worker": 2}))
    cluster = build_cluster_spec(request, endpoints_for(request))
    legacy = build_legacy_env(cluster, Role.WORKER, 0)
    assert "CHIEF_HOSTS" not in legacy
    assert (legacy["PS_HOSTS"], legacy["WORKER_HOSTS"]) == (
        "10.0.0.1:2222",
        "10.0.0.2:2222,10.0.0.3:2222",
    )


def test_legacy_env_of_the_evaluator_lists_the_training_cluster_but_not_itself():
    cluster = build_cluster_spec(FULL, endpoints_for(FULL))
    legacy = build_legacy_env(cluster, Role.EVALUATOR, 0)
    assert (legacy["JOB_NAME"], legacy["TASK_INDEX"]) == ("evaluator", "0")
    assert legacy["CHIEF_HOSTS"] == "10.0.0.1:2222"
    assert legacy["PS_HOSTS"] == "10.0.0.2:2222,10.0.0.3:2222"
    assert cluster["evaluator"][0] not in ",".join(legacy.values())


def test_legacy_env_of_a_mirrored_job_has_empty_ps_hosts():
    request = load_request(
        distributed_request_data(strategy="multi_worker_mirrored", replicas={"worker": 2})
    )
    cluster = build_cluster_spec(request, endpoints_for(request))
    assert build_legacy_env(cluster, Role.WORKER, 1) == {
        "PS_HOSTS": "",
        "WORKER_HOSTS": "10.0.0.1:2222,10.0.0.2:2222",
        "JOB_NAME": "worker",
        "TASK_INDEX": "1",
    }


def test_cluster_files_hold_only_tf_config_per_replica_as_json():
    files = build_cluster_files(FULL, endpoints_for(FULL))
    assert list(files) == FULL.replicas_in_order()
    content = files[(Role.PS, 1)]
    assert set(content) == {"tf_config"}  # the pod derives the legacy variables from it
    assert content["tf_config"]["task"] == {"type": "ps", "index": 1}
    assert json.loads(json.dumps(content)) == content


def test_the_pod_derives_from_each_file_the_legacy_variables_the_platform_builds():
    cluster = build_cluster_spec(FULL, endpoints_for(FULL))
    for (role, index), content in build_cluster_files(FULL, endpoints_for(FULL)).items():
        env = cluster_environment(content)
        assert json.loads(env.pop("TF_CONFIG")) == content["tf_config"]
        assert env == build_legacy_env(cluster, role, index)


def test_a_chief_named_master_is_master_in_every_tf_config_and_the_legacy_variables():
    request = load_request(distributed_request_data(chief_task_type="master"))
    files = build_cluster_files(request, endpoints_for(request))
    chief = files[(Role.CHIEF, 0)]["tf_config"]
    assert list(chief["cluster"]) == ["master", "ps", "worker"]
    assert chief["task"] == {"type": "master", "index": 0}
    assert files[(Role.WORKER, 2)]["tf_config"]["cluster"]["master"] == ["10.0.0.1:2222"]
    env = cluster_environment(files[(Role.CHIEF, 0)])
    assert (env["JOB_NAME"], env["CHIEF_HOSTS"]) == ("master", "10.0.0.1:2222")


def test_ipv6_addresses_are_bracketed_and_parse_back():
    request = load_request(valid_request_data())
    endpoint = Endpoint(Role.WORKER, 0, "fd00::5", 2222)
    cluster = build_cluster_spec(request, [endpoint])
    assert cluster == {"worker": ["[fd00::5]:2222"]}
    assert endpoints_from_mapping(cluster) == [endpoint]


@pytest.mark.parametrize(
    ("endpoints", "message"),
    [
        pytest.param(
            [e for e in endpoints_for(FULL) if (e.role, e.index) != (Role.WORKER, 1)],
            "worker: 2 of 3 endpoints given; missing worker-1",
            id="missing_index",
        ),
        pytest.param(
            [*endpoints_for(FULL), Endpoint(Role.PS, 0, "10.9.9.9", 2222)],
            r"endpoint ps-0: given twice \(10.0.0.2:2222 and 10.9.9.9:2222\)",
            id="duplicate",
        ),
        pytest.param(
            [*endpoints_for(FULL), Endpoint(Role.WORKER, 3, "10.9.9.9", 2222)],
            r"endpoint worker-3: index 3 given; the request has 3 worker replica\(s\), indices 0-2",
            id="index_beyond_count",
        ),
        pytest.param(
            [*endpoints_for(FULL), Endpoint("master", 0, "10.9.9.9", 2222)],
            "endpoint master-0: role 'master' given; allowed: chief, ps, worker, evaluator",
            id="unknown_role",
        ),
        pytest.param(
            [Endpoint(Role.CHIEF, 0, "pod-a", 2222)],
            "endpoint chief-0: ip 'pod-a' given; allowed: an IPv4 or IPv6 address",
            id="bad_ip",
        ),
        pytest.param(
            [Endpoint(Role.CHIEF, 0, "10.0.0.1", 70000)],
            "endpoint chief-0: port 70000 given; allowed: 1 to 65535",
            id="bad_port",
        ),
        pytest.param(
            [Endpoint(Role.CHIEF, 0, "10.0.0.1", 2222)],
            "ps: 0 of 2 endpoints given; missing ps-0, ps-1",
            id="count_differs",
        ),
    ],
)
def test_endpoints_that_differ_from_the_request_are_refused(endpoints, message):
    with pytest.raises(ClusterSpecError, match=message):
        build_cluster_spec(FULL, endpoints)


def test_endpoint_of_a_role_the_request_lacks_is_refused():
    request = load_request(valid_request_data())
    with pytest.raises(ClusterSpecError, match="endpoint ps-0: the request has no ps replicas"):
        build_cluster_spec(
            request,
            [Endpoint(Role.WORKER, 0, "10.0.0.1", 2222), Endpoint(Role.PS, 0, "10.0.0.2", 2222)],
        )


def test_tf_config_for_a_task_not_in_the_cluster_is_refused():
    cluster = build_cluster_spec(FULL, endpoints_for(FULL))
    with pytest.raises(ClusterSpecError, match=r"task worker-3 given; the cluster has 3 worker"):
        build_tf_config(cluster, Role.WORKER, 3)


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"master": ["10.0.0.1:2222"]}, "role 'master' given"),
        ({"worker": "10.0.0.1:2222"}, "allowed: a list of"),
        ({"worker": ["10.0.0.1"]}, "address '10.0.0.1' given"),
        ({"worker": ["10.0.0.1:http"]}, "address '10.0.0.1:http' given"),
    ],
)
def test_malformed_xcom_mapping_is_refused(mapping, message):
    with pytest.raises(ClusterSpecError, match=message):
        endpoints_from_mapping(mapping)


def test_mapping_with_a_gap_in_indices_is_refused():
    with pytest.raises(ClusterSpecError, match="worker: missing worker-1"):
        endpoints_to_mapping(
            [Endpoint(Role.WORKER, 0, "10.0.0.1", 1), Endpoint(Role.WORKER, 2, "10.0.0.3", 1)]
        )


# --- properties ---------------------------------------------------------------------------

ips = st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str)
ports = st.integers(min_value=1, max_value=65535)


@st.composite
def requests_with_endpoints(draw):
    strategy = draw(st.sampled_from(["parameter_server", "multi_worker_mirrored", "single"]))
    if strategy == "single":
        request = load_request(valid_request_data())
    else:
        replicas = {
            "chief": draw(st.integers(0, 1)),
            "worker": draw(st.integers(1, 6)),
            "evaluator": draw(st.integers(0, 1)),
            "ps": draw(st.integers(1, 4)) if strategy == "parameter_server" else 0,
        }
        request = load_request(
            valid_request_data(mode="distributed", strategy=strategy, replicas=replicas)
        )
    replicas = request.replicas_in_order()
    addresses = draw(
        st.lists(st.tuples(ips, ports), min_size=len(replicas), max_size=len(replicas), unique=True)
    )
    endpoints = [
        Endpoint(role, index, ip, port)
        for (role, index), (ip, port) in zip(replicas, addresses, strict=True)
    ]
    return request, draw(st.permutations(endpoints))


@given(requests_with_endpoints())
def test_endpoints_round_trip_through_the_xcom_mapping(case):
    request, endpoints = case
    mapping = endpoints_to_mapping(endpoints)
    ordered = sorted(endpoints, key=lambda e: (list(Role).index(e.role), e.index))
    assert endpoints_from_mapping(mapping) == ordered
    assert json.loads(json.dumps(mapping)) == mapping
    assert build_cluster_spec(request, endpoints) == mapping


@given(requests_with_endpoints())
def test_every_tf_config_names_every_training_replica(case):
    request, endpoints = case
    files = build_cluster_files(request, endpoints)
    training = {e.address for e in endpoints if e.role is not Role.EVALUATOR}
    for (role, index), content in files.items():
        cluster = content["tf_config"]["cluster"]
        named = {address for addresses in cluster.values() for address in addresses}
        assert named == training
        assert content["tf_config"]["task"] == {"type": role.value, "index": index}
        if role is not Role.EVALUATOR:
            assert cluster[role.value][index] in training


@pytest.mark.slow
def test_tensorflow_accepts_the_tf_config_of_every_replica(monkeypatch):
    tf = pytest.importorskip("tensorflow")
    from tensorflow.python.distribute import multi_worker_util

    files = build_cluster_files(FULL, endpoints_for(FULL))
    for (role, index), content in files.items():
        monkeypatch.setenv("TF_CONFIG", json.dumps(content["tf_config"]))
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        assert (resolver.task_type, resolver.task_id) == (role.value, index)
        spec = resolver.cluster_spec()
        assert spec.as_dict() == content["tf_config"]["cluster"]
        # the check TensorFlow's distribution strategies run on (cluster, task)
        multi_worker_util._validate_cluster_spec(spec, role.value, index)
