"""The tests' own PostgreSQL: one cluster per test process, a database per Airflow home.

Why this exists: Airflow's metadata database is PostgreSQL (scripts/postgres_server.py),
in tests as in `make up`. Starting a cluster takes about a second; each Airflow
home (a launched Airflow, a pipeline world's `dag.test()`) gets a database of
its own in this process's cluster, created on first use. The cluster lives in
a directory under /tmp (pytest's own temp dirs are 0700 root, which the
`postgres` system user cannot enter), runs without fsync, and is stopped and
removed when the test session ends (tests/conftest.py).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from scripts import postgres_server  # noqa: E402

_started: list[Path] = []


def start_test_postgres() -> postgres_server.PostgresCluster:
    """This process's cluster (a PostgresCluster), started on first use."""
    if not _started:
        root = Path(tempfile.mkdtemp(prefix="tfjob-pg-", dir="/tmp"))
        root.chmod(0o711)  # mkdtemp's 0700 would keep the postgres user out
        _started.append(root)
    return postgres_server.start_postgres(_started[0], durable=False)


def name_airflow_database(home: Path) -> str:
    """The name of the database of the Airflow at `home`: one per home."""
    return "airflow_" + hashlib.sha256(str(Path(home).resolve()).encode()).hexdigest()[:16]


def airflow_database_url(home: Path) -> str:
    """The SQLAlchemy URL of the database of the Airflow at `home` (created on first use)."""
    return postgres_server.ensure_database(start_test_postgres(), name_airflow_database(home))


def copy_airflow_database(template_home: Path, home: Path) -> str:
    """The SQLAlchemy URL of the database of the Airflow at `home`, on first use a copy of the
    one at `template_home` (migrated, with the tenants' roles): a copy takes a fraction of a
    second, `airflow db migrate` and the roles' command each start Airflow's CLI (seconds
    each on two busy cores). A home that has its database keeps it.

    Nothing may be connected to the template while it is copied (PostgreSQL refuses).
    """
    return postgres_server.ensure_database(
        start_test_postgres(), name_airflow_database(home), name_airflow_database(template_home)
    )


def stop_test_postgres() -> None:
    """Stop and remove this process's cluster, if it was started."""
    while _started:
        root = _started.pop()
        postgres_server.stop_postgres(root)
        shutil.rmtree(root, ignore_errors=True)
