"""The tfjob_janitor DAG, run by Airflow (`dag.test()`) against localkube.

Objects left behind name three runs: one Airflow has and that ended, one that
Airflow no longer has (deleted while its objects lived), and the janitor's own
run, still running while it sweeps. Only the first two go.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from harness.localkube_fixtures import start_localkube, stop_localkube
from harness.pipeline_fixtures import migrate_airflow_db
from harness.postgres_fixtures import airflow_database_url
from harness.repo_root import REPO_ROOT
from harness.tfjob_fixtures import tenant_storage
from tfjob import naming

pytestmark = [pytest.mark.e2e]

REPO = REPO_ROOT
NAMESPACE = "tfjob-janitor-dag"
FIRST_DATE = "2026-01-01T00:00:00+00:00"
SECOND_DATE = "2026-01-02T00:00:00+00:00"
DAG_TEST_TIMEOUT_S = 300


def airflow_env(home: Path, kubeconfig: str, tenants_file: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AWS_"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW_CONFIG=str(REPO / "airflow.cfg"),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=airflow_database_url(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        AIRFLOW_CONN_KUBERNETES_DEFAULT=json.dumps(
            {
                "conn_type": "kubernetes",
                "extra": {"kube_config_path": kubeconfig, "in_cluster": False},
            }
        ),
        PYTHONPATH=str(REPO),
        TFJOB_TENANTS_FILE=str(tenants_file),
    )
    return env


def run_janitor(env: dict[str, str], logical_date: str) -> tuple[str, str, list[str]]:
    """dag.test() of tfjob_janitor; returns (run state, run_id, the objects it removed)."""
    script = textwrap.dedent(f"""
        import datetime, json
        from airflow.dag_processing.dagbag import DagBag
        dag = DagBag(dag_folder={str(REPO / "dags" / "tfjob_janitor.py")!r},
                     safe_mode=False).dags["tfjob_janitor"]
        when = datetime.datetime.fromisoformat({logical_date!r})
        # run_after fixes the run id: manual__<run_after>.
        run = dag.test(logical_date=when, run_after=when)
        print("JANITOR_RESULT " + json.dumps({{"state": str(run.state), "run_id": run.run_id}}))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=DAG_TEST_TIMEOUT_S,
    )
    output = done.stdout + done.stderr
    for line in done.stdout.splitlines():
        if line.startswith("JANITOR_RESULT "):
            data = json.loads(line[len("JANITOR_RESULT ") :])
            removed = [
                line.split("janitor: removed ", 1)[1]
                for line in output.splitlines()
                if "janitor: removed " in line
            ]
            return data["state"], data["run_id"], removed
    raise AssertionError(f"no janitor result (rc {done.returncode}):\n{output[-6000:]}")


def leave_behind(core, job: str, dag_id: str, run_id: str) -> str:
    key = naming.run_key(job, dag_id, run_id)
    metadata = {
        "labels": naming.run_labels(job, key, "janitor-dag", naming.run_hash(dag_id, run_id)),
        "annotations": {naming.ANNOTATION_DAG_ID: dag_id, naming.ANNOTATION_RUN_ID: run_id},
    }
    core.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {"name": f"{key}-worker-0", **metadata},
            "spec": {"containers": [{"name": "c", "image": "python:3.11"}]},
        },
    )
    core.create_namespaced_secret(
        NAMESPACE, {"metadata": {"name": f"{key}-access", **metadata}, "stringData": {"a": "b"}}
    )
    return key


def names_of(core, key: str) -> list[str]:
    selector = naming.run_selector(key)
    return sorted(
        [
            p.metadata.name
            for p in core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
        ]
        + [
            s.metadata.name
            for s in core.list_namespaced_secret(NAMESPACE, label_selector=selector).items
        ]
    )


def test_the_janitor_dag_removes_objects_of_ended_and_deleted_runs_only(tmp_path):
    kube = start_localkube(tmp_path, kubelets=False)
    try:
        core = kube.core_v1()
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        home = tmp_path / "airflow"
        home.mkdir()
        # The janitor looks in the tenants' namespaces.
        tenants_file = tmp_path / "tenants.yaml"
        tenants_file.write_text(
            yaml.safe_dump(
                {
                    "tenants": [
                        {
                            "name": NAMESPACE.removeprefix("tfjob-"),
                            "defaults": {"cpu": "100m", "memory": "128Mi"},
                            "quota": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 0, "pods": 10},
                            **tenant_storage(NAMESPACE.removeprefix("tfjob-")),
                        }
                    ]
                }
            )
        )
        env = airflow_env(home, kube.kubeconfig, tenants_file)
        migrate_airflow_db(env)

        # A first janitor run: afterwards Airflow holds it as ended (success).
        state, ended_run_id, _ = run_janitor(env, FIRST_DATE)
        assert state == "success"
        ended = leave_behind(core, "ended", "tfjob_janitor", ended_run_id)
        gone = leave_behind(core, "gone", "tfjob__deleted", "manual__2026-01-01T00:00:00+00:00")
        # The second janitor run's own run id: running while it sweeps.
        own_run_id = f"manual__{SECOND_DATE}"
        active = leave_behind(core, "active", "tfjob_janitor", own_run_id)

        state, run_id, removed = run_janitor(env, SECOND_DATE)
        assert state == "success"
        assert run_id == own_run_id
        assert names_of(core, ended) == []
        assert names_of(core, gone) == []
        assert names_of(core, active) == [f"{active}-access", f"{active}-worker-0"]
        logged = " ".join(removed)
        assert f"Pod {NAMESPACE}/{gone}-worker-0" in logged
        assert f"Secret {NAMESPACE}/{ended}-access" in logged
        assert "no longer exists in Airflow" in logged and "has ended" in logged
    finally:
        stop_localkube(kube)
