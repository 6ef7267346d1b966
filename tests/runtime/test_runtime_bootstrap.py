"""The main container's bootstrap (runtime/bootstrap.py) as a subprocess, without TensorFlow."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.repo_root import REPO_ROOT
from harness.s3_fixtures import S3Server
from operators.s3access import presign_upload

# The DAG of the runs these tests grant for: part of every run's S3 prefix.
DAG = "tfjob__job"


REPO = REPO_ROOT
BOOTSTRAP = ("-m", "runtime.bootstrap")  # as protocol.BOOTSTRAP_COMMAND runs it
DEADLINE_S = 30.0

CLUSTER = {
    "tf_config": {
        "cluster": {"ps": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "10.0.0.3:2222"]},
        "task": {"type": "worker", "index": 1},
    },
}
LEGACY = {
    "PS_HOSTS": "10.0.0.1:2222",
    "WORKER_HOSTS": "10.0.0.2:2222,10.0.0.3:2222",
    "JOB_NAME": "worker",
    "TASK_INDEX": "1",
}

DUMP_ENV = """
import json, os, sys
names = ["TF_CONFIG", "PS_HOSTS", "WORKER_HOSTS", "CHIEF_HOSTS", "JOB_NAME", "TASK_INDEX",
         "DATA_DIR", "MODEL_DIR", "LOG_DIR", "METRICS_FILE", "MY_SETTING"]
json.dump({"cwd": os.getcwd(), "argv": sys.argv[1:], **{n: os.environ.get(n) for n in names}},
          open(os.path.join(os.environ["TFJOB_WORKSPACE"], "seen.json"), "w"))
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""


def make_pod_dirs(tmp_path: Path, program: str) -> dict[str, Path]:
    dirs = {name: tmp_path / name for name in ("workspace", "config", "access")}
    for path in dirs.values():
        path.mkdir()
    (dirs["workspace"] / "code").mkdir()
    (dirs["workspace"] / "data").mkdir()
    (dirs["workspace"] / "code" / "prog.py").write_text(textwrap.dedent(program))
    return dirs


def pod_env(dirs: dict[str, Path], **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "TFJOB_WORKSPACE": str(dirs["workspace"]),
        "TFJOB_CONFIG_DIR": str(dirs["config"]),
        "TFJOB_ACCESS_DIR": str(dirs["access"]),
        **extra,
    }


def start_bootstrap(
    dirs: dict[str, Path], env: dict[str, str], *args: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-I", *BOOTSTRAP, "--", sys.executable, "prog.py", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_single_mode_runs_in_code_dir_with_workspace_env_and_passes_exit_code(
    tmp_path: Path,
) -> None:
    dirs = make_pod_dirs(tmp_path, DUMP_ENV)
    env = pod_env(dirs, TFJOB_WAIT_CLUSTERSPEC="0", EXIT_WITH="3", MY_SETTING="kept")
    proc = start_bootstrap(dirs, env, "--epochs", "2")
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 3, err
    seen = json.loads((dirs["workspace"] / "seen.json").read_text())
    ws = dirs["workspace"]
    assert seen["cwd"] == str(ws / "code")
    assert seen["argv"] == ["--epochs", "2"]
    assert seen["DATA_DIR"] == str(ws / "data") and seen["MODEL_DIR"] == str(ws / "model")
    assert seen["LOG_DIR"] == str(ws / "logs") and seen["METRICS_FILE"] == str(ws / "metrics.json")
    assert seen["MY_SETTING"] == "kept" and seen["TF_CONFIG"] is None
    assert (ws / "model").is_dir() and (ws / "logs").is_dir()
    assert "TFJOB_METRICS" not in out


def test_distributed_mode_waits_for_cluster_json_then_exports_tf_config_and_legacy_vars(
    tmp_path: Path,
) -> None:
    dirs = make_pod_dirs(tmp_path, DUMP_ENV)
    proc = start_bootstrap(
        dirs, pod_env(dirs, TFJOB_WAIT_CLUSTERSPEC="1", TFJOB_CLUSTERSPEC_TIMEOUT="30")
    )
    assert "waiting up to 30s" in proc.stderr.readline()  # type: ignore[union-attr]
    assert proc.poll() is None and not (dirs["workspace"] / "seen.json").exists()
    tmp = dirs["config"] / ".cluster.json.tmp"
    tmp.write_text(json.dumps(CLUSTER))
    tmp.rename(dirs["config"] / "cluster.json")
    proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0
    seen = json.loads((dirs["workspace"] / "seen.json").read_text())
    assert json.loads(seen["TF_CONFIG"]) == CLUSTER["tf_config"]
    # the TF1-style variables, derived from TF_CONFIG in the pod
    assert {k: seen[k] for k in LEGACY} == LEGACY


def write_cluster_json(dirs: dict[str, Path], content: dict) -> None:
    tmp = dirs["config"] / ".cluster.json.tmp"
    tmp.write_text(json.dumps(content))
    tmp.rename(dirs["config"] / "cluster.json")


def chief_job_cluster_json(role: str, index: int) -> dict:
    """What Airflow writes for one replica of a job with a chief (the platform's own builder)."""
    from harness.tfjob_fixtures import distributed_request_data
    from tfjob.clusterspec import Endpoint, build_cluster_files
    from tfjob.request.model import Role, load_request

    request = load_request(distributed_request_data(replicas={"chief": 1, "ps": 1, "worker": 2}))
    endpoints = [
        Endpoint(r, i, f"10.0.0.{n + 1}", 2222)
        for n, (r, i) in enumerate(request.replicas_in_order())
    ]
    return build_cluster_files(request, endpoints)[(Role(role), index)]


def test_a_replica_of_a_job_with_a_chief_gets_chief_hosts(tmp_path: Path) -> None:
    dirs = make_pod_dirs(tmp_path, DUMP_ENV)
    write_cluster_json(dirs, chief_job_cluster_json("chief", 0))
    proc = start_bootstrap(dirs, pod_env(dirs, TFJOB_WAIT_CLUSTERSPEC="1"))
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    seen = json.loads((dirs["workspace"] / "seen.json").read_text())
    assert (seen["CHIEF_HOSTS"], seen["PS_HOSTS"]) == ("10.0.0.1:2222", "10.0.0.2:2222")
    assert seen["WORKER_HOSTS"] == "10.0.0.3:2222,10.0.0.4:2222"
    assert (seen["JOB_NAME"], seen["TASK_INDEX"]) == ("chief", "0")


SEED_ERA_ARGS = (
    "--chief_hosts=$(CHIEF_HOSTS)",
    "--ps_hosts=$(PS_HOSTS)",
    "--worker_hosts=$(WORKER_HOSTS)",
    "--job_name=$(JOB_NAME)",
    "--task_index=$(TASK_INDEX)",
)


def test_args_are_expanded_with_the_cluster_variables_as_kubernetes_would(
    tmp_path: Path,
) -> None:
    dirs = make_pod_dirs(tmp_path, DUMP_ENV)
    write_cluster_json(dirs, chief_job_cluster_json("worker", 1))
    proc = start_bootstrap(
        dirs,
        pod_env(dirs, TFJOB_WAIT_CLUSTERSPEC="1", MY_SETTING="kept"),
        *SEED_ERA_ARGS,
        "--data=$(DATA_DIR)/digits.npz",
        "--kept=$(MY_SETTING)",
        "--literal=$$(JOB_NAME)",
        "--unset=$(NOT_SET)",
        "--open=$(JOB_NAME",
        "$()",
    )
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    seen = json.loads((dirs["workspace"] / "seen.json").read_text())
    assert seen["argv"] == [
        "--chief_hosts=10.0.0.1:2222",
        "--ps_hosts=10.0.0.2:2222",
        "--worker_hosts=10.0.0.3:2222,10.0.0.4:2222",
        "--job_name=worker",
        "--task_index=1",
        f"--data={dirs['workspace'] / 'data'}/digits.npz",
        "--kept=kept",
        "--literal=$(JOB_NAME)",
        "--unset=$(NOT_SET)",
        "--open=$(JOB_NAME",
        "$()",
    ]


def test_the_command_is_printed_once_without_values_of_other_variables(tmp_path: Path) -> None:
    """Only TF-on-K8s' own variables are printed expanded: any other value may be a token."""
    dirs = make_pod_dirs(tmp_path, DUMP_ENV)
    write_cluster_json(dirs, chief_job_cluster_json("worker", 0))
    token = "tok-5e3c7a1b9f"
    env = pod_env(dirs, TFJOB_WAIT_CLUSTERSPEC="1", API_TOKEN=token, TFJOB_ROLE="worker")
    proc = start_bootstrap(
        dirs, env, "--job_name=$(JOB_NAME)", "--token=$(API_TOKEN)", "--role=$(TFJOB_ROLE)"
    )
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    seen = json.loads((dirs["workspace"] / "seen.json").read_text())
    assert seen["argv"] == ["--job_name=worker", f"--token={token}", "--role=worker"]
    (line,) = [line for line in err.splitlines() if "running " in line]
    assert line == (
        f"tfjob-bootstrap: running {sys.executable} prog.py --job_name=worker "
        "'--token=$(API_TOKEN)' --role=worker (shown as written: API_TOKEN; only "
        "TF-on-K8s' own variables are printed expanded)"
    )
    assert token not in out + err


def test_single_mode_expands_the_workspace_variables_and_leaves_the_cluster_ones(
    tmp_path: Path,
) -> None:
    dirs = make_pod_dirs(tmp_path, DUMP_ENV)
    proc = start_bootstrap(
        dirs,
        pod_env(dirs, TFJOB_WAIT_CLUSTERSPEC="0"),
        "--model_dir=$(MODEL_DIR)",
        "--job_name=$(JOB_NAME)",
    )
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    seen = json.loads((dirs["workspace"] / "seen.json").read_text())
    assert seen["argv"] == [f"--model_dir={dirs['workspace'] / 'model'}", "--job_name=$(JOB_NAME)"]
    assert "(shown as written" not in err


def test_missing_cluster_spec_exits_64_with_a_message(tmp_path: Path) -> None:
    dirs = make_pod_dirs(tmp_path, DUMP_ENV)
    proc = start_bootstrap(
        dirs, pod_env(dirs, TFJOB_WAIT_CLUSTERSPEC="1", TFJOB_CLUSTERSPEC_TIMEOUT="0.5")
    )
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 64
    assert "no ClusterSpec" in err and "TFJOB_CLUSTERSPEC_TIMEOUT" in err
    assert not (dirs["workspace"] / "seen.json").exists()


def test_sigterm_while_waiting_for_the_cluster_spec_stops_at_once(tmp_path: Path) -> None:
    dirs = make_pod_dirs(tmp_path, DUMP_ENV)
    env = pod_env(dirs, TFJOB_WAIT_CLUSTERSPEC="1", TFJOB_CLUSTERSPEC_TIMEOUT="600")
    proc = start_bootstrap(dirs, env)
    assert "waiting up to 600s" in proc.stderr.readline()  # type: ignore[union-attr]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM before the program started" in err


def test_malformed_cluster_spec_exits_65_naming_the_field(tmp_path: Path) -> None:
    dirs = make_pod_dirs(tmp_path, DUMP_ENV)
    (dirs["config"] / "cluster.json").write_text(json.dumps({"tf_config": "oops"}))
    proc = start_bootstrap(dirs, pod_env(dirs, TFJOB_WAIT_CLUSTERSPEC="1"))
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 65
    assert "tf_config: str given; an object is required" in err


SIGNAL_PROGRAM = """
import os, signal, sys, time
ws = os.environ["TFJOB_WORKSPACE"]
def on_term(signum, frame):
    open(os.path.join(ws, "got-signal"), "w").write(str(signum))
    sys.exit(42)
if os.environ.get("HANDLE") == "1":
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
open(os.path.join(ws, "ready"), "w").close()
time.sleep(60)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_is_forwarded_to_the_program_and_its_exit_code_returned(
    tmp_path: Path, signum: int
) -> None:
    dirs = make_pod_dirs(tmp_path, SIGNAL_PROGRAM)
    proc = start_bootstrap(dirs, pod_env(dirs, HANDLE="1"))
    wait_for(lambda: (dirs["workspace"] / "ready").exists(), "the program to start")
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 42, err
    assert (dirs["workspace"] / "got-signal").read_text() == str(int(signum))
    assert f"forwarding {signal.Signals(signum).name}" in err


def test_program_killed_by_a_signal_gives_128_plus_the_signal(tmp_path: Path) -> None:
    dirs = make_pod_dirs(tmp_path, SIGNAL_PROGRAM)
    proc = start_bootstrap(dirs, pod_env(dirs))
    wait_for(lambda: (dirs["workspace"] / "ready").exists(), "the program to start")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 128 + signal.SIGTERM


TRAIN_PROGRAM = """
import json, os, sys

model = os.environ["MODEL_DIR"]
os.makedirs(os.path.join(model, "variables"), exist_ok=True)
open(os.path.join(model, "saved_model.pb"), "wb").write(b"graph")
open(os.path.join(model, "variables", "variables.index"), "wb").write(b"index")
json.dump({"accuracy": 0.97, "loss": 0.1}, open(os.environ["METRICS_FILE"], "w"))
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""


def write_upload_json(
    server: S3Server, dirs: dict[str, Path], run_id: str, prefix_override: str | None = None
) -> str:
    policy = presign_upload(
        server.presigner(), f"s3://{server.bucket}/outputs/job", DAG, run_id, 300
    )
    if prefix_override is not None:
        policy["prefix"] = prefix_override
    (dirs["access"] / "upload.json").write_text(json.dumps(policy))
    return str(policy["prefix"])


def list_keys(server: S3Server, prefix: str) -> list[str]:
    answer = server.client().list_objects_v2(Bucket=server.bucket, Prefix=prefix)
    return sorted(o["Key"] for o in answer.get("Contents", []))


def test_model_and_metrics_are_uploaded_under_the_run_prefix(
    tmp_path: Path, s3_server: S3Server
) -> None:
    dirs = make_pod_dirs(tmp_path, TRAIN_PROGRAM)
    prefix = write_upload_json(s3_server, dirs, "run-upload-ok")
    proc = start_bootstrap(dirs, pod_env(dirs, TFJOB_UPLOAD_MODEL="1"))
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    assert list_keys(s3_server, prefix) == [
        f"{prefix}metrics.json",
        f"{prefix}model/saved_model.pb",
        f"{prefix}model/variables/variables.index",
    ]
    body = (
        s3_server.client()
        .get_object(Bucket=s3_server.bucket, Key=f"{prefix}model/saved_model.pb")["Body"]
        .read()
    )
    assert body == b"graph"
    assert 'TFJOB_METRICS {"accuracy":0.97,"loss":0.1}' in out.splitlines()
    assert "X-Amz-Signature" not in out + err and "policy" not in out + err


def test_failed_program_uploads_nothing_and_keeps_its_exit_code(
    tmp_path: Path, s3_server: S3Server
) -> None:
    dirs = make_pod_dirs(tmp_path, TRAIN_PROGRAM)
    prefix = write_upload_json(s3_server, dirs, "run-failed")
    proc = start_bootstrap(dirs, pod_env(dirs, TFJOB_UPLOAD_MODEL="1", EXIT_WITH="7"))
    out, _ = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 7
    assert list_keys(s3_server, prefix) == []
    assert "TFJOB_METRICS" in out


def test_upload_outside_the_policy_prefix_is_refused_and_exits_74(
    tmp_path: Path, s3_server: S3Server
) -> None:
    dirs = make_pod_dirs(tmp_path, TRAIN_PROGRAM)
    write_upload_json(
        s3_server, dirs, "run-scoped", prefix_override=f"outputs/job/runs/{DAG}/someone-else/"
    )
    proc = start_bootstrap(dirs, pod_env(dirs, TFJOB_UPLOAD_MODEL="1"))
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 74
    assert "model upload failed" in err and "AccessDenied" in err and "starts-with" in err
    assert list_keys(s3_server, f"outputs/job/runs/{DAG}/someone-else/") == []


def test_an_expired_grant_is_read_again_and_the_refreshed_one_uploads_the_model(
    tmp_path: Path, s3_server: S3Server
) -> None:
    """Airflow rewrites upload.json before grants expire; the bootstrap reads it when uploading."""
    dirs = make_pod_dirs(tmp_path, TRAIN_PROGRAM)
    run = f"s3://{s3_server.bucket}/outputs/job"
    expired = presign_upload(s3_server.presigner(), run, DAG, "run-refresh", 1)
    (dirs["access"] / "upload.json").write_text(json.dumps(expired))
    time.sleep(1.5)  # the grant must have expired before the program ends
    proc = start_bootstrap(dirs, pod_env(dirs, TFJOB_UPLOAD_MODEL="1"))
    wait_for(lambda: proc.poll() is None and retried(proc), "a retry of the expired grant")
    fresh = presign_upload(s3_server.presigner(), run, DAG, "run-refresh", 300)
    tmp = dirs["access"] / ".upload.json.tmp"
    tmp.write_text(json.dumps(fresh))
    tmp.replace(dirs["access"] / "upload.json")  # as the kubelet does: atomically
    out, rest = proc.communicate(timeout=DEADLINE_S)
    err = "".join(proc.__dict__["_seen"]) + rest
    assert proc.returncode == 0, err
    prefix = str(fresh["prefix"])
    assert f"{prefix}model/saved_model.pb" in list_keys(s3_server, prefix)
    assert "Policy expired" in err and "retrying in" in err
    for grant in (expired, fresh):
        for fields in (g["fields"] for g in grant["grants"].values()):
            for value in (fields["policy"], fields["x-amz-signature"], fields["x-amz-credential"]):
                assert value not in out + err


def retried(proc: subprocess.Popen[str]) -> bool:
    """Whether the bootstrap has logged a retry (reads stderr without blocking for long)."""
    import select

    lines = proc.__dict__.setdefault("_seen", [])
    while select.select([proc.stderr], [], [], 0.05)[0]:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
    return any("retrying in" in line for line in lines)


def test_an_upload_to_an_unreachable_s3_is_retried_until_the_patience_runs_out(
    tmp_path: Path, s3_server: S3Server
) -> None:
    dirs = make_pod_dirs(tmp_path, TRAIN_PROGRAM)
    grant = presign_upload(
        s3_server.presigner(), f"s3://{s3_server.bucket}/o", DAG, "run-down", 300
    )
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        grant["url"] = f"http://127.0.0.1:{closed.getsockname()[1]}/{s3_server.bucket}"
    (dirs["access"] / "upload.json").write_text(json.dumps(grant))
    proc = start_bootstrap(dirs, pod_env(dirs, TFJOB_UPLOAD_MODEL="1", TFJOB_UPLOAD_PATIENCE="3"))
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 74
    assert err.count("retrying in") >= 2 and "gave up after" in err
