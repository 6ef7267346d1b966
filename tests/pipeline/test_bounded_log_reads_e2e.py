"""The product's bounded log reads against localkube's real pods/log (issue 27 item 3): the
sync client's head and tail reads (operators/logreads.py) and the trigger's follower through
kubernetes_asyncio, over a log holding a 2 MiB line between ordinary ones.

An API server without kubelets: the pod's CRI log file is written by the test
(localkube_fixtures.FakeKubeletPod), so the log is exactly what is asserted.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest

from harness.localkube_fixtures import FakeKubeletPod
from operators import triggers
from operators.logreads import read_log_head, read_newest_lines
from operators.podlogs import describe_cut_line
from operators.settings import LOG_LINE_MAX_BYTES
from operators.triggers import TrainingTrigger

pytestmark = [pytest.mark.e2e]

LONG = 2 * 1024 * 1024
CUT = describe_cut_line(LOG_LINE_MAX_BYTES).decode()


@pytest.fixture(scope="module")
def pod_with_a_long_line(localkube_api):
    namespace = f"logs-{uuid.uuid4().hex[:6]}"
    localkube_api.core_v1().create_namespace({"metadata": {"name": namespace}})
    pod = FakeKubeletPod(localkube_api, namespace, containers=("tensorflow",))
    lines = [f"step {i}" for i in range(100)] + ["x" * LONG] + ["last"]
    pod.append_log("tensorflow", [("stdout", "F", text) for text in lines])
    pod.set_container_state("tensorflow", {"terminated": {"exitCode": 0}}, phase="Succeeded")
    return pod


def test_a_head_read_gets_its_bound_and_knows_the_log_goes_on(localkube_api, pod_with_a_long_line):
    pod = pod_with_a_long_line
    read = read_log_head(localkube_api.core_v1(), pod.namespace, pod.name, "tensorflow", 1000)
    assert len(read.data) == 1000 and read.truncated
    assert read.data.startswith(b"step 0\nstep 1\n")


def test_the_newest_lines_keep_the_end_of_a_log_with_a_long_line(
    localkube_api, pod_with_a_long_line
):
    pod = pod_with_a_long_line
    core = localkube_api.core_v1()
    assert read_newest_lines(core, pod.namespace, pod.name, "tensorflow", 1, 4096) == "last\n"
    text = read_newest_lines(core, pod.namespace, pod.name, "tensorflow", 50, 64 * 1024)
    assert len(text) <= 64 * 1024  # the 2 MiB line made the server's answer too long: fewer lines


def test_the_trigger_follows_the_log_cutting_the_long_line(
    localkube_api, pod_with_a_long_line, monkeypatch
):
    from kubernetes_asyncio import client, config

    pod = pod_with_a_long_line
    monkeypatch.setattr(triggers, "LIVE_LOG_MAX_BYTES", 64 * 1024 * 1024)
    trigger = TrainingTrigger(
        namespace=pod.namespace,
        selector="x=y",
        expected_pods=[pod.name],
        deciding=["chief-0"],
        deadline=time.time() + 60,
        kubernetes_conn_id="kubernetes_default",
    )
    messages: list[str] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger(f"test.follow.{pod.name}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(Recorder())
    trigger._log = logger

    async def follow() -> dict[str, int]:
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=localkube_api.kubeconfig, client_configuration=configuration
        )
        streamed: dict[str, int] = {}
        async with client.ApiClient(configuration) as api_client:
            core = client.CoreV1Api(api_client)
            await asyncio.wait_for(
                trigger._follow_log(core, pod.name, "chief-0", streamed), timeout=30
            )
        return streamed

    streamed = asyncio.run(follow())
    lines = [m for m in messages if m.startswith("[chief-0] ")]
    assert streamed == {"chief-0": 102}, messages[-3:]
    assert lines[99] == "[chief-0] step 99"
    assert lines[100] == "[chief-0] " + "x" * LOG_LINE_MAX_BYTES + CUT
    assert lines[101] == "[chief-0] last"
