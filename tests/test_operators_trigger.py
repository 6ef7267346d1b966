"""TrainingTrigger: survives the trip through the triggerer's database, decides, follows logs."""

from __future__ import annotations

import importlib

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
