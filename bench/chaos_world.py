"""The chaos soak's world: the self-healing embedded default in a folder of its own.

Why this exists: the soak's faults kill services and count on their supervisor to start them
again, so the world is `scripts/services.py up` itself (not bench/world.py's test services,
which nothing restarts), in a temporary state dir, on free ports below the ephemeral range
(a restarted service must get its port back), never the checkout's .state/ or the fixed
ports. Its tenants file is deploy/tenants.yaml with the pods' S3 port at this server's; its
requests dir (`TFJOB_REQUESTS_DIR`) holds the scheduled run's request file. Runs are
triggered over Airflow's REST API as `tshell submit` does, as the admin user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import yaml

from bench.airflow_runs import AirflowClient
from bench.chaos_plan import PlannedRun, RunShape
from harness.localkube_fixtures import LocalkubeHandle
from harness.repo_root import REPO_ROOT
from harness.standin import write_standin_bundle
from scripts import airflow_server, check_clean, postgres_server
from scripts.background_server import pick_port_below_ephemeral_range
from tfjob.tenants import TENANTS_FILE_ENV

SERVICES = REPO_ROOT / "scripts" / "services.py"
BUCKET = "tfjob-test"  # deploy/tenants.yaml: test and research may read and write in it
SERVICES_TIMEOUT_S = 900
STANDIN_KEYS = {"test": "bundles/standin.tar.gz", "research": "research/bundles/standin.tar.gz"}
OUTPUT_PREFIXES = {"test": "outputs/", "research": "research/outputs/"}
# research may use only TensorFlow's images; localkube maps both to the host's python3
IMAGES = {"test": "python:3.11", "research": "tensorflow/tensorflow:2.21.0"}
STARTUP_TIMEOUT_S = 300
ACTIVE_DEADLINE_S = 600
# A run's deadline: the request's own bounds, plus Airflow's steps around them and the time
# a fault takes to heal (a service back, a lost node noticed).
RUN_SLACK_S = 600
PS_REPLICAS = {"chief": 1, "ps": 1, "worker": 2}
DAGS_TIMEOUT_S = 300


@dataclass
class ChaosWorld:
    folder: Path
    state: Path
    ports: dict[str, int]
    env: dict[str, str]
    client: AirflowClient | None = None

    @property
    def record(self) -> dict[str, Any]:
        return json.loads((self.state / "services.json").read_text())

    @property
    def kube(self) -> LocalkubeHandle:
        found = self.record["localkube"]
        return LocalkubeHandle(found["api_url"], found["kubeconfig"], str(self.state / "localkube"))

    def airflow(self) -> AirflowClient:
        """One client (one token, fetched again when refused) for the whole soak: a login
        per poll would load the machine the faults are measured on."""
        if self.client is None:
            password = airflow_server.read_users(self.state / "airflow")["admin"]
            self.client = AirflowClient(self.record["airflow"]["url"], "admin", password)
        return self.client

    def s3(self) -> Any:
        s3 = self.record["s3"]
        return boto3.client(
            "s3",
            endpoint_url=s3["endpoint_url"],
            region_name=s3["region"],
            aws_access_key_id=s3["access_key"],
            aws_secret_access_key=s3["secret_key"],
        )

    def services(self, action: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, str(SERVICES), action, "--state-dir", str(self.state)]
        if action == "up":
            argv += [f"--{name}-port={port}" for name, port in self.ports.items()]
            argv += ["--bucket", BUCKET]
        return subprocess.run(
            argv,
            cwd=REPO_ROOT,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=SERVICES_TIMEOUT_S,
        )


def prepare_world(folder: Path) -> ChaosWorld:
    """The folder's tenants file, requests dir and ports (nothing started yet)."""
    ports = {name: pick_port_below_ephemeral_range() for name in ("s3", "kube", "airflow")}
    tenants = yaml.safe_load((REPO_ROOT / "deploy" / "tenants.yaml").read_text())
    tenants.setdefault("network", {})["s3_port"] = ports["s3"]
    (folder / "tenants.yaml").write_text(yaml.safe_dump(tenants, sort_keys=False))
    (folder / "requests").mkdir(exist_ok=True)
    env = {
        TENANTS_FILE_ENV: str(folder / "tenants.yaml"),
        "TFJOB_REQUESTS_DIR": str(folder / "requests"),
    }
    return ChaosWorld(folder, folder / "state", ports, env)


def start_world(world: ChaosWorld) -> None:
    """`services.py up`, then the stand-in bundle where each tenant may read it."""
    up = world.services("up")
    if up.returncode != 0:
        raise RuntimeError(f"services.py up failed:\n{up.stdout}\n{up.stderr}")
    bundle = write_standin_bundle(world.folder)
    client = world.s3()
    for key in STANDIN_KEYS.values():
        client.upload_file(str(bundle), BUCKET, key)


def await_dags(world: ChaosWorld, dag_ids: list[str]) -> None:
    """Until Airflow knows each DAG (the tenants' submit DAGs are parsed after `up` ends)."""
    deadline = time.monotonic() + DAGS_TIMEOUT_S
    for dag_id in dag_ids:
        while True:
            try:
                world.airflow().request("GET", f"/api/v2/dags/{dag_id}")
                break
            except urllib.error.HTTPError as error:
                if error.code != 404 or time.monotonic() > deadline:
                    raise
            time.sleep(2)


def stop_world(world: ChaosWorld) -> list[str]:
    """`services.py down`, then scripts/check_clean.py's leftovers of the state dir."""
    database = postgres_server.locate_cluster(world.state / "postgres")
    down = world.services("down")
    left = [] if down.returncode == 0 else [f"services.py down failed: {down.stderr[-500:]}"]
    found = check_clean.find_leftovers(world.state, world.state)
    if database.root != (world.state / "postgres").resolve():  # kept outside the state dir
        shutil.rmtree(database.root, ignore_errors=True)
    return left + [f"{item.kind}: {item.what}" for item in found]


def chief_of(run: PlannedRun) -> str:
    return "chief-0" if run.shape is RunShape.PARAMETER_SERVER else "worker-0"


def replicas_of(run: PlannedRun) -> tuple[str, ...]:
    if run.shape is RunShape.SINGLE:
        return ("worker-0",)
    return tuple(f"{role}-{i}" for role, count in PS_REPLICAS.items() for i in range(count))


def output_of(run: PlannedRun) -> str:
    return f"s3://{BUCKET}/{OUTPUT_PREFIXES[run.tenant]}{run.name}"


def build_request(run: PlannedRun) -> dict[str, Any]:
    """The stand-in request of a planned run: it trains `train_s` seconds, every replica."""
    request: dict[str, Any] = {
        "name": run.name,
        "tenant": run.tenant,
        "mode": "single",
        "image": IMAGES[run.tenant],
        "entrypoint": ["python3", "train.py"],
        "bundle": f"s3://{BUCKET}/{STANDIN_KEYS[run.tenant]}",
        "output": output_of(run),
        "startup_timeout": STARTUP_TIMEOUT_S,
        "active_deadline": ACTIVE_DEADLINE_S,
        "max_restarts": run.max_restarts,
        "env": {"STANDIN_BEHAVIOUR": json.dumps({"*": {"sleep": run.train_s}})},
        "resources": {role: {"cpu": "100m", "memory": "128Mi"} for role in PS_REPLICAS},
    }
    if run.shape is RunShape.PARAMETER_SERVER:
        request |= {
            "mode": "distributed",
            "strategy": "parameter_server",
            "replicas": dict(PS_REPLICAS),
            "success_policy": "chief",
            "env": {"STANDIN_BEHAVIOUR": json.dumps({"*": {"sleep": run.train_s}, "ps-0": {}})},
        }
    if run.scheduled:
        request["schedule"] = "@once"
    return request


def run_deadline_s(run: PlannedRun) -> float:
    return STARTUP_TIMEOUT_S + ACTIVE_DEADLINE_S + RUN_SLACK_S


def write_scheduled_request(world: ChaosWorld, run: PlannedRun) -> None:
    """The scheduled run's request file: its own DAG, which runs once when parsed (@once)."""
    path = world.folder / "requests" / f"{run.name}.yaml"
    path.write_text(yaml.safe_dump(build_request(run), sort_keys=False))
