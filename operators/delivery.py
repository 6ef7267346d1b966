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

Delivery is idempotent and retried. Writing the same `cluster.json` twice is
harmless (temp file + rename: a reader sees the old file or the new one, never
a mix), so an exec that failed (an exception: the API server blinked, the
WebSocket dropped; or a non-zero exit; or no exit within the exec timeout) is
tried again for that replica only, with back-off, up to `DELIVERY_ATTEMPTS`
times and within `DELIVERY_BUDGET_SECONDS` for the whole job
(tfjob/timeline.py: the replicas wait for their ClusterSpec that long past
the latest gang start). A final API answer (403, 404: the pod is gone) is not
retried. Replicas already delivered are never written again.
"""

from __future__ import annotations

import json
import logging
import queue
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client as k8s

from operators import kubeobjects
from operators.errors import PipelineError
from operators.kubeobjects import exec_in_container
from operators.replicas import DECIDING_ROLES, read_replica_status
from operators.runinfo import RunInfo
from operators.transient import api_status_of, describe_api_error, is_transient
from runtime.backoff import BackoffPolicy, LastDelay, RetryState, call_with_backoff
from runtime.protocol import CLUSTERSPEC_FILE, CONFIG_DIR, MAIN_CONTAINER
from tfjob import naming
from tfjob.clusterspec import build_cluster_files, build_cluster_spec
from tfjob.jsontypes import JsonObject
from tfjob.records.run import GangEndpoints
from tfjob.timeline import DELIVERY_BUDGET_SECONDS

log = logging.getLogger(__name__)

WRITE_SCRIPT = (
    f'printf "%s" "$1" > {CONFIG_DIR}/.{CLUSTERSPEC_FILE}.tmp'
    f" && mv {CONFIG_DIR}/.{CLUSTERSPEC_FILE}.tmp {CONFIG_DIR}/{CLUSTERSPEC_FILE}"
)
EXEC_TIMEOUT_SECONDS = 30
DELIVERY_WORKERS = 8
# Tries per replica, and the back-off between two tries of one replica.
DELIVERY_ATTEMPTS = 5
DELIVERY_FIRST_DELAY_SECONDS = 1.0
DELIVERY_LONGEST_DELAY_SECONDS = 10.0


class DeliveryError(PipelineError, RuntimeError):
    """The ClusterSpec could not be written into a replica; `undelivered` names the pods
    (empty when the error is about one pod's single exec)."""

    def __init__(self, message: str, undelivered: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.undelivered = undelivered


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
    *,
    attempts: int | None = None,
    budget: float | None = None,
) -> None:
    """Write each pod's cluster.json (`contents`: pod name → JSON), up to `workers` at once.

    Each pod is tried up to `attempts` times (a failed exec is retried for that
    pod only) within `budget` seconds for the whole job. Every pod is tried
    even when one fails; then one DeliveryError names each pod that failed and
    why.
    """
    if workers < 1:
        raise ValueError(f"workers: {workers} given; at least 1 is needed")
    attempts = DELIVERY_ATTEMPTS if attempts is None else attempts
    if attempts < 1:
        raise ValueError(f"attempts: {attempts} given; at least 1 is needed")
    deadline = time.monotonic() + (DELIVERY_BUDGET_SECONDS if budget is None else budget)

    def deliver(own: k8s.CoreV1Api, pod: str, text: str) -> str | None:
        return _deliver_with_retries(own, namespace, pod, text, attempts, deadline)

    if len(contents) <= 1 or workers == 1:
        failures = [deliver(api, pod, text) for pod, text in contents.items()]
    else:
        width = min(workers, len(contents))
        clients: queue.SimpleQueue[k8s.CoreV1Api] = queue.SimpleQueue()
        spares = [clone_core_api(api) for _ in range(width)]
        for spare in spares:
            clients.put(spare)

        def deliver_with_spare(item: tuple[str, str]) -> str | None:
            own = clients.get()
            try:
                return deliver(own, item[0], item[1])
            finally:
                clients.put(own)

        try:
            with ThreadPoolExecutor(width, thread_name_prefix="deliver") as pool:
                failures = list(pool.map(deliver_with_spare, contents.items()))
        finally:
            for spare in spares:
                spare.api_client.close()
    problems = {pod: problem for pod, problem in zip(contents, failures, strict=True) if problem}
    if problems:
        raise DeliveryError(
            f"cluster.json reached {len(contents) - len(problems)} of {len(contents)} pods; "
            + "; ".join(problems.values()),
            tuple(problems),
        )


class _Undelivered(DeliveryError):
    """One try that did not write the file: why, and whether another try may succeed
    (caught inside this module; only its `problem` leaves it)."""

    def __init__(self, problem: str, retryable: bool) -> None:
        super().__init__(problem)
        self.problem, self.retryable = problem, retryable


def _deliver_with_retries(
    api: k8s.CoreV1Api, namespace: str, pod: str, content: str, attempts: int, deadline: float
) -> str | None:
    """None once delivered; else why the last try failed (and how many tries were made)."""
    policy = BackoffPolicy(
        first_delay=DELIVERY_FIRST_DELAY_SECONDS,
        max_delay=DELIVERY_LONGEST_DELAY_SECONDS,
        jitter=0.5,
        attempts=attempts,
        last_delay=LastDelay.WHOLE_OR_NONE,
    )
    tries = 0

    def attempt() -> None:
        nonlocal tries
        tries += 1
        problem, retryable = _try_deliver(api, namespace, pod, content)
        if problem is not None:
            raise _Undelivered(problem, retryable)

    def note(state: RetryState) -> None:
        log.warning(
            "pod %s: delivery try %d of %d failed: %s; trying again in %.1fs",
            pod,
            state.attempt,
            attempts,
            state.error,
            state.delay,
        )

    try:
        call_with_backoff(
            attempt,
            policy,
            on=lambda exc: isinstance(exc, _Undelivered) and exc.retryable,
            # A new try must be able to finish (its exec timeout) before the deadline.
            deadline=deadline - EXEC_TIMEOUT_SECONDS,
            on_retry=note,
        )
    except _Undelivered as failed:
        return failed.problem + (f" (after {tries} tries)" if tries > 1 else "")
    if tries > 1:
        log.info("pod %s: cluster.json delivered at try %d", pod, tries)
    return None


def _try_deliver(
    api: k8s.CoreV1Api, namespace: str, pod: str, content: str
) -> tuple[str | None, bool]:
    """(None, _) when delivered, else (a sentence naming the pod and what went wrong,
    whether another try may succeed)."""
    try:
        deliver_cluster_file(api, namespace, pod, content)
    except DeliveryError as exc:
        return str(exc), True  # a non-zero exit or no exit in time: the write may succeed next
    except Exception as exc:  # an API error (pod gone, forbidden) or a broken connection
        status = api_status_of(exc)
        final = status is not None and not is_transient(exc)
        reason = getattr(exc, "reason", None) or exc.__class__.__name__
        if getattr(exc, "status", None):
            return f"pod {pod}: exec failed ({exc.status} {reason})", not final
        detail = f"HTTP {status}" if status is not None else describe_api_error(exc)
        return f"pod {pod}: exec failed: {detail}", not final
    return None, False


def deliver_run_cluster_spec(
    api: k8s.CoreV1Api, run: RunInfo, endpoints: GangEndpoints
) -> JsonObject:
    """Build every replica's cluster.json from a gang's endpoints (as the gang start returns
    them) and deliver it; return the ClusterSpec.

    `clusterspec` calls it for a run's first gang, `train` for a restarted one.
    """
    found = list(endpoints.endpoints)
    cluster = build_cluster_spec(run.request, found)
    files = build_cluster_files(run.request, found)
    contents = {
        naming.pod_name(run.run_key, role, index): json.dumps(content, sort_keys=True)
        for (role, index), content in files.items()
    }
    deliver_cluster_files(api, run.namespace, contents)  # in parallel
    log.info("delivered cluster.json to %d pods: %s", len(contents), ", ".join(contents))
    return cluster


def is_deciding_pod(name: str) -> bool:
    """A chief's or worker's pod: one whose loss `train` judges."""
    parsed = naming.parse_pod_name(name)
    return parsed is not None and parsed[0] in DECIDING_ROLES


def find_deleted_pods(api: k8s.CoreV1Api, run: RunInfo) -> set[str]:
    """The run's pods that are gone or being deleted (deletionTimestamp set)."""
    pods = {
        pod["metadata"]["name"]: pod
        for pod in kubeobjects.list_run_pods(api, run.namespace, run.selector)
    }
    return {
        name
        for name in run.pod_names()
        if name not in pods or read_replica_status(pods[name]).deleted
    }


def deliver_first_cluster_spec(
    api: k8s.CoreV1Api, run: RunInfo, endpoints: GangEndpoints
) -> JsonObject:
    """`clusterspec`'s delivery to a run's first gang; return the ClusterSpec.

    A chief or worker deleted meanwhile (a drain, its node lost) cannot get its
    file and never will; when only such replicas missed it, the step succeeds and
    leaves the loss to `train`, whose first look sees the pod gone and judges it
    by the run's restart policy (a new gang, or a failure naming the deletion).
    Any other failure fails the step, a lost ps or evaluator too: no training
    verdict waits on those.
    """
    try:
        return deliver_run_cluster_spec(api, run, endpoints)
    except DeliveryError as failed:
        deleted = find_deleted_pods(api, run)
        judged = {name for name in deleted if is_deciding_pod(name)}
        if not failed.undelivered or not set(failed.undelivered) <= judged:
            raise
        log.warning(
            "%s; deleted meanwhile: %s: train judges the loss by the run's restart policy",
            failed,
            ", ".join(sorted(failed.undelivered)),
        )
        return build_cluster_spec(run.request, list(endpoints.endpoints))
