"""What every task of a run needs to know about it, passed once through XCom.

`validate` loads the request and pushes `describe_run(...)`; every later task
calls `pull_run(context)` and gets the same request object and the same run
identity (namespace, run key, label selector, pod names), so no task derives
names on its own and a retried task finds exactly its run's objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from operators.settings import VALIDATE_TASK
from tfjob import naming
from tfjob.request import TrainingRequest, load_request


@dataclass(frozen=True)
class RunInfo:
    request: TrainingRequest
    run_id: str
    dag_id: str
    namespace: str
    run_key: str

    @property
    def selector(self) -> str:
        return naming.run_selector(self.run_key)

    @property
    def run_prefix(self) -> str:
        """`<output>/runs/<run_id>`: this run's bundle snapshot, model, logs and manifest."""
        return f"{self.request.output}/runs/{self.run_id}"

    def pod_names(self) -> list[str]:
        return [naming.pod_name(self.run_key, r, i) for r, i in self.request.replicas_in_order()]

    def replica_ids(self) -> list[tuple[str, int]]:
        return [(r.value, i) for r, i in self.request.replicas_in_order()]

    def identity(self) -> Any:
        from tfjob.manifests import RunIdentity

        return RunIdentity(
            job=self.request.name, run_id=self.run_id, dag_id=self.dag_id, namespace=self.namespace
        )


def request_as_dict(request: TrainingRequest) -> dict[str, Any]:
    """The request as plain JSON data, loadable again with `load_request`."""
    return request.model_dump(mode="json")


def describe_run(request: TrainingRequest, run_id: str, dag_id: str) -> dict[str, Any]:
    """The XCom `validate` pushes."""
    return {
        "request": request_as_dict(request),
        "run_id": run_id,
        "dag_id": dag_id,
        "namespace": naming.tenant_namespace(request.tenant),
        "run_key": naming.run_key(request.name, run_id),
    }


def read_run(described: dict[str, Any]) -> RunInfo:
    return RunInfo(
        request=load_request(described["request"]),
        run_id=described["run_id"],
        dag_id=described["dag_id"],
        namespace=described["namespace"],
        run_key=described["run_key"],
    )


def pull_run(context: Any) -> RunInfo:
    """The run as `validate` described it; fails clearly when validate has not run."""
    described = context["ti"].xcom_pull(task_ids=VALIDATE_TASK)
    if not described:
        raise RuntimeError(
            f"no run description in XCom of task {VALIDATE_TASK!r}: it did not succeed in this run"
        )
    return read_run(described)
