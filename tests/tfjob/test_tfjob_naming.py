"""Object names and labels: valid, short enough, deterministic, and selectable."""

import hashlib
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfjob import naming, pipeline_ids
from tfjob.request.model import Role

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
RUN_ID = "manual__2026-12-02T12:00:00+00:00"
DAG_ID = "tfjob__digits"


def assert_dns_label(name: str, max_len: int = 63) -> None:
    assert 1 <= len(name) <= max_len, name
    assert DNS_LABEL.match(name), name


@given(st.text(), st.integers(min_value=1, max_value=63))
def test_sanitized_label_is_always_a_valid_dns_label(text, max_len):
    assert_dns_label(naming.sanitize_dns_label(text, max_len), max_len)


@given(st.text(), st.integers(min_value=1, max_value=63))
def test_sanitizing_is_stable_and_idempotent(text, max_len):
    label = naming.sanitize_dns_label(text, max_len)
    assert naming.sanitize_dns_label(text, max_len) == label
    assert naming.sanitize_dns_label(label, max_len) == label


@given(st.from_regex(DNS_LABEL, fullmatch=True).filter(lambda s: len(s) <= 63 and "--" not in s))
def test_valid_short_label_is_left_unchanged(label):
    assert naming.sanitize_dns_label(label) == label


@given(
    st.text(alphabet="abc", min_size=64, max_size=120),
    st.text(alphabet="abc", min_size=64, max_size=120),
)
def test_shortened_labels_of_different_texts_differ_by_hash(first, second):
    if first != second:
        assert naming.sanitize_dns_label(first) != naming.sanitize_dns_label(second)


def test_sanitizing_lowercases_and_replaces_invalid_characters():
    assert naming.sanitize_dns_label("My_Job.v2") == "my-job-v2"
    assert naming.sanitize_dns_label("__") == hashlib.sha256(b"__").hexdigest()[:8]


def test_sanitizing_refuses_a_maximum_beyond_63():
    with pytest.raises(ValueError, match="max_len 64 given; allowed: 1 to 63"):
        naming.sanitize_dns_label("x", 64)


def test_run_key_is_job_and_first_16_hex_of_sha256_of_dag_id_and_run_id():
    # 64 bits: a run id chosen to give a colleague's key would cost ~2^64 hashes
    h16 = hashlib.sha256(f"{DAG_ID}\n{RUN_ID}".encode()).hexdigest()[:16]
    assert naming.run_key("digits", DAG_ID, RUN_ID) == f"digits-{h16}"
    assert naming.run_key("digits", DAG_ID, RUN_ID) == naming.run_key("digits", DAG_ID, RUN_ID)
    assert naming.run_key("digits", DAG_ID, RUN_ID) != naming.run_key(
        "digits", DAG_ID, RUN_ID + "x"
    )


def test_runs_of_two_dags_with_the_same_run_id_get_different_keys():
    # A tenant's request DAG and its submit DAG may both have a run manual__<time>.
    request_dag = naming.run_key("digits", "tfjob__digits", RUN_ID)
    submit_dag = naming.run_key("digits", pipeline_ids.submit_dag_id("demo"), RUN_ID)
    assert request_dag != submit_dag
    # dag id and run id are not simply concatenated
    assert naming.run_key("j", "ab", "c") != naming.run_key("j", "a", "bc")


def test_each_tenant_has_its_own_submit_dag():
    assert pipeline_ids.SUBMIT_DAG_PREFIX == "tfjob_submit__"
    assert pipeline_ids.REQUEST_DAG_PREFIX == "tfjob__"
    assert pipeline_ids.submit_dag_id("research") == "tfjob_submit__research"
    assert pipeline_ids.tenant_of_submit_dag("tfjob_submit__research") == "research"
    assert pipeline_ids.tenant_of_submit_dag("tfjob__digits") is None
    assert pipeline_ids.tenant_of_submit_dag("tfjob_submit__") is None
    assert pipeline_ids.tenant_of_submit_dag("tfjob_submit") is None
    with pytest.raises(ValueError, match="tenant 'Team_A' given; allowed: a DNS-1123 label"):
        pipeline_ids.submit_dag_id("Team_A")


def test_object_names_follow_the_documented_shapes():
    key = naming.run_key("digits", DAG_ID, RUN_ID)
    assert naming.pod_name(key, Role.PS, 1) == f"{key}-ps-1"
    assert naming.configmap_name(key) == f"{key}-runtime"
    assert naming.secret_name(key) == f"{key}-access"


@given(
    job=st.text(min_size=1, max_size=200),
    dag_id=st.text(max_size=100),
    run_id=st.text(max_size=100),
    role=st.sampled_from(Role),
    index=st.integers(min_value=0, max_value=99999),
)
def test_names_of_any_job_fit_63_characters_and_keep_the_run_hash(job, dag_id, run_id, role, index):
    key = naming.run_key(job, dag_id, run_id)
    h16 = naming.hash_text(f"{dag_id}\n{run_id}", 16)
    assert key.endswith(f"-{h16}")
    for name in (
        naming.pod_name(key, role, index),
        naming.configmap_name(key),
        naming.secret_name(key),
        naming.upload_secret_name(key),
    ):
        assert_dns_label(name)
        assert h16 in name
    assert naming.pod_name(key, role, index).endswith(f"-{role.value}-{index}")


def test_the_longest_request_names_evaluator_pods_are_the_run_key_and_their_role():
    key = naming.run_key("a" * 40, DAG_ID, RUN_ID)
    assert len(key) <= naming.MAX_JOB_PART + 1 + naming.RUN_KEY_HASH_LENGTH
    assert naming.pod_name(key, Role.EVALUATOR, 0) == f"{key}-evaluator-0"
    assert naming.pod_name(key, Role.EVALUATOR, 12) == f"{key}-evaluator-12"


def test_pod_name_refuses_negative_index():
    with pytest.raises(ValueError, match="replica index -1 given"):
        naming.pod_name("digits-12345678", Role.WORKER, -1)


def test_replica_labels_carry_run_labels_role_and_index():
    key = naming.run_key("digits", DAG_ID, RUN_ID)
    run_hash = naming.run_hash(DAG_ID, RUN_ID)
    labels = naming.replica_labels("digits", key, "team-a", run_hash, Role.WORKER, 2)
    assert labels == {
        "app.kubernetes.io/managed-by": "tfjob",
        "tfjob.io/job": "digits",
        "tfjob.io/run": key,
        "tfjob.io/run-hash": hashlib.sha256(f"{DAG_ID}\n{RUN_ID}".encode()).hexdigest()[:48],
        "tfjob.io/tenant": "team-a",
        "tfjob.io/role": "worker",
        "tfjob.io/index": "2",
    }


@given(job=st.text(min_size=1, max_size=120), tenant=st.text(min_size=1, max_size=80))
def test_label_values_are_always_valid(job, tenant):
    key = naming.run_key(job, DAG_ID, RUN_ID)
    run_hash = naming.run_hash(DAG_ID, RUN_ID)
    for value in naming.replica_labels(job, key, tenant, run_hash, Role.CHIEF, 0).values():
        assert len(value) <= 63 and LABEL_VALUE.match(value), value


def test_selectors_match_the_labels_they_select():
    key = naming.run_key("digits", DAG_ID, RUN_ID)
    run_hash = naming.run_hash(DAG_ID, RUN_ID)
    labels = naming.replica_labels("digits", key, "team-a", run_hash, Role.PS, 0)
    for selector in (
        naming.run_selector(key),
        naming.run_selector(key, run_hash),
        naming.job_selector("digits"),
        naming.replica_selector(key, Role.PS, 0),
        naming.replica_selector(key, Role.PS, 0, run_hash),
    ):
        for term in selector.split(","):
            name, value = term.split("=")
            assert labels[name] == value
    assert naming.run_selector(key) == f"app.kubernetes.io/managed-by=tfjob,tfjob.io/run={key}"
    assert naming.run_selector(key, run_hash) == (
        f"app.kubernetes.io/managed-by=tfjob,tfjob.io/run={key},tfjob.io/run-hash={run_hash}"
    )


def test_two_runs_whose_keys_collide_are_told_apart_by_their_run_hash_label():
    # A key of 64 bits can still be hit by a chosen run id with enough work (or a
    # short job part): the label a run's deletes select on is 192 bits of the run.
    mine = naming.run_labels("digits", "digits-0123456789abcdef", "demo", naming.run_hash("d", "a"))
    theirs = naming.run_labels(
        "digits", "digits-0123456789abcdef", "demo", naming.run_hash("d", "b")
    )
    selector = naming.run_selector("digits-0123456789abcdef", naming.run_hash("d", "a"))

    def matches(labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in (t.split("=") for t in selector.split(",")))

    assert matches(mine) and not matches(theirs)
    assert len(naming.run_hash("d", "a")) == 48


def test_tenant_namespace_is_prefixed():
    assert naming.tenant_namespace("team-a") == "tfjob-team-a"


def test_a_request_dag_names_its_request_and_other_dags_none():
    assert pipeline_ids.request_name_of_dag("tfjob__digits-ps") == "digits-ps"
    assert pipeline_ids.request_name_of_dag("tfjob_submit__team-a") is None
    assert pipeline_ids.request_name_of_dag("tfjob__") is None
    assert pipeline_ids.request_name_of_dag("other") is None


def test_the_tenant_tag_is_read_back_and_several_tenants_name_none():
    assert pipeline_ids.tenant_of_tags(["tfjob", pipeline_ids.tenant_tag("team-a")]) == "team-a"
    assert pipeline_ids.tenant_of_tags(["tfjob"]) is None
    assert pipeline_ids.tenant_of_tags(["tenant:a", "tenant:b"]) is None


@given(
    job=st.text(min_size=1, max_size=200),
    run_id=st.text(max_size=100),
    role=st.sampled_from(Role),
    index=st.integers(min_value=0, max_value=99999),
)
def test_a_pod_name_parses_back_to_its_role_and_index(job, run_id, role, index):
    key = naming.run_key(job, DAG_ID, run_id)
    assert naming.parse_pod_name(naming.pod_name(key, role, index)) == (role, index)


@pytest.mark.parametrize(
    "name",
    [
        "digits-12345678-runtime",
        "digits-12345678-access",
        "worker-0",
        "digits-12345678-leader-0",
        "digits-12345678-worker-x",
        "digits-12345678-worker-",
    ],
)
def test_a_name_that_is_no_replica_pod_parses_to_none(name):
    assert naming.parse_pod_name(name) is None
