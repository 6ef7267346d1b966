"""train's tries: a training that failed is final; a try lost to Airflow re-attaches.

Airflow 3.3 can fail a resumed deferred task on its own (apache/airflow#67287); the
DAG gives `train` retries for that, so what a retry does must be right: report a
training already decided without deferring, never retry a failed training, and
leave the pods of a decided training to the next try or to teardown.
"""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from urllib3.response import HTTPResponse

from harness.repo_root import REPO_ROOT
from operators import kubeobjects
from operators import train as train_module
from operators.logreads import LogRead
from operators.runinfo import describe_run
from operators.train import TrainingFailed, TrainingWaitOperator
from tfjob.request.model import load_request

REQUEST = REPO_ROOT / "dags" / "requests" / "digits-ps.yaml"
RUN_ID = "manual__2026-12-03T06:00:00+00:00"


class FakeTaskInstance:
    def __init__(self, described: dict[str, Any]) -> None:
        self.described = described
        self.pushed: dict[str, Any] = {}

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> dict[str, Any] | None:
        return self.described if key == "return_value" else None

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


class FakeCoreV1:
    """Only what train reads: each pod's log, and the pods (none: a first gang)."""

    def __init__(self, logs: dict[str, str]) -> None:
        self.logs = logs

    def list_namespaced_pod(self, namespace: str, label_selector: str = "") -> Any:
        return SimpleNamespace(items=[])

    def read_namespaced_pod_log(self, pod: str, namespace: str, **kwargs: Any) -> Any:
        return HTTPResponse(body=io.BytesIO(self.logs.get(pod, "").encode()), preload_content=False)


@pytest.fixture
def run():
    request = load_request(REQUEST)
    described = describe_run(request, RUN_ID, "tfjob__digits-ps", "aws_default")
    return SimpleNamespace(
        request=request,
        context={"ti": FakeTaskInstance(described)},
        key=described["run_key"],
        namespace=described["namespace"],
    )


def make_pod(run, role: str, index: int, exit_code: int | None) -> dict[str, Any]:
    state = (
        {"running": {}}
        if exit_code is None
        else {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
            }
        }
    )
    phase = {None: "Running", 0: "Succeeded"}.get(exit_code, "Failed")
    return {
        "metadata": {
            "name": f"{run.key}-{role}-{index}",
            "labels": {"tfjob.io/role": role, "tfjob.io/index": str(index)},
        },
        "spec": {"nodeName": "node-1"},
        "status": {"phase": phase, "containerStatuses": [{"name": "tensorflow", "state": state}]},
    }


def make_operator(monkeypatch, logs: dict[str, str]) -> TrainingWaitOperator:
    operator = TrainingWaitOperator(task_id="train")
    monkeypatch.setattr(operator, "_client", lambda: FakeCoreV1(logs))
    return operator


def gang(run, worker_exit: int | None) -> list[dict[str, Any]]:
    return [
        make_pod(run, "chief", 0, 0 if worker_exit is not None else None),
        make_pod(run, "ps", 0, None),
        make_pod(run, "worker", 0, worker_exit),
        make_pod(run, "worker", 1, 0 if worker_exit is not None else None),
    ]


def test_a_new_try_of_a_decided_training_reports_it_without_deferring(run, monkeypatch):
    monkeypatch.setattr(kubeobjects, "list_run_pods", lambda *args: gang(run, 0))
    chief = f"{run.key}-chief-0"
    operator = make_operator(monkeypatch, {chief: 'TFJOB_METRICS {"accuracy": 0.97}\n'})
    metrics = operator.execute(run.context)  # a deferral would raise TaskDeferred
    assert metrics == {"accuracy": 0.97}
    assert run.context["ti"].pushed["metrics"] == {"accuracy": 0.97}


def test_a_failed_training_is_final_so_airflow_does_not_retry_it(run, monkeypatch):
    monkeypatch.setattr(kubeobjects, "list_run_pods", lambda *args: gang(run, 3))
    worker = f"{run.key}-worker-0"
    operator = make_operator(monkeypatch, {worker: "step 1\nout of memory\n"})
    with pytest.raises(TrainingFailed, match="worker-0 .* exit code 3") as failed:
        operator.execute(run.context)
    assert isinstance(failed.value, AirflowFailException)
    assert "[worker-0] out of memory" in str(failed.value)


def test_killed_before_training_is_decided_train_deletes_the_run(run, monkeypatch):
    deleted = []
    monkeypatch.setattr(kubeobjects, "list_run_pods", lambda *args: gang(run, None))
    monkeypatch.setattr(
        kubeobjects,
        "delete_run_objects",
        lambda api, namespace, selector, **kw: deleted.append(namespace) or [],
    )
    operator = make_operator(monkeypatch, {})
    with pytest.raises(TaskDeferred):
        operator.execute(run.context)
    operator.on_kill()
    assert deleted == [run.namespace]


def test_killed_after_training_is_decided_train_leaves_the_pods(run, monkeypatch):
    deleted = []
    monkeypatch.setattr(
        kubeobjects, "delete_run_objects", lambda *args, **kw: deleted.append(args) or []
    )
    operator = make_operator(monkeypatch, {})

    def killed_while_reading_logs(*args: Any) -> LogRead:
        operator.on_kill()  # what Airflow does when it fails the task under us
        return LogRead(b"", truncated=False)

    monkeypatch.setattr(train_module, "read_log_head", killed_while_reading_logs)
    event = {
        "state": "succeeded",
        "deciding": ["chief-0"],
        "streamed": {},
        "replicas": [{"role": "chief", "index": 0, "pod": f"{run.key}-chief-0"}],
    }
    operator.finish(run.context, event)
    assert deleted == []


def test_a_blinking_api_before_deferring_leaves_the_first_look_to_the_trigger(run, monkeypatch):
    from kubernetes.client.exceptions import ApiException

    def unavailable(*args):
        raise ApiException(status=503, reason="Service Unavailable")

    monkeypatch.setattr(kubeobjects, "list_run_pods", unavailable)
    operator = make_operator(monkeypatch, {})
    with pytest.raises(TaskDeferred):
        operator.execute(run.context)


def test_a_forbidden_list_before_deferring_still_fails_train(run, monkeypatch):
    from kubernetes.client.exceptions import ApiException

    def forbidden(*args):
        raise ApiException(status=403, reason="Forbidden")

    monkeypatch.setattr(kubeobjects, "list_run_pods", forbidden)
    with pytest.raises(ApiException):
        make_operator(monkeypatch, {}).execute(run.context)


def test_reading_the_logs_after_training_rides_out_a_blink(run, monkeypatch):
    from kubernetes.client.exceptions import ApiException

    from operators import transient

    monkeypatch.setattr(transient, "API_FIRST_DELAY_SECONDS", 0.001)
    answers = [
        ApiException(status=503, reason="Service Unavailable"),
        ConnectionResetError(),
        LogRead(b'TFJOB_METRICS {"accuracy": 0.9}\n', truncated=False),
    ]

    def read_log(*args, **kwargs):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(train_module, "read_log_head", read_log)
    event = {
        "state": "succeeded",
        "deciding": ["chief-0"],
        "streamed": {},
        "replicas": [{"role": "chief", "index": 0, "pod": f"{run.key}-chief-0"}],
    }
    assert make_operator(monkeypatch, {}).finish(run.context, event) == {"accuracy": 0.9}


def test_a_deadline_reached_while_the_api_failed_says_so(run, monkeypatch):
    monkeypatch.setattr(train_module, "read_log_head", lambda *a, **k: LogRead(b"", False))
    event = {
        "state": "deadline",
        "deciding": ["chief-0"],
        "streamed": {},
        "replicas": [],
        "failed": None,
        "api_error": "503 Service Unavailable",
    }
    with pytest.raises(
        TrainingFailed,
        match=r"did not finish within active_deadline=.*"
        r"the Kubernetes API was still failing then \(503 Service Unavailable\)",
    ):
        make_operator(monkeypatch, {}).finish(run.context, event)
