"""localkube refuses a write body over 3 MiB with 413, as kube-apiserver does."""

import http.client
import json
import urllib.parse

import pytest
from kubernetes.client.rest import ApiException

LIMIT_MESSAGE = "Request entity too large: limit is 3145728"
MIB = 1024 * 1024


def config_map(name: str, size: int) -> dict:
    return {"metadata": {"name": name}, "data": {"blob": "x" * size}}


def test_a_config_map_of_3_5_mib_is_refused_with_413(localkube_api):
    core = localkube_api.core_v1()
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_config_map("default", config_map("big", int(3.5 * MIB)))
    assert caught.value.status == 413
    status = json.loads(caught.value.body)
    assert status["message"] == LIMIT_MESSAGE
    assert status["reason"] == "RequestEntityTooLarge" and status["code"] == 413
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("big", "default")
    assert missing.value.status == 404


def test_a_config_map_of_2_9_mib_is_created(localkube_api):
    core = localkube_api.core_v1()
    core.create_namespaced_config_map("default", config_map("fits", int(2.9 * MIB)))
    assert len(core.read_namespaced_config_map("fits", "default").data["blob"]) == int(2.9 * MIB)


def test_a_chunked_body_is_refused_once_it_passes_the_limit(localkube_api):
    url = urllib.parse.urlparse(localkube_api.api_url)
    connection = http.client.HTTPSConnection(
        url.hostname, url.port, context=localkube_api.ssl_context(), timeout=30
    )
    body = json.dumps(config_map("chunked", 4 * MIB)).encode()
    chunks = (body[i : i + 256 * 1024] for i in range(0, len(body), 256 * 1024))
    try:
        connection.request(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            body=chunks,
            headers={"Content-Type": "application/json", **localkube_api.auth_headers()},
            encode_chunked=True,
        )
        response = connection.getresponse()
        assert response.status == 413
        assert json.loads(response.read())["message"] == LIMIT_MESSAGE
    finally:
        connection.close()


def test_a_patch_over_the_limit_is_refused(localkube_api):
    core = localkube_api.core_v1()
    core.create_namespaced_config_map("default", config_map("patched", 10))
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_config_map("patched", "default", {"data": {"blob": "y" * (4 * MIB)}})
    assert caught.value.status == 413
    assert core.read_namespaced_config_map("patched", "default").data["blob"] == "x" * 10
