"""`tfjob_janitor`: every few minutes, delete run objects whose Airflow run is over or gone.

See operators/janitor.py for the rules; the task logs every object it removed.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from operators.janitor import sweep_in_task
from tfjob.pipeline_ids import JANITOR_DAG_ID, JANITOR_TASK

JANITOR_SCHEDULE = timedelta(minutes=10)

with DAG(
    dag_id=JANITOR_DAG_ID,
    schedule=JANITOR_SCHEDULE,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    description="Remove Kubernetes objects of TF-on-K8s runs that ended or no longer exist",
    tags=["tfjob", "maintenance"],
):
    task(task_id=JANITOR_TASK, retries=1, retry_delay=timedelta(minutes=1))(sweep_in_task)()
