"""What the local S3 checks in front of moto: SigV4 presigned requests and POST policies.

Why this exists: moto 5.2.5 checks neither presigned URLs nor POST policies
(nothing in `moto/s3/responses.py` reads X-Amz-Expires, verifies a query
signature or evaluates a policy's conditions) and accepts anonymous writes.
Pods get only presigned access, so a local S3 that accepted everything would
hide every mistake in that access. `CheckingMiddleware` is a WSGI layer that
does what S3 does for those requests, with the server's keys:

- query-string SigV4 (`X-Amz-Algorithm/Credential/Date/Expires/SignedHeaders/
  Signature`): every parameter present, the credential scope (known key, the
  date of X-Amz-Date, the server's region, service `s3`), expiry (at most 7
  days, not signed in the future), `host` among the signed headers, no
  unsigned `x-amz-*` header, and the signature over the canonical request
  (method, URI, query, signed headers with their values, UNSIGNED-PAYLOAD);
- SigV4 POST policies (fields `x-amz-algorithm`, `x-amz-credential`,
  `x-amz-date`, `x-amz-signature`, `policy`): the signature over the base64
  policy, the scope, the expiration, every condition (`eq`, exact match,
  `starts-with`, `content-length-range`), and no field left uncovered;
- SigV2 (query `AWSAccessKeyId`/`Signature`/`Expires`, POST fields
  `AWSAccessKeyId`/`signature`) is refused with 403, as S3 refuses it for
  buckets made since 2020: presign with botocore `Config(signature_version="s3v4")`;
- anonymous requests are refused.

Two listeners share one moto backend (scripts/s3_gate.py). The host's
verifies requests with an Authorization header (scripts/s3_header_auth.py)
and serves moto's `/moto-api/` to the admin key only. The pod-facing one
(what localkube forwards pods to) refuses both: pods hold no credentials,
only grants presigned by their tenant's pods identity, within its reach
(scripts/s3_reach.py). The keys are scripts/s3_identities.py's.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import hmac
import json
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "s3"
MAX_EXPIRES_S = 7 * 24 * 3600  # S3's limit for SigV4 presigned URLs
CLOCK_SKEW_S = 15 * 60  # S3's RequestTimeTooSkewed window
QUERY_V4_PARAMS = (
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
)
QUERY_V2_PARAMS = ("AWSAccessKeyId", "Signature")
POST_V4_FIELDS = ("x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature")
POST_V2_FIELDS = ("awsaccesskeyid", "signature")
# Form fields a policy need not cover (S3's POST docs).
POST_UNCOVERED_FIELDS = frozenset({"policy", "x-amz-signature", "file"})
SIGV2_REFUSED = (
    "SigV2 is not accepted: presign with AWS4-HMAC-SHA256 "
    "(botocore Config(signature_version='s3v4'))"
)
SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided."
)
STATUS_LINES = {400: "400 Bad Request", 403: "403 Forbidden", 503: "503 Slow Down"}

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Refused(Exception):
    """A request S3 would refuse: its HTTP status, S3 error code and message."""

    def __init__(self, code: str, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def uri_encode(text: str, safe: str = "-_.~") -> str:
    return urllib.parse.quote(text, safe=safe)


def parse_query(query: str) -> list[tuple[str, str]]:
    """Decoded (name, value) pairs; unlike parse_qsl, '+' stays '+' (S3 signs it as %2B)."""
    pairs = []
    for item in query.split("&"):
        if item:
            name, _, value = item.partition("=")
            pairs.append((urllib.parse.unquote(name), urllib.parse.unquote(value)))
    return pairs


def request_path(environ: dict[str, Any]) -> str:
    """The path as the client sent it (still percent-encoded)."""
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if not raw:
        return urllib.parse.quote(environ.get("PATH_INFO", "/"))
    if raw.startswith(("http://", "https://")):
        return urllib.parse.urlsplit(raw).path or "/"
    return raw.split("?", 1)[0] or "/"


def canonical_uri(path: str) -> str:
    """S3's canonical URI: each segment URI-encoded once, whatever encoding the client used."""
    return "/".join(uri_encode(urllib.parse.unquote(segment)) for segment in path.split("/"))


def header_value(environ: dict[str, Any], name: str) -> str | None:
    if name == "content-type":
        key = "CONTENT_TYPE"
    elif name == "content-length":
        key = "CONTENT_LENGTH"
    else:
        key = "HTTP_" + name.upper().replace("-", "_")
    value = environ.get(key)
    return None if value is None else " ".join(str(value).split())


def parse_amz_date(text: str, code: str, status: int) -> dt.datetime:
    # by hand: strptime costs about as much as the rest of a presigned GET's check
    digits = text[:8] + text[9:15]
    try:
        if (
            len(text) != 16
            or text[8] != "T"
            or text[15] != "Z"
            or not (digits.isascii() and digits.isdigit())
        ):
            raise ValueError(text)
        numbers = (digits[:4], digits[4:6], digits[6:8], digits[8:10], digits[10:12], digits[12:])
        return dt.datetime(*map(int, numbers), tzinfo=dt.UTC)
    except ValueError:
        raise Refused(
            code, "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"", status
        ) from None


def refuse_unsigned_amz_headers(environ: dict[str, Any], signed_headers: list[str]) -> None:
    """Refused, as S3 does, when an x-amz-* header was sent but not signed."""
    present = {
        key[5:].lower().replace("_", "-") for key in environ if key.startswith("HTTP_X_AMZ_")
    }
    unsigned = sorted(present - set(signed_headers))
    if unsigned:
        raise Refused(
            "AccessDenied",
            "There were headers present in the request which were not signed: "
            + ", ".join(unsigned),
        )


def canonical_request(
    environ: dict[str, Any],
    query: list[tuple[str, str]],
    signed_headers: list[str],
    payload_hash: str,
) -> str:
    """SigV4's canonical request of a WSGI request (query-string and header signing alike)."""
    canonical_query = "&".join(
        f"{k}={v}" for k, v in sorted((uri_encode(k), uri_encode(v)) for k, v in query)
    )
    header_lines = "".join(
        f"{name}:{header_value(environ, name) or ''}\n" for name in signed_headers
    )
    return "\n".join(
        [
            environ["REQUEST_METHOD"],
            canonical_uri(request_path(environ)),
            canonical_query,
            header_lines,
            ";".join(signed_headers),
            payload_hash,
        ]
    )


def verify_signature(
    checker: Any, secret: str, amz_date: str, scope: str, canonical: str, signature: str
) -> None:
    """refuse_signature() unless `signature` signs `canonical` with `secret` (SigV4)."""
    to_sign = "\n".join(
        [ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    if not hmac.compare_digest(checker.sign(secret, scope, to_sign), signature):
        raise refuse_signature()


def refuse_signature() -> Refused:
    return Refused("SignatureDoesNotMatch", SIGNATURE_MISMATCH)


class PresignChecker:
    """Checks SigV4 presigned query requests and SigV4 POST policies the way S3 does."""

    def __init__(
        self,
        credentials: dict[str, str],
        region: str = "us-east-1",
        now: Callable[[], dt.datetime] | None = None,
    ) -> None:
        self.credentials = credentials
        self.region = region
        self.now = now or (lambda: dt.datetime.now(dt.UTC))

    def find_secret(
        self, credential: str, amz_date: str, code: str, status: int
    ) -> tuple[str, str]:
        """(secret, scope) of a credential `key/yyyyMMdd/region/s3/aws4_request`."""
        parts = credential.split("/")
        if len(parts) != 5 or parts[4] != "aws4_request":
            raise Refused(
                code,
                "Error parsing the X-Amz-Credential parameter; the Credential is mal-formed; "
                'expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".',
                status,
            )
        access_key, date, region, service, _ = parts
        if date != amz_date[:8]:
            raise Refused(
                code, "Invalid credential date. Date is not the same as X-Amz-Date.", status
            )
        if region != self.region:
            raise Refused(
                code,
                "Error parsing the X-Amz-Credential parameter; the region "
                f"'{region}' is wrong; expecting '{self.region}'",
                status,
            )
        if service != SERVICE:
            raise Refused(
                code,
                f'Error parsing the X-Amz-Credential parameter; incorrect service "{service}". '
                f'This endpoint belongs to "{SERVICE}".',
                status,
            )
        secret = self.credentials.get(access_key)
        if secret is None:
            raise Refused(
                "InvalidAccessKeyId",
                "The AWS Access Key Id you provided does not exist in our records.",
            )
        return secret, "/".join(parts[1:])

    def sign(self, secret: str, scope: str, text: str) -> str:
        date, region, service, _ = scope.split("/")
        key = signing_key(secret, date, region, service)
        return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()

    def check_query_signature(self, environ: dict[str, Any]) -> str:
        """A presigned SigV4 request: parameters, scope, expiry, headers and signature.

        Returns the access key that signed it."""
        code = "AuthorizationQueryParametersError"
        pairs = parse_query(environ.get("QUERY_STRING", ""))
        params = dict(pairs)
        if any(not params.get(name) for name in QUERY_V4_PARAMS):
            raise Refused(
                code,
                "Query-string authentication version 4 requires the X-Amz-Algorithm, "
                "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, "
                "and X-Amz-Expires parameters.",
                400,
            )
        if params["X-Amz-Algorithm"] != ALGORITHM:
            raise Refused(code, f'X-Amz-Algorithm only supports "{ALGORITHM}"', 400)
        if "X-Amz-Security-Token" in params:
            raise Refused(
                "InvalidToken", "The provided token is malformed or otherwise invalid.", 400
            )
        amz_date = params["X-Amz-Date"]
        signed_at = parse_amz_date(amz_date, code, 400)
        secret, scope = self.find_secret(params["X-Amz-Credential"], amz_date, code, 400)
        try:
            expires = int(params["X-Amz-Expires"])
        except ValueError:
            raise Refused(code, "X-Amz-Expires should be a number", 400) from None
        if expires < 0:
            raise Refused(code, "X-Amz-Expires must be non-negative", 400)
        if expires > MAX_EXPIRES_S:
            raise Refused(
                code,
                f"X-Amz-Expires must be less than a week (in seconds) that is {MAX_EXPIRES_S}",
                400,
            )
        now = self.now()
        if now > signed_at + dt.timedelta(seconds=expires):
            raise Refused("AccessDenied", "Request has expired")
        if signed_at > now + dt.timedelta(seconds=CLOCK_SKEW_S):
            raise Refused("AccessDenied", "Request is not valid yet")
        signed_headers = params["X-Amz-SignedHeaders"].split(";")
        if "host" not in signed_headers:
            raise Refused(code, "Query-string authentication requires the host header signed", 400)
        refuse_unsigned_amz_headers(environ, signed_headers)
        canonical = canonical_request(
            environ,
            [(k, v) for k, v in pairs if k != "X-Amz-Signature"],
            signed_headers,
            "UNSIGNED-PAYLOAD",
        )
        verify_signature(self, secret, amz_date, scope, canonical, params["X-Amz-Signature"])
        return params["X-Amz-Credential"].split("/", 1)[0]

    def check_post_policy(
        self, bucket: str, form: dict[str, str], file_name: str, file_size: int
    ) -> str:
        """A browser-style POST upload with a SigV4 policy; the access key that signed it."""
        fields = {k.lower(): v for k, v in form.items()}
        if any(name in fields for name in POST_V2_FIELDS):
            raise Refused("AccessDenied", SIGV2_REFUSED)
        for name in (*POST_V4_FIELDS, "key"):
            if not fields.get(name):
                raise Refused(
                    "InvalidArgument", f"Bucket POST must contain a field named '{name}'.", 400
                )
        if fields["x-amz-algorithm"] != ALGORITHM:
            raise Refused("InvalidArgument", f'x-amz-algorithm only supports "{ALGORITHM}"', 400)
        amz_date = fields["x-amz-date"]
        parse_amz_date(amz_date, "InvalidArgument", 400)
        secret, scope = self.find_secret(
            fields["x-amz-credential"], amz_date, "InvalidArgument", 400
        )
        policy_b64 = fields["policy"]
        if not hmac.compare_digest(self.sign(secret, scope, policy_b64), fields["x-amz-signature"]):
            raise refuse_signature()
        try:
            policy = json.loads(base64.b64decode(policy_b64, validate=True))
            expiration = dt.datetime.fromisoformat(policy["expiration"].replace("Z", "+00:00"))
            conditions = policy["conditions"]
            if not isinstance(conditions, list):
                raise TypeError("conditions must be a list")
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
            raise Refused("InvalidPolicyDocument", f"Invalid Policy: {exc}", 400) from None
        if expiration.tzinfo is None:
            expiration = expiration.replace(tzinfo=dt.UTC)
        if self.now() > expiration:
            raise Refused("AccessDenied", "Invalid according to Policy: Policy expired.")
        values = dict(fields)
        values["bucket"] = bucket
        values["key"] = values["key"].replace("${filename}", file_name)
        covered = {"bucket"}
        for condition in conditions:
            covered.add(self._check_condition(condition, values, file_size))
        for name in fields:
            if name in covered or name in POST_UNCOVERED_FIELDS or name.startswith("x-ignore-"):
                continue
            raise Refused(
                "AccessDenied", f"Invalid according to Policy: Extra input fields: {name}"
            )
        return fields["x-amz-credential"].split("/", 1)[0]

    @staticmethod
    def _check_condition(condition: Any, values: dict[str, str], file_size: int) -> str:
        """Check one policy condition; the (lower-case) field name it covers."""
        if isinstance(condition, dict) and len(condition) == 1:
            ((name, wanted),) = condition.items()
            op, name = "eq", str(name).lower()
        elif isinstance(condition, list) and len(condition) == 3:
            op, name, wanted = condition
            op = str(op).lower()
            if op == "content-length-range":
                try:
                    low, high = int(name), int(wanted)
                except (TypeError, ValueError):
                    raise Refused(
                        "InvalidPolicyDocument", f"Invalid Policy: condition {condition!r}", 400
                    ) from None
                if not low <= file_size <= high:
                    too_large = file_size > high
                    raise Refused(
                        "EntityTooLarge" if too_large else "EntityTooSmall",
                        f"Your proposed upload is {'larger' if too_large else 'smaller'} than "
                        f"the {'maximum' if too_large else 'minimum'} allowed size "
                        f"({low}..{high} bytes; {file_size} given)",
                        400,
                    )
                return "content-length-range"
            if not str(name).startswith("$"):
                raise Refused(
                    "InvalidPolicyDocument", f"Invalid Policy: condition {condition!r}", 400
                )
            name = str(name)[1:].lower()
        else:
            raise Refused("InvalidPolicyDocument", f"Invalid Policy: condition {condition!r}", 400)
        given = values.get(name, "")
        if op == "eq":
            if given != str(wanted):
                raise Refused(
                    "AccessDenied",
                    "Invalid according to Policy: Policy Condition failed: "
                    f'["eq", "${name}", "{wanted}"]',
                )
        elif op == "starts-with":
            if not given.startswith(str(wanted)):
                raise Refused(
                    "AccessDenied",
                    "Invalid according to Policy: Policy Condition failed: "
                    f'["starts-with", "${name}", "{wanted}"]',
                )
        else:
            raise Refused("InvalidPolicyDocument", f"Invalid Policy: unknown operation {op!r}", 400)
        return name
