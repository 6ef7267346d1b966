"""TrainingTrigger: survives the trip through the triggerer's database, decides, follows logs."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import time
from types import SimpleNamespace

import pytest

from operators.replicas import TrainingState
from operators.triggers import (
    TrainingEvent,
    TrainingTrigger,
    has_main_container_ended,
    has_main_container_started,
)
from tfjob.records.replicas import PodPhase, ReplicaStatus
from tfjob.request.model import Role


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
    assert event.state is TrainingState.DEADLINE
    assert event.replicas[0].phase == "Running"


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
        return SimpleNamespace(
            items=[FakePodModel(p) for p in pods], metadata=SimpleNamespace(resource_version="7")
        )

    async def read_namespaced_pod_log(self, *args, **kwargs):
        raise RuntimeError("no live logs in this test")


def replica_pod(role: str, index: int, state: dict, phase: str = "Running") -> dict:
    return {
        "metadata": {
            "name": f"job-1234abcd-{role}-{index}",
            "resourceVersion": "8",
            "labels": {"tfjob.io/role": role, "tfjob.io/index": str(index)},
        },
        "spec": {"nodeName": "node-1"},
        "status": {
            "phase": phase,
            "podIP": "10.0.0.1",
            "containerStatuses": [{"name": "tensorflow", "state": state}],
        },
    }


TRAINING = [replica_pod("worker", 0, {"waiting": {"reason": "ContainerCreating"}})]
TRAINED = [
    replica_pod(
        "worker", 0, {"terminated": {"exitCode": 0, "reason": "Completed"}}, phase="Succeeded"
    )
]


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
            namespace="ns",
            selector="tfjob.io/run=job-1234abcd",
            expected_pods=["job-1234abcd-worker-0"],
            deciding=["worker-0"],
            deadline=time.time() + deadline_in,
            kubernetes_conn_id="kubernetes_default",
        )

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
        lists=[
            TRAINING,
            ApiException(status=503, reason="Service Unavailable"),
            aiohttp.ServerDisconnectedError(),
            ApiException(status=500, reason="Internal Server Error"),
            TRAINED,
        ],
        # the watch delivers one event, then the server goes away mid-stream
        watches=[
            FakeWatchResponse(
                [modified], then=aiohttp.ClientPayloadError("payload is not completed")
            )
        ],
    )
    event = blinking_api(core)
    assert event["state"] == "succeeded"
    assert core.calls == ["list", "watch", "list", "list", "list", "list"]


def test_a_watch_that_cannot_open_is_relisted(blinking_api):
    from kubernetes_asyncio.client.exceptions import ApiException

    core = ScriptedCore(
        lists=[TRAINING, TRAINED], watches=[ApiException(status=504, reason="Gateway Timeout")]
    )
    assert blinking_api(core)["state"] == "succeeded"


def test_the_trigger_still_fails_on_a_final_answer(blinking_api):
    from kubernetes_asyncio.client.exceptions import ApiException

    core = ScriptedCore(
        lists=[
            ApiException(status=503, reason="Service Unavailable"),
            ApiException(status=403, reason="Forbidden"),
        ],
        watches=[FakeWatchResponse([])],
    )
    with pytest.raises(ApiException) as error:
        blinking_api(core)
    assert error.value.status == 403


def test_an_api_still_down_at_the_deadline_fires_deadline_naming_the_error(blinking_api):
    from kubernetes_asyncio.client.exceptions import ApiException

    core = ScriptedCore(
        lists=[TRAINING, ApiException(status=503, reason="Service Unavailable")],
        watches=[FakeWatchResponse([])],
    )
    event = blinking_api(core, deadline_in=0.3)
    assert event["state"] == "deadline"
    assert event["api_error"] == "503 Service Unavailable"
    assert [r["pod"] for r in event["replicas"]] == ["job-1234abcd-worker-0"]  # the last seen


def test_the_event_of_a_deleted_replica_carries_what_the_restart_verdict_needs():
    from operators.triggers import decide_training
    from tfjob.restart_policy import FailureKind, ReplicaFailure

    evicted = replica_pod(
        "worker", 0, {"terminated": {"exitCode": 143, "reason": "Error"}}, phase="Failed"
    )
    evicted["status"]["reason"] = "Evicted"
    evicted["metadata"]["deletionTimestamp"] = "2026-12-03T06:10:00Z"
    event = decide_training(
        {"job-1234abcd-worker-0": evicted},
        ["worker-0"],
        ["job-1234abcd-worker-0"],
        deadline=time.time() + 60,
    )
    assert event.state is TrainingState.FAILED
    assert event.failed.pod_reason == "Evicted" and event.failed.deleted is True
    payload = json.loads(json.dumps(event.to_payload()))  # as the triggerer stores it
    failed = TrainingEvent.from_payload(payload).failed
    assert ReplicaFailure.from_replica(failed).kind is FailureKind.EVICTED


# --- the event's shape and the decisions the watch delivers ----------------------------------


def test_an_event_crosses_the_triggerers_database_unchanged():
    event = TrainingEvent(
        state=TrainingState.FAILED,
        replicas=(ReplicaStatus(Role.WORKER, 0, "job-1234abcd-worker-0", PodPhase.RUNNING),),
        failed=ReplicaStatus(Role.WORKER, 0, "job-1234abcd-worker-0", PodPhase.FAILED, exit_code=1),
        deciding=("worker-0",),
        streamed={"worker-0": 12},
        api_error="503 Service Unavailable",
    )
    payload = json.loads(json.dumps(event.to_payload()))
    assert payload["state"] == "failed" and payload["deciding"] == ["worker-0"]
    assert TrainingEvent.from_payload(payload) == event
    quiet = TrainingEvent(TrainingState.SUCCEEDED, deciding=("chief-0",))
    assert "api_error" not in quiet.to_payload()  # only an API failing at the deadline adds it
    assert TrainingEvent.from_payload(quiet.to_payload()) == quiet


@pytest.mark.parametrize(
    ("state", "problem"),
    [
        ("running", "an event is fired only once training is decided"),
        ("finished", "'finished' is not a valid TrainingState"),
    ],
)
def test_an_event_of_no_decided_state_is_refused(state, problem):
    with pytest.raises(ValueError, match=problem):
        TrainingEvent.from_payload({"state": state, "replicas": [], "failed": None})


@pytest.fixture
def backoffs(monkeypatch):
    """Every back-off the trigger takes before it relists."""
    from runtime import backoff

    taken = []
    original = backoff.Backoff.next_delay

    def next_delay(self):
        taken.append(delay := original(self))
        return delay

    monkeypatch.setattr(backoff.Backoff, "next_delay", next_delay)
    return taken


def test_a_410_gone_watch_relists_at_once_without_backing_off(blinking_api, backoffs):
    gone = {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "code": 410,
            "reason": "Expired",
            "message": "too old resource version: 7 (9)",
        },
    }
    core = ScriptedCore(lists=[TRAINING, TRAINED], watches=[FakeWatchResponse([gone])])
    assert blinking_api(core)["state"] == "succeeded"
    assert core.calls == ["list", "watch", "list"]
    assert backoffs == []


def test_a_transient_failure_backs_off_before_it_relists(blinking_api, backoffs):
    from kubernetes_asyncio.client.exceptions import ApiException

    core = ScriptedCore(
        lists=[ApiException(status=503, reason="Service Unavailable"), TRAINED],
        watches=[FakeWatchResponse([])],
    )
    assert blinking_api(core)["state"] == "succeeded"
    assert core.calls == ["list", "list"] and len(backoffs) == 1


def test_a_watch_event_that_decides_fires_without_another_list(blinking_api):
    core = ScriptedCore(
        lists=[TRAINING], watches=[FakeWatchResponse([{"type": "MODIFIED", "object": TRAINED[0]}])]
    )
    event = blinking_api(core)
    assert event["state"] == "succeeded" and event["failed"] is None
    assert event["deciding"] == ["worker-0"]
    assert [r["exit_code"] for r in event["replicas"]] == [0]
    assert core.calls == ["list", "watch"]


def test_a_replica_that_exits_non_zero_during_the_watch_fails_the_run_with_it(blinking_api):
    crashed = replica_pod(
        "worker", 0, {"terminated": {"exitCode": 3, "reason": "Error"}}, phase="Failed"
    )
    core = ScriptedCore(
        lists=[TRAINING], watches=[FakeWatchResponse([{"type": "MODIFIED", "object": crashed}])]
    )
    event = blinking_api(core)
    assert event["state"] == "failed"
    assert event["failed"]["pod"] == "job-1234abcd-worker-0" and event["failed"]["exit_code"] == 3


def test_a_deciding_pod_deleted_during_the_watch_fails_the_run_as_gone(blinking_api):
    core = ScriptedCore(
        lists=[TRAINING], watches=[FakeWatchResponse([{"type": "DELETED", "object": TRAINING[0]}])]
    )
    event = blinking_api(core)
    assert event["state"] == "failed"
    assert (event["failed"]["phase"], event["failed"]["reason"]) == ("Gone", "PodGone")
    assert (event["failed"]["role"], event["failed"]["index"]) == ("worker", 0)


class FakeLogResponse:
    """A followed log: its chunks, then the end (the container exited)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.content = self

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info) -> None:
        return None

    async def iter_any(self):
        for chunk in self.chunks:
            yield chunk


def test_the_event_counts_the_lines_each_replica_streamed_live(blinking_api):
    class LoggingCore(ScriptedCore):
        async def read_namespaced_pod_log(self, pod, namespace, **kwargs):
            assert (pod, kwargs["container"], kwargs["follow"]) == (
                "job-1234abcd-worker-0",
                "tensorflow",
                True,
            )
            return FakeLogResponse([b"step 1\nste", b"p 2\n", b"done"])

    core = LoggingCore(lists=[TRAINED], watches=[FakeWatchResponse([])])
    event = blinking_api(core)
    assert event["state"] == "succeeded"
    assert event["streamed"] == {"worker-0": 3}
