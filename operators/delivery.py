"""Delivering each replica's `cluster.json` into its running container by exec.

The contract (docs/architecture.md) fixes the exact command: write a temp file
and rename it, so the bootstrap, which polls for `cluster.json`, never reads a
half-written file. The JSON travels as an argv element, not through stdin, so
the exec needs no stdin channel.
"""

from __future__ import annotations

from kubernetes import client as k8s
from kubernetes.stream import stream as kubernetes_stream

from operators.replicas import MAIN_CONTAINER

WRITE_SCRIPT = (
    'printf "%s" "$1" > /tfjob/config/.cluster.json.tmp'
    " && mv /tfjob/config/.cluster.json.tmp /tfjob/config/cluster.json"
)
EXEC_TIMEOUT_SECONDS = 30


class DeliveryError(RuntimeError):
    """The ClusterSpec could not be written into a replica."""


def build_write_command(content: str) -> list[str]:
    return ["sh", "-c", WRITE_SCRIPT, "sh", content]


def deliver_cluster_file(api: k8s.CoreV1Api, namespace: str, pod: str, content: str) -> None:
    """Write `content` as /tfjob/config/cluster.json in the pod's tensorflow container."""
    resp = kubernetes_stream(
        api.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        command=build_write_command(content),
        container=MAIN_CONTAINER,
        stdin=False,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
    )
    try:
        resp.run_forever(timeout=EXEC_TIMEOUT_SECONDS)
        stderr = resp.read_stderr() if resp.peek_stderr() else ""
        code = resp.returncode
    finally:
        resp.close()
    if code is None:
        raise DeliveryError(
            f"pod {pod}: writing cluster.json did not finish within {EXEC_TIMEOUT_SECONDS}s"
        )
    if code != 0:
        raise DeliveryError(
            f"pod {pod}: writing cluster.json exited with code {code}: {stderr.strip()}"
        )
