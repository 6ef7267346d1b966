"""`tfjob_submit__<tenant>`: one DAG per tenant of the tenants file, training from a request
given as trigger conf (UI form, REST API, tshell submit).

The tenant is the DAG's, not the conf's: its `tenant` Param allows only that
tenant (Airflow refuses other conf before a run exists), `validate` refuses
any other anyway, and only the tenant's Airflow roles may trigger or see its
runs. Every request field is an Airflow Param built from the request's JSON
Schema, so the form shows them all; the request model checks the rest in
`validate`.

Parsing reads only the local tenants file. When Airflow runs a task it sets
the parsing context, and only that tenant's DAG is built. A tenants file that
cannot be read is this file's import error, shown in the UI.
"""

from __future__ import annotations

from airflow.sdk import get_parsing_context

from operators.dag_factory import build_submit_dag
from tfjob.pipeline_ids import SUBMIT_DAG_PREFIX, submit_dag_id
from tfjob.tenants import load_tenants


def build_all() -> dict:
    wanted = get_parsing_context().dag_id
    filtering = bool(wanted) and wanted.startswith(SUBMIT_DAG_PREFIX)
    dags = {}
    for tenant in load_tenants().tenants:
        dag_id = submit_dag_id(tenant.name)
        if filtering and wanted != dag_id:
            continue
        dags[dag_id] = build_submit_dag(tenant)
    return dags


globals().update(build_all())
