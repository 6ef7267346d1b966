#!/usr/bin/env python3
"""A local S3 for the demo and tests: moto's server on loopback, presigned requests checked.

    python scripts/s3_server.py up --port 9000 --state-dir .state/s3 --bucket tfjob-demo
    python scripts/s3_server.py down --state-dir .state/s3
    python scripts/s3_server.py serve --port 0 --ready-file /tmp/ready.json   # foreground

Why the wrapper: moto 5.2.5 checks neither presigned URLs nor POST policies
(`moto/s3/responses.py` only compares a few header values; nothing reads
X-Amz-Expires, the signature or the policy's conditions), and it accepts
anonymous writes. Pods get only presigned access, so a local S3 that accepts
everything would hide every mistake in that access. This server puts a small
WSGI layer in front of moto that does what S3 does for those requests:

- query-string SigV4 (presigned GET/PUT/...): refuses expired URLs
  (X-Amz-Date + X-Amz-Expires) and wrong signatures, recomputed with the
  server's own access key/secret;
- browser-style POST with a policy: refuses a wrong signature, an expired
  policy, and any field that breaks a condition (`eq`, exact match,
  `starts-with`, `content-length-range`) or is not covered by one;
- anonymous requests (no Authorization header, no presigned query, no
  policy) are refused, except moto's own `/moto-api/`.

Requests with an Authorization header (boto3, tshell) go to moto unchecked,
as moto itself does. State is in memory; `down` ends it. Production uses a
real S3 endpoint, which enforces all of this itself.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import hashlib
import hmac
import io
import json
import os
import signal
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package
from background_server import (  # noqa: E402
    StartOutcome,
    await_ready,
    is_alive,
    spawn_detached,
    stop_pid,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_ACCESS_KEY = "tfjob-local"
DEFAULT_SECRET_KEY = "tfjob-local-secret"
DEFAULT_REGION = "us-east-1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
POLL_S = 0.1

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def _uri_encode(text: str) -> str:
    return urllib.parse.quote(text, safe="-_.~")


def _parse_amz_date(text: str) -> dt.datetime:
    try:
        return dt.datetime.strptime(text, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        raise Refused(
            "AuthorizationQueryParametersError", f"X-Amz-Date {text!r} is not YYYYMMDDTHHMMSSZ"
        ) from None


class PresignChecker:
    """Checks presigned query requests and POST policies the way S3 does."""

    def __init__(
        self, credentials: dict[str, str], now: Callable[[], dt.datetime] | None = None
    ) -> None:
        self.credentials = credentials
        self.now = now or (lambda: dt.datetime.now(dt.UTC))

    def _secret_and_scope(self, credential: str) -> tuple[str, str, str, str]:
        parts = credential.split("/")
        if len(parts) != 5 or parts[4] != "aws4_request":
            raise Refused("AuthorizationQueryParametersError", "malformed credential scope")
        access_key, date, region, service, _ = parts
        secret = self.credentials.get(access_key)
        if secret is None:
            raise Refused(
                "InvalidAccessKeyId",
                "The AWS Access Key Id you provided does not exist in our records.",
            )
        return secret, date, region, service

    def check_query_signature_v2(self, environ: dict[str, Any]) -> None:
        """Legacy SigV2 query auth (botocore presigns with it in us-east-1 unless told s3v4)."""
        params = dict(
            urllib.parse.parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        )
        secret = self.credentials.get(params.get("AWSAccessKeyId", ""))
        if secret is None:
            raise Refused(
                "InvalidAccessKeyId",
                "The AWS Access Key Id you provided does not exist in our records.",
            )
        try:
            expires = int(params.get("Expires", ""))
        except ValueError:
            raise Refused(
                "AccessDenied", "Query-string authentication requires the Expires parameter"
            ) from None
        if self.now().timestamp() > expires:
            raise Refused("AccessDenied", "Request has expired")
        raw_uri = (
            environ.get("RAW_URI")
            or environ.get("REQUEST_URI")
            or urllib.parse.quote(environ.get("PATH_INFO", "/"))
        )
        to_sign = "\n".join(
            [
                environ["REQUEST_METHOD"],
                environ.get("HTTP_CONTENT_MD5", ""),
                environ.get("CONTENT_TYPE", ""),
                str(expires),
                raw_uri.split("?", 1)[0],
            ]
        )
        expected = base64.b64encode(
            hmac.new(secret.encode(), to_sign.encode(), hashlib.sha1).digest()
        ).decode()
        if not hmac.compare_digest(expected, params.get("Signature", "")):
            raise Refused(
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided.",
            )

    def check_query_signature(self, environ: dict[str, Any]) -> None:
        pairs = urllib.parse.parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        params = dict(pairs)
        if params.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
            raise Refused(
                "AuthorizationQueryParametersError",
                "only AWS4-HMAC-SHA256 presigned URLs are supported",
            )
        secret, date, region, service = self._secret_and_scope(params.get("X-Amz-Credential", ""))
        amz_date = params.get("X-Amz-Date", "")
        signed_at = _parse_amz_date(amz_date)
        try:
            expires = int(params.get("X-Amz-Expires", ""))
        except ValueError:
            raise Refused(
                "AuthorizationQueryParametersError", "X-Amz-Expires must be a number of seconds"
            ) from None
        if self.now() > signed_at + dt.timedelta(seconds=expires):
            raise Refused("AccessDenied", "Request has expired")
        raw_uri = (
            environ.get("RAW_URI")
            or environ.get("REQUEST_URI")
            or urllib.parse.quote(environ.get("PATH_INFO", "/"))
        )
        path = raw_uri.split("?", 1)[0]
        canonical_query = "&".join(
            f"{_uri_encode(k)}={_uri_encode(v)}" for k, v in sorted(pairs) if k != "X-Amz-Signature"
        )
        signed_headers = params.get("X-Amz-SignedHeaders", "host").split(";")
        header_lines = ""
        for name in signed_headers:
            key = "HTTP_HOST" if name == "host" else "HTTP_" + name.upper().replace("-", "_")
            if name == "content-type":
                key = "CONTENT_TYPE"
            elif name == "content-length":
                key = "CONTENT_LENGTH"
            header_lines += f"{name}:{' '.join(str(environ.get(key, '')).split())}\n"
        canonical = "\n".join(
            [
                environ["REQUEST_METHOD"],
                path,
                canonical_query,
                header_lines,
                ";".join(signed_headers),
                "UNSIGNED-PAYLOAD",
            ]
        )
        scope = f"{date}/{region}/{service}/aws4_request"
        canonical_hash = hashlib.sha256(canonical.encode()).hexdigest()
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{canonical_hash}"
        expected = hmac.new(
            signing_key(secret, date, region, service), to_sign.encode(), hashlib.sha256
        ).hexdigest()
        if not hmac.compare_digest(expected, params.get("X-Amz-Signature", "")):
            raise Refused(
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided.",
            )

    def check_post_policy(
        self, bucket: str, form: dict[str, str], file_name: str, file_size: int
    ) -> None:
        fields = {k.lower(): v for k, v in form.items()}
        policy_b64 = fields.get("policy", "")
        if "awsaccesskeyid" in fields:  # SigV2 policy
            secret_v2 = self.credentials.get(fields["awsaccesskeyid"])
            if secret_v2 is None:
                raise Refused(
                    "InvalidAccessKeyId",
                    "The AWS Access Key Id you provided does not exist in our records.",
                )
            expected = base64.b64encode(
                hmac.new(secret_v2.encode(), policy_b64.encode(), hashlib.sha1).digest()
            ).decode()
            given = fields.get("signature", "")
        else:
            secret, date, region, service = self._secret_and_scope(
                fields.get("x-amz-credential", "")
            )
            expected = hmac.new(
                signing_key(secret, date, region, service), policy_b64.encode(), hashlib.sha256
            ).hexdigest()
            given = fields.get("x-amz-signature", "")
        if not hmac.compare_digest(expected, given):
            raise Refused(
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided.",
            )
        try:
            policy = json.loads(base64.b64decode(policy_b64))
            expiration = dt.datetime.fromisoformat(policy["expiration"].replace("Z", "+00:00"))
            conditions = policy["conditions"]
        except (ValueError, KeyError, TypeError) as exc:
            raise Refused("InvalidPolicyDocument", f"Invalid Policy: {exc}") from None
        if self.now() > expiration:
            raise Refused("AccessDenied", "Invalid according to Policy: Policy expired.")
        values = dict(fields)
        values["bucket"] = bucket
        if "${filename}" in values.get("key", ""):
            values["key"] = values["key"].replace("${filename}", file_name)
        covered = {"bucket"}
        for condition in conditions:
            covered.add(self._check_condition(condition, values, file_size))
        exempt = {"policy", "x-amz-signature", "file", "awsaccesskeyid", "signature"}
        for name in fields:
            if name not in covered and name not in exempt and not name.startswith("x-ignore-"):
                raise Refused(
                    "AccessDenied", f"Invalid according to Policy: Extra input fields: {name}"
                )

    @staticmethod
    def _check_condition(condition: Any, values: dict[str, str], file_size: int) -> str:
        if isinstance(condition, dict) and len(condition) == 1:
            ((name, wanted),) = condition.items()
            op, name = "eq", name.lower()
        elif isinstance(condition, list) and len(condition) == 3:
            op, name, wanted = condition
            op = str(op).lower()
            if op == "content-length-range":
                if not int(name) <= file_size <= int(wanted):
                    raise Refused(
                        "EntityTooLarge" if file_size > int(wanted) else "EntityTooSmall",
                        f"Your proposed upload size {file_size} is outside {name}..{wanted}",
                    )
                return "content-length-range"
            name = str(name).lstrip("$").lower()
        else:
            raise Refused("InvalidPolicyDocument", f"Invalid Policy: condition {condition!r}")
        given = values.get(name, "")
        if op == "eq" and given != wanted:
            raise Refused(
                "AccessDenied",
                "Invalid according to Policy: Policy Condition failed: "
                f'["eq", "${name}", "{wanted}"]',
            )
        if op == "starts-with" and not given.startswith(str(wanted)):
            raise Refused(
                "AccessDenied",
                "Invalid according to Policy: Policy Condition failed: "
                f'["starts-with", "${name}", "{wanted}"]',
            )
        if op not in ("eq", "starts-with"):
            raise Refused("InvalidPolicyDocument", f"Invalid Policy: unknown operation {op!r}")
        return name


class CheckingMiddleware:
    """WSGI layer in front of moto: refuses what S3 refuses for presigned and anonymous requests."""

    def __init__(
        self, app: WsgiApp, checker: PresignChecker, allow_anonymous: bool = False
    ) -> None:
        self.app = app
        self.checker = checker
        self.allow_anonymous = allow_anonymous

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        try:
            self.check(environ)
        except Refused as refusal:
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{refusal.code}</Code><Message>{_xml_escape(refusal.message)}</Message>"
                "<RequestId>tfjob-local</RequestId></Error>"
            ).encode()
            start_response(
                "403 Forbidden",
                [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))],
            )
            return [body]
        return self.app(environ, start_response)

    def check(self, environ: dict[str, Any]) -> None:
        path = environ.get("PATH_INFO", "/")
        if path.startswith("/moto-api"):
            return
        query = environ.get("QUERY_STRING", "")
        if "X-Amz-Signature=" in query:
            self.checker.check_query_signature(environ)
            return
        if "Signature=" in query and "AWSAccessKeyId=" in query:
            self.checker.check_query_signature_v2(environ)
            return
        if environ.get("HTTP_AUTHORIZATION"):
            return
        content_type = environ.get("CONTENT_TYPE", "")
        if environ["REQUEST_METHOD"] == "POST" and content_type.startswith("multipart/form-data"):
            self._check_form_post(environ, path)
            return
        if not self.allow_anonymous:
            raise Refused(
                "AccessDenied",
                "Anonymous access is refused by this S3 server; "
                "use credentials or a presigned request",
            )

    def _check_form_post(self, environ: dict[str, Any], path: str) -> None:
        from werkzeug.formparser import parse_form_data

        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length)
        environ["wsgi.input"] = io.BytesIO(body)
        copy = dict(environ)
        copy["wsgi.input"] = io.BytesIO(body)
        _, form, files = parse_form_data(copy)
        upload = files.get("file")
        if upload is None:
            raise Refused("InvalidArgument", "POST requires exactly one file upload per request.")
        size = len(upload.read())
        fields = {k: form[k] for k in form}
        if "policy" not in {k.lower() for k in fields}:
            if self.allow_anonymous:
                return
            raise Refused(
                "AccessDenied", "Anonymous POST without a policy is refused by this S3 server"
            )
        bucket = path.strip("/").split("/", 1)[0]
        self.checker.check_post_policy(bucket, fields, upload.filename or "", size)


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --------------------------------------------------------------------------- serving


def serve(args: argparse.Namespace) -> int:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", args.access_key)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", args.secret_key)
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    app = CheckingMiddleware(
        DomainDispatcherApplication(create_backend_app),
        PresignChecker({args.access_key: args.secret_key}),
        allow_anonymous=args.allow_anonymous,
    )
    server = make_server(
        args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler
    )
    port = server.server_port
    endpoint = f"http://{args.host}:{port}"
    stopping = threading.Event()

    def stop(_signum: int, _frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    thread = threading.Thread(target=server.serve_forever, name="s3-server", daemon=True)
    thread.start()
    create_buckets(endpoint, args.bucket, args.access_key, args.secret_key, args.region)
    ready = {
        "endpoint": endpoint,
        "port": port,
        "pid": os.getpid(),
        "buckets": args.bucket,
        "access_key": args.access_key,
        "region": args.region,
    }
    if args.ready_file:
        write_atomically(Path(args.ready_file), json.dumps(ready))
    print(
        f"s3 server: serving {endpoint} (buckets: {', '.join(args.bucket) or 'none'})", flush=True
    )
    stopping.wait()
    server.shutdown()
    thread.join(timeout=STOP_TIMEOUT_S)
    return 0


def create_buckets(
    endpoint: str, buckets: list[str], access_key: str, secret_key: str, region: str
) -> None:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=region,
    )
    for bucket in buckets:
        client.create_bucket(Bucket=bucket)


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def up(args: argparse.Namespace) -> int:
    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    ready_file = state / "ready.json"
    if ready_file.exists():
        info = json.loads(ready_file.read_text())
        if is_alive(info["pid"]):
            print(f"s3 server: already serving {info['endpoint']} (pid {info['pid']})")
            return 0
        ready_file.unlink()
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "serve",
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--ready-file",
        str(ready_file),
        "--access-key",
        args.access_key,
        "--secret-key",
        args.secret_key,
        "--region",
        args.region,
    ]
    for bucket in args.bucket:
        command += ["--bucket", bucket]
    if args.allow_anonymous:
        command.append("--allow-anonymous")
    log_path = state / "server.log"
    child = spawn_detached(command, log_path)
    outcome = await_ready(ready_file.exists, child.pid, START_TIMEOUT_S, POLL_S)
    if outcome is StartOutcome.EXITED:
        print(
            f"s3 server: failed to start (exit {child.wait()}); last lines of {log_path}:\n"
            f"{tail_text(log_path)}",
            file=sys.stderr,
        )
        return 1
    if outcome is StartOutcome.TIMED_OUT:
        child.kill()
        print(f"s3 server: not ready after {START_TIMEOUT_S:g}s; see {log_path}", file=sys.stderr)
        return 1
    info = json.loads(ready_file.read_text())
    print(
        f"s3 server: serving {info['endpoint']} (pid {info['pid']}, "
        f"buckets: {', '.join(args.bucket) or 'none'}); "
        f"access key {args.access_key}"
    )
    return 0


def down(args: argparse.Namespace) -> int:
    ready_file = Path(args.state_dir) / "ready.json"
    if not ready_file.exists():
        print("s3 server: not running")
        return 0
    pid = json.loads(ready_file.read_text())["pid"]
    stop_pid(pid, STOP_TIMEOUT_S)
    ready_file.unlink(missing_ok=True)
    print(f"s3 server: stopped (pid {pid})")
    return 0


def tail_text(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, func, text in (
        ("up", up, "start in the background; returns when it serves"),
        ("serve", serve, "serve in the foreground"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--host", default=DEFAULT_HOST)
        sub.add_argument("--port", type=int, default=9000, help="0 picks a free port")
        sub.add_argument(
            "--bucket", action="append", default=[], help="bucket to create (repeatable)"
        )
        sub.add_argument(
            "--access-key", default=os.environ.get("TFJOB_S3_ACCESS_KEY", DEFAULT_ACCESS_KEY)
        )
        sub.add_argument(
            "--secret-key", default=os.environ.get("TFJOB_S3_SECRET_KEY", DEFAULT_SECRET_KEY)
        )
        sub.add_argument("--region", default=DEFAULT_REGION)
        sub.add_argument(
            "--allow-anonymous", action="store_true", help="let unsigned requests through to moto"
        )
        if name == "up":
            sub.add_argument("--state-dir", default=".state/s3")
        else:
            sub.add_argument("--ready-file", help="write {endpoint, port, pid} here once serving")
        sub.set_defaults(func=func)
    stop = commands.add_parser("down", help="stop the background server")
    stop.add_argument("--state-dir", default=".state/s3")
    stop.set_defaults(func=down)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
