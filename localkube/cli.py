"""`python -m localkube up|down|status|blink|node-stop|node-start`: start and stop a local cluster
in the background.

`up` makes the cluster's bearer token DIR/token and its TLS files DIR/pki/ when the state dir
has none (localkube/credentials.py, localkube/certificates.py), starts one API server process
(HTTPS; it also runs the scheduler and garbage collector) and one kubelet process per node,
writes DIR/kubeconfig (server, CA and token) and DIR/localkube.json {api_url, pids, nodes,
forward_ports, forwards}, and returns once the API answers and every kubelet has reported its
node Ready. DIR is 0700 and these files 0600 from their creation: the token and the kubeconfig
are the key to the cluster, and DIR/store.db holds every Secret. The token reaches the processes
through DIR/token, never through their argv.
`down` stops the kubelets (they tear their pods down), then the API server, kills leftovers and
sweeps whatever the kubelets recorded under DIR/kubelet/ but did not remove.
`blink --seconds N` makes the running API server answer 503 for N seconds (a test switch:
localkube/apiserver/outage.py); `--seconds 0` ends it.
`node-stop NODE` powers a node off: SIGKILL to its kubelet, then to every process of the pods it
ran (shims and the processes in the pods' cgroups), nothing to the other nodes; the API server's
node lifecycle controller then finds the node silent (`up --node-monitor-grace-period`) and
fails its pods with reason NodeLost. `node-start NODE` starts its kubelet again; that kubelet's
recovery releases what the dead one left (network namespaces, mounts, cgroups), and `down`
sweeps it in any case.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from localkube.apiserver.app import DEFAULT_NODES_FILE
from localkube.apiserver.nodelifecycle import DEFAULT_GRACE_PERIOD_S
from localkube.apiserver.outage import MAX_OUTAGE_SECONDS
from localkube.certificates import CertificateError
from localkube.cluster import DEFAULT_PORT, DEFAULT_STATE_DIR, UpError, blink, down, status, up
from localkube.credentials import TokenError
from localkube.forwarding import Forward, parse_forward_spec
from localkube.logrotation import (
    DEFAULT_MAX_FILES,
    DEFAULT_MAX_SIZE,
    MIN_MAX_FILES,
    build_log_rotation,
    parse_log_size,
)
from localkube.nodepower import node_start, node_stop


def seconds_argument(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_OUTAGE_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} given; a number of seconds from 0 to {MAX_OUTAGE_SECONDS:g} is required"
        )
    return seconds


def log_size_argument(text: str) -> str:
    try:
        parse_log_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def log_files_argument(text: str) -> int:
    if not text.isdigit() or int(text) < MIN_MAX_FILES:
        raise argparse.ArgumentTypeError(
            f"{text!r} given; a whole number of at least {MIN_MAX_FILES} is required"
        )
    return int(text)


def grace_period_argument(text: str) -> float:
    from localkube.kubelet.nodeagent import HEARTBEAT_S

    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if seconds != 0 and not seconds > HEARTBEAT_S:
        raise argparse.ArgumentTypeError(
            f"{text!r} given; more seconds than the kubelets' heartbeat interval "
            f"({HEARTBEAT_S} s) are required, or 0 to never mark a node lost"
        )
    return seconds


def forward_argument(text: str) -> Forward:
    try:
        return parse_forward_spec(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m localkube", description="A local Kubernetes-API cluster."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up_cmd = commands.add_parser("up", help="start localkube in the background")
    up_cmd.add_argument("--state-dir", default=DEFAULT_STATE_DIR)
    up_cmd.add_argument(
        "--nodes",
        default=DEFAULT_NODES_FILE,
        help="YAML list of nodes {name, capacity, labels, taints}",
    )
    up_cmd.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="API server port on 127.0.0.1 (0: a free one)",
    )
    up_cmd.add_argument(
        "--forward",
        type=forward_argument,
        nargs="*",
        action="extend",
        default=[],
        metavar="PORT[=ADDRESS:PORT]",
        help="relay every pod's 127.0.0.1:PORT to the host's 127.0.0.1:PORT, "
        "or to ADDRESS:PORT (an IPv4 loopback address, e.g. "
        "9000=127.0.0.2:9000)",
    )
    up_cmd.add_argument(
        "--no-kubelets", action="store_true", help="start only the API server (for API tests)"
    )
    up_cmd.add_argument(
        "--node-monitor-grace-period",
        type=grace_period_argument,
        default=None,
        metavar="SECONDS",
        help="a node whose kubelet posts no status for this long is lost and "
        "its pods fail with reason NodeLost (default "
        f"{DEFAULT_GRACE_PERIOD_S:g}; 0: never, the default with "
        "--no-kubelets)",
    )
    up_cmd.add_argument(
        "--container-log-max-size",
        type=log_size_argument,
        default=DEFAULT_MAX_SIZE,
        metavar="SIZE",
        help="a container's log file is rotated before it passes this size "
        f"(a kubelet's containerLogMaxSize; default {DEFAULT_MAX_SIZE})",
    )
    up_cmd.add_argument(
        "--container-log-max-files",
        type=log_files_argument,
        default=DEFAULT_MAX_FILES,
        metavar="N",
        help="log files kept per container run, the current one included "
        f"(a kubelet's containerLogMaxFiles; default {DEFAULT_MAX_FILES})",
    )
    for name, text in (
        ("down", "stop localkube and everything it started"),
        ("status", "say whether localkube runs"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--state-dir", default=DEFAULT_STATE_DIR)
    blink_cmd = commands.add_parser(
        "blink", help="make the API server answer 503 for a while (a test switch)"
    )
    blink_cmd.add_argument("--state-dir", default=DEFAULT_STATE_DIR)
    blink_cmd.add_argument(
        "--seconds",
        type=seconds_argument,
        required=True,
        help="how long every request but the health checks gets 503; 0 ends an outage",
    )
    for name, text in (
        ("node-stop", "power a node off: SIGKILL its kubelet and its pods' processes"),
        ("node-start", "start a stopped node's kubelet again"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("node", help="the node's name, e.g. node-1")
        sub.add_argument("--state-dir", default=DEFAULT_STATE_DIR)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    state_dir = Path(args.state_dir).resolve()
    if args.command == "up":
        try:
            info = up(
                state_dir,
                os.path.abspath(args.nodes),
                args.port,
                args.forward,
                not args.no_kubelets,
                args.node_monitor_grace_period,
                build_log_rotation(args.container_log_max_size, args.container_log_max_files),
            )
        except (UpError, TokenError, CertificateError, ValueError, OSError) as error:
            print(f"localkube up failed: {error}", file=sys.stderr)
            return 1
        print(f"localkube is up: API {info['api_url']}, kubeconfig {state_dir / 'kubeconfig'}")
        return 0
    if args.command == "down":
        down(state_dir)
        print(f"localkube in {state_dir} is down")
        return 0
    if args.command == "blink":
        try:
            print(json.dumps(blink(state_dir, args.seconds)))
        except (UpError, TokenError, CertificateError, OSError) as error:
            print(f"localkube blink failed: {error}", file=sys.stderr)
            return 1
        return 0
    if args.command in ("node-stop", "node-start"):
        try:
            if args.command == "node-stop":
                killed = node_stop(state_dir, args.node)
                print(f"node {args.node} is off ({len(killed)} processes killed)")
            else:
                node_start(state_dir, args.node)
                print(f"node {args.node} is up and Ready")
        except (UpError, TokenError, CertificateError, OSError) as error:
            print(f"localkube {args.command} failed: {error}", file=sys.stderr)
            return 1
        return 0
    print(json.dumps(status(state_dir), indent=2))
    return 0
