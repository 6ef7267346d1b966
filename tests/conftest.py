"""Suite-wide pytest set-up: the fixture plugins and the order in which test files start.

The tests live in tests/<package>/ (tests/README.md). The shared helpers are the
installed `harness` package (`from harness.pipeline_fixtures import wait_for`,
`from harness.repo_root import REPO_ROOT`), which bench/ uses too. The modules
that define fixtures are registered below as plugins: a test takes their
fixtures (`localkube_api`, `s3_server`, `pipeline_world`, ...) by name, without
importing them.

`make test` runs the files on several pytest-xdist workers (`--dist loadfile`),
each file whole on one worker. The files that take minutes (Airflow and real
TensorFlow end to end) start first, so the suite's wall time is close to the
longest file rather than a long file started last (longest first).

When a session ends, the PostgreSQL its tests started (harness/postgres_fixtures.py)
is stopped and removed.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

# Property tests judge the code, not the machine: how fast examples are generated and
# run depends on what else the two cores are doing (CI saw "input generation is slow"
# fail a ClusterSpec property under load). Explicit @settings inherit this profile.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

# Dependencies first: pipeline_fixtures imports the localkube and S3 ones, and a module
# imported before pytest registers it as a plugin would miss assertion rewriting.
pytest_plugins = [
    "harness.localkube_fixtures",
    "harness.s3_fixtures",
    "harness.airflow_fixtures",
    "harness.pipeline_fixtures",
    "harness.world_fixtures",
]

# Slowest first, as `make test --durations` shows them on 2 cores.
# The two TensorFlow files start apart: together with the TensorFlow pipeline file they
# would put a dozen TensorFlow processes on the two cores at once (CI: make test 27 min).
LONG_FILES = (
    "test_pipeline_tensorflow.py",
    "test_run_view_browser.py",
    "test_services_self_healing.py",
    "test_tenants_pipeline.py",
    "test_pipeline_e2e.py",
    "test_pipeline_restarts.py",
    "test_pipeline_tensorflow_restart.py",
    "test_pipeline_rest.py",
    "test_pipeline_s3_access.py",
    "test_hostile_pods.py",
    "test_tshell_run_commands.py",
    "test_airflow_config_services.py",
    "test_bench_concurrent_scale.py",
    "test_examples_resume.py",
    "test_janitor_dag.py",
    "test_localkube_e2e.py",
)


def file_rank(item: pytest.Item) -> int:
    name = item.path.name  # by file name: the files sit in tests/<package>/
    return LONG_FILES.index(name) if name in LONG_FILES else len(LONG_FILES)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=file_rank)  # stable: the order inside a file and among the rest is kept


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from harness.postgres_fixtures import stop_test_postgres

    stop_test_postgres()
