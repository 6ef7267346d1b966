"""localkube end to end: `python -m localkube up`, a real pod through the real kubelet, its log,
exec into it, graceful deletion, and `down` leaving no process or network namespace behind."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from kubernetes.stream import stream

from harness.localkube_fixtures import start_localkube, stop_localkube
from harness.postgres_fixtures import airflow_database_url

pytestmark = [pytest.mark.e2e, pytest.mark.root]


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def netns_of(state_dir: str) -> set[str]:
    """This cluster's network namespaces: lk-<8 hex of sha256(abs state dir)>[-<pod>]."""
    prefix = "lk-" + hashlib.sha256(os.path.abspath(state_dir).encode()).hexdigest()[:8]
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {
        line.split()[0]
        for line in out.splitlines()
        if line.strip() and line.split()[0].startswith(prefix)
    }


def live_pids(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if b"localkube" in handle.read():
                    alive.append(pid)
        except OSError:
            pass
    return alive


def test_pod_runs_to_success_with_logs_exec_and_clean_down(tmp_path):
    handle = start_localkube(tmp_path)
    info = json.loads((tmp_path / "localkube" / "localkube.json").read_text())
    pids = [info["pids"]["apiserver"], *info["pids"]["kubelets"].values()]
    try:
        core = handle.core_v1()
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": "hi"},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox:1.36",
                            "command": ["sh", "-c", "echo hi; sleep 1"],
                        }
                    ],
                },
            },
        )
        done = wait_for(
            lambda: (
                core.read_namespaced_pod("hi", "default").status.phase in ("Succeeded", "Failed")
                and core.read_namespaced_pod("hi", "default")
            ),
            what="pod hi to finish",
        )
        assert done.status.phase == "Succeeded"
        assert done.status.pod_ip.startswith("10.77.")
        assert netns_of(handle.state_dir)
        terminated = done.status.container_statuses[0].state.terminated
        assert terminated.exit_code == 0 and terminated.reason == "Completed"
        log = core.read_namespaced_pod_log("hi", "default", _preload_content=False).data
        assert log == b"hi\n"

        core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": "sleeper"},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {"name": "c", "image": "busybox:1.36", "command": ["sleep", "300"]}
                    ],
                },
            },
        )
        wait_for(
            lambda: core.read_namespaced_pod("sleeper", "default").status.phase == "Running",
            what="sleeper running",
        )
        output = stream(
            core.connect_get_namespaced_pod_exec,
            "sleeper",
            "default",
            command=["sh", "-c", "echo inside; hostname"],
            stderr=True,
            stdout=True,
            stdin=False,
            tty=False,
        )
        assert output.startswith("inside\n")
        deleted = core.delete_namespaced_pod("sleeper", "default")
        assert deleted.metadata.deletion_timestamp is not None
        wait_for(
            lambda: (
                not core.list_namespaced_pod(
                    "default", field_selector="metadata.name=sleeper"
                ).items
            ),
            what="sleeper removed",
        )
    finally:
        stop_localkube(handle)
    assert live_pids(pids) == []
    assert netns_of(handle.state_dir) == set()


KPO_DAG = """
import os
import pendulum
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG

with DAG("localkube_kpo", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
    KubernetesPodOperator(
        task_id="ok", name="ok", namespace="default", image="busybox:1.36",
        cmds=["sh", "-c", 'echo hello from pod; mkdir -p /airflow/xcom; '
                          'echo "$ANSWER" > /airflow/xcom/return.json'],
        env_vars={"ANSWER": '{"answer": 42}'},
        config_file=os.environ["LOCALKUBE_KUBECONFIG"], in_cluster=False,
        get_logs=True, do_xcom_push=True)
    KubernetesPodOperator(
        task_id="bad", name="bad", namespace="default", image="busybox:1.36",
        cmds=["sh", "-c", "echo failing now; exit 3"],
        config_file=os.environ["LOCALKUBE_KUBECONFIG"], in_cluster=False, get_logs=True)
"""

RUN_DAG = """
import json
from airflow.dag_processing.dagbag import DagBag
run = DagBag(dag_folder={folder!r}, safe_mode=False).dags["localkube_kpo"].test()
print("KPO_RESULT " + json.dumps({{ti.task_id: [str(ti.state), ti.xcom_pull(task_ids=ti.task_id)
                                    if ti.task_id == "ok" else None]
                                   for ti in run.get_task_instances()}}))
"""


def describe_failure(output: str) -> str:
    """The error lines of a dag.test() output (the pod dumps bury them), then its tail."""
    errors = [
        line
        for line in output.splitlines()
        if any(mark in line for mark in ("error", "Error", "Traceback", "Exception"))
    ]
    return "\n".join(errors[-40:]) + "\n--- tail ---\n" + output[-3000:]


@pytest.mark.slow
def test_airflow_kubernetes_pod_operator_runs_unchanged(tmp_path):
    """KPO with get_logs and do_xcom_push (its sidecar is read through exec) succeeds; a failing
    pod fails its task with the pod's log in the task log; both pods are deleted."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "kpo.py").write_text(KPO_DAG)
    handle = start_localkube(tmp_path)
    try:
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": airflow_database_url(tmp_path / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "LOCALKUBE_KUBECONFIG": handle.kubeconfig,
        }
        env.pop("AIRFLOW_CONFIG", None)
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            env=env,
            capture_output=True,
            check=True,
            timeout=300,
        )
        done = subprocess.run(
            [sys.executable, "-c", RUN_DAG.format(folder=str(dags))],
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        output = done.stdout + done.stderr
        result = next(
            (
                json.loads(line.split(" ", 1)[1])
                for line in done.stdout.splitlines()
                if line.startswith("KPO_RESULT ")
            ),
            None,
        )
        assert result is not None, output[-5000:]
        assert result["ok"] == ["success", {"answer": 42}], describe_failure(output)
        assert result["bad"][0] == "failed"
        assert "hello from pod" in output and "failing now" in output
        # The operator deletes each pod and returns; the kubelet ends a pod gracefully and
        # then removes it, as a real one does, so a pod may still be terminating here.
        core = handle.core_v1()

        def left() -> list[str]:
            return [
                f"{p.metadata.name} (phase {p.status.phase}, deletion requested "
                f"{p.metadata.deletion_timestamp})"
                for p in core.list_namespaced_pod("default").items
            ]

        try:
            wait_for(lambda: not left(), 60, "both KPO pods to be removed")
        except AssertionError as error:
            raise AssertionError(f"{error}: left {left()}") from None
    finally:
        stop_localkube(handle)


def test_pods_keep_running_when_the_api_server_is_killed_and_up_again(tmp_path):
    handle = start_localkube(tmp_path)
    info_file = tmp_path / "localkube" / "localkube.json"
    try:
        core = handle.core_v1()
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": "survivor"},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "busybox:1.36", "command": ["sleep", "300"]}
                    ]
                },
            },
        )
        before = wait_for(
            lambda: (
                core.read_namespaced_pod("survivor", "default").status.phase == "Running"
                and core.read_namespaced_pod("survivor", "default")
            ),
            what="survivor running",
        )
        os.kill(json.loads(info_file.read_text())["pids"]["apiserver"], signal.SIGKILL)
        again = start_localkube(tmp_path)
        assert again.api_url == handle.api_url
        after = core.read_namespaced_pod("survivor", "default")
        assert after.metadata.uid == before.metadata.uid
        assert after.status.phase == "Running"
        output = stream(
            core.connect_get_namespaced_pod_exec,
            "survivor",
            "default",
            command=["echo", "still here"],
            stderr=True,
            stdout=True,
            stdin=False,
            tty=False,
        )
        assert output == "still here\n"
    finally:
        stop_localkube(handle)
