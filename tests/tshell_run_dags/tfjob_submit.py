"""A stand-in for the pipeline's `tfjob_submit` DAG, for testing tshell's REST mechanics.

It has the pipeline's task names and shapes and nothing of its Kubernetes work:
`validate` returns the run description (namespace, run key), `launch` returns
replica endpoints, `train` prints lines prefixed with
`[<role>-<index>]` for `env.TRAIN_SECONDS` seconds, `archive` uploads a log and
a model file to `<output>/runs/<run_id>/` in S3 (endpoint from AWS_ENDPOINT_URL),
and the Airflow teardown task `teardown` writes `<output>/runs/<run_id>/teardown.done`.
Its params refuse tenants other than team-a and team-b, so the server's own
validation (HTTP 400) can be provoked with a request that is valid locally.
"""

from __future__ import annotations

import datetime
import time

from airflow.sdk import DAG, Param, task, teardown

ROLES = ("worker", "ps")

with DAG(
    "tfjob_submit",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={"tenant": Param("team-a", type="string", enum=["team-a", "team-b"])},
):

    @task
    def validate(**context):
        # The same description the pipeline's validate pushes (operators/runinfo.py).
        from tfjob import naming

        conf = context["dag_run"].conf
        return {
            "request": conf,
            "run_id": context["run_id"],
            "dag_id": context["dag"].dag_id,
            "namespace": naming.tenant_namespace(conf["tenant"]),
            "run_key": naming.run_key(conf["name"], context["run_id"]),
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

    def run_prefix(context):
        import boto3

        bucket, _, prefix = context["dag_run"].conf["output"][len("s3://") :].partition("/")
        base = "/".join(p for p in (prefix.strip("/"), "runs", context["run_id"]) if p)
        return boto3.client("s3"), bucket, base

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
        s3.put_object(Bucket=bucket, Key=f"{base}/model/variables/variables.index", Body=b"idx")

    @teardown
    def remove_pods(**context):
        s3, bucket, base = run_prefix(context)
        s3.put_object(Bucket=bucket, Key=f"{base}/teardown.done", Body=b"")

    launched = launch()
    cleanup = remove_pods()
    validate() >> launched >> train() >> archive() >> cleanup
    launched >> cleanup
