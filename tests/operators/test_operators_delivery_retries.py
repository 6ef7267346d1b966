"""ClusterSpec delivery is retried per replica: a failed exec is tried again for that replica
only, within bounded tries and the delivery's budget; a final API answer is not retried.
(The execs themselves, against real localkube pods: tests/operators/test_operators_delivery.py.)"""

from __future__ import annotations

import threading
from collections import Counter
from http import HTTPStatus
from types import SimpleNamespace

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from operators import delivery
from operators.delivery import DeliveryError, deliver_cluster_files
from operators.runinfo import RunInfo
from tfjob import naming
from tfjob.clusterspec import Endpoint
from tfjob.records.run import GangEndpoints
from tfjob.request.model import Role, load_request


@pytest.fixture
def execs(monkeypatch):
    """Replaces the exec: `failures[pod]` lists what each try of that pod does (an exception
    is raised, None writes); a pod with no script succeeds. Returns (tries per pod, failures)."""
    monkeypatch.setattr(delivery, "DELIVERY_FIRST_DELAY_SECONDS", 0.001)
    monkeypatch.setattr(delivery, "DELIVERY_LONGEST_DELAY_SECONDS", 0.002)
    monkeypatch.setattr(delivery, "EXEC_TIMEOUT_SECONDS", 0)
    tries: Counter[str] = Counter()
    failures: dict[str, list[BaseException | None]] = {}
    written: dict[str, str] = {}
    lock = threading.Lock()

    def fake_exec(api, namespace, pod, content):
        with lock:
            tries[pod] += 1
            script = failures.get(pod) or [None]
            step = script.pop(0) if len(script) > 1 else script[0]
        if step is not None:
            raise step
        written[pod] = content

    monkeypatch.setattr(delivery, "deliver_cluster_file", fake_exec)
    return tries, failures, written


def exited(pod: str, code: int) -> DeliveryError:
    return DeliveryError(f"pod {pod}: writing cluster.json exited with code {code}: mv: busy")


def test_a_replica_whose_exec_fails_is_retried_and_only_that_one(execs):
    tries, failures, written = execs
    failures["job-worker-1"] = [
        exited("job-worker-1", 1),
        ApiException(status=0, reason="Handshake status 503"),
        None,
    ]
    contents = {f"job-worker-{i}": f'{{"index": {i}}}' for i in range(3)}
    deliver_cluster_files(None, "ns", contents, workers=1)
    assert tries == Counter({"job-worker-0": 1, "job-worker-1": 3, "job-worker-2": 1})
    assert written == contents


def test_retries_run_in_parallel_workers_too(execs):
    tries, failures, written = execs
    failures["job-ps-0"] = [ConnectionResetError(104, "Connection reset by peer"), None]
    contents = {name: "{}" for name in ("job-chief-0", "job-ps-0", "job-worker-0")}
    api = k8s.CoreV1Api(k8s.ApiClient(k8s.Configuration()))  # cloned per thread, never called
    deliver_cluster_files(api, "ns", contents, workers=3)
    assert tries["job-ps-0"] == 2 and tries["job-chief-0"] == tries["job-worker-0"] == 1
    assert set(written) == set(contents)


def test_tries_are_bounded_and_the_error_names_the_pod_and_the_count(execs):
    tries, failures, _ = execs
    failures["job-worker-0"] = [exited("job-worker-0", 1)]
    with pytest.raises(DeliveryError) as error:
        deliver_cluster_files(
            None, "ns", {"job-worker-0": "{}", "job-worker-1": "{}"}, workers=1, attempts=3
        )
    assert tries["job-worker-0"] == 3 and tries["job-worker-1"] == 1
    assert str(error.value) == (
        "cluster.json reached 1 of 2 pods; pod job-worker-0: writing "
        "cluster.json exited with code 1: mv: busy (after 3 tries)"
    )


def test_a_final_api_answer_is_not_retried(execs):
    tries, failures, _ = execs
    failures["job-worker-0"] = [ApiException(status=404, reason="Not Found")]
    failures["job-worker-1"] = [ApiException(status=0, reason="Handshake status 403 Forbidden")]
    with pytest.raises(DeliveryError, match=r"pod job-worker-0: exec failed \(404 Not Found\)"):
        deliver_cluster_files(None, "ns", {"job-worker-0": "{}", "job-worker-1": "{}"}, workers=1)
    assert tries == Counter({"job-worker-0": 1, "job-worker-1": 1})


def test_no_try_starts_that_could_not_end_within_the_budget(execs, monkeypatch):
    tries, failures, _ = execs
    monkeypatch.setattr(delivery, "EXEC_TIMEOUT_SECONDS", 30)
    failures["job-worker-0"] = [exited("job-worker-0", 1)]
    with pytest.raises(DeliveryError, match="exited with code 1"):
        deliver_cluster_files(None, "ns", {"job-worker-0": "{}"}, budget=10.0)
    assert tries["job-worker-0"] == 1


def test_attempts_below_one_are_refused():
    with pytest.raises(ValueError, match="attempts: 0 given"):
        deliver_cluster_files(None, "ns", {"p": "{}"}, attempts=0)


def make_ps_run() -> RunInfo:
    request = load_request(
        {
            "name": "lost",
            "tenant": "test",
            "mode": "distributed",
            "strategy": "parameter_server",
            "replicas": {"chief": 1, "ps": 1, "worker": 2},
            "success_policy": "chief",
            "image": "python:3.11",
            "entrypoint": ["python3", "train.py"],
            "bundle": "s3://bench/bundle.tar.gz",
            "output": "s3://bench/out/lost",
        }
    )
    dag_id, run_id = "tfjob__lost", "manual__1"
    return RunInfo(
        request=request,
        run_id=run_id,
        dag_id=dag_id,
        namespace=naming.tenant_namespace("test"),
        run_key=naming.run_key("lost", dag_id, run_id),
        aws_conn_id="aws_default",
    )


def gang_endpoints(run: RunInfo) -> GangEndpoints:
    replicas = [(Role.CHIEF, 0), (Role.PS, 0), (Role.WORKER, 0), (Role.WORKER, 1)]
    return GangEndpoints(
        tuple(Endpoint(role, i, f"10.0.0.{n}", 2222) for n, (role, i) in enumerate(replicas))
    )


@pytest.fixture
def parallel_clients(monkeypatch):
    """The parallel delivery's per-thread clients, which the fake exec never uses."""
    spare = SimpleNamespace(api_client=SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(delivery, "clone_core_api", lambda api: spare)


def listing(run: RunInfo, *, without: str = "", deleting: str = "") -> list[dict]:
    pods = []
    for name in run.pod_names():
        if name == without:
            continue
        meta = {
            "name": name,
            **({"deletionTimestamp": "2026-12-07T23:00:00Z"} if name == deleting else {}),
        }
        pods.append({"metadata": meta})
    return pods


def fail_exec_to(failures: dict, run: RunInfo, role: str, index: int, status: int) -> str:
    """Every exec into that replica's pod is answered `status`; returns the pod's name."""
    pod = naming.pod_name(run.run_key, role, index)
    failures[pod] = [ApiException(status=status, reason=HTTPStatus(status).phrase)]
    return pod


def list_pods_as(monkeypatch, pods: list[dict]) -> None:
    monkeypatch.setattr(delivery.kubeobjects, "list_run_pods", lambda api, ns, sel: pods)


@pytest.mark.parametrize("how", ["gone", "being deleted"])
def test_a_replica_deleted_during_the_first_delivery_is_left_to_train(
    execs, parallel_clients, monkeypatch, how
):
    tries, failures, written = execs
    run = make_ps_run()
    lost = fail_exec_to(failures, run, "worker", 1, 404)
    list_pods_as(
        monkeypatch, listing(run, without=lost) if how == "gone" else listing(run, deleting=lost)
    )

    cluster = delivery.deliver_first_cluster_spec(None, run, gang_endpoints(run))

    assert cluster["worker"] == ["10.0.0.2:2222", "10.0.0.3:2222"]  # the ClusterSpec they got
    assert set(written) == set(run.pod_names()) - {lost}


def test_a_delivery_that_failed_to_a_pod_still_there_fails_the_step(
    execs, parallel_clients, monkeypatch
):
    tries, failures, written = execs
    run = make_ps_run()
    stuck = fail_exec_to(failures, run, "worker", 1, 403)
    list_pods_as(monkeypatch, listing(run))

    with pytest.raises(DeliveryError, match="cluster.json reached 3 of 4 pods") as failed:
        delivery.deliver_first_cluster_spec(None, run, gang_endpoints(run))
    assert failed.value.undelivered == (stuck,)


def test_a_ps_deleted_during_the_first_delivery_fails_the_step(
    execs, parallel_clients, monkeypatch
):
    tries, failures, written = execs
    run = make_ps_run()
    lost = fail_exec_to(failures, run, "ps", 0, 404)
    list_pods_as(monkeypatch, listing(run, without=lost))

    with pytest.raises(DeliveryError, match=f"pod {lost}: exec failed \\(404"):
        delivery.deliver_first_cluster_spec(None, run, gang_endpoints(run))
