"""Reading `deploy/tenants.yaml`: the one reader and validator of the tenants file.

Every consumer (`tshell tenants apply`, the pipeline's `validate` step, the
Airflow side that builds one submit DAG per tenant, the tests) gets its
tenants from here, so they agree on what a tenant is and on every default.
Import these names from `tfjob.tenants`.

Guarantees:
- a tenant's namespace is always `naming.tenant_namespace(name)`: a request
  names only its tenant, never a namespace;
- every tenant names where its runs read bundles and write outputs
  (`bundle_prefixes`, `output_prefixes`, both required), and no prefix of one
  tenant overlaps an output prefix of another, so no tenant can read or
  overwrite another's outputs or plant code in its bundles (tenants may share
  bundle prefixes: both only read there);
- every tenant's pods run as a uid and a gid no other tenant has (`uid`,
  `gid`; derived from the name when left out), so nothing one tenant's pod
  leaves behind is another's by its file mode;
- every error names the file, the field, the value given and what is allowed
  (`TenantsFileError`), for the first problem found.

Pure: `load_tenants` reads the file it is given; nothing else touches disk,
network or Airflow.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from tfjob import naming
from tfjob.quantity import parse_quantity
from tfjob.tenants.fields import (
    Fail,
    check_known_keys,
    read_conn_id,
    read_node_selectors,
    read_patterns,
    read_pod_user,
    read_port,
    read_prefixes,
    read_resources,
    read_roles,
    read_tolerations,
    read_whole,
)
from tfjob.tenants.model import (
    ACTIVE_RUNS_PER_JOB,
    DEFAULT_DNS_PORT,
    DEFAULT_IMAGES,
    DEFAULT_S3_PORT,
    QUOTA_FIELDS,
    NetworkSettings,
    Tenant,
    TenantsConfig,
    TenantsFileError,
)
from tfjob.tenants.policy import locate_in_s3

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TENANTS_FILE = REPO_ROOT / "deploy" / "tenants.yaml"
# Where the pipeline and tshell look for the tenants file when not told otherwise.
TENANTS_FILE_ENV = "TFJOB_TENANTS_FILE"

MAX_TENANT_NAME = 57  # "tfjob-<name>" is a namespace name (63 characters)
MAX_POOL_SLOTS = 1000
MAX_ACTIVE_RUNS = ACTIVE_RUNS_PER_JOB * MAX_POOL_SLOTS

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CIDR = re.compile(r"^[0-9a-fA-F.:]+/[0-9]{1,3}$")

DEFAULT_FIELDS = ("cpu", "memory")
_TOP_FIELDS = ("network", "tenants")
_NETWORK_FIELDS = ("s3_port", "s3_cidr", "dns_port")
TENANT_FIELDS = (
    "name",
    "namespace",
    "description",
    "quota",
    "defaults",
    "default_limits",
    "max_concurrent_jobs",
    "max_active_runs",
    "roles",
    "bundle_prefixes",
    "output_prefixes",
    "aws_conn_id",
    "presign_conn_id",
    "images",
    "node_selectors",
    "tolerations",
    "uid",
    "gid",
)
_PREFIX_FIELDS = ("bundle_prefixes", "output_prefixes")


class Unreadable(str):
    """A description standing in for a value that could not be read (shown in <>)."""

    def __repr__(self) -> str:
        return f"<{self}>"


def tenants_file_path(path: str | os.PathLike[str] | None = None) -> Path:
    """`path`, else $TFJOB_TENANTS_FILE, else deploy/tenants.yaml of this repository."""
    if path:
        return Path(path)
    return Path(os.environ.get(TENANTS_FILE_ENV) or DEFAULT_TENANTS_FILE)


def load_tenants(path: str | os.PathLike[str] | None = None) -> TenantsConfig:
    """Read and validate the tenants file (see `tenants_file_path` for which one)."""
    file = tenants_file_path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise TenantsFileError(
            str(file),
            "",
            Unreadable(exc.strerror or str(exc)),
            f"a readable YAML file is required (set {TENANTS_FILE_ENV} or pass --file)",
        ) from None
    return parse_tenants(text, str(file))


def parse_tenants(text: str, source: str = "tenants file") -> TenantsConfig:
    """A TenantsConfig from YAML text; TenantsFileError when invalid."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise TenantsFileError(
            source,
            where,
            Unreadable("text that is not YAML"),
            "a YAML mapping with `tenants:` is required",
        ) from None
    return validate_tenants(data, source)


def validate_tenants(data: object, source: str = "tenants file") -> TenantsConfig:
    """A TenantsConfig from parsed data; TenantsFileError naming the first problem."""

    def fail(where: str, given: object, allowed: str) -> TenantsFileError:
        return TenantsFileError(source, where, given, allowed)

    if not isinstance(data, Mapping):
        raise fail("", data, "a mapping with `tenants:` (a list) and optional `network:`")
    check_known_keys(fail, "", data, _TOP_FIELDS)
    network = _read_network(fail, data.get("network") or {})
    items = data.get("tenants")
    if not isinstance(items, list) or not items:
        raise fail("tenants", items, "a non-empty list of tenants is required")
    tenants: list[Tenant] = []
    for index, item in enumerate(items):
        tenant = _read_tenant(fail, f"tenants[{index}]", item)
        if any(other.name == tenant.name for other in tenants):
            raise fail(
                f"tenants[{index}].name",
                tenant.name,
                "tenant names must be unique; this one is declared twice",
            )
        _check_prefix_overlaps(fail, index, tenant, tenants)
        _check_pod_user_overlaps(fail, index, tenant, tenants, explicit="uid" in item)
        tenants.append(tenant)
    return TenantsConfig(tuple(tenants), network, source)


def _read_network(fail: Fail, data: object) -> NetworkSettings:
    if not isinstance(data, Mapping):
        raise fail("network", data, "a mapping of s3_port, s3_cidr, dns_port is allowed")
    check_known_keys(fail, "network", data, _NETWORK_FIELDS)
    cidr = data.get("s3_cidr")
    if cidr is not None and (not isinstance(cidr, str) or not _CIDR.match(cidr)):
        raise fail("network.s3_cidr", cidr, "a CIDR such as 10.0.0.0/8 is allowed")
    return NetworkSettings(
        s3_port=read_port(fail, "network.s3_port", data.get("s3_port", DEFAULT_S3_PORT)),
        s3_cidr=cidr,
        dns_port=read_port(fail, "network.dns_port", data.get("dns_port", DEFAULT_DNS_PORT)),
    )


def _read_tenant(fail: Fail, where: str, data: object) -> Tenant:
    if not isinstance(data, Mapping):
        raise fail(where, data, "a mapping of " + ", ".join(TENANT_FIELDS) + " is required")
    check_known_keys(fail, where, data, TENANT_FIELDS)
    name = data.get("name")
    if not isinstance(name, str) or len(name) > MAX_TENANT_NAME or not _DNS_LABEL.match(name):
        raise fail(
            f"{where}.name",
            name,
            "a DNS-1123 label (lowercase letters, digits, '-') "
            f"of at most {MAX_TENANT_NAME} characters is required",
        )
    expected = naming.tenant_namespace(name)
    if data.get("namespace", expected) != expected:
        raise fail(
            f"{where}.namespace",
            data.get("namespace"),
            f"a tenant's namespace is always {naming.NAMESPACE_PREFIX}<name>: "
            f"{expected} (leave it out or write that)",
        )
    quota = read_resources(
        fail, f"{where}.quota", data.get("quota"), tuple(QUOTA_FIELDS), required=True
    )
    defaults = read_resources(
        fail, f"{where}.defaults", data.get("defaults"), DEFAULT_FIELDS, required=True
    )
    limits = read_resources(
        fail, f"{where}.default_limits", data.get("default_limits"), DEFAULT_FIELDS, required=False
    )
    for key, limit in limits.items():
        if parse_quantity(limit) < parse_quantity(defaults[key]):
            raise fail(
                f"{where}.default_limits.{key}",
                limit,
                f"must be at least defaults.{key} ({defaults[key]})",
            )
    jobs = read_whole(
        fail,
        f"{where}.max_concurrent_jobs",
        data.get("max_concurrent_jobs", 1),
        1,
        MAX_POOL_SLOTS,
        " (the tenant's Airflow pool slots)",
    )
    runs = data.get("max_active_runs")
    if runs is not None:
        runs = read_whole(
            fail,
            f"{where}.max_active_runs",
            runs,
            1,
            MAX_ACTIVE_RUNS,
            f" (leave it out for {ACTIVE_RUNS_PER_JOB} x max_concurrent_jobs)",
        )
    description = data.get("description", "")
    if not isinstance(description, str):
        raise fail(f"{where}.description", description, "a string is allowed")
    return Tenant(
        name=name,
        quota=quota,
        defaults=defaults,
        default_limits=limits,
        max_concurrent_jobs=jobs,
        description=description,
        roles=read_roles(fail, f"{where}.roles", data, name),
        bundle_prefixes=read_prefixes(
            fail,
            f"{where}.bundle_prefixes",
            data.get("bundle_prefixes"),
            "s3://tfjob-demo/bundles/",
        ),
        output_prefixes=read_prefixes(
            fail,
            f"{where}.output_prefixes",
            data.get("output_prefixes"),
            "s3://tfjob-demo/outputs/",
        ),
        aws_conn_id=read_conn_id(fail, f"{where}.aws_conn_id", data.get("aws_conn_id")),
        presign_conn_id=read_conn_id(fail, f"{where}.presign_conn_id", data.get("presign_conn_id")),
        images=read_patterns(
            fail,
            f"{where}.images",
            data.get("images", list(DEFAULT_IMAGES)),
            "fnmatch patterns of allowed images, e.g. tensorflow/tensorflow:*",
        ),
        node_selectors=read_node_selectors(
            fail, f"{where}.node_selectors", data.get("node_selectors")
        ),
        tolerations=read_tolerations(fail, f"{where}.tolerations", data.get("tolerations")),
        max_active_runs=runs,
        run_as=read_pod_user(fail, where, data, name),
    )


# --- between tenants ----------------------------------------------------------------------


def _prefixes_overlap(first: str, second: str) -> bool:
    """Does one prefix contain the other? (Both already valid, ending in '/'.)"""
    (bucket, key), (other_bucket, other_key) = locate_in_s3(first), locate_in_s3(second)
    return bucket == other_bucket and (key.startswith(other_key) or other_key.startswith(key))


def _check_prefix_overlaps(fail: Fail, index: int, tenant: Tenant, earlier: list[Tenant]) -> None:
    """No prefix of `tenant` overlaps an output prefix of another, nor its outputs theirs."""
    for kind in _PREFIX_FIELDS:
        for number, prefix in enumerate(getattr(tenant, kind)):
            for other_index, other in enumerate(earlier):
                for other_kind in _PREFIX_FIELDS:
                    if kind == other_kind == "bundle_prefixes":
                        continue  # shared bundles: both tenants only read there
                    for other_prefix in getattr(other, other_kind):
                        if _prefixes_overlap(prefix, other_prefix):
                            raise fail(
                                f"tenants[{index}].{kind}[{number}]",
                                prefix,
                                f"overlaps {other_prefix}, in tenant {other.name}'s "
                                f"{other_kind} (tenants[{other_index}]): a tenant's prefixes "
                                f"may not overlap another tenant's output prefixes, or one "
                                f"could read, overwrite or plant code in the other's data",
                            )


def _check_pod_user_overlaps(
    fail: Fail, index: int, tenant: Tenant, earlier: list[Tenant], *, explicit: bool
) -> None:
    """No two tenants' pods share a uid, nor a gid (the volumes' fsGroup)."""
    mine = tenant.pod_user
    how = "" if explicit else " (derived from the name: set uid and gid explicitly)"
    for other_index, other in enumerate(earlier):
        theirs = other.pod_user
        for field, value, taken in (("uid", mine.uid, theirs.uid), ("gid", mine.gid, theirs.gid)):
            if value == taken:
                raise fail(
                    f"tenants[{index}].{field}",
                    value,
                    f"already tenant {other.name}'s {field} (tenants[{other_index}]){how}: "
                    f"each tenant's pods need a {field} of their own, or files one "
                    f"tenant's pods leave would be the other's by their mode",
                )
