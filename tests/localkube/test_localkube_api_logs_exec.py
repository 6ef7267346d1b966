"""pods/log and pods/exec served from what a kubelet leaves in the state dir.

The test plays the kubelet: it writes state.json and CRI-format log files for a pod and starts a
real host process (`sleep`) as the container's main process, so exec enters its namespaces with
nsenter, exactly as for a kubelet-run container.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest
from kubernetes.client import ApiException
from kubernetes.stream import stream

from harness.localkube_fixtures import FakeKubeletPod


def read_log(core, name: str, namespace: str, **options) -> str:
    # kubernetes 36's read_namespaced_pod_log returns str(bytes) ("b'...'") when it preloads
    # the body, against any server: read the raw body instead, as Airflow's provider does.
    response = core.read_namespaced_pod_log(name, namespace, _preload_content=False, **options)
    return response.data.decode()


@pytest.fixture
def fake_pod(localkube_api):
    return FakeKubeletPod(localkube_api, "default")


def test_logs_join_partial_lines_and_honour_tail_and_timestamps(localkube_api, fake_pod):
    core = localkube_api.core_v1()
    old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    fake_pod.append_log("main", [("stdout", "F", "old line")], when=old)
    fake_pod.append_log(
        "main",
        [
            ("stdout", "P", "hel"),
            ("stdout", "F", "lo"),
            ("stderr", "F", "warn"),
            ("stdout", "F", "last"),
        ],
    )

    def read(name, namespace, **options):
        return read_log(core, name, namespace, **options)

    assert read(fake_pod.name, "default") == "old line\nhello\nwarn\nlast\n"
    assert read(fake_pod.name, "default", tail_lines=2) == "warn\nlast\n"
    assert read(fake_pod.name, "default", since_seconds=60) == "hello\nwarn\nlast\n"
    assert read(fake_pod.name, "default", limit_bytes=5) == "old l"
    stamped = read(fake_pod.name, "default", timestamps=True, tail_lines=1)
    stamp, text = stamped.split(" ", 1)
    assert text == "last\n" and stamp.endswith("123Z") and "T" in stamp


def test_previous_logs_come_from_the_earlier_restart(localkube_api, fake_pod):
    core = localkube_api.core_v1()
    fake_pod.append_log("main", [("stdout", "F", "first run")], restart=0)
    fake_pod.append_log("main", [("stdout", "F", "second run")], restart=1)
    fake_pod.containers["main"]["restartCount"] = 1
    fake_pod.write_state()
    assert read_log(core, fake_pod.name, "default") == "second run\n"
    assert read_log(core, fake_pod.name, "default", previous=True) == "first run\n"


def test_logs_of_a_container_not_started_say_it_is_waiting(localkube_api, fake_pod):
    core = localkube_api.core_v1()
    with pytest.raises(ApiException) as error:
        core.read_namespaced_pod_log(fake_pod.name, "default")
    assert error.value.status == 400
    assert (
        json.loads(error.value.body)["message"]
        == f'container "main" in pod "{fake_pod.name}" is waiting to start: ContainerCreating'
    )


def test_logs_need_a_container_name_when_the_pod_has_several(localkube_api):
    pod = FakeKubeletPod(localkube_api, "default", containers=("a", "b"))
    with pytest.raises(ApiException) as error:
        localkube_api.core_v1().read_namespaced_pod_log(pod.name, "default")
    assert (
        json.loads(error.value.body)["message"]
        == f"a container name must be specified for pod {pod.name}, choose one of: [a b]"
    )


def test_follow_streams_until_the_container_terminates(localkube_api, fake_pod):
    core = localkube_api.core_v1()
    fake_pod.set_container_state("main", {"running": {"startedAt": "2026-01-01T00:00:00Z"}})
    fake_pod.append_log("main", [("stdout", "F", "line 0")])

    def kubelet() -> None:
        for i in range(1, 4):
            time.sleep(0.2)
            fake_pod.append_log("main", [("stdout", "F", f"line {i}")])
        fake_pod.set_container_state(
            "main", {"terminated": {"exitCode": 0, "reason": "Completed"}}, phase="Succeeded"
        )

    writer = threading.Thread(target=kubelet)
    writer.start()
    started = time.monotonic()
    response = core.read_namespaced_pod_log(
        fake_pod.name, "default", follow=True, _preload_content=False
    )
    body = b"".join(response.stream(64)).decode()
    writer.join()
    assert body == "line 0\nline 1\nline 2\nline 3\n"
    # The stream ends when the container does (not at a read timeout of a minute or more).
    assert time.monotonic() - started < 30


@pytest.fixture
def running_container(fake_pod):
    process = subprocess.Popen(["sleep", "120"], cwd="/tmp")
    fake_pod.containers["main"].update(
        pid=process.pid, workingDir="/tmp", env={"PATH": os.environ["PATH"], "GREETING": "hello"}
    )
    fake_pod.write_state()
    yield fake_pod
    process.kill()
    process.wait()


def test_exec_with_the_sync_client_v5(localkube_api, running_container):
    core = localkube_api.core_v1()
    pod = running_container
    output = stream(
        core.connect_get_namespaced_pod_exec,
        pod.name,
        "default",
        command=["sh", "-c", "echo $GREETING; pwd; echo oops >&2"],
        stderr=True,
        stdout=True,
        stdin=False,
        tty=False,
    )
    assert "hello\n/tmp\n" in output and "oops" in output
    client = stream(
        core.connect_get_namespaced_pod_exec,
        pod.name,
        "default",
        command=["sh", "-c", "exit 3"],
        stderr=True,
        stdout=True,
        stdin=False,
        tty=False,
        _preload_content=False,
    )
    client.run_forever(timeout=10)
    assert client.returncode == 3


def test_exec_with_stdin_and_the_sync_client(localkube_api, running_container):
    core = localkube_api.core_v1()
    client = stream(
        core.connect_get_namespaced_pod_exec,
        running_container.name,
        "default",
        command=["sh", "-c", "read line; echo got:$line"],
        stderr=True,
        stdout=True,
        stdin=True,
        tty=False,
        _preload_content=False,
    )
    client.write_stdin("ping\n")
    client.run_forever(timeout=10)
    assert client.read_stdout().strip() == "got:ping" or "got:ping" in client.read_all()
    assert client.returncode == 0


def test_exec_with_kubernetes_asyncio_v4(localkube_api, running_container):
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.stream import WsApiClient

    async def run() -> tuple[str, int]:
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=localkube_api.kubeconfig, client_configuration=configuration
        )
        async with WsApiClient(configuration=configuration) as ws_api:
            core = client.CoreV1Api(api_client=ws_api)
            text = await core.connect_get_namespaced_pod_exec(
                running_container.name,
                "default",
                command=["sh", "-c", "echo $GREETING"],
                stderr=True,
                stdin=False,
                stdout=True,
                tty=False,
            )
            ws = await core.connect_get_namespaced_pod_exec(
                running_container.name,
                "default",
                command=["sh", "-c", "exit 7"],
                stderr=True,
                stdin=False,
                stdout=True,
                tty=False,
                _preload_content=False,
            )
            code = None
            async with ws as connection:
                async for message in connection:
                    if message.data[0] == 3:
                        code = WsApiClient.parse_error_data(message.data[1:])
            return text, code

    text, code = asyncio.run(run())
    assert text == "hello\n"
    assert code == 7


def test_exec_into_a_container_without_a_process_is_refused(localkube_api, fake_pod):
    # The sync client turns a refused upgrade into AttributeError (its ApiException has no
    # body), so look at the server's answer directly.
    request = urllib.request.Request(
        f"{localkube_api.api_url}/api/v1/namespaces/default/pods/{fake_pod.name}/exec"
        "?command=true&stdout=true",
        headers={
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Protocol": "v4.channel.k8s.io",
            **localkube_api.auth_headers(),
        },
    )
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=10, context=localkube_api.ssl_context())
    assert error.value.code == 400
    assert (
        json.loads(error.value.read())["message"]
        == 'unable to upgrade connection: container not found ("main")'
    )


def test_logs_of_a_container_that_ended_without_output_are_empty(localkube_api, fake_pod):
    fake_pod.set_container_state(
        "main", {"terminated": {"exitCode": 128, "reason": "StartError"}}, phase="Failed"
    )
    assert read_log(localkube_api.core_v1(), fake_pod.name, "default") == ""
