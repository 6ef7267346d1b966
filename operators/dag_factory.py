"""The one factory that builds every training DAG.

Both `dags/tfjob_requests.py` (one DAG per request file) and
`dags/tfjob_submit.py` (one parameterised DAG) call `build_training_dag`, so
every training run has the same tasks:

    validate >> fetch_bundle >> launch >> clusterspec >> train >> archive >> teardown >> publish

- `fetch_bundle` and `launch` are setup tasks; `archive` and `teardown` are
  Airflow teardown tasks of both. A teardown task runs once its upstream is
  done if at least one of its setups succeeded: so archive and teardown run
  whenever the bundle was fetched, even when `launch` itself failed (a gang
  that did not start is archived and removed too), and not when nothing can
  exist (validate or fetch_bundle failed). Clearing any task between them
  clears the setups and teardowns too, so a cleared run relaunches cleanly.
- `publish` needs train, archive and teardown to succeed, so a failed launch,
  training, archive or teardown fails the run.
- `retries` of the request apply to `launch` (a gang start that failed can
  be tried again cleanly); a failed training is rerun by clearing the run.
- The job steps (launch, clusterspec, train, archive, teardown: while the
  run's objects may exist) run in the tenant's pool (`tfjob-tenant-<name>`,
  created by `tshell tenants apply`), which caps the tenant's concurrent jobs,
  with weight_rule "upstream" so a freed slot goes to the furthest-along run,
  not to a new launch (docs/tenants.md). Request DAGs name the pool here;
  `tfjob_submit`'s tenant is known only at run time, so the cluster policy
  `operators.cluster_policy` sets it from the trigger conf.

Building a DAG does no network, Kubernetes or S3 work; reading a request file
(local YAML) is the only I/O.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, AssetAlias, Param, task

from operators import steps
from operators.launch import TrainingLaunchOperator
from operators.settings import (
    ARCHIVE_TASK,
    CLUSTERSPEC_TASK,
    FETCH_BUNDLE_TASK,
    LAUNCH_TASK,
    PUBLISH_TASK,
    TEARDOWN_TASK,
    TRAIN_TASK,
    VALIDATE_TASK,
)
from operators.train import TrainingWaitOperator

DAG_ID_PREFIX = "tfjob__"
SUBMIT_DAG_ID = "tfjob_submit"
# Pause before Airflow retries a failed gang start (the request's `retries`).
LAUNCH_RETRY_DELAY = timedelta(seconds=10)
# Tries of `train` lost to Airflow, not to training (see operators/train.py): a new try
# re-attaches to the gang. A training that failed is final and never retried.
TRAIN_RETRIES = 2
TRAIN_RETRY_DELAY = timedelta(seconds=5)
TAGS = ["tfjob"]


def build_request_params(specs: dict[str, dict[str, Any]]) -> dict[str, Param]:
    """Airflow Params from `tfjob.schema.airflow_param_specs()`: the form shows every field."""
    params = {}
    for name, spec in specs.items():
        spec = dict(spec)
        default = spec.pop("default", None)
        params[name] = Param(default, **spec)
    return params


def build_training_dag(
    dag_id: str,
    *,
    request_file: str | Path | None = None,
    schedule: str | None = None,
    params: dict[str, Param] | None = None,
    retries: int = 0,
    output: str | None = None,
    pool: str | None = None,
    description: str | None = None,
    tags: list[str] | None = None,
) -> DAG:
    """A training DAG: for a request file (`request_file`) or for trigger params (`params`)."""
    if (request_file is None) == (params is None):
        raise ValueError(f"dag {dag_id}: give exactly one of request_file and params")
    # The tenant's pool caps its concurrent jobs: the steps during which the run's objects may
    # exist use it; later steps outrank earlier ones (a started job keeps the freed slot).
    pooled: dict[str, Any] = {"weight_rule": "upstream", **({"pool": pool} if pool else {})}
    outlets: list[Any] = (
        [Asset(uri=f"{output}/latest")] if output else [AssetAlias(name=f"{dag_id}__model")]
    )
    with DAG(
        dag_id=dag_id,
        schedule=schedule,
        params=params or {},
        catchup=False,
        max_active_runs=16,
        description=description,
        tags=[*TAGS, *(tags or [])],
        render_template_as_native_obj=True,
    ) as dag:
        validated = task(task_id=VALIDATE_TASK)(steps.validate)(
            str(request_file) if request_file else None
        )
        bundle = task(task_id=FETCH_BUNDLE_TASK)(steps.fetch_bundle)()
        launch = TrainingLaunchOperator(
            task_id=LAUNCH_TASK, retries=retries, retry_delay=LAUNCH_RETRY_DELAY, **pooled
        )
        clusterspec = task(task_id=CLUSTERSPEC_TASK, **pooled)(steps.deliver_cluster_spec)()
        train = TrainingWaitOperator(
            task_id=TRAIN_TASK, retries=TRAIN_RETRIES, retry_delay=TRAIN_RETRY_DELAY, **pooled
        )
        archived = task(task_id=ARCHIVE_TASK, **pooled)(steps.archive)()
        torn_down = task(task_id=TEARDOWN_TASK, **pooled)(steps.teardown)()
        published = task(task_id=PUBLISH_TASK, outlets=outlets)(steps.publish)()

        validated >> bundle >> launch >> clusterspec >> train >> archived >> torn_down
        archived.as_teardown(setups=[bundle, launch])
        torn_down.as_teardown(setups=[bundle, launch])
        [train, archived, torn_down] >> published
    return dag


def build_request_dag(path: Path) -> DAG:
    """The DAG of one request file: `tfjob__<name>`, scheduled by the request.

    A file that does not validate still gets a DAG (unscheduled, id from the
    file name) whose validate task fails with the request's error, so one bad
    file is visible in the UI and does not hide the others.
    """
    from tfjob.request import RequestError, load_request
    from tfjob.tenants import pool_name

    try:
        request = load_request(path)
    except (RequestError, ValueError, OSError) as exc:
        return build_training_dag(
            f"{DAG_ID_PREFIX}{path.stem}",
            request_file=path,
            description=f"INVALID request file {path.name}: {exc}"[:1000],
            tags=["invalid"],
        )
    return build_training_dag(
        f"{DAG_ID_PREFIX}{request.name}",
        request_file=path,
        schedule=request.schedule,
        retries=request.retries,
        output=request.output,
        pool=pool_name(request.tenant),
        description=(
            f"{request.mode.value} training of {request.name} "
            f"(tenant {request.tenant}) from {path.name}"
        ),
        tags=[f"tenant:{request.tenant}"],
    )


def build_submit_dag() -> DAG:
    """`tfjob_submit`: every request field is a Param; Airflow checks conf before a run starts."""
    from tfjob.schema import airflow_param_specs

    return build_training_dag(
        SUBMIT_DAG_ID,
        params=build_request_params(airflow_param_specs()),
        description="Train from a request given as trigger conf (UI, REST API, tshell submit)",
    )


def list_request_files(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.iterdir() if p.suffix in (".yaml", ".yml", ".json") and p.is_file()
    )


__all__ = [
    "build_request_dag",
    "build_request_params",
    "build_submit_dag",
    "build_training_dag",
    "list_request_files",
]
