"""Header-authenticated SigV4, verified as S3 verifies it: boto3's own requests.

Why this exists: moto accepts any Authorization header, so without this any
local process with a made-up key had the whole store. A request with
`Authorization: AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/s3/aws4_request,
SignedHeaders=<a;b;c>, Signature=<hex>` passes only when the key is known and
the signature matches the canonical request (AWS's "Create a canonical request
for Signature Version 4": method, URI, sorted query, signed headers with their
values, the signed header names, and the payload hash as the client sent it in
`x-amz-content-sha256`: a hex digest, `UNSIGNED-PAYLOAD` or a `STREAMING-…`
value). The payload itself is not hashed again (a loopback peer cannot alter
it in flight). SigV2 (`Authorization: AWS <key>:<sig>`) is refused.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from scripts.s3_checks import (
    ALGORITHM,
    CLOCK_SKEW_S,
    SIGV2_REFUSED,
    PresignChecker,
    Refused,
    canonical_request,
    parse_amz_date,
    parse_query,
    refuse_unsigned_amz_headers,
    verify_signature,
)

# What S3 answers when an Authorization header cannot be parsed.
MALFORMED = (
    "The authorization header is malformed; the authorization header requires three "
    "components: Credential, SignedHeaders, and Signature."
)


def parse_authorization(header: str) -> tuple[str, list[str], str]:
    """(credential, signed header names, signature) of a SigV4 Authorization header."""
    if header.startswith("AWS "):
        raise Refused("AccessDenied", SIGV2_REFUSED)
    algorithm, _, rest = header.partition(" ")
    if algorithm != ALGORITHM:
        raise Refused(
            "InvalidArgument", f"Unsupported Authorization Type; only {ALGORITHM} is accepted", 400
        )
    parts: dict[str, str] = {}
    for item in rest.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep or name in parts:
            raise Refused("AuthorizationHeaderMalformed", MALFORMED, 400)
        parts[name] = value
    if set(parts) != {"Credential", "SignedHeaders", "Signature"} or not all(parts.values()):
        raise Refused("AuthorizationHeaderMalformed", MALFORMED, 400)
    return parts["Credential"], parts["SignedHeaders"].split(";"), parts["Signature"]


def check_header_signature(
    checker: PresignChecker, environ: dict[str, Any], now: dt.datetime | None = None
) -> str:
    """Verify the request's Authorization header; the access key that signed it."""
    credential, signed_headers, signature = parse_authorization(environ["HTTP_AUTHORIZATION"])
    amz_date = environ.get("HTTP_X_AMZ_DATE")
    if not amz_date:
        raise Refused(
            "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header"
        )
    signed_at = parse_amz_date(amz_date, "AccessDenied", 403)
    secret, scope = checker.find_secret(credential, amz_date, "AuthorizationHeaderMalformed", 400)
    current = now or checker.now()
    if abs((current - signed_at).total_seconds()) > CLOCK_SKEW_S:
        raise Refused(
            "RequestTimeTooSkewed",
            "The difference between the request time and the current time is too large.",
        )
    if "host" not in signed_headers:
        raise Refused("AccessDenied", "the host header must be signed")
    payload_hash = environ.get("HTTP_X_AMZ_CONTENT_SHA256")
    if not payload_hash:
        raise Refused(
            "InvalidRequest", "Missing required header for this request: x-amz-content-sha256", 400
        )
    refuse_unsigned_amz_headers(environ, signed_headers)
    canonical = canonical_request(
        environ, parse_query(environ.get("QUERY_STRING", "")), signed_headers, payload_hash
    )
    verify_signature(checker, secret, amz_date, scope, canonical, signature)
    return credential.split("/", 1)[0]
