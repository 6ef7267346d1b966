"""The one reader of `s3://bucket/key` URLs.

Requests, tenants files, Airflow's S3 calls and tshell's destinations all name
S3 locations as `s3://<bucket>/<key>`; four hand-written parsers of that shape
drifted apart before (one accepted an empty bucket, one not a short one).
`split_s3_url` is the shape itself; `parse_s3_url` adds the error a person
reads; the checks of a request (`request_checks.check_s3_url`) and of a
tenant's prefixes (`tenant_policy`) add what they require on top: a valid
bucket name, a key. Standard library only: tshell imports it to start quickly.
"""

import re

from tfjob.errors import TfjobError

S3_SCHEME = "s3://"
# S3's bucket naming rules: 3-63 lowercase letters, digits, '.', '-'; letter or digit at
# both ends; no '..' (is_valid_bucket_name).
S3_BUCKET_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
S3_URL_SHAPE = "s3://<bucket>/<key>"


class S3UrlError(TfjobError):
    """Not an S3 URL: which field, what was given, what is expected."""

    def __init__(self, field: str, given: object, expected: str) -> None:
        self.field = field
        self.given = given
        self.expected = expected
        super().__init__(f"{field}: {given!r} given; {expected}")

    def __reduce__(self) -> tuple[object, ...]:
        # ValueError pickles only the message; keep the parts (processes pass errors on).
        return (type(self), (self.field, self.given, self.expected))


def split_s3_url(url: object) -> tuple[str, str] | None:
    """(bucket, key) of `s3://bucket/key`, either part maybe empty; None when not s3://."""
    if not isinstance(url, str) or not url.startswith(S3_SCHEME):
        return None
    bucket, _, key = url[len(S3_SCHEME) :].partition("/")
    return bucket, key


def parse_s3_url(url: object, field: str = "S3 URL", shape: str = S3_URL_SHAPE) -> tuple[str, str]:
    """(bucket, key) of `s3://bucket/key`; the key may be empty.

    S3UrlError naming `field` and the `shape` expected when `url` is not an
    s3:// URL or has no bucket.
    """
    parts = split_s3_url(url)
    if parts is None:
        raise S3UrlError(field, url, f"expected {shape}")
    if not parts[0]:
        raise S3UrlError(field, url, f"the bucket name is missing ({shape})")
    return parts


def is_valid_bucket_name(bucket: str) -> bool:
    return bool(S3_BUCKET_PATTERN.match(bucket)) and ".." not in bucket
