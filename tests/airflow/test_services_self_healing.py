"""The embedded default heals itself: each kind of service killed while a run trains, no `make up`.

One `scripts/services.py up` in a temporary state dir on free ports (as
test_airflow_config_services.py), one stand-in run of the test tenant that
trains for a few minutes, and while its pod runs, `kill -9` of each kind of
service once: the S3 server, localkube's API server, PostgreSQL's postmaster,
then Airflow's scheduler, triggerer, API server and DAG processor. Each kill
waits for the supervisor's table to show the service running again before the
next, and nobody runs `make up`: the run still ends in success, every restart
is counted, and `down` leaves nothing behind.
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
import requests
import urllib3
import yaml

from harness.pipeline_fixtures import wait_for
from harness.repo_root import REPO_ROOT
from harness.service_kills import (
    await_running,
    kill_and_await_restart,
    read_row,
    read_service_pid,
)
from harness.services_runs import submit_standin_run
from scripts import airflow_components, airflow_server, postgres_server, supervision
from scripts.background_server import pick_port_below_ephemeral_range
from tfjob.tenants import TENANTS_FILE_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.root, pytest.mark.timeout(1500)]

SERVICES = REPO_ROOT / "scripts" / "services.py"
BUCKET = "tfjob-test"  # the test tenant reads bundles only under s3://tfjob-test/
TENANT = "test"
JOB = "self-healing"
TRAIN_S = 150  # the seven kills and their restarts took ~45 s on 2 busy cores
SERVICE_KILLS = ("s3", "localkube", "postgresql")
COMPONENT_KILLS = ("scheduler", "triggerer", "api-server", "dag-processor")


def services(*argv: str, tenants: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SERVICES), *argv],
        cwd=REPO_ROOT,
        env={**os.environ, TENANTS_FILE_ENV: str(tenants)},
        capture_output=True,
        text=True,
        timeout=900,
    )


def write_tenants_file(folder: Path, s3_port: int) -> Path:
    """deploy/tenants.yaml with the pods' S3 port at this S3 server's (their NetworkPolicies)."""
    tenants = yaml.safe_load((REPO_ROOT / "deploy" / "tenants.yaml").read_text())
    tenants.setdefault("network", {})["s3_port"] = s3_port
    path = folder / "tenants.yaml"
    path.write_text(yaml.safe_dump(tenants, sort_keys=False))
    return path


TRAINING_REQUEST = {
    "name": JOB,
    "tenant": TENANT,
    "mode": "single",
    "image": "python:3.11",
    "entrypoint": ["python3", "train.py"],
    "output": f"s3://{BUCKET}/outputs/{JOB}",
    "startup_timeout": 600,
    "active_deadline": 1800,
    "env": {"STANDIN_BEHAVIOUR": json.dumps({"*": {"sleep": TRAIN_S}})},
    "resources": {"worker": {"cpu": "100m", "memory": "128Mi"}},
}


class RunWatch:
    """The run's state (Airflow's REST API) and its pod's phase (localkube), both of which
    may be down for a moment: None then."""

    def __init__(self, state: Path, record: dict, dag_id: str, run_id: str) -> None:
        self.url = record["airflow"]["url"]
        self.password = airflow_server.read_users(state / "airflow")["admin"]
        self.path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}"
        self.kube = kubernetes.client.CoreV1Api(
            kubernetes.config.new_client_from_config(config_file=record["localkube"]["kubeconfig"])
        )
        self.token: str | None = None

    def run_state(self) -> str | None:
        try:
            if self.token is None:
                self.token = airflow_server.fetch_token(self.url, "admin", self.password)
            answer = requests.get(
                self.url + self.path, headers={"Authorization": f"Bearer {self.token}"}, timeout=30
            )
        except (OSError, requests.RequestException):
            return None
        return answer.json()["state"] if answer.status_code == 200 else None

    def describe(self) -> str:
        """What the run and its namespace show now, for an assertion's message."""
        pods = self.kube.list_namespaced_pod(f"tfjob-{TENANT}", _request_timeout=30).items
        phases = [(pod.metadata.name, pod.status.phase) for pod in pods]
        return f"run {self.run_state()}, pods of tfjob-{TENANT}: {phases}"

    def pod_phase(self) -> str | None:
        try:
            pods = self.kube.list_namespaced_pod(
                f"tfjob-{TENANT}", label_selector=f"tfjob.io/job={JOB}", _request_timeout=10
            ).items
        except (OSError, kubernetes.client.ApiException, urllib3.exceptions.HTTPError):
            return None  # the API server is restarting
        return pods[0].status.phase if pods else None


@pytest.mark.skipif(os.geteuid() != 0, reason="localkube needs root")
def test_each_service_killed_while_a_run_trains_is_restarted_and_the_run_succeeds(tmp_path):
    state = tmp_path / "state"
    # Every service comes back on its port: none from the ephemeral range, which any
    # connection may take as its source port meanwhile (scripts/background_server.py).
    ports = {option: str(pick_port_below_ephemeral_range()) for option in ("s3", "kube", "airflow")}
    argv = [f"--{option}-port={port}" for option, port in ports.items()]
    tenants = write_tenants_file(tmp_path, int(ports["s3"]))
    try:
        up = services("up", "--state-dir", str(state), "--bucket", BUCKET, *argv, tenants=tenants)
        assert up.returncode == 0, up.stdout + up.stderr
        record = json.loads((state / "services.json").read_text())
        dag_id, run_id = submit_standin_run(state, tmp_path, TRAINING_REQUEST, tenants)
        watch = RunWatch(state, record, dag_id, run_id)

        def training() -> bool:
            assert watch.run_state() != "failed", "the run failed before training"
            return watch.pod_phase() == "Running"

        wait_for(training, 600, "the run's pod running", 2.0)

        services_table = state / supervision.STATE_FILE
        for name in SERVICE_KILLS:
            row = kill_and_await_restart(services_table, name, read_service_pid(state, name))
            assert row.last_exit.startswith(("killed by SIGKILL", "exit status unknown")), row
        components_table = state / "airflow" / airflow_components.COMPONENTS_FILE
        for name in COMPONENT_KILLS:
            pid = await_running(components_table, name).pid
            row = kill_and_await_restart(components_table, name, pid)
            assert row.restarts >= 1 and row.last_exit == "killed by SIGKILL", row
        assert watch.pod_phase() == "Running", watch.describe()

        def ended() -> str | None:
            found = watch.run_state()
            return found if found in ("success", "failed") else None

        final = wait_for(ended, TRAIN_S + 600, "the run's end", interval=2.0)
        assert final == "success", (state / supervision.LOG_FILE).read_text()[-5000:]
        _, rows = supervision.read_table(services_table)
        assert all(read_row(services_table, name).restarts >= 1 for name in SERVICE_KILLS), rows
        assert all(row.state is supervision.ServiceState.RUNNING for row in rows), rows
        status = services("status", "--state-dir", str(state), tenants=tenants)
        assert status.returncode == 0 and "airflow scheduler" in status.stdout, status.stdout
    finally:
        down = services("down", "--state-dir", str(state), tenants=tenants)
    assert down.returncode == 0, down.stdout + down.stderr
    assert down.stdout.startswith("supervisor stopped"), down.stdout
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
    database = postgres_server.locate_cluster(state / "postgres")
    if database.root != state / "postgres":
        shutil.rmtree(database.root)
