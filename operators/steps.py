"""The Python tasks: validate, fetch_bundle, clusterspec, archive, teardown, publish.

Each is a thin callable: it reads the run from XCom (`operators.runinfo`),
calls the module that does the work and pushes what later tasks and the UI
need. Heavy imports (boto3, the Kubernetes client) happen inside the
functions, so parsing a DAG file stays fast.

The tenant of a run is the DAG's, fixed when the DAG was built (a tenant's
submit DAG, or the request file's DAG): `validate` holds the request to it
and to its policy (`tfjob.tenants.policy`) before any S3 or Kubernetes call,
and every S3 call of the run then uses that tenant's AWS connection.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias, get_current_context
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from operators.archive import archive_run
from operators.bundlecheck import BundleMissing, snapshot_bundle
from operators.delivery import deliver_first_cluster_spec
from operators.grants import require_presign_connection
from operators.latest import build_pointer, choose_run_order, publish_latest
from operators.request_files import RequestNameError, check_request_name
from operators.runinfo import RunInfo, describe_run, pull_run, read_run
from operators.runobjects import RunObjects
from operators.runoutputs import clear_run_outputs
from operators.settings import (
    KUBERNETES_CONN_ID,
    MAX_BUNDLE_TOTAL_SIZE,
    TEARDOWN_GRACE_SECONDS,
    TEARDOWN_TIMEOUT_SECONDS,
)
from runtime.bundle import BundleError
from tenancy import admission
from tenancy.admission import TenancyRefusal
from tfjob.jsontypes import JsonObject
from tfjob.pipeline_ids import (
    ARCHIVE_TASK,
    ATTEMPTS_KEY,
    CLUSTERSPEC_TASK,
    FETCH_BUNDLE_TASK,
    FINISHED_AT_KEY,
    LAUNCH_FAILURE_KEY,
    LAUNCH_TASK,
    METRICS_KEY,
    READY_AT_KEY,
    RESTARTED_CLUSTER_KEY,
    TRAIN_TASK,
    VALIDATE_TASK,
    WARM_START_KEY,
    request_dag_id,
    tenant_of_tags,
)
from tfjob.records.outcomes import (
    ArchivedRun,
    LaunchFailure,
    LaunchOutcome,
    ModelSummary,
    PublishedLatest,
)
from tfjob.records.run import GangEndpoints
from tfjob.request.model import RequestError, load_request
from tfjob.runlayout import locate_output_latest
from tfjob.tenants import TenantsFileError, UnknownTenantError, load_tenants, resolve_tenant
from tfjob.tenants.policy import TenantPolicyError, check_request_policy

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from tfjob.request.model import TrainingRequest
    from tfjob.tenants import Tenant, TenantsConfig


def _s3(run: RunInfo) -> Any:
    """Airflow's S3 client with the run's own AWS connection (its tenant's)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    return S3Hook(aws_conn_id=run.aws_conn_id).get_conn()


def _kube() -> Any:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    return KubernetesHook(conn_id=KUBERNETES_CONN_ID).core_v1_client


def _log() -> Any:
    return logging.getLogger("airflow.task")


def conf_to_request_data(params: JsonObject) -> JsonObject:
    """The request fields of a trigger's params; unset optional fields (None) are left out."""
    return {key: value for key, value in params.items() if value is not None}


def validate(request_file: str | None = None, tenant: str | None = None) -> JsonObject:
    """Load the request (the DAG's file, else the trigger's params), hold it to the DAG's
    tenant and that tenant's policy, check its quota, and name the run.

    `tenant` is the DAG's, fixed when it was built; None only for the INVALID DAG of a
    request file that could not be built (this then fails with the file's error).
    """
    context = get_current_context()
    dag_id = context["dag"].dag_id
    try:
        if request_file:
            request = load_request(request_file)
        else:
            request = load_request(conf_to_request_data(dict(context["params"])))
    except (RequestError, ValueError, OSError) as exc:
        where = f"request file {request_file}" if request_file else "trigger conf"
        raise AirflowFailException(f"{where}: {exc}") from None
    check_request_source(request, request_file, dag_id)
    owner, config = hold_to_dag_tenant(request, tenant, dag_id)
    check_dag_tags(context["dag"], owner.name)
    admit_tenant(request, config)
    require_presign_connection(owner.pods_conn_id, f"tenant {owner.name!r}")
    described = describe_run(request, context["run_id"], dag_id, owner.s3_conn_id)
    run = read_run(described)  # what every later task reads back
    _log().info(
        "request %s of tenant %s: %s, namespace %s, run key %s, S3 as connection %s",
        request.name,
        request.tenant,
        request.mode.value,
        run.namespace,
        run.run_key,
        run.aws_conn_id,
    )
    return described


def check_request_source(request: TrainingRequest, request_file: str | None, dag_id: str) -> None:
    """A request file's request is named after its file, and its DAG after it.

    The DAG processor and the task runner pick a DAG's file by that rule
    (operators/request_files.py); this holds a run to it too, so a run never
    records a request that is not its DAG's.
    """
    if not request_file:
        return
    try:
        check_request_name(Path(request_file), request.name)
    except RequestNameError as exc:
        raise AirflowFailException(f"request file {Path(request_file).name}: {exc}") from None
    if dag_id != request_dag_id(request.name):
        raise AirflowFailException(
            f"request file {Path(request_file).name}: it makes DAG "
            f"{request_dag_id(request.name)!r}; this run's DAG is {dag_id!r}"
        )


def check_dag_tags(dag: DAG, tenant: str) -> None:
    """The DAG's `tenant:` tag (what the UI and the TFJob tab hold runs to) names `tenant`."""
    tagged = tenant_of_tags(dag.tags or ())
    if tagged != tenant:
        raise AirflowFailException(
            f"DAG {dag.dag_id}: its tags name tenant {tagged!r}, its validate tenant {tenant!r}; "
            "a run is recorded only for the tenant its DAG belongs to"
        )


def hold_to_dag_tenant(
    request: TrainingRequest, tenant: str | None, dag_id: str
) -> tuple[Tenant, TenantsConfig]:
    """(Tenant, TenantsConfig) of the run: the DAG's tenant, whose policy the request meets.

    Reads only the local tenants file: a request that names another tenant, or
    a bundle, output, image, node selector or toleration its tenant does not
    allow, fails here, before any S3 or Kubernetes call.
    """
    try:
        config = load_tenants()
        owner = resolve_tenant(config, tenant or request.tenant)
    except (TenantsFileError, UnknownTenantError) as exc:
        raise AirflowFailException(str(exc)) from None
    if tenant is None:
        raise AirflowFailException(
            f"{dag_id}: built from a request file that was invalid when Airflow parsed it; "
            "it runs once Airflow has parsed the corrected file again"
        )
    try:
        if request.tenant != owner.name:
            only = f"this DAG ({dag_id}) runs only tenant {owner.name}"
            raise TenantPolicyError("request.tenant", request.tenant, only)
        check_request_policy(request, owner)
    except TenantPolicyError as exc:
        raise AirflowFailException(str(exc)) from None
    return owner, config


def admit_tenant(request: TrainingRequest, config: TenantsConfig) -> None:
    """The whole gang must fit the remaining quota of its tenant (read from the cluster)."""
    try:
        tenant, check = admission.admit_request(_kube(), request, config)
    except TenancyRefusal as exc:
        raise AirflowFailException(str(exc)) from None
    _log().info("tenant %s admitted: %s", tenant.name, getattr(check, "message", "fits"))


def fetch_bundle() -> JsonObject | None:
    """Clear an earlier try's outputs, check the bundle and snapshot it under the run's prefix.

    A cleared DAG run keeps its run_id and re-runs this task: the model and
    metrics an earlier try left under the run's prefix go first, so nothing of
    that try can be archived or published as this one's. A request without a
    bundle (the program is in its image) snapshots nothing: None, as run.json's
    `bundle` says.
    """
    run = pull_run(get_current_context())
    s3 = _s3(run)
    clear_run_outputs(s3, run.layout, checkpoints=True)
    if run.request.bundle is None:
        _log().info("no bundle: the program is in the image %s; nothing fetched", run.request.image)
        return None
    try:
        identity = snapshot_bundle(s3, run.request.bundle, run.layout, MAX_BUNDLE_TOTAL_SIZE)
    except (BundleMissing, BundleError) as exc:
        raise AirflowFailException(str(exc)) from None
    _log().info(
        "bundle %s: %s bytes, sha256 %s, snapshot %s",
        identity.source,
        identity.size,
        identity.sha256,
        identity.snapshot,
    )
    return identity.to_payload()


def deliver_cluster_spec() -> JsonObject | None:
    """Build every replica's cluster.json from the launch endpoints and exec it into the pod.

    Single mode: the replica does not wait for a ClusterSpec, so this is a
    no-op that succeeds (it is not skipped, which would skip train too).
    """
    context = get_current_context()
    run = pull_run(context)
    if not run.request.is_distributed:
        _log().info("single mode: no ClusterSpec to deliver")
        return None
    endpoints = GangEndpoints.from_payload(context["ti"].xcom_pull(task_ids=LAUNCH_TASK))
    cluster = deliver_first_cluster_spec(_kube(), run, endpoints)
    return {"cluster": cluster}


def archive() -> JsonObject:
    """Logs, model check (recovered from the owner pod if its upload failed), run.json to S3.

    Runs whenever fetch_bundle succeeded; S3 calls ride out a short outage
    (operators.s3retry), as the pods are gone once teardown ran.

    A teardown task of fetch_bundle and launch: it runs after a failed launch
    too, so the logs of the replicas that did start are kept.
    """
    context = get_current_context()
    run = pull_run(context)
    ti = context["ti"]
    dag_run = context["dag_run"]
    # A restarted gang's ClusterSpec (train's) replaces the first gang's (clusterspec's).
    restarted_cluster = ti.xcom_pull(task_ids=TRAIN_TASK, key=RESTARTED_CLUSTER_KEY)
    clusterspec = ti.xcom_pull(task_ids=CLUSTERSPEC_TASK)
    ready_at = ti.xcom_pull(task_ids=LAUNCH_TASK, key=READY_AT_KEY)
    timings = {
        "run_started_at": dag_run.start_date.isoformat() if dag_run.start_date else None,
        "launch_ready_at": ready_at,
        "train_finished_at": ti.xcom_pull(task_ids=TRAIN_TASK, key=FINISHED_AT_KEY),
    }
    failure = ti.xcom_pull(task_ids=LAUNCH_TASK, key=LAUNCH_FAILURE_KEY)
    launch = LaunchOutcome.judge(
        LaunchFailure.from_payload(failure) if failure else None, ready_at
    ).to_payload()
    manifest = archive_run(
        _kube(),
        _s3(run),
        run,
        bundle=ti.xcom_pull(task_ids=FETCH_BUNDLE_TASK),
        cluster_spec=restarted_cluster or (clusterspec or {}).get("cluster"),
        train_replicas=ti.xcom_pull(task_ids=TRAIN_TASK, key="replicas"),
        metrics=ti.xcom_pull(task_ids=TRAIN_TASK, key=METRICS_KEY),
        timings=timings,
        launch=launch,
        attempts=(
            ti.xcom_pull(task_ids=TRAIN_TASK, key=ATTEMPTS_KEY)
            or ti.xcom_pull(task_ids=LAUNCH_TASK, key=ATTEMPTS_KEY)
        ),
        warm_start=ti.xcom_pull(task_ids=LAUNCH_TASK, key=WARM_START_KEY),
    )
    _log().info(
        "archived run %s: %d log(s), model %s objects, run manifest at %s",
        run.run_key,
        len(manifest["logs"]),
        manifest["model"]["objects"],
        run.layout.manifest,
    )
    return ArchivedRun(
        model=ModelSummary.from_payload(manifest["model"]),
        logs=tuple(manifest["logs"]),
        run_json=run.layout.manifest.uri,
    ).to_payload()


def teardown() -> list[str]:
    """Delete every object of the run by label, wait until none is left, say what went."""
    context = get_current_context()
    described = context["ti"].xcom_pull(task_ids=VALIDATE_TASK)
    if not described:
        _log().info("validate did not succeed: no run objects can exist")
        return []
    run: RunInfo = pull_run(context)
    removal = RunObjects.of(_kube(), run).remove(
        _log(), grace_seconds=TEARDOWN_GRACE_SECONDS, timeout=TEARDOWN_TIMEOUT_SECONDS
    )
    _log().info(
        "teardown of run %s in %s: deleted %s; all gone after %.1fs",
        run.run_key,
        run.namespace,
        ", ".join(removal.deleted) or "nothing",
        removal.waited_seconds,
    )
    if removal.left:
        raise AirflowException(
            f"teardown of run {run.run_key}: still present after "
            f"{TEARDOWN_TIMEOUT_SECONDS}s: {', '.join(removal.left)}"
        )
    return removal.deleted


def publish() -> JsonObject:
    """On success: move `<output>/latest` forward to this run's model (operators.latest)
    and, only when it moved, emit the Asset event of `<output>/latest`.

    A newer run (by run_after) already in `latest` keeps it: this run's model
    stays under its run prefix, the task succeeds and says so, and no Asset
    event fires (consumers of the asset would otherwise retrain on, or deploy,
    an older model).
    """
    context = get_current_context()
    run = pull_run(context)
    archived = context["ti"].xcom_pull(task_ids=ARCHIVE_TASK)
    model = ArchivedRun.from_payload(archived).model if archived else None
    if model is None or not model.objects:
        raise AirflowFailException(
            f"nothing to publish: no model under {run.layout.model} "
            "(the program must write its model to $MODEL_DIR)"
        )
    if model.recovery is not None and model.recovery.error:
        raise AirflowFailException(
            f"not publishing {model.uri}: copying the model out of pod "
            f"{model.recovery.pod} failed, so it may be incomplete: {model.recovery.error}"
        )
    run_after, ordered_by = choose_run_order(context["dag_run"])
    pointer = build_pointer(
        dag_id=run.dag_id,
        run_id=run.run_id,
        run_key=run.run_key,
        layout=run.layout,
        model=model.uri,
        metrics=context["ti"].xcom_pull(task_ids=TRAIN_TASK, key=METRICS_KEY),
        run_after=run_after,
        ordered_by=ordered_by,
        published_at=time.time(),
    )
    latest_path = locate_output_latest(run.request.output)
    latest = latest_path.uri
    outcome = publish_latest(_s3(run), latest_path, pointer)
    if outcome.moved:
        extra = {"dag_id": run.dag_id, "run_id": run.run_id, "model": model.uri}
        for outlet in context["task"].outlets:
            if isinstance(outlet, AssetAlias):
                context["outlet_events"][outlet].add(Asset(uri=latest), extra=extra)
        _log().info("published %s -> %s (%s)", latest, model.uri, outcome.reason)
    else:
        _log().info(
            "%s left as it is, no Asset event: %s; this run's model stays at %s",
            latest,
            outcome.reason,
            model.uri,
        )
    return PublishedLatest(
        latest=latest,
        moved=outcome.moved,
        reason=outcome.reason,
        pointer=pointer,
        current=None if outcome.moved else outcome.current,
    ).to_payload()
