"""`python -m localkube.kubelet --api URL --node NAME --state-dir DIR`: run one node's kubelet.

It authenticates to the API server with the cluster's bearer token, read from DIR/token (never
an argument: /proc/<pid>/cmdline is readable by every local user), and checks the server's
certificate against the cluster CA, DIR/pki/ca.crt.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import warnings

from localkube.certificates import CertificateError
from localkube.credentials import ClusterCredentials, TokenError, read_credentials
from localkube.kubelet.agent import Kubelet, install_signal_handlers


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m localkube.kubelet", description=__doc__)
    parser.add_argument("--api", required=True, help="API server URL, e.g. https://127.0.0.1:6443")
    parser.add_argument("--node", required=True, help="this node's name (a Node object in the API)")
    parser.add_argument(
        "--state-dir", required=True, help="the cluster's state dir (pods live in DIR/kubelet/)"
    )
    parser.add_argument(
        "--node-index",
        type=int,
        default=None,
        help="1-based node index (pod CIDR 10.77.<i>.0/24); default: from DIR/localkube.json",
    )
    parser.add_argument("--log-level", default=os.environ.get("LOCALKUBE_LOG_LEVEL", "INFO"))
    return parser.parse_args(argv)


async def run_kubelet(args: argparse.Namespace, credentials: ClusterCredentials) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        # one pidfd per container shim instead of one waiting thread each
        watcher = asyncio.PidfdChildWatcher()
        watcher.attach_loop(asyncio.get_running_loop())
        asyncio.get_event_loop_policy().set_child_watcher(watcher)
    stop = asyncio.Event()
    install_signal_handlers(stop)
    kubelet = Kubelet(args.api, credentials, args.node, args.state_dir, args.node_index)
    await kubelet.run(stop)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s kubelet[{args.node}] %(levelname)s %(name)s: %(message)s",
    )
    if os.geteuid() != 0:
        print(
            "localkube kubelet: must run as root (network namespaces, mounts, cgroups)",
            file=sys.stderr,
        )
        return 2
    try:
        credentials = read_credentials(args.state_dir)
    except (TokenError, CertificateError) as error:
        print(f"localkube kubelet: {error}", file=sys.stderr)
        return 2
    asyncio.run(run_kubelet(args, credentials))
    return 0


if __name__ == "__main__":
    sys.exit(main())
