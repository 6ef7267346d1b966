"""The WSGI gate in front of moto: what each listener of the local S3 lets through.

`CheckingMiddleware` sends each request to the checks of scripts/s3_checks.py
(presigned SigV4 queries, POST policies) and scripts/s3_header_auth.py
(header SigV4), reads POST forms once (scripts/s3_forms.py), and refuses SigV2
and anonymous requests; `/moto-api/` (moto's dump and reset) only to requests signed with
the admin key. A request signed by a pods identity
(scripts/s3_identities.py) passes only inside that identity's reach
(scripts/s3_reach.py), on either listener. The pods' listener also refuses
`/moto-api/`, every request with an Authorization header, and every request
not signed by a pods identity (the admin key's grants included). `PodOutage`
is a test switch of the host's listener: `POST /moto-api/tfjob/pod-outage?seconds=N`
makes the pods' listener answer 503 for N seconds, as an S3 that is down for
the pods only.
"""

from __future__ import annotations

import http
import io
import time
from collections.abc import Callable, Iterable
from typing import Any

from scripts.s3_checks import (
    QUERY_V2_PARAMS,
    QUERY_V4_PARAMS,
    SIGV2_REFUSED,
    STATUS_LINES,
    PresignChecker,
    Refused,
    WsgiApp,
    parse_query,
)
from scripts.s3_forms import read_upload_form
from scripts.s3_header_auth import check_header_signature
from scripts.s3_identities import Keyring
from scripts.s3_reach import judge_pod_request

# The host's switch for tests: `POST /moto-api/tfjob/pod-outage?seconds=N` makes the
# pod-facing listener answer 503 for N seconds, as an S3 that is down for the pods.
POD_OUTAGE_PATH = "/moto-api/tfjob/pod-outage"
# What the gate reads of a POST policy upload before moto does: S3's 5 GiB for the
# file, and room for the form fields around it.
MAX_FORM_POST_BYTES = 5 * 1024**3 + 1024**2


class PodOutage:
    """Until when the pod-facing listener plays an S3 that is down (a test switch)."""

    def __init__(self) -> None:
        self.until = 0.0

    def start(self, seconds: float) -> None:
        self.until = time.monotonic() + seconds

    @property
    def active(self) -> bool:
        return time.monotonic() < self.until


class CheckingMiddleware:
    """WSGI layer in front of moto: refuses what S3 refuses (see the module docstring)."""

    def __init__(
        self,
        app: WsgiApp,
        checker: PresignChecker,
        allow_anonymous: bool = False,
        pod_facing: bool = False,
        outage: PodOutage | None = None,
        keyring: Keyring | None = None,
    ) -> None:
        self.app = app
        self.checker = checker
        self.keyring = keyring if keyring is not None else Keyring({}, None)
        self.allow_anonymous = allow_anonymous and not pod_facing
        self.pod_facing = pod_facing
        self.outage = outage or PodOutage()

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        try:
            if self.pod_facing and self.outage.active:
                raise Refused("SlowDown", "S3 is down for pods (a test outage)", 503)
            self.check(environ)
            if environ.get("PATH_INFO") == POD_OUTAGE_PATH and not self.pod_facing:
                return self._start_outage(environ, start_response)
        except Refused as refusal:
            return answer_error(environ, start_response, refusal)
        return self.app(environ, start_response)

    def _start_outage(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        query = dict(parse_query(environ.get("QUERY_STRING", "")))
        try:
            seconds = float(query.get("seconds", ""))
        except ValueError:
            raise Refused("InvalidArgument", "seconds=<number> is required", 400) from None
        self.outage.start(seconds)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "0")])
        return []

    def check(self, environ: dict[str, Any]) -> None:
        path = environ.get("PATH_INFO", "/")
        if path.startswith("/moto-api"):
            if self.pod_facing:
                raise Refused("AccessDenied", "/moto-api/ is not served to pods")
            # moto's own API dumps and resets the whole store: the admin key only
            if not environ.get("HTTP_AUTHORIZATION"):
                raise Refused(
                    "AccessDenied", "/moto-api/ needs a request signed with the admin key"
                )
            if check_header_signature(self.checker, environ) not in self.keyring.admin:
                raise Refused("AccessDenied", "/moto-api/ is served to the admin key only")
            return
        names = [name for name, _ in parse_query(environ.get("QUERY_STRING", ""))]
        if set(names).intersection(QUERY_V2_PARAMS):
            raise Refused("AccessDenied", SIGV2_REFUSED)
        query_auth = bool(set(names).intersection(QUERY_V4_PARAMS))
        bucket, _, key = path.lstrip("/").partition("/")
        if environ.get("HTTP_AUTHORIZATION"):
            if self.pod_facing:
                raise Refused(
                    "AccessDenied",
                    "requests with an Authorization header are refused on the pod-facing "
                    "address; pods use presigned requests",
                )
            if query_auth:
                raise Refused(
                    "InvalidArgument",
                    "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, "
                    "Signature query string parameter or the Authorization header should be "
                    "specified",
                    400,
                )
            signer = check_header_signature(self.checker, environ)
            self.check_reach(environ, signer, bucket, key, names)
            return
        if query_auth:
            signer = self.checker.check_query_signature(environ)
            self.check_reach(environ, signer, bucket, key, names)
            return
        content_type = environ.get("CONTENT_TYPE", "")
        if environ["REQUEST_METHOD"] == "POST" and content_type.startswith("multipart/form-data"):
            self._check_form_post(environ, bucket, key, names)
            return
        if not self.allow_anonymous:
            raise Refused(
                "AccessDenied",
                "Anonymous access is refused by this S3 server; "
                "use credentials or a presigned request",
            )

    def check_reach(
        self,
        environ: dict[str, Any],
        signer: str,
        bucket: str,
        key: str,
        names: list[str],
        form: bool = False,
    ) -> None:
        """A pods identity's request only within its reach; other keys not at all on the pods'
        listener."""
        identity = self.keyring.pod_identity(signer)
        if identity is None:
            if self.pod_facing:
                raise Refused(
                    "AccessDenied",
                    "the pod-facing address serves only grants signed by a pods identity",
                )
            return
        host = environ.get("HTTP_HOST", "").rsplit(":", 1)[0]
        if not host.replace(".", "").isdigit() and host != "localhost":
            # moto reads a bucket from a host name (virtual-hosted style): not for pods
            raise Refused("AccessDenied", "pods address the server by IP address only")
        verdict = judge_pod_request(
            environ["REQUEST_METHOD"], bucket, key, names, identity.output_prefixes, form
        )
        if not verdict.allowed:
            raise Refused("AccessDenied", verdict.reason)

    def _check_form_post(
        self, environ: dict[str, Any], bucket: str, path_key: str, names: list[str]
    ) -> None:
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise Refused("InvalidArgument", "Content-Length must be a number", 400) from None
        if length > MAX_FORM_POST_BYTES:
            raise Refused(
                "EntityTooLarge",
                f"a POST upload may be at most {MAX_FORM_POST_BYTES} bytes "
                f"(S3's 5 GiB and its form fields); {length} given",
                400,
            )
        body = environ["wsgi.input"].read(length)
        environ["wsgi.input"] = io.BytesIO(body)  # moto reads exactly what was checked
        form = read_upload_form(environ, body)
        if "policy" not in form.fields:
            if self.allow_anonymous:
                return
            raise Refused(
                "AccessDenied", "Anonymous POST without a policy is refused by this S3 server"
            )
        signer = self.checker.check_post_policy(bucket, form.fields, form.file_name, form.file_size)
        if path_key and self.keyring.pod_identity(signer) is not None:
            raise Refused("AccessDenied", "pods POST their forms to the bucket, not to a key")
        # the key moto stores under: the form's `key`, ${filename} replaced as moto does
        key = form.fields.get("key", "").replace("${filename}", form.file_name.rsplit("/", 1)[-1])
        self.check_reach(environ, signer, bucket, key, names, form=True)


def answer_error(
    environ: dict[str, Any], start_response: Callable[..., Any], refusal: Refused
) -> Iterable[bytes]:
    """An S3 error answer: the status, and the XML body S3 sends (none for HEAD)."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{refusal.code}</Code><Message>{xml_escape(refusal.message)}"
        "</Message><RequestId>tfjob-local</RequestId></Error>"
    ).encode()
    status = STATUS_LINES.get(refusal.status) or (
        f"{refusal.status} {http.HTTPStatus(refusal.status).phrase}"
    )
    start_response(
        status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
    )
    return [] if environ.get("REQUEST_METHOD") == "HEAD" else [body]


def xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
