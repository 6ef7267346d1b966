"""The project's airflow.cfg as Airflow reads it, and the launcher's environment and stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from harness.airflow_fixtures import airflow_server
from harness.repo_root import REPO_ROOT

READ_CONFIG = """
import json
from airflow import settings
from airflow.configuration import conf

settings.configure_orm()  # builds the engines; connects to nothing
print(json.dumps({
    "executor": conf.get("core", "executor"),
    "load_examples": conf.getboolean("core", "load_examples"),
    "parallelism": conf.getint("core", "parallelism"),
    "paused_at_creation": conf.getboolean("core", "dags_are_paused_at_creation"),
    "auth_manager": conf.get("core", "auth_manager"),
    "dags_folder": conf.get("core", "dags_folder"),
    "plugins_folder": conf.get("core", "plugins_folder"),
    "sql_alchemy_conn": conf.get("database", "sql_alchemy_conn"),
    "refresh_interval": conf.getint("dag_processor", "refresh_interval"),
    "api_host": conf.get("api", "host"),
    "jwt_secret": conf.get("api_auth", "jwt_secret"),
    "execution_api_retries": conf.getint("workers", "execution_api_retries"),
    "drivers": [engine.url.drivername for engine in (settings.engine, settings.async_engine)],
}))
"""


def read_airflow_config(env: dict[str, str]) -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", READ_CONFIG], env=env, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_airflow_reads_the_project_settings_from_airflow_cfg(tmp_path):
    home = REPO_ROOT / ".state" / "airflow"
    env = {
        "PATH": os.environ["PATH"],
        "AIRFLOW_CONFIG": str(REPO_ROOT / "airflow.cfg"),
        "AIRFLOW_HOME": str(home),
    }
    values = read_airflow_config(env)
    assert values["executor"] == "LocalExecutor"
    assert values["load_examples"] is False
    assert values["parallelism"] == 16
    assert values["paused_at_creation"] is False
    assert values["auth_manager"].endswith("FabAuthManager")
    assert Path(values["dags_folder"]).resolve() == REPO_ROOT / "dags"
    assert Path(values["plugins_folder"]).resolve() == REPO_ROOT / "plugins"
    # Without the launcher's database URL, a socket that does not exist: never a SQLite file.
    assert values["sql_alchemy_conn"] == (
        f"postgresql+psycopg2:///airflow?host={home}/no-database-without-the-launcher"
    )
    assert values["drivers"] == ["postgresql+psycopg2", "postgresql+asyncpg"]
    assert values["refresh_interval"] <= 10
    assert values["api_host"] == "127.0.0.1"
    assert values["execution_api_retries"] >= 10


def test_launcher_environment_points_every_component_at_one_home_port_and_secret(tmp_path):
    settings = airflow_server.AirflowSettings(
        home=tmp_path / "home",
        port=18123,
        dags_folder=tmp_path / "dags",
        database_url="postgresql+psycopg2://tfjob:pw@/airflow?host=/run/pg",
    )
    env = airflow_server.build_airflow_env(settings, base_env={"PATH": "/usr/bin"})
    assert env["AIRFLOW_HOME"] == str((tmp_path / "home").resolve())
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str((tmp_path / "dags").resolve())
    assert env["AIRFLOW__API__BASE_URL"] == "http://127.0.0.1:18123"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18123/execution/"
    assert env[airflow_server.INSTANCE_MARKER] == env["AIRFLOW_HOME"]
    again = airflow_server.build_airflow_env(settings, base_env={})
    assert again["AIRFLOW__API_AUTH__JWT_SECRET"] == env["AIRFLOW__API_AUTH__JWT_SECRET"]
    assert len(env["AIRFLOW__API_AUTH__JWT_SECRET"]) >= 64
    values = read_airflow_config(env)
    assert values["jwt_secret"] == env["AIRFLOW__API_AUTH__JWT_SECRET"]
    assert Path(values["dags_folder"]) == (tmp_path / "dags").resolve()
    assert values["sql_alchemy_conn"] == settings.database_url


# A stand-in for standalone's process tree: a child in its own process group (as
# Airflow's task supervisor makes them) and a grandchild in a new session (as a
# BashOperator's) both must be stopped; an unrelated process must not.
PROCESS_TREE = textwrap.dedent(
    """
    import os, subprocess, sys, time
    sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
    group = subprocess.Popen(sleeper, process_group=0)
    session = subprocess.Popen(sleeper, start_new_session=True)
    print(group.pid, session.pid, flush=True)
    time.sleep(300)
    """
)


def test_stop_ends_the_whole_process_tree_of_one_home_and_nothing_else(tmp_path):
    home = (tmp_path / "home").resolve()
    home.mkdir()
    env = {**os.environ, airflow_server.INSTANCE_MARKER: str(home)}
    root = subprocess.Popen(
        [sys.executable, "-c", PROCESS_TREE],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    (home / airflow_server.PID_FILE).write_text(str(root.pid))
    children = [int(pid) for pid in root.stdout.readline().split()]
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        stopped = airflow_server.stop_airflow(home, grace=5)
        assert {root.pid, *children} <= set(stopped)
        root.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(airflow_server.is_alive(pid) for pid in children):
            assert time.monotonic() < deadline, "children still alive after stop"
            time.sleep(0.1)
        assert bystander.poll() is None
        assert not (home / airflow_server.PID_FILE).exists()
        assert airflow_server.find_instance_pids(home) == []
    finally:
        bystander.kill()
        bystander.wait()
        for pid in children:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


def test_up_on_a_taken_port_says_which_port_and_what_to_do(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        settings = airflow_server.AirflowSettings(
            home=tmp_path / "home", port=port, database_url="postgresql://unused"
        )
        try:
            airflow_server.start_airflow(settings)
        except airflow_server.AirflowStartError as error:
            assert f"port {port} on 127.0.0.1 is taken by another process" in str(error)
            assert "--port" in str(error)
        else:
            raise AssertionError("start_airflow did not refuse a taken port")


def test_stop_after_the_launcher_was_killed_finds_its_processes_by_session(tmp_path):
    # As after a crash: the session leader is gone (kill -9) and its children carry no
    # marker (Airflow's setproctitle overwrites what /proc/<pid>/environ shows).
    home = (tmp_path / "home").resolve()
    home.mkdir()
    root = subprocess.Popen(
        [sys.executable, "-c", PROCESS_TREE],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    (home / airflow_server.PID_FILE).write_text(str(root.pid))
    group_child, other_session = (int(pid) for pid in root.stdout.readline().split())
    root.kill()
    root.wait(timeout=10)
    try:
        assert airflow_server.is_alive(group_child)
        stopped = airflow_server.stop_airflow(home, grace=5)
        assert group_child in stopped and other_session not in stopped
        deadline = time.monotonic() + 10
        while airflow_server.is_alive(group_child):
            assert time.monotonic() < deadline, "the session's child is still alive after stop"
            time.sleep(0.1)
        assert airflow_server.is_alive(other_session)  # another session, no marker: not ours
    finally:
        for pid in (group_child, other_session):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


def test_up_without_a_database_says_so_and_starts_nothing(tmp_path):
    settings = airflow_server.AirflowSettings(home=tmp_path / "home", port=1)
    try:
        airflow_server.start_airflow(settings)
    except airflow_server.AirflowStartError as error:
        assert "no database" in str(error)
    else:
        raise AssertionError("start_airflow started without a database")
    assert not (tmp_path / "home").exists()
