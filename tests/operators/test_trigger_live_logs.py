"""Which replicas' logs the trigger follows live (issue 18): the deciding ones, at most
`LIVE_LOG_REPLICAS`, not one stream per replica held open in the triggerer for the whole run."""

from __future__ import annotations

import asyncio
import time

from operators import triggers
from operators.triggers import TrainingTrigger


class LogResponse:
    def __init__(self, pod: str) -> None:
        self.chunks = [f"{pod} step 1\n".encode(), b"done\n"]
        self.content = self

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info) -> None:
        return None

    async def iter_any(self):
        for chunk in self.chunks:
            yield chunk


class LogCore:
    def __init__(self) -> None:
        self.followed: list[str] = []

    async def read_namespaced_pod_log(self, pod, namespace, **kwargs):
        assert kwargs["follow"] is True
        self.followed.append(pod)
        return LogResponse(pod)


def started_pod(role: str, index: int) -> dict:
    return {
        "metadata": {
            "name": f"job-1234abcd-{role}-{index}",
            "labels": {"tfjob.io/role": role, "tfjob.io/index": str(index)},
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "tensorflow", "state": {"running": {}}}],
        },
    }


def follow(deciding: list[str], pods: list[dict]) -> tuple[list[str], dict[str, int]]:
    trigger = TrainingTrigger(
        namespace="ns",
        selector="tfjob.io/run=job-1234abcd",
        expected_pods=[p["metadata"]["name"] for p in pods],
        deciding=deciding,
        deadline=time.time() + 60,
        kubernetes_conn_id="kubernetes_default",
    )
    core = LogCore()

    async def run() -> dict[str, int]:
        followers: dict[str, asyncio.Task] = {}
        streamed: dict[str, int] = {}
        by_name = {p["metadata"]["name"]: p for p in pods}
        trigger._follow_started_replicas(core, by_name, followers, streamed)
        trigger._follow_started_replicas(core, by_name, followers, streamed)  # no second stream
        await asyncio.gather(*followers.values())
        return streamed

    streamed = asyncio.run(run())
    return core.followed, streamed


def test_a_parameter_server_gang_streams_only_its_chief() -> None:
    pods = [
        started_pod("chief", 0),
        started_pod("ps", 0),
        *(started_pod("worker", i) for i in range(6)),
    ]
    followed, streamed = follow(["chief-0"], pods)
    assert followed == ["job-1234abcd-chief-0"]
    assert streamed == {"chief-0": 2}  # train writes every other replica's log when it resumes


def test_many_deciding_workers_stream_at_most_the_limit() -> None:
    pods = [started_pod("worker", i) for i in range(8)]
    followed, streamed = follow([f"worker-{i}" for i in range(8)], pods)
    assert triggers.LIVE_LOG_REPLICAS == 2
    assert followed == ["job-1234abcd-worker-0", "job-1234abcd-worker-1"]
    assert streamed == {"worker-0": 2, "worker-1": 2}
