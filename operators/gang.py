"""A run's gang of replica pods: create it, wait until it runs, stop it.

Two tasks start gangs: `launch` starts a run's first one, and `train` starts
another when the restart policy restarts the run (operators/restart.py). Both
must create the pods the same way (a bounded pool of creates; a create answered
409 after a try whose answer was lost counts as made), judge the start by the same verdict
(`operators.replicas.judge_gang_start`, with the scheduler's and the
kubelet's reasons when it fails) and stop a gang the same way, so this module
is the one place for it. The functions take the client and the logger: the
launch passes the provider's, the train step its own.

Stopping a gang keeps one promise: **no run ever has two gangs' pods alive at
once.** The pods are deleted with their own grace period (never
`gracePeriodSeconds=0`, which removes the object while its containers may
still run) and `stop_gang` returns only once the API server has removed them,
i.e. once the kubelet confirmed that their containers ended. A pod still
there after the longest grace period plus a margin fails the stop, naming
it; the caller then never creates the next gang. The run's ConfigMap (its
admission ticket) and Secrets (its S3 grants) are not touched: a restarted
gang mounts the same ones.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from airflow.sdk.exceptions import AirflowException
from kubernetes import client as k8s

from operators import kubeobjects
from operators.errors import PipelineError
from operators.grants import sign_grants, write_grants
from operators.logreads import read_newest_lines
from operators.replicas import (
    GangState,
    describe_startup_failure,
    judge_gang_start,
    judge_replica_start,
    read_replica_status,
)
from operators.runinfo import RunInfo
from operators.runobjects import RunObjects
from operators.settings import GRANT_RETRY_SECONDS, LOG_TAIL_MAX_BYTES
from operators.transient import call_with_retries, describe_api_error, is_transient
from runtime.protocol import INIT_CONTAINER
from tfjob.clusterspec import Endpoint
from tfjob.jsontypes import JsonObject
from tfjob.records.replicas import ReplicaStatus
from tfjob.records.run import GangEndpoints, GrantPlan

T = TypeVar("T")

INIT_LOG_LINES = 20
# Each create of a gang rides out a blinking API server this long.
GANG_API_PATIENCE_SECONDS = 120.0
# A gang's pods are created this many at once: one after another, a 1,024-pod gang waited
# 1,024 round trips before its last pod could be scheduled. 8 stays within the connection pool
# of the kubernetes client (5 per CPU) and keeps one API server busy without queueing on it.
CREATE_WORKERS = 8


class GangStartError(PipelineError, AirflowException):
    """Not every replica of a run started in time; the message says why for each pod.

    `failed` holds the replicas that cannot start (empty when the start timed out):
    the restart verdict judges them (operators/launch.py)."""

    def __init__(self, message: str, failed: Sequence[ReplicaStatus] = ()) -> None:
        super().__init__(message)
        self.failed = tuple(failed)


class GangStopError(PipelineError, AirflowException):
    """A gang's pods were still there after their grace period: the next gang must not start."""


def patiently(
    call: Callable[[], T],
    what: str,
    log: logging.Logger,
    patience: float = GANG_API_PATIENCE_SECONDS,
) -> T:
    """`call()`, asked again while the API server blinks (operators/transient.py)."""
    return call_with_retries(call, deadline=time.monotonic() + patience, what=what, log=log)


def create_replica_pod(create: Callable[[], object], name: str, log: logging.Logger) -> None:
    """`create()` one replica pod, asked again while the API server blinks.

    A 409 after a try whose answer was lost means that try made the pod: the
    pods of an earlier try or gang are gone by then (the caller waited for it).
    A 409 on the first try is an error: someone else's pod has the name.
    """
    from kubernetes.client.exceptions import ApiException

    lost_answer = False

    def attempt() -> None:
        nonlocal lost_answer
        try:
            create()
        except ApiException as exc:
            if exc.status == 409 and lost_answer:
                log.info("pod %s exists: an earlier create got through", name)
                return
            lost_answer = lost_answer or is_transient(exc)
            raise
        except Exception as exc:
            lost_answer = lost_answer or is_transient(exc)
            raise

    patiently(attempt, f"creating pod {name}", log)


def create_replica_pods(
    create: Callable[[JsonObject], object],
    manifests: Iterable[JsonObject],
    log: logging.Logger,
    workers: int = CREATE_WORKERS,
) -> list[str]:
    """`create(manifest)` each replica pod as `create_replica_pod` does, up to `workers` at
    once; return the pod names in the manifests' order.

    Every pod is tried even when one fails; then the first failure (in the manifests'
    order) is raised, the pods made so far stay (the caller's cleanup removes them by label).
    """
    if workers < 1:
        raise ValueError(f"workers: {workers} given; at least 1 is needed")
    bodies = list(manifests)
    names = [body["metadata"]["name"] for body in bodies]

    def make(body: JsonObject) -> BaseException | None:
        try:
            create_replica_pod(lambda: create(body), body["metadata"]["name"], log)
        except Exception as exc:
            return exc
        return None

    if len(bodies) <= 1 or workers == 1:
        failures = [make(body) for body in bodies]
    else:
        with ThreadPoolExecutor(min(workers, len(bodies)), thread_name_prefix="create") as pool:
            failures = list(pool.map(make, bodies))
    for failure in failures:
        if failure is not None:
            raise failure
    return names


class GangStartTracker:
    """Whether a gang's start is settled (all READY, or one FAILED), judged incrementally.

    The gang's pods are all created before the watch starts, so an expected pod that a
    listing lacks was deleted: it failed (`vanished`), and the start is settled at once
    rather than at `startup_timeout`.

    The gang watch asks after every event with all the pods it knows. Judging each pod
    again every time made a start O(n²) (at 1,024 pods, seconds of CPU per start); here
    only a pod whose resourceVersion changed is judged again, and the verdicts are counted.
    """

    def __init__(self, expected: Iterable[str]) -> None:
        self.expected = frozenset(expected)
        self.known: dict[str, tuple[str | None, GangState]] = {}
        self.counts = dict.fromkeys(GangState, 0)
        self.vanished: set[str] = set()  # created, then gone: deleted during the start

    def _set(self, name: str, entry: tuple[str | None, GangState] | None) -> None:
        old = self.known.pop(name, None)
        if old is not None:
            self.counts[old[1]] -= 1
        if entry is not None:
            self.known[name] = entry
            self.counts[entry[1]] += 1

    def settled(self, pods: list[Mapping[str, object]]) -> bool:
        present = 0
        for pod in pods:
            meta = pod.get("metadata") or {}
            name = meta.get("name")
            if name not in self.expected:
                continue
            present += 1
            version = meta.get("resourceVersion")
            known = self.known.get(name)
            if known is None or version is None or known[0] != version:
                self._set(name, (version, judge_replica_start(read_replica_status(pod))))
                self.vanished.discard(name)
        if present < len(self.expected):  # every pod was created before the watch: deleted
            names = {(p.get("metadata") or {}).get("name") for p in pods}
            for name in self.expected - names - self.vanished:
                self._set(name, (None, GangState.FAILED))
                self.vanished.add(name)
        return bool(self.counts[GangState.FAILED]) or (
            self.counts[GangState.READY] == len(self.expected)
        )


def await_gang_start(
    api: k8s.CoreV1Api, run: RunInfo, plan: GrantPlan | None, log: logging.Logger
) -> GangEndpoints:
    """Watch until every pod of `run` runs with an IP; fail with the reasons when not in time.

    Returns where each replica listens. Pods waiting long (for
    GPUs, for a node) still find valid grants: they are signed anew every
    `plan.refresh_every` seconds of the wait.
    """
    expected = run.pod_names()
    deadline = time.monotonic() + run.request.startup_timeout
    tracker = GangStartTracker(expected)
    settled = tracker.settled

    # No plan (a caller that holds none): the grants are not refreshed during this wait.
    next_refresh = plan.refresh_every if plan is not None else float("inf")
    while True:
        refresh_at = time.monotonic() + next_refresh
        pods = kubeobjects.watch_run_pods(
            api, run.namespace, run.selector, min(deadline, refresh_at), settled
        )
        if settled(pods) or time.monotonic() >= deadline or plan is None:
            break
        try:
            write_grants(api, plan, sign_grants(plan))
            next_refresh = plan.refresh_every
            log.info("gang still starting: S3 grants signed anew")
        except Exception as exc:
            if not is_transient(exc):
                raise
            # The grants still hold (a refresh comes at half their lifetime): try again soon.
            next_refresh = min(GRANT_RETRY_SECONDS, plan.refresh_every)
            log.warning(
                "gang still starting: could not rewrite the S3 grants (%s); trying again in %.0fs",
                describe_api_error(exc),
                next_refresh,
            )
    verdict = judge_gang_start(pods, expected, tracker.vanished)
    if verdict.state is GangState.READY:
        return GangEndpoints(
            tuple(Endpoint(r.role, r.index, r.ip, run.request.port) for r in verdict.ready)
        )
    problems = verdict.failed + verdict.waiting
    what = (
        "replicas failed to start"
        if verdict.state is GangState.FAILED
        else f"not every replica was running after startup_timeout={run.request.startup_timeout}s"
    )
    reasons = [explain_pod(api, run, replica, log) for replica in problems]
    raise GangStartError(
        f"gang start of run {run.run_key}: {what}\n" + "\n".join(reasons), verdict.failed
    )


def explain_pod(
    api: k8s.CoreV1Api, run: RunInfo, replica: ReplicaStatus, log: logging.Logger
) -> str:
    """Why this pod did not start: its reason, Warning events, the init container's last lines."""
    events: list[JsonObject] = []
    init_log = None
    try:
        events = kubeobjects.list_pod_events(api, run.namespace, replica.pod)
        if replica.init_exit_code not in (None, 0):
            init_log = read_newest_lines(
                api, run.namespace, replica.pod, INIT_CONTAINER, INIT_LOG_LINES, LOG_TAIL_MAX_BYTES
            )
    except Exception as exc:  # the explanation must not hide the failure itself
        log.warning("could not read events or logs of pod %s: %s", replica.pod, exc)
    return describe_startup_failure(replica, events, init_log)


def stop_gang(api: k8s.CoreV1Api, run: RunInfo, log: logging.Logger) -> list[str]:
    """Delete the run's pods with their own grace period and return once they are gone.

    Returns `Pod/name` of each pod deleted. Raises GangStopError naming the
    pods still there after `runobjects.leftover_wait_seconds`: the caller must not
    start another gang then (see the module docstring). ConfigMaps and Secrets stay.
    """
    pods = RunObjects.of(api, run).pods_only()
    removal = pods.remove(log, doing=f"stopping the gang of run {run.run_key}")
    if removal.left:
        raise GangStopError(
            f"the gang of run {run.run_key} was still there {removal.timeout}s after it was "
            f"deleted: {', '.join(removal.left)}; no new gang is started while its containers "
            "may still run"
        )
    return removal.deleted
