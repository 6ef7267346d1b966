"""scripts/services.py: the embedded default comes up in order, twice, and goes down cleanly.

One real S3 server, localkube, PostgreSQL and Airflow on free ports in a
temporary state directory (the demo's fixed ports stay untouched); Airflow is
also killed with SIGKILL, as a crash does, and the next `up` ends what the
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
from airflow_fixtures import airflow_server
from postgres_fixtures import postgres_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.root]

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVICES = REPO_ROOT / "scripts" / "services.py"


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
    from instance_processes import read_session_id  # scripts/, on sys.path by airflow_fixtures

    return [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
            if read_session_id(pid) == session_id and airflow_server.is_alive(pid)]


def kill_supervisor_and_components(supervisor: int) -> None:
    names = (b"airflow_components", b"api-server", b"api_server", b"scheduler",
             b"dag-processor", b"triggerer")
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
def test_up_twice_then_down_leaves_no_process_or_mount(tmp_path):
    state = tmp_path / "state"
    ports = ["--s3-port", "0", "--kube-port", "0"]
    # Airflow comes back on its port after the crash below: a port of the ephemeral range
    # could meanwhile be any connection's source port (scripts/background_server.py).
    from background_server import pick_port_below_ephemeral_range  # scripts/ (airflow_fixtures)

    ports += ["--airflow-port", str(pick_port_below_ephemeral_range())]
    try:
        first = services("up", "--state-dir", str(state), *ports)
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
            config_file=record["localkube"]["kubeconfig"])
        assert kube_client.configuration.host == record["localkube"]["api_url"]
        assert kubernetes.client.VersionApi(kube_client).get_code().git_version

        second = services("up", "--state-dir", str(state), *ports)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "already serving" in second.stdout
        assert json.loads((state / "services.json").read_text()) == record

        # A crash: the supervisor and Airflow's components die by SIGKILL; the processes
        # they spawned (serve-logs, LocalExecutor workers, renamed by setproctitle) live on.
        crashed = airflow_server.read_pid(state / "airflow")
        kill_supervisor_and_components(crashed)
        assert list_session(crashed), "nothing of the crashed Airflow outlived it"
        third = services("up", "--state-dir", str(state), *ports)
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
    clean = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "check_clean.py"),
                            "--checkout", str(state), "--state-dir", str(state)],
                           capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    shutil.rmtree(database.root)
    assert processes_mentioning(str(state)) == []
    assert airflow_server.find_instance_pids(state / "airflow") == []
    assert str(state) not in Path("/proc/mounts").read_text()
    assert not (state / "services.json").exists()
    again = services("down", "--state-dir", str(state))
    assert again.returncode == 0, again.stdout + again.stderr
