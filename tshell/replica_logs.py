"""Live state and logs of a run's replica pods, read from Kubernetes, while a run trains.

Why this exists: the pipeline's `train` task defers to the triggerer, so the
Airflow task log holds the replicas' output only once training has ended.
While it runs the only live source is the pods themselves. The pods are found
by the run's labels (`tfjob.io/run=<run key>`, plus role and index), in the
namespace the `validate` task recorded; their `tensorflow` container's log is
read, and with `follow` every selected pod is followed at once, each line
prefixed `[role-index]` when there is more than one pod.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runtime.protocol import MAIN_CONTAINER
from tfjob.naming import LABEL_INDEX, LABEL_ROLE, LABEL_RUN
from tshell.errors import TshellError

if TYPE_CHECKING:
    from kubernetes import client as k8s

# A followed pod may still be starting (bundle fetch, image): wait this long for its container.
CONTAINER_START_TIMEOUT_S = 300.0
START_POLL_S = 0.5
_END = object()


class ReplicaLogError(TshellError):
    """The pods cannot be read; the message says which and why."""


@dataclass(frozen=True)
class ReplicaPod:
    name: str
    role: str
    index: str
    phase: str = ""

    @property
    def replica_id(self) -> str:
        return f"{self.role}-{self.index}"


def make_core_api(kubeconfig: str) -> k8s.CoreV1Api:
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=kubeconfig)
    return client.CoreV1Api(api_client)


def list_replica_pods(
    core: k8s.CoreV1Api, namespace: str, run_key: str, role: str | None, index: int | None
) -> list[ReplicaPod]:
    """The run's replica pods, optionally only one role (and index), in a stable order."""
    from kubernetes.client.exceptions import ApiException

    selector = f"{LABEL_RUN}={run_key}"
    if role is not None:
        selector += f",{LABEL_ROLE}={role}"
        if index is not None:
            selector += f",{LABEL_INDEX}={index}"
    try:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    except ApiException as error:
        raise ReplicaLogError(
            f"cannot list pods {selector!r} in namespace {namespace!r}: "
            f"HTTP {error.status} {error.reason}"
        ) from None
    found = [
        ReplicaPod(
            p.metadata.name,
            p.metadata.labels.get(LABEL_ROLE, "?"),
            p.metadata.labels.get(LABEL_INDEX, "?"),
            replica_phase(p),
        )
        for p in pods
    ]
    return sorted(found, key=lambda p: (p.role, p.index))


def replica_phase(pod: Any) -> str:
    """The pod's phase as its replica sees it: the model owner's keeper container keeps the
    pod Running after the `tensorflow` container ended, which then decides (as in
    operators/replicas.read_replica_status)."""
    phase = (pod.status.phase if pod.status else None) or "Pending"
    for status in (pod.status.container_statuses if pod.status else None) or []:
        ended = status.state.terminated if status.state else None
        if phase == "Running" and status.name == MAIN_CONTAINER and ended is not None:
            return "Succeeded" if ended.exit_code == 0 else "Failed"
    return phase


def _open_log(core: k8s.CoreV1Api, namespace: str, pod: ReplicaPod, follow: bool) -> Any | None:
    """The log stream of the pod's main container; None when it has not started and not `follow`."""
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + CONTAINER_START_TIMEOUT_S
    while True:
        try:
            return core.read_namespaced_pod_log(
                pod.name,
                namespace,
                container=MAIN_CONTAINER,
                follow=follow,
                _preload_content=False,
            )
        except ApiException as error:
            # 400 "container ... is waiting to start": the pod is still pulling or fetching.
            if error.status != 400 or not follow or time.monotonic() > deadline:
                if error.status == 400:
                    return None
                raise ReplicaLogError(
                    f"cannot read the log of pod {pod.name} in {namespace}: "
                    f"HTTP {error.status} {error.reason}"
                ) from None
            time.sleep(START_POLL_S)


def _read_lines(
    core: k8s.CoreV1Api, namespace: str, pod: ReplicaPod, follow: bool
) -> Iterator[str]:
    response = _open_log(core, namespace, pod, follow)
    if response is None:
        yield "(no log yet: the container has not started)"
        return
    pending = b""
    try:
        for chunk in response.stream(4096):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode(errors="replace")
        if pending:
            yield pending.decode(errors="replace")
    finally:
        response.release_conn()


def iter_replica_logs(
    core: k8s.CoreV1Api, namespace: str, pods: list[ReplicaPod], follow: bool
) -> Iterator[str]:
    """Lines of every pod's main container; prefixed `[role-index]` when several pods."""
    prefix = len(pods) > 1
    if not follow:
        for pod in pods:
            for line in _read_lines(core, namespace, pod, follow=False):
                yield f"[{pod.replica_id}] {line}" if prefix else line
        return
    lines: queue.Queue[Any] = queue.Queue()

    def pump(pod: ReplicaPod) -> None:
        try:
            for line in _read_lines(core, namespace, pod, follow=True):
                lines.put(f"[{pod.replica_id}] {line}" if prefix else line)
        except Exception as error:  # noqa: BLE001 - reported in the output, others go on
            lines.put(f"[{pod.replica_id}] (log stream ended: {error})")
        finally:
            lines.put(_END)

    for pod in pods:
        threading.Thread(target=pump, args=(pod,), daemon=True, name=f"log-{pod.name}").start()
    remaining = len(pods)
    while remaining:
        item = lines.get()
        if item is _END:
            remaining -= 1
        else:
            yield item
