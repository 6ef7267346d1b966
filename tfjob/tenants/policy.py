"""May this tenant run this request? Where its data lives and what its pods may ask for.

A request is valid on its own (`tfjob.request.model`) before it meets a tenant; this
module judges it against the tenant that submits it (who that is comes from
Airflow authorization, never from the request): the request must name that
tenant, read its bundle from under one of the tenant's `bundle_prefixes`,
write its output under one of its `output_prefixes`, and ask only for images,
node selectors and tolerations the tenant's allow-lists name. Everything here
is pure, so Airflow's `validate` step, tshell and the tests share one verdict.

Guarantees:
- `check_request_policy` raises `TenantPolicyError` for the first rule the
  request breaks, in this order: tenant, bundle, output, image, node selector,
  node affinity, tolerations (one error, like `RequestError`: fix it, then learn the next);
- a URL is inside a prefix only when the bucket is the same and the key starts
  with the prefix's key as a directory (`s3://b/outputs` is not inside
  `s3://b/outputs/`), and never when its key has an empty, '.' or '..' segment
  (HTTP clients may normalise those away, landing elsewhere than checked);
- a node affinity expression selects by a key the tenant's node selectors name, and an
  `In` expression only by values they allow (NotIn, Exists, DoesNotExist, Gt and Lt
  need the key only);
- the GPU product node selector that `tfjob.manifests` adds from `gpu_type` is
  not the request's, so it is always allowed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase

from tfjob.errors import TfjobError
from tfjob.request.model import Toleration, TrainingRequest
from tfjob.s3url import is_valid_bucket_name, split_s3_url
from tfjob.tenants.model import Tenant

UNSAFE_SEGMENTS = ("", ".", "..")
TOLERATION_MATCH_FIELDS = ("operator", "value", "effect")


class TenantPolicyError(TfjobError):
    """A valid request its tenant may not run: which field, what was given, what is allowed.

    Not a `RequestError`: that one names a field inside the request
    (`replicas.ps`) and means the request is wrong wherever it runs; this one
    names the full field (`request.output`) and depends on the tenant.
    """

    def __init__(self, field: str, given: object, allowed: str) -> None:
        self.field = field
        self.given = given
        self.allowed = allowed
        super().__init__(f"{field}: {given!r} given; {allowed}")

    def __reduce__(self) -> tuple[object, ...]:
        # ValueError pickles only the message; keep the parts (processes pass errors on).
        return (type(self), (self.field, self.given, self.allowed))


# --- S3 locations -------------------------------------------------------------------------


def locate_in_s3(url: object) -> tuple[str, str] | None:
    """(bucket, key) of an s3:// URL with a valid bucket name; None for anything else."""
    parts = split_s3_url(url)
    return parts if parts is not None and is_valid_bucket_name(parts[0]) else None


def find_unsafe_segment(key: str) -> str | None:
    """The first empty, '.' or '..' segment of an S3 key, else None (a final '/' is fine)."""
    segments = key.split("/")
    if segments[-1] == "":
        segments.pop()
    return next((segment for segment in segments if segment in UNSAFE_SEGMENTS), None)


def describe_prefix_problem(prefix: object) -> str | None:
    """Why `prefix` is not an `s3://<bucket>/<prefix>/` of the tenants file; None if it is."""
    parts = locate_in_s3(prefix)
    if parts is None:
        return (
            "an s3://<bucket>/<prefix>/ URL with a valid bucket name (3-63 lowercase "
            "letters, digits, '.', '-') is required"
        )
    bucket, key = parts
    if not prefix.endswith("/"):
        return f"a prefix ends with '/' (write {prefix}/); the bucket alone is s3://{bucket}/"
    if find_unsafe_segment(key) is not None:
        return "a prefix has no empty, '.' or '..' path segments"
    return None


def is_within_prefix(url: str, prefix: str) -> bool:
    """Is `url` inside the directory `prefix` (same bucket, key under the prefix's key)?

    A prefix's key is read as a directory: `s3://b/outputs` and `s3://b/outputs/`
    both contain `s3://b/outputs/x`, neither contains `s3://b/outputs` or
    `s3://b/outputs-x/y`. False for anything that is not an s3:// URL with a
    valid bucket, and for a URL whose key has an empty, '.' or '..' segment.
    """
    url_parts, prefix_parts = locate_in_s3(url), locate_in_s3(prefix)
    if url_parts is None or prefix_parts is None:
        return False
    (bucket, key), (prefix_bucket, prefix_key) = url_parts, prefix_parts
    if bucket != prefix_bucket or find_unsafe_segment(key) is not None:
        return False
    if prefix_key and not prefix_key.endswith("/"):
        prefix_key += "/"
    return key.startswith(prefix_key)


def _check_location(field: str, url: str, prefixes: Sequence[str], allowed: str) -> None:
    parts = locate_in_s3(url)
    if parts is not None and find_unsafe_segment(parts[1]) is not None:
        raise TenantPolicyError(
            field, url, f"keys with empty, '.' or '..' path segments are not allowed; {allowed}"
        )
    if not any(is_within_prefix(url, prefix) for prefix in prefixes):
        raise TenantPolicyError(field, url, allowed)


def _describe_prefixes(prefixes: Sequence[str]) -> str:
    return ", ".join(prefixes) if prefixes else "(none: the tenants file names no prefix)"


# --- allow-lists --------------------------------------------------------------------------


def _describe_node_selectors(tenant: Tenant) -> str:
    if not tenant.node_selectors:
        return f"tenant {tenant.name} may not select nodes by label (gpu_type selects GPU nodes)"
    shown = "; ".join(
        f"{key} matching {', '.join(patterns)}" for key, patterns in tenant.node_selectors.items()
    )
    return f"tenant {tenant.name} may select nodes only by: {shown}"


def _describe_toleration(entry: Mapping[str, str]) -> str:
    if entry["key"] == "":
        return "every taint (key '' with operator Exists)"
    named = ", ".join(f"{name} {entry[name]}" for name in TOLERATION_MATCH_FIELDS if name in entry)
    return f"key {entry['key']}" + (f" ({named})" if named else "")


def _describe_tolerations(tenant: Tenant) -> str:
    if not tenant.tolerations:
        return f"tenant {tenant.name} may not tolerate taints"
    shown = "; ".join(_describe_toleration(entry) for entry in tenant.tolerations)
    return f"tenant {tenant.name} may tolerate only: {shown}"


def _is_toleration_allowed(toleration: Toleration, allowed: Sequence[Mapping[str, str]]) -> bool:
    key = toleration.key or ""
    # None and "" mean the same to Kubernetes: no value, every effect.
    given = {
        "operator": toleration.operator,
        "value": toleration.value or "",
        "effect": toleration.effect or "",
    }
    for entry in allowed:
        if entry["key"] != key:
            continue
        if key == "" and entry.get("operator") != "Exists":
            continue  # tolerating every taint needs exactly that entry
        if all(given[name] == entry[name] for name in TOLERATION_MATCH_FIELDS if name in entry):
            return True
    return False


# --- the verdict --------------------------------------------------------------------------


def check_request_policy(request: TrainingRequest, tenant: Tenant) -> None:
    """Raise TenantPolicyError for the first rule of `tenant` that `request` breaks."""
    if request.tenant != tenant.name:
        raise TenantPolicyError(
            "request.tenant",
            request.tenant,
            f"this run is tenant {tenant.name}'s (decided by who submits "
            f"it), so the request must name tenant {tenant.name}",
        )
    if request.bundle is not None:  # none: the program is in the image, nothing is read
        _check_location(
            "request.bundle",
            request.bundle,
            tenant.bundle_prefixes,
            f"tenant {tenant.name} may read bundles only under "
            f"{_describe_prefixes(tenant.bundle_prefixes)}",
        )
    _check_location(
        "request.output",
        request.output,
        tenant.output_prefixes,
        f"tenant {tenant.name} may write outputs only under "
        f"{_describe_prefixes(tenant.output_prefixes)}",
    )
    if not any(fnmatchcase(request.image, pattern) for pattern in tenant.images):
        raise TenantPolicyError(
            "request.image",
            request.image,
            f"tenant {tenant.name} may run only images matching "
            f"{', '.join(tenant.images) or '(none)'}",
        )
    for key, value in request.node_selector.items():
        patterns = tenant.node_selectors.get(key, ())
        if not any(fnmatchcase(value, pattern) for pattern in patterns):
            raise TenantPolicyError(
                f"request.node_selector.{key}", value, _describe_node_selectors(tenant)
            )
    for role, affinity in request.node_affinity.items():
        for where, expression in affinity.expressions():
            patterns = tenant.node_selectors.get(expression.key, ())
            values = expression.values if expression.operator == "In" else ()
            if not patterns or not all(
                any(fnmatchcase(value, pattern) for pattern in patterns) for value in values
            ):
                raise TenantPolicyError(
                    f"request.node_affinity.{role.value}.{where}",
                    expression.to_manifest(),
                    "node affinity keys and In values follow the tenant's node selectors: "
                    + _describe_node_selectors(tenant),
                )
    for index, toleration in enumerate(request.tolerations):
        if not _is_toleration_allowed(toleration, tenant.tolerations):
            raise TenantPolicyError(
                f"request.tolerations[{index}]",
                toleration.to_manifest(),
                _describe_tolerations(tenant),
            )


__all__ = [
    "TenantPolicyError",
    "check_request_policy",
    "describe_prefix_problem",
    "find_unsafe_segment",
    "is_within_prefix",
    "locate_in_s3",
]
