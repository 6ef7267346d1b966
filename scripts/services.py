"""Bring the embedded default up or down in one step: S3, localkube, PostgreSQL, Airflow.

    python scripts/services.py up   [--state-dir .state] [--s3-port 9000] [--kube-port 6443]
                                    [--airflow-port 8080] [--bucket tfjob-demo]
    python scripts/services.py down [--state-dir .state]
    python scripts/services.py env  [--state-dir .state]   # export lines for tshell/boto3
    python scripts/services.py status [--state-dir .state] # what runs, since when, restarts

Why this exists: the services depend on each other in a fixed order.
localkube forwards the S3 port into every pod, so S3 starts first; Airflow's
connections name localkube's kubeconfig and the S3 endpoint, and its metadata
lives in PostgreSQL (scripts/postgres_server.py, a Unix socket under
<state>/postgres), so Airflow starts last. Stopping goes the other way: Airflow
first (no task creates a pod while the cluster goes away), then PostgreSQL,
localkube (its kubelets remove every pod, network namespace and mount), and S3.
Once all run, `up` starts scripts/supervisor.py, which restarts any of them
that dies (with bounded back-off; Airflow's components are restarted one by
one by scripts/airflow_components.py); `down` stops it before anything else,
so nothing it stops is restarted; `status` prints what runs, since when, how
many restarts and how each last ended (scripts/supervision.py's table).
A second `up` replaces the supervisor (its counts start over).
Each step is idempotent, so `up` twice and `down` twice are both fine. Before
`up` starts anything, scripts/preflight.py checks that it can work here (root;
PostgreSQL installed; each port free or held by this state dir's own service)
and names every problem with what to do.

Pods reach S3 at their own 127.0.0.1:<s3 port>, which localkube relays to the
S3 server's pod-facing listener (`--forward PORT=127.0.0.2:PORT`): requests
presigned by a pods identity within its reach only, no Authorization header,
no /moto-api/ (scripts/s3_server.py).

S3 keys (scripts/s3_identities.py): the server generates its admin key at
the first start of <state>/s3 (credentials.json, 0600); services reads it
from there for Airflow's aws_default and for tshell. Before S3 starts,
services writes <state>/s3/pod_identities.json: a pods-only identity per
tenant of deploy/tenants.yaml (secrets generated once and kept), which
Airflow gets as AIRFLOW_CONN_TFJOB_PODS_<TENANT> and uses only to presign
that tenant's pods' grants.

After `up`, <state>/services.json records the endpoints and <state>/services.env
holds `export` lines (AWS_ENDPOINT_URL, credentials, TSHELL_AIRFLOW_URL) for a
shell: `source .state/services.env`. tshell reads services.json by itself. Both
hold the admin secret, so they are 0600 from their creation; no secret is ever
on a command line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scripts import (
    airflow_components,  # noqa: E402
    postgres_server,  # noqa: E402
    preflight,  # noqa: E402
    supervision,  # noqa: E402
)
from scripts.background_server import make_private_dir, write_private  # noqa: E402
from scripts.s3_identities import (  # noqa: E402
    AdminCredentials,
    PodIdentity,
    ensure_admin_credentials,
    write_pod_identities,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STATE_DIR = REPO_ROOT / ".state"
DEFAULT_BUCKET = "tfjob-demo"
DEFAULT_S3_PORT = 9000
DEFAULT_KUBE_PORT = 6443
S3_REGION = "us-east-1"
SERVICES_FILE = "services.json"
ENV_FILE = "services.env"
STEP_TIMEOUT_S = 600


class ServiceError(RuntimeError):
    """A service did not start or stop; the message names it and where its log is."""


class PreflightError(ServiceError):
    """The services cannot start here (not root, a port taken); nothing was started."""


def _load_airflow_server() -> Any:
    # scripts/ is not a package: load the sibling launcher by path.
    spec = importlib.util.spec_from_file_location(
        "tfjob_scripts_airflow_server", Path(__file__).with_name("airflow_server.py")
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


airflow_server = _load_airflow_server()


@dataclass(frozen=True)
class StatePaths:
    root: Path

    @property
    def s3(self) -> Path:
        return self.root / "s3"

    @property
    def localkube(self) -> Path:
        return self.root / "localkube"

    @property
    def airflow(self) -> Path:
        return self.root / "airflow"

    @property
    def postgres(self) -> Path:
        return self.root / "postgres"


def run_step(name: str, argv: list[str], env: dict[str, str] | None = None) -> str:
    """Run one component's own CLI; its output, or ServiceError with it."""
    completed = subprocess.run(
        argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=STEP_TIMEOUT_S, env=env
    )
    output = (completed.stdout + completed.stderr).strip()
    if completed.returncode != 0:
        raise ServiceError(f"{name} failed (exit {completed.returncode}):\n{output}")
    return output


def build_connections(
    kubeconfig: Path,
    s3_endpoint: str,
    admin: AdminCredentials,
    pods: dict[str, PodIdentity] | None = None,
) -> dict[str, str]:
    """Airflow's connections to localkube and the S3 server, as AIRFLOW_CONN_* variables:
    aws_default with the admin key, and each tenant's pods-only presigning identity."""
    from tfjob.tenants import load_tenants

    kubernetes = {
        "conn_type": "kubernetes",
        "extra": {"kube_config_path": str(kubeconfig), "in_cluster": False},
    }

    def aws(access_key: str, secret_key: str) -> str:
        return json.dumps(
            {
                "conn_type": "aws",
                "login": access_key,
                "password": secret_key,
                "extra": {"endpoint_url": s3_endpoint, "region_name": S3_REGION},
            }
        )

    found = {
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(kubernetes),
        "AIRFLOW_CONN_AWS_DEFAULT": aws(admin.access_key, admin.secret_key),
    }
    conn_ids = {tenant.name: tenant.pods_conn_id for tenant in load_tenants().tenants}
    for tenant, identity in (pods or {}).items():
        conn_id = conn_ids.get(tenant)
        if conn_id:
            found["AIRFLOW_CONN_" + conn_id.upper()] = aws(identity.access_key, identity.secret_key)
    return found


def write_s3_pod_identities(paths: StatePaths) -> dict[str, PodIdentity]:
    """pod_identities.json for every tenant of the tenants file (the server re-reads it)."""
    from tfjob.tenants import load_tenants

    make_private_dir(paths.s3)
    return write_pod_identities(
        paths.s3, [(tenant.name, tenant.output_prefixes) for tenant in load_tenants().tenants]
    )


def start_s3(paths: StatePaths, port: int, buckets: list[str]) -> dict[str, Any]:
    """Start (or find running) the S3 server; its ready.json (endpoint, pod_endpoint, …)."""
    argv = [sys.executable, str(REPO_ROOT / "scripts" / "s3_server.py"), "up"]
    argv += ["--port", str(port), "--state-dir", str(paths.s3)]
    for bucket in buckets:
        argv += ["--bucket", bucket]
    print(run_step("S3 server", argv))
    return json.loads((paths.s3 / "ready.json").read_text())


def pod_forward_spec(s3_ready: dict[str, Any]) -> str:
    """localkube's `--forward`: the pods' 127.0.0.1:<S3 port> to the S3 pod-facing listener."""
    port = int(s3_ready["endpoint"].rsplit(":", 1)[1])
    if "pod_endpoint" not in s3_ready:  # a server started before the pod listener existed
        raise ServiceError(
            f"the S3 server in {s3_ready['endpoint']} has no pod-facing listener; "
            "restart it (make down; make up)"
        )
    target = s3_ready["pod_endpoint"].split("://", 1)[1]
    return f"{port}={target}"


def start_localkube(paths: StatePaths, port: int, s3_forward: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "localkube", "up", "--state-dir", str(paths.localkube)]
    argv += ["--port", str(port), "--forward", s3_forward]
    print(run_step("localkube", argv))
    return json.loads((paths.localkube / "localkube.json").read_text())


def write_service_files(paths: StatePaths, record: dict[str, Any]) -> None:
    """services.json and services.env: both hold the S3 secret, so 0600 from creation."""
    paths.root.mkdir(parents=True, exist_ok=True)
    write_private(paths.root / SERVICES_FILE, json.dumps(record, indent=2))
    write_private(paths.root / ENV_FILE, format_env_lines(record))


def format_env_lines(record: dict[str, Any]) -> str:
    values = {
        "AWS_ENDPOINT_URL": record["s3"]["endpoint_url"],
        "AWS_ACCESS_KEY_ID": record["s3"]["access_key"],
        "AWS_SECRET_ACCESS_KEY": record["s3"]["secret_key"],
        "AWS_DEFAULT_REGION": record["s3"]["region"],
        "KUBECONFIG": record["localkube"]["kubeconfig"],
        "TSHELL_AIRFLOW_URL": record["airflow"]["url"],
        "AIRFLOW_HOME": record["airflow"]["home"],
    }
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in values.items())


def apply_tenants(kubeconfig: Path, instance: Any) -> None:
    """deploy/tenants.yaml on the cluster and in Airflow (pools): docs/tenants.md."""
    from tenancy.apply import apply_everything

    tokens: list[str] = []

    def token() -> str:  # one login for all pool calls
        if not tokens:
            tokens.append(
                airflow_server.fetch_token(instance.url, instance.username, instance.password)
            )
        return tokens[0]

    for result in apply_everything(str(kubeconfig), instance.url, token):
        print(f"tenants: {result.describe()}")


def start_airflow(
    paths: StatePaths,
    port: int,
    kubeconfig: Path,
    s3_endpoint: str,
    pods: dict[str, PodIdentity],
) -> Any:
    """Start (or find running) Airflow with its connections and its PostgreSQL database."""
    database = postgres_server.locate_cluster(paths.postgres)
    settings = airflow_server.AirflowSettings(
        home=paths.airflow,
        port=port,
        extra_env=build_connections(
            kubeconfig, s3_endpoint, ensure_admin_credentials(paths.s3), pods
        ),
        database_url=postgres_server.ensure_database(database, airflow_server.DATABASE_NAME),
    )
    return airflow_server.start_airflow(settings)


def bring_up(
    paths: StatePaths, s3_port: int, kube_port: int, airflow_port: int, buckets: list[str]
) -> dict[str, Any]:
    """Start (or find running) S3, localkube, PostgreSQL and Airflow, in that order, then a
    new supervisor (an earlier one is stopped first: two starters of one service would race)."""
    if supervision.stop_supervisor(paths.root):
        print("supervisor stopped (a new one starts once everything runs)")
    pods = write_s3_pod_identities(paths)
    s3_ready = start_s3(paths, s3_port, buckets)
    admin = ensure_admin_credentials(paths.s3)  # the server generated it at its first start
    s3_endpoint = s3_ready["endpoint"]
    cluster = start_localkube(paths, kube_port, pod_forward_spec(s3_ready))
    kubeconfig = Path(cluster["kubeconfig"])
    database = postgres_server.start_postgres(paths.postgres)
    print(f"PostgreSQL is up (socket in {database.socket_dir})")
    instance = start_airflow(paths, airflow_port, kubeconfig, s3_endpoint, pods)
    apply_tenants(kubeconfig, instance)
    record = {
        "s3": {
            "endpoint_url": s3_endpoint,
            "access_key": admin.access_key,
            "secret_key": admin.secret_key,
            "region": S3_REGION,
            "buckets": buckets,
        },
        "localkube": {"api_url": cluster["api_url"], "kubeconfig": str(kubeconfig)},
        "airflow": {"url": instance.url, "username": instance.username, "home": str(instance.home)},
        "postgres": {"socket_dir": str(database.socket_dir), "data": str(database.data)},
    }
    write_service_files(paths, record)
    print(f"supervisor is up (pid {supervision.start_supervisor(paths.root)})")
    return record | {"airflow_logins": airflow_server.read_users(instance.home)}


def bring_down(paths: StatePaths) -> list[str]:
    """Stop the supervisor (so that nothing is restarted), Airflow, PostgreSQL, localkube and
    S3, in that order; what each said."""
    said = ["supervisor stopped"] if supervision.stop_supervisor(paths.root) else []
    stopped = airflow_server.stop_airflow(paths.airflow)
    said.append(
        f"Airflow stopped ({len(stopped)} processes)" if stopped else "Airflow was not running"
    )
    errors = []
    try:
        stopped_database = postgres_server.stop_postgres(paths.postgres)
        said.append("PostgreSQL stopped" if stopped_database else "PostgreSQL was not running")
    except postgres_server.PostgresError as error:
        errors.append(str(error))
    for name, argv in (
        (
            "localkube",
            [sys.executable, "-m", "localkube", "down", "--state-dir", str(paths.localkube)],
        ),
        (
            "S3 server",
            [
                sys.executable,
                str(REPO_ROOT / "scripts" / "s3_server.py"),
                "down",
                "--state-dir",
                str(paths.s3),
            ],
        ),
    ):
        try:
            said.append(run_step(name, argv))
        except ServiceError as error:  # go on: stop the rest before reporting
            errors.append(str(error))
    (paths.root / SERVICES_FILE).unlink(missing_ok=True)
    (paths.root / ENV_FILE).unlink(missing_ok=True)
    if errors:
        raise ServiceError("\n".join(errors))
    return said


def describe_status(paths: StatePaths) -> str:
    """`make status`: the supervisor, and a row per service and per Airflow component."""
    pid, rows = supervision.read_current_table(paths.root / supervision.STATE_FILE)
    _, components = supervision.read_current_table(
        paths.airflow / airflow_components.COMPONENTS_FILE
    )
    running = supervision.find_supervisor(paths.root)
    head = (
        f"supervisor: pid {running} ({paths.root / supervision.LOG_FILE})"
        if running
        else f"supervisor: not running{f' (last seen: pid {pid})' if pid else ''}; make up"
    )
    airflow = [replace(row, name=f"airflow {row.name}") for row in components]
    return head + "\n" + supervision.format_table([*rows, *airflow])


def list_service_ports(s3_port: int, kube_port: int, airflow_port: int) -> list[Any]:
    return [
        preflight.ServicePort("S3 server", s3_port, "--s3-port"),
        preflight.ServicePort("localkube", kube_port, "--kube-port"),
        preflight.ServicePort("Airflow", airflow_port, "--airflow-port"),
    ]


def check_preflight(
    paths: StatePaths, s3_port: int, kube_port: int, airflow_port: int, uid: int
) -> None:
    """ServiceError naming every reason the services cannot start here (root, ports)."""
    problems = preflight.find_problems(
        paths.root, list_service_ports(s3_port, kube_port, airflow_port), uid
    )
    if problems:
        raise PreflightError(
            "the services cannot start:\n" + "\n".join(f"  - {p}" for p in problems)
        )


def print_summary(record: dict[str, Any], paths: StatePaths) -> None:
    print()
    print(f"Airflow UI   {record['airflow']['url']}")
    for user, password in sorted(record["airflow_logins"].items()):
        print(f"  login      {user} / {password}")
    s3, kube = record["s3"], record["localkube"]
    print(f"S3           {s3['endpoint_url']}  buckets: {', '.join(s3['buckets'])}")
    print(f"Kubernetes   {kube['api_url']}  kubeconfig {kube['kubeconfig']}")
    print(f"For a shell: source {paths.root / ENV_FILE}")
    print("Stop everything: make down")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down", "env", "status"])
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument("--s3-port", type=int, default=DEFAULT_S3_PORT)
    parser.add_argument("--kube-port", type=int, default=DEFAULT_KUBE_PORT)
    parser.add_argument("--airflow-port", type=int, default=airflow_server.DEFAULT_PORT)
    parser.add_argument(
        "--bucket", action="append", help=f"bucket to create (default {DEFAULT_BUCKET})"
    )
    args = parser.parse_args(argv)
    paths = StatePaths(args.state_dir.resolve())
    try:
        if args.action == "up":
            check_preflight(paths, args.s3_port, args.kube_port, args.airflow_port, os.geteuid())
            record = bring_up(
                paths,
                args.s3_port,
                args.kube_port,
                args.airflow_port,
                args.bucket or [DEFAULT_BUCKET],
            )
            print_summary(record, paths)
        elif args.action == "down":
            for line in bring_down(paths):
                print(line)
        elif args.action == "status":
            print(describe_status(paths))
        else:
            env_file = paths.root / ENV_FILE
            if not env_file.exists():
                raise ServiceError(f"no {env_file}: the services are not up (make up)")
            print(env_file.read_text(), end="")
    except (
        ServiceError,
        airflow_server.AirflowStartError,
        postgres_server.PostgresError,
        supervision.SupervisorError,
    ) as error:
        print(f"error: {error}", file=sys.stderr)
        if args.action == "up" and not isinstance(error, PreflightError):
            print("Services that did start keep running; `make down` stops them.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
