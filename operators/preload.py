"""What a training DAG's task process imports, for the process that forks them to import first.

Airflow's LocalExecutor forks its workers from the scheduler, and each worker
forks one process per task, which parses its DAG file before its step runs.
Parsing dags/tfjob_submit.py imports the cncf.kubernetes provider's operator,
the Kubernetes clients and this package; the steps then import the S3 and
Kubernetes hooks (boto3). A fresh process pays ~1.5 s for that on a quiet
2-core machine and over 10 s under load, for steps that take a fraction of a
second. A scheduler that has imported `TASK_MODULES` before it forks hands them
to every task process (scripts/airflow_scheduler.py); tests/operators/
test_preload.py keeps the list complete.
"""

from __future__ import annotations

import importlib
import sys

# The DAG files' own imports come with the factory; the rest are the imports the steps,
# the launch and the train operators make when they run (the list the test checks).
TASK_MODULES = (
    "operators.dag_factory",
    "operators.janitor",
    "operators.steps",
    "airflow.models.pool",
    "airflow.providers.amazon.aws.hooks.s3",
    "airflow.providers.cncf.kubernetes.hooks.kubernetes",
    "airflow.providers.cncf.kubernetes.pod_generator",
    "botocore.config",
    "botocore.exceptions",
    "kubernetes.client",
    "kubernetes.stream",
)


def preload_task_modules() -> list[str]:
    """Import every module of `TASK_MODULES`; returns those that were not imported yet."""
    fresh = [name for name in TASK_MODULES if name not in sys.modules]
    for name in TASK_MODULES:
        importlib.import_module(name)
    return fresh
