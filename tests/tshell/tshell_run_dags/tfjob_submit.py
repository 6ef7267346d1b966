"""Stand-ins for the pipeline's `tfjob_submit__<tenant>` DAGs, for testing tshell's REST mechanics.

One DAG per tenant of TENANTS, named by `tfjob.pipeline_ids.submit_dag_id` as the
pipeline's are. Each has the pipeline's task names and shapes and nothing of
its Kubernetes work: `validate` returns the run description as
operators/runinfo.py's `describe_run` shapes it (namespace, run key, run
prefix, the tenant's AWS connection), `launch` returns replica endpoints,
`train` prints lines prefixed with `[<role>-<index>]` for `env.TRAIN_SECONDS`
seconds (a curve point `[worker-0] TFJOB_METRIC {"step", "loss"}` every
0.5 s; then it fails with `env.TRAIN_FAIL` in its message, when set),
`archive` uploads a log per replica, run.json and a model to
`<output>/runs/<dag_id>/<run_id>/` in S3, and the Airflow teardown task
`remove_pods` writes `<output>/runs/<dag_id>/<run_id>/teardown.done`. Every
S3 call goes through the tenant's connection (`aws_conn_id` in the tenants
file, $TFJOB_TENANTS_FILE), as the pipeline's do.

Like the pipeline's, each DAG's `tenant` Param allows only its tenant, and
only the tenant's roles may read and run it (`access_control`). Its `name`
Param refuses names longer than NAME_LIMIT, so the server's own validation
(HTTP 400) can be provoked with a request that is valid locally.
"""

from __future__ import annotations

import datetime
import time

from airflow.sdk import DAG, Param, task, teardown

from tfjob import naming, pipeline_ids
from tfjob.tenants import load_tenants

TENANTS = ("team-a", "team-b")
ROLES = ("worker", "ps")
# Shorter than the request model's 40 characters: the server refuses what tshell lets through.
NAME_LIMIT = 12
# What a tenant's roles may do with its DAGs (operators/dag_factory.py TENANT_DAG_PERMISSIONS).
TENANT_DAG_PERMISSIONS = {
    "DAGs": {"can_read", "can_edit"},
    "DAG Runs": {"can_read", "can_create", "can_delete"},
}


def run_prefix(context, aws_conn_id: str):
    """An S3 client of the tenant's connection, the bucket and this run's key prefix."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    from tfjob.runlayout import RunLayout

    uri = RunLayout.for_run(
        context["dag_run"].conf["output"], context["dag"].dag_id, context["run_id"]
    ).uri
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    return S3Hook(aws_conn_id=aws_conn_id).get_conn(), bucket, prefix


def build_submit_dag(tenant: str, aws_conn_id: str, roles: tuple[str, ...]) -> DAG:
    with DAG(
        pipeline_ids.submit_dag_id(tenant),
        schedule=None,
        start_date=datetime.datetime(2024, 1, 1),
        catchup=False,
        params={
            "tenant": Param(tenant, type="string", enum=[tenant]),
            "name": Param("digits", type="string", maxLength=NAME_LIMIT),
        },
        access_control={role: TENANT_DAG_PERMISSIONS for role in roles},
        tags=["tfjob", pipeline_ids.tenant_tag(tenant)],  # the tab's routes read the tenant here
    ) as dag:

        @task
        def validate(**context):
            # Shaped as the pipeline's validate pushes it (operators/runinfo.py describe_run).
            from tfjob.runlayout import RunLayout

            conf = context["dag_run"].conf
            dag_id, run_id = context["dag"].dag_id, context["run_id"]
            return {
                "request": conf,
                "run_id": run_id,
                "dag_id": dag_id,
                "namespace": naming.tenant_namespace(conf["tenant"]),
                "run_key": naming.run_key(conf["name"], dag_id, run_id),
                "run_prefix": RunLayout.for_run(conf["output"], dag_id, run_id).uri,
                "aws_conn_id": aws_conn_id,
            }

        @task
        def launch():
            return {"worker": ["127.0.0.1:2222"], "ps": ["127.0.0.1:2223"]}

        @task
        def train(**context):
            seconds = float(context["dag_run"].conf.get("env", {}).get("TRAIN_SECONDS", "0"))
            for step in range(3):
                for role in ROLES:
                    print(f"[{role}-0] step {step}", flush=True)
            deadline = time.monotonic() + seconds
            step = 0
            while time.monotonic() < deadline:
                step += 1
                print("[worker-0] still training", flush=True)
                print(
                    f'[worker-0] TFJOB_METRIC {{"step": {step}, "loss": {1 / step:.3f}}}',
                    flush=True,
                )
                time.sleep(0.5)
            failing = context["dag_run"].conf.get("env", {}).get("TRAIN_FAIL")
            if failing:  # as the pipeline's train fails: one message naming the replica
                raise RuntimeError(
                    f"training failed: {failing}\nlast log lines:\n  [worker-0] step 2"
                )
            print("[worker-0] training done", flush=True)

        @task(trigger_rule="all_done")
        def archive(**context):
            s3, bucket, base = run_prefix(context, aws_conn_id)
            for role in ROLES:
                s3.put_object(
                    Bucket=bucket,
                    Key=f"{base}/logs/{role}-0.log",
                    Body=f"{role}-0 archived line 1\n{role}-0 archived line 2\n".encode(),
                )
            s3.put_object(Bucket=bucket, Key=f"{base}/run.json", Body=b'{"state": "archived"}')
            s3.put_object(Bucket=bucket, Key=f"{base}/model/saved_model.pb", Body=b"model-bytes")
            s3.put_object(Bucket=bucket, Key=f"{base}/model/variables/variables.index", Body=b"idx")
            # Bigger than one chunk of the files API (1 MiB), bytes that are not text.
            weights = bytes(range(256)) * (3 * 4096 + 7)
            s3.put_object(
                Bucket=bucket,
                Key=f"{base}/model/variables/variables.data-00000-of-00001",
                Body=weights,
            )

        @teardown
        def remove_pods(**context):
            s3, bucket, base = run_prefix(context, aws_conn_id)
            s3.put_object(Bucket=bucket, Key=f"{base}/teardown.done", Body=b"")

        launched = launch()
        cleanup = remove_pods()
        validate() >> launched >> train() >> archive() >> cleanup
        launched >> cleanup
    return dag


def build_submit_dags() -> dict[str, DAG]:
    tenants = load_tenants()
    built = {}
    for name in TENANTS:
        tenant = tenants.find(name)
        assert tenant is not None, f"tenant {name} is not in the tenants file"
        built[pipeline_ids.submit_dag_id(name)] = build_submit_dag(
            name, tenant.s3_conn_id, tenant.roles
        )
    return built


globals().update(build_submit_dags())
