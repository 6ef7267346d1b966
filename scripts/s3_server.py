#!/usr/bin/env python3
"""A local S3 for the demo and tests: moto's server on loopback, presigned requests checked.

    python scripts/s3_server.py up --port 9000 --state-dir .state/s3 --bucket tfjob-demo
    python scripts/s3_server.py down --state-dir .state/s3
    python scripts/s3_server.py serve --port 0 --state-dir /tmp/s3 --ready-file /tmp/ready.json

One moto backend, two listeners:

- the host's, `http://127.0.0.1:PORT`: boto3 clients holding a key, their
  header signatures verified (Airflow, tshell, tests), and moto's `/moto-api/`
  to the admin key only;
- the pods', `http://127.0.0.2:PORT` by default (`--pod-host`, `--pod-port`):
  what localkube relays each pod's 127.0.0.1:PORT to
  (`--forward PORT=127.0.0.2:PORT`). It serves only requests presigned by a
  pods identity, within that identity's reach (scripts/s3_reach.py), and
  refuses `/moto-api/` and every request with an Authorization header, so a pod
  cannot use any other grant, reset the store or dump it. A pod still sends
  `Host: 127.0.0.1:PORT`, the host the URL was presigned for, so signatures match.
  A test can make it answer 503 for a while (`POST /moto-api/tfjob/pod-outage?seconds=N`
  on the host's listener, admin key): S3 down for the pods only.

Keys (scripts/s3_identities.py): the admin key is generated at the first start
of a state dir and kept in `<state-dir>/credentials.json` (0600); the pods
identities are read from `<state-dir>/pod_identities.json` (0600, written by
whoever starts the services, re-read when it changes). No key is a constant.
What is checked (SigV4 only; SigV2 is refused) is in scripts/s3_checks.py and
scripts/s3_header_auth.py (the host listener verifies header signatures too).
What the server acknowledged survives `down`, a crash and `kill -9`: each
change is saved under `<state-dir>/data/` before the answer leaves
(scripts/s3_persist.py, s3_sync.py, s3_store.py) and loaded back into moto
before the server reports ready; `scripts/clean_state.py` (`make clean-state`)
removes it. The state dir is 0700 and the files in it
0600 (ready.json names the key; the log shows presigned queries). No secret
is ever on a command line, which every user can read. Production uses a real
S3 endpoint, which enforces all of this itself (docs/real-cluster.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from scripts.background_server import (  # noqa: E402
    StartOutcome,
    await_ready,
    is_alive,
    make_private_dir,
    spawn_detached,
    stop_pid,
    write_private,
)
from scripts.s3_checks import PresignChecker  # noqa: E402
from scripts.s3_gate import CheckingMiddleware, PodOutage  # noqa: E402
from scripts.s3_identities import (  # noqa: E402
    POD_IDENTITIES_FILE,
    IdentitiesError,
    Keyring,
    ensure_admin_credentials,
)
from scripts.s3_persist import PersistingMiddleware  # noqa: E402
from scripts.s3_store import StoreError, locate_data_dir, open_store  # noqa: E402
from scripts.s3_sync import BackendMirror, install_change_tracking  # noqa: E402

DEFAULT_HOST = "127.0.0.1"
DEFAULT_POD_HOST = "127.0.0.2"  # any loopback address but the host's; see the docstring
DEFAULT_REGION = "us-east-1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
POLL_S = 0.1


def open_listeners(args: argparse.Namespace, app: Any, pod_app: Any) -> tuple[Any, Any]:
    """The host's server, then the pods' (same port number unless told or taken)."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    def make(host: str, port: int, wsgi: Any) -> Any:
        return make_server(host, port, wsgi, threaded=True, request_handler=MotoRequestHandler)

    server = make(args.host, args.port, app)
    pod_port = server.server_port if args.pod_port is None else args.pod_port
    try:
        pod_server = make(args.pod_host, pod_port, pod_app)
    except OSError:
        if args.pod_port is not None or args.port != 0:
            server.server_close()
            raise
        pod_server = make(args.pod_host, 0, pod_app)  # a free port was asked for: any will do
    return server, pod_server


def serve(args: argparse.Namespace) -> int:
    state = Path(args.state_dir)
    try:
        admin = ensure_admin_credentials(state)
    except (OSError, IdentitiesError) as error:
        print(f"s3 server: cannot read its credentials: {error}", file=sys.stderr, flush=True)
        return 1
    # moto's own backends read these; they are never moto's check (the gate is)
    os.environ["AWS_ACCESS_KEY_ID"] = admin.access_key
    os.environ["AWS_SECRET_ACCESS_KEY"] = admin.secret_key
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    data_dir = locate_data_dir(Path(args.state_dir))
    try:
        store = open_store(data_dir)
        install_change_tracking()
        mirror = BackendMirror(store)
        restored = mirror.restore()
    except StoreError as error:
        print(f"s3 server: cannot use {data_dir}: {error}", file=sys.stderr, flush=True)
        return 1
    print(
        f"s3 server: loaded {restored.buckets} buckets, {restored.objects} objects "
        f"({restored.data_bytes} bytes) from {data_dir}",
        flush=True,
    )
    moto = PersistingMiddleware(DomainDispatcherApplication(create_backend_app), mirror)
    keyring = Keyring({admin.access_key: admin.secret_key}, state / POD_IDENTITIES_FILE)
    checker = PresignChecker(keyring, args.region)
    outage = PodOutage()
    server, pod_server = open_listeners(
        args,
        CheckingMiddleware(
            moto, checker, allow_anonymous=args.allow_anonymous, outage=outage, keyring=keyring
        ),
        CheckingMiddleware(moto, checker, pod_facing=True, outage=outage, keyring=keyring),
    )
    endpoint = f"http://{args.host}:{server.server_port}"
    pod_endpoint = f"http://{args.pod_host}:{pod_server.server_port}"
    stopping = threading.Event()

    def stop(_signum: int, _frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threads = [
        threading.Thread(target=each.serve_forever, name=name, daemon=True)
        for name, each in (("s3-host", server), ("s3-pods", pod_server))
    ]
    for thread in threads:
        thread.start()
    create_buckets(endpoint, args.bucket, admin.access_key, admin.secret_key, args.region)
    ready = {
        "endpoint": endpoint,
        "port": server.server_port,
        "pod_endpoint": pod_endpoint,
        "pod_port": pod_server.server_port,
        "pid": os.getpid(),
        "buckets": args.bucket,
        "access_key": admin.access_key,
        "region": args.region,
    }
    if args.ready_file:
        write_private(Path(args.ready_file), json.dumps(ready))
    print(
        f"s3 server: serving {endpoint}, pods at {pod_endpoint} "
        f"(buckets: {', '.join(args.bucket) or 'none'})",
        flush=True,
    )
    stopping.wait()
    for each in (pod_server, server):
        each.shutdown()
    for thread in threads:
        thread.join(timeout=STOP_TIMEOUT_S)
    # The store's lock goes with the process, not before: a request thread may still be
    # saving (its client gets no answer; the next start removes what it left half-written).
    return 0


def create_buckets(
    endpoint: str, buckets: list[str], access_key: str, secret_key: str, region: str
) -> None:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=region,
    )
    existing = {each["Name"] for each in client.list_buckets().get("Buckets", [])}
    for bucket in buckets:
        if bucket not in existing:  # kept from an earlier run
            client.create_bucket(Bucket=bucket)


def up(args: argparse.Namespace) -> int:
    state = Path(args.state_dir)
    make_private_dir(state)
    ready_file = state / "ready.json"
    if ready_file.exists():
        info = json.loads(ready_file.read_text())
        if is_alive(info["pid"]):
            print(f"s3 server: already serving {info['endpoint']} (pid {info['pid']})")
            return 0
        ready_file.unlink()
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "serve",
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--pod-host",
        args.pod_host,
        "--state-dir",
        str(state.resolve()),
        "--ready-file",
        str(ready_file),
        "--region",
        args.region,
    ]
    if args.pod_port is not None:
        command += ["--pod-port", str(args.pod_port)]
    for bucket in args.bucket:
        command += ["--bucket", bucket]
    if args.allow_anonymous:
        command.append("--allow-anonymous")
    log_path = state / "server.log"
    child = spawn_detached(command, log_path)
    outcome = await_ready(ready_file.exists, child.pid, START_TIMEOUT_S, POLL_S)
    if outcome is StartOutcome.EXITED:
        print(
            f"s3 server: failed to start (exit {child.wait()}); last lines of {log_path}:\n"
            f"{tail_text(log_path)}",
            file=sys.stderr,
        )
        return 1
    if outcome is StartOutcome.TIMED_OUT:
        child.kill()
        print(f"s3 server: not ready after {START_TIMEOUT_S:g}s; see {log_path}", file=sys.stderr)
        return 1
    info = json.loads(ready_file.read_text())
    print(
        f"s3 server: serving {info['endpoint']}, pods at {info['pod_endpoint']} "
        f"(pid {info['pid']}, buckets: {', '.join(args.bucket) or 'none'}); "
        f"access key {info['access_key']} (its secret: {state / 'credentials.json'})"
    )
    return 0


def down(args: argparse.Namespace) -> int:
    ready_file = Path(args.state_dir) / "ready.json"
    data = locate_data_dir(Path(args.state_dir))
    kept = (
        f"; buckets and objects are kept in {data} (make clean-state removes them)"
        if data.exists()
        else ""
    )
    if not ready_file.exists():
        print(f"s3 server: not running{kept}")
        return 0
    pid = json.loads(ready_file.read_text())["pid"]
    stop_pid(pid, STOP_TIMEOUT_S)
    ready_file.unlink(missing_ok=True)
    print(f"s3 server: stopped (pid {pid}){kept}")
    return 0


def tail_text(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, func, text in (
        ("up", up, "start in the background; returns when it serves"),
        ("serve", serve, "serve in the foreground"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--host", default=DEFAULT_HOST)
        sub.add_argument("--port", type=int, default=9000, help="0 picks a free port")
        sub.add_argument(
            "--pod-host",
            default=DEFAULT_POD_HOST,
            help="loopback address of the pod-facing listener (presigned requests only)",
        )
        sub.add_argument(
            "--pod-port",
            type=int,
            help="its port (default: the host listener's port number; 0 a free one)",
        )
        sub.add_argument(
            "--bucket", action="append", default=[], help="bucket to create (repeatable)"
        )
        sub.add_argument("--region", default=DEFAULT_REGION)
        sub.add_argument(
            "--allow-anonymous", action="store_true", help="let unsigned requests through to moto"
        )
        if name == "up":
            sub.add_argument("--state-dir", default=".state/s3")
        else:
            sub.add_argument(
                "--state-dir",
                required=True,
                help="buckets and objects are kept in its data/ (0700), and loaded from it",
            )
            sub.add_argument(
                "--ready-file",
                help="write {endpoint, pod_endpoint, port, pid, ...} here (0600) once serving",
            )
        sub.set_defaults(func=func)
    stop = commands.add_parser("down", help="stop the background server")
    stop.add_argument("--state-dir", default=".state/s3")
    stop.set_defaults(func=down)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
