"""Who may use localkube's API: the holder of the kubeconfig's token, and nobody else.

A real API server is asked without a token and with wrong ones (REST, watch, pods/log, the
pods/exec upgrade, discovery): each gets the 401 Status kube-apiserver sends, while the health
checks stay open. With the kubeconfig, the official client, kubectl, a watch and an exec work.
The token and the kubeconfig are private, never on a command line, and survive a restart; a
whole cluster shows the kubelets authenticate too.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import kubernetes
import pytest
from kubernetes.stream import stream

from harness.localkube_fixtures import FakeKubeletPod, start_localkube, stop_localkube
from localkube.apiserver.authentication import bearer_token_of
from localkube.credentials import TokenError, ensure_token, read_token

UNAUTHORIZED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}
WEBSOCKET_UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Protocol": "v4.channel.k8s.io",
}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def answer(
    handle,
    path: str,
    headers: dict[str, str] | None = None,
    method: str = "GET",
    body: dict | None = None,
) -> tuple[int, bytes]:
    """(status, body) of a raw HTTPS request carrying exactly `headers`."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        handle.api_url + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=handle.ssl_context()) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.fixture(scope="module")
def running_pod(localkube_api):
    """A pod whose main process is a real `sleep`, so pods/log and pods/exec have a target."""
    pod = FakeKubeletPod(localkube_api, "default")
    process = subprocess.Popen(["sleep", "300"], cwd="/tmp")
    pod.containers["main"].update(
        pid=process.pid, workingDir="/tmp", env={"PATH": os.environ["PATH"]}
    )
    pod.write_state()
    pod.append_log("main", [("stdout", "F", "from the log")])
    pod.set_container_state("main", {"running": {"startedAt": "2026-01-01T00:00:00Z"}})
    yield pod
    process.kill()
    process.wait()


def guarded_paths(pod) -> dict[str, str]:
    where = f"/api/v1/namespaces/default/pods/{pod.name}"
    return {
        "list": "/api/v1/namespaces/default/pods",
        "get": where,
        "watch": "/api/v1/pods?watch=true&timeoutSeconds=1",
        "watch path": "/api/v1/watch/namespaces/default/configmaps?timeoutSeconds=1",
        "log": f"{where}/log",
        "follow": f"{where}/log?follow=true",
        "group": "/apis/networking.k8s.io/v1/networkpolicies",
        "discovery /api": "/api",
        "discovery /api/v1": "/api/v1",
        "discovery /apis": "/apis",
        "version": "/version",
    }


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer not-the-token"},
        {"Authorization": "Bearer "},
        {"Authorization": "Basic YWRtaW46YWRtaW4="},
        {"Authorization": "not-the-token"},
    ],
    ids=["no token", "wrong token", "empty token", "basic auth", "no scheme"],
)
def test_requests_without_the_token_get_the_401_status(localkube_api, running_pod, headers):
    for what, path in guarded_paths(running_pod).items():
        status, body = answer(localkube_api, path, headers)
        assert (status, json.loads(body)) == (401, UNAUTHORIZED), what
    status, body = answer(
        localkube_api,
        "/api/v1/namespaces/default/configmaps",
        headers,
        method="POST",
        body={"metadata": {"name": "intruder"}},
    )
    assert (status, json.loads(body)) == (401, UNAUTHORIZED)
    assert (
        answer(
            localkube_api,
            "/api/v1/namespaces/default/configmaps/intruder",
            localkube_api.auth_headers(),
        )[0]
        == 404
    )


def test_a_token_that_only_starts_like_the_real_one_is_refused(localkube_api, running_pod):
    token = localkube_api.token
    for guess in (token[:-1], token + "x", token.upper(), f"{token[:-1]}A"):
        if guess == token:
            continue
        status, _ = answer(localkube_api, "/api/v1/pods", {"Authorization": f"Bearer {guess}"})
        assert status == 401, guess


def test_an_exec_without_the_token_is_refused_before_the_upgrade(localkube_api, running_pod):
    exec_path = (
        f"/api/v1/namespaces/default/pods/{running_pod.name}/exec"
        "?command=touch&command=/tmp/localkube-auth-intruder&stdout=true"
    )
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        status, body = answer(localkube_api, exec_path, {**WEBSOCKET_UPGRADE, **headers})
        assert (status, json.loads(body)) == (401, UNAUTHORIZED)
    assert not Path("/tmp/localkube-auth-intruder").exists()


def test_health_checks_stay_open_to_anyone(localkube_api):
    for path in ("/healthz", "/livez", "/readyz"):
        assert answer(localkube_api, path) == (200, b"ok")


def test_the_scheme_is_read_like_kube_apiserver_reads_it(localkube_api):
    token = localkube_api.token
    for header in (f"Bearer {token}", f"bearer {token}", f"  BEARER {token}  "):
        assert answer(localkube_api, "/api/v1/namespaces", {"Authorization": header})[0] == 200
    assert bearer_token_of("Bearer abc def") == "abc"
    assert bearer_token_of("Bearer") is None and bearer_token_of(None) is None


def test_plain_http_is_not_served(localkube_api):
    with pytest.raises((OSError, http.client.HTTPException)):
        urllib.request.urlopen(
            localkube_api.api_url.replace("https://", "http://") + "/healthz", timeout=10
        ).read()


def test_the_kubeconfig_lets_the_official_client_list_create_watch_and_exec(
    localkube_api, running_pod
):
    api_client = kubernetes.config.new_client_from_config(config_file=localkube_api.kubeconfig)
    core = kubernetes.client.CoreV1Api(api_client)
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "auth-ok"}})
    names = [c.metadata.name for c in core.list_namespaced_config_map("default").items]
    assert "auth-ok" in names
    events = [
        (e["type"], e["object"].metadata.name)
        for e in kubernetes.watch.Watch().stream(
            core.list_namespaced_config_map,
            "default",
            field_selector="metadata.name=auth-ok",
            resource_version=str(int(created.metadata.resource_version) - 1),
            timeout_seconds=1,
        )
    ]
    assert events == [("ADDED", "auth-ok")]
    output = stream(
        core.connect_get_namespaced_pod_exec,
        running_pod.name,
        "default",
        command=["sh", "-c", "echo inside"],
        stderr=True,
        stdout=True,
        stdin=False,
        tty=False,
    )
    assert output == "inside\n"
    log = core.read_namespaced_pod_log(running_pod.name, "default", _preload_content=False)
    assert log.data.decode() == "from the log\n"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kubectl_gets_pods_with_the_kubeconfig_unchanged(localkube_api, running_pod):
    done = subprocess.run(
        ["kubectl", "--kubeconfig", localkube_api.kubeconfig, "get", "pods", "-o", "name"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"pod/{running_pod.name}" in done.stdout.split()


def test_the_token_and_the_kubeconfig_are_private(localkube_api):
    state_dir = Path(localkube_api.state_dir)
    assert mode(state_dir) == 0o700 and mode(state_dir / "pki") == 0o700
    for path in (
        state_dir / "token",
        state_dir / "kubeconfig",
        state_dir / "pki" / "ca.crt",
        state_dir / "pki" / "apiserver.crt",
        state_dir / "pki" / "apiserver.key",
    ):
        assert mode(path) == 0o600, path
    assert (state_dir / "token").read_text().strip() == localkube_api.token
    assert len(localkube_api.token) >= 43  # secrets.token_urlsafe(32)


@pytest.mark.e2e
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="the kubelet needs root")
def test_kubelets_authenticate_and_no_command_line_shows_the_token(localkube):
    core = localkube.core_v1()
    ready = {
        n.metadata.name
        for n in core.list_node().items
        if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)
    }
    assert ready == {"node-1", "node-2"}  # reported by the kubelets, through the API
    token = localkube.token.encode()
    processes = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if localkube.state_dir.encode() in cmdline:
            processes.append(cmdline.split(b"\0")[2:3])
            assert token not in cmdline and token not in environ, cmdline
    assert sorted(processes).count([b"localkube.kubelet"]) == 2
    assert [b"localkube.apiserver"] in processes


def test_a_restart_keeps_the_token_and_the_kubeconfig_working(tmp_path):
    handle = start_localkube(tmp_path, kubelets=False)
    saved = tmp_path / "saved-kubeconfig"
    try:
        shutil.copy(handle.kubeconfig, saved)
        token = handle.token
    finally:
        stop_localkube(handle)
    port = handle.api_url.rsplit(":", 1)[1]
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "localkube",
            "up",
            "--state-dir",
            handle.state_dir,
            "--port",
            port,
            "--no-kubelets",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert again.returncode == 0, again.stderr
        assert read_token(handle.state_dir) == token
        client = kubernetes.config.new_client_from_config(config_file=str(saved))
        names = [
            n.metadata.name for n in kubernetes.client.CoreV1Api(client).list_namespace().items
        ]
        assert "default" in names
    finally:
        stop_localkube(handle)


def test_the_token_file_is_made_once_and_kept_private(tmp_path):
    first = ensure_token(tmp_path)
    assert mode(tmp_path / "token") == 0o600
    assert ensure_token(tmp_path) == first == read_token(tmp_path)
    (tmp_path / "token").chmod(0o644)
    assert ensure_token(tmp_path) == first and mode(tmp_path / "token") == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["token"]  # no temporary file left


def test_a_missing_token_says_how_to_make_one(tmp_path):
    with pytest.raises(TokenError, match="python -m localkube up --state-dir"):
        read_token(tmp_path)
    (tmp_path / "token").write_text("\n")
    with pytest.raises(TokenError, match="is empty"):
        read_token(tmp_path)
