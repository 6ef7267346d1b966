"""localkube's outage switch (the API server answers 503 for a while, then serves again) and
DELETE preconditions (a uid that is not the object's: 409 Conflict, nothing deleted)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid

import kubernetes
import pytest

from harness.localkube_fixtures import wait_until

OUTAGE = "/localkube/v1/outage"


def raw(
    handle, method: str, path: str, body: dict | None = None, token: bool = True
) -> tuple[int, dict, str]:
    """(status, headers, body text) of a request, errors included."""
    request = urllib.request.Request(
        handle.api_url + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(handle.auth_headers() if token else {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=handle.ssl_context()) as reply:
            return reply.status, dict(reply.headers), reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def blink(handle, seconds: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "localkube",
            "blink",
            "--state-dir",
            handle.state_dir,
            "--seconds",
            str(seconds),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture
def api(localkube_api):
    yield localkube_api
    raw(localkube_api, "POST", OUTAGE, {"seconds": 0})  # never leave the server down


def test_the_switch_answers_503_to_everything_but_health_checks_and_recovers(api):
    done = blink(api, 3)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["active"] is True

    status, headers, text = raw(api, "GET", "/api/v1/namespaces")
    assert status == 503
    assert json.loads(text) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server is currently unable to handle the request (localkube outage switch)",
        "reason": "ServiceUnavailable",
        "code": 503,
    }
    assert "Retry-After" not in headers  # as kube-apiserver: clients must not sleep it away
    assert raw(api, "GET", "/version")[0] == 503
    for health in ("/healthz", "/livez", "/readyz"):
        assert raw(api, "GET", health, token=False)[:3:2] == (200, "ok")
    assert raw(api, "GET", "/api/v1/namespaces", token=False)[0] == 401  # strangers: still 401
    with pytest.raises(kubernetes.client.exceptions.ApiException) as error:
        api.core_v1().list_namespaced_pod("default")
    assert error.value.status == 503

    wait_until(
        lambda: raw(api, "GET", "/api/v1/namespaces")[0] == 200,
        timeout=10,
        what="the API server serving again after the outage",
    )
    assert json.loads(raw(api, "GET", OUTAGE)[2]) == {"active": False, "secondsLeft": 0.0}
    assert api.core_v1().list_namespaced_pod("default").kind == "PodList"


def test_an_outage_can_be_ended_early(api):
    assert raw(api, "POST", OUTAGE, {"seconds": 600})[0] == 200
    assert raw(api, "GET", "/api/v1/namespaces")[0] == 503
    assert blink(api, 0).returncode == 0
    assert raw(api, "GET", "/api/v1/namespaces")[0] == 200


def test_open_watches_end_when_an_outage_begins(api):
    core = api.core_v1()
    listing = core.list_namespaced_config_map("default")
    ended = threading.Event()

    def watch_quietly() -> None:
        for _ in kubernetes.watch.Watch().stream(
            core.list_namespaced_config_map,
            "default",
            resource_version=listing.metadata.resource_version,
            timeout_seconds=60,
        ):
            pass
        ended.set()

    watcher = threading.Thread(target=watch_quietly, daemon=True)
    watcher.start()
    assert raw(api, "POST", OUTAGE, {"seconds": 30})[0] == 200
    assert ended.wait(10), "the watch was still open 10 s into the outage"


def test_the_switch_refuses_a_bad_duration(api):
    status, _, text = raw(api, "POST", OUTAGE, {"seconds": -1})
    assert status == 400 and "seconds: -1 given" in json.loads(text)["message"]
    assert raw(api, "POST", OUTAGE, {"seconds": "20"})[0] == 400
    bad = blink(api, 99999)
    assert bad.returncode == 2 and "from 0 to 3600" in bad.stderr


def test_a_delete_whose_uid_precondition_does_not_match_is_refused_with_409(api):
    core = api.core_v1()
    name = f"cm-{uuid.uuid4().hex[:6]}"
    made = core.create_namespaced_config_map("default", {"metadata": {"name": name}})
    wrong = str(uuid.uuid4())
    status, _, text = raw(
        api,
        "DELETE",
        f"/api/v1/namespaces/default/configmaps/{name}",
        {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": wrong}},
    )
    assert status == 409
    answer = json.loads(text)
    assert (answer["kind"], answer["reason"], answer["code"]) == ("Status", "Conflict", 409)
    assert answer["message"] == (
        f'Operation cannot be fulfilled on configmaps "{name}": Precondition failed: '
        f"UID in precondition: {wrong}, UID in object meta: {made.metadata.uid}"
    )
    assert core.read_namespaced_config_map(name, "default").metadata.uid == made.metadata.uid

    # the python client's V1DeleteOptions, as the janitor sends them
    options = kubernetes.client.V1DeleteOptions(
        preconditions=kubernetes.client.V1Preconditions(uid=made.metadata.uid)
    )
    core.delete_namespaced_config_map(name, "default", body=options)
    with pytest.raises(kubernetes.client.exceptions.ApiException) as error:
        core.read_namespaced_config_map(name, "default")
    assert error.value.status == 404


# --- the kubelet rides out an outage (no server: its API client faked) ------------------------


def test_a_last_status_that_did_not_get_through_is_sent_again():
    import asyncio

    from localkube.kubelet.statusreporter import PodStatusReporter

    class Unavailable:
        async def patch_pod_status(self, namespace, name, status):
            raise RuntimeError("HTTP 503")

    async def flush_during_outage() -> bool:
        reporter = PodStatusReporter(
            Unavailable(), "ns", "p", lambda: {"phase": "Succeeded"}, lambda: None
        )
        await reporter.flush()
        return reporter.dirty.is_set()

    assert asyncio.run(flush_during_outage()), "the reporter's loop would never send it again"


def test_the_kubelets_final_delete_is_asked_again_while_the_api_is_unavailable(monkeypatch):
    import asyncio

    from localkube.kubelet import apiclient

    monkeypatch.setattr(apiclient, "RETRY_DELAY_S", 0.001)
    answers = [
        apiclient.ApiRequestError(503, "unavailable", "DELETE"),
        apiclient.aiohttp.ServerDisconnectedError(),
        apiclient.ApiRequestError(503, "unavailable", "DELETE"),
        {},
    ]

    class Client(apiclient.ApiClient):
        async def request(self, method, path, **kwargs):
            answer = answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer

    asyncio.run(Client("https://127.0.0.1:1", None).delete_pod_now("ns", "p", "uid-1"))
    assert answers == []
