"""Start and stop the PostgreSQL that holds Airflow's metadata database.

    python scripts/postgres_server.py up|down|status [--state-dir .state/postgres]

Why this exists: on SQLite, Airflow lets one writer in at a time, so a busy
scheduler, API server and triggerer answered 500 "database is locked" and the
executor was held to 4 slots. Airflow's documentation names PostgreSQL for
real use; Debian's `postgresql` package (installed by `make setup`) brings the
server, and this script keeps one cluster per state dir:

- the first `up` runs initdb into <dir>/data as the `postgres` system user
  (PostgreSQL refuses to run as root), with the superuser `tfjob` and a
  generated password kept in <dir>/credentials.json (0600, root's own);
  every connection must give it (scram-sha-256);
- a state dir the `postgres` user cannot enter (a clone in root's 0700 home)
  keeps its cluster in /var/lib/tfjob-postgres/<hash of the state dir>
  instead, recorded in <dir>/location, and `up` says so;
- the server listens only on a Unix socket in <dir>/run (no TCP port to
  clash with another instance, nothing reachable from a pod's network);
- `up` returns once the server answers, and is a no-op when it runs;
  `ensure_database` creates a database on first use and gives its URL;
- `down` stops it (fast shutdown: running transactions are rolled back,
  every written commit stays); after a kill -9 of the server, the next `up`
  starts it again and PostgreSQL recovers from its write-ahead log.

`durable=False` (the tests' own clusters) turns off fsync: a machine crash
may lose their data, which a test session never outlives.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pwd
import re
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from scripts.background_server import is_alive, write_private  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STATE_DIR = REPO_ROOT / ".state" / "postgres"
SERVER_USER = "postgres"  # the system user Debian's package creates
SUPERUSER = "tfjob"
CREDENTIALS_FILE = "credentials.json"
LOCATION_FILE = "location"
FALLBACK_ROOT = Path("/var/lib/tfjob-postgres")
PORT = 5432  # only names the socket file: the server has no TCP listener
INSTALL_HINT = "make setup installs it (apt-get install postgresql)"
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60
MAX_SOCKET_PATH = 107  # sun_path of a Unix socket, less the final NUL
DATABASE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
SEARCHABLE_BY_OTHERS = 0o001
REAP_POLL_S = 0.2


class PostgresError(RuntimeError):
    """PostgreSQL could not be set up, started or stopped; the message says why."""


@dataclass(frozen=True)
class PostgresCluster:
    """One cluster's places under its state dir."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "run"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def log_file(self) -> Path:
        return self.log_dir / "postgresql.log"

    @property
    def credentials(self) -> Path:
        return self.root / CREDENTIALS_FILE

    def read_password(self) -> str:
        return json.loads(self.credentials.read_text())["password"]

    def database_url(self, database: str) -> str:
        """The SQLAlchemy URL of one database (psycopg2; Airflow derives its asyncpg URL)."""
        return (
            f"postgresql+psycopg2://{SUPERUSER}:{self.read_password()}@/{database}"
            f"?host={self.socket_dir}"
        )


def find_bin_dir() -> Path:
    """The newest installed PostgreSQL's bin directory (Debian keeps one per major version)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda path: int("0" + "".join(filter(str.isdigit, path.parts[-3]))),
    )
    if not found:
        raise PostgresError(
            f"PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/pg_ctl); {INSTALL_HINT}"
        )
    return found[-1].parent


def find_server_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise PostgresError(
            f"no system user {SERVER_USER!r} to run PostgreSQL as; {INSTALL_HINT}"
        ) from None


def find_unsearchable_ancestor(path: Path) -> Path | None:
    """The first directory above `path` that other users cannot enter, if any."""
    for ancestor in reversed(path.parents):
        if ancestor.exists() and not ancestor.stat().st_mode & SEARCHABLE_BY_OTHERS:
            return ancestor
    return None


def run_as_server_user(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["runuser", "-u", SERVER_USER, "--", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        cwd="/",
    )


def make_owned_dir(path: Path, owner: pwd.struct_passwd, mode: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, owner.pw_uid, owner.pw_gid)
    path.chmod(mode)


def locate_cluster(state_dir: Path) -> PostgresCluster:
    """Where the cluster of `state_dir` lives: the state dir itself when the server user can
    enter it, else a directory of its own under FALLBACK_ROOT (kept in <state dir>/location)."""
    state_dir = state_dir.resolve()
    recorded = state_dir / LOCATION_FILE
    if recorded.exists():
        return PostgresCluster(Path(recorded.read_text().strip()))
    if find_unsearchable_ancestor(state_dir / "data") is None:
        return PostgresCluster(state_dir)
    return PostgresCluster(FALLBACK_ROOT / hashlib.sha256(str(state_dir).encode()).hexdigest()[:16])


def check_layout(cluster: PostgresCluster) -> None:
    """PostgresError unless the server user can reach the cluster's dir and name its socket."""
    socket_path = cluster.socket_dir / f".s.PGSQL.{PORT}"
    if len(str(socket_path)) > MAX_SOCKET_PATH:
        raise PostgresError(
            f"the socket path {socket_path} is longer than a Unix socket allows "
            f"({MAX_SOCKET_PATH} characters); use a shorter --state-dir"
        )
    blocked = find_unsearchable_ancestor(cluster.root)
    if blocked is not None:
        raise PostgresError(
            f"PostgreSQL runs as the system user {SERVER_USER!r}, which cannot "
            f"enter {blocked} (mode {blocked.stat().st_mode & 0o777:o}); "
            f"put the state dir elsewhere or `chmod o+x {blocked}`"
        )


def write_settings(cluster: PostgresCluster, durable: bool) -> None:
    settings = {
        "listen_addresses": "''",
        "unix_socket_directories": f"'{cluster.socket_dir}'",
        "unix_socket_permissions": "0700",
        # Airflow's API server, scheduler, DAG processor and triggerer each keep a pool.
        "max_connections": "200",
        "shared_buffers": "64MB",
        "logging_collector": "off",
    }
    if not durable:
        settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
    lines = ["", "# TF-on-K8s (scripts/postgres_server.py)"]
    lines += [f"{name} = {value}" for name, value in settings.items()]
    with (cluster.data / "postgresql.conf").open("a") as conf:
        conf.write("\n".join(lines) + "\n")


def init_cluster(cluster: PostgresCluster, durable: bool) -> None:
    """initdb once: the data dir, the superuser and its password, the settings."""
    owner = find_server_user()
    cluster.root.mkdir(parents=True, exist_ok=True)
    cluster.root.chmod(0o711)  # the server user may enter; only root reads the credentials
    check_layout(cluster)
    for path in (cluster.data, cluster.socket_dir, cluster.log_dir):
        make_owned_dir(path, owner, 0o700)
    password = secrets.token_urlsafe(24)
    write_private(cluster.credentials, json.dumps({"user": SUPERUSER, "password": password}))
    password_file = cluster.socket_dir / "initdb-password"
    write_private(password_file, password)
    os.chown(password_file, owner.pw_uid, owner.pw_gid)
    try:
        argv = [
            str(find_bin_dir() / "initdb"),
            "-D",
            str(cluster.data),
            "-U",
            SUPERUSER,
            f"--pwfile={password_file}",
            "--auth=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        ]
        if not durable:
            argv.append("--no-sync")
        done = run_as_server_user(argv, START_TIMEOUT_S)
    finally:
        password_file.unlink(missing_ok=True)
    if done.returncode != 0:
        raise PostgresError(
            f"initdb failed (exit {done.returncode}):\n"
            f"{(done.stdout + done.stderr).strip()[-3000:]}"
        )
    write_settings(cluster, durable)


def read_postmaster_pid(cluster: PostgresCluster) -> int | None:
    """The pid the cluster's postmaster.pid names, whether or not it still runs."""
    try:
        first_line = (cluster.data / "postmaster.pid").read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    return int(first_line) if first_line.isdigit() and int(first_line) > 0 else None


def is_running(cluster: PostgresCluster) -> bool:
    """The postmaster runs: `pg_ctl status` says so and its pid is no zombie.

    pg_ctl (like the postmaster's own lock-file check) asks kill(pid, 0), which a
    killed postmaster still answers until its parent reaps it; an orphan's parent
    is init, which may reap seconds later.
    """
    if not (cluster.data / "PG_VERSION").exists():
        return False
    done = run_as_server_user(
        [str(find_bin_dir() / "pg_ctl"), "-D", str(cluster.data), "status"], STOP_TIMEOUT_S
    )
    pid = read_postmaster_pid(cluster)
    return done.returncode == 0 and pid is not None and is_alive(pid)


def await_reaped_postmaster(cluster: PostgresCluster, timeout: float) -> None:
    """Wait until a dead postmaster of postmaster.pid is reaped: until then a new one
    refuses to start ("lock file already exists"), as kill(pid, 0) still finds it."""
    pid = read_postmaster_pid(cluster)
    if pid is None:
        return
    deadline = time.monotonic() + timeout
    while not is_alive(pid) and Path(f"/proc/{pid}").exists():
        if time.monotonic() >= deadline:
            raise PostgresError(
                f"the previous postmaster (pid {pid}) has exited but its parent has not "
                f"reaped it in {timeout:g} s; PostgreSQL cannot start beside it"
            )
        time.sleep(REAP_POLL_S)


def start_postgres(state_dir: Path, durable: bool = True) -> PostgresCluster:
    """Initialise (first time) and start the cluster of `state_dir`, or find it running."""
    cluster = locate_cluster(state_dir)
    if not (cluster.data / "PG_VERSION").exists():
        if cluster.root != state_dir.resolve():
            FALLBACK_ROOT.mkdir(parents=True, exist_ok=True)
            FALLBACK_ROOT.chmod(0o711)
            print(
                f"note: the postgres user cannot enter {state_dir}; the database lives in "
                f"{cluster.root} (recorded in {state_dir / LOCATION_FILE})",
                file=sys.stderr,
            )
        init_cluster(cluster, durable)
        if cluster.root != state_dir.resolve():
            state_dir.mkdir(parents=True, exist_ok=True)
            (state_dir / LOCATION_FILE).write_text(f"{cluster.root}\n")
    if is_running(cluster):
        return cluster
    await_reaped_postmaster(cluster, STOP_TIMEOUT_S)
    done = run_as_server_user(
        [
            str(find_bin_dir() / "pg_ctl"),
            "-D",
            str(cluster.data),
            "-l",
            str(cluster.log_file),
            "-w",
            "-t",
            str(START_TIMEOUT_S),
            "start",
        ],
        START_TIMEOUT_S + 10,
    )
    if done.returncode != 0:
        raise PostgresError(
            f"PostgreSQL did not start (exit {done.returncode}):\n"
            f"{(done.stdout + done.stderr).strip()[-2000:]}\n"
            f"last lines of {cluster.log_file}:\n{tail_log(cluster)}"
        )
    return cluster


def stop_postgres(state_dir: Path) -> bool:
    """Stop the cluster of `state_dir`; whether it was running."""
    cluster = locate_cluster(state_dir)
    if not is_running(cluster):
        return False
    pg_ctl = [
        str(find_bin_dir() / "pg_ctl"),
        "-D",
        str(cluster.data),
        "-w",
        "-t",
        str(STOP_TIMEOUT_S),
        "stop",
    ]
    done = run_as_server_user([*pg_ctl, "-m", "fast"], STOP_TIMEOUT_S + 10)
    if done.returncode != 0:
        done = run_as_server_user([*pg_ctl, "-m", "immediate"], STOP_TIMEOUT_S + 10)
    if done.returncode != 0:
        raise PostgresError(
            f"PostgreSQL did not stop (exit {done.returncode}):\n"
            f"{(done.stdout + done.stderr).strip()[-2000:]}"
        )
    return True


def ensure_database(cluster: PostgresCluster, database: str, template: str | None = None) -> str:
    """Create `database` unless it exists, as a copy of the database `template` when one is
    named (nothing may be connected to it meanwhile: PostgreSQL refuses); its SQLAlchemy URL."""
    for name in (database, template or database):
        if not DATABASE_NAME.match(name):
            raise PostgresError(
                f"database name {name!r}: use lower-case letters, digits and _, "
                "starting with a letter, at most 63 characters"
            )
    import psycopg2

    connection = psycopg2.connect(
        dbname="postgres",
        user=SUPERUSER,
        password=cluster.read_password(),
        host=str(cluster.socket_dir),
    )
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
            if cursor.fetchone() is None:
                copied = f' TEMPLATE "{template}"' if template else ""
                cursor.execute(f'CREATE DATABASE "{database}"{copied}')
    finally:
        connection.close()
    return cluster.database_url(database)


def tail_log(cluster: PostgresCluster, lines: int = 20) -> str:
    try:
        return "\n".join(cluster.log_file.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            cluster = start_postgres(args.state_dir)
            print(f"PostgreSQL is up (socket in {cluster.socket_dir}, data in {cluster.data})")
        elif args.action == "down":
            stopped = stop_postgres(args.state_dir)
            print("PostgreSQL stopped" if stopped else "PostgreSQL was not running")
        else:
            running = is_running(locate_cluster(args.state_dir))
            print(f"PostgreSQL in {args.state_dir}: {'up' if running else 'down'}")
            return 0 if running else 3
    except PostgresError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
