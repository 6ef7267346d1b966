"""The trigger that waits for the end of training, in Airflow's triggerer.

Training can take hours; waiting in a worker would hold a slot the whole time.
`TrainingTrigger` watches the run's pods (one Kubernetes watch through the
provider's `AsyncKubernetesHook`, relisting when the watch ends or its
resourceVersion is too old) and fires once the run is decided, using the same
verdict as everything else (`operators.replicas.judge_training`): success by
the success policy, failure as soon as a chief or worker fails. The event
carries only data (replica states), never logs: the `train` task reads the
logs when it resumes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from operators.replicas import TrainingState, judge_training

WATCH_CHUNK_SECONDS = 60


class TrainingTrigger(BaseTrigger):
    """Fires `{"state": succeeded|failed|deadline, "replicas": [...], "failed": {...}|None}`."""

    def __init__(
        self,
        *,
        namespace: str,
        selector: str,
        expected_pods: list[str],
        deciding: list[str],
        deadline: float,
        kubernetes_conn_id: str,
    ) -> None:
        super().__init__()
        self.namespace = namespace
        self.selector = selector
        self.expected_pods = list(expected_pods)
        self.deciding = list(deciding)
        self.deadline = deadline  # wall-clock epoch seconds
        self.kubernetes_conn_id = kubernetes_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "operators.triggers.TrainingTrigger",
            {
                "namespace": self.namespace,
                "selector": self.selector,
                "expected_pods": self.expected_pods,
                "deciding": self.deciding,
                "deadline": self.deadline,
                "kubernetes_conn_id": self.kubernetes_conn_id,
            },
        )

    def _event_if_decided(self, pods: dict[str, dict[str, Any]]) -> TriggerEvent | None:
        verdict = judge_training(pods.values(), self.deciding, self.expected_pods)
        if verdict.state is TrainingState.RUNNING and time.time() < self.deadline:
            return None
        state = verdict.state.value if verdict.state is not TrainingState.RUNNING else "deadline"
        return TriggerEvent(
            {
                "state": state,
                "replicas": [r.as_dict() for r in verdict.replicas],
                "failed": verdict.failed_replica.as_dict() if verdict.failed_replica else None,
                "deciding": list(verdict.deciding),
            }
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
        from kubernetes_asyncio import client as async_client
        from kubernetes_asyncio import watch
        from kubernetes_asyncio.client.exceptions import ApiException

        hook = AsyncKubernetesHook(conn_id=self.kubernetes_conn_id)
        async with hook.get_conn() as api_client:
            core = async_client.CoreV1Api(api_client)
            while True:
                listing = await core.list_namespaced_pod(
                    self.namespace, label_selector=self.selector
                )
                pods = {
                    p.metadata.name: api_client.sanitize_for_serialization(p) for p in listing.items
                }
                event = self._event_if_decided(pods)
                if event is not None:
                    yield event
                    return
                left = self.deadline - time.time()
                stream = watch.Watch()
                try:
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
                            event = self._event_if_decided(pods)
                            if event is not None:
                                yield event
                                return
                except ApiException as exc:
                    if exc.status != 410:  # 410 Gone: resourceVersion too old; relist.
                        raise
                except TimeoutError:
                    pass  # the client gave up on a quiet watch; relist
