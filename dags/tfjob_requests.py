"""One training DAG per request file in dags/requests/ (`tfjob__<name>`, scheduled by the request).

Each DAG belongs to its file's tenant (roles, pool, run limit: operators/dag_factory.py).
A request's name is its file's stem, and the DAG processor and a task's
runner pick a DAG's file by the same rule (operators/request_files.py): a file
declaring another name, or two files with one name, make INVALID DAGs saying
why. Parsing reads only local YAML (the request files and the tenants file);
no network, Kubernetes or S3 work. When Airflow runs a task it sets the
parsing context, and only that DAG's request file is built. A tenants file
that cannot be read turns every request file into an INVALID DAG that says why.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow.sdk import get_parsing_context

from operators.dag_factory import build_source_dag
from operators.request_files import select_request_sources
from tfjob.pipeline_ids import REQUEST_DAG_PREFIX
from tfjob.tenants import TenantsConfig, TenantsFileError, load_tenants

# TFJOB_REQUESTS_DIR points elsewhere (tests, a deployment keeping requests apart from code).
REQUESTS_DIR = Path(
    os.environ.get("TFJOB_REQUESTS_DIR") or Path(__file__).resolve().parent / "requests"
)


def read_tenants() -> tuple[TenantsConfig | None, str]:
    """The tenants file, read once per parse; (None, why) when it cannot be read."""
    try:
        return load_tenants(), ""
    except TenantsFileError as exc:
        return None, f"the tenants file cannot be read: {exc}"


def build_all(folder: Path = REQUESTS_DIR) -> dict:
    wanted = get_parsing_context().dag_id
    running = wanted if wanted and wanted.startswith(REQUEST_DAG_PREFIX) else None
    sources = select_request_sources(folder, running)
    if not sources:
        return {}
    config, problem = read_tenants()
    dags = {}
    for source in sources:
        dag = build_source_dag(source, config, problem)
        dags[dag.dag_id] = dag
    return dags


globals().update(build_all())
