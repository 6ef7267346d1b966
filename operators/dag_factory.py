"""The one factory that builds every training DAG.

`dags/tfjob_requests.py` (one DAG per request file, `tfjob__<name>`) and
`dags/tfjob_submit.py` (one DAG per tenant, `tfjob_submit__<tenant>`, the
request given as trigger conf) both call `build_training_dag`, so every
training run has the same tasks:

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

Every DAG belongs to one tenant, fixed when it is built (the request file's
tenant, or the submit DAG's), never by what a run's conf says:
- `validate` gets the tenant and refuses a request of another tenant, or
  one outside the tenant's policy (operators/steps.py);
- only the tenant's Airflow roles (`Tenant.roles`) may see, trigger and
  manage its runs (`access_control`); an admin sees everything;
- the job steps (launch, clusterspec, train, archive, teardown: while the
  run's objects may exist) run in the tenant's pool (`tfjob-tenant-<name>`,
  created by `tshell tenants apply`), which caps its concurrent jobs, with
  weight_rule "upstream" so a freed slot goes to the furthest-along run, not
  to a new launch (docs/tenants.md); `max_active_runs` is the tenant's
  `active_runs_limit`, so waiting runs of one tenant stay bounded.
A request file that cannot be built (invalid, its tenant unknown, a `name`
other than its file's stem, or a name two files share: operators/request_files.py)
gets an INVALID DAG: no tenant, no roles, and a validate task that fails saying why.

Building a DAG does no network, Kubernetes or S3 work; reading the request
file and the tenants file (local YAML) is the only I/O.
"""

from __future__ import annotations

import warnings
from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, AssetAlias, Param, task

from operators import steps
from operators.launch import TrainingLaunchOperator
from operators.request_files import RequestSource, check_request_name
from operators.train import TrainingWaitOperator
from tfjob.jsontypes import JsonObject
from tfjob.pipeline_ids import (
    ARCHIVE_TASK,
    CLUSTERSPEC_TASK,
    FETCH_BUNDLE_TASK,
    LAUNCH_TASK,
    PUBLISH_TASK,
    TEARDOWN_TASK,
    TRAIN_TASK,
    VALIDATE_TASK,
    request_dag_id,
    submit_dag_id,
    tenant_tag,
)
from tfjob.request.model import RequestError, load_request
from tfjob.schema import airflow_param_specs
from tfjob.tenants import Tenant, TenantsConfig, resolve_tenant

# Pause before Airflow retries a failed gang start (the request's `retries`).
LAUNCH_RETRY_DELAY = timedelta(seconds=10)
# Tries of `train` lost to Airflow, not to training (see operators/train.py): a new try
# re-attaches to the gang. A training that failed is final and never retried.
TRAIN_RETRIES = 2
TRAIN_RETRY_DELAY = timedelta(seconds=5)
TAGS = ["tfjob"]
# What a tenant's roles may do with its DAGs (FAB auth manager resource names). FAB has
# no per-DAG "can_edit" on DAG runs: cancelling a run uses the tenant role's global
# "DAG Runs" edit right, which the auth manager grants only with can_edit on the DAG
# itself (tenancy/roles.py).
TENANT_DAG_PERMISSIONS: dict[str, frozenset[str]] = {
    "DAGs": frozenset({"can_read", "can_edit"}),
    "DAG Runs": frozenset({"can_read", "can_create", "can_delete"}),
}
# An INVALID DAG's runs fail at validate: one at a time is plenty.
INVALID_DAG_MAX_ACTIVE_RUNS = 1
ACCESS_CONTROL_WARNING = "The airflow.security.permissions module is deprecated"


def build_request_params(specs: dict[str, JsonObject]) -> dict[str, Param]:
    """Airflow Params from `tfjob.schema.airflow_param_specs()`: the form shows every field."""
    params = {}
    for name, spec in specs.items():
        spec = dict(spec)
        default = spec.pop("default", None)
        params[name] = Param(default, **spec)
    return params


def build_access_control(tenant: Tenant) -> dict[str, dict[str, set[str]]]:
    """The DAG permissions of each of the tenant's Airflow roles."""
    return {
        role: {resource: set(actions) for resource, actions in TENANT_DAG_PERMISSIONS.items()}
        for role in tenant.roles
    }


def build_training_dag(
    dag_id: str,
    *,
    tenant: Tenant | None,
    request_file: str | Path | None = None,
    schedule: str | None = None,
    params: dict[str, Param] | None = None,
    retries: int = 0,
    description: str | None = None,
    tags: list[str] | None = None,
) -> DAG:
    """A training DAG of `tenant` (None: an INVALID DAG), for a request file
    (`request_file`) or for trigger params (`params`)."""
    if (request_file is None) == (params is None):
        raise ValueError(f"dag {dag_id}: give exactly one of request_file and params")
    # The tenant's pool caps its concurrent jobs: the steps during which the run's objects may
    # exist use it; later steps outrank earlier ones (a started job keeps the freed slot).
    pooled: JsonObject = {"weight_rule": "upstream"}
    tenancy: JsonObject = {"max_active_runs": INVALID_DAG_MAX_ACTIVE_RUNS}
    tenant_tags: list[str] = []
    if tenant is not None:
        pooled["pool"] = tenant.pool
        tenancy = {
            "max_active_runs": tenant.active_runs_limit,
            "access_control": build_access_control(tenant),
        }
        tenant_tags = [tenant_tag(tenant.name)]
    # The output is known only at run time (conf) or may be shared: publish names the asset
    # `<output>/latest` through this alias, and only when `latest` moved (operators/latest.py).
    outlets = [AssetAlias(name=f"{dag_id}__model")]
    with warnings.catch_warnings():
        # access_control is how the FAB auth manager grants per-DAG rights in Airflow 3.3,
        # yet the SDK warns about any use of it (RemovedInAirflow4Warning), once per DAG.
        warnings.filterwarnings("ignore", message=ACCESS_CONTROL_WARNING)
        dag = DAG(
            dag_id=dag_id,
            schedule=schedule,
            params=params or {},
            catchup=False,
            description=description,
            tags=[*TAGS, *tenant_tags, *(tags or [])],
            render_template_as_native_obj=True,
            **tenancy,
        )
    with dag:
        validated = task(task_id=VALIDATE_TASK)(steps.validate)(
            str(request_file) if request_file else None, tenant.name if tenant else None
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


def build_request_dag(path: Path, config: TenantsConfig) -> DAG:
    """The DAG of one request file: `tfjob__<name>` of the file's tenant, scheduled by the request.

    A file that does not validate, declares a name other than its stem
    (operators/request_files.py), or names a tenant `config` does not know,
    still gets a DAG (see `build_invalid_request_dag`).
    """
    try:
        request = load_request(path)
        check_request_name(path, request.name)
        tenant = resolve_tenant(config, request.tenant)
    except (RequestError, ValueError, OSError) as exc:  # UnknownTenantError is a ValueError
        return build_invalid_request_dag(path, str(exc))
    return build_training_dag(
        request_dag_id(request.name),
        tenant=tenant,
        request_file=path,
        schedule=request.schedule,
        retries=request.retries,
        description=(
            f"{request.mode.value} training of {request.name} "
            f"(tenant {request.tenant}) from {path.name}"
        ),
    )


def build_source_dag(source: RequestSource, config: TenantsConfig | None, problem: str) -> DAG:
    """The DAG of a request source: INVALID when several files share its name, or when
    `config` is None (the tenants file could not be read: `problem` says why)."""
    if source.conflict:
        return build_invalid_request_dag(source.path, source.conflict)
    if config is None:
        return build_invalid_request_dag(source.path, problem)
    return build_request_dag(source.path, config)


def build_invalid_request_dag(path: Path, problem: str) -> DAG:
    """An unscheduled DAG named after the file, of no tenant, whose validate fails with the
    request's error: one bad file is visible in the UI and does not hide the others."""
    return build_training_dag(
        request_dag_id(path.stem),
        tenant=None,
        request_file=path,
        description=f"INVALID request file {path.name}: {problem}"[:1000],
        tags=["invalid"],
    )


def build_submit_dag(tenant: Tenant) -> DAG:
    """`tfjob_submit__<tenant>`: every request field is a Param; Airflow checks conf before a
    run starts, and the `tenant` Param allows only this DAG's tenant."""
    specs = airflow_param_specs()
    specs["tenant"] = {
        **specs["tenant"],
        "type": "string",
        "default": tenant.name,
        "enum": [tenant.name],
        "description": f"Fixed by this DAG: it runs only jobs of tenant {tenant.name}.",
    }
    return build_training_dag(
        submit_dag_id(tenant.name),
        tenant=tenant,
        params=build_request_params(specs),
        description=(
            f"Train a job of tenant {tenant.name} from a request given as trigger conf "
            "(UI, REST API, tshell submit)"
        ),
    )


__all__ = [
    "build_access_control",
    "build_invalid_request_dag",
    "build_request_dag",
    "build_request_params",
    "build_source_dag",
    "build_submit_dag",
    "build_training_dag",
]
