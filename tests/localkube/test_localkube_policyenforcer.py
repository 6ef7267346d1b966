"""What the kubelet's NetworkPolicy enforcer keeps of the cluster, and when it recomputes
(localkube/kubelet/policyenforcer.py); no server, no nft."""

from __future__ import annotations

from localkube.kubelet.policyenforcer import PolicyEnforcer


def pod(name, node="node-1", ip="10.77.1.2", phase="Running", labels=None):
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "python:3.11"}]},
        "status": {"podIP": ip, "phase": phase, "conditions": [{"type": "Ready"}]},
    }


def enforcer() -> PolicyEnforcer:
    return PolicyEnforcer(None, [], lambda node: node.startswith("hollow-"))  # type: ignore[arg-type]


def test_pods_of_simulated_nodes_and_pods_without_an_ip_are_no_peers():
    e = enforcer()
    assert not e.remember("pods", pod("h", node="hollow-1"), True)
    assert not e.remember("pods", pod("p", ip=None, phase="Pending"), True)
    assert e.remember("pods", pod("r"), True)
    assert set(e.pods) == {"uid-r"}


def test_only_changes_the_rules_read_ask_for_a_new_pass():
    e = enforcer()
    assert e.remember("pods", pod("r"), True)
    same_but_status = pod("r")
    same_but_status["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert not e.remember("pods", same_but_status, True)
    assert e.remember("pods", pod("r", labels={"app": "x"}), True)
    assert e.remember("pods", pod("r", phase="Succeeded"), True)  # finished: no peer any more
    assert "uid-r" not in e.pods


def test_a_relist_forgets_what_is_gone():
    e = enforcer()
    e.remember("policies", {"metadata": {"name": "a", "namespace": "ns"}, "spec": {}}, True)
    assert not e.replace_all(
        "policies", [{"metadata": {"name": "a", "namespace": "ns"}, "spec": {}}]
    )
    assert e.replace_all("policies", [])
    assert e.policies == {}
    assert e.replace_all("namespaces", [{"metadata": {"name": "ns", "labels": {"t": "1"}}}])
    assert e.namespaces == {"ns": {"t": "1"}}
