"""tshell submit/status/list/logs/cancel/download against a real Airflow and S3 server.

The DAGs are stand-ins for the tenants' submit DAGs `tfjob_submit__<tenant>`
with the pipeline's task names (tests/tshell/tshell_run_dags/), so these tests check
tshell's REST mechanics, not the training pipeline. Airflow runs this repo's
plugin, so a run's archived files come through `/tfjob/runs/.../files`, read
with the tenant's own S3 connection (TENANTS_YAML); tshell holds no S3
setting at all. The tests log in as the admin, except where a tenant's user
(`<role>-user`) meets another tenant's run; test_tshell_run_access.py words
Airflow's other refusals.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import s3_fixtures
from harness.airflow_fixtures import AirflowHandle, airflow_server, start_airflow
from harness.localkube_fixtures import LocalkubeHandle, start_localkube, stop_localkube
from harness.repo_root import REPO_ROOT
from harness.s3_fixtures import S3Server
from harness.tshell_fixtures import point_tshell_at
from tshell.cli import run as run_tshell_cli

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TEST_DAGS = Path(__file__).resolve().parent / "tshell_run_dags"
BUCKET = s3_fixtures.BUCKETS[0]
RUN_TIMEOUT_S = 180.0
SUBMIT_DAG = "tfjob_submit__team-a"  # the submit DAG of REQUEST_YAML's tenant

REQUEST_YAML = """\
name: digits
tenant: team-a
entrypoint: [python3, train.py]
bundle: s3://bundles/digits.tar.gz
output: s3://tfjob-test/digits
"""

# The fake tenants, each reading S3 through its own Airflow connection (AIRFLOW_CONN_*).
TENANTS_YAML = "tenants:\n" + "".join(
    f"- {{name: {n}, quota: {{cpu: '4', memory: 8Gi, nvidia.com/gpu: '0', pods: '10'}}, "
    f"defaults: {{cpu: 100m, memory: 128Mi}}, bundle_prefixes: [s3://tfjob-test/{n}/bundles/], "
    f"output_prefixes: [s3://tfjob-test/{n}/outputs/], aws_conn_id: {n.replace('-', '_')}_s3}}\n"
    for n in ("team-a", "team-b")
)


@pytest.fixture(scope="module")
def airflow(
    tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server
) -> Iterator[AirflowHandle]:
    home = tmp_path_factory.mktemp("airflow")
    tenants_file = home / "tenants.yaml"
    tenants_file.write_text(TENANTS_YAML)
    extra = {"endpoint_url": s3_server.endpoint, "region_name": s3_server.region}
    connection = json.dumps(
        {
            "conn_type": "aws",
            "login": s3_server.access_key,
            "password": s3_server.secret_key,
            "extra": extra,
        }
    )
    # No AWS_* variables: every S3 call of the DAGs and of the files API uses a connection.
    env = {
        "TFJOB_TENANTS_FILE": str(tenants_file),
        "AIRFLOW_CONN_TEAM_A_S3": connection,
        "AIRFLOW_CONN_TEAM_B_S3": connection,
    }
    handle = start_airflow(home, extra_env=env, dags_folder=TEST_DAGS)
    yield handle
    handle.stop()
    leftover = airflow_server.find_instance_pids(handle.home)
    assert not [pid for pid in leftover if airflow_server.is_alive(pid)], "Airflow outlived stop()"


@pytest.fixture
def tshell_env(airflow: AirflowHandle, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An Airflow login and nothing else: no S3 endpoint or key reaches tshell."""
    # Live pod logs (KUBECONFIG) only where a test asks for them.
    point_tshell_at(monkeypatch, tmp_path, airflow.url, airflow.username, airflow.password)


@dataclass
class Result:
    code: int
    out: str
    err: str


def tshell(capsys: pytest.CaptureFixture[str], *argv: str) -> Result:
    capsys.readouterr()
    code = run_tshell_cli([*argv, "--poll-interval", "0.5"] if argv[0] in POLLING else list(argv))
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


POLLING = {"submit", "logs", "cancel"}


@pytest.fixture
def request_file(tmp_path: Path) -> Path:
    path = tmp_path / "request.yaml"
    path.write_text(REQUEST_YAML)
    return path


def submit_run(capsys: pytest.CaptureFixture[str], request_file: Path, *sets: str) -> str:
    args = [item for s in sets for item in ("--set", s)]
    result = tshell(capsys, "submit", str(request_file), *args, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)["run_id"]


def await_task_state(capsys, run_id: str, task_id: str, states: set[str]) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        status = json.loads(tshell(capsys, "status", run_id, "--json").out)
        state = {t["task_id"]: t["state"] for t in status["tasks"]}.get(task_id)
        if state in states:
            return
        assert time.monotonic() < deadline, f"{task_id} never reached {states} (last: {state})"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def finished_run(airflow: AirflowHandle, s3_server: S3Server, tmp_path_factory) -> dict:
    """One run submitted with --wait and followed to success, shared by the read-only tests."""
    env = {
        **os.environ,
        "TSHELL_CONFIG": "/nonexistent/tshell.yaml",
        "TSHELL_SERVICES_FILE": "/nonexistent/services.json",
        "TSHELL_AIRFLOW_URL": airflow.url,
        "TSHELL_USERNAME": airflow.username,
        "TSHELL_PASSWORD": airflow.password,
    }
    request = tmp_path_factory.mktemp("request") / "request.yaml"
    request.write_text(REQUEST_YAML)
    # Through the installed entry point, as a person would run it.
    completed = subprocess.run(
        [sys.executable, "-m", "tshell", "submit", str(request), "--set", "env.TRAIN_SECONDS=1"]
        + ["--wait", "--poll-interval", "0.5"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    first = completed.stdout.splitlines()[0]
    assert first.startswith("submitted run "), completed.stdout + completed.stderr
    return {
        "code": completed.returncode,
        "out": completed.stdout,
        "err": completed.stderr,
        "run_id": first.removeprefix("submitted run "),
    }


def test_submit_wait_prints_run_id_ui_link_and_each_task_reaching_success(finished_run, airflow):
    assert finished_run["code"] == 0, finished_run["err"]
    out = finished_run["out"]
    assert f"  DAG: {SUBMIT_DAG}\n" in out
    assert f"UI:  {airflow.url}/dags/{SUBMIT_DAG}/runs/manual__" in out
    for task in ("validate", "launch", "train", "archive", "remove_pods"):
        assert any(line.split()[1:] == [task, "success"] for line in out.splitlines()[3:]), out
    assert "replicas worker: 127.0.0.1:2222" in out
    assert out.rstrip().endswith(f"run {finished_run['run_id']}: success")


def test_status_json_shows_tasks_replicas_and_request(tshell_env, capsys, finished_run):
    result = tshell(capsys, "status", finished_run["run_id"], "--json")
    assert result.code == 0, result.err
    status = json.loads(result.out)
    assert status["state"] == "success"
    assert (status["name"], status["tenant"]) == ("digits", "team-a")
    assert {t["task_id"]: t["state"] for t in status["tasks"]}["train"] == "success"
    assert status["replicas"] == {"worker": ["127.0.0.1:2222"], "ps": ["127.0.0.1:2223"]}


def test_status_table_lists_every_task(tshell_env, capsys, finished_run):
    result = tshell(capsys, "status", finished_run["run_id"])
    assert result.code == 0, result.err
    assert "state    success" in result.out
    header = next(line for line in result.out.splitlines() if line.startswith("TASK"))
    assert header.split() == ["TASK", "STATE", "TRY", "STARTED", "DURATION"]


def test_status_of_a_failed_run_ends_with_the_error_of_its_failed_task(
    tshell_env, capsys, request_file
):
    submitted = tshell(
        capsys, "submit", str(request_file), "--set", "env.TRAIN_FAIL=worker-1 exited 3", "--wait"
    )
    assert submitted.out.startswith("submitted run "), submitted.out + submitted.err
    run_id = submitted.out.splitlines()[0].removeprefix("submitted run ")
    result = tshell(capsys, "status", run_id)
    assert result.code == 0, result.err
    assert any(line.split()[:2] == ["train", "failed"] for line in result.out.splitlines())
    assert result.out.rstrip().splitlines()[-4:] == [
        "failed   train (try 1): RuntimeError",
        "  training failed: worker-1 exited 3",
        "  last log lines:",
        "    [worker-0] step 2",
    ], result.out
    status = json.loads(tshell(capsys, "status", run_id, "--json").out)
    assert status["failure"]["task"] == "train" and status["failure"]["error"] == "RuntimeError"
    assert status["failure"]["message"].startswith("training failed: worker-1 exited 3")


def test_status_watch_draws_frames_while_the_run_trains_and_the_last_when_it_ended(
    tshell_env, capsys, request_file
):
    submitted = tshell(capsys, "submit", str(request_file), "--set", "env.TRAIN_SECONDS=6")
    assert submitted.code == 0, submitted.err
    run_id = submitted.out.splitlines()[0].removeprefix("submitted run ")
    result = tshell(capsys, "status", run_id, "--watch", "--poll-interval", "0.5")
    assert result.code == 0, result.err
    frames = result.out.split("\nrun ")
    assert len(frames) >= 3, result.out  # the output is no terminal: a frame per change
    assert any(": running" in frame.splitlines()[0] for frame in frames), result.out
    assert ": success" in frames[-1].splitlines()[0], result.out
    header = next(line for line in frames[-1].splitlines() if line.startswith("REPLICA"))
    assert header.split()[-2:] == ["STEP", "LOSS"], frames[-1]
    worker = next(line for line in frames[-1].splitlines() if line.startswith("worker-0"))
    assert int(worker.split()[-2]) >= 8, frames[-1]  # 6 s of a point every 0.5 s
    steps = [
        int(line.split()[-2])
        for frame in frames
        for line in frame.splitlines()
        if line.startswith("worker-0")
    ]
    assert steps == sorted(steps) and len(set(steps)) >= 2, result.out  # live, and onward


def test_list_filters_by_tenant_and_state(tshell_env, capsys, finished_run):
    run_id = finished_run["run_id"]
    assert run_id in tshell(capsys, "list", "--tenant", "team-a").out
    assert run_id not in tshell(capsys, "list", "--tenant", "team-b").out
    assert run_id not in tshell(capsys, "list", "--state", "failed").out
    runs = json.loads(tshell(capsys, "list", "--state", "success", "--json").out)
    assert (run_id, SUBMIT_DAG) in [(r["run_id"], r["dag_id"]) for r in runs]


def test_logs_of_a_finished_run_come_from_the_archive_through_airflow(
    tshell_env, capsys, finished_run, s3_server
):
    result = tshell(capsys, "logs", finished_run["run_id"], "--role", "ps", "--index", "0")
    assert result.code == 0, result.err
    assert result.out == "ps-0 archived line 1\nps-0 archived line 2\n"
    assert result.out.encode() == s3_object(s3_server, finished_run, "logs/ps-0.log")
    every = tshell(capsys, "logs", finished_run["run_id"]).out
    assert "==> worker-0.log <==" in every and "==> ps-0.log <==" in every


def test_logs_of_an_airflow_task_show_its_printed_lines(tshell_env, capsys, finished_run):
    result = tshell(capsys, "logs", finished_run["run_id"], "--task", "train", "--role", "worker")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[:3] == ["step 0", "step 1", "step 2"]
    assert lines[-1] == "training done"
    assert not any("[ps-0]" in line for line in lines)


def run_key_prefix(run: dict) -> str:
    return f"digits/runs/{SUBMIT_DAG}/{run['run_id']}/"


def s3_object(s3_server: S3Server, run: dict, path: str) -> bytes:
    """What the run's archive wrote, read from S3 directly (the tests' own key)."""
    answer = s3_server.client().get_object(Bucket=BUCKET, Key=run_key_prefix(run) + path)
    return answer["Body"].read()


def s3_paths(s3_server: S3Server, run: dict, under: str) -> list[str]:
    prefix = run_key_prefix(run)
    page = s3_server.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix + under)
    return sorted(item["Key"][len(prefix) :] for item in page.get("Contents", []))


def fetch(handle: AirflowHandle, path: str) -> tuple[int, dict[str, str], bytes]:
    """One GET with the user's token: (status, headers by lowercase name, body), even a 4xx."""
    request = urllib.request.Request(
        handle.url + path, headers={"Authorization": f"Bearer {handle.token()}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=90) as response:
            headers = {k.lower(): v for k, v in response.headers.items()}
            return response.status, headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def files_path(run: dict, path: str | None = None) -> str:
    base = f"/tfjob/runs/{SUBMIT_DAG}/{run['run_id']}/files"
    return base if path is None else f"{base}/{path}"


def test_download_model_writes_the_bytes_s3_holds(
    tshell_env, capsys, finished_run, tmp_path, s3_server
):
    result = tshell(capsys, "download", finished_run["run_id"], "model", str(tmp_path / "m"))
    assert result.code == 0, result.err
    model = s3_paths(s3_server, finished_run, "model/")
    assert len(model) == 3
    for path in model:
        written = tmp_path / "m" / path.removeprefix("model/")
        assert written.read_bytes() == s3_object(s3_server, finished_run, path), path
    assert (tmp_path / "m" / "saved_model.pb").read_bytes() == b"model-bytes"
    assert (tmp_path / "m" / "variables" / "variables.data-00000-of-00001").stat().st_size > 2**21
    assert not list((tmp_path / "m").rglob("*.part"))
    assert "downloaded 3 files" in result.out and run_key_prefix(finished_run) in result.out


def test_download_logs_writes_each_replica_s_archived_log(
    tshell_env, capsys, finished_run, tmp_path, s3_server
):
    result = tshell(capsys, "download", finished_run["run_id"], "logs", str(tmp_path), "--json")
    assert result.code == 0, result.err
    assert sorted(Path(p).name for p in json.loads(result.out)) == ["ps-0.log", "worker-0.log"]
    for name in ("ps-0.log", "worker-0.log"):
        assert (tmp_path / name).read_bytes() == s3_object(s3_server, finished_run, f"logs/{name}")


def test_the_files_api_lists_and_serves_a_run_with_the_tenant_s_connection(
    airflow, finished_run, s3_server
):
    status, _, body = fetch(airflow, files_path(finished_run))
    assert status == 200, body
    listing = json.loads(body)
    assert [f["path"] for f in listing["files"]] == s3_paths(s3_server, finished_run, "")
    assert listing["truncated"] is False and listing["limit"] == 10_000
    status, headers, body = fetch(airflow, files_path(finished_run, "run.json"))
    assert status == 200 and body == s3_object(s3_server, finished_run, "run.json")
    assert headers["content-length"] == str(len(body))
    assert 'filename="run.json"' in headers["content-disposition"]
    assert headers["content-type"] == "application/octet-stream"
    # Nothing of the connection's key, and no presigned URL, in any answer.
    answers = [json.dumps(listing), json.dumps(headers)]
    for path in ("model/no-such-file", "..%2Frun.json", "model//x"):
        code, headers, body = fetch(airflow, files_path(finished_run, path))
        answers += [body.decode(), json.dumps(headers)]
        assert code in (400, 404), (path, code, body)
    for mark in (
        "X-Amz-Signature",
        "x-amz-signature",
        "X-Amz-Credential",
        s3_server.access_key,
        s3_server.secret_key,
    ):
        assert not [a for a in answers if mark in a], mark


def test_the_files_api_names_a_missing_file_and_a_path_that_leaves_the_run(airflow, finished_run):
    status, _, body = fetch(airflow, files_path(finished_run, "model/no-such-file"))
    assert status == 404 and "model/no-such-file: no such file" in json.loads(body)["detail"]
    status, _, body = fetch(airflow, files_path(finished_run, "model/../../other/run.json"))
    assert status == 400
    assert "segment '..' is not allowed" in json.loads(body)["detail"]
    assert "'model/../../other/run.json'" in json.loads(body)["detail"]


def test_a_user_of_another_tenant_is_refused_the_run_s_files(
    tshell_env, capsys, airflow, finished_run, tmp_path, monkeypatch
):
    own = airflow.for_user("team-a-user")
    status, _, body = fetch(own, files_path(finished_run, "model/saved_model.pb"))
    assert (status, body) == (200, b"model-bytes")
    other = airflow.for_user("team-b-user")
    for path in (files_path(finished_run), files_path(finished_run, "model/saved_model.pb")):
        status, _, body = fetch(other, path)
        assert status == 403, (path, status, body)
    monkeypatch.setenv("TSHELL_USERNAME", other.username)
    monkeypatch.setenv("TSHELL_PASSWORD", other.password)
    run_id = finished_run["run_id"]
    result = tshell(capsys, "download", run_id, "model", str(tmp_path), "--dag", SUBMIT_DAG)
    assert result.code == 3
    assert f"user team-b-user may not read run {run_id} of DAG {SUBMIT_DAG}" in result.err
    assert list(tmp_path.iterdir()) == []


def test_logs_follow_prints_replica_lines_live_until_the_task_ends(
    tshell_env, capsys, request_file
):
    run_id = submit_run(capsys, request_file, "env.TRAIN_SECONDS=4")
    await_task_state(capsys, run_id, "train", {"running", "success"})
    result = tshell(capsys, "logs", run_id, "--role", "worker", "--follow")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "step 0" and lines[-1] == "training done"
    assert lines.count("step 1") == 1  # the continuation token prevents repeats
    assert lines.count("still training") >= 4


def test_cancel_fails_the_run_and_still_runs_its_teardown(
    tshell_env, capsys, request_file, s3_server
):
    run_id = submit_run(capsys, request_file, "env.TRAIN_SECONDS=300")
    await_task_state(capsys, run_id, "train", {"running"})
    result = tshell(capsys, "cancel", run_id, "--timeout", str(RUN_TIMEOUT_S))
    assert result.code == 0, result.err
    assert "failed train" in result.out
    status = json.loads(tshell(capsys, "status", run_id, "--json").out)
    states = {t["task_id"]: t["state"] for t in status["tasks"]}
    assert status["state"] == "failed"
    assert states["train"] == "failed" and states["remove_pods"] == "success"
    marker = s3_server.client().list_objects_v2(
        Bucket=BUCKET, Prefix=f"digits/runs/{SUBMIT_DAG}/{run_id}/teardown.done"
    )
    assert marker.get("KeyCount") == 1
    again = tshell(capsys, "cancel", run_id)
    assert again.code == 0 and "already ended: failed" in again.out


def test_conf_refused_by_the_server_is_shown_with_the_field(tshell_env, capsys, request_file):
    # The stand-in's `name` Param is stricter than the request model (NAME_LIMIT).
    result = tshell(capsys, "submit", str(request_file), "--set", "name=a-longer-name")
    assert result.code == 3
    assert "HTTP 400" in result.err
    assert "Invalid input for param name: 'a-longer-name' is too long" in result.err


def test_submit_for_a_tenant_without_a_submit_dag_says_so(tshell_env, capsys, request_file):
    result = tshell(capsys, "submit", str(request_file), "--set", "tenant=team-z")
    assert result.code == 4
    assert "tenant 'team-z' has no submit DAG" in result.err
    assert "(Airflow answered 404 for DAG tfjob_submit__team-z)" in result.err


def test_invalid_request_is_refused_locally_with_the_field(tshell_env, capsys, request_file):
    result = tshell(capsys, "submit", str(request_file), "--set", "name=Not_A_Label")
    assert result.code == 2
    assert 'request.name: "Not_A_Label" given' in result.err


def test_unknown_run_says_so(tshell_env, capsys):
    result = tshell(capsys, "status", "manual__no-such-run")
    assert result.code == 4
    assert "unknown run 'manual__no-such-run'" in result.err


def test_wrong_password_is_reported_as_a_refused_login(tshell_env, capsys, monkeypatch):
    monkeypatch.setenv("TSHELL_PASSWORD", "not-the-password")
    result = tshell(capsys, "list")
    assert result.code == 3
    assert "refused the login of user 'admin' (HTTP 401)" in result.err


def test_unreachable_airflow_names_the_url(tshell_env, capsys, monkeypatch):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setenv("TSHELL_AIRFLOW_URL", url)
    result = tshell(capsys, "list")
    assert result.code == 3
    assert f"Airflow is not reachable at {url}" in result.err


def test_a_rejected_token_is_replaced_once(airflow):
    from tshell.airflow_client import AirflowSession
    from tshell.config import AirflowConfig

    session = AirflowSession(AirflowConfig(airflow.url, airflow.username, airflow.password))
    session._token, session._token_expiry = "not-a-valid-token", time.time() + 3600
    assert "dags" in session.get_json("/api/v2/dags")
    assert session._token != "not-a-valid-token"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalkubeHandle]:
    handle = start_localkube(tmp_path_factory.mktemp("localkube"))
    yield handle
    stop_localkube(handle)


def create_replica_pod(core, namespace: str, run_key: str, role: str, index: int, script: str):
    from kubernetes import client

    from tfjob import naming

    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    except client.exceptions.ApiException as error:
        assert error.status == 409, error
    labels = {"tfjob.io/run": run_key, "tfjob.io/role": role, "tfjob.io/index": str(index)}
    container = client.V1Container(
        name="tensorflow", image="alpine:3", command=["sh", "-c", script]
    )
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=naming.pod_name(run_key, role, index), namespace=namespace, labels=labels
        ),
        spec=client.V1PodSpec(containers=[container], restart_policy="Never"),
    )
    core.create_namespaced_pod(namespace, pod)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="localkube's kubelet needs root")
def test_logs_and_status_of_a_running_run_read_the_replica_pods_in_kubernetes(
    tshell_env, capsys, request_file, cluster, monkeypatch
):
    from tfjob import naming

    monkeypatch.setenv("TSHELL_KUBECONFIG", cluster.kubeconfig)
    run_id = submit_run(capsys, request_file, "env.TRAIN_SECONDS=300")
    run_key = naming.run_key("digits", SUBMIT_DAG, run_id)
    core = cluster.core_v1()
    loop = "for i in 1 2 3 4 5; do echo {who} line $i; sleep 0.3; done"
    create_replica_pod(core, "tfjob-team-a", run_key, "worker", 0, loop.format(who="w0"))
    create_replica_pod(core, "tfjob-team-a", run_key, "ps", 0, loop.format(who="ps0"))
    try:
        await_task_state(capsys, run_id, "validate", {"success"})
        one = tshell(capsys, "logs", run_id, "--role", "worker", "--index", "0", "--follow")
        assert one.code == 0, one.err
        assert one.out.splitlines() == [f"w0 line {i}" for i in range(1, 6)]
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:  # the ps pod runs at its own pace
            both = tshell(capsys, "logs", run_id)
            assert both.code == 0, both.err
            if "[ps-0] ps0 line 5" in both.out.splitlines():
                break
            assert time.monotonic() < deadline, both.out
            time.sleep(0.5)
        assert "[worker-0] w0 line 1" in both.out.splitlines()
        status = json.loads(tshell(capsys, "status", run_id, "--json").out)
        phases = {p["replica"]: p["phase"] for p in status["pods"]}
        assert phases == {"ps-0": "Succeeded", "worker-0": "Succeeded"}
        table = tshell(capsys, "status", run_id).out.splitlines()
        assert ["ps-0", "Succeeded", naming.pod_name(run_key, "ps", 0)] in [
            line.split() for line in table
        ]
    finally:
        assert tshell(capsys, "cancel", run_id, "--no-wait").code == 0
