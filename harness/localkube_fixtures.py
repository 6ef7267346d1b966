"""A real localkube for tests: `python -m localkube up` on a free port in a temporary state dir.

A pytest plugin (tests/conftest.py registers it): any test takes the fixtures by name.

    def test_something(localkube):            # API server + one kubelet per node
        client = localkube.core_v1()

`localkube` (function-scoped) starts the whole cluster (kubelets need root); `localkube_api`
(module-scoped) starts only the API server, with nodes that no kubelet reports Ready: use
`mark_node_ready(handle, "node-1")` to let the scheduler bind to a node. Both tear down with
`python -m localkube down`. For other shapes call `start_localkube(...)` / `stop_localkube(...)`.
`FakeKubeletPod(handle, namespace)` plays the kubelet for one pod (state.json, CRI log files,
container status) so pods/log and pods/exec can be tested without kubelets.

The API server speaks HTTPS and wants the cluster's bearer token on every request. Clients go
through the kubeconfig (`handle.kube_configuration()`, `handle.core_v1()`, `kubectl
--kubeconfig`); raw HTTP sends `handle.auth_headers()` with `context=handle.ssl_context()`
(`handle.request(...)` does), token and CA read from the kubeconfig as its users read them.
"""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

UP_TIMEOUT_S = 120.0
DOWN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class LocalkubeHandle:
    api_url: str
    kubeconfig: str
    state_dir: str

    @property
    def token(self) -> str:
        """The bearer token, where kubeconfig users find it (users[0].user.token)."""
        return self._kubeconfig()["users"][0]["user"]["token"]

    def auth_headers(self) -> dict[str, str]:
        """The header raw HTTP requests to this API server need."""
        return {"Authorization": f"Bearer {self.token}"}

    def ssl_context(self) -> ssl.SSLContext:
        """Trusts the cluster CA of the kubeconfig (certificate-authority-data), nothing else."""
        ca_data = self._kubeconfig()["clusters"][0]["cluster"]["certificate-authority-data"]
        return ssl.create_default_context(cadata=base64.b64decode(ca_data).decode())

    def _kubeconfig(self) -> dict:
        return yaml.safe_load(Path(self.kubeconfig).read_text())

    def kube_configuration(self):
        """A `kubernetes` Configuration loaded from this cluster's kubeconfig (no global
        configuration touched)."""
        import kubernetes

        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(
            config_file=self.kubeconfig, client_configuration=configuration
        )
        return configuration

    def core_v1(self):
        """A `kubernetes` CoreV1Api bound to this cluster through its kubeconfig."""
        import kubernetes

        return kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(self.kube_configuration()))

    def request(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        content_type: str = "application/json",
    ) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.api_url + path,
            data=data,
            method=method,
            headers={"Content-Type": content_type, **self.auth_headers()},
        )
        with urllib.request.urlopen(request, timeout=10, context=self.ssl_context()) as response:
            return json.loads(response.read())


def start_localkube(
    tmp_path: Path,
    forward_ports: tuple[int | str, ...] = (),
    kubelets: bool = True,
    nodes_file: str | None = None,
) -> LocalkubeHandle:
    """Start localkube in `tmp_path/localkube` on a free port; returns once it serves.

    `forward_ports`: `--forward` specs, a port (9000) or a port relayed elsewhere
    ("9000=127.0.0.2:9000"); for the S3 server use `S3Server.pod_forward()`."""
    state_dir = Path(tmp_path) / "localkube"
    argv = [sys.executable, "-m", "localkube", "up", "--state-dir", str(state_dir), "--port", "0"]
    if forward_ports:
        argv += ["--forward", *[str(p) for p in forward_ports]]
    if not kubelets:
        argv.append("--no-kubelets")
    if nodes_file:
        argv += ["--nodes", nodes_file]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=UP_TIMEOUT_S)
    if result.returncode != 0:
        stop_localkube(state_dir)
        raise RuntimeError(f"localkube up failed ({result.returncode}): {result.stderr}")
    info = json.loads((state_dir / "localkube.json").read_text())
    return LocalkubeHandle(info["api_url"], str(state_dir / "kubeconfig"), str(state_dir))


def stop_localkube(handle_or_dir: LocalkubeHandle | Path | str) -> None:
    state_dir = (
        handle_or_dir.state_dir
        if isinstance(handle_or_dir, LocalkubeHandle)
        else str(handle_or_dir)
    )
    subprocess.run(
        [sys.executable, "-m", "localkube", "down", "--state-dir", state_dir],
        capture_output=True,
        timeout=DOWN_TIMEOUT_S,
    )


def mark_node_ready(handle: LocalkubeHandle, node: str, ready: bool = True) -> None:
    """Play the kubelet's part for a node: PATCH its Ready condition."""
    handle.request(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "reason": "KubeletReady",
                        "message": "set by a test",
                    }
                ]
            }
        },
        content_type="application/merge-patch+json",
    )


def wait_until(predicate, timeout: float = 60.0, what: str = "condition", interval: float = 0.2):
    """Call `predicate` until it returns something truthy, and return that; AssertionError
    naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(interval)


def restart_kubelet(handle: LocalkubeHandle, node: str, log_path: Path) -> subprocess.Popen:
    """Start a kubelet for `node` (after a test killed the one `up` started); SIGTERM it when
    done: `down` only knows the pids `up` recorded."""
    with open(log_path, "w") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "localkube.kubelet",
                "--api",
                handle.api_url,
                "--node",
                node,
                "--state-dir",
                handle.state_dir,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def cri_stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"


class FakeKubeletPod:
    """A pod bound to node-1 whose kubelet files (state.json, CRI logs) the test writes itself,
    for pods/log and pods/exec tests against an API server without kubelets."""

    def __init__(self, handle, namespace: str, containers: tuple[str, ...] = ("main",)) -> None:
        self.handle, self.namespace = handle, namespace
        self.name = f"p-{uuid.uuid4().hex[:6]}"
        core = handle.core_v1()
        pod = core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": self.name},
                "spec": {
                    "schedulerName": "nobody",
                    "containers": [{"name": c, "image": "busybox:1"} for c in containers],
                },
            },
        )
        self.uid = pod.metadata.uid
        handle.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods/{self.name}/binding",
            {"target": {"kind": "Node", "name": "node-1"}},
        )
        self.dir = Path(handle.state_dir) / "kubelet" / "pods" / self.uid
        self.containers = {
            c: {"pid": None, "restartCount": 0, "env": {}, "workingDir": "/", "root": None}
            for c in containers
        }
        self.write_state()

    def write_state(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(
            json.dumps(
                {
                    "namespace": self.namespace,
                    "name": self.name,
                    "uid": self.uid,
                    "netns": "",
                    "ip": "10.77.1.2",
                    "containers": self.containers,
                }
            )
        )
        tmp.replace(self.dir / "state.json")

    def append_log(
        self,
        container: str,
        lines: list[tuple[str, str, str]],
        restart: int = 0,
        when: datetime.datetime | None = None,
    ) -> None:
        path = self.dir / "logs" / container / f"{restart}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        stamp = cri_stamp(when or datetime.datetime.now(datetime.UTC))
        with path.open("a") as handle:
            for stream_name, tag, text in lines:
                handle.write(f"{stamp} {stream_name} {tag} {text}\n")

    def set_container_state(self, container: str, state: dict, phase: str = "Running") -> None:
        self.handle.request(
            "PATCH",
            f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status",
            {
                "status": {
                    "phase": phase,
                    "containerStatuses": [
                        {
                            "name": container,
                            "state": state,
                            "ready": "running" in state,
                            "restartCount": self.containers[container]["restartCount"],
                            "image": "busybox:1",
                            "imageID": "",
                            "started": "running" in state,
                        }
                    ],
                }
            },
            content_type="application/merge-patch+json",
        )


@pytest.fixture
def localkube(tmp_path: Path) -> Iterator[LocalkubeHandle]:
    handle = start_localkube(tmp_path)
    try:
        yield handle
    finally:
        stop_localkube(handle)


@pytest.fixture(scope="module")
def localkube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalkubeHandle]:
    handle = start_localkube(tmp_path_factory.mktemp("localkube-api"), kubelets=False)
    try:
        yield handle
    finally:
        stop_localkube(handle)
