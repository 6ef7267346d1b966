"""NetworkPolicies enforced by localkube's kubelets, driven through the official client.

Two namespaces (`alpha`, `beta`), a server pod in beta listening on two ports, a
friend pod in beta and a stranger pod in alpha on the other node; a host service
forwarded into every pod's 127.0.0.1 stands in for the S3 relay. Every check
connects from inside a pod (exec) and waits for the kubelets to apply a change,
as a client of a real cluster would. Needs root (real pods) and `nft`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import threading
import uuid
from pathlib import Path

import kubernetes
import pytest
from kubernetes.stream import stream

from harness.localkube_fixtures import restart_kubelet, start_localkube, stop_localkube, wait_until
from localkube.kubelet.cleanup import list_state_netns
from tfjob.tenants.model import NetworkSettings, Tenant
from tfjob.tenants.objects import build_run_network_policy, build_tenant_network_policy

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the kubelet needs root"),
    pytest.mark.skipif(shutil.which("nft") is None, reason="NetworkPolicies need nft (nftables)"),
]

POD_TIMEOUT_S = 60.0
RULES_TIMEOUT_S = 20.0
SERVER_PORTS = (2222, 3333)
SERVER = (
    "import socket, threading\n"
    "def serve(port):\n"
    " s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    " s.bind(('0.0.0.0', port)); s.listen()\n"
    " while True:\n"
    "  c, _ = s.accept(); c.sendall(b'ok'); c.close()\n"
    f"for p in {SERVER_PORTS}: threading.Thread(target=serve, args=(p,)).start()\n"
    "print('listening', flush=True)\n"
)
PROBE = (
    "import socket, sys\n"
    "try:\n"
    " c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)\n"
    " print('CONNECTED', c.recv(10).decode())\n"
    "except OSError as e:\n"
    " print('REFUSED', e)\n"
)


class HostService:
    """A TCP server on the host's 127.0.0.1 answering `ok` (stands in for the S3 relay)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.sendall(b"ok")
            conn.close()


class World:
    def __init__(self, handle, host_port: int) -> None:
        self.handle = handle
        self.host_port = host_port
        client = kubernetes.client.ApiClient(handle.kube_configuration())
        self.v1 = kubernetes.client.CoreV1Api(client)
        self.net = kubernetes.client.NetworkingV1Api(client)
        self.alpha = f"alpha-{uuid.uuid4().hex[:4]}"
        self.beta = f"beta-{uuid.uuid4().hex[:4]}"
        self.ips: dict[str, str] = {}

    def make_namespaces(self) -> None:
        for name, team in ((self.alpha, "alpha"), (self.beta, "beta")):
            self.v1.create_namespace({"metadata": {"name": name, "labels": {"team": team}}})

    def start_pod(self, namespace: str, name: str, labels: dict, node: str, script: str) -> None:
        pod = {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [
                    {
                        "name": "main",
                        "image": "python:3.11",
                        "command": ["python3", "-c", script],
                        "ports": [{"name": "grpc", "containerPort": 2222}],
                    }
                ],
            },
        }
        self.v1.create_namespaced_pod(namespace, pod)

    def await_running(self, namespace: str, name: str) -> str:
        pod = wait_until(
            lambda: (
                (p := self.v1.read_namespaced_pod(name, namespace)).status.phase == "Running" and p
            ),
            POD_TIMEOUT_S,
            f"{namespace}/{name} running",
        )
        self.ips[name] = pod.status.pod_ip
        return pod.status.pod_ip

    def probe(self, namespace: str, pod: str, address: str, port: int) -> bool:
        """Whether `pod` connects to address:port now (run inside the pod)."""
        out = stream(
            self.v1.connect_get_namespaced_pod_exec,
            pod,
            namespace,
            command=["python3", "-c", PROBE, address, str(port)],
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
        )
        assert "CONNECTED" in out or "REFUSED" in out, out
        return "CONNECTED ok" in out

    def await_reach(self, namespace: str, pod: str, address: str, port: int, reach: bool) -> None:
        verb = "connects" if reach else "is refused"
        wait_until(
            lambda: self.probe(namespace, pod, address, port) is reach,
            RULES_TIMEOUT_S,
            f"{namespace}/{pod} {verb} at {address}:{port}",
            interval=0.3,
        )

    def apply_policy(self, namespace: str, name: str, spec: dict) -> None:
        body = {"metadata": {"name": name}, "spec": spec}
        self.net.create_namespaced_network_policy(namespace, body)

    def remove_policies(self) -> None:
        for namespace in (self.alpha, self.beta):
            for policy in self.net.list_namespaced_network_policy(namespace).items:
                self.net.delete_namespaced_network_policy(policy.metadata.name, namespace)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    service = HostService()
    handle = start_localkube(tmp_path_factory.mktemp("netpol"), forward_ports=(service.port,))
    try:
        w = World(handle, service.port)
        w.make_namespaces()
        w.start_pod(w.beta, "server", {"app": "server"}, "node-1", SERVER)
        w.start_pod(w.beta, "friend", {"app": "friend"}, "node-2", "import time; time.sleep(3600)")
        w.start_pod(
            w.alpha, "stranger", {"app": "stranger"}, "node-2", "import time; time.sleep(3600)"
        )
        w.await_running(w.beta, "server")
        w.await_running(w.beta, "friend")
        w.await_running(w.alpha, "stranger")
        yield w
    finally:
        stop_localkube(handle)
        service.sock.close()
    assert list_state_netns(handle.state_dir) == []


@pytest.fixture
def clean(world):
    """Each test starts with no policy and ends removing its own."""
    world.remove_policies()
    yield world
    world.remove_policies()


DENY_ALL_INGRESS = {"podSelector": {}, "policyTypes": ["Ingress"]}


def test_without_policies_every_pod_reaches_every_other_and_the_forward(clean):
    w = clean
    server = w.ips["server"]
    assert w.probe(w.alpha, "stranger", server, 2222)
    assert w.probe(w.beta, "friend", server, 3333)
    assert w.probe(w.alpha, "stranger", "127.0.0.1", w.host_port)


def test_default_deny_ingress_refuses_other_namespaces_while_an_allowed_pod_connects(clean):
    w = clean
    server = w.ips["server"]
    w.apply_policy(w.beta, "deny-all", DENY_ALL_INGRESS)
    w.apply_policy(
        w.beta,
        "friends-in",
        {
            "podSelector": {"matchLabels": {"app": "server"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "friend"}}}]}],
        },
    )
    w.await_reach(w.alpha, "stranger", server, 2222, False)
    assert w.probe(w.beta, "friend", server, 2222)
    assert w.probe(w.beta, "friend", server, 3333)
    w.remove_policies()
    w.await_reach(w.alpha, "stranger", server, 2222, True)


def test_a_namespace_selector_admits_every_pod_of_the_matching_namespaces(clean):
    w = clean
    server = w.ips["server"]
    w.apply_policy(
        w.beta,
        "from-alpha",
        {
            "podSelector": {"matchLabels": {"app": "server"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "alpha"}}}]}],
        },
    )
    w.await_reach(w.beta, "friend", server, 2222, False)
    assert w.probe(w.alpha, "stranger", server, 2222)


def test_namespace_and_pod_selector_together_need_both_to_match(clean):
    w = clean
    server = w.ips["server"]
    both = {
        "namespaceSelector": {"matchLabels": {"team": "alpha"}},
        "podSelector": {"matchLabels": {"app": "friend"}},  # no such pod in alpha
    }
    w.apply_policy(
        w.beta,
        "alpha-friends",
        {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [both]}],
        },
    )
    w.await_reach(w.alpha, "stranger", server, 2222, False)
    assert not w.probe(w.beta, "friend", server, 2222)


def test_an_ip_block_admits_its_addresses_but_not_its_exceptions(clean):
    w = clean
    server, stranger = w.ips["server"], w.ips["stranger"]
    w.apply_policy(
        w.beta,
        "by-address",
        {
            "podSelector": {"matchLabels": {"app": "server"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"ipBlock": {"cidr": "10.77.0.0/16", "except": [f"{stranger}/32"]}}]}
            ],
        },
    )
    w.await_reach(w.alpha, "stranger", server, 2222, False)
    assert w.probe(w.beta, "friend", server, 2222)


def test_ports_and_port_ranges_limit_what_a_rule_admits(clean):
    w = clean
    server = w.ips["server"]
    w.apply_policy(
        w.beta,
        "only-3333",
        {
            "podSelector": {"matchLabels": {"app": "server"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"protocol": "TCP", "port": 3000, "endPort": 3500}]}],
        },
    )
    w.await_reach(w.alpha, "stranger", server, 2222, False)
    assert w.probe(w.alpha, "stranger", server, 3333)
    w.remove_policies()
    w.apply_policy(
        w.beta,
        "named",
        {
            "podSelector": {"matchLabels": {"app": "server"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"port": "grpc"}]}],  # the server's containerPort 2222
        },
    )
    w.await_reach(w.alpha, "stranger", server, 3333, False)
    assert w.probe(w.alpha, "stranger", server, 2222)


def test_egress_deny_blocks_outgoing_connections_and_a_port_rule_keeps_the_forward(clean):
    w = clean
    server = w.ips["server"]
    w.apply_policy(w.alpha, "no-egress", {"podSelector": {}, "policyTypes": ["Egress"]})
    w.await_reach(w.alpha, "stranger", server, 2222, False)
    assert not w.probe(w.alpha, "stranger", "127.0.0.1", w.host_port)
    w.apply_policy(
        w.alpha,
        "to-the-forward",
        {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [{"ports": [{"protocol": "TCP", "port": w.host_port}]}],
        },
    )
    w.await_reach(w.alpha, "stranger", "127.0.0.1", w.host_port, True)
    assert not w.probe(w.alpha, "stranger", server, 2222)
    w.remove_policies()
    w.await_reach(w.alpha, "stranger", server, 2222, True)


def test_egress_to_selected_pods_reaches_them_and_nothing_else(clean):
    w = clean
    server = w.ips["server"]
    w.apply_policy(
        w.alpha,
        "to-beta-servers",
        {
            "podSelector": {"matchLabels": {"app": "stranger"}},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {"matchLabels": {"team": "beta"}},
                            "podSelector": {"matchLabels": {"app": "server"}},
                        }
                    ],
                    "ports": [{"port": 3333}],
                }
            ],
        },
    )
    w.await_reach(w.alpha, "stranger", server, 2222, False)
    assert w.probe(w.alpha, "stranger", server, 3333)
    assert not w.probe(w.alpha, "stranger", "127.0.0.1", w.host_port)


def test_a_new_pod_is_isolated_before_its_program_runs(clean):
    w = clean
    server = w.ips["server"]
    w.apply_policy(w.alpha, "no-egress", {"podSelector": {}, "policyTypes": ["Egress"]})
    w.await_reach(w.alpha, "stranger", server, 2222, False)  # the kubelets know the policy
    name = f"early-{uuid.uuid4().hex[:4]}"
    first_thing = PROBE.replace("sys.argv[1], int(sys.argv[2])", f"'{server}', 2222")
    w.start_pod(w.alpha, name, {"app": "early"}, "node-1", first_thing)
    wait_until(
        lambda: w.v1.read_namespaced_pod(name, w.alpha).status.phase == "Succeeded",
        POD_TIMEOUT_S,
        f"{name} finished",
    )
    log = w.v1.read_namespaced_pod_log(name, w.alpha, _preload_content=False).data.decode()
    assert log.startswith("REFUSED"), log
    w.v1.delete_namespaced_pod(name, w.alpha)


def test_the_products_policies_let_a_runs_pods_talk_and_reach_s3_and_nothing_else(clean):
    """tfjob's tenant and run policies (docs/tenants.md, "Network isolation") applied as the
    product applies them, with the forwarded host service as the S3 port."""
    w = clean
    network = NetworkSettings(s3_port=w.host_port)
    tenant_policy = build_tenant_network_policy(Tenant(name="x", quota={}, defaults={}), network)
    tenant_policy["metadata"]["namespace"] = w.beta
    run_policy = build_run_network_policy(w.beta, "run-a", {}, {}, network)
    sleeper = "import time; time.sleep(3600)"
    w.start_pod(w.beta, "run-a-chief", {"tfjob.io/run": "run-a"}, "node-1", SERVER)
    w.start_pod(w.beta, "run-a-worker", {"tfjob.io/run": "run-a"}, "node-2", sleeper)
    w.start_pod(w.beta, "run-b-worker", {"tfjob.io/run": "run-b"}, "node-2", sleeper)
    chief = w.await_running(w.beta, "run-a-chief")
    w.await_running(w.beta, "run-a-worker")
    w.await_running(w.beta, "run-b-worker")
    w.net.create_namespaced_network_policy(w.beta, tenant_policy)
    w.net.create_namespaced_network_policy(w.beta, run_policy)
    try:
        w.await_reach(w.beta, "run-b-worker", chief, 2222, False)  # another run
        assert not w.probe(w.alpha, "stranger", chief, 2222)  # another namespace
        assert w.probe(w.beta, "run-a-worker", chief, 2222)  # its own run
        assert w.probe(w.beta, "run-a-worker", "127.0.0.1", w.host_port)  # S3
        assert w.probe(w.beta, "run-b-worker", "127.0.0.1", w.host_port)  # S3 for any pod
        assert not w.probe(w.beta, "run-a-worker", w.ips["server"], 2222)  # nothing else
    finally:
        for name in ("run-a-chief", "run-a-worker", "run-b-worker"):
            w.v1.delete_namespaced_pod(name, w.beta, grace_period_seconds=0)


def test_a_restarted_kubelet_keeps_the_rules_and_follows_later_changes(tmp_path):
    service = HostService()
    handle = start_localkube(tmp_path, forward_ports=(service.port,))
    restarted = None
    try:
        w = World(handle, service.port)
        w.make_namespaces()
        w.start_pod(w.beta, "server", {"app": "server"}, "node-1", SERVER)
        w.start_pod(
            w.alpha, "stranger", {"app": "stranger"}, "node-2", "import time; time.sleep(3600)"
        )
        server = w.await_running(w.beta, "server")
        w.await_running(w.alpha, "stranger")
        w.apply_policy(w.beta, "deny-all", DENY_ALL_INGRESS)
        w.await_reach(w.alpha, "stranger", server, 2222, False)
        info = json.loads((Path(handle.state_dir) / "localkube.json").read_text())
        os.kill(info["pids"]["kubelets"]["node-1"], signal.SIGKILL)
        assert not w.probe(w.alpha, "stranger", server, 2222)  # the table outlives its kubelet
        log = tmp_path / "kubelet-restarted.log"
        restarted = restart_kubelet(handle, "node-1", log)
        wait_until(lambda: "re-adopted" in log.read_text(), POD_TIMEOUT_S, "re-adoption")
        assert not w.probe(w.alpha, "stranger", server, 2222)
        w.remove_policies()
        w.await_reach(w.alpha, "stranger", server, 2222, True)
    finally:
        if restarted is not None:
            restarted.send_signal(signal.SIGTERM)
            restarted.wait(timeout=60)
        stop_localkube(handle)
        service.sock.close()
    assert list_state_netns(handle.state_dir) == []
