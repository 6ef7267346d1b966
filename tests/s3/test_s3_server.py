"""scripts/s3_server.py: up/down as the Makefile and the demo use it, what it checks (SigV4
only), its two listeners (the host's and the pods'), and transfer retries."""

from __future__ import annotations

import dataclasses
import datetime as dt
import http.server
import importlib.util
import json
import os
import stat
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from harness.repo_root import REPO_ROOT
from harness.s3_fixtures import S3Server
from runtime import transfer

REPO = REPO_ROOT
SCRIPT = REPO / "scripts" / "s3_server.py"


def s3_server_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=90
    )


def pid_alive(pid: int) -> bool:
    """Running, not a zombie: a stopped server may wait a moment for init to reap it."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def file_mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_up_daemonises_with_buckets_and_down_stops_it(tmp_path: Path) -> None:
    state = tmp_path / "s3"
    started = subprocess.run(
        [sys.executable, str(SCRIPT), "up", "--port", "0", "--state-dir", str(state)]
        + ["--bucket", "tfjob-demo"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert started.returncode == 0, started.stderr
    info = json.loads((state / "ready.json").read_text())
    credentials = json.loads((state / "credentials.json").read_text())
    try:
        assert f"serving {info['endpoint']}, pods at {info['pod_endpoint']}" in started.stdout
        assert info["pod_endpoint"].startswith("http://127.0.0.2:")
        # The state dir, ready.json (the key), credentials.json (the generated secret) and
        # the log (presigned queries) are private, and the secret is not on the server's
        # command line, which every user can read.
        assert file_mode(state) == 0o700
        assert file_mode(state / "ready.json") == 0o600
        assert file_mode(state / "credentials.json") == 0o600
        assert file_mode(state / "server.log") == 0o600
        assert info["access_key"] == credentials["access_key"]
        assert len(credentials["secret_key"]) >= 40
        cmdline = Path(f"/proc/{info['pid']}/cmdline").read_bytes()
        assert credentials["secret_key"].encode() not in cmdline
        client = boto3.client(
            "s3",
            endpoint_url=info["endpoint"],
            aws_access_key_id=credentials["access_key"],
            aws_secret_access_key=credentials["secret_key"],
            region_name="us-east-1",
        )
        assert [b["Name"] for b in client.list_buckets()["Buckets"]] == ["tfjob-demo"]
        again = s3_server_cli("up", "--port", "0", "--state-dir", str(state))
        assert again.returncode == 0 and "already serving" in again.stdout
    finally:
        stopped = s3_server_cli("down", "--state-dir", str(state))
    assert stopped.returncode == 0 and f"stopped (pid {info['pid']})" in stopped.stdout
    assert not pid_alive(info["pid"])
    assert not (state / "ready.json").exists()
    assert "not running" in s3_server_cli("down", "--state-dir", str(state)).stdout


class FlakyHandler(http.server.BaseHTTPRequestHandler):
    failures_left = 0
    requests = 0

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        type(self).requests += 1
        if type(self).failures_left > 0:
            type(self).failures_left -= 1
            self.send_response(503)
            self.end_headers()
            return
        body = (
            b"payload"
            if self.path.startswith("/ok")
            else b"<Error><Code>AccessDenied</Code><Message>no</Message></Error>"
        )
        self.send_response(200 if self.path.startswith("/ok") else 403)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def flaky_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FlakyHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FlakyHandler.requests = 0
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()


def test_download_retries_server_errors_then_succeeds(tmp_path: Path, flaky_server: str) -> None:
    FlakyHandler.failures_left = 2
    size = transfer.download_to_file(
        f"{flaky_server}/ok?X-Amz-Signature=s", tmp_path / "f", retries=3
    )
    assert size == 7 and (tmp_path / "f").read_bytes() == b"payload"
    assert FlakyHandler.requests == 3


def test_download_does_not_retry_a_refusal_and_names_the_s3_code(
    tmp_path: Path, flaky_server: str
) -> None:
    FlakyHandler.failures_left = 0
    with pytest.raises(transfer.TransferError) as caught:
        transfer.download_to_file(
            f"{flaky_server}/denied?X-Amz-Signature=secret", tmp_path / "f", retries=3
        )
    assert FlakyHandler.requests == 1
    assert caught.value.status == 403 and caught.value.code == "AccessDenied"
    assert "secret" not in str(caught.value) and not (tmp_path / "f").exists()


# ------------------------------------------------------------- SigV4 only, two listeners


def load_s3_checks() -> Any:
    """scripts/ is not a package: load scripts/s3_checks.py by path."""
    spec = importlib.util.spec_from_file_location(
        "tfjob_scripts_s3_checks", REPO / "scripts" / "s3_checks.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


s3_checks = load_s3_checks()


def make_client(server: S3Server, endpoint: str | None = None, **options: Any) -> Any:
    region = options.pop("region", server.region)
    return boto3.client(
        "s3",
        endpoint_url=endpoint or server.endpoint,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        region_name=region,
        **options,
    )


def sigv4(server: S3Server, **options: Any) -> Any:
    return make_client(server, config=Config(signature_version="s3v4"), **options)


def fetch(
    url: str, method: str = "GET", headers: dict[str, str] | None = None, data: bytes | None = None
) -> tuple[int, str]:
    request = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")


def as_pod_sends_it(server: S3Server, url: str) -> tuple[str, dict[str, str]]:
    """A URL presigned for the host's 127.0.0.1:PORT, sent to the pod-facing listener the way a
    relayed pod request arrives there: same bytes, so `Host: 127.0.0.1:PORT`."""
    host = server.endpoint.split("://", 1)[1]
    return url.replace(server.endpoint, server.pod_endpoint, 1), {"Host": host}


def post_form(
    url: str, fields: dict[str, str], body: bytes, headers: dict[str, str]
) -> tuple[int, str]:
    boundary = "tfjob-test-boundary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="f.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
        + body
        + f"\r\n--{boundary}--\r\n".encode()
    )
    content_type = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    return fetch(url, "POST", {**headers, **content_type}, b"".join(parts))


def test_the_pod_facing_listener_serves_presigned_requests_only(s3_server: S3Server) -> None:
    host_client = s3_server.client()
    run = "outputs/j/runs/dag/run-1/"  # a run's prefix under tenant test's outputs/
    host_client.put_object(Bucket=s3_server.bucket, Key=run + "bundle.tar.gz", Body=b"bundle")
    signer = s3_server.pods_presigner("test")  # as Airflow signs the pods' grants
    url = signer.generate_presigned_url(
        "get_object",
        Params={"Bucket": s3_server.bucket, "Key": run + "bundle.tar.gz"},
        ExpiresIn=60,
    )
    pod_url, pod_headers = as_pod_sends_it(s3_server, url)
    assert fetch(pod_url, headers=pod_headers) == (200, "bundle")
    post = signer.generate_presigned_post(s3_server.bucket, run + "model/${filename}", ExpiresIn=60)
    post_url, post_headers = as_pod_sends_it(s3_server, post["url"])
    assert post_form(post_url, post["fields"], b"model", post_headers)[0] == 204

    # The server's key does not work there: every Authorization header is refused...
    pod_client = make_client(s3_server, endpoint=s3_server.pod_endpoint)
    with pytest.raises(ClientError) as refused:
        pod_client.get_object(Bucket=s3_server.bucket, Key=run + "bundle.tar.gz")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    # ...and so is moto's own API (data dump, reset).
    pod_api = s3_server.pod_endpoint + "/moto-api"
    assert fetch(pod_api + "/data.json", headers=pod_headers)[0] == 403
    assert fetch(pod_api + "/reset", "POST", pod_headers, b"")[0] == 403
    status, body = fetch(s3_server.pod_endpoint + f"/{s3_server.bucket}/{run}bundle.tar.gz")
    assert status == 403 and "Anonymous access is refused" in body

    # The host's listener stays as it was: the key works there, and /moto-api/ with it only.
    got = host_client.get_object(Bucket=s3_server.bucket, Key=run + "model/f.bin")
    assert got["Body"].read() == b"model"
    assert s3_server.moto_api("data.json")[0] == 200
    status, body = fetch(s3_server.endpoint + "/moto-api/data.json")
    assert status == 403 and "signed with the admin key" in body
    for tenant in s3_server.pod_identities:  # a pods key is no admin key
        key, secret = s3_server.pod_identities[tenant]
        pods = dataclasses.replace(s3_server, access_key=key, secret_key=secret)
        assert pods.moto_api("reset", "POST")[0] == 403
    assert fetch(url) == (200, "bundle")


def test_sigv2_presigned_urls_and_post_policies_are_refused(s3_server: S3Server) -> None:
    sigv2 = s3_server.client()  # botocore presigns SigV2 in us-east-1 unless told s3v4
    sigv2.put_object(Bucket=s3_server.bucket, Key="v2/k", Body=b"x")
    url = sigv2.generate_presigned_url(
        "get_object", Params={"Bucket": s3_server.bucket, "Key": "v2/k"}, ExpiresIn=60
    )
    assert "AWSAccessKeyId=" in url and "X-Amz-Signature" not in url
    post = sigv2.generate_presigned_post(s3_server.bucket, "v2/${filename}", ExpiresIn=60)
    assert "AWSAccessKeyId" in post["fields"]
    pod_url, pod_headers = as_pod_sends_it(s3_server, url)
    post_url, _ = as_pod_sends_it(s3_server, post["url"])
    for status, body in (
        fetch(url),
        fetch(pod_url, headers=pod_headers),
        post_form(post["url"], post["fields"], b"x", {}),
        post_form(post_url, post["fields"], b"x", pod_headers),
    ):
        assert status == 403 and "SigV2 is not accepted" in body


def wsgi_environ(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> dict:
    """What the WSGI server hands the checker for a request to `url`."""
    parts = urllib.parse.urlsplit(url)
    environ = {
        "REQUEST_METHOD": method,
        "RAW_URI": parts.path + (f"?{parts.query}" if parts.query else ""),
        "PATH_INFO": urllib.parse.unquote(parts.path),
        "QUERY_STRING": parts.query,
        "HTTP_HOST": parts.netloc,
    }
    for name, value in (headers or {}).items():
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    return environ


def checker_at(server: S3Server, amz_date: str, seconds_later: float) -> Any:
    """A checker whose clock reads `seconds_later` after the grant's X-Amz-Date."""
    signed_at = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    moment = signed_at + dt.timedelta(seconds=seconds_later)
    return s3_checks.PresignChecker(
        {server.access_key: server.secret_key}, server.region, now=lambda: moment
    )


def amz_date_of(url: str) -> str:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))["X-Amz-Date"]


def presign_get(
    server: S3Server, key: str = "k/a b+c.txt", expires: int = 60, **options: Any
) -> str:
    return sigv4(server, **options).generate_presigned_url(
        "get_object", Params={"Bucket": server.bucket, "Key": key}, ExpiresIn=expires
    )


def refusal(check: Any, *args: Any) -> Any:
    with pytest.raises(s3_checks.Refused) as caught:
        check(*args)
    return caught.value


def test_query_sigv4_is_checked_as_s3_checks_it(s3_server: S3Server) -> None:
    url = presign_get(s3_server)
    signed = amz_date_of(url)
    checker = checker_at(s3_server, signed, 1)
    checker.check_query_signature(wsgi_environ(url))  # the canonical request matches
    cases = {
        "expired": (checker_at(s3_server, signed, 61), wsgi_environ(url)),
        "signed in the future": (checker_at(s3_server, signed, -3600), wsgi_environ(url)),
        "other host": (checker, wsgi_environ(url.replace("127.0.0.1", "localhost"))),
        "other method": (checker, wsgi_environ(url, "PUT")),
        "unsigned x-amz header": (checker, wsgi_environ(url, headers={"x-amz-acl": "public-read"})),
        "other key": (checker, wsgi_environ(url.replace("a%20b", "a%20c"))),
        "longer expiry": (
            checker,
            wsgi_environ(url.replace("X-Amz-Expires=60", "X-Amz-Expires=99")),
        ),
        "over 7 days": (
            checker,
            wsgi_environ(url.replace("X-Amz-Expires=60", "X-Amz-Expires=604801")),
        ),
        "no signed headers": (checker, wsgi_environ(url.replace("X-Amz-SignedHeaders", "X-No"))),
        "wrong region": (checker, wsgi_environ(presign_get(s3_server, region="eu-west-1"))),
        "session token": (checker, wsgi_environ(presign_get(s3_server, aws_session_token="t"))),
    }
    found = {name: refusal(c.check_query_signature, e) for name, (c, e) in cases.items()}
    codes = {name: (r.status, r.code) for name, r in found.items()}
    assert codes == {
        "expired": (403, "AccessDenied"),
        "signed in the future": (403, "AccessDenied"),
        "other host": (403, "SignatureDoesNotMatch"),
        "other method": (403, "SignatureDoesNotMatch"),
        "unsigned x-amz header": (403, "AccessDenied"),
        "other key": (403, "SignatureDoesNotMatch"),
        "longer expiry": (403, "SignatureDoesNotMatch"),
        "over 7 days": (400, "AuthorizationQueryParametersError"),
        "no signed headers": (400, "AuthorizationQueryParametersError"),
        "wrong region": (400, "AuthorizationQueryParametersError"),
        "session token": (400, "InvalidToken"),
    }
    assert found["expired"].message == "Request has expired"
    assert "region 'eu-west-1' is wrong; expecting 'us-east-1'" in found["wrong region"].message


def test_post_policy_sigv4_fields_expiry_and_every_condition_are_checked(
    s3_server: S3Server,
) -> None:
    post = sigv4(s3_server).generate_presigned_post(
        s3_server.bucket,
        "runs/r1/${filename}",
        Conditions=[["content-length-range", 1, 10]],
        ExpiresIn=60,
    )
    fields = post["fields"]
    checker = checker_at(s3_server, fields["x-amz-date"], 1)
    checker.check_post_policy(s3_server.bucket, fields, "w.bin", 5)
    cases = {
        "expired": (checker_at(s3_server, fields["x-amz-date"], 61), s3_server.bucket, fields, 5),
        "other bucket": (checker, "tfjob-other", fields, 5),
        "key outside the prefix": (checker, s3_server.bucket, {**fields, "key": "runs/r2/x"}, 5),
        "too large": (checker, s3_server.bucket, fields, 11),
        "extra field": (checker, s3_server.bucket, {**fields, "acl": "public-read"}, 5),
        "edited signature": (checker, s3_server.bucket, {**fields, "x-amz-signature": "0" * 64}, 5),
        "no x-amz-date": (
            checker,
            s3_server.bucket,
            {k: v for k, v in fields.items() if k != "x-amz-date"},
            5,
        ),
        "sigv2 field": (
            checker,
            s3_server.bucket,
            {**fields, "AWSAccessKeyId": s3_server.access_key},
            5,
        ),
    }
    found = {
        name: refusal(c.check_post_policy, bucket, form, "w.bin", size)
        for name, (c, bucket, form, size) in cases.items()
    }
    assert {name: (r.status, r.code) for name, r in found.items()} == {
        "expired": (403, "AccessDenied"),
        "other bucket": (403, "AccessDenied"),
        "key outside the prefix": (403, "AccessDenied"),
        "too large": (400, "EntityTooLarge"),
        "extra field": (403, "AccessDenied"),
        "edited signature": (403, "SignatureDoesNotMatch"),
        "no x-amz-date": (400, "InvalidArgument"),
        "sigv2 field": (403, "AccessDenied"),
    }
    assert "Policy expired" in found["expired"].message
    assert "Extra input fields: acl" in found["extra field"].message
    assert "SigV2 is not accepted" in found["sigv2 field"].message
