"""Start and stop this repo's Airflow in the background: database, users, and its components.

Why this exists: `airflow standalone` would run the API server, scheduler, DAG
processor and triggerer, but it forces the simple auth manager, and TF-on-K8s
needs the FAB auth manager so that Airflow decides who may act for a tenant
(docs/tenants.md). So `up` does what standalone did, in three steps:

1. `airflow db migrate` (Airflow's tables and the FAB auth manager's);
2. `python -m tenancy.roles`: the tenants' roles (they must exist
   before the DAG processor reads a DAG naming them in access_control) and the
   embedded default's users, the admin and `<role>-user` per tenant role, with
   generated passwords kept in <home>/tfjob_users.json;
3. scripts/airflow_components.py in a new session: the four components as
   its children.

Every process started here carries a marker in its environment
(TFJOB_AIRFLOW_INSTANCE=<home>) and runs in that session; `down` stops every
process with that marker or in that session, and nothing else.

It also fixes what would otherwise be random per process: the JWT secret (the
scheduler's task tokens must verify in the API server), the fernet key and the
API secret key are generated once per home into <home>/secrets.json.

The home holds credentials (secrets.json, tfjob_users.json), so it is 0700,
both files are 0600 from their creation, and Airflow runs with umask 077:
every file it creates is private from its first byte.

`up` returns once /api/v2/monitor/health reports every component healthy and
the DAG processor has parsed every DAG file of the dags folder (the HTTP probes
are scripts/airflow_probes.py's).

Airflow's metadata database is PostgreSQL (scripts/postgres_server.py): `up`
from the command line starts the cluster of --postgres-dir and uses its
database `airflow`; scripts/services.py and the tests pass the URL themselves.

Usage: python scripts/airflow_server.py up|down|status [--home .state/airflow] [--port 8080]
                                                       [--postgres-dir .state/postgres]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from scripts import postgres_server  # noqa: E402
from scripts.airflow_probes import (  # noqa: E402
    fetch_health,
    fetch_token,
    is_healthy,
    list_dag_files,
    list_parsed_files,
)
from scripts.background_server import (  # noqa: E402
    PRIVATE_FILE_MODE,
    StartOutcome,
    await_port_free,
    await_ready,
    is_alive,
    make_private_dir,
    open_private,
    pick_free_port,
    reap,
    spawn_detached,
    stop_processes,
    write_private,
)
from scripts.instance_processes import INSTANCE_MARKER, find_instance_pids  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_HOME = REPO_ROOT / ".state" / "airflow"
DEFAULT_PORT = 8080
USERS_FILE = "tfjob_users.json"
SECRETS_FILE = "secrets.json"
PID_FILE = "airflow.pid"
LOG_FILE = "airflow.log"
COMPONENTS_SCRIPT = Path(__file__).resolve().with_name("airflow_components.py")
# `airflow db migrate` and the roles and users step; each takes a few seconds.
PREPARE_TIMEOUT_S = 300.0
ADMIN_USER = "admin"
DATABASE_NAME = "airflow"
AIRFLOW_UMASK = 0o077  # files Airflow creates (passwords, logs, database) are its own only

# Generous: on 2 shared cores under load, Airflow has taken over 2 minutes to get healthy.
START_TIMEOUT_S = 300.0
PARSE_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0
KILL_PERIOD_S = 10.0
PORT_RELEASE_S = 30.0  # for an earlier instance's killed API server to let go of its port
POLL_INTERVAL_S = 0.5


class AirflowStartError(RuntimeError):
    """Airflow did not come up; the message says why and what to do."""


@dataclass(frozen=True)
class AirflowSettings:
    """Where one Airflow instance lives and what it runs."""

    home: Path = DEFAULT_HOME
    port: int = DEFAULT_PORT
    dags_folder: Path = REPO_ROOT / "dags"
    plugins_folder: Path = REPO_ROOT / "plugins"
    config_file: Path = REPO_ROOT / "airflow.cfg"
    extra_env: Mapping[str, str] = field(default_factory=dict)
    # The SQLAlchemy URL of Airflow's metadata database (scripts/postgres_server.py).
    database_url: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass(frozen=True)
class AirflowInstance:
    """A running instance: where to reach it and how to log in."""

    url: str
    username: str
    password: str
    pid: int
    home: Path


def load_or_create_secrets(home: Path) -> dict[str, str]:
    """Secrets shared by every component of one home, created once."""
    path = home / SECRETS_FILE
    if path.exists():
        return json.loads(path.read_text())
    from cryptography.fernet import Fernet

    secrets = {
        "fernet_key": Fernet.generate_key().decode(),
        "jwt_secret": base64.urlsafe_b64encode(os.urandom(64)).decode(),
        "api_secret_key": base64.urlsafe_b64encode(os.urandom(32)).decode(),
    }
    make_private_dir(home)
    write_private(path, json.dumps(secrets))
    return secrets


def build_airflow_env(
    settings: AirflowSettings, base_env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment every Airflow process of this instance runs with."""
    env = dict(os.environ if base_env is None else base_env)
    home = settings.home.resolve()
    secrets = load_or_create_secrets(home)
    venv_bin = str(Path(sys.executable).parent)
    env.update(
        {
            # Airflow starts its own subprocesses (task runners, serve-logs) as `airflow …`.
            "PATH": venv_bin + os.pathsep + env.get("PATH", ""),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW_CONFIG": str(settings.config_file.resolve()),
            "AIRFLOW__CORE__DAGS_FOLDER": str(settings.dags_folder.resolve()),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(settings.plugins_folder.resolve()),
            "AIRFLOW__CORE__FERNET_KEY": secrets["fernet_key"],
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets["jwt_secret"],
            "AIRFLOW__API__SECRET_KEY": secrets["api_secret_key"],
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(settings.port),
            "AIRFLOW__API__BASE_URL": settings.url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{settings.url}/execution/",
            # Fixed defaults (8793/8794) would clash between the demo and test instances.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(pick_free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(pick_free_port()),
            "NO_COLOR": "1",
            INSTANCE_MARKER: str(home),
        }
    )
    if settings.database_url:
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = settings.database_url
    env.update(settings.extra_env)
    return env


def read_users(home: Path) -> dict[str, str]:
    """username → password of the embedded default's users; {} before the first `up`."""
    path = home / USERS_FILE
    try:
        path.chmod(PRIVATE_FILE_MODE)  # a home made by an older version
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}


def read_admin_password(home: Path) -> str | None:
    return read_users(home).get(ADMIN_USER)


def prepare_airflow(home: Path, env: Mapping[str, str], timeout: float = PREPARE_TIMEOUT_S) -> None:
    """Migrate the database, then make the tenants' roles and the users (module docstring)."""
    python = str(Path(sys.executable))
    steps = [
        ("airflow db migrate", [str(Path(sys.executable).parent / "airflow"), "db", "migrate"]),
        (
            "tenant roles and users",
            [python, "-m", "tenancy.roles", "--users-file", str(home / USERS_FILE)],
        ),
    ]
    for what, argv in steps:
        with os.fdopen(open_private(home / LOG_FILE, os.O_WRONLY | os.O_APPEND), "ab") as log:
            try:
                done = subprocess.run(
                    argv,
                    env=dict(env),
                    cwd=REPO_ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                    umask=AIRFLOW_UMASK,
                )
            except subprocess.TimeoutExpired:
                raise AirflowStartError(
                    f"{what} took more than {timeout:.0f} s; last lines of "
                    f"{home / LOG_FILE}:\n{tail_log(home)}"
                ) from None
        if done.returncode != 0:
            raise AirflowStartError(
                f"{what} failed (exit code {done.returncode}); last lines "
                f"of {home / LOG_FILE}:\n{tail_log(home)}"
            )


def read_pid(home: Path) -> int | None:
    try:
        return int((home / PID_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def tail_log(home: Path, lines: int = 30) -> str:
    path = home / LOG_FILE
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def await_airflow_ready(
    settings: AirflowSettings, pid: int, timeout: float = START_TIMEOUT_S
) -> AirflowInstance:
    """Wait until every component is healthy and the DAG files are parsed."""
    home = settings.home.resolve()

    def ready() -> bool:
        return is_healthy(fetch_health(settings.url))

    outcome = await_ready(ready, pid, timeout, POLL_INTERVAL_S)
    if outcome is StartOutcome.EXITED:
        raise AirflowStartError(
            f"Airflow (pid {pid}) exited during start; last lines of "
            f"{home / LOG_FILE}:\n{tail_log(home)}"
        )
    if outcome is StartOutcome.TIMED_OUT:
        raise AirflowStartError(
            f"Airflow at {settings.url} was not healthy within {timeout:.0f} s; "
            f"last lines of {home / LOG_FILE}:\n{tail_log(home)}"
        )
    password = read_admin_password(home)
    if password is None:
        raise AirflowStartError(f"no admin password in {home / USERS_FILE}")
    expected = list_dag_files(settings.dags_folder)
    parse_deadline = time.monotonic() + PARSE_TIMEOUT_S
    missing = expected
    while time.monotonic() < parse_deadline:
        try:
            token = fetch_token(settings.url, ADMIN_USER, password)
            missing = expected - list_parsed_files(settings.url, token)
        except OSError:  # a slow answer of a busy API server (URLError and timeouts): ask again
            pass
        if not missing:
            break
        time.sleep(POLL_INTERVAL_S)
    if missing:
        print(
            f"warning: the DAG processor has not reported these files after "
            f"{PARSE_TIMEOUT_S:.0f} s: {', '.join(sorted(missing))}",
            file=sys.stderr,
        )
    return AirflowInstance(settings.url, ADMIN_USER, password, pid, home)


def start_airflow(settings: AirflowSettings, timeout: float = START_TIMEOUT_S) -> AirflowInstance:
    """Start Airflow in the background, or return the instance already running."""
    home = settings.home.resolve()
    if not settings.database_url:
        raise AirflowStartError(
            "no database: AirflowSettings.database_url names the "
            "PostgreSQL database (scripts/postgres_server.py)"
        )
    make_private_dir(home)
    pid = read_pid(home)
    if pid is not None:
        if is_alive(pid) and is_healthy(fetch_health(settings.url)):
            return await_airflow_ready(settings, pid, timeout)
        ended = stop_airflow(home)  # an earlier instance that crashed or never got healthy
        if ended:
            print(
                f"ended {len(ended)} processes of an earlier Airflow in {home} "
                f"(pids {', '.join(map(str, sorted(ended)))})",
                file=sys.stderr,
            )
    earlier_port_wait = PORT_RELEASE_S if pid is not None else 0.0
    if not await_port_free(settings.port, earlier_port_wait):
        raise AirflowStartError(
            f"port {settings.port} on 127.0.0.1 is taken by another process; stop it "
            f"(see `ss -ltnp 'sport = :{settings.port}'`) or choose another with --port"
        )
    env = build_airflow_env(settings)
    prepare_airflow(home, env)
    process = spawn_detached(
        [str(Path(sys.executable)), str(COMPONENTS_SCRIPT)],
        home / LOG_FILE,
        home,
        env,
        umask=AIRFLOW_UMASK,
    )
    (home / PID_FILE).write_text(str(process.pid))
    try:
        return await_airflow_ready(settings, process.pid, timeout)
    except BaseException:
        stop_airflow(home)
        raise


def stop_airflow(home: Path, grace: float = STOP_GRACE_S) -> list[int]:
    """Stop every process of the instance at `home`: SIGTERM, then SIGKILL after `grace`.

    Processes keep appearing while Airflow shuts down (the executor replaces a
    worker, a task starts its supervisor), so every pass looks again and signals
    what is new; it returns once a look finds nothing alive.
    """
    home = home.resolve()
    pid = read_pid(home)
    # The launcher starts the supervisor in a new session: its pid is the session's id,
    # which its children keep after it died (a crash, kill -9).
    session_id = pid

    def alive() -> set[int]:
        return {p for p in find_instance_pids(home, session_id) if is_alive(p)}

    stopped = stop_processes(alive, grace, KILL_PERIOD_S)
    reap(pid)  # the supervisor is our child when started in this process (tests)
    (home / PID_FILE).unlink(missing_ok=True)
    return stopped


def print_login(instance: AirflowInstance) -> None:
    print(f"Airflow is up at {instance.url}")
    print(f"  login: {instance.username} / {instance.password}")
    print(f"  home:  {instance.home} (log: {instance.home / LOG_FILE})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME, help="AIRFLOW_HOME (state)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="API server port")
    parser.add_argument("--dags-folder", type=Path, default=REPO_ROOT / "dags")
    parser.add_argument("--plugins-folder", type=Path, default=REPO_ROOT / "plugins")
    parser.add_argument(
        "--postgres-dir",
        type=Path,
        default=REPO_ROOT / ".state" / "postgres",
        help="state dir of the PostgreSQL holding the database `airflow`",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for Airflow (e.g. AIRFLOW_CONN_…); repeatable",
    )
    args = parser.parse_args(argv)
    extra_env = dict(item.split("=", 1) for item in args.env)
    settings = AirflowSettings(
        home=args.home,
        port=args.port,
        dags_folder=args.dags_folder,
        plugins_folder=args.plugins_folder,
        extra_env=extra_env,
    )
    if args.action == "up":
        try:
            cluster = postgres_server.start_postgres(args.postgres_dir)
            settings = replace(
                settings, database_url=postgres_server.ensure_database(cluster, DATABASE_NAME)
            )
            instance = start_airflow(settings)
        except (AirflowStartError, postgres_server.PostgresError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        print_login(instance)
        return 0
    if args.action == "down":
        stopped = stop_airflow(args.home)
        print(
            f"Airflow stopped ({len(stopped)} processes)" if stopped else "Airflow was not running"
        )
        return 0
    pid = read_pid(args.home.resolve())
    running = pid is not None and is_alive(pid) and is_healthy(fetch_health(settings.url))
    print(f"Airflow at {settings.url}: {'up' if running else 'down'}")
    return 0 if running else 3


if __name__ == "__main__":
    sys.exit(main())
