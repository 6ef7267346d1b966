"""scripts/services.py: the embedded default comes up in order, twice, and goes down cleanly.

One real S3 server, localkube, PostgreSQL and Airflow on free ports in a
temporary state directory (the demo's fixed ports stay untouched); Airflow is
also killed with SIGKILL, as a crash does, in the middle of a run whose
`launch` task is running (a LocalExecutor worker and its task process in
flight, the run's pod waiting to be scheduled), and the next `up` ends what the
crash left. The state dir lies under pytest's 0700 temp dir, which the
`postgres` user cannot enter: PostgreSQL's cluster goes to its fallback place
(scripts/postgres_server.py), which the test removes at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes
import pytest

from harness.airflow_fixtures import airflow_server
from harness.pipeline_fixtures import wait_for
from harness.postgres_fixtures import postgres_server
from harness.repo_root import REPO_ROOT
from harness.services_runs import submit_standin_run
from scripts import supervision

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.root]

SERVICES = REPO_ROOT / "scripts" / "services.py"
BUCKET = "tfjob-test"
TENANT = "test"
# More cpu than a localkube node has (8) but within the tenant's quota (16): the pod stays
# Pending and `launch` keeps waiting for it, a task process in flight for as long as needed.
UNSCHEDULABLE_CPU = "10"


def services(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SERVICES), *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


def processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


def list_session(session_id: int) -> list[int]:
    """Live (not zombie) processes of a session."""
    from scripts.instance_processes import (
        read_session_id,  # scripts/, on sys.path by airflow_fixtures
    )

    return [
        pid
        for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
        if read_session_id(pid) == session_id and airflow_server.is_alive(pid)
    ]


STUCK_REQUEST = {
    "name": "crash-mid-run",
    "tenant": TENANT,
    "mode": "single",
    "image": "python:3.11",
    "entrypoint": ["python3", "train.py"],
    "output": f"s3://{BUCKET}/outputs/crash-mid-run",
    "startup_timeout": 600,
    "resources": {"worker": {"cpu": UNSCHEDULABLE_CPU, "memory": "128Mi"}},
}


def await_launch_in_flight(state: Path, record: dict, dag_id: str, run_id: str) -> None:
    """Until `launch` runs in a task process and the run's pod exists (Pending)."""
    url = record["airflow"]["url"]
    users = airflow_server.read_users(state / "airflow")
    token = airflow_server.fetch_token(url, "admin", users["admin"])
    kube = kubernetes.client.CoreV1Api(
        kubernetes.config.new_client_from_config(config_file=record["localkube"]["kubeconfig"])
    )

    def launch_running_with_its_pod() -> bool:
        import requests

        answer = requests.get(
            f"{url}/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        answer.raise_for_status()
        states = {ti["task_id"]: ti["state"] for ti in answer.json()["task_instances"]}
        assert states.get("validate") != "failed", states
        pods = kube.list_namespaced_pod(
            f"tfjob-{TENANT}", label_selector="tfjob.io/job=crash-mid-run"
        ).items
        return states.get("launch") == "running" and bool(pods)

    wait_for(
        launch_running_with_its_pod, timeout=300, what="launch running with its pod", interval=1.0
    )


def read_title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def kill_supervisor_and_components(supervisor: int) -> None:
    names = (
        b"airflow_components",
        b"api-server",
        b"api_server",
        b"scheduler",
        b"dag-processor",
        b"triggerer",
    )
    for pid in list_session(supervisor):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if pid == supervisor or any(name in command for name in names):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


@pytest.mark.skipif(os.geteuid() != 0, reason="localkube needs root")
# Three starts of the services, each with `airflow db migrate` and the tenants' roles, and a run:
# 237 s on a quiet machine, over 600 s beside the rest of `make test` on 2 cores.
@pytest.mark.timeout(1500)
def test_up_twice_then_down_leaves_no_process_or_mount(tmp_path):
    state = tmp_path / "state"
    ports = ["--s3-port", "0", "--kube-port", "0"]
    # Airflow comes back on its port after the crash below: a port of the ephemeral range
    # could meanwhile be any connection's source port (scripts/background_server.py).
    from scripts.background_server import (
        pick_port_below_ephemeral_range,  # scripts/ (airflow_fixtures)
    )

    ports += ["--airflow-port", str(pick_port_below_ephemeral_range())]
    try:
        first = services("up", "--state-dir", str(state), "--bucket", BUCKET, *ports)
        assert first.returncode == 0, first.stdout + first.stderr
        record = json.loads((state / "services.json").read_text())
        assert "Airflow UI   " + record["airflow"]["url"] in first.stdout
        database = postgres_server.locate_cluster(state / "postgres")
        assert record["postgres"]["data"] == str(database.data)
        assert database.root.parent == postgres_server.FALLBACK_ROOT
        assert "the postgres user cannot enter" in first.stderr, first.stderr

        # Airflow got both connections, pointing at this localkube and this S3 server.
        conn_env = Path(f"/proc/{airflow_server.read_pid(state / 'airflow')}/environ")
        env = dict(
            item.split("=", 1) for item in conn_env.read_bytes().decode().split("\0") if "=" in item
        )
        kube = json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
        aws = json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])
        assert kube["extra"] == {
            "kube_config_path": record["localkube"]["kubeconfig"],
            "in_cluster": False,
        }
        assert aws["extra"]["endpoint_url"] == record["s3"]["endpoint_url"]
        assert Path(record["localkube"]["kubeconfig"]).exists()
        kube_client = kubernetes.config.new_client_from_config(
            config_file=record["localkube"]["kubeconfig"]
        )
        assert kube_client.configuration.host == record["localkube"]["api_url"]
        assert kubernetes.client.VersionApi(kube_client).get_code().git_version

        second = services("up", "--state-dir", str(state), "--bucket", BUCKET, *ports)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "already serving" in second.stdout
        assert json.loads((state / "services.json").read_text()) == record

        # A crash mid-run: the supervisor and Airflow's components die by SIGKILL while a
        # task runs; the processes they spawned (serve-logs, LocalExecutor workers, the
        # task's process, renamed by setproctitle) live on.
        dag_id, run_id = submit_standin_run(state, tmp_path, STUCK_REQUEST)
        await_launch_in_flight(state, record, dag_id, run_id)
        # The services' supervisor dies too (else it would restart Airflow itself:
        # test_services_self_healing.py), as in a crash of the whole machine's services.
        os.kill(supervision.find_supervisor(state), 9)
        crashed = airflow_server.read_pid(state / "airflow")
        kill_supervisor_and_components(crashed)
        survivors = list_session(crashed)
        assert survivors, "nothing of the crashed Airflow outlived it"
        titles = [read_title(pid) for pid in survivors]
        # setproctitle's names of the task's supervisor (base_executor) and runner (task_runner)
        assert any(t.startswith(("airflow supervisor:", "airflow worker -- ")) for t in titles), (
            f"no task process among the survivors: {titles}"
        )
        third = services("up", "--state-dir", str(state), "--bucket", BUCKET, *ports)
        assert third.returncode == 0, third.stdout + third.stderr
        assert "of an earlier Airflow" in third.stderr, third.stderr
        assert list_session(crashed) == []
        assert airflow_server.read_pid(state / "airflow") != crashed
    finally:
        down = services("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stdout + down.stderr
    assert "PostgreSQL stopped" in down.stdout
    assert not postgres_server.is_running(database)
    # What CI runs after `make down`, pointed at this state dir (the checkout's other
    # processes belong to the tests running beside this one).
    clean = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "check_clean.py"),
            "--checkout",
            str(state),
            "--state-dir",
            str(state),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert clean.returncode == 0, clean.stdout + clean.stderr
    shutil.rmtree(database.root)
    assert processes_mentioning(str(state)) == []
    assert airflow_server.find_instance_pids(state / "airflow") == []
    assert str(state) not in Path("/proc/mounts").read_text()
    assert not (state / "services.json").exists()
    again = services("down", "--state-dir", str(state))
    assert again.returncode == 0, again.stdout + again.stderr
