"""kubectl (Debian's kubernetes-client 1.20) against localkube: get (server-side Tables), watch,
describe, logs, create/apply, delete."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness.localkube_fixtures import FakeKubeletPod

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")


def kubectl(handle, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", handle.kubeconfig, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_get_prints_the_real_columns(localkube_api):
    nodes = kubectl(localkube_api, "get", "nodes").splitlines()
    assert nodes[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [line.split()[0] for line in nodes[1:]] == ["node-1", "node-2"]
    kubectl(
        localkube_api,
        "run",
        "kc",
        "--image=busybox:1.36",
        "--restart=Never",
        "--overrides",
        '{"spec": {"schedulerName": "nobody"}}',
    )
    pods = kubectl(localkube_api, "get", "pods", "-o", "wide").splitlines()
    assert pods[0].split()[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    assert pods[1].split()[:4] == ["kc", "0/1", "Pending", "0"]
    assert (
        kubectl(localkube_api, "get", "pod", "kc", "-o", "jsonpath={.spec.containers[0].image}")
        == "busybox:1.36"
    )


def test_describe_logs_and_delete(localkube_api):
    pod = FakeKubeletPod(localkube_api, "default")
    pod.append_log("main", [("stdout", "F", "from the log")])
    described = kubectl(localkube_api, "describe", "pod", pod.name)
    fields = dict(
        line.split(":", 1)
        for line in described.splitlines()
        if ":" in line and not line.startswith(" ")
    )
    assert fields["Name"].strip() == pod.name and fields["Node"].strip().startswith("node-1/")
    assert kubectl(localkube_api, "logs", pod.name) == "from the log\n"
    assert kubectl(localkube_api, "delete", "pod", pod.name).strip() == f'pod "{pod.name}" deleted'
    assert pod.name not in kubectl(localkube_api, "get", "pods", "-o", "name")


def test_create_and_apply_configmaps(localkube_api):
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied}\ndata: {k: v1}\n"
    kubectl(localkube_api, "apply", "--validate=false", "-f", "-", stdin=manifest)
    kubectl(
        localkube_api, "apply", "--validate=false", "-f", "-", stdin=manifest.replace("v1}", "v2}")
    )
    assert kubectl(localkube_api, "get", "cm", "applied", "-o", "jsonpath={.data.k}") == "v2"
    kubectl(localkube_api, "create", "configmap", "made", "--from-literal=a=b")
    listed = kubectl(localkube_api, "get", "configmaps").splitlines()
    assert listed[0].split() == ["NAME", "DATA", "AGE"]
    assert {line.split()[0] for line in listed[1:]} >= {"applied", "made"}
