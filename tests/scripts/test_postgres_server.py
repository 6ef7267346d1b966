"""scripts/postgres_server.py: Airflow's PostgreSQL starts, keeps what it committed, stops.

A real cluster in a directory under /tmp (the `postgres` system user must be able
to enter it), as `make up` makes one under .state/postgres.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from harness.postgres_fixtures import postgres_server

pytestmark = [pytest.mark.root]

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
REAP_DELAY_S = 2.0


@pytest.fixture
def state_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tfjob-pg-test-", dir="/tmp"))
    path.chmod(0o711)  # mkdtemp's 0700 would keep the postgres user out
    yield path / "postgres"
    postgres_server.stop_postgres(path / "postgres")
    shutil.rmtree(path, ignore_errors=True)


def connect(cluster: postgres_server.PostgresCluster, database: str):
    return psycopg2.connect(
        dbname=database,
        user=postgres_server.SUPERUSER,
        password=cluster.read_password(),
        host=str(cluster.socket_dir),
    )


def read_postmaster_pid(cluster: postgres_server.PostgresCluster) -> int:
    return int((cluster.data / "postmaster.pid").read_text().splitlines()[0])


def test_a_commit_survives_a_kill_of_the_server_and_a_restart(state_dir):
    cluster = postgres_server.start_postgres(state_dir)
    assert cluster.root == state_dir
    assert postgres_server.start_postgres(state_dir) == cluster  # up twice: one server
    url = postgres_server.ensure_database(cluster, "airflow")
    assert url == postgres_server.ensure_database(cluster, "airflow")
    assert url.startswith(f"postgresql+psycopg2://tfjob:{cluster.read_password()}@/airflow?host=")
    with connect(cluster, "airflow") as connection, connection.cursor() as cursor:
        cursor.execute("CREATE TABLE kept (value text)")
        cursor.execute("INSERT INTO kept VALUES ('acknowledged')")
    postmaster = read_postmaster_pid(cluster)
    os.kill(postmaster, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while postgres_server.is_running(cluster) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not postgres_server.is_running(cluster)

    again = postgres_server.start_postgres(state_dir)
    assert read_postmaster_pid(again) != postmaster
    with connect(again, "airflow") as connection, connection.cursor() as cursor:
        cursor.execute("SELECT value FROM kept")
        assert cursor.fetchall() == [("acknowledged",)]
    assert postgres_server.stop_postgres(state_dir) is True
    assert postgres_server.stop_postgres(state_dir) is False


def start_under_a_late_reaper(state_dir: Path) -> tuple[int, int]:
    """Start the cluster from a child subreaper that reaps only when told, as a busy
    init does: (the child's pid, the write end of the pipe that tells it to reap)."""
    told, tell = os.pipe()
    started_read, started_write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the forked child
        try:
            ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            postgres_server.start_postgres(state_dir)
            os.write(started_write, b"up")
            os.read(told, 1)
            time.sleep(REAP_DELAY_S)
            while True:
                os.waitpid(-1, 0)
        except BaseException:
            os._exit(0)
    os.close(told)
    assert os.read(started_read, 2) == b"up"
    return child, tell


def test_a_start_after_a_kill_waits_until_the_dead_postmaster_is_reaped(state_dir):
    """A killed postmaster stays a zombie until its parent reaps it; kill(pid, 0)
    still finds it, so it neither counts as running nor lets a new one start."""
    reaper, tell = start_under_a_late_reaper(state_dir)
    try:
        cluster = postgres_server.locate_cluster(state_dir)
        postmaster = read_postmaster_pid(cluster)
        os.kill(postmaster, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while postgres_server.is_running(cluster) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert Path(f"/proc/{postmaster}").exists(), "the killed postmaster is a zombie"
        assert not postgres_server.is_running(cluster)
        os.write(tell, b"x")  # reaped REAP_DELAY_S from now: start waits for it

        again = postgres_server.start_postgres(state_dir)
        restarted = read_postmaster_pid(again)
        assert restarted != postmaster and postgres_server.is_running(again)
        assert not Path(f"/proc/{postmaster}").exists()
    finally:
        os.kill(reaper, signal.SIGKILL)
        os.waitpid(reaper, 0)
        os.close(tell)


def test_the_password_is_private_and_required(state_dir):
    cluster = postgres_server.start_postgres(state_dir)
    assert stat.S_IMODE(cluster.credentials.stat().st_mode) == 0o600
    assert stat.S_IMODE(cluster.data.stat().st_mode) == 0o700
    assert not list(cluster.socket_dir.glob("*password*"))  # initdb's file is gone
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(
            dbname="postgres",
            user=postgres_server.SUPERUSER,
            password="wrong",
            host=str(cluster.socket_dir),
        )
    # No TCP listener: the socket file is the only way in.
    assert "listen_addresses = ''" in (cluster.data / "postgresql.conf").read_text()


def test_a_state_dir_the_server_user_cannot_enter_gets_a_place_of_its_own(tmp_path):
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    cluster = postgres_server.locate_cluster(closed / "state" / "postgres")
    assert cluster.root.parent == postgres_server.FALLBACK_ROOT
    assert cluster.root == postgres_server.locate_cluster(closed / "state" / "postgres").root
    assert cluster.root != postgres_server.locate_cluster(closed / "other" / "postgres").root
    opened = Path(tempfile.mkdtemp(dir="/tmp"))
    opened.chmod(0o711)
    try:
        assert postgres_server.locate_cluster(opened / "postgres").root == opened / "postgres"
    finally:
        opened.rmdir()


def test_bad_database_names_and_long_socket_paths_are_refused():
    cluster = postgres_server.PostgresCluster(Path("/tmp/" + "x" * 120))
    with pytest.raises(postgres_server.PostgresError, match="longer than a Unix socket allows"):
        postgres_server.check_layout(cluster)
    with pytest.raises(postgres_server.PostgresError, match="database name 'Air; DROP'"):
        postgres_server.ensure_database(cluster, "Air; DROP")
