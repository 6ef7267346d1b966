"""What NetworkPolicies allow a pod (localkube/kubelet/policymodel.py), against the examples of
Kubernetes' NetworkPolicy documentation, and the nft table each verdict becomes
(localkube/kubelet/nftables.py). Pure, except the last tests, which load tables into a
throwaway network namespace (root and `nft`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

from localkube.forwarding import Forward
from localkube.kubelet.nftables import OPEN_SCRIPT, apply_pod_table, render_pod_table
from localkube.kubelet.policymodel import (
    ClusterView,
    DirectionRules,
    PodRules,
    Protocol,
    compute_pod_rules,
    pod_mac_address,
    port_in,
)
from tfjob.tenants.model import NetworkSettings, Tenant
from tfjob.tenants.objects import build_run_network_policy, build_tenant_network_policy


def pod(name, namespace="default", labels=None, ip=None, ports=(), phase="Running", **spec):
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": labels or {},
        },
        "spec": {"containers": [{"ports": list(ports)}], **spec},
        "status": {"podIP": ip, "phase": phase},
    }


def policy(name, spec, namespace="default"):
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def admits(rules: DirectionRules, peer: dict | str, port: int, protocol="TCP") -> bool:
    """Whether traffic with `peer` (a pod, or a bare address) on protocol/port passes."""
    if not rules.isolated:
        return True
    if isinstance(peer, dict):
        ip, mac = peer["status"]["podIP"], pod_mac_address(peer["metadata"]["uid"])
    else:
        ip, mac = peer, None
    for allowance in rules.allowances:
        if not port_in(allowance.ports, Protocol(protocol), port):
            continue
        if allowance.any_peer or any(b.holds(ip) for b in allowance.blocks):
            return True
        if any(p.ip == ip and p.mac == mac for p in allowance.pods):
            return True
    return False


DB = pod("db", labels={"role": "db"}, ip="10.77.1.2")
FRONTEND = pod("frontend", labels={"role": "frontend"}, ip="10.77.1.3")
BACKEND = pod("backend", labels={"role": "backend"}, ip="10.77.1.4")
MYPROJECT_POD = pod("any", namespace="myproject", labels={"x": "y"}, ip="10.77.2.2")
OTHER_NS_FRONTEND = pod("frontend", namespace="other", labels={"role": "frontend"}, ip="10.77.2.3")
NAMESPACES = {"default": {}, "myproject": {"project": "myproject"}, "other": {}}
EVERYONE = [DB, FRONTEND, BACKEND, MYPROJECT_POD, OTHER_NS_FRONTEND]

# The documentation's "test-network-policy" example, as written there.
DOCS_EXAMPLE = policy(
    "test-network-policy",
    {
        "podSelector": {"matchLabels": {"role": "db"}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [
            {
                "from": [
                    {"ipBlock": {"cidr": "172.17.0.0/16", "except": ["172.17.1.0/24"]}},
                    {"namespaceSelector": {"matchLabels": {"project": "myproject"}}},
                    {"podSelector": {"matchLabels": {"role": "frontend"}}},
                ],
                "ports": [{"protocol": "TCP", "port": 6379}],
            }
        ],
        "egress": [
            {
                "to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
                "ports": [{"protocol": "TCP", "port": 5978}],
            }
        ],
    },
)


def rules_of(target, *policies, pods=EVERYONE, forwards=()):
    view = ClusterView(pods=pods, namespaces=NAMESPACES, policies=list(policies))
    return compute_pod_rules(target, view, forwards)


@pytest.mark.parametrize(
    ("peer", "port", "admitted"),
    [
        (FRONTEND, 6379, True),  # podSelector: role=frontend of the policy's namespace
        (FRONTEND, 6380, False),  # ... on the listed port only
        (MYPROJECT_POD, 6379, True),  # any pod of a namespace labelled project=myproject
        (OTHER_NS_FRONTEND, 6379, False),  # role=frontend of another namespace: not picked
        (BACKEND, 6379, False),
        ("172.17.0.5", 6379, True),  # the ipBlock ...
        ("172.17.1.5", 6379, False),  # ... but not its except
        ("172.17.2.255", 6379, True),
        ("172.18.0.1", 6379, False),
    ],
)
def test_the_documentations_example_admits_what_it_says(peer, port, admitted):
    assert admits(rules_of(DB, DOCS_EXAMPLE).ingress, peer, port) is admitted


def test_the_documentations_example_isolates_only_the_selected_pods_egress():
    db = rules_of(DB, DOCS_EXAMPLE)
    assert db.egress.isolated
    assert admits(db.egress, "10.0.0.9", 5978) and not admits(db.egress, "10.0.1.9", 5978)
    assert not admits(db.egress, "10.0.0.9", 5979)
    frontend = rules_of(FRONTEND, DOCS_EXAMPLE)
    assert not frontend.ingress.isolated and not frontend.egress.isolated


@pytest.mark.parametrize(
    ("spec", "ingress_isolated", "egress_isolated", "frontend_in", "out_anywhere"),
    [
        # default deny all ingress
        ({"podSelector": {}, "policyTypes": ["Ingress"]}, True, False, False, True),
        # allow all ingress
        ({"podSelector": {}, "ingress": [{}], "policyTypes": ["Ingress"]}, True, False, True, True),
        # default deny all egress
        ({"podSelector": {}, "policyTypes": ["Egress"]}, False, True, True, False),
        # allow all egress
        ({"podSelector": {}, "egress": [{}], "policyTypes": ["Egress"]}, False, True, True, True),
        # default deny all ingress and all egress
        ({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}, True, True, False, False),
        # no policyTypes: Ingress, plus Egress when `egress` is written
        ({"podSelector": {}}, True, False, False, True),
        ({"podSelector": {}, "egress": []}, True, True, False, False),
    ],
)
def test_the_documentations_default_policies(
    spec, ingress_isolated, egress_isolated, frontend_in, out_anywhere
):
    rules = rules_of(DB, policy("p", spec))
    assert rules.ingress.isolated is ingress_isolated
    assert rules.egress.isolated is egress_isolated
    assert admits(rules.ingress, FRONTEND, 80) is frontend_in
    assert admits(rules.egress, "8.8.8.8", 53, "UDP") is out_anywhere


def test_policies_add_up_and_a_pod_no_policy_selects_is_open():
    deny = policy("deny", {"podSelector": {}, "policyTypes": ["Ingress"]})
    allow = policy(
        "allow",
        {
            "podSelector": {"matchLabels": {"role": "db"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "backend"}}}]}],
        },
    )
    db = rules_of(DB, deny, allow).ingress
    assert admits(db, BACKEND, 1) and not admits(db, FRONTEND, 1)
    assert not admits(rules_of(FRONTEND, deny, allow).ingress, BACKEND, 1)
    assert not rules_of(MYPROJECT_POD, deny, allow).ingress.isolated  # another namespace


def test_namespace_and_pod_selector_in_one_entry_mean_both_in_two_entries_either():
    alice = pod("client", namespace="alice-ns", labels={"role": "client"}, ip="10.77.3.2")
    alice_other = pod("web", namespace="alice-ns", labels={"role": "web"}, ip="10.77.3.3")
    local_client = pod("client", labels={"role": "client"}, ip="10.77.3.4")
    pods = [DB, alice, alice_other, local_client]
    namespaces = {**NAMESPACES, "alice-ns": {"user": "alice"}}
    ns_sel = {"namespaceSelector": {"matchLabels": {"user": "alice"}}}
    pod_sel = {"podSelector": {"matchLabels": {"role": "client"}}}
    both = policy("both", {"podSelector": {}, "ingress": [{"from": [{**ns_sel, **pod_sel}]}]})
    either = policy("either", {"podSelector": {}, "ingress": [{"from": [ns_sel, pod_sel]}]})
    view = ClusterView(pods=pods, namespaces=namespaces, policies=[both])
    anded = compute_pod_rules(DB, view).ingress
    assert admits(anded, alice, 1)
    assert not admits(anded, alice_other, 1) and not admits(anded, local_client, 1)
    view = ClusterView(pods=pods, namespaces=namespaces, policies=[either])
    ored = compute_pod_rules(DB, view).ingress
    assert admits(ored, alice, 1) and admits(ored, alice_other, 1)
    assert admits(ored, local_client, 1)


def test_the_namespace_name_label_is_always_there():
    by_name = policy(
        "by-name",
        {
            "podSelector": {},
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": "myproject"}
                            }
                        }
                    ]
                }
            ],
        },
    )
    rules = rules_of(DB, by_name).ingress
    assert admits(rules, MYPROJECT_POD, 1) and not admits(rules, FRONTEND, 1)


def test_match_expressions_select_as_kubernetes_does():
    expressions = policy(
        "expr",
        {
            "podSelector": {},
            "ingress": [
                {
                    "from": [
                        {
                            "podSelector": {
                                "matchExpressions": [
                                    {"key": "role", "operator": "In", "values": ["frontend", "x"]},
                                    {"key": "tier", "operator": "DoesNotExist"},
                                ]
                            }
                        }
                    ]
                }
            ],
        },
    )
    rules = rules_of(DB, expressions).ingress
    assert admits(rules, FRONTEND, 1) and not admits(rules, BACKEND, 1)


def test_an_unreadable_selector_isolates_but_admits_nobody():
    bad = {"matchExpressions": [{"key": "role", "operator": "Near"}]}
    rules = rules_of(
        DB, policy("bad", {"podSelector": bad, "ingress": [{"from": [{"podSelector": bad}]}]})
    )
    assert rules.ingress.isolated
    assert not any(admits(rules.ingress, p, 1) for p in EVERYONE)


@pytest.mark.parametrize(
    ("ports", "protocol", "port", "admitted"),
    [
        ([{"protocol": "TCP", "port": 32000, "endPort": 32768}], "TCP", 32768, True),
        ([{"protocol": "TCP", "port": 32000, "endPort": 32768}], "TCP", 32769, False),
        ([{"port": 53}], "UDP", 53, False),  # protocol defaults to TCP
        ([{"protocol": "UDP"}], "UDP", 12345, True),  # no port: every port of the protocol
        ([{"protocol": "UDP"}], "TCP", 12345, False),
        ([{"port": "grpc"}], "TCP", 2222, True),  # named: the pod's own containerPort
        ([{"port": "grpc"}], "TCP", 2223, False),
        ([{"port": "nothing-named-so"}], "TCP", 2222, False),
        ([], "SCTP", 7, True),  # no ports: everything
        ([{"port": 0}, {"port": 70000}, {"port": 90, "endPort": 80}], "TCP", 85, False),
    ],
)
def test_ports_of_an_ingress_rule(ports, protocol, port, admitted):
    server = pod(
        "srv",
        labels={"app": "srv"},
        ip="10.77.1.9",
        ports=[{"name": "grpc", "containerPort": 2222}],
    )
    rules = rules_of(server, policy("p", {"podSelector": {}, "ingress": [{"ports": ports}]}))
    assert admits(rules.ingress, FRONTEND, port, protocol) is admitted


def test_a_named_egress_port_resolves_on_each_destination_pod():
    a = pod(
        "a", labels={"app": "t"}, ip="10.77.1.10", ports=[{"name": "grpc", "containerPort": 2222}]
    )
    b = pod(
        "b", labels={"app": "t"}, ip="10.77.1.11", ports=[{"name": "grpc", "containerPort": 5000}]
    )
    spec = {
        "podSelector": {"matchLabels": {"role": "db"}},
        "policyTypes": ["Egress"],
        "egress": [
            {"to": [{"podSelector": {"matchLabels": {"app": "t"}}}], "ports": [{"port": "grpc"}]}
        ],
    }
    egress = rules_of(DB, policy("p", spec), pods=[DB, a, b]).egress
    assert admits(egress, a, 2222) and admits(egress, b, 5000)
    assert not admits(egress, a, 5000) and not admits(egress, b, 2222)


def test_only_live_pods_with_their_own_network_are_peers():
    everyone_in = policy(
        "in",
        {
            "podSelector": {"matchLabels": {"role": "db"}},
            "ingress": [{"from": [{"podSelector": {}}]}],
        },
    )
    finished = pod("done", ip="10.77.1.20", phase="Succeeded")
    no_ip = pod("pending", ip=None, phase="Pending")
    host = pod("host", ip="10.77.1.1", hostNetwork=True)
    rules = rules_of(DB, everyone_in, pods=[DB, FRONTEND, finished, no_ip, host]).ingress
    assert admits(rules, FRONTEND, 1)
    assert not admits(rules, finished, 1) and not admits(rules, host, 1)


def test_a_later_pod_at_a_released_ip_is_not_the_peer_the_rules_named():
    allow_frontend = policy(
        "f",
        {
            "podSelector": {},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "frontend"}}}]}],
        },
    )
    rules = rules_of(DB, allow_frontend).ingress
    successor = pod("intruder", labels={"role": "intruder"}, ip=FRONTEND["status"]["podIP"])
    assert admits(rules, FRONTEND, 1) and not admits(rules, successor, 1)
    mac = pod_mac_address("some-uid")
    assert mac == pod_mac_address("some-uid") != pod_mac_address("other-uid")
    assert int(mac.split(":")[0], 16) & 0b11 == 0b10  # locally administered, unicast


S3 = Forward(9000, "127.0.0.2", 9000)
API = Forward(6443)


@pytest.mark.parametrize(
    ("egress", "s3_open"),
    [
        (None, True),  # egress not isolated
        ([], False),  # default deny
        ([{"ports": [{"protocol": "TCP", "port": 9000}]}], True),  # any destination, the port
        ([{"ports": [{"protocol": "UDP", "port": 9000}]}], False),
        ([{"to": [{"ipBlock": {"cidr": "127.0.0.0/8"}}]}], True),  # a block holding the target
        ([{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"port": 9000}]}], False),
        ([{"to": [{"podSelector": {}}], "ports": [{"port": 9000}]}], False),  # pods are not S3
    ],
)
def test_a_forward_is_open_when_egress_allows_its_target(egress, s3_open):
    spec = {"podSelector": {}, "policyTypes": ["Egress"]}
    if egress is not None:
        spec["egress"] = egress
    policies = [policy("p", spec)] if egress is not None else []
    rules = rules_of(DB, *policies, forwards=[S3, API])
    verdicts = {v.pod_port: v.allowed for v in rules.forwards}
    assert verdicts[9000] is s3_open
    assert verdicts[6443] is (
        egress is None or egress == [{"to": [{"ipBlock": {"cidr": "127.0.0.0/8"}}]}]
    )


# ---- the product's own policies (tfjob/tenants/objects.py), as docs/tenants.md describes them


def run_pod(name, run, namespace="tfjob-test", ip="10.77.1.50"):
    return pod(name, namespace, {"tfjob.io/run": run, "tfjob.io/tenant": "t"}, ip)


def test_the_product_policies_let_a_runs_pods_reach_each_other_dns_and_s3_only():
    network = NetworkSettings(s3_port=9000, dns_port=53)
    tenant = Tenant(name="test", quota={}, defaults={})
    tenant_policy = build_tenant_network_policy(tenant, network)
    run_policy = build_run_network_policy("tfjob-test", "job-aaaa", {}, {}, network)
    run_policy["metadata"]["namespace"] = "tfjob-test"
    chief = run_pod("chief", "job-aaaa", ip="10.77.1.50")
    worker = run_pod("worker", "job-aaaa", ip="10.77.2.50")
    other_run = run_pod("other", "job-bbbb", ip="10.77.1.51")
    neighbour = run_pod("n", "job-cccc", namespace="tfjob-research", ip="10.77.2.51")
    view = ClusterView(
        pods=[chief, worker, other_run, neighbour],
        namespaces={"tfjob-test": {}, "tfjob-research": {}},
        policies=[tenant_policy, run_policy],
    )
    rules = compute_pod_rules(chief, view, [S3, API])
    assert admits(rules.ingress, worker, 2222)
    assert not admits(rules.ingress, other_run, 2222) and not admits(rules.ingress, neighbour, 2222)
    assert admits(rules.egress, worker, 2222) and not admits(rules.egress, neighbour, 2222)
    assert admits(rules.egress, "10.0.0.2", 53, "UDP") and admits(rules.egress, "10.0.0.2", 53)
    assert not admits(rules.egress, "10.0.0.2", 80)
    assert {v.pod_port: v.allowed for v in rules.forwards} == {9000: True, 6443: False}
    # the tenant's policy alone (a pod of no run): nobody in, only DNS and S3 out
    lone = compute_pod_rules(other_run, ClusterView(pods=view.pods, policies=[tenant_policy]))
    assert lone.ingress.isolated and not admits(lone.ingress, chief, 2222)
    assert not admits(lone.egress, chief, 2222)


# ---- nft tables


def test_an_unrestricted_pod_gets_no_table():
    assert render_pod_table(PodRules()) == OPEN_SCRIPT


def test_overlapping_ports_are_merged_for_nft():
    spec = {
        "podSelector": {},
        "ingress": [{"ports": [{"port": 100, "endPort": 200}, {"port": 150}, {"port": 201}]}],
    }
    script = render_pod_table(rules_of(DB, policy("p", spec)))
    assert "tcp . 100-201" in script and "tcp . 150" not in script


needs_nft = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nft") is None, reason="loads tables: root and nft"
)


@pytest.fixture
def scratch_netns():
    name = f"lk-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name], check=False)


@needs_nft
def test_every_kind_of_rule_loads_into_a_pod_namespace(scratch_netns):
    everything = policy(
        "all",
        {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": DOCS_EXAMPLE["spec"]["ingress"]
            + [{"from": [{"ipBlock": {"cidr": "fd00::/8", "except": ["fd00::/16"]}}]}, {}],
            "egress": [
                {"to": [{"podSelector": {}}], "ports": [{"protocol": "SCTP"}, {"port": "grpc"}]},
                {"ports": [{"protocol": "UDP", "port": 53}, {"port": 53}, {"port": 9000}]},
            ],
        },
    )
    script = render_pod_table(rules_of(DB, everything, forwards=[S3, API]))
    apply_pod_table(scratch_netns, script)
    apply_pod_table(scratch_netns, script)  # replacing is one transaction, again and again
    listed = subprocess.run(
        ["ip", "netns", "exec", scratch_netns, "nft", "list", "table", "inet", "localkube"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "172.17.0.0/16" in listed and "dport 9000 accept" in listed
    assert "dport 6443 reject" in listed
    apply_pod_table(scratch_netns, OPEN_SCRIPT)
    gone = subprocess.run(
        ["ip", "netns", "exec", scratch_netns, "nft", "list", "tables"],
        capture_output=True,
        text=True,
    )
    assert "localkube" not in gone.stdout


@pytest.mark.parametrize(
    "spec",
    [
        {"podSelector": {}, "ingress": "everyone"},
        {"podSelector": {}, "ingress": [{"from": [{"podSelector": "app=x"}]}]},
        {"podSelector": {}, "policyTypes": "Ingress"},
    ],
)
def test_a_policy_of_an_unreadable_shape_closes_its_namespace_only(spec):
    rules = rules_of(DB, policy("odd", spec))
    assert rules.ingress.isolated and not any(admits(rules.ingress, p, 1) for p in EVERYONE)
    assert not rules_of(MYPROJECT_POD, policy("odd", spec)).ingress.isolated
