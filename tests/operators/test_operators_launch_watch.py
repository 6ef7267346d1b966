"""The launch's waits ride out a blinking control plane, and an earlier try's pods get their
grace period and are waited for until they are really gone."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from operators import kubeobjects, transient
from operators.launch import LEFTOVER_GRACE_MARGIN_SECONDS, TrainingLaunchOperator
from operators.settings import LEFTOVER_TIMEOUT_SECONDS


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(transient, "API_FIRST_DELAY_SECONDS", 0.001)
    monkeypatch.setattr(transient, "API_LONGEST_DELAY_SECONDS", 0.004)


def pod(name: str, phase: str = "Pending", ip: str | None = None, grace: int = 10) -> dict:
    return {
        "metadata": {"name": name, "resourceVersion": "5"},
        "spec": {"terminationGracePeriodSeconds": grace},
        "status": {"phase": phase, **({"podIP": ip} if ip else {})},
    }


class FakeWatchResponse:
    """A sync watch body: JSON lines, then the end or an error (a dropped connection)."""

    def __init__(self, events: list[dict], then: BaseException | None = None) -> None:
        self.events, self.then = events, then

    def stream(self, amt=None, decode_content=False):
        for event in self.events:
            yield json.dumps(event).encode() + b"\n"
        if self.then is not None:
            raise self.then

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class ScriptedCore:
    """`list_namespaced_pod` answering from scripts (the last step repeats)."""

    def __init__(self, lists: list, watches: list) -> None:
        self.lists, self.watches = lists, watches
        self.calls: list[str] = []
        self.api_client = SimpleNamespace(sanitize_for_serialization=lambda model: model.raw)

    @staticmethod
    def _next(script: list):
        step = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(step, BaseException):
            raise step
        return step

    def list_namespaced_pod(self, namespace, label_selector=None, watch=False, **kwargs):
        self.calls.append("watch" if watch else "list")
        if watch:
            return self._next(self.watches)
        items = [
            SimpleNamespace(raw=p, metadata=SimpleNamespace(name=p["metadata"]["name"]))
            for p in self._next(self.lists)
        ]
        return SimpleNamespace(items=items, metadata=SimpleNamespace(resource_version="5"))

    def list_namespaced_config_map(self, namespace, label_selector=None):
        return SimpleNamespace(items=[])

    list_namespaced_secret = list_namespaced_config_map


def all_running(pods: list[dict[str, Any]]) -> bool:
    return len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)


def test_the_gang_watch_rides_out_a_dropped_watch_a_503_and_a_500():
    starting = [pod("a"), pod("b")]
    running = [pod("a", "Running", "10.0.0.1"), pod("b", "Running", "10.0.0.2")]
    core = ScriptedCore(
        lists=[
            starting,
            ApiException(status=503, reason="Service Unavailable"),
            ApiException(status=500, reason="Internal Server Error"),
            running,
        ],
        watches=[
            FakeWatchResponse(
                [{"type": "MODIFIED", "object": running[0]}],
                then=urllib3.exceptions.ProtocolError("Connection broken", ConnectionResetError()),
            )
        ],
    )
    seen = kubeobjects.watch_run_pods(core, "ns", "sel", deadline=float("inf"), is_done=all_running)
    assert all_running(seen)
    assert core.calls == ["list", "watch", "list", "list", "list"]


def test_the_gang_watch_still_fails_on_a_final_answer():
    core = ScriptedCore(lists=[ApiException(status=502), ApiException(status=403)], watches=[])
    with pytest.raises(ApiException) as error:
        kubeobjects.watch_run_pods(core, "ns", "sel", deadline=float("inf"), is_done=all_running)
    assert error.value.status == 403


def test_an_api_down_until_the_deadline_leaves_the_last_pods_seen():
    import time

    starting = [pod("a"), pod("b")]
    core = ScriptedCore(lists=[starting, ApiException(status=503)], watches=[FakeWatchResponse([])])
    seen = kubeobjects.watch_run_pods(
        core, "ns", "sel", deadline=time.monotonic() + 0.2, is_done=all_running
    )
    assert [p["metadata"]["name"] for p in seen] == ["a", "b"]


def test_waiting_for_leftovers_to_go_rides_out_a_503():
    leaving = [pod("a", "Running")]
    core = ScriptedCore(
        lists=[leaving, ApiException(status=503), []],
        watches=[FakeWatchResponse([], then=ConnectionResetError())],
    )
    assert kubeobjects.await_run_objects_gone(core, "ns", "sel", timeout=60) == []


def test_an_earlier_try_is_deleted_with_its_grace_period_and_awaited(monkeypatch):
    calls: dict[str, Any] = {}
    leftovers = [pod("job-1-worker-0", "Running", grace=45), pod("job-1-ps-0", "Running")]
    answers: list[Any] = [ApiException(status=503), leftovers]

    def list_run_pods(api, namespace, selector):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def delete_run_objects(api, namespace, selector, grace_period_seconds=None, kinds=None):
        calls["delete"] = (grace_period_seconds, kinds)
        return ["Pod/job-1-worker-0", "Pod/job-1-ps-0", "ConfigMap/job-1-runtime"]

    def await_gone(api, namespace, selector, timeout, *, kinds=None):
        calls["timeout"] = timeout
        return []

    monkeypatch.setattr(kubeobjects, "find_foreign_objects", lambda *args: [])
    monkeypatch.setattr(kubeobjects, "list_run_pods", list_run_pods)
    monkeypatch.setattr(kubeobjects, "delete_run_objects", delete_run_objects)
    monkeypatch.setattr(kubeobjects, "await_run_objects_gone", await_gone)
    operator = TrainingLaunchOperator(task_id="launch")
    operator.__dict__["client"] = object()  # the provider's cached client: never called here
    run = SimpleNamespace(
        namespace="ns",
        selector="tfjob.io/run=job-1",
        run_key="job-1",
        dag_id="tfjob__job",
        run_id="r1",
    )
    operator.remove_leftovers(run)
    # no grace_period_seconds=0: each pod's own grace, so "gone" means its containers ended;
    # every kind of the run goes
    assert calls["delete"] == (None, None)
    assert calls["timeout"] == max(LEFTOVER_TIMEOUT_SECONDS, 45 + LEFTOVER_GRACE_MARGIN_SECONDS)


def test_the_longest_grace_counts_a_deletion_already_under_way():
    deleting = pod("a", grace=10)
    deleting["metadata"]["deletionGracePeriodSeconds"] = 90
    no_grace = {"metadata": {"name": "b"}, "spec": {}}
    assert kubeobjects.longest_grace_period([deleting, no_grace]) == 90
    assert kubeobjects.longest_grace_period([no_grace]) == kubeobjects.DEFAULT_GRACE_SECONDS


class ScriptedPodManager:
    def __init__(self, answers: list) -> None:
        self.answers = answers

    def create_pod(self, pod) -> None:
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer


def launch_with(answers: list) -> TrainingLaunchOperator:
    operator = TrainingLaunchOperator(task_id="launch")
    operator.__dict__["pod_manager"] = ScriptedPodManager(answers)  # the provider's cached one
    return operator


def test_a_pod_create_rides_out_a_blink_and_a_lost_answer():
    replica = SimpleNamespace(metadata=SimpleNamespace(name="job-1-worker-0"))
    answers = [
        ApiException(status=503),
        ConnectionResetError(),
        ApiException(status=409, reason="AlreadyExists"),
    ]  # the reset try had landed
    launch_with(answers).create_replica_pod(replica)
    assert answers == []


def test_a_pod_that_already_existed_before_any_try_is_still_an_error():
    replica = SimpleNamespace(metadata=SimpleNamespace(name="job-1-worker-0"))
    with pytest.raises(ApiException) as error:
        launch_with([ApiException(status=409, reason="AlreadyExists")]).create_replica_pod(replica)
    assert error.value.status == 409
