"""Against the real S3 server process: pods use only what Airflow granted, keys are checked.

What a hostile program in a pod of tenant `test` could try with what it can learn
(our source, a grant of its own): presign with the admin key or a guessed key, use its
tenant's grants outside their reach, smuggle a second `key` into a POST form, or sign
header requests with a made-up secret. Each is refused, the victim's objects stay
byte-for-byte as they were, and the tenant's own grants still work. The rules
themselves: tests/s3/test_s3_gate_rules.py.
"""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from harness.s3_fixtures import S3Server
from operators.s3access import presign_tensorboard_upload

pytestmark = pytest.mark.e2e

RUN = "outputs/job/runs/tfjob__job/manual__1/"  # tenant test's (deploy/tenants.yaml)
VICTIM = "research/outputs/job/runs/tfjob__job/manual__1/"  # tenant research's, same bucket


def fetch(url: str, method: str = "GET", headers: dict[str, str] | None = None, data=None):
    request = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")


def as_pod(server: S3Server, url: str) -> tuple[str, dict[str, str]]:
    """The URL sent to the pod-facing listener the way a relayed pod request arrives."""
    host = server.endpoint.split("://", 1)[1]
    return url.replace(server.endpoint, server.pod_endpoint, 1), {"Host": host}


def post_form(
    url: str, fields: list[tuple[str, str]], body: bytes, headers: dict[str, str]
) -> tuple[int, str]:
    boundary = "hostile-boundary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="f.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
        + body
        + f"\r\n--{boundary}--\r\n".encode()
    )
    content_type = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    return fetch(url, "POST", {**headers, **content_type}, b"".join(parts))


def signer(server: S3Server, key: str, secret: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name=server.region,
        config=Config(signature_version="s3v4"),
    )


@pytest.fixture(scope="module")
def victim(s3_server: S3Server) -> dict[str, bytes]:
    """Objects of tenant research that tenant test's pods must neither read nor change."""
    objects = {
        VICTIM + "bundle.tar.gz": secrets.token_bytes(64),
        VICTIM + "model/saved_model.pb": secrets.token_bytes(64),
        "research/outputs/job/latest": b'{"run": "..."}',
    }
    client = s3_server.client()
    for key, body in objects.items():
        client.put_object(Bucket=s3_server.bucket, Key=key, Body=body)
    client.put_object(Bucket=s3_server.bucket, Key=RUN + "bundle.tar.gz", Body=b"own bundle")
    return objects


def assert_victim_unchanged(server: S3Server, victim: dict[str, bytes]) -> None:
    client = server.client()
    for key, body in victim.items():
        assert client.get_object(Bucket=server.bucket, Key=key)["Body"].read() == body
    listed = client.list_objects_v2(Bucket=server.bucket, Prefix="research/")["Contents"]
    assert sorted(item["Key"] for item in listed) == sorted(victim)


@pytest.mark.parametrize("who", ["admin", "guessed"])
def test_grants_signed_with_the_admin_key_or_a_guessed_key_are_refused_to_pods(
    s3_server: S3Server, victim: dict[str, bytes], who: str
) -> None:
    if who == "admin":
        client = s3_server.presigner()
    else:
        client = signer(s3_server, "tfjob-pods-" + secrets.token_hex(8), secrets.token_hex(20))
    bucket = s3_server.bucket
    target = {"Bucket": bucket, "Key": VICTIM + "bundle.tar.gz"}
    attempts = [
        ("GET", client.generate_presigned_url("get_object", target, 60)),
        ("PUT", client.generate_presigned_url("put_object", target, 60)),
        ("GET", client.generate_presigned_url("list_objects_v2", {"Bucket": bucket}, 60)),
        ("GET", client.generate_presigned_url("list_buckets", {}, 60)),
    ]
    for method, url in attempts:
        pod_url, headers = as_pod(s3_server, url)
        status, body = fetch(pod_url, method, headers, b"planted" if method == "PUT" else None)
        assert status == 403, (method, url, body)
        expected = (
            "only grants signed by a pods identity" if who == "admin" else "InvalidAccessKeyId"
        )
        assert expected in body
    post = client.generate_presigned_post(bucket, VICTIM + "bundle.tar.gz", ExpiresIn=60)
    post_url, headers = as_pod(s3_server, post["url"])
    status, _ = post_form(post_url, list(post["fields"].items()), b"planted", headers)
    assert status == 403
    assert_victim_unchanged(s3_server, victim)


def test_a_tenants_pods_identity_reaches_its_runs_grants_and_nothing_else(
    s3_server: S3Server, victim: dict[str, bytes]
) -> None:
    pods = s3_server.pods_presigner("test")
    bucket = s3_server.bucket
    own = pods.generate_presigned_url(
        "get_object", {"Bucket": bucket, "Key": RUN + "bundle.tar.gz"}, 60
    )
    assert fetch(*as_pod_get(s3_server, own)) == (200, "own bundle")
    upload = pods.generate_presigned_post(bucket, RUN + "model/${filename}", ExpiresIn=60)
    post_url, headers = as_pod(s3_server, upload["url"])
    assert post_form(post_url, list(upload["fields"].items()), b"model", headers)[0] == 204
    got = s3_server.client().get_object(Bucket=bucket, Key=RUN + "model/f.bin")
    assert got["Body"].read() == b"model"

    # Signed by the tenant's own identity, but outside what its pods are granted.
    for params, op in (
        ({"Bucket": bucket, "Key": VICTIM + "bundle.tar.gz"}, "get_object"),  # a neighbour
        ({"Bucket": bucket, "Key": RUN + "run.json"}, "get_object"),  # Airflow's own file
        ({"Bucket": bucket, "Key": RUN + "bundle.tar.gz"}, "put_object"),
        ({"Bucket": bucket, "Key": RUN + "bundle.tar.gz"}, "delete_object"),
        ({"Bucket": bucket, "Prefix": "outputs/"}, "list_objects_v2"),
    ):
        url = pods.generate_presigned_url(op, params, 60)
        method = {"put_object": "PUT", "delete_object": "DELETE"}.get(op, "GET")
        pod_url, headers = as_pod(s3_server, url)
        status, body = fetch(pod_url, method, headers, b"x" if method == "PUT" else None)
        assert status == 403 and "AccessDenied" in body, (op, params, body)
    outside = pods.generate_presigned_post(bucket, VICTIM + "model/${filename}", ExpiresIn=60)
    post_url, headers = as_pod(s3_server, outside["url"])
    status, body = post_form(post_url, list(outside["fields"].items()), b"planted", headers)
    assert status == 403 and "outside what this tenant's pods are granted" in body
    assert_victim_unchanged(s3_server, victim)


def test_a_replica_writes_its_own_summaries_folder_and_no_other_replicas(
    s3_server: S3Server, victim: dict[str, bytes]
) -> None:
    pods = s3_server.pods_presigner("test")
    bucket = s3_server.bucket
    grant = presign_tensorboard_upload(
        pods, f"s3://{bucket}/outputs/job", "tfjob__job", "manual__1", "worker-1", 60
    )
    fields = dict(grant["grants"]["tensorboard/worker-1/"]["fields"])
    post_url, headers = as_pod(s3_server, grant["url"])
    own = RUN + "tensorboard/worker-1/events.out.tfevents.1.host.7"
    assert post_form(post_url, list({**fields, "key": own}.items()), b"events", headers)[0] == 204
    assert s3_server.client().get_object(Bucket=bucket, Key=own)["Body"].read() == b"events"
    # Its signed fields with another key: refused by the policy's starts-with condition.
    for other in (
        RUN + "tensorboard/worker-0/events.out.tfevents.1",
        RUN + "tensorboard/chief-0/events.out.tfevents.1",
        RUN + "tensorboard/worker-10/events.out.tfevents.1",
        RUN + "model/saved_model.pb",
        RUN + "metrics.json",
        VICTIM + "tensorboard/worker-1/events.out.tfevents.1",
    ):
        status, body = post_form(post_url, list({**fields, "key": other}.items()), b"x", headers)
        assert status == 403 and "AccessDenied" in body, (other, body)
    listed = s3_server.client().list_objects_v2(Bucket=bucket, Prefix=RUN + "tensorboard/")
    assert [item["Key"] for item in listed.get("Contents", [])] == [own]
    assert_victim_unchanged(s3_server, victim)


def as_pod_get(server: S3Server, url: str) -> tuple[str, str, dict[str, str]]:
    pod_url, headers = as_pod(server, url)
    return pod_url, "GET", headers


def test_a_smuggled_second_key_field_is_refused_and_stores_nothing(
    s3_server: S3Server, victim: dict[str, bytes]
) -> None:
    grant = s3_server.pods_presigner("test").generate_presigned_post(
        s3_server.bucket, RUN + "model/${filename}", ExpiresIn=60
    )
    fields = [(k, v) for k, v in grant["fields"].items() if k != "key"]
    post_url, headers = as_pod(s3_server, grant["url"])
    for smuggled in (
        [("key", VICTIM + "bundle.tar.gz"), *fields, ("KEY", RUN + "model/f.bin")],
        [("KEY", RUN + "model/f.bin"), *fields, ("key", VICTIM + "bundle.tar.gz")],
        [("Key", VICTIM + "bundle.tar.gz"), *fields],
    ):
        status, body = post_form(post_url, smuggled, b"planted", headers)
        assert status == 400, body
    assert_victim_unchanged(s3_server, victim)


def test_header_requests_with_a_wrong_secret_or_unknown_key_are_refused_on_the_host(
    s3_server: S3Server, victim: dict[str, bytes]
) -> None:
    for key, secret, code in (
        (s3_server.access_key, secrets.token_urlsafe(30), "SignatureDoesNotMatch"),
        ("made-up-" + secrets.token_hex(4), secrets.token_urlsafe(30), "InvalidAccessKeyId"),
    ):
        client = signer(s3_server, key, secret)
        for op, params in (
            ("list_buckets", {}),
            ("get_object", {"Bucket": s3_server.bucket, "Key": VICTIM + "bundle.tar.gz"}),
            ("put_object", {"Bucket": s3_server.bucket, "Key": VICTIM + "x", "Body": b"x"}),
        ):
            with pytest.raises(ClientError) as refused:
                getattr(client, op)(**params)
            assert refused.value.response["Error"]["Code"] == code
            assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert_victim_unchanged(s3_server, victim)


def test_a_pods_key_used_on_the_host_listener_has_the_same_reach(
    s3_server: S3Server, victim: dict[str, bytes]
) -> None:
    key, secret = s3_server.pod_identities["test"]
    client = signer(s3_server, key, secret)
    body = client.get_object(Bucket=s3_server.bucket, Key=RUN + "bundle.tar.gz")["Body"].read()
    assert body == b"own bundle"
    for call in (
        lambda: client.list_objects_v2(Bucket=s3_server.bucket),
        lambda: client.get_object(Bucket=s3_server.bucket, Key=VICTIM + "bundle.tar.gz"),
        lambda: client.put_object(Bucket=s3_server.bucket, Key=RUN + "model/x", Body=b"x"),
    ):
        with pytest.raises(ClientError) as refused:
            call()
        assert refused.value.response["Error"]["Code"] == "AccessDenied"
    assert_victim_unchanged(s3_server, victim)
