"""The local S3 gate's rules, without a server: header SigV4, pods' reach, POST forms, keys.

Unit tests of scripts/s3_header_auth.py (boto3's own signed requests pass, a wrong
secret or an unknown key does not), scripts/s3_reach.py (what a pods identity may
touch), scripts/s3_forms.py (a form is read once, the way moto reads it) and
scripts/s3_identities.py (generated, private, kept keys). The same rules against the
real server process: tests/s3/test_s3_pod_reach.py.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import secrets
import stat
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from scripts import s3_identities  # noqa: E402
from scripts.s3_checks import PresignChecker, Refused, parse_amz_date  # noqa: E402
from scripts.s3_forms import read_upload_form  # noqa: E402
from scripts.s3_header_auth import check_header_signature  # noqa: E402
from scripts.s3_reach import judge_pod_request  # noqa: E402

KEY = "tfjob-admin-" + secrets.token_hex(4)
SECRET = secrets.token_urlsafe(30)
REGION = "us-east-1"
PREFIXES = ("s3://tfjob-test/outputs/", "s3://tfjob-other/outputs/")
RUN = "outputs/job/runs/tfjob__job/manual__1/"


def signed_environ(
    method: str,
    url: str,
    secret: str = SECRET,
    key: str = KEY,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    payload: str | None = None,
) -> dict[str, Any]:
    """The WSGI environ of a request botocore signed in the header, as S3 receives it."""
    request = AWSRequest(method=method, url=url, data=body, headers=headers or {})
    if payload is not None:
        request.headers["X-Amz-Content-SHA256"] = payload
    request.context["payload_signing_enabled"] = payload is None
    S3SigV4Auth(Credentials(key, secret), "s3", REGION).add_auth(request)
    parts = urllib.parse.urlsplit(url)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": urllib.parse.unquote(parts.path),
        "RAW_URI": parts.path + ("?" + parts.query if parts.query else ""),
        "QUERY_STRING": parts.query,
        "wsgi.input": io.BytesIO(body),
    }
    for name, value in request.headers.items():
        upper = name.upper().replace("-", "_")
        if upper in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            environ[upper] = value
        else:
            environ["HTTP_" + upper] = value
    environ["HTTP_HOST"] = parts.netloc
    return environ


def checker() -> PresignChecker:
    return PresignChecker({KEY: SECRET}, REGION)


@pytest.mark.parametrize(
    "method,url,body",
    [
        ("GET", "http://127.0.0.1:9000/", b""),
        ("GET", "http://127.0.0.1:9000/tfjob-test?list-type=2&prefix=a%20b%2Bc&max-keys=5", b""),
        ("PUT", "http://127.0.0.1:9000/tfjob-test/k/a%20b%2Bc~%C3%A9.txt", b"payload"),
        ("POST", "http://127.0.0.1:9000/tfjob-test/k/big?uploads", b""),
        ("DELETE", "http://127.0.0.1:9000/tfjob-test/k", b""),
    ],
)
def test_requests_boto_signs_in_the_header_pass(method: str, url: str, body: bytes) -> None:
    assert check_header_signature(checker(), signed_environ(method, url, body=body)) == KEY


@pytest.mark.parametrize("payload", ["UNSIGNED-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"])
def test_the_payload_hash_is_taken_as_sent(payload: str) -> None:
    environ = signed_environ("PUT", "http://127.0.0.1:9000/b/k", body=b"x", payload=payload)
    assert check_header_signature(checker(), environ) == KEY


def test_a_wrong_secret_is_signature_does_not_match() -> None:
    environ = signed_environ("GET", "http://127.0.0.1:9000/b/k", secret="guessed")
    with pytest.raises(Refused) as refused:
        check_header_signature(checker(), environ)
    assert (refused.value.code, refused.value.status) == ("SignatureDoesNotMatch", 403)


def test_an_unknown_key_is_invalid_access_key_id() -> None:
    environ = signed_environ("GET", "http://127.0.0.1:9000/b/k", key="made-up")
    with pytest.raises(Refused) as refused:
        check_header_signature(checker(), environ)
    assert (refused.value.code, refused.value.status) == ("InvalidAccessKeyId", 403)


def test_a_changed_request_no_longer_matches_its_signature() -> None:
    environ = signed_environ("GET", "http://127.0.0.1:9000/b/mine")
    environ["PATH_INFO"], environ["RAW_URI"] = "/b/theirs", "/b/theirs"
    with pytest.raises(Refused) as refused:
        check_header_signature(checker(), environ)
    assert refused.value.code == "SignatureDoesNotMatch"


def test_an_unsigned_amz_header_and_sigv2_are_refused() -> None:
    environ = signed_environ("GET", "http://127.0.0.1:9000/b/k")
    environ["HTTP_X_AMZ_COPY_SOURCE"] = "other/k"
    with pytest.raises(Refused, match="not signed: x-amz-copy-source"):
        check_header_signature(checker(), environ)
    environ = {"HTTP_AUTHORIZATION": "AWS key:c2lnbmF0dXJl", "REQUEST_METHOD": "GET"}
    with pytest.raises(Refused, match="SigV2 is not accepted"):
        check_header_signature(checker(), environ)


def test_a_request_signed_long_ago_is_too_skewed() -> None:
    environ = signed_environ("GET", "http://127.0.0.1:9000/b/k")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=16)
    with pytest.raises(Refused) as refused:
        check_header_signature(checker(), environ, now=later)
    assert refused.value.code == "RequestTimeTooSkewed"


# --- what a pods identity may reach ---------------------------------------------------------


@pytest.mark.parametrize(
    "method,bucket,key",
    [
        ("GET", "tfjob-test", RUN + "bundle.tar.gz"),
        ("HEAD", "tfjob-test", RUN + "checkpoints/ckpt-1.index"),
        ("GET", "tfjob-other", "outputs/a/b/runs/d/r/checkpoints/checkpoint"),
        ("POST", "tfjob-test", RUN + "model/saved_model.pb"),
        ("POST", "tfjob-test", RUN + "checkpoints/ckpt-2.data-00000-of-00001"),
        ("POST", "tfjob-test", RUN + "metrics.json"),
        ("POST", "tfjob-test", RUN + "tensorboard/worker-1/events.out.tfevents.1.host.7"),
    ],
)
def test_a_pods_identity_reaches_its_runs_grants(method: str, bucket: str, key: str) -> None:
    assert judge_pod_request(method, bucket, key, [], PREFIXES, form=method == "POST").allowed


def test_a_pods_post_is_granted_only_as_a_policy_form() -> None:
    # a presigned or header-signed POST to a key is another S3 operation (restore, select)
    verdict = judge_pod_request("POST", "tfjob-test", RUN + "model/x", [], PREFIXES)
    assert not verdict.allowed and "POST" in verdict.reason


@pytest.mark.parametrize(
    "method,bucket,key,query",
    [
        ("GET", "tfjob-test", RUN + "run.json", []),  # Airflow's, not the pods'
        ("GET", "tfjob-test", RUN + "model/saved_model.pb", []),  # written, never read
        ("POST", "tfjob-test", RUN + "bundle.tar.gz", []),  # the snapshot is read-only
        ("POST", "tfjob-test", RUN + "logs/chief-0.log", []),
        ("POST", "tfjob-test", RUN + "metrics.json.bak", []),
        ("POST", "tfjob-test", RUN + "model/", []),
        ("POST", "tfjob-test", RUN + "tensorboard/", []),
        ("POST", "tfjob-test", RUN + "tensorboard", []),
        ("GET", "tfjob-test", RUN + "tensorboard/worker-1/events.out.tfevents.1", []),  # written
        ("PUT", "tfjob-test", RUN + "tensorboard/worker-1/events.out.tfevents.1", []),
        ("POST", "tfjob-test", "research/outputs/j/runs/d/r/tensorboard/worker-0/x", []),
        ("PUT", "tfjob-test", RUN + "model/x", []),
        ("DELETE", "tfjob-test", RUN + "checkpoints/x", []),
        ("GET", "tfjob-test", "", ["list-type"]),  # a listing
        ("GET", "tfjob-test", RUN + "bundle.tar.gz", ["acl"]),
        ("POST", "tfjob-test", RUN + "model/x", ["uploads"]),  # multipart
        ("GET", "tfjob-demo", "outputs/j/runs/d/r/bundle.tar.gz", []),  # another bucket
        ("GET", "tfjob-test", "research/outputs/j/runs/d/r/bundle.tar.gz", []),  # a neighbour
        ("GET", "tfjob-test", "outputs/latest", []),
        ("GET", "tfjob-test", "outputs/j/runs/d/r/checkpoints/../../x/bundle.tar.gz", []),
        ("POST", "tfjob-test", "outputs/j/runs/d/r/model//x", []),
    ],
)
def test_a_pods_identity_reaches_nothing_else(
    method: str, bucket: str, key: str, query: list[str]
) -> None:
    verdict = judge_pod_request(method, bucket, key, query, PREFIXES, form=method == "POST")
    assert not verdict.allowed and verdict.reason


# --- POST forms -----------------------------------------------------------------------------


def form_environ(
    fields: list[tuple[str, str]], files: list[tuple[str, str]] | None = None
) -> tuple:
    boundary = "b0undary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields
    ]
    for name, filename in [("file", "f.bin")] if files is None else files:
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
            f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode()
            + b"0123456789\r\n"
        )
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    environ = {
        "REQUEST_METHOD": "POST",
        "CONTENT_TYPE": f"multipart/form-data; boundary={boundary}",
        "CONTENT_LENGTH": str(len(body)),
    }
    return environ, body


def test_a_plain_form_is_read_with_its_file_size() -> None:
    environ, body = form_environ([("key", RUN + "model/${filename}"), ("policy", "p")])
    form = read_upload_form(environ, body)
    assert form.fields == {"key": RUN + "model/${filename}", "policy": "p"}
    assert (form.file_name, form.file_size) == ("f.bin", 10)


@pytest.mark.parametrize(
    "fields,files,says",
    [
        # the smuggling of issue 26: the store takes `key`, a lower-casing checker `KEY`
        ([("key", "research/x"), ("policy", "p"), ("KEY", RUN + "model/x")], None, "twice"),
        ([("key", "a"), ("key", "b")], None, "twice"),
        ([("Key", RUN + "model/x")], None, "lower case"),
        ([("X-Amz-Credential", "k/…")], None, "lower case"),
        ([("Content-Type", "text/html")], None, "lower case"),
        ([("key", "k"), ("file", "inline body")], [], "must be a file upload"),
        ([("key", "k")], [("file", "a"), ("file", "b")], "twice"),
        ([("key", "k")], [("upload", "a")], "exactly one file upload"),
    ],
)
def test_a_form_two_readers_could_read_differently_is_refused(fields, files, says) -> None:
    environ, body = form_environ(fields, files)
    with pytest.raises(Refused, match=says) as refused:
        read_upload_form(environ, body)
    assert refused.value.status == 400


def test_a_compressed_form_is_refused() -> None:
    environ, body = form_environ([("key", "k")])
    environ["HTTP_CONTENT_ENCODING"] = "gzip"  # moto would inflate it first
    with pytest.raises(Refused, match="Content-Encoding"):
        read_upload_form(environ, body)


# --- keys -----------------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_admin_key_is_generated_once_private_and_kept(tmp_path: Path) -> None:
    state = tmp_path / "s3"
    first = s3_identities.ensure_admin_credentials(state)
    assert len(first.secret_key) >= 40 and first.access_key.startswith("tfjob-admin-")
    assert mode(state) == 0o700 and mode(state / "credentials.json") == 0o600
    assert s3_identities.ensure_admin_credentials(state) == first
    assert s3_identities.ensure_admin_credentials(tmp_path / "other") != first


def test_pod_identities_are_kept_per_tenant_and_reloaded_when_the_file_changes(
    tmp_path: Path,
) -> None:
    admin = s3_identities.ensure_admin_credentials(tmp_path)
    keyring = s3_identities.Keyring(
        {admin.access_key: admin.secret_key}, tmp_path / s3_identities.POD_IDENTITIES_FILE
    )
    assert keyring.pod_identity("anything") is None
    first = s3_identities.write_pod_identities(tmp_path, [("test", PREFIXES)])
    test = first["test"]
    assert keyring.pod_identity(test.access_key) == test
    assert keyring.get(test.access_key) == test.secret_key
    assert keyring.get(admin.access_key) == admin.secret_key
    assert keyring.pod_identity(admin.access_key) is None  # the admin key is never a pods one
    again = s3_identities.write_pod_identities(
        tmp_path, [("test", PREFIXES[:1]), ("research", ("s3://tfjob-demo/research/",))]
    )
    assert (again["test"].access_key, again["test"].secret_key) == (
        test.access_key,
        test.secret_key,
    )
    assert keyring.pod_identity(test.access_key).output_prefixes == PREFIXES[:1]
    assert keyring.pod_identity(again["research"].access_key).tenant == "research"
    assert mode(tmp_path / s3_identities.POD_IDENTITIES_FILE) == 0o600
    stored = json.loads((tmp_path / s3_identities.POD_IDENTITIES_FILE).read_text())
    assert set(stored["identities"]) == {test.access_key, again["research"].access_key}


@pytest.mark.parametrize(
    "text", ["20261207T0612Z", "20261307T061200Z", "20261207T061200", "２0261207T061200Z", ""]
)
def test_an_amz_date_not_in_the_long_format_is_refused(text: str) -> None:
    with pytest.raises(Refused, match="ISO8601 Long Format"):
        parse_amz_date(text, "AccessDenied", 403)
    assert parse_amz_date("20261207T061200Z", "AccessDenied", 403) == dt.datetime(
        2026, 12, 7, 6, 12, tzinfo=dt.UTC
    )
