"""One training DAG per request file in dags/requests/ (`tfjob__<name>`, scheduled by the request).

Parsing reads only the local YAML files; no network, Kubernetes or S3 work.
When Airflow runs a task it sets the parsing context, and only that DAG's
request file is built.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from airflow.sdk import get_parsing_context

from operators.dag_factory import DAG_ID_PREFIX, build_request_dag, list_request_files

# TFJOB_REQUESTS_DIR points elsewhere (tests, a deployment keeping requests apart from code).
REQUESTS_DIR = Path(
    os.environ.get("TFJOB_REQUESTS_DIR") or Path(__file__).resolve().parent / "requests"
)

log = logging.getLogger(__name__)


def build_all(folder: Path = REQUESTS_DIR) -> dict:
    wanted = get_parsing_context().dag_id
    dags = {}
    for path in list_request_files(folder) if folder.is_dir() else []:
        if wanted and wanted.startswith(DAG_ID_PREFIX) and wanted != f"{DAG_ID_PREFIX}{path.stem}":
            # Fast path while running a task: the file stem usually equals the request name.
            continue
        dag = build_request_dag(path)
        if dag.dag_id in dags:
            log.error(
                "request file %s: DAG %s already defined by another file; ignored", path, dag.dag_id
            )
            continue
        dags[dag.dag_id] = dag
    if wanted and wanted.startswith(DAG_ID_PREFIX) and wanted not in dags:
        # The stem differs from the request name: build them all.
        return build_all_unfiltered(folder)
    return dags


def build_all_unfiltered(folder: Path) -> dict:
    dags = {}
    for path in list_request_files(folder):
        dag = build_request_dag(path)
        dags.setdefault(dag.dag_id, dag)
    return dags


globals().update(build_all())
