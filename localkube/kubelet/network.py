"""Pod networking: the cluster bridge, one network namespace per pod, IPs, port forwards.

Layout (contract §6 of localkube/README.md): one "cluster" namespace
`lk-<h8>` (h8 = 8 hex of sha256 of the absolute state dir) holds the bridge
`lkbr0`; every pod gets `lk-<h8>-<uid8>` with `eth0` (a veth whose peer
`lkv<uid8>` sits on the bridge; eth0's MAC comes from the pod's uid,
policymodel.pod_mac_address, which NetworkPolicy rules check with the IP).
Node i hands out 10.77.i.2-254 with a /16 netmask, so pods of every node are
on-link with each other. Each pod's 127.0.0.1:PORT for every forwarded port
is a listening socket created inside the pod namespace by a thread that
setns()'s there and back; connections are relayed from the kubelet's (host)
namespace to the forward's target, the host's 127.0.0.1:PORT unless
`--forward PORT=ADDRESS:PORT` named another (localkube/forwarding.py).

Setting up a pod costs three `ip` processes (netns add, one batch inside the
pod namespace, one batch inside the cluster namespace).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import hashlib
import ipaddress
import logging
import os
import socket
import subprocess
import threading

from localkube.forwarding import Forward
from localkube.kubelet.errors import KubeletError
from localkube.kubelet.policymodel import pod_mac_address

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
BRIDGE = "lkbr0"
CLUSTER_CIDR_PREFIX = "10.77"
CLUSTER_PREFIXLEN = 16
NETNS_DIR = "/run/netns"
RELAY_CHUNK = 65536

_libc = ctypes.CDLL(None, use_errno=True)


class NetworkError(KubeletError):
    """An `ip` command failed; the message names the command and its stderr."""


def state_hash(state_dir: str) -> str:
    return hashlib.sha256(os.path.abspath(state_dir).encode()).hexdigest()[:8]


def cluster_netns_name(state_dir: str) -> str:
    return f"lk-{state_hash(state_dir)}"


def pod_netns_name(state_dir: str, pod_uid: str) -> str:
    return f"{cluster_netns_name(state_dir)}-{pod_uid[:8]}"


def pod_veth_name(pod_uid: str) -> str:
    return f"lkv{pod_uid[:8]}"


def node_gateway(node_index: int) -> str:
    return f"{CLUSTER_CIDR_PREFIX}.{node_index}.1"


def netns_exists(name: str) -> bool:
    return os.path.exists(os.path.join(NETNS_DIR, name))


def run_ip(args: list[str], batch: list[str] | None = None, check: bool = True) -> str:
    cmd = ["ip", *args] + (["-force", "-batch", "-"] if batch is not None else [])
    proc = subprocess.run(
        cmd,
        input=("\n".join(batch) + "\n") if batch is not None else None,
        capture_output=True,
        text=True,
    )
    if check and proc.returncode != 0:
        raise NetworkError(f"{' '.join(cmd)} failed (rc {proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def ensure_cluster_network(state_dir: str, node_index: int) -> None:
    """Create the cluster namespace and bridge once; add this node's gateway address."""
    name = cluster_netns_name(state_dir)
    lock_path = os.path.join(state_dir, "kubelet", "network.lock")
    os.makedirs(os.path.dirname(lock_path), exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not netns_exists(name):
            run_ip(["netns", "add", name])
            run_ip(
                ["-n", name],
                batch=[
                    "link set lo up",
                    f"link add {BRIDGE} type bridge",
                    f"link set {BRIDGE} up",
                    f"addr add {CLUSTER_CIDR_PREFIX}.0.1/{CLUSTER_PREFIXLEN} dev {BRIDGE}",
                ],
            )
        gateway = f"{node_gateway(node_index)}/{CLUSTER_PREFIXLEN}"
        run_ip(["-n", name, "addr", "replace", gateway, "dev", BRIDGE])


def setup_pod_network(state_dir: str, pod_uid: str, ip: str) -> str:
    """Create the pod's namespace wired to the bridge; returns the namespace name."""
    cluster = cluster_netns_name(state_dir)
    name = pod_netns_name(state_dir, pod_uid)
    veth = pod_veth_name(pod_uid)
    if netns_exists(name):
        teardown_pod_network(state_dir, pod_uid)
    run_ip(["netns", "add", name])
    run_ip(
        ["-n", name],
        batch=[
            "link set lo up",
            f"link add eth0 address {pod_mac_address(pod_uid)} type veth peer name {veth} "
            f"netns {cluster}",
            f"addr add {ip}/{CLUSTER_PREFIXLEN} dev eth0",
            "link set eth0 up",
        ],
    )
    run_ip(["-n", cluster], batch=[f"link set {veth} master {BRIDGE}", f"link set {veth} up"])
    return name


def teardown_pod_network(state_dir: str, pod_uid: str) -> None:
    """Delete the pod's namespace (its veth pair goes with it)."""
    name = pod_netns_name(state_dir, pod_uid)
    if netns_exists(name):
        run_ip(["netns", "del", name], check=False)


class AddressPool:
    """Pod IPs of one node: 10.77.<node>.2 .. .254, in use until released.

    Handed out in rotation (the next free one after the last given), so a released IP
    comes back only after the others: other nodes' kubelets have long seen its old pod
    go before a new pod answers at it (the NetworkPolicy rules name peers by IP).
    """

    def __init__(self, node_index: int) -> None:
        if not 1 <= node_index <= 254:
            raise ValueError(f"node index: {node_index} given; allowed 1..254")
        self.network = ipaddress.ip_network(f"{CLUSTER_CIDR_PREFIX}.{node_index}.0/24")
        self.hosts = [str(h) for h in list(self.network.hosts())[1:]]
        self.in_use: set[str] = set()
        self.next_index = 0

    def reserve(self, ip: str) -> None:
        self.in_use.add(ip)

    def allocate(self) -> str:
        for step in range(len(self.hosts)):
            index = (self.next_index + step) % len(self.hosts)
            ip = self.hosts[index]
            if ip not in self.in_use:
                self.in_use.add(ip)
                self.next_index = index + 1
                return ip
        raise NetworkError(f"no free pod IP left in {self.network}")

    def release(self, ip: str | None) -> None:
        self.in_use.discard(ip)


def open_listener_in_netns(netns: str, port: int) -> socket.socket:
    """Create a socket listening on 127.0.0.1:port inside `netns`.

    setns() changes only the calling thread, so this runs in a fresh thread
    that enters the pod namespace, binds, and ends; the socket keeps its namespace.
    """
    result: dict = {}

    def work() -> None:
        target = os.open(os.path.join(NETNS_DIR, netns), os.O_RDONLY)
        try:
            if _libc.setns(target, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns {netns}: {os.strerror(err)}")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(128)
            sock.setblocking(False)
            result["sock"] = sock
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            result["error"] = exc
        finally:
            os.close(target)

    thread = threading.Thread(target=work, name=f"netns-{netns}")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["sock"]


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(RELAY_CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()


class PodPortForwarder:
    """Relays the pod's 127.0.0.1:pod_port to the host's host_address:host_port per forward."""

    def __init__(self, netns: str, forwards: list[Forward]) -> None:
        self.netns = netns
        self.forwards = forwards
        self.servers: list[asyncio.base_events.Server] = []

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for forward in self.forwards:
            sock = await loop.run_in_executor(
                None, open_listener_in_netns, self.netns, forward.pod_port
            )
            server = await asyncio.start_server(self.make_handler(forward), sock=sock)
            self.servers.append(server)

    def make_handler(self, forward: Forward):
        async def handle(pod_reader: asyncio.StreamReader, pod_writer: asyncio.StreamWriter):
            try:
                host_reader, host_writer = await asyncio.open_connection(
                    forward.host_address, forward.host_port
                )
            except OSError:
                pod_writer.close()
                return
            try:
                await asyncio.gather(pump(pod_reader, host_writer), pump(host_reader, pod_writer))
            finally:
                host_writer.close()
                pod_writer.close()

        return handle

    async def stop(self) -> None:
        for server in self.servers:
            server.close()
        self.servers.clear()
