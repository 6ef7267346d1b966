"""TrainingTrigger: survives the trip through the triggerer's database, decides, follows logs."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import time
from types import SimpleNamespace

import pytest

from operators.triggers import (
    TrainingTrigger,
    has_main_container_ended,
    has_main_container_started,
)


def test_a_serialized_trigger_rebuilds_into_an_equal_trigger():
    trigger = TrainingTrigger(
        namespace="tfjob-demo",
        selector="app.kubernetes.io/managed-by=tfjob,tfjob.io/run=job-1234abcd",
        expected_pods=["job-1234abcd-chief-0", "job-1234abcd-ps-0"],
        deciding=["chief-0"],
        deadline=1_800_000_000.0,
        kubernetes_conn_id="kubernetes_default",
        not_before=1_700_000_005.0,
    )
    path, kwargs = trigger.serialize()
    assert kwargs["not_before"] == 1_700_000_005.0
    module, _, name = path.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert rebuilt.serialize() == (path, kwargs)


def test_the_trigger_fires_at_its_deadline_even_while_replicas_run():
    trigger = TrainingTrigger(
        namespace="ns",
        selector="s",
        expected_pods=["job-1234abcd-worker-0"],
        deciding=["worker-0"],
        deadline=0.0,
        kubernetes_conn_id="kubernetes_default",
    )
    running = {
        "job-1234abcd-worker-0": {
            "metadata": {
                "name": "job-1234abcd-worker-0",
                "labels": {"tfjob.io/role": "worker", "tfjob.io/index": "0"},
            },
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.1",
                "containerStatuses": [{"name": "tensorflow", "state": {"running": {}}}],
            },
        }
    }
    event = trigger._event_if_decided(running)
    assert event["state"] == "deadline"
    assert event["replicas"][0]["phase"] == "Running"


def test_a_replica_log_is_followed_once_its_main_container_started():
    def pod(state):
        return {
            "status": {
                "phase": "Running",
                "containerStatuses": [{"name": "tensorflow", "state": state}],
            }
        }

    assert not has_main_container_started(pod({"waiting": {"reason": "ContainerCreating"}}))
    assert has_main_container_started(pod({"running": {}}))
    assert has_main_container_started(pod({"terminated": {"exitCode": 0}}))
    assert not has_main_container_ended(pod({"running": {}}))
    assert has_main_container_ended(pod({"terminated": {"exitCode": 1}}))
    assert not has_main_container_started({"status": {"phase": "Pending"}})


# --- a control plane that blinks -------------------------------------------------------------

class FakePodModel:
    """A listed pod as kubernetes_asyncio gives it: `.metadata.name`, serialised by the client."""

    def __init__(self, raw: dict) -> None:
        self.raw = raw
        self.metadata = SimpleNamespace(name=raw["metadata"]["name"])


class FakeApiClient:
    def sanitize_for_serialization(self, model: FakePodModel) -> dict:
        return model.raw


class FakeWatchResponse:
    """A watch's chunked body: one JSON line per event, then either the end or `then`."""

    def __init__(self, events: list[dict], then: BaseException | None = None) -> None:
        self.lines = [json.dumps(event).encode() + b"\n" for event in events]
        self.then = then
        self.content = self

    async def readline(self) -> bytes:
        if self.lines:
            return self.lines.pop(0)
        if self.then is not None:
            raise self.then
        return b""

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


class ScriptedCore:
    """A CoreV1Api whose lists and watches answer from scripts; the last step repeats."""

    def __init__(self, lists: list, watches: list) -> None:
        self.lists, self.watches = lists, watches
        self.calls: list[str] = []

    @staticmethod
    def _next(script: list):
        step = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(step, BaseException):
            raise step
        return step

    async def list_namespaced_pod(self, namespace, label_selector=None, watch=False, **kwargs):
        self.calls.append("watch" if watch else "list")
        if watch:
            return self._next(self.watches)
        pods = self._next(self.lists)
        return SimpleNamespace(items=[FakePodModel(p) for p in pods],
                               metadata=SimpleNamespace(resource_version="7"))

    async def read_namespaced_pod_log(self, *args, **kwargs):
        raise RuntimeError("no live logs in this test")


def replica_pod(role: str, index: int, state: dict, phase: str = "Running") -> dict:
    return {
        "metadata": {"name": f"job-1234abcd-{role}-{index}", "resourceVersion": "8",
                     "labels": {"tfjob.io/role": role, "tfjob.io/index": str(index)}},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": phase, "podIP": "10.0.0.1",
                   "containerStatuses": [{"name": "tensorflow", "state": state}]},
    }


TRAINING = [replica_pod("worker", 0, {"waiting": {"reason": "ContainerCreating"}})]
TRAINED = [replica_pod("worker", 0, {"terminated": {"exitCode": 0, "reason": "Completed"}},
                       phase="Succeeded")]


@pytest.fixture
def blinking_api(monkeypatch):
    """Runs a TrainingTrigger against a ScriptedCore; back-off shortened to milliseconds."""
    import kubernetes_asyncio.client
    from airflow.providers.cncf.kubernetes.hooks import kubernetes as hooks

    from operators import transient

    monkeypatch.setattr(transient, "API_FIRST_DELAY_SECONDS", 0.001)
    monkeypatch.setattr(transient, "API_LONGEST_DELAY_SECONDS", 0.004)

    class FakeHook:
        def __init__(self, conn_id: str) -> None:
            pass

        @contextlib.asynccontextmanager
        async def get_conn(self):
            yield FakeApiClient()

    monkeypatch.setattr(hooks, "AsyncKubernetesHook", FakeHook)

    def run(core: ScriptedCore, deadline_in: float = 60.0) -> dict:
        monkeypatch.setattr(kubernetes_asyncio.client, "CoreV1Api", lambda api_client: core)
        trigger = TrainingTrigger(
            namespace="ns", selector="tfjob.io/run=job-1234abcd",
            expected_pods=["job-1234abcd-worker-0"], deciding=["worker-0"],
            deadline=time.time() + deadline_in, kubernetes_conn_id="kubernetes_default")

        async def first_event() -> dict:
            async for event in trigger.run():
                return event.payload
            raise AssertionError("the trigger fired nothing")

        return asyncio.run(first_event())

    return run


def test_the_trigger_rides_out_a_503_a_connection_reset_and_a_500(blinking_api):
    import aiohttp
    from kubernetes_asyncio.client.exceptions import ApiException

    modified = {"type": "MODIFIED", "object": TRAINING[0]}
    core = ScriptedCore(
        lists=[TRAINING,
               ApiException(status=503, reason="Service Unavailable"),
               aiohttp.ServerDisconnectedError(),
               ApiException(status=500, reason="Internal Server Error"),
               TRAINED],
        # the watch delivers one event, then the server goes away mid-stream
        watches=[FakeWatchResponse([modified],
                                   then=aiohttp.ClientPayloadError("payload is not completed"))])
    event = blinking_api(core)
    assert event["state"] == "succeeded"
    assert core.calls == ["list", "watch", "list", "list", "list", "list"]


def test_a_watch_that_cannot_open_is_relisted(blinking_api):
    from kubernetes_asyncio.client.exceptions import ApiException

    core = ScriptedCore(lists=[TRAINING, TRAINED],
                        watches=[ApiException(status=504, reason="Gateway Timeout")])
    assert blinking_api(core)["state"] == "succeeded"


def test_the_trigger_still_fails_on_a_final_answer(blinking_api):
    from kubernetes_asyncio.client.exceptions import ApiException

    core = ScriptedCore(lists=[ApiException(status=503, reason="Service Unavailable"),
                               ApiException(status=403, reason="Forbidden")],
                        watches=[FakeWatchResponse([])])
    with pytest.raises(ApiException) as error:
        blinking_api(core)
    assert error.value.status == 403


def test_an_api_still_down_at_the_deadline_fires_deadline_naming_the_error(blinking_api):
    from kubernetes_asyncio.client.exceptions import ApiException

    core = ScriptedCore(lists=[TRAINING, ApiException(status=503, reason="Service Unavailable")],
                        watches=[FakeWatchResponse([])])
    event = blinking_api(core, deadline_in=0.3)
    assert event["state"] == "deadline"
    assert event["api_error"] == "503 Service Unavailable"
    assert [r["pod"] for r in event["replicas"]] == ["job-1234abcd-worker-0"]  # the last seen


def test_the_event_of_a_deleted_replica_carries_what_the_restart_verdict_needs():
    from operators.triggers import decide_training
    from tfjob.restart_policy import FailureKind, ReplicaFailure

    evicted = replica_pod("worker", 0, {"terminated": {"exitCode": 143, "reason": "Error"}},
                          phase="Failed")
    evicted["status"]["reason"] = "Evicted"
    evicted["metadata"]["deletionTimestamp"] = "2026-12-03T06:10:00Z"
    event = decide_training({"job-1234abcd-worker-0": evicted}, ["worker-0"],
                            ["job-1234abcd-worker-0"], deadline=time.time() + 60)
    assert event["state"] == "failed"
    assert event["failed"]["pod_reason"] == "Evicted" and event["failed"]["deleted"] is True
    event = json.loads(json.dumps(event))  # as the triggerer stores it
    assert ReplicaFailure.from_replica(event["failed"]).kind is FailureKind.EVICTED
