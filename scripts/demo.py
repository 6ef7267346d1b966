"""`make demo`: the main job, a distributed TensorFlow training end to end on the embedded default.

Why this exists: it is the one command that shows the whole product working on a
fresh machine, through the same doors a user goes through: the services come up
(S3, localkube, Airflow), the tenants are applied, tshell packs and uploads the
`digits-ps` bundle, tshell submits the request through Airflow's REST API as
the demo tenant's user (`demo-user`: Airflow lets it trigger only the demo
tenant's DAGs) and follows the run, and the result is read back from what the run archived in S3
(`run.json`), not from the demo's own bookkeeping. Every step is idempotent, so
a second `make demo` works; the services stay up for the user to explore.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scripts import services  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
STATE_DIR = REPO_ROOT / ".state"
BUNDLE_DIR = REPO_ROOT / "bundles" / "digits-ps"
REQUEST_FILE = BUNDLE_DIR / "request.yaml"
BUNDLE_PREFIX = "s3://tfjob-demo/bundles/"
TSHELL = [sys.executable, "-m", "tshell"]
# The demo tenant's user (tenancy/roles.py); its password is in tfjob_users.json.
DEMO_USER = "demo-user"
USERS_FILE = STATE_DIR / "airflow" / "tfjob_users.json"


class DemoError(RuntimeError):
    """A step of the demo failed; the message says which and what to do."""


def run_step(title: str, argv: list[str], env: dict[str, str], capture: bool = False) -> str:
    print(f"\n==> {title}", flush=True)
    result = subprocess.run(
        argv, cwd=REPO_ROOT, env=env, text=True, stdout=subprocess.PIPE if capture else None
    )
    if result.returncode != 0:
        raise DemoError(f"{title} failed (exit code {result.returncode}): {' '.join(argv)}")
    return result.stdout or ""


def read_service_env() -> dict[str, str]:
    record = json.loads((STATE_DIR / "services.json").read_text())
    env = dict(os.environ)
    env.update(
        AWS_ENDPOINT_URL=record["s3"]["endpoint_url"],
        AWS_ACCESS_KEY_ID=record["s3"]["access_key"],
        AWS_SECRET_ACCESS_KEY=record["s3"]["secret_key"],
        AWS_DEFAULT_REGION=record["s3"]["region"],
        KUBECONFIG=record["localkube"]["kubeconfig"],
        TSHELL_AIRFLOW_URL=record["airflow"]["url"],
    )
    return env


def read_run_manifest(
    request_output: str, dag_id: str, run_id: str, env: dict[str, str]
) -> dict[str, Any]:
    import boto3

    bucket, _, prefix = request_output.removeprefix("s3://").partition("/")
    s3 = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
    )
    key = "/".join(p for p in (prefix.strip("/"), "runs", dag_id, run_id, "run.json") if p)
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def print_result(manifest: dict[str, Any], run_id: str, seconds: float) -> None:
    model = manifest.get("model") or {}
    metrics = manifest.get("metrics") or {}
    print("\n==> Result")
    print(f"run            {run_id} ({manifest['dag_id']})")
    print(f"model          {model.get('uri', model)}")
    for uri in manifest.get("logs", []):
        print(f"log            {uri}")
    print("ClusterSpec    " + json.dumps(manifest.get("cluster_spec"), sort_keys=True))
    accuracy = metrics.get("accuracy")
    print(f"accuracy       {accuracy:.4f}" if isinstance(accuracy, float) else f"metrics {metrics}")
    print(f"time taken     {seconds:.1f} s from submit to success")


def print_services() -> None:
    record = json.loads((STATE_DIR / "services.json").read_text())
    logins = json.loads(USERS_FILE.read_text()) if USERS_FILE.exists() else {}
    print("\n==> Services are still running")
    print(f"Airflow UI     {record['airflow']['url']}")
    for user, password in sorted(logins.items()):
        print(f"  login        {user} / {password}")
    print(f"S3             {record['s3']['endpoint_url']}")
    kube = record["localkube"]
    print(f"Kubernetes     {kube['api_url']}  (KUBECONFIG={kube['kubeconfig']})")
    print(f"In a shell:    source {STATE_DIR / 'services.env'}; tshell list")
    print("Stop them:     make down")


def check_preflight(uid: int) -> None:
    """DemoError naming every reason the demo cannot run here, before anything starts."""
    try:
        services.check_preflight(
            services.StatePaths(STATE_DIR),
            services.DEFAULT_S3_PORT,
            services.DEFAULT_KUBE_PORT,
            services.airflow_server.DEFAULT_PORT,
            uid,
        )
    except services.PreflightError as error:
        raise DemoError(f"{error}\nNothing was started.") from None


def run_demo() -> None:
    check_preflight(os.geteuid())
    env = dict(os.environ)
    services_up = [sys.executable, "scripts/services.py", "up"]
    run_step("Starting S3, localkube and Airflow", services_up, env)
    env = read_service_env()
    run_step("Applying tenants (namespaces, quotas, pools)", [*TSHELL, "tenants", "apply"], env)
    push = [*TSHELL, "push", str(BUNDLE_DIR), BUNDLE_PREFIX]
    run_step("Packing and uploading bundles/digits-ps", push, env)
    started = time.monotonic()
    print("\n==> Submitting bundles/digits-ps/request.yaml and following the run", flush=True)
    result = subprocess.run(
        [*TSHELL, "submit", str(REQUEST_FILE), "--wait", "--json"],
        cwd=REPO_ROOT,
        env={**env, "TSHELL_USERNAME": DEMO_USER},
        text=True,
        stdout=subprocess.PIPE,
    )
    seconds = time.monotonic() - started
    summary = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    run_id = summary.get("run_id", "?")
    if result.returncode != 0 or summary.get("state") != "success":
        raise DemoError(
            f"the run {run_id} ended {summary.get('state', 'badly')}: see `tshell logs {run_id}` "
            f"and the Airflow UI; services stay up, `make down` stops them"
        )
    from tfjob.request.model import load_request

    dag_id = summary.get("dag_id", "?")
    manifest = read_run_manifest(load_request(REQUEST_FILE).output, dag_id, run_id, env)
    print_result(manifest, run_id, seconds)
    print_services()


def main() -> int:
    try:
        run_demo()
    except DemoError as error:
        print(f"\ndemo: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
