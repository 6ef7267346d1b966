"""Stand-ins for the pipeline's `tfjob_submit__<tenant>` DAGs, for testing tshell's REST mechanics.

One DAG per tenant of TENANTS, named by `tfjob.naming.submit_dag_id` as the
pipeline's are. Each has the pipeline's task names and shapes and nothing of
its Kubernetes work: `validate` returns the run description (namespace, run
key), `launch` returns replica endpoints, `train` prints lines prefixed with
`[<role>-<index>]` for `env.TRAIN_SECONDS` seconds, `archive` uploads a log
and a model file to `<output>/runs/<dag_id>/<run_id>/` in S3 (endpoint from
AWS_ENDPOINT_URL), and the Airflow teardown task `remove_pods` writes
`<output>/runs/<dag_id>/<run_id>/teardown.done`.

Like the pipeline's, each DAG's `tenant` Param allows only its tenant. Its
`name` Param refuses names longer than NAME_LIMIT, so the server's own
validation (HTTP 400) can be provoked with a request that is valid locally.
"""

from __future__ import annotations

import datetime
import time

from airflow.sdk import DAG, Param, task, teardown

from tfjob import naming

TENANTS = ("team-a", "team-b")
ROLES = ("worker", "ps")
# Shorter than the request model's 40 characters: the server refuses what tshell lets through.
NAME_LIMIT = 12


def run_prefix(context):
    """An S3 client, the bucket and `<output prefix>/runs/<dag_id>/<run_id>` of this run."""
    import boto3

    bucket, _, prefix = context["dag_run"].conf["output"][len("s3://") :].partition("/")
    parts = (prefix.strip("/"), "runs", context["dag"].dag_id, context["run_id"])
    return boto3.client("s3"), bucket, "/".join(p for p in parts if p)


def build_submit_dag(tenant: str) -> DAG:
    with DAG(
        naming.submit_dag_id(tenant),
        schedule=None,
        start_date=datetime.datetime(2024, 1, 1),
        catchup=False,
        params={
            "tenant": Param(tenant, type="string", enum=[tenant]),
            "name": Param("digits", type="string", maxLength=NAME_LIMIT),
        },
    ) as dag:

        @task
        def validate(**context):
            # The same description the pipeline's validate pushes (operators/runinfo.py).
            conf = context["dag_run"].conf
            return {
                "request": conf,
                "run_id": context["run_id"],
                "dag_id": context["dag"].dag_id,
                "namespace": naming.tenant_namespace(conf["tenant"]),
                "run_key": naming.run_key(conf["name"], context["dag"].dag_id, context["run_id"]),
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
            while time.monotonic() < deadline:
                print("[worker-0] still training", flush=True)
                time.sleep(0.5)
            print("[worker-0] training done", flush=True)

        @task(trigger_rule="all_done")
        def archive(**context):
            s3, bucket, base = run_prefix(context)
            for role in ROLES:
                s3.put_object(
                    Bucket=bucket,
                    Key=f"{base}/logs/{role}-0.log",
                    Body=f"{role}-0 archived line 1\n{role}-0 archived line 2\n".encode(),
                )
            s3.put_object(Bucket=bucket, Key=f"{base}/model/saved_model.pb", Body=b"model-bytes")
            s3.put_object(
                Bucket=bucket, Key=f"{base}/model/variables/variables.index", Body=b"idx"
            )

        @teardown
        def remove_pods(**context):
            s3, bucket, base = run_prefix(context)
            s3.put_object(Bucket=bucket, Key=f"{base}/teardown.done", Body=b"")

        launched = launch()
        cleanup = remove_pods()
        validate() >> launched >> train() >> archive() >> cleanup
        launched >> cleanup
    return dag


globals().update({naming.submit_dag_id(t): build_submit_dag(t) for t in TENANTS})
