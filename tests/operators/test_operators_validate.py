"""validate: the run's tenant is its DAG's, and its policy is checked before any S3 or
Kubernetes call; a run's identity (run key, S3 prefix, objects) includes its DAG.

The S3 side runs against the real S3 server; Kubernetes is replaced by a recorder
that fails the test if it is asked anything before the policy allowed the run.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from airflow.sdk.exceptions import AirflowFailException

from harness import s3_fixtures
from operators import steps
from operators.runinfo import describe_run, read_run
from operators.runoutputs import clear_run_outputs
from operators.s3access import presign_upload
from runtime import transfer
from tfjob.pipeline_ids import FETCH_BUNDLE_TASK, VALIDATE_TASK
from tfjob.request.model import load_request
from tfjob.tenants import TENANTS_FILE_ENV

BUCKET = s3_fixtures.BUCKETS[0]
QUOTA = {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "0", "pods": "10"}


def tenant_entry(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "quota": QUOTA,
        "defaults": {"cpu": "100m", "memory": "128Mi"},
        "bundle_prefixes": [f"s3://{BUCKET}/{name}/bundles/"],
        "output_prefixes": [f"s3://{BUCKET}/{name}/outputs/"],
        "images": ["python:*"],
        **extra,
    }


@pytest.fixture(autouse=True)
def two_tenants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "tenants.yaml"
    path.write_text(
        yaml.safe_dump(
            {"tenants": [tenant_entry("team-a", aws_conn_id="team_a_s3"), tenant_entry("team-b")]}
        )
    )
    monkeypatch.setenv(TENANTS_FILE_ENV, str(path))
    for tenant in ("TEAM_A", "TEAM_B"):  # each tenant's pods-only presigning connection
        monkeypatch.setenv(f"AIRFLOW_CONN_TFJOB_PODS_{tenant}", '{"conn_type": "aws"}')
    return path


def request_data(name: str = "job", tenant: str = "team-a", **changes: Any) -> dict[str, Any]:
    return {
        "name": name,
        "tenant": tenant,
        "image": "python:3.11",
        "entrypoint": ["python3", "train.py"],
        "bundle": f"s3://{BUCKET}/{tenant}/bundles/b.tar.gz",
        "output": f"s3://{BUCKET}/{tenant}/outputs/{name}",
        **changes,
    }


class Recorder:
    """Stands in for the Kubernetes and S3 clients: records who asked, answers nothing."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def kube(self) -> Any:
        self.calls.append("kubernetes")
        raise AssertionError("validate called Kubernetes")

    def s3(self, run: Any) -> Any:
        self.calls.append("s3")
        raise AssertionError("validate called S3")


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(steps, "_kube", recorder.kube)
    monkeypatch.setattr(steps, "_s3", recorder.s3)
    return recorder


def run_validate(
    monkeypatch: pytest.MonkeyPatch,
    dag_id: str,
    *,
    conf: dict | None = None,
    request_file: str | None = None,
    tenant: str | None,
    dag_tags: list[str] | None = None,
) -> dict[str, Any]:
    tags = ["tfjob", f"tenant:{tenant}"] if tenant else ["tfjob", "invalid"]
    dag = SimpleNamespace(dag_id=dag_id, tags=dag_tags if dag_tags is not None else tags)
    context = {"dag": dag, "run_id": "manual__1", "params": conf or {}}
    monkeypatch.setattr(steps, "get_current_context", lambda: context)
    return steps.validate(request_file, tenant)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"tenant": "team-b"},
            "request.tenant: 'team-b' given; this DAG (tfjob_submit__team-a) "
            "runs only tenant team-a",
        ),
        (
            {"output": f"s3://{BUCKET}/team-b/outputs/job"},
            f"request.output: 's3://{BUCKET}/team-b/outputs/job' given; tenant team-a "
            f"may write outputs only under s3://{BUCKET}/team-a/outputs/",
        ),
        (
            {"bundle": f"s3://{BUCKET}/team-b/bundles/b.tar.gz"},
            f"request.bundle: 's3://{BUCKET}/team-b/bundles/b.tar.gz' given; tenant team-a "
            f"may read bundles only under s3://{BUCKET}/team-a/bundles/",
        ),
        (
            {"image": "evil/miner:1"},
            "request.image: 'evil/miner:1' given; tenant team-a may run "
            "only images matching python:*",
        ),
    ],
)
def test_a_submit_dag_refuses_what_its_tenant_may_not_do_before_any_s3_or_kubernetes_call(
    monkeypatch, clients, changes, message
):
    conf = {**request_data(), **changes}
    with pytest.raises(AirflowFailException) as refused:
        run_validate(monkeypatch, "tfjob_submit__team-a", conf=conf, tenant="team-a")
    assert str(refused.value) == message
    assert clients.calls == []


def test_a_request_file_changed_to_another_tenant_is_refused_by_its_dag(
    monkeypatch, clients, tmp_path
):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(request_data(tenant="team-b")))  # the DAG was built for team-a
    with pytest.raises(
        AirflowFailException,
        match=r"request.tenant: 'team-b' given; this DAG "
        r"\(tfjob__job\) runs only tenant team-a",
    ):
        run_validate(monkeypatch, "tfjob__job", request_file=str(path), tenant="team-a")
    assert clients.calls == []


def test_a_request_file_naming_another_request_is_refused_naming_the_file_and_the_name(
    monkeypatch, clients, tmp_path
):
    path = tmp_path / "aaa.yaml"
    path.write_text(yaml.safe_dump(request_data(name="digits-single")))
    with pytest.raises(
        AirflowFailException,
        match=r"request file aaa.yaml: request.name 'digits-single' given; allowed: 'aaa'",
    ):
        run_validate(monkeypatch, "tfjob__digits-single", request_file=str(path), tenant="team-a")
    assert clients.calls == []


def test_a_run_of_a_dag_tagged_for_another_tenant_is_refused_before_anything_is_recorded(
    monkeypatch, clients, tmp_path
):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(request_data()))
    with pytest.raises(AirflowFailException, match="its tags name tenant 'team-b'"):
        run_validate(
            monkeypatch,
            "tfjob__job",
            request_file=str(path),
            tenant="team-a",
            dag_tags=["tfjob", "tenant:team-b"],
        )
    assert clients.calls == []


def test_the_invalid_dag_of_a_request_naming_an_unknown_tenant_fails_listing_the_known_ones(
    monkeypatch, clients, tmp_path
):
    path = tmp_path / "stray.yaml"
    path.write_text(yaml.safe_dump(request_data(name="stray", tenant="nobody")))
    with pytest.raises(
        AirflowFailException, match="request.tenant: 'nobody' given; known tenants .*team-a, team-b"
    ):
        run_validate(monkeypatch, "tfjob__stray", request_file=str(path), tenant=None)
    assert clients.calls == []


def test_an_allowed_request_is_described_with_its_tenants_s3_connection_and_dag(
    monkeypatch, clients
):
    admitted = []

    def admit(core: Any, request: Any, config: Any) -> Any:
        admitted.append((request.tenant, config.names()))
        return config.find(request.tenant), SimpleNamespace(message="fits")

    monkeypatch.setattr("tenancy.admission.admit_request", admit)
    monkeypatch.setattr(steps, "_kube", lambda: "kube")
    described = run_validate(
        monkeypatch, "tfjob_submit__team-a", conf=request_data(), tenant="team-a"
    )
    assert admitted == [("team-a", ["team-a", "team-b"])]  # the quota check comes after
    assert described["aws_conn_id"] == "team_a_s3"
    assert described["run_prefix"] == (
        f"s3://{BUCKET}/team-a/outputs/job/runs/tfjob_submit__team-a/manual__1"
    )
    assert described["namespace"] == "tfjob-team-a"
    assert read_run(described).aws_conn_id == "team_a_s3"
    other = run_validate(
        monkeypatch, "tfjob_submit__team-b", conf=request_data(tenant="team-b"), tenant="team-b"
    )
    assert other["aws_conn_id"] == "aws_default"  # a tenant naming none


def test_a_tenant_without_its_pods_presigning_connection_is_refused_naming_it(monkeypatch, clients):
    from operators.grants import PresignConnectionMissing

    monkeypatch.setattr(
        "tenancy.admission.admit_request",
        lambda core, request, config: (config.find(request.tenant), SimpleNamespace(message="")),
    )
    monkeypatch.setattr(steps, "_kube", lambda: "kube")
    monkeypatch.delenv("AIRFLOW_CONN_TFJOB_PODS_TEAM_A")
    with pytest.raises(PresignConnectionMissing, match="'tfjob_pods_team_a'.*never signed with"):
        run_validate(monkeypatch, "tfjob_submit__team-a", conf=request_data(), tenant="team-a")


def test_nothing_is_written_under_another_tenants_prefix_when_validate_refuses(
    monkeypatch, s3_server
):
    """validate, then fetch_bundle only if it succeeded (as Airflow runs them)."""
    s3 = s3_server.client()
    s3.put_object(Bucket=BUCKET, Key="team-b/bundles/b.tar.gz", Body=b"team-b's bundle")
    monkeypatch.setattr(steps, "_s3", lambda run: s3)
    monkeypatch.setattr(steps, "_kube", lambda: pytest.fail("Kubernetes asked"))
    conf = request_data(
        bundle=f"s3://{BUCKET}/team-b/bundles/b.tar.gz",
        output=f"s3://{BUCKET}/team-b/outputs/stolen",
    )
    xcoms: dict[str, Any] = {}
    with pytest.raises(AirflowFailException, match="request.bundle"):
        xcoms[VALIDATE_TASK] = run_validate(
            monkeypatch, "tfjob_submit__team-a", conf=conf, tenant="team-a"
        )
        xcoms[FETCH_BUNDLE_TASK] = steps.fetch_bundle()
    assert xcoms == {}
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="team-b/")
    assert [o["Key"] for o in listed["Contents"]] == ["team-b/bundles/b.tar.gz"]


# --- a run is its DAG's: run key, prefix and objects never shared -------------------------


def describe(
    dag_id: str, run_id: str = "manual__2026-12-03T08:00:00+00:00", name: str = "job"
) -> dict[str, Any]:
    request = load_request(request_data(name=name))
    return describe_run(request, run_id, dag_id, "aws_default")


def test_two_dags_with_the_same_job_and_run_id_never_share_a_run_key_or_prefix():
    mine, theirs = describe("tfjob__job"), describe("tfjob_submit__team-a")
    assert mine["run_key"] != theirs["run_key"]
    assert mine["run_prefix"].endswith("/runs/tfjob__job/manual__2026-12-03T08:00:00+00:00")
    assert theirs["run_prefix"].endswith(
        "/runs/tfjob_submit__team-a/manual__2026-12-03T08:00:00+00:00"
    )
    for one, other in ((mine, theirs), (theirs, mine)):
        assert not (other["run_prefix"] + "/").startswith(one["run_prefix"] + "/")
    # another job name in the same DAG and run: another run key too
    assert describe("tfjob__job", name="job2")["run_key"] != mine["run_key"]


def test_a_runs_grants_and_clearing_never_reach_another_dags_run_with_the_same_ids(
    s3_server, tmp_path
):
    s3 = s3_server.client()
    mine = read_run(describe("tfjob__job"))
    theirs = read_run(describe("tfjob_submit__team-a"))
    their_keys = theirs.layout.root.key
    s3.put_object(Bucket=BUCKET, Key=their_keys + "model/m.bin", Body=b"theirs")
    s3.put_object(Bucket=BUCKET, Key=their_keys + "metrics.json", Body=b"{}")

    assert clear_run_outputs(s3, mine.layout) == []
    raw = presign_upload(s3_server.presigner(), mine.request.output, mine.dag_id, mine.run_id, 60)
    policy = transfer.UploadPolicy.from_json(raw)
    assert policy.prefix == mine.layout.root.key
    path = tmp_path / "m.bin"
    path.write_bytes(b"mine")
    with pytest.raises(transfer.TransferError, match="no grant covers this key"):
        transfer.post_file(policy, their_keys + "model/m.bin", path, retries=0)
    transfer.post_file(policy, policy.prefix + "model/m.bin", path, retries=0)

    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=their_keys)
    assert sorted(o["Key"] for o in listed["Contents"]) == [
        their_keys + "metrics.json",
        their_keys + "model/m.bin",
    ]
    assert s3.get_object(Bucket=BUCKET, Key=their_keys + "model/m.bin")["Body"].read() == b"theirs"
