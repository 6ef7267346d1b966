"""Delivering each replica's `cluster.json` into its running container by exec.

The contract (docs/architecture.md) fixes the exact command: write a temp file
and rename it, so the bootstrap, which polls for `cluster.json`, never reads a
half-written file. The JSON travels as an argv element, not through stdin, so
the exec needs no stdin channel.

A job's replicas get their files in parallel (a bounded pool of threads): one
exec is mostly waiting (a WebSocket handshake, then the server starting a
process in the pod), so delivering one pod after another made a 32-replica job
wait ~32 exec round trips after its last pod was Running. Each thread uses its
own API client because `kubernetes.stream.stream` swaps the client's
`request` method for the duration of a call, which is not safe to share.
"""

from __future__ import annotations

import queue
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client as k8s

from operators.kubeobjects import exec_in_container
from operators.replicas import MAIN_CONTAINER

WRITE_SCRIPT = (
    'printf "%s" "$1" > /tfjob/config/.cluster.json.tmp'
    " && mv /tfjob/config/.cluster.json.tmp /tfjob/config/cluster.json"
)
EXEC_TIMEOUT_SECONDS = 30
DELIVERY_WORKERS = 8


class DeliveryError(RuntimeError):
    """The ClusterSpec could not be written into a replica."""


def build_write_command(content: str) -> list[str]:
    return ["sh", "-c", WRITE_SCRIPT, "sh", content]


def deliver_cluster_file(api: k8s.CoreV1Api, namespace: str, pod: str, content: str) -> None:
    """Write `content` as /tfjob/config/cluster.json in the pod's tensorflow container."""
    done = exec_in_container(
        api, namespace, pod, MAIN_CONTAINER, build_write_command(content), EXEC_TIMEOUT_SECONDS
    )
    code, stderr = done.returncode, done.stderr
    if code is None:
        raise DeliveryError(
            f"pod {pod}: writing cluster.json did not finish within {EXEC_TIMEOUT_SECONDS}s"
        )
    if code != 0:
        raise DeliveryError(
            f"pod {pod}: writing cluster.json exited with code {code}: {stderr.strip()}"
        )


def clone_core_api(api: k8s.CoreV1Api) -> k8s.CoreV1Api:
    """A client with the same configuration (server, credentials) and its own state."""
    return k8s.CoreV1Api(k8s.ApiClient(api.api_client.configuration))


def deliver_cluster_files(
    api: k8s.CoreV1Api,
    namespace: str,
    contents: Mapping[str, str],
    workers: int = DELIVERY_WORKERS,
) -> None:
    """Write each pod's cluster.json (`contents`: pod name → JSON), up to `workers` at once.

    Every pod is tried even when one fails; then one DeliveryError names each
    pod that failed and why.
    """
    if workers < 1:
        raise ValueError(f"workers: {workers} given; at least 1 is needed")
    if len(contents) <= 1 or workers == 1:
        failures = [_try_deliver(api, namespace, pod, text) for pod, text in contents.items()]
    else:
        width = min(workers, len(contents))
        clients: queue.SimpleQueue[k8s.CoreV1Api] = queue.SimpleQueue()
        spares = [clone_core_api(api) for _ in range(width)]
        for spare in spares:
            clients.put(spare)

        def deliver_with_spare(item: tuple[str, str]) -> str | None:
            own = clients.get()
            try:
                return _try_deliver(own, namespace, item[0], item[1])
            finally:
                clients.put(own)

        try:
            with ThreadPoolExecutor(width, thread_name_prefix="deliver") as pool:
                failures = list(pool.map(deliver_with_spare, contents.items()))
        finally:
            for spare in spares:
                spare.api_client.close()
    problems = [problem for problem in failures if problem]
    if problems:
        raise DeliveryError(
            f"cluster.json reached {len(contents) - len(problems)} of {len(contents)} pods; "
            + "; ".join(problems)
        )


def _try_deliver(api: k8s.CoreV1Api, namespace: str, pod: str, content: str) -> str | None:
    """None when delivered, else a sentence naming the pod and what went wrong."""
    try:
        deliver_cluster_file(api, namespace, pod, content)
    except DeliveryError as exc:
        return str(exc)
    except Exception as exc:  # an API error (pod gone, forbidden) or a broken connection
        reason = getattr(exc, "reason", None) or exc.__class__.__name__
        status = getattr(exc, "status", None)
        return f"pod {pod}: exec failed" + (
            f" ({status} {reason})" if status else f": {reason}: {exc}"
        )
