"""Driving one run through the pipeline's own task code, in this process, without a scheduler.

Why this exists: the start-up figures (issue 8, measurement 1) must be the
product's, but Airflow's scheduling adds seconds of its own that measurement 3
reports separately. So the benchmark calls exactly what the tasks call:
`steps.validate`, `steps.fetch_bundle`, `TrainingLaunchOperator.execute`,
`steps.deliver_cluster_spec`, the triggerer's `TrainingTrigger.run`,
`steps.teardown`, each under Airflow's own `set_current_context`, with XCom
kept in a dict by `TaskInstanceStandIn` (the only part that is not Airflow's:
XCom storage is not what is measured). Connections come from the
`AIRFLOW_CONN_*` variables of the world, as in a task.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from tfjob.pipeline_ids import (
    CLUSTERSPEC_TASK,
    FETCH_BUNDLE_TASK,
    LAUNCH_TASK,
    TEARDOWN_TASK,
    VALIDATE_TASK,
    tenant_tag,
)


class TaskInstanceStandIn:
    """What the steps use of a TaskInstance: xcom_pull and xcom_push, on a shared dict."""

    def __init__(
        self, task_id: str, store: dict[tuple[str, str], Any], run_id: str, dag_id: str
    ) -> None:
        self.task_id = task_id
        self.store = store
        self.run_id = run_id
        self.dag_id = dag_id
        self.try_number = 1
        self.map_index = -1

    def xcom_pull(self, task_ids: str | None = None, key: str = "return_value", **_: Any) -> Any:
        return self.store.get((task_ids or self.task_id, key))

    def xcom_push(self, key: str, value: Any) -> None:
        self.store[(self.task_id, key)] = value


@dataclass
class DagStandIn:
    dag_id: str
    tags: tuple[str, ...] = ()  # as the DAG factory tags it: "tfjob", "tenant:<name>"


@dataclass
class DrivenRun:
    """One run driven step by step; `times` holds perf_counter stamps by event name."""

    request_file: str
    run_id: str
    dag_id: str
    store: dict[tuple[str, str], Any] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)
    tags: tuple[str, ...] = ()

    def context(self, task_id: str) -> dict[str, Any]:
        ti = TaskInstanceStandIn(task_id, self.store, self.run_id, self.dag_id)
        return {
            "ti": ti,
            "task_instance": ti,
            "run_id": self.run_id,
            "dag": DagStandIn(self.dag_id, self.tags),
            "params": {},
        }

    def run_step(self, task_id: str, function: Any) -> Any:
        """Call a `steps.*` function as its task would, and keep its return value as XCom."""
        from airflow.sdk.execution_time.context import set_current_context

        context = self.context(task_id)
        with set_current_context(context):
            value = function()
        self.store[(task_id, "return_value")] = value
        return value

    def stamp(self, name: str) -> float:
        self.times[name] = time.perf_counter()
        return self.times[name]


def validate_and_fetch(run: DrivenRun) -> None:
    from operators import steps
    from tfjob.request.model import load_request

    # As a request file's DAG: the run's tenant is the file's.
    tenant = load_request(run.request_file).tenant
    run.tags = ("tfjob", tenant_tag(tenant))
    run.run_step(VALIDATE_TASK, lambda: steps.validate(run.request_file, tenant))
    run.run_step(FETCH_BUNDLE_TASK, steps.fetch_bundle)


def launch(run: DrivenRun) -> dict[str, list[str]]:
    """The launch task: `TrainingLaunchOperator.execute` (remove leftovers, create, gang watch)."""
    from operators.launch import TrainingLaunchOperator

    operator = TrainingLaunchOperator(task_id=LAUNCH_TASK)
    endpoints = operator.execute(run.context(LAUNCH_TASK))
    run.store[(LAUNCH_TASK, "return_value")] = endpoints
    return endpoints


def deliver_cluster_spec(run: DrivenRun) -> Any:
    from operators import steps

    return run.run_step(CLUSTERSPEC_TASK, steps.deliver_cluster_spec)


def await_training_end(run: DrivenRun, timeout: float) -> Any:
    """The train task's wait: the triggerer's `TrainingTrigger.run` until its first event."""
    from operators.replicas import deciding_replicas
    from operators.runinfo import read_run
    from operators.settings import KUBERNETES_CONN_ID
    from operators.triggers import TrainingEvent, TrainingTrigger

    info = read_run(run.store[(VALIDATE_TASK, "return_value")])
    trigger = TrainingTrigger(
        namespace=info.namespace,
        selector=info.selector,
        expected_pods=info.pod_names(),
        deciding=list(
            deciding_replicas(
                info.request.success_policy,
                info.replica_ids(),
                single=not info.request.is_distributed,
            )
        ),
        deadline=time.time() + timeout,
        kubernetes_conn_id=KUBERNETES_CONN_ID,
    )

    async def first_event() -> TrainingEvent:
        async for event in trigger.run():
            return TrainingEvent.from_payload(event.payload)
        raise RuntimeError("the training trigger ended without an event")

    return asyncio.run(first_event())


def teardown(run: DrivenRun) -> list[str]:
    from operators import steps

    return run.run_step(TEARDOWN_TASK, steps.teardown)
