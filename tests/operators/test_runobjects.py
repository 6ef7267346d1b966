"""A run's objects go one way: deleted by the run's selector, pods with their own grace unless
one is given, waited for until the API server removed them; what is left is named."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

from kubernetes.client.exceptions import ApiException

from operators import kubeobjects, runobjects
from operators.runobjects import RunObjects, delete_when_killed
from operators.settings import LEFTOVER_TIMEOUT_SECONDS, TEARDOWN_GRACE_SECONDS

log = logging.getLogger("test_runobjects")
RUN = SimpleNamespace(namespace="ns", selector="tfjob.io/run=job-1", run_key="job-1")


class Cluster:
    """kubeobjects' calls, answered from what the test sets, recorded in order."""

    def __init__(self, monkeypatch, pods: list[dict[str, Any]], deleted: list[str]) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.left: list[str] = []
        monkeypatch.setattr(kubeobjects, "list_run_pods", lambda api, ns, sel: pods)

        def delete(api, ns, sel, grace_period_seconds=None, kinds=None):
            self.calls.append(("delete", (grace_period_seconds, kinds)))
            return deleted

        def await_gone(api, ns, sel, timeout, *, kinds=None):
            self.calls.append(("wait", (timeout, kinds)))
            return self.left

        monkeypatch.setattr(kubeobjects, "delete_run_objects", delete)
        monkeypatch.setattr(kubeobjects, "await_run_objects_gone", await_gone)


def pod(grace: int) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"terminationGracePeriodSeconds": grace}}


def test_a_removal_deletes_every_kind_with_the_pods_own_grace_and_waits_by_it(monkeypatch, caplog):
    cluster = Cluster(monkeypatch, [pod(200)], ["Pod/job-1-worker-0", "ConfigMap/job-1-runtime"])
    with caplog.at_level(logging.INFO, logger="test_runobjects"):
        removal = RunObjects.of(object(), RUN).remove(log, doing="removing leftovers")
    wait = 200 + runobjects.LEFTOVER_GRACE_MARGIN_SECONDS
    assert cluster.calls == [("delete", (None, None)), ("wait", (wait, None))]
    assert removal.deleted == ["Pod/job-1-worker-0", "ConfigMap/job-1-runtime"]
    assert removal.left == [] and removal.timeout == wait
    assert "removing leftovers (each pod gets its grace period, up to 260s waited)" in caplog.text


def test_a_gang_is_its_pods_alone_and_what_outlives_the_wait_is_named(monkeypatch):
    cluster = Cluster(monkeypatch, [pod(10)], ["Pod/job-1-worker-0"])
    cluster.left = ["Pod/job-1-worker-0"]
    removal = RunObjects.of(object(), RUN).pods_only().remove(log)
    assert cluster.calls == [
        ("delete", (None, ("Pod",))),
        ("wait", (LEFTOVER_TIMEOUT_SECONDS, ("Pod",))),
    ]
    assert removal.left == ["Pod/job-1-worker-0"]


def test_a_given_grace_and_timeout_are_used_as_they_are(monkeypatch):
    cluster = Cluster(monkeypatch, [pod(999)], ["Pod/job-1-worker-0"])
    RunObjects.of(object(), RUN).remove(log, grace_seconds=10, timeout=180)
    assert cluster.calls == [("delete", (10, None)), ("wait", (180, None))]


def test_nothing_deleted_means_nothing_to_wait_for(monkeypatch):
    cluster = Cluster(monkeypatch, [], [])
    removal = RunObjects.of(object(), RUN).remove(log, doing="stopping")
    assert cluster.calls == [("delete", (None, None))]
    assert removal.deleted == [] and removal.left == []


def test_a_killed_task_deletes_with_teardowns_grace_and_never_raises(monkeypatch, caplog):
    cluster = Cluster(monkeypatch, [], ["Pod/job-1-worker-0"])
    delete_when_killed(lambda: object(), RUN, log, "train killed")
    assert cluster.calls == [("delete", (TEARDOWN_GRACE_SECONDS, None))]

    def forbidden(*args, **kwargs):
        raise ApiException(status=403, reason="Forbidden")

    monkeypatch.setattr(kubeobjects, "delete_run_objects", forbidden)
    with caplog.at_level(logging.ERROR, logger="test_runobjects"):
        delete_when_killed(lambda: object(), RUN, log, "launch killed")
    assert "launch killed: could not delete the objects of run job-1" in caplog.text


def test_the_selector_deletes_the_core_kinds_and_leaves_the_network_policy_to_its_owner():
    by_selector = {k.kind for k in kubeobjects.SELECTOR_KINDS}
    assert by_selector == {"Pod", "ConfigMap", "Secret"}
    assert {k.kind for k in kubeobjects.RUN_KINDS} == by_selector | {"NetworkPolicy"}
