"""A world for end-to-end pipeline tests: S3 server + localkube + a migrated Airflow home.

The fixture `pipeline_world` (harness/world_fixtures.py, a pytest plugin) gives each
test file a view of one such world per test process:

    def test_x(pipeline_world):
        result = pipeline_world.run_request(request)   # dag.test() of tfjob__<name>
        assert result.state == "success"
        keys = pipeline_world.s3_keys(run_keys(result))  # outputs/<name>/runs/<dag>/<run>/

`start_pipeline_world` starts a moto S3 server process, localkube
(its pods reach S3 through the forwarded loopback port, relayed to the S3
server's pod-facing listener: presigned requests only), creates the tenant
namespace, migrates an Airflow database in a temporary home, creates the
tenants' Airflow roles there (with the FAB auth manager, parsing a tenant DAG
whose `access_control` names a missing role fails), and uploads the stand-in
training bundle of harness/standin.py: a small Python program (no TensorFlow)
that behaves as the request's env `STANDIN_BEHAVIOUR` says.

Each DAG run happens in a subprocess (`dag.test()`), so Airflow's
configuration comes from that process's environment and nothing leaks into
the test process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.error
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.localkube_fixtures import LocalkubeHandle, start_localkube, stop_localkube
from harness.postgres_fixtures import airflow_database_url
from harness.repo_root import REPO_ROOT
from harness.s3_fixtures import S3Server, add_pod_identities, start_s3_server, stop_s3_server
from harness.standin import write_standin_bundle
from tfjob.pipeline_ids import REQUEST_DAG_PREFIX, SUBMIT_DAG_PREFIX, submit_dag_id
from tfjob.tenants import TENANTS_FILE_ENV, TenantsConfig, build_namespace, load_tenants

REPO = REPO_ROOT
TENANT = "test"
NAMESPACE = f"tfjob-{TENANT}"
STANDIN_BUNDLE_KEY = "bundles/standin.tar.gz"
DAG_TEST_TIMEOUT_S = 420
# The DAG file that builds each kind of DAG, and the variable Airflow's parsing context reads.
DAG_FILES = {REQUEST_DAG_PREFIX: "tfjob_requests.py", SUBMIT_DAG_PREFIX: "tfjob_submit.py"}
PARSING_CONTEXT_ENV = "_AIRFLOW_PARSING_CONTEXT_DAG_ID"


@dataclass
class DagResult:
    state: str
    tasks: dict[str, str]
    run_id: str
    log: str
    dag_id: str = ""

    def __str__(self) -> str:
        return f"run {self.run_id}: {self.state} {self.tasks}\n--- log tail ---\n{self.log[-6000:]}"


@dataclass
class PipelineWorld:
    s3: S3Server
    kube: LocalkubeHandle
    home: Path
    requests_dir: Path
    bucket: str
    env: dict[str, str] = field(default_factory=dict)

    def request(self, name: str, **changes: Any) -> dict[str, Any]:
        """A stand-in request of this world's tenant, bundle and output."""
        body = {
            "name": name,
            "tenant": TENANT,
            "mode": "single",
            "image": "python:3.11",
            "entrypoint": ["python3", "train.py"],
            "bundle": f"s3://{self.bucket}/{STANDIN_BUNDLE_KEY}",
            "output": f"s3://{self.bucket}/outputs/{name}",
            "startup_timeout": 60,
            "active_deadline": 240,
            "resources": {
                "worker": {"cpu": "100m", "memory": "128Mi"},
                "ps": {"cpu": "100m", "memory": "128Mi"},
                "chief": {"cpu": "100m", "memory": "128Mi"},
            },
        }
        body.update(changes)
        return body

    def write_request(self, body: dict[str, Any]) -> Path:
        path = self.requests_dir / f"{body['name']}.yaml"
        path.write_text(yaml.safe_dump(body))
        return path

    def run_dag(
        self,
        dag_id: str,
        conf: dict[str, Any] | None = None,
        logical_date: str | None = None,
        timeout: float = DAG_TEST_TIMEOUT_S,
    ) -> DagResult:
        """`dag.test()` of one DAG in a subprocess; returns the run's state and every task's state.

        The same `logical_date` twice gives the same run_id: the second call
        replaces the first run, as clearing a run does.
        """
        return self.finish_dag(self.start_dag(dag_id, conf, logical_date), timeout)

    def start_dag(
        self,
        dag_id: str,
        conf: dict[str, Any] | None = None,
        logical_date: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.Popen:
        """Start `dag.test()` of one DAG in a subprocess; `finish_dag` collects its result."""
        dags = self.dag_folder(dag_id)
        script = textwrap.dedent(
            f"""
            import datetime, json, logging, os, sys
            from airflow.dag_processing.dagbag import DagBag
            bag = DagBag(dag_folder={str(dags)!r}, safe_mode=False)
            dag = bag.dags[{dag_id!r}]
            logical_date = {logical_date!r}
            when = datetime.datetime.fromisoformat(logical_date) if logical_date else None
            kwargs = {{"logical_date": when, "run_after": when}} if when else {{}}
            run = dag.test(run_conf={conf!r}, **kwargs)
            tasks = {{ti.task_id: str(ti.state) for ti in run.get_task_instances()}}
            print("PIPELINE_RESULT " + json.dumps({{"state": str(run.state), "tasks": tasks,
                                                   "run_id": run.run_id,
                                                   "dag_id": run.dag_id}}))
            # The run is stored and printed; the interpreter's teardown of Airflow's
            # modules would add 2-10 s of nothing the test reads.
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
            """
        )
        parsing = {"AIRFLOW__CORE__DAGS_FOLDER": str(dags), PARSING_CONTEXT_ENV: dag_id}
        return subprocess.Popen(
            [sys.executable, "-c", script],
            env={**self.env, **parsing, **(extra_env or {})},
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def dag_folder(self, dag_id: str) -> Path:
        """A DAGs folder holding only the file that builds `dag_id` (all of dags/ for others).

        dag.test() parses and stores every DAG of its DAGs folder before it runs
        one; storing the three submit DAGs' Params alone takes ~2.5 s of CPU.
        With only the DAG's own file, and the parsing context a task runner sets
        (only that DAG is built), a run stores the DAG it runs.
        """
        name = next((f for prefix, f in DAG_FILES.items() if dag_id.startswith(prefix)), None)
        if name is None:
            return REPO / "dags"
        folder = self.home / "dag-files" / Path(name).stem
        folder.mkdir(parents=True, exist_ok=True)
        link = folder / name
        if not link.is_symlink():
            link.symlink_to(REPO / "dags" / name)
        return folder

    def finish_dag(
        self, process: subprocess.Popen, timeout: float = DAG_TEST_TIMEOUT_S
    ) -> DagResult:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
            raise AssertionError(
                f"dag.test() ran past {timeout}s:\n{(stdout + stderr)[-8000:]}"
            ) from None
        output = stdout + stderr
        for line in stdout.splitlines():
            if line.startswith("PIPELINE_RESULT "):
                data = json.loads(line[len("PIPELINE_RESULT ") :])
                return DagResult(
                    data["state"], data["tasks"], data["run_id"], output, data["dag_id"]
                )
        raise AssertionError(
            f"dag.test() gave no result (rc {process.returncode}):\n{output[-8000:]}"
        )

    def run_request(self, body: dict[str, Any], logical_date: str | None = None) -> DagResult:
        self.write_request(body)
        return self.run_dag(f"{REQUEST_DAG_PREFIX}{body['name']}", logical_date=logical_date)

    def run_submit(
        self, body: dict[str, Any], logical_date: str | None = None, tenant: str | None = None
    ) -> DagResult:
        """`dag.test()` of a tenant's submit DAG (the request's tenant unless `tenant` says)."""
        dag_id = submit_dag_id(tenant or body["tenant"])
        return self.run_dag(dag_id, conf=body, logical_date=logical_date)

    def add_pod_identities(self, tenants: TenantsConfig) -> None:
        """Pods-only presigning identities for `tenants`' tenants, and their connections in
        this world's Airflow environment (the S3 server made them for deploy/tenants.yaml's)."""
        add_pod_identities(self.s3, self.home.parent / "s3-state", tenants)
        self.env.update(self.s3.airflow_connections())

    def sync_tenant_roles(self) -> None:
        """Create the Airflow roles of every tenant of this world's tenants file
        (TFJOB_TENANTS_FILE of `env`, else deploy/tenants.yaml); again after changing it."""
        sync_tenant_roles(self.env)

    def task_try_states(self, dag_id: str, task_id: str) -> list[tuple[int, str]]:
        """(try number, state) of every try of a task in this world's Airflow DB, oldest first."""
        rows: set[tuple[int, str]] = set()
        for table in ("task_instance", "task_instance_history"):
            rows |= {
                (number, state)
                for number, state in self.query_airflow_db(
                    f"SELECT try_number, state FROM {table} "
                    "WHERE dag_id = :dag_id AND task_id = :task_id",
                    dag_id=dag_id,
                    task_id=task_id,
                )
            }
        return sorted(rows)

    def query_airflow_db(self, sql: str, **params: Any) -> list[tuple]:
        """Rows of one SELECT in this world's Airflow database (PostgreSQL)."""
        from sqlalchemy import create_engine, text

        engine = create_engine(self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
        try:
            with engine.connect() as connection:
                return [tuple(row) for row in connection.execute(text(sql), params)]
        finally:
            engine.dispose()

    def s3_keys(self, prefix: str) -> list[str]:
        client = self.s3.client()
        keys = []
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        ):
            keys.extend(item["Key"] for item in page.get("Contents", []))
        return sorted(keys)

    def s3_text(self, key: str) -> str:
        return self.s3.client().get_object(Bucket=self.bucket, Key=key)["Body"].read().decode()

    def run_objects(self, job: str) -> list[str]:
        """`Kind/name` of every object of any run of `job` still in the namespace."""
        from tfjob.naming import job_selector

        api = self.kube.core_v1()
        found = []
        for kind, lister in (
            ("Pod", api.list_namespaced_pod),
            ("ConfigMap", api.list_namespaced_config_map),
            ("Secret", api.list_namespaced_secret),
        ):
            found += [
                f"{kind}/{o.metadata.name}"
                for o in lister(NAMESPACE, label_selector=job_selector(job)).items
            ]
        return found


def run_keys(result: DagResult, name: str | None = None) -> str:
    """The key prefix of a run's objects in the world's bucket (the request's output is
    `outputs/<name>`): `outputs/<name>/runs/<dag_id>/<run_id>/`."""
    name = name or result.dag_id.removeprefix(REQUEST_DAG_PREFIX)
    return f"outputs/{name}/runs/{result.dag_id}/{result.run_id}/"


def sync_tenant_roles(env: dict[str, str]) -> None:
    """The tenants' roles in the Airflow DB of `env` (tenancy/roles.py, as the
    launcher runs it): with the FAB auth manager, `dag.test()` of a tenant DAG stores its
    `access_control`, and Airflow refuses it when a role does not exist."""
    done = subprocess.run(
        [sys.executable, "-m", "tenancy.roles"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"creating the tenants' roles failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )


def migrate_airflow_db(env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"airflow db migrate failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )


def write_tenants_file(folder: Path, s3: S3Server) -> Path:
    """deploy/tenants.yaml with `network.s3_port` at this S3 server's port: the runs'
    NetworkPolicies allow egress to the S3 port, and localkube enforces them, so pods
    reach the pod-facing S3 forward only when the policy names its port."""
    tenants = yaml.safe_load((REPO / "deploy" / "tenants.yaml").read_text())
    tenants.setdefault("network", {})["s3_port"] = int(s3.pod_forward().rsplit(":", 1)[1])
    path = folder / "tenants.yaml"
    path.write_text(yaml.safe_dump(tenants, sort_keys=False))
    return path


def airflow_env(
    home: Path, s3: S3Server, kube: LocalkubeHandle, requests_dir: Path
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AWS_"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW_CONFIG=str(REPO / "airflow.cfg"),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=airflow_database_url(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
        AIRFLOW__CORE__PLUGINS_FOLDER=str(REPO / "plugins"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        TFJOB_REQUESTS_DIR=str(requests_dir),
        AIRFLOW_CONN_KUBERNETES_DEFAULT=json.dumps(
            {
                "conn_type": "kubernetes",
                "extra": {
                    "kube_config_path": kube.kubeconfig,
                    "in_cluster": False,
                    "namespace": NAMESPACE,
                },
            }
        ),
        PYTHONPATH=str(REPO),
    )
    env[TENANTS_FILE_ENV] = str(write_tenants_file(home, s3))
    # aws_default (the admin key) and each tenant's pods-only tfjob_pods_<tenant>
    env.update(s3.airflow_connections())
    return env


def start_pipeline_world(folder: Path) -> tuple[PipelineWorld, Any]:
    """Start everything; returns the world and a callable that stops it."""
    folder.mkdir(parents=True, exist_ok=True)
    s3, s3_process = start_s3_server(folder)
    try:
        kube = start_localkube(folder, forward_ports=(s3.pod_forward(),))
    except BaseException:
        stop_s3_server(s3_process)
        raise

    def stop() -> None:
        stop_localkube(kube)
        stop_s3_server(s3_process)

    try:
        api = kube.core_v1()
        # As `tshell tenants apply` makes it: Pod Security "restricted" enforced, so every
        # pod the pipeline creates in these tests passes localkube's admission.
        api.create_namespace(build_namespace(load_tenants().find(TENANT)))
        bundle = write_standin_bundle(folder)
        s3.client().upload_file(str(bundle), s3.bucket, STANDIN_BUNDLE_KEY)
        requests_dir = folder / "requests"
        requests_dir.mkdir(exist_ok=True)
        home = folder / "airflow"
        home.mkdir(exist_ok=True)
        env = airflow_env(home, s3, kube, requests_dir)
        migrate_airflow_db(env)
        sync_tenant_roles(env)
    except BaseException:
        stop()
        raise
    return PipelineWorld(s3, kube, home, requests_dir, s3.bucket, env), stop


def create_tenant_pool(airflow: Any, slots: int = 8) -> None:
    """The test tenant's Airflow pool (what `tshell tenants apply` makes): job steps run in it."""
    from tenancy.apply import apply_pool
    from tenancy.pools import PoolSpec, RestPoolClient
    from tfjob.tenants import pool_name

    # Through the same client as tshell: it asks again on no answer or 502/503/504.
    apply_pool(RestPoolClient(airflow.url, airflow.token), PoolSpec(pool_name(TENANT), slots, ""))


def wait_for(condition: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll `condition()` until it returns something truthy, with a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# REST helpers for tests that drive a real `airflow standalone` (harness/airflow_fixtures.py).

# Generous: on 2 shared cores a task's start (parse + imports) can take a minute.
RUN_TIMEOUT_S = 600
FINISHED = ("success", "failed")


def trigger(airflow, dag_id, conf):
    """Start a run. The run id is chosen here, so a retried POST cannot start two runs:
    when the first POST did land, the retry's 409 leads to that run."""
    run_id = f"manual__test-{uuid.uuid4().hex[:12]}"
    body = {"dag_run_id": run_id, "logical_date": None, "conf": conf}
    try:
        return airflow.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", body, retry=True)
    except urllib.error.HTTPError as error:
        if error.code != 409:
            raise
        return airflow.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")


def await_run(airflow, dag_id, run_id, timeout=RUN_TIMEOUT_S):
    def finished():
        run = airflow.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        return run if run["state"] in FINISHED else None

    return wait_for(finished, timeout, f"run {run_id} of {dag_id} to finish", interval=1.0)


def task_states(airflow, dag_id, run_id):
    answer = airflow.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
    return {ti["task_id"]: ti["state"] for ti in answer["task_instances"]}


def task_log(airflow, dag_id, run_id, task_id, try_number=1):
    answer = airflow.request(
        "GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
    )
    content = answer.get("content")
    if isinstance(content, list):
        # Structured lines: the message is "event", an exception's text sits in other fields.
        return "\n".join(
            json.dumps(item) if isinstance(item, dict) else str(item) for item in content
        )
    return str(content)


def explain_run(airflow, dag_id, run_id):
    """Task states plus the log tail of every failed task: what a failed assertion should show."""
    states = task_states(airflow, dag_id, run_id)
    lines = [json.dumps(states)]
    for task_id, state in states.items():
        if state in ("failed", "up_for_retry"):
            tail = task_log(airflow, dag_id, run_id, task_id)[-3000:]
            lines.append(f"--- {task_id} ({state}) ---\n{tail}")
    return "\n".join(lines)
