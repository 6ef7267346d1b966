"""One training DAG per request file in dags/requests/ (`tfjob__<name>`, scheduled by the request).

Each DAG belongs to its file's tenant (roles, pool, run limit: operators/dag_factory.py).
Parsing reads only local YAML (the request files and the tenants file); no
network, Kubernetes or S3 work. When Airflow runs a task it sets the parsing
context, and only that DAG's request file is built. A tenants file that
cannot be read turns every request file into an INVALID DAG that says why.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow.sdk import get_parsing_context

from operators.dag_factory import build_invalid_request_dag, build_request_dag, list_request_files
from tfjob.pipeline_ids import REQUEST_DAG_PREFIX, request_dag_id
from tfjob.tenants import TenantsFileError, load_tenants

# TFJOB_REQUESTS_DIR points elsewhere (tests, a deployment keeping requests apart from code).
REQUESTS_DIR = Path(
    os.environ.get("TFJOB_REQUESTS_DIR") or Path(__file__).resolve().parent / "requests"
)

log = logging.getLogger(__name__)


def make_builder() -> Callable[[Path], Any]:
    """Builds a request file's DAG, with the tenants file read once per parse."""
    try:
        config = load_tenants()
    except TenantsFileError as exc:
        problem = f"the tenants file cannot be read: {exc}"
        return lambda path: build_invalid_request_dag(path, problem)
    return lambda path: build_request_dag(path, config)


def build_all(folder: Path = REQUESTS_DIR) -> dict:
    wanted = get_parsing_context().dag_id
    build_one = make_builder()
    filtering = bool(wanted) and wanted.startswith(REQUEST_DAG_PREFIX)
    dags = {}
    for path in list_request_files(folder) if folder.is_dir() else []:
        if filtering and wanted != request_dag_id(path.stem):
            # Fast path while running a task: the file stem usually equals the request name.
            continue
        dag = build_one(path)
        if dag.dag_id in dags:
            log.error(
                "request file %s: DAG %s already defined by another file; ignored", path, dag.dag_id
            )
            continue
        dags[dag.dag_id] = dag
    if filtering and wanted not in dags:
        # The stem differs from the request name: build them all.
        return build_all_unfiltered(folder)
    return dags


def build_all_unfiltered(folder: Path) -> dict:
    build_one = make_builder()
    dags = {}
    for path in list_request_files(folder):
        dag = build_one(path)
        dags.setdefault(dag.dag_id, dag)
    return dags


globals().update(build_all())
