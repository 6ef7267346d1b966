#!/usr/bin/env python3
"""The services the benchmarks run against, started once and shared by every measurement.

Why this exists: each measurement runs in its own process (Airflow reads its
configuration at import time, so each process gets the world's environment
before it imports anything), but starting S3 + localkube + a migrated Airflow
home costs ~30 s, so it is done once. The world is the test suite's own
(`harness/pipeline_fixtures.start_pipeline_world`: S3 server, localkube with its
kubelets, namespace `tfjob-test`, the stand-in bundle, a migrated Airflow DB in
the PostgreSQL of harness/postgres_fixtures.py, started by the process that
starts the world); this module only records it in a JSON file the
measurement processes read back, and stops it by that record.

    python bench/world.py up DIR          # prints DIR/world.json
    python bench/world.py airflow-up DIR  # airflow standalone for it: DIR/airflow.json
    python bench/world.py down DIR        # stops Airflow (if up), localkube, S3, PostgreSQL

Airflow is the tests' launcher too (`harness/airflow_fixtures.start_airflow`:
this repo's airflow.cfg, its parallelism, LocalExecutor, a free port, a
database in the same PostgreSQL), given the world's connections, as
tests/pipeline/test_pipeline_rest.py does.

What `stop_world` guarantees: no process of the world and no PostgreSQL
cluster directory (/tmp/tfjob-pg-*) is left, also after a failed start: the
clusters are stopped by the roots recorded in world.json and airflow.json
(`world.py down` runs in another process than `up`) and by this process's own
record (`postgres_fixtures.stop_test_postgres`, for a start that failed before
world.json was written).
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

from harness import postgres_fixtures  # noqa: E402
from harness.localkube_fixtures import LocalkubeHandle, stop_localkube  # noqa: E402
from harness.pipeline_fixtures import NAMESPACE, PipelineWorld, start_pipeline_world  # noqa: E402
from harness.postgres_fixtures import postgres_server  # noqa: E402
from harness.s3_fixtures import S3Server  # noqa: E402

WORLD_FILE = "world.json"
AIRFLOW_FILE = "airflow.json"
S3_STOP_TIMEOUT_S = 10.0
POSTGRES_DIR_PREFIX = "tfjob-pg-"  # harness/postgres_fixtures.py's clusters under /tmp


def airflow_parallelism() -> int:
    """`[core] parallelism` of this repo's airflow.cfg: the executor's slots in the world."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(REPO / "airflow.cfg")
    return config.getint("core", "parallelism")


def start_world(folder: Path) -> dict[str, Any]:
    """Start the pipeline world in `folder` and record it in `folder/world.json`."""
    world, _stop = start_pipeline_world(folder)
    record = {
        "postgres_root": str(postgres_fixtures.start_test_postgres().root),
        "s3": {
            "endpoint": world.s3.endpoint,
            "access_key": world.s3.access_key,
            "secret_key": world.s3.secret_key,
            "region": world.s3.region,
            "buckets": list(world.s3.buckets),
            "pid": world.s3.pid,
        },
        "kube": {
            "api_url": world.kube.api_url,
            "kubeconfig": world.kube.kubeconfig,
            "state_dir": world.kube.state_dir,
        },
        "home": str(world.home),
        "requests_dir": str(world.requests_dir),
        "bucket": world.bucket,
        "namespace": NAMESPACE,
        "env": world.env,
    }
    (folder / WORLD_FILE).write_text(json.dumps(record, indent=1))
    return record


def load_world(folder: Path) -> tuple[PipelineWorld, dict[str, Any]]:
    """The world recorded in `folder/world.json`, as the fixtures' `PipelineWorld`."""
    record = json.loads((Path(folder) / WORLD_FILE).read_text())
    s3 = record["s3"]
    server = S3Server(
        s3["endpoint"],
        s3["access_key"],
        s3["secret_key"],
        s3["region"],
        tuple(s3["buckets"]),
        s3["pid"],
    )
    kube = LocalkubeHandle(**record["kube"])
    world = PipelineWorld(
        server,
        kube,
        Path(record["home"]),
        Path(record["requests_dir"]),
        record["bucket"],
        dict(record["env"]),
    )
    return world, record


TENANT_POOL_SLOTS = 64


def start_world_airflow(folder: Path) -> dict[str, Any]:
    """`airflow standalone` wired to the world in `folder`; recorded in `folder/airflow.json`."""
    from harness.airflow_fixtures import start_airflow

    _world, record = load_world(folder)
    env = {
        k: v
        for k, v in record["env"].items()
        if k.startswith("AIRFLOW_CONN_") or k in ("TFJOB_REQUESTS_DIR", "TFJOB_TENANTS_FILE")
    }
    handle = start_airflow(Path(folder) / "airflow-standalone", extra_env=env)
    airflow = {
        "url": handle.url,
        "username": handle.username,
        "password": handle.password,
        "home": str(handle.home),
        "pid": handle.pid,
        # the same cluster as the world's when started in one process (run_all.py); a
        # cluster of its own after `world.py airflow-up` in a process of its own
        "postgres_root": str(postgres_fixtures.start_test_postgres().root),
    }
    (Path(folder) / AIRFLOW_FILE).write_text(json.dumps(airflow, indent=1))
    # A tenant DAG's job steps run in its tenant's pool; without the pool the
    # scheduler never queues them (what `tshell tenants apply` makes in a deployment). Enough
    # slots for every concurrency job (more than parallelism), so Airflow's parallelism
    # is the limit measured.
    from harness.pipeline_fixtures import TENANT
    from tenancy.apply import PoolSpec, RestPoolClient, apply_pool
    from tfjob.tenants import pool_name

    # RestPoolClient asks for a fresh token through a callable (the bench's client has
    # login(); passing its `token` attribute, a str or None, broke make bench).
    client = load_airflow(folder)
    apply_pool(
        RestPoolClient(client.url, client.login),
        PoolSpec(pool_name(TENANT), TENANT_POOL_SLOTS, ""),
    )
    return airflow


def load_airflow(folder: Path) -> Any:
    """A REST client of the recorded Airflow (bench/airflow_runs.AirflowClient)."""
    from bench.airflow_runs import AirflowClient

    record = json.loads((Path(folder) / AIRFLOW_FILE).read_text())
    return AirflowClient(record["url"], record["username"], record["password"])


def stop_world_airflow(folder: Path) -> list[str]:
    """Stop the world's Airflow (when started); the PostgreSQL root it recorded, if any."""
    path = Path(folder) / AIRFLOW_FILE
    home = Path(folder) / "airflow-standalone"
    roots = []
    if path.exists():
        record = json.loads(path.read_text())
        home = Path(record["home"])
        roots.append(record.get("postgres_root"))
    if home.exists():  # also when start_world_airflow failed before airflow.json was written
        from harness.airflow_fixtures import airflow_server

        airflow_server.stop_airflow(home)
    path.unlink(missing_ok=True)
    return [root for root in roots if root]


def stop_world(folder: Path) -> list[str]:
    """Stop Airflow (when started), localkube, S3 and PostgreSQL of the world in `folder`;
    the PostgreSQL roots it stopped (for `find_leftovers`).

    Each part is stopped even when stopping an earlier one failed; the first error is
    raised at the end.
    """
    errors: list[BaseException] = []
    roots: list[str] = []
    try:
        roots += stop_world_airflow(folder)
    except Exception as error:
        errors.append(error)
    path = Path(folder) / WORLD_FILE
    if path.exists():
        record = json.loads(path.read_text())
        if record.get("postgres_root"):
            roots.append(record["postgres_root"])
        for stop in (
            lambda: stop_localkube(record["kube"]["state_dir"]),
            lambda: stop_s3(record["s3"]["pid"]),
        ):
            try:
                stop()
            except Exception as error:
                errors.append(error)
    try:
        stop_postgres_clusters(roots)
    except Exception as error:
        errors.append(error)
    if errors:
        raise errors[0]
    return roots


def find_leftovers(places: list[Path]) -> list[str]:
    """What is left of a stopped world: directories of `places` that still exist other than
    the world folder itself (the first), and processes whose command line or working
    directory lies in one of them."""
    roots = [str(Path(place).resolve()) for place in places]
    left = [f"directory {root}" for root in roots[1:] if Path(root).exists()]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if any(root in command or cwd.startswith(root) for root in roots):
            left.append(f"process {proc.name} ({command.strip()[:120]})")
    return left


def stop_postgres_clusters(roots: list[str]) -> None:
    """Stop the recorded clusters and this process's own, and remove their directories."""
    for root in dict.fromkeys(roots):  # once each, in order
        postgres_server.stop_postgres(Path(root))
        if Path(root).name.startswith(POSTGRES_DIR_PREFIX):
            shutil.rmtree(root, ignore_errors=True)
    postgres_fixtures.stop_test_postgres()


def stop_s3(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + S3_STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("up", "airflow-up", "down"):
        print("usage: world.py up|airflow-up|down DIR", file=sys.stderr)
        return 2
    folder = Path(argv[1]).resolve()
    if argv[0] == "up":
        folder.mkdir(parents=True, exist_ok=True)
        start_world(folder)
        print(folder / WORLD_FILE)
    elif argv[0] == "airflow-up":
        start_world_airflow(folder)
        print(folder / AIRFLOW_FILE)
    else:
        stop_world(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
