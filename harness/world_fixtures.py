"""One pipeline world per test process, shared by the end-to-end files that need a standard one.

Why this exists: a world (S3 server, localkube, a migrated Airflow database with
the tenants' roles) takes one to three minutes to start on two cores, and each
end-to-end file started its own. Now each pytest-xdist worker starts one on first
use (`worker_pipeline_world`, session-scoped) and stops it when its session
ends, and every file gets a view of its own (`pipeline_world`, module-scoped):

- its own Airflow home and database, a copy of the worker's freshly migrated one
  (tenants' roles included): no DAG, run, pool or XCom of another file;
- its own request-files folder and its own copy of the environment: a file that
  writes request files or changes its tenants file changes nothing for the next;
- the worker's S3 server, localkube and tenant namespace. Files name their
  requests apart (a run's keys and objects carry its name), and when a file
  ends every run object left in the namespace is deleted, so one file's
  leftovers cannot reach the next.

A file that changes the world itself (applies other tenants, quotas or pod
identities) keeps a world of its own by overriding the fixture:

    @pytest.fixture(scope="module")
    def pipeline_world(tmp_path_factory):
        yield from start_own_pipeline_world(tmp_path_factory)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from harness.airflow_fixtures import AirflowHandle, start_airflow
from harness.localkube_fixtures import LocalkubeHandle
from harness.pipeline_fixtures import (
    NAMESPACE,
    PipelineWorld,
    create_tenant_pool,
    start_pipeline_world,
    wait_for,
)
from harness.postgres_fixtures import copy_airflow_database
from tfjob.naming import LABEL_JOB

# Each task process parses its DAG file, importing the provider's KubernetesPodOperator
# (kubernetes + kubernetes_asyncio: ~2 s idle, over 10 s on 2 cores under load): more than
# Airflow's default 30 s, so that a busy machine does not fail tasks at their start.
DAGBAG_IMPORT_TIMEOUT_S = 120
# A run's pods stop within their grace period; a file's leftovers must be gone before
# the next file starts.
LEFTOVERS_GONE_TIMEOUT_S = 120


def open_file_world(shared: PipelineWorld, name: str) -> PipelineWorld:
    """A view of `shared` for one test file: its own Airflow home and database (a copy of
    the shared, migrated one), request-files folder and environment."""
    folder = shared.home.parent  # beside the shared home: home.parent / "s3-state" holds
    home = folder / f"airflow-{name}"
    requests_dir = folder / f"requests-{name}"
    home.mkdir()
    requests_dir.mkdir()
    env = {
        **shared.env,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": copy_airflow_database(shared.home, home),
        "TFJOB_REQUESTS_DIR": str(requests_dir),
    }
    return PipelineWorld(shared.s3, shared.kube, home, requests_dir, shared.bucket, env)


def delete_leftover_run_objects(kube: LocalkubeHandle) -> None:
    """Delete every run object still in the tenant namespace and wait until its pods are gone."""
    core = kube.core_v1()
    networking = kubernetes.client.NetworkingV1Api(core.api_client)
    core.delete_collection_namespaced_pod(NAMESPACE, label_selector=LABEL_JOB)
    core.delete_collection_namespaced_config_map(NAMESPACE, label_selector=LABEL_JOB)
    core.delete_collection_namespaced_secret(NAMESPACE, label_selector=LABEL_JOB)
    for policy in networking.list_namespaced_network_policy(
        NAMESPACE, label_selector=LABEL_JOB
    ).items:
        networking.delete_namespaced_network_policy(policy.metadata.name, NAMESPACE)
    wait_for(
        lambda: not core.list_namespaced_pod(NAMESPACE, label_selector=LABEL_JOB).items,
        LEFTOVERS_GONE_TIMEOUT_S,
        "the run pods a test file left to be gone",
        interval=1.0,
    )


def start_own_pipeline_world(factory: pytest.TempPathFactory) -> Iterator[PipelineWorld]:
    """A world of the calling file's own, stopped after it (for files that change the world)."""
    world, stop = start_pipeline_world(factory.mktemp("pipeline"))
    try:
        yield world
    finally:
        stop()


@pytest.fixture(scope="session")
def worker_pipeline_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PipelineWorld]:
    """This test process's world, started on first use and stopped when the session ends."""
    yield from start_own_pipeline_world(tmp_path_factory)


@pytest.fixture(scope="module")
def pipeline_world(
    worker_pipeline_world: PipelineWorld, request: pytest.FixtureRequest
) -> Iterator[PipelineWorld]:
    """This file's view of the worker's world (see the module's docstring)."""
    name = Path(request.path).stem
    try:
        yield open_file_world(worker_pipeline_world, name)
    finally:
        delete_leftover_run_objects(worker_pipeline_world.kube)


@contextlib.contextmanager
def run_world_airflow(world: PipelineWorld, home: Path) -> Iterator[AirflowHandle]:
    """A launched Airflow of the calling file on its view of the world (the world's
    connections, request files and tenants file) with the test tenant's pool; stopped after."""
    env = {
        k: v
        for k, v in world.env.items()
        if k.startswith("AIRFLOW_CONN_") or k in ("TFJOB_REQUESTS_DIR", "TFJOB_TENANTS_FILE")
    }
    env["AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT"] = str(DAGBAG_IMPORT_TIMEOUT_S)
    handle = start_airflow(home, extra_env=env)
    try:
        create_tenant_pool(handle)
        yield handle
    finally:
        handle.stop()
