"""The Python tasks: validate, fetch_bundle, clusterspec, archive, teardown, publish.

Each is a thin callable: it reads the run from XCom (`operators.runinfo`),
calls the module that does the work and pushes what later tasks and the UI
need. Heavy imports (boto3, the Kubernetes client) happen inside the
functions, so parsing a DAG file stays fast.
"""

from __future__ import annotations

import json
import time
from typing import Any

from airflow.sdk import get_current_context

from operators.runinfo import RunInfo, describe_run, pull_run
from operators.settings import (
    ARCHIVE_TASK,
    AWS_CONN_ID,
    CLUSTERSPEC_TASK,
    FETCH_BUNDLE_TASK,
    KUBERNETES_CONN_ID,
    LAUNCH_TASK,
    MAX_BUNDLE_TOTAL_SIZE,
    TEARDOWN_GRACE_SECONDS,
    TEARDOWN_TIMEOUT_SECONDS,
    TRAIN_TASK,
    VALIDATE_TASK,
)


def _s3() -> Any:
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    return S3Hook(aws_conn_id=AWS_CONN_ID).get_conn()


def _kube() -> Any:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    return KubernetesHook(conn_id=KUBERNETES_CONN_ID).core_v1_client


def _log() -> Any:
    import logging

    return logging.getLogger("airflow.task")


def conf_to_request_data(params: dict[str, Any]) -> dict[str, Any]:
    """The request fields of a trigger's params; unset optional fields (None) are left out."""
    return {key: value for key, value in params.items() if value is not None}


def validate(request_file: str | None = None) -> dict[str, Any]:
    """Load and check the request (the DAG's file, else the trigger's params) and name the run."""
    from airflow.sdk.exceptions import AirflowFailException

    from tfjob.request import RequestError, load_request

    context = get_current_context()
    try:
        if request_file:
            request = load_request(request_file)
        else:
            request = load_request(conf_to_request_data(dict(context["params"])))
    except (RequestError, ValueError, OSError) as exc:
        where = f"request file {request_file}" if request_file else "trigger conf"
        raise AirflowFailException(f"{where}: {exc}") from None
    admit_tenant(request)
    described = describe_run(request, context["run_id"], context["dag"].dag_id)
    _log().info(
        "request %s of tenant %s: %s, namespace %s, run key %s",
        request.name,
        request.tenant,
        request.mode.value,
        described["namespace"],
        described["run_key"],
    )
    return described


def admit_tenant(request: Any) -> None:
    """The tenant must be known (tenants file) and the whole gang must fit its remaining quota."""
    from airflow.sdk.exceptions import AirflowFailException

    from operators.tenancy import TenancyRefusal, admit_request

    try:
        tenant, check = admit_request(_kube(), request)
    except TenancyRefusal as exc:
        raise AirflowFailException(str(exc)) from None
    _log().info("tenant %s admitted: %s", tenant.name, getattr(check, "message", "fits"))


def fetch_bundle() -> dict[str, Any]:
    """Clear an earlier try's outputs, check the bundle and snapshot it under the run's prefix.

    A cleared DAG run keeps its run_id and re-runs this task: the model and
    metrics an earlier try left under the run's prefix go first, so nothing of
    that try can be archived or published as this one's.
    """
    from airflow.sdk.exceptions import AirflowFailException

    from operators.bundlecheck import BundleMissing, snapshot_bundle
    from operators.runoutputs import clear_run_outputs
    from runtime.bundle import BundleError

    run = pull_run(get_current_context())
    s3 = _s3()
    clear_run_outputs(s3, run.run_prefix)
    try:
        identity = snapshot_bundle(s3, run.request.bundle, run.run_prefix, MAX_BUNDLE_TOTAL_SIZE)
    except (BundleMissing, BundleError) as exc:
        raise AirflowFailException(str(exc)) from None
    _log().info(
        "bundle %s: %s bytes, sha256 %s, snapshot %s",
        identity["source"],
        identity["size"],
        identity["sha256"],
        identity["snapshot"],
    )
    return identity


def deliver_cluster_spec() -> dict[str, Any] | None:
    """Build every replica's cluster.json from the launch endpoints and exec it into the pod.

    Single mode: the replica does not wait for a ClusterSpec, so this is a
    no-op that succeeds (it is not skipped, which would skip train too).
    """
    from operators.delivery import deliver_cluster_files
    from tfjob import naming
    from tfjob.clusterspec import build_cluster_files, build_cluster_spec, endpoints_from_mapping

    context = get_current_context()
    run = pull_run(context)
    if not run.request.is_distributed:
        _log().info("single mode: no ClusterSpec to deliver")
        return None
    mapping = context["ti"].xcom_pull(task_ids=LAUNCH_TASK)
    endpoints = endpoints_from_mapping(mapping)
    cluster = build_cluster_spec(run.request, endpoints)
    files = build_cluster_files(run.request, endpoints)
    contents = {
        naming.pod_name(run.run_key, role, index): json.dumps(content, sort_keys=True)
        for (role, index), content in files.items()
    }
    deliver_cluster_files(_kube(), run.namespace, contents)  # in parallel
    _log().info("delivered cluster.json to %d pods: %s", len(contents), ", ".join(contents))
    return {"cluster": cluster}


def describe_launch(failure: dict[str, Any] | None, ready_at: float | None) -> dict[str, Any]:
    """run.json's `launch`: ready (with the time), failed (with why), or neither (killed)."""
    if failure:
        return {"state": "failed", **failure}
    if ready_at is not None:
        return {"state": "ready", "ready_at": ready_at}
    return {"state": "not ready", "message": "launch did not finish (killed or not run)"}


def archive() -> dict[str, Any]:
    """Logs, model check (recovered from the owner pod if its upload failed), run.json to S3.

    Runs whenever fetch_bundle succeeded; S3 calls ride out a short outage
    (operators.s3retry), as the pods are gone once teardown ran.

    A teardown task of fetch_bundle and launch: it runs after a failed launch
    too, so the logs of the replicas that did start are kept.
    """
    from operators.archive import archive_run
    from operators.settings import LAUNCH_FAILURE_KEY

    context = get_current_context()
    run = pull_run(context)
    ti = context["ti"]
    dag_run = context["dag_run"]
    clusterspec = ti.xcom_pull(task_ids=CLUSTERSPEC_TASK)
    ready_at = ti.xcom_pull(task_ids=LAUNCH_TASK, key="ready_at")
    timings = {
        "run_started_at": dag_run.start_date.isoformat() if dag_run.start_date else None,
        "launch_ready_at": ready_at,
        "train_finished_at": ti.xcom_pull(task_ids=TRAIN_TASK, key="finished_at"),
    }
    launch = describe_launch(ti.xcom_pull(task_ids=LAUNCH_TASK, key=LAUNCH_FAILURE_KEY), ready_at)
    manifest = archive_run(
        _kube(),
        _s3(),
        run,
        bundle=ti.xcom_pull(task_ids=FETCH_BUNDLE_TASK),
        cluster_spec=(clusterspec or {}).get("cluster"),
        train_replicas=ti.xcom_pull(task_ids=TRAIN_TASK, key="replicas"),
        metrics=ti.xcom_pull(task_ids=TRAIN_TASK, key="metrics"),
        timings=timings,
        launch=launch,
    )
    _log().info(
        "archived run %s: %d log(s), model %s objects, run.json at %s/run.json",
        run.run_key,
        len(manifest["logs"]),
        manifest["model"]["objects"],
        run.run_prefix,
    )
    return {
        "model": manifest["model"],
        "logs": manifest["logs"],
        "run_json": f"{run.run_prefix}/run.json",
    }


def teardown() -> list[str]:
    """Delete every object of the run by label, wait until none is left, say what went."""
    from airflow.sdk.exceptions import AirflowException

    from operators import kubeobjects

    context = get_current_context()
    described = context["ti"].xcom_pull(task_ids=VALIDATE_TASK)
    if not described:
        _log().info("validate did not succeed: no run objects can exist")
        return []
    run: RunInfo = pull_run(context)
    api = _kube()
    deleted = kubeobjects.delete_run_objects(
        api, run.namespace, run.selector, grace_period_seconds=TEARDOWN_GRACE_SECONDS
    )
    started = time.monotonic()
    left = kubeobjects.await_run_objects_gone(
        api, run.namespace, run.selector, TEARDOWN_TIMEOUT_SECONDS
    )
    _log().info(
        "teardown of run %s in %s: deleted %s; all gone after %.1fs",
        run.run_key,
        run.namespace,
        ", ".join(deleted) or "nothing",
        time.monotonic() - started,
    )
    if left:
        raise AirflowException(
            f"teardown of run {run.run_key}: still present after "
            f"{TEARDOWN_TIMEOUT_SECONDS}s: {', '.join(left)}"
        )
    return deleted


def publish() -> dict[str, Any]:
    """On success: `<output>/latest` and an Asset event for the model."""
    from airflow.sdk import Asset, AssetAlias
    from airflow.sdk.exceptions import AirflowFailException

    from operators.archive import put_text

    context = get_current_context()
    run = pull_run(context)
    archived = context["ti"].xcom_pull(task_ids=ARCHIVE_TASK) or {}
    model = archived.get("model") or {}
    if not model.get("objects"):
        raise AirflowFailException(
            f"nothing to publish: no model under {run.run_prefix}/model/ "
            "(the program must write its model to $MODEL_DIR)"
        )
    failed_recovery = (model.get("recovery") or {}).get("error")
    if failed_recovery:
        raise AirflowFailException(
            f"not publishing {model.get('uri')}: copying the model out of pod "
            f"{model['recovery'].get('pod')} failed, so it may be incomplete: {failed_recovery}"
        )
    pointer = {
        "run_id": run.run_id,
        "dag_id": run.dag_id,
        "model": model["uri"],
        "run": f"{run.run_prefix}/",
        "metrics": context["ti"].xcom_pull(task_ids=TRAIN_TASK, key="metrics"),
        "published_at": time.time(),
    }
    latest = f"{run.request.output}/latest"
    put_text(_s3(), latest, json.dumps(pointer, indent=2, sort_keys=True), "application/json")
    extra = {"run_id": run.run_id, "model": model["uri"]}
    for outlet in context["task"].outlets:
        if isinstance(outlet, AssetAlias):
            context["outlet_events"][outlet].add(Asset(uri=latest), extra=extra)
        elif isinstance(outlet, Asset):
            context["outlet_events"][outlet].extra = extra
    _log().info("published %s -> %s", latest, model["uri"])
    return pointer
