"""The TFJob tab's live side: shared Kubernetes reads, log lines, curves, and the JSON's speed.

runview/live.py and runview/logs.py with fakes, and the /tfjob
app through FastAPI's TestClient with Airflow's guard and database replaced
(as tests/test_run_files.py does). The measured test of the issue's "Done
when" is here: the JSON of a 32-replica run answers in < 200 ms while tabs
poll it, and Kubernetes is read at most once per 2 s whatever their number.
The page itself, against the real Airflow, localkube and S3, is
tests/test_run_view_browser.py.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from typing import Any

import pytest

from runview.live import LiveReads, describe_live_replicas
from runview.logs import (
    LogRequestError,
    check_log_query,
    check_replica_id,
    collect_curves,
    replica_of_log_name,
    select_log_lines,
)
from runview.run import RunTimes, TaskTimes, summarize_run
from tfjob.naming import run_selector
from tfjob.tenants.usage import count_pod_gpus

DAG, RUN = "tfjob_submit__team-a", "manual__1"
NAMESPACE, RUN_KEY = "tfjob-team-a", "digits-1234abcd"


def a_pod(
    role: str, index: int, phase: str = "Running", gpus: int = 0, restarts: int = 0
) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "metadata": {
            "name": f"{RUN_KEY}-{role}-{index}",
            "labels": {"tfjob.io/role": role, "tfjob.io/index": str(index)},
        },
        "spec": {
            "nodeName": f"node-{index % 4}",
            "containers": [{"name": "tensorflow", "resources": {"limits": limits}}],
        },
        "status": {
            "phase": phase,
            "podIP": f"10.77.0.{index + 2}",
            "containerStatuses": [
                {
                    "name": "tensorflow",
                    "restartCount": restarts,
                    "state": {"running": {"startedAt": "t"}},
                }
            ],
        },
    }


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeKubernetes:
    def __init__(self, pods: list[dict[str, Any]], delay_s: float = 0.0) -> None:
        self.pods, self.delay_s = pods, delay_s
        self.pod_reads: list[str] = []
        self.log_reads: list[str] = []
        self.logs: dict[str, str] = {}

    def read_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        self.pod_reads.append(selector)
        time.sleep(self.delay_s)  # an API call's latency, so concurrent callers overlap
        return self.pods

    def read_log(self, namespace: str, pod: str, tail: int) -> str:
        self.log_reads.append(pod)
        return self.logs.get(pod, "")


# --- the shared reads -----------------------------------------------------------------------


def test_pods_are_read_once_per_ttl_whatever_the_number_of_callers():
    kube, clock = FakeKubernetes([a_pod("worker", 0)]), FakeClock()
    live = LiveReads(kube.read_pods, kube.read_log, ttl_s=2.0, clock=clock)
    for _ in range(50):
        live.list_pods(NAMESPACE, RUN_KEY)
    assert len(kube.pod_reads) == 1
    assert kube.pod_reads == [run_selector(RUN_KEY)]
    clock.now += 1.99
    live.list_pods(NAMESPACE, RUN_KEY)
    assert len(kube.pod_reads) == 1
    clock.now += 0.01
    live.list_pods(NAMESPACE, RUN_KEY)
    assert len(kube.pod_reads) == 2
    live.list_pods(NAMESPACE, "other-run")  # each run has its own entry
    assert len(kube.pod_reads) == 3


def test_callers_arriving_during_a_read_share_it_instead_of_starting_another():
    kube = FakeKubernetes([a_pod("worker", 0)], delay_s=0.3)
    live = LiveReads(kube.read_pods, kube.read_log)
    threads = [threading.Thread(target=live.list_pods, args=(NAMESPACE, RUN_KEY)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(kube.pod_reads) == 1


def test_log_tails_are_cached_per_pod():
    kube, clock = FakeKubernetes([]), FakeClock()
    live = LiveReads(kube.read_pods, kube.read_log, clock=clock)
    kube.logs = {"p0": "a\nb\n"}
    assert live.read_log_tail(NAMESPACE, "p0") == "a\nb\n"
    kube.logs = {"p0": "a\nb\nc\n"}
    assert live.read_log_tail(NAMESPACE, "p0") == "a\nb\n"  # within the TTL
    clock.now += 2.0
    assert live.read_log_tail(NAMESPACE, "p0") == "a\nb\nc\n"
    assert kube.log_reads == ["p0", "p0"]


def test_a_live_replica_row_has_node_ip_gpus_and_restarts():
    row = describe_live_replicas([a_pod("worker", 1, gpus=2, restarts=3)])[0]
    assert (row["role"], row["index"], row["phase"]) == ("worker", 1, "Running")
    assert (row["node"], row["ip"], row["gpus"], row["restarts"]) == ("node-1", "10.77.0.3", 2, 3)
    assert (
        count_pod_gpus(
            {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "x"}}}]}}
        )
        == 0
    )


# --- log lines and curves -------------------------------------------------------------------


def test_the_last_lines_holding_the_filter_are_kept_case_insensitively():
    text = "".join(f"line {i} {'Loss' if i % 2 else 'acc'}\r\n" for i in range(10))
    assert select_log_lines(text, 3) == ["line 7 Loss", "line 8 acc", "line 9 Loss"]
    assert select_log_lines(text, 2, "loss") == ["line 7 Loss", "line 9 Loss"]
    assert select_log_lines("", 5) == []


@pytest.mark.parametrize(
    ("replica", "ok"),
    [
        ("worker-0", True),
        ("chief-12", True),
        ("ps-0", True),
        ("../run.json", False),
        ("worker", False),
        ("worker-0.log", False),
        ("x" * 100, False),
    ],
)
def test_a_replica_is_role_dash_index(replica, ok):
    if ok:
        assert check_replica_id(replica) == replica
    else:
        with pytest.raises(LogRequestError, match="expected <role>-<index>"):
            check_replica_id(replica)


def test_tail_and_filter_are_bounded_naming_the_field():
    with pytest.raises(LogRequestError, match="tail 0: from 1 to 2000"):
        check_log_query(0, "")
    with pytest.raises(LogRequestError, match="filter of 201 characters: at most 200"):
        check_log_query(10, "x" * 201)


def test_curves_are_each_replicas_metric_points_in_order():
    logs = {
        "worker-0": 'x\nTFJOB_METRIC {"step": 1, "loss": 2.0}\n'
        '[w] TFJOB_METRIC {"step": 2, "loss": 1.5}\nTFJOB_METRICS {"a": 1}\n',
        "worker-1": "no points\n",
    }
    assert collect_curves(logs) == {
        "worker-0": [{"step": 1.0, "loss": 2.0}, {"step": 2.0, "loss": 1.5}]
    }
    assert replica_of_log_name("s3://b/o/runs/d/r/logs/chief-0.log") == "chief-0"
    assert replica_of_log_name("s3://b/o/runs/d/r/logs/notes.txt") is None


# --- the JSON, measured ---------------------------------------------------------------------

REPLICAS = 32


def summary_of_an_active_run(replicas: int) -> dict[str, Any]:
    described = {
        "request": {
            "name": "digits",
            "tenant": "team-a",
            "mode": "distributed",
            "replicas": {"chief": 1, "worker": replicas - 1},
        },
        "namespace": NAMESPACE,
        "run_key": RUN_KEY,
    }
    cluster = {
        "chief": ["10.77.0.2:2222"],
        "worker": [f"10.77.0.{i + 3}:2222" for i in range(replicas - 1)],
    }
    tasks = {
        t: TaskTimes("success", "2026-12-04T10:00:00+00:00", "2026-12-04T10:00:02+00:00")
        for t in ("validate", "fetch_bundle", "launch", "clusterspec")
    }
    tasks["train"] = TaskTimes("deferred", "2026-12-04T10:00:03+00:00")
    xcoms = {
        ("validate", "return_value"): described,
        ("clusterspec", "return_value"): {"cluster": cluster},
    }
    return summarize_run(DAG, RUN, RunTimes("running", "2026-12-04T10:00:00+00:00"), xcoms, tasks)


@pytest.fixture
def api_of_a_32_replica_run(monkeypatch):
    from airflow.api_fastapi.common.db.common import _get_session
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    from runview import api as run_view_api

    pods = [a_pod("chief", 0)] + [a_pod("worker", i) for i in range(REPLICAS - 1)]
    kube = FakeKubernetes(pods, delay_s=0.02)
    monkeypatch.setattr(
        run_view_api,
        "read_run_summary",
        lambda _session, dag, run: summary_of_an_active_run(REPLICAS),
    )
    monkeypatch.setattr(run_view_api, "is_allowed", lambda *args: True)
    app = run_view_api.build_app(LiveReads(kube.read_pods, kube.read_log))
    app.dependency_overrides[run_view_api.require_xcom_read()[0].dependency] = lambda: None
    app.dependency_overrides[_get_session] = lambda: None
    app.dependency_overrides[get_user] = lambda: None
    return TestClient(app), kube


def test_the_json_of_a_32_replica_run_answers_in_under_200_ms(api_of_a_32_replica_run):
    client, _ = api_of_a_32_replica_run
    durations = []
    for _ in range(20):
        began = time.perf_counter()
        answer = client.get(f"/runs/{DAG}/{RUN}")
        durations.append(time.perf_counter() - began)
        assert answer.status_code == 200
    body = answer.json()
    assert len(body["replicas"]) == REPLICAS and body["replicas_from"] == "kubernetes"
    assert body["can_cancel"] is True and len(body["cluster_rows"]) == REPLICAS
    # Measured, as the issue asks: the typical answer (the median of 20, the first, which
    # reads Kubernetes, included). Not the slowest: on a machine shared with other test
    # processes one answer may wait for a CPU, which says nothing about the view.
    median = statistics.median(durations)
    assert median < 0.200, f"answers took {[round(d * 1000) for d in durations]} ms"
    print(f"32 replicas: median {median * 1000:.1f} ms, max {max(durations) * 1000:.1f} ms")


def test_tabs_polling_together_read_kubernetes_at_most_once_per_2_s(api_of_a_32_replica_run):
    client, kube = api_of_a_32_replica_run
    tabs, answers = 6, []
    began = time.monotonic()
    deadline = began + 4.5

    def poll_like_a_tab() -> None:
        while time.monotonic() < deadline:
            answers.append(client.get(f"/runs/{DAG}/{RUN}").status_code)

    threads = [threading.Thread(target=poll_like_a_tab) for _ in range(tabs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    assert answers and set(answers) == {200}
    # One read per started 2 s window at most: 4.5 s of polling gives 3 windows.
    allowed = int(elapsed // 2.0) + 1
    assert 1 <= len(kube.pod_reads) <= allowed, (len(kube.pod_reads), len(answers), elapsed)
    assert len(answers) > tabs * 2  # the tabs really polled faster than Kubernetes was read


def test_a_live_replica_of_a_restarted_gang_counts_the_gang_restarts_too():
    pod = a_pod("worker", 0, restarts=1)
    pod["metadata"].setdefault("annotations", {})["tfjob.io/attempts"] = json.dumps(
        [{"number": 1, "outcome": "restarted"}, {"number": 2, "outcome": "running"}]
    )
    assert describe_live_replicas([pod])[0]["restarts"] == 2
    pod["metadata"]["annotations"]["tfjob.io/attempts"] = "not json"
    assert describe_live_replicas([pod])[0]["restarts"] == 1
