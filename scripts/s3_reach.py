"""What a pods identity may do in the local S3: the one reach table, pure and small.

A pods identity (scripts/s3_identities.py) signs only the grants Airflow
gives a tenant's pods (operators/grants.py, operators/restore.py). Whatever it
signed, the gate lets through only these, where `<prefix>` is one of its
tenant's output prefixes and `<run>` is `runs/<dag>/<run id>/` under it:

| method    | keys                                                           |
|-----------|----------------------------------------------------------------|
| GET, HEAD | `<prefix>…/<run>bundle.tar.gz`, `<prefix>…/<run>checkpoints/…` |
| POST form | `<prefix>…/<run>model/…`, `…/checkpoints/…`, `…/metrics.json`, |
|           | `…/tensorboard/…`                                              |

No list, PUT, DELETE, bucket-level or multipart request, no sub-resource
(`?acl`, `?tagging`, …) and no key with an empty, `.` or `..` segment. A
future grant is one more row in READ_GRANTS or WRITE_GRANTS. Which replica may
write which `tensorboard/<role>-<index>/` is its POST policy's `starts-with`
condition (operators/s3access.py), checked with every form (s3_checks.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

RUNS_DIR = "runs"
# (exact name | directory ending in "/") under a run's prefix, by what a pod may do there.
READ_GRANTS = ("bundle.tar.gz", "checkpoints/")
WRITE_GRANTS = ("model/", "checkpoints/", "metrics.json", "tensorboard/")
READ_METHODS = frozenset({"GET", "HEAD"})
WRITE_METHODS = frozenset({"POST"})
# Query parameters a plain GET/HEAD of an object may carry besides the signature's.
ALLOWED_QUERY = frozenset(
    {
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
    }
)
_RUN_PATH = re.compile(r"^(?:[^/]+/)*" + RUNS_DIR + r"/[^/]+/[^/]+/(?P<rest>.+)$")


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str = ""


ALLOWED = Verdict(True)


def split_prefix(uri: str) -> tuple[str, str]:
    """(bucket, key prefix) of s3://bucket/prefix/."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def _under_run(rest: str, grants: Iterable[str]) -> bool:
    for grant in grants:
        if grant.endswith("/"):
            if rest.startswith(grant) and len(rest) > len(grant):
                return True
        elif rest == grant:
            return True
    return False


def judge_pod_request(
    method: str,
    bucket: str,
    key: str,
    query_names: Iterable[str],
    output_prefixes: Iterable[str],
    form: bool = False,
) -> Verdict:
    """May a pods identity whose tenant owns `output_prefixes` do this? (see the table).

    `form`: the request is a POST-policy upload (its key from the form); a POST
    signed any other way (a presigned or header-signed POST) is not granted."""
    if method in READ_METHODS:
        grants = READ_GRANTS
    elif method in WRITE_METHODS and form:
        grants = WRITE_GRANTS
    else:
        return Verdict(False, f"{method} is not granted to pods (only GET, HEAD and POST forms)")
    extra = sorted(set(query_names) - ALLOWED_QUERY)
    if extra:
        return Verdict(False, f"query parameters {', '.join(extra)} are not granted to pods")
    if not bucket or not key:
        return Verdict(False, "bucket-level requests are not granted to pods")
    if any(segment in ("", ".", "..") for segment in key.split("/")):
        return Verdict(False, "keys with empty, '.' or '..' segments are not granted to pods")
    for prefix_uri in output_prefixes:
        prefix_bucket, prefix = split_prefix(prefix_uri)
        if bucket != prefix_bucket or not key.startswith(prefix):
            continue
        match = _RUN_PATH.match(key[len(prefix) :])
        if match and _under_run(match.group("rest"), grants):
            return ALLOWED
    return Verdict(
        False,
        f"{method} s3://{bucket}/{key} is outside what this tenant's pods are granted "
        f"(under its output prefixes: runs/<dag>/<run>/ {' '.join(grants)})",
    )
