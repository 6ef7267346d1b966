"""What the processes Airflow forks for training import, for their parent to import first.

Airflow's LocalExecutor forks its workers from the scheduler, and each worker
forks one process per task, which parses its DAG file before its step runs.
Parsing dags/tfjob_submit.py imports the cncf.kubernetes provider's operator,
the Kubernetes clients and this package; the steps then import the S3 and
Kubernetes hooks (boto3). A fresh process pays ~1.5 s for that on a quiet
2-core machine and over 10 s under load, for steps that take a fraction of a
second. The triggerer forks its trigger runner the same way, which imports
the training trigger and the asyncio Kubernetes client at the first run's wait.
A component that imports its list here before it forks hands the modules to
every child (scripts/airflow_preloaded.py); tests/operators/test_preload.py
keeps the lists complete.
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
# The training trigger and what it imports when it runs: its watch, its grant refresh.
TRIGGER_MODULES = (
    "operators.triggers",
    "airflow.providers.amazon.aws.hooks.s3",
    "airflow.providers.cncf.kubernetes.hooks.kubernetes",
    "asgiref.sync",
    "botocore.config",
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.watch",
)
PRELOADS = {"scheduler": TASK_MODULES, "triggerer": TRIGGER_MODULES}


def preload_modules(component: str) -> list[str]:
    """Import the modules the children of Airflow's `component` use (a name of `PRELOADS`);
    returns those that were not imported yet."""
    names = PRELOADS[component]
    fresh = [name for name in names if name not in sys.modules]
    for name in names:
        importlib.import_module(name)
    return fresh
