"""The trigger that waits for the end of training, in Airflow's triggerer.

Training can take hours; waiting in a worker would hold a slot the whole time.
`TrainingTrigger` watches the run's pods (one Kubernetes watch through the
provider's `AsyncKubernetesHook`, relisting when the watch ends or its
resourceVersion is too old) and fires once the run is decided, using the same
verdict as everything else (`operators.replicas.judge_training`): success by
the success policy, failure as soon as a chief or worker fails.

Live logs: while it waits, the trigger follows the main container log of the
deciding replicas (the chief, or the first workers: at most `LIVE_LOG_REPLICAS`;
`follow=True`, one stream each, started once the pod's container has started)
and logs each line as `[role-index] line`. Not every replica's: a stream per
replica held a connection per pod open in the triggerer for the whole training
(issue 18: 900 open connections for 100 jobs of 8); the other replicas' logs
are written by `train` when it resumes, and can be read live, while someone
needs them, in the TFJob tab or with `tshell logs`. Airflow's triggerer
writes what a trigger logs into the deferred task's log (the
`*.trigger.<job>.log` file next to it), which the UI and the REST log
endpoint show while the task is deferred. The event carries how many lines of
each replica were logged (`streamed`), so `train`, when it resumes, writes
only the rest: no line twice. The event carries no log text.

A replica's log is untrusted and shares the triggerer's event loop with every
other run's trigger: a line is cut at LOG_LINE_MAX_BYTES (operators/podlogs.py
`LineSplitter`, work per chunk proportional to the chunk), the follower
yields to the loop after every chunk, and it asks for at most
LIVE_LOG_MAX_BYTES of a replica's log (`limitBytes`).

A blinking control plane: a 5xx or 429 answer, a dropped connection or a
timeout while listing or watching is transient (operators/transient.py): the
trigger backs off (0.5 s doubling to 10 s, with jitter) and relists, until
its deadline; it never fails the run on one such error. Only a final answer
(403, 404, ...) fails it. When the deadline comes while the API still fails,
it fires `deadline` with the last pods it saw and the error (`api_error`).

Grants: while it waits, the trigger also keeps the pods' S3 grants valid
(operators/grants.py): it signs them anew when it starts and then every
`refresh_every` seconds, and rewrites the run's two Secrets. A refresh that
fails is logged and tried again sooner; it never fails the run by itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING

from airflow.triggers.base import BaseTrigger, TriggerEvent

from operators.grants import grant_patches, sign_grants
from operators.podlogs import LineSplitter, decode_log_line
from operators.replicas import judge_training, read_replica_status
from operators.settings import GRANT_RETRY_SECONDS, LIVE_LOG_MAX_BYTES
from operators.transient import API_BACKOFF, GONE_STATUS, describe_api_error, is_transient
from runtime.protocol import MAIN_CONTAINER
from tfjob.jsontypes import JsonObject
from tfjob.records.replicas import TrainingEvent, TrainingState
from tfjob.records.run import GrantPlan

if TYPE_CHECKING:
    from kubernetes_asyncio import client as async_k8s

WATCH_CHUNK_SECONDS = 60
# Replicas whose log the trigger follows live: the first of `deciding` (see the docstring).
LIVE_LOG_REPLICAS = 2
# The live follower lets the loop's other coroutines run after every chunk of a log
# stream and after this many lines logged (logging a line is the costly part).
LIVE_LOG_LINES_PER_TURN = 128
# Once the run is decided: how long a replica whose container ended may take to
# deliver the rest of its log stream before the trigger fires anyway.
LOG_DRAIN_SECONDS = 5.0


def has_main_container_started(pod: JsonObject) -> bool:
    """The main container runs or ran: its log can be followed."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == MAIN_CONTAINER:
            state = status.get("state") or {}
            return state.get("running") is not None or state.get("terminated") is not None
    return False


def has_main_container_ended(pod: JsonObject) -> bool:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == MAIN_CONTAINER:
            return (status.get("state") or {}).get("terminated") is not None
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def decide_training(
    pods: dict[str, JsonObject], deciding: list[str], expected_pods: list[str], deadline: float
) -> TrainingEvent | None:
    """The trigger's event for these pods (nothing streamed yet), or None while training runs."""
    verdict = judge_training(pods.values(), deciding, expected_pods)
    if verdict.state is TrainingState.RUNNING and time.time() < deadline:
        return None
    state = TrainingState.DEADLINE if verdict.state is TrainingState.RUNNING else verdict.state
    return TrainingEvent(
        state=state,
        replicas=verdict.replicas,
        failed=verdict.failed_replica,
        deciding=tuple(verdict.deciding),
    )


class TrainingTrigger(BaseTrigger):
    """Fires one `TrainingEvent` (as its payload) once training is decided."""

    def __init__(
        self,
        *,
        namespace: str,
        selector: str,
        expected_pods: list[str],
        deciding: list[str],
        deadline: float,
        kubernetes_conn_id: str,
        not_before: float = 0.0,
        grants: JsonObject | None = None,
    ) -> None:
        super().__init__()
        self.namespace = namespace
        self.selector = selector
        self.expected_pods = list(expected_pods)
        self.deciding = list(deciding)
        self.deadline = deadline  # wall-clock epoch seconds
        self.kubernetes_conn_id = kubernetes_conn_id
        self.not_before = not_before  # wall-clock epoch seconds: never fire sooner
        self.grants = grants  # a GrantPlan's payload: keep the pods' S3 grants valid

    def serialize(self) -> tuple[str, JsonObject]:
        return (
            "operators.triggers.TrainingTrigger",
            {
                "namespace": self.namespace,
                "selector": self.selector,
                "expected_pods": self.expected_pods,
                "deciding": self.deciding,
                "deadline": self.deadline,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "not_before": self.not_before,
                "grants": self.grants,
            },
        )

    def _event_if_decided(self, pods: dict[str, JsonObject]) -> TrainingEvent | None:
        return decide_training(pods, self.deciding, self.expected_pods, self.deadline)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
        from kubernetes_asyncio import client as async_client

        hook = AsyncKubernetesHook(conn_id=self.kubernetes_conn_id)
        async with hook.get_conn() as api_client:
            core = async_client.CoreV1Api(api_client)
            followers: dict[str, asyncio.Task] = {}
            streamed: dict[str, int] = {}
            helpers = [asyncio.create_task(self._keep_grants_valid(core))] if self.grants else []
            try:
                pods, decided = await self._await_decision(api_client, core, followers, streamed)
                await self._drain_followers(pods, followers)
                await asyncio.sleep(max(0.0, self.not_before - time.time()))
            finally:
                for task in [*followers.values(), *helpers]:
                    task.cancel()
                await asyncio.gather(*followers.values(), *helpers, return_exceptions=True)
            yield TriggerEvent(replace(decided, streamed=dict(streamed)).to_payload())

    async def _keep_grants_valid(self, core: async_k8s.CoreV1Api) -> None:
        """Sign the run's S3 grants now and every `refresh_every` seconds; rewrite the Secrets."""
        from asgiref.sync import sync_to_async

        plan = GrantPlan.from_payload(self.grants or {})
        while True:
            try:
                grants = await sync_to_async(sign_grants)(plan)
                for name, patch in grant_patches(plan, grants):
                    await core.patch_namespaced_secret(name, plan.namespace, patch)
                self.log.info(
                    "S3 grants of run %s signed anew (valid %ds; next in %.0fs)",
                    plan.run_key,
                    plan.lifetime,
                    plan.refresh_every,
                )
                await asyncio.sleep(plan.refresh_every)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the grants still live; the next try may succeed
                wait = min(GRANT_RETRY_SECONDS, plan.refresh_every)
                self.log.warning(
                    "could not sign the S3 grants of run %s anew (%s: %s); trying again in %.0fs",
                    plan.run_key,
                    type(exc).__name__,
                    exc,
                    wait,
                )
                await asyncio.sleep(wait)

    def _follow_started_replicas(
        self,
        core: async_k8s.CoreV1Api,
        pods: dict[str, JsonObject],
        followers: dict[str, asyncio.Task],
        streamed: dict[str, int],
    ) -> None:
        live = set(self.deciding[:LIVE_LOG_REPLICAS])
        for name, pod in pods.items():
            if name not in followers and has_main_container_started(pod):
                replica = read_replica_status(pod)
                if replica.replica_id not in live:
                    continue
                followers[name] = asyncio.create_task(
                    self._follow_log(core, name, replica.replica_id, streamed)
                )

    async def _follow_log(
        self, core: async_k8s.CoreV1Api, pod: str, replica_id: str, streamed: dict[str, int]
    ) -> None:
        """Log every line of the replica's main container as `[role-index] line`, as it comes."""
        streamed.setdefault(replica_id, 0)
        try:
            response = await core.read_namespaced_pod_log(
                pod,
                self.namespace,
                container=MAIN_CONTAINER,
                follow=True,
                limit_bytes=LIVE_LOG_MAX_BYTES,
                _preload_content=False,
            )
            async with response:
                received = await self._log_stream_lines(
                    response.content.iter_any(), replica_id, streamed
                )
            if received >= LIVE_LOG_MAX_BYTES:
                self.log.info(
                    "[%s] live log stopped after %d bytes; train and the archive have the rest",
                    replica_id,
                    received,
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # live logs are a convenience: train prints the rest at the end
            self.log.warning("[%s] live log stream ended: %s", replica_id, exc)

    async def _log_stream_lines(
        self, chunks: AsyncIterator[bytes], replica_id: str, streamed: dict[str, int]
    ) -> int:
        """Log the stream's lines (each cut at LOG_LINE_MAX_BYTES); return the bytes received."""
        splitter = LineSplitter()
        received = 0
        async for chunk in chunks:
            chunk = chunk[: LIVE_LOG_MAX_BYTES - received]  # a server may ignore limitBytes
            received += len(chunk)
            for number, line in enumerate(splitter.feed(chunk), 1):
                self.log.info("[%s] %s", replica_id, decode_log_line(line))
                streamed[replica_id] += 1
                if number % LIVE_LOG_LINES_PER_TURN == 0:
                    await asyncio.sleep(0)
            # A stream whose bytes are already buffered never suspends: let the
            # loop's other coroutines (other runs' triggers) run between chunks.
            await asyncio.sleep(0)
            if received >= LIVE_LOG_MAX_BYTES:
                break
        for line in splitter.finish():
            self.log.info("[%s] %s", replica_id, decode_log_line(line))
            streamed[replica_id] += 1
        return received

    async def _drain_followers(
        self, pods: dict[str, JsonObject], followers: dict[str, asyncio.Task]
    ) -> None:
        """Let the streams of containers that ended deliver their last lines (bounded)."""
        ending = [
            task
            for name, task in followers.items()
            if name in pods and has_main_container_ended(pods[name])
        ]
        if ending:
            await asyncio.wait(ending, timeout=LOG_DRAIN_SECONDS)

    def _event_at_deadline(
        self, pods: dict[str, JsonObject] | None, failure: BaseException
    ) -> TrainingEvent:
        """The event when the deadline came while the API was failing: the last pods seen."""
        decided = None  # never listed: nothing to judge, the deadline decides
        if pods is not None:
            decided = decide_training(pods, self.deciding, self.expected_pods, self.deadline)
        decided = decided or TrainingEvent(TrainingState.DEADLINE, deciding=tuple(self.deciding))
        return replace(decided, api_error=describe_api_error(failure))

    async def _await_decision(
        self,
        api_client: async_k8s.ApiClient,
        core: async_k8s.CoreV1Api,
        followers: dict[str, asyncio.Task],
        streamed: dict[str, int],
    ) -> tuple[dict[str, JsonObject], TrainingEvent]:
        """List, then watch from the list's resourceVersion, until the training is decided.

        A transient failure of the list or the watch (5xx, 429, a dropped
        connection, a timeout: operators/transient.py) is followed by a back-off
        and a relist, until the trigger's deadline; 410 Gone relists at once;
        any other API error (403, 404, ...) is final and fails the trigger.
        """
        from kubernetes_asyncio import watch

        pods: dict[str, JsonObject] | None = None  # the last pods seen
        backoff = API_BACKOFF.schedule()
        while True:
            try:
                listing = await core.list_namespaced_pod(
                    self.namespace, label_selector=self.selector
                )
                backoff.reset()
                pods = {
                    p.metadata.name: api_client.sanitize_for_serialization(p) for p in listing.items
                }
                self._follow_started_replicas(core, pods, followers, streamed)
                event = self._event_if_decided(pods)
                if event is not None:
                    return pods, event
                left = self.deadline - time.time()
                stream = watch.Watch()
                async with stream.stream(
                    core.list_namespaced_pod,
                    self.namespace,
                    label_selector=self.selector,
                    resource_version=listing.metadata.resource_version,
                    timeout_seconds=max(1, int(min(left, WATCH_CHUNK_SECONDS))),
                ) as events:
                    async for change in events:
                        raw = change["raw_object"]
                        name = raw["metadata"]["name"]
                        if change["type"] == "DELETED":
                            pods.pop(name, None)
                        else:
                            pods[name] = raw
                        self._follow_started_replicas(core, pods, followers, streamed)
                        event = self._event_if_decided(pods)
                        if event is not None:
                            return pods, event
                continue  # the watch ended (its timeout): relist
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if getattr(exc, "status", None) == GONE_STATUS:
                    continue  # resourceVersion too old: relist at once
                if not is_transient(exc):
                    raise
                failure = exc
            left = self.deadline - time.time()
            if left <= 0:
                self.log.warning(
                    "deadline of run %s reached while the Kubernetes API failed (%s)",
                    self.selector,
                    describe_api_error(failure),
                )
                return pods or {}, self._event_at_deadline(pods, failure)
            delay = min(backoff.next_delay(), left)
            # A blink of the control plane says nothing about the pods: ask again.
            self.log.warning(
                "pods of run %s: %s (transient); relisting in %.1fs",
                self.selector,
                describe_api_error(failure),
                delay,
            )
            await asyncio.sleep(delay)
