"""train restarts the gang within the same Airflow run when the restart policy allows it.

A fake cluster stands in for Kubernetes: a delete marks a pod terminating, the
wait for the pods to go is where the kubelet confirms (the pods vanish), and a
create refuses a name still taken. The gang watch and the exec delivery are
replaced by fakes that read the fake cluster; the rest (the verdict, the
attempts, the manifests, the order of stop and start) is the real code.
"""

from __future__ import annotations

import io
import json
import threading
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from kubernetes.client.exceptions import ApiException
from urllib3.response import HTTPResponse

from harness.repo_root import REPO_ROOT
from operators import delivery, gang, kubeobjects, restart
from operators.runinfo import describe_run
from operators.train import TrainingFailed, TrainingWaitOperator
from tfjob.naming import ANNOTATION_ATTEMPTS
from tfjob.records.run import GangEndpoints
from tfjob.request.model import load_request

REQUEST = REPO_ROOT / "dags" / "requests" / "digits-ps.yaml"
RUN_ID = "manual__2026-12-03T06:00:00+00:00"
DAG_ID = "tfjob__digits-ps"


class FakeTaskInstance:
    def __init__(self, described: dict[str, Any]) -> None:
        self.described = described
        self.pushed: dict[str, Any] = {}

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        if task_ids == "validate" and key == "return_value":
            return self.described
        if task_ids == "launch" and key == "ready_at":
            return 1_800_000_000.0
        return None

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = json.loads(json.dumps(value))  # what XCom would store


class FakeCluster:
    """The pods of one namespace; `journal` records what happened, in order."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.journal: list[tuple[str, str]] = []
        self.logs: dict[str, str] = {}
        self.stuck: set[str] = set()  # pods whose kubelet never confirms they ended
        self.lock = threading.Lock()

    # Listed pods are client models, turned into the API's dicts by the client.
    api_client = SimpleNamespace(sanitize_for_serialization=lambda model: model.raw)

    def list_namespaced_pod(self, namespace: str, label_selector: str = "") -> Any:
        items = [
            SimpleNamespace(raw=json.loads(json.dumps(p)), metadata=SimpleNamespace(name=name))
            for name, p in self.pods.items()
        ]
        return SimpleNamespace(items=items)

    def _empty(self, namespace: str, label_selector: str = "") -> Any:
        return SimpleNamespace(items=[])

    list_namespaced_config_map = list_namespaced_secret = _empty

    def delete_collection_namespaced_pod(self, namespace: str, **kwargs: Any) -> Any:
        """Every pod marked deleted; the answer is the raw list the API server sends."""
        assert "grace_period_seconds" not in kwargs, "a gang is stopped with its own grace"
        assert kwargs.get("_preload_content") is False and kwargs.get("label_selector")
        for name, pod in self.pods.items():
            pod["metadata"]["deletionTimestamp"] = "2026-12-03T06:10:00Z"
            self.journal.append(("delete", name))
        return SimpleNamespace(data=json.dumps({"items": list(self.pods.values())}).encode())

    def confirm_gone(self) -> list[str]:
        """The kubelets confirm the deleted pods' containers ended; what is left."""
        for name in [
            n
            for n, p in self.pods.items()
            if p["metadata"].get("deletionTimestamp") and n not in self.stuck
        ]:
            del self.pods[name]
            self.journal.append(("gone", name))
        return sorted(f"Pod/{name}" for name in self.pods)

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        if name in self.pods:
            raise ApiException(status=409, reason="AlreadyExists")
        pod = json.loads(json.dumps(body))
        with self.lock:  # a gang's pods are created by several threads at once
            pod["status"] = {"phase": "Running", "podIP": f"10.0.9.{len(self.journal)}"}
            self.pods[name] = pod
            self.journal.append(("create", name))

    def read_namespaced_pod_log(self, pod: str, namespace: str, **kwargs: Any) -> Any:
        return HTTPResponse(body=io.BytesIO(self.logs.get(pod, "").encode()), preload_content=False)


@pytest.fixture
def cluster(monkeypatch) -> FakeCluster:
    cluster = FakeCluster()

    def await_gone(api, namespace, selector, timeout, *, kinds=None):
        assert kinds == ("Pod",), "a restart leaves the run's ConfigMap and Secrets"
        return cluster.confirm_gone()

    def await_start(api, run, plan, log):
        pods = [cluster.pods[name] for name in run.pod_names()]
        by_role: dict[str, list[str]] = {}
        for pod in pods:
            labels = pod["metadata"]["labels"]
            by_role.setdefault(labels["tfjob.io/role"], []).append(f"{pod['status']['podIP']}:2222")
        return GangEndpoints.from_payload(by_role)

    def deliver(api, namespace, contents, *args, **kwargs):
        for pod in contents:
            cluster.journal.append(("deliver", pod))

    monkeypatch.setattr(kubeobjects, "await_run_objects_gone", await_gone)
    monkeypatch.setattr(gang, "await_gang_start", await_start)
    monkeypatch.setattr(delivery, "deliver_cluster_files", deliver)

    def stage_restore(api, run, attempts, expires, log):
        # The run's checkpoints (operators/restore.py, tested against S3 on its own) hold
        # step 7: what the owner's last sync wrote within its grace period.
        cluster.journal.append(("restore", expires))
        *earlier, current = attempts
        return [*earlier, replace(current, restored_checkpoint_step=7)]

    monkeypatch.setattr(restart, "clear_attempt_outputs", lambda run: [])
    monkeypatch.setattr(restart, "stage_restore", stage_restore)
    return cluster


def make_run(**fields: Any) -> SimpleNamespace:
    data = load_request(REQUEST).model_dump(mode="json")
    request = load_request({**data, **fields})
    described = describe_run(request, RUN_ID, DAG_ID, "aws_default")
    return SimpleNamespace(
        request=request,
        context={"ti": FakeTaskInstance(described)},
        key=described["run_key"],
        namespace=described["namespace"],
    )


def make_operator(monkeypatch, cluster: FakeCluster) -> TrainingWaitOperator:
    operator = TrainingWaitOperator(task_id="train")
    monkeypatch.setattr(operator, "_client", lambda: cluster)
    return operator


def launch_first_gang(run, cluster: FakeCluster) -> None:
    from tfjob.manifests import RunIdentity, build_pod_manifests

    identity = RunIdentity(run.request.name, RUN_ID, DAG_ID, run.namespace)
    for manifest in build_pod_manifests(run.request, identity):
        cluster.create_namespaced_pod(run.namespace, manifest)
    cluster.journal.clear()


def replica(run, role: str, index: int, **status: Any) -> dict[str, Any]:
    base = {
        "role": role,
        "index": index,
        "pod": f"{run.key}-{role}-{index}",
        "phase": "Running",
        "exit_code": None,
        "reason": None,
        "message": None,
        "node": "node-1",
        "owns_model": role == "chief",
        "pod_reason": None,
        "deleted": False,
    }
    return {**base, **status}


def failed_event(run, failed: dict[str, Any]) -> dict[str, Any]:
    others = [replica(run, "chief", 0), replica(run, "ps", 0), replica(run, "worker", 0)]
    return {
        "state": "failed",
        "replicas": [*others, failed],
        "failed": failed,
        "deciding": ["chief-0"],
        "streamed": {},
    }


def deleted_worker(run) -> dict[str, Any]:
    """worker-1's pod vanished (a drain deleted it): judge_training's PodGone."""
    return replica(
        run,
        "worker",
        1,
        phase="Gone",
        reason="PodGone",
        message="the pod no longer exists",
        node=None,
    )


def succeeded_event(run) -> dict[str, Any]:
    chief = replica(run, "chief", 0, phase="Succeeded", exit_code=0, reason="Completed")
    return {
        "state": "succeeded",
        "replicas": [chief],
        "failed": None,
        "deciding": ["chief-0"],
        "streamed": {},
    }


FIRST = restart.attempts_to_payload(restart.first_attempt(1_800_000_000.0))


def test_a_deleted_worker_restarts_the_gang_once_and_the_run_then_succeeds(monkeypatch, cluster):
    run = make_run(max_restarts=2)
    launch_first_gang(run, cluster)
    del cluster.pods[f"{run.key}-worker-1"]  # drained
    operator = make_operator(monkeypatch, cluster)

    with pytest.raises(TaskDeferred) as deferred:
        operator.finish(run.context, failed_event(run, deleted_worker(run)), attempts=FIRST)

    attempts = deferred.value.kwargs["attempts"]
    assert [(a["number"], a["outcome"]) for a in attempts] == [(1, "restarted"), (2, "running")]
    assert attempts[0]["failed_replica"] == "worker-1"
    assert attempts[0]["kind"] == "deleted"
    assert attempts[0]["reason"] == "worker-1 was deleted"
    assert (attempts[0]["restored_checkpoint_step"], attempts[1]["restored_checkpoint_step"]) == (
        None,
        7,
    )
    assert run.context["ti"].pushed["attempts"] == attempts  # visible while attempt 2 runs
    assert deferred.value.method_name == "finish"
    assert sorted(deferred.value.trigger.expected_pods) == sorted(cluster.pods)
    # every pod of the new gang carries the history, for a new try of train and for archive
    for pod in cluster.pods.values():
        assert json.loads(pod["metadata"]["annotations"][ANNOTATION_ATTEMPTS]) == attempts
    assert "cluster" in run.context["ti"].pushed  # the new gang's ClusterSpec, for run.json

    cluster.logs[f"{run.key}-chief-0"] = 'TFJOB_METRICS {"accuracy": 0.96}\n'
    metrics = operator.finish(run.context, succeeded_event(run), attempts=attempts)

    assert metrics == {"accuracy": 0.96}
    final = run.context["ti"].pushed["attempts"]
    assert [(a["number"], a["outcome"]) for a in final] == [(1, "restarted"), (2, "succeeded")]
    assert final[1]["ended"] is not None


def test_the_new_gang_is_created_only_after_the_old_pods_are_gone(monkeypatch, cluster):
    run = make_run(max_restarts=1)
    launch_first_gang(run, cluster)
    del cluster.pods[f"{run.key}-worker-1"]
    with pytest.raises(TaskDeferred):
        make_operator(monkeypatch, cluster).finish(
            run.context, failed_event(run, deleted_worker(run)), attempts=FIRST
        )

    steps = [step for step, _ in cluster.journal]
    last_gone = max(i for i, step in enumerate(steps) if step == "gone")
    first_create = steps.index("create")
    assert last_gone < first_create  # no two gangs' pods alive at once
    # The checkpoints are staged once the old gang (its owner's last sync) is gone.
    assert last_gone < steps.index("restore") < first_create
    assert steps.count("delete") == 3 and steps.count("create") == 4
    assert steps[-4:] == ["deliver"] * 4  # the ClusterSpec reaches the running new gang


def test_a_gang_whose_pods_do_not_go_is_never_followed_by_another(monkeypatch, cluster):
    run = make_run(max_restarts=1)
    launch_first_gang(run, cluster)
    del cluster.pods[f"{run.key}-worker-1"]
    cluster.stuck.add(f"{run.key}-ps-0")  # its node never confirms
    with pytest.raises(
        TrainingFailed,
        match=r"attempt 2: its gang did not start "
        r"\(GangStopError: .*ps-0",
    ) as failed:
        make_operator(monkeypatch, cluster).finish(
            run.context, failed_event(run, deleted_worker(run)), attempts=FIRST
        )
    assert "create" not in [step for step, _ in cluster.journal]
    assert "training failed after 2 attempts: attempt 1: worker-1 was deleted" in str(failed.value)


def test_a_chief_that_fails_because_its_worker_is_being_deleted_restarts_the_gang(
    monkeypatch, cluster
):
    run = make_run(max_restarts=1)
    launch_first_gang(run, cluster)
    chief = replica(run, "chief", 0, phase="Failed", exit_code=1, reason="Error")
    going = replica(run, "worker", 1, deleted=True)  # still in its grace period, no exit yet
    event = {
        "state": "failed",
        "failed": chief,
        "deciding": ["chief-0"],
        "streamed": {},
        "replicas": [chief, replica(run, "ps", 0), replica(run, "worker", 0), going],
    }
    with pytest.raises(TaskDeferred) as deferred:
        make_operator(monkeypatch, cluster).finish(run.context, event, attempts=FIRST)
    first = deferred.value.kwargs["attempts"][0]
    assert (first["failed_replica"], first["kind"]) == ("worker-1", "deleted")


def test_with_max_restarts_0_a_deleted_worker_fails_the_run_naming_it(monkeypatch, cluster):
    run = make_run(max_restarts=0)
    launch_first_gang(run, cluster)
    with pytest.raises(
        TrainingFailed,
        match=r"^training failed: attempt 1: worker-1 was deleted "
        r"\(not restarted: max_restarts is 0\)",
    ):
        make_operator(monkeypatch, cluster).finish(
            run.context, failed_event(run, deleted_worker(run)), attempts=FIRST
        )
    assert cluster.journal == []  # nothing stopped, nothing created: teardown's job
    assert run.context["ti"].pushed["attempts"][0]["outcome"] == "failed"


def test_a_program_that_exits_1_is_not_restarted_under_retryable(monkeypatch, cluster):
    run = make_run(max_restarts=2)
    launch_first_gang(run, cluster)
    worker = replica(run, "worker", 0, phase="Failed", exit_code=1, reason="Error")
    cluster.logs[f"{run.key}-worker-0"] = "Traceback\nValueError: bad shape\n"
    with pytest.raises(TrainingFailed) as failed:
        make_operator(monkeypatch, cluster).finish(
            run.context, failed_event(run, worker), attempts=FIRST
        )
    text = str(failed.value)
    assert text.startswith(
        "training failed: attempt 1: worker-0 exited 1 (not restarted: a "
        "permanent failure under restart_on=retryable)"
    )
    assert "[worker-0] ValueError: bad shape" in text
    assert cluster.journal == []


def test_over_the_budget_the_run_fails_naming_every_attempt(monkeypatch, cluster):
    run = make_run(max_restarts=1)
    launch_first_gang(run, cluster)
    del cluster.pods[f"{run.key}-worker-1"]
    operator = make_operator(monkeypatch, cluster)
    with pytest.raises(TaskDeferred) as deferred:
        operator.finish(run.context, failed_event(run, deleted_worker(run)), attempts=FIRST)

    killed = replica(run, "worker", 1, phase="Failed", exit_code=143, reason="Error")
    with pytest.raises(TrainingFailed) as failed:
        operator.finish(
            run.context, failed_event(run, killed), attempts=deferred.value.kwargs["attempts"]
        )

    assert str(failed.value).splitlines()[0] == (
        "training failed after 2 attempts: attempt 1: worker-1 was deleted; "
        "attempt 2: worker-1 was killed by SIGTERM (exit code 143) (not restarted: no restarts "
        "left: max_restarts=1, and this was attempt 2 of 2)"
    )
    final = run.context["ti"].pushed["attempts"]
    assert [(a["number"], a["outcome"], a["exit_code"]) for a in final] == [
        (1, "restarted", None),
        (2, "failed", 143),
    ]


def test_a_new_try_of_train_finds_the_attempts_on_the_restarted_gang(monkeypatch, cluster):
    run = make_run(max_restarts=2)
    launch_first_gang(run, cluster)
    del cluster.pods[f"{run.key}-worker-1"]
    with pytest.raises(TaskDeferred) as deferred:
        make_operator(monkeypatch, cluster).finish(
            run.context, failed_event(run, deleted_worker(run)), attempts=FIRST
        )
    attempts = deferred.value.kwargs["attempts"]

    run.context["ti"].pushed.clear()  # Airflow clears a new try's XComs
    with pytest.raises(TaskDeferred) as again:
        make_operator(monkeypatch, cluster).execute(run.context)
    assert again.value.kwargs["attempts"] == attempts
    assert run.context["ti"].pushed["attempts"] == attempts


def test_a_first_gang_has_one_attempt_started_when_launch_saw_it_ready(monkeypatch, cluster):
    run = make_run()
    launch_first_gang(run, cluster)
    with pytest.raises(TaskDeferred) as deferred:
        make_operator(monkeypatch, cluster).execute(run.context)
    assert deferred.value.kwargs["attempts"] == FIRST
    assert FIRST[0]["started"].startswith("2027-01-15T08:00:00")


# --- run.json lists the attempts ------------------------------------------------------------


class MemoryS3:
    """The few S3 calls archive makes, in memory."""

    class exceptions:  # noqa: N801 - boto3's shape
        class NoSuchKey(Exception):
            pass

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_object(self, Bucket: str, Key: str, Body: bytes, **kwargs: Any) -> None:  # noqa: N803
        self.objects[Key] = Body

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803
        if Key not in self.objects:
            raise self.exceptions.NoSuchKey(Key)
        return {"Body": SimpleNamespace(read=lambda: self.objects[Key])}

    def get_paginator(self, name: str) -> Any:
        def paginate(Bucket: str, Prefix: str) -> list[dict[str, Any]]:  # noqa: N803
            return [
                {
                    "Contents": [
                        {"Key": k, "Size": len(v)}
                        for k, v in self.objects.items()
                        if k.startswith(Prefix)
                    ]
                }
            ]

        return SimpleNamespace(paginate=paginate)


def archived_run_json(run, cluster: FakeCluster, attempts: Any) -> dict[str, Any]:
    from operators.archive import archive_run
    from operators.runinfo import read_run

    s3 = MemoryS3()
    archive_run(
        cluster,
        s3,
        read_run(run.context["ti"].described),
        bundle=None,
        cluster_spec=None,
        train_replicas=None,
        metrics=None,
        timings={},
        attempts=attempts,
    )
    key = next(k for k in s3.objects if k.endswith("/run.json"))
    return json.loads(s3.objects[key])


def test_run_json_lists_the_attempts_train_recorded(monkeypatch, cluster):
    run = make_run(max_restarts=2)
    launch_first_gang(run, cluster)
    del cluster.pods[f"{run.key}-worker-1"]
    operator = make_operator(monkeypatch, cluster)
    with pytest.raises(TaskDeferred) as deferred:
        operator.finish(run.context, failed_event(run, deleted_worker(run)), attempts=FIRST)
    operator.finish(run.context, succeeded_event(run), attempts=deferred.value.kwargs["attempts"])

    manifest = archived_run_json(run, cluster, run.context["ti"].pushed["attempts"])
    assert [(a["number"], a["outcome"], a["failed_replica"]) for a in manifest["attempts"]] == [
        (1, "restarted", "worker-1"),
        (2, "succeeded", None),
    ]


def test_run_json_finds_the_attempts_on_the_gang_when_train_recorded_none(monkeypatch, cluster):
    run = make_run(max_restarts=2)
    launch_first_gang(run, cluster)
    del cluster.pods[f"{run.key}-worker-1"]
    with pytest.raises(TaskDeferred) as deferred:
        make_operator(monkeypatch, cluster).finish(
            run.context, failed_event(run, deleted_worker(run)), attempts=FIRST
        )
    # train killed while attempt 2 ran: no final XCom, the pods still say what happened
    manifest = archived_run_json(run, cluster, None)
    assert manifest["attempts"] == deferred.value.kwargs["attempts"]
