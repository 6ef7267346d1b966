"""Readers of the tenants file's single fields: numbers, ports, quantities, roles, prefixes,
connection ids, node selectors and tolerations.

`tenants_file.validate_tenants` walks the file and calls these for each field; each returns
the value read or raises what `fail(where, given, allowed)` builds, a `TenantsFileError`
naming the file, the field, the value given and what is allowed. Kept apart so that the
file's structure (tfjob/tenants/file.py) reads apart from the rules of each field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from tfjob.quantity import is_quantity, parse_quantity
from tfjob.request.checks import LABEL_NAME_PATTERN
from tfjob.tenants.model import GPU_RESOURCE, PodUser, TenantsFileError, derive_pod_user
from tfjob.tenants.policy import describe_prefix_problem

MAX_LABEL_NAME = 63
# Airflow's built-in roles: one of them acting for a tenant would hand the tenant's
# DAGs to everyone holding it (Public: anonymous users). Compared case-insensitively.
AIRFLOW_BUILTIN_ROLES = ("Admin", "Op", "User", "Viewer", "Public")
TOLERATION_OPERATORS = ("Equal", "Exists")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_ROLE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Airflow's own rule for connection ids (airflow.utils.helpers.validate_key).
_CONN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_TOLERATION_FIELDS = ("key", "operator", "value", "effect")
# A tenant's pods' uid and gid: not a system id (below 10000), not nobody/nogroup (65534)
# nor 65535 ((uint16)-1), within a signed 32-bit id.
MIN_POD_ID = 10000
MAX_POD_ID = 2**31 - 1
RESERVED_POD_IDS = (65534, 65535)

Fail = Callable[[str, object, str], TenantsFileError]


def check_known_keys(fail: Fail, where: str, data: Mapping, allowed: tuple[str, ...]) -> None:
    for key in data:
        if key not in allowed:
            prefix = f"{where}." if where else ""
            raise fail(
                f"{prefix}{key}", data[key], "unknown field; allowed fields: " + ", ".join(allowed)
            )


def read_whole(fail: Fail, where: str, value: object, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise fail(where, value, f"a whole number from {low} to {high} is required{what}")
    return value


def read_port(fail: Fail, where: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise fail(where, value, "a port number from 1 to 65535 is allowed")
    return value


def read_quantity(fail: Fail, where: str, value: object, whole: bool = False) -> str:
    if isinstance(value, bool) or value is None:
        raise fail(where, value, "a Kubernetes quantity such as 500m, 4, 16Gi is required")
    text = str(value)
    if not is_quantity(text):
        raise fail(where, value, "a Kubernetes quantity such as 500m, 4, 16Gi is required")
    if whole and parse_quantity(text) != int(parse_quantity(text)):
        raise fail(where, value, "a whole number is required")
    return text


def read_resources(
    fail: Fail, where: str, data: object, allowed: tuple[str, ...], required: bool
) -> dict[str, str]:
    if data is None and not required:
        return {}
    if not isinstance(data, Mapping):
        raise fail(where, data, "a mapping of " + ", ".join(allowed) + " is required")
    check_known_keys(fail, where, data, allowed)
    values = {}
    for key in allowed:
        if key not in data:
            if required:
                raise fail(
                    f"{where}.{key}",
                    None,
                    "the field is required (a quantity; 0 to forbid the resource)",
                )
            continue
        values[key] = read_quantity(
            fail, f"{where}.{key}", data[key], whole=key in (GPU_RESOURCE, "pods")
        )
    return values


def read_string_list(fail: Fail, where: str, value: object, allowed: str) -> list[str]:
    """A non-empty list of strings (each still to be checked by the caller)."""
    if not isinstance(value, list) or not value:
        raise fail(where, value, f"a non-empty list is required: {allowed}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise fail(f"{where}[{index}]", item, f"a string is required: {allowed}")
    return value


def read_roles(fail: Fail, where: str, data: Mapping, name: str) -> tuple[str, ...]:
    allowed = (
        "Airflow role names of 1-64 letters, digits, '_', '.', '-' (default: the tenant's name)"
    )
    roles = read_string_list(fail, where, data["roles"], allowed) if "roles" in data else [name]
    for index, role in enumerate(roles):
        place = f"{where}[{index}]" if "roles" in data else where
        if not _ROLE.match(role):
            raise fail(place, role, allowed)
        if role.lower() in (builtin.lower() for builtin in AIRFLOW_BUILTIN_ROLES):
            raise fail(
                place,
                role,
                "Airflow's built-in roles ("
                + ", ".join(AIRFLOW_BUILTIN_ROLES)
                + ") may not act for a tenant; "
                "name the tenant's own roles in `roles:`",
            )
        if role in roles[:index]:
            raise fail(place, role, "each role is listed once")
    return tuple(roles)


def read_prefixes(fail: Fail, where: str, value: object, example: str) -> tuple[str, ...]:
    shape = f"s3://<bucket>/<prefix>/ URLs, e.g. [{example}]"
    if value is None:
        raise fail(where, None, f"the field is required: a list of {shape}")
    prefixes = read_string_list(fail, where, value, shape)
    for index, prefix in enumerate(prefixes):
        problem = describe_prefix_problem(prefix)
        if problem:
            raise fail(f"{where}[{index}]", prefix, problem)
    return tuple(prefixes)


def read_conn_id(fail: Fail, where: str, value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not _CONN_ID.match(value)):
        raise fail(
            where,
            value,
            "an Airflow connection id (1-200 letters, digits, '_', '.', "
            "'-') is allowed; leave it out for the default connection",
        )
    return value


def read_patterns(fail: Fail, where: str, value: object, allowed: str) -> tuple[str, ...]:
    patterns = read_string_list(fail, where, value, allowed)
    for index, pattern in enumerate(patterns):
        if not pattern or any(char.isspace() for char in pattern):
            raise fail(f"{where}[{index}]", pattern, f"a pattern without spaces: {allowed}")
    return tuple(patterns)


def read_node_selectors(fail: Fail, where: str, value: object) -> dict[str, tuple[str, ...]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise fail(
            where,
            value,
            "a mapping of node label keys to lists of allowed value "
            "patterns is allowed, e.g. {pool: [train-*]}",
        )
    selectors = {}
    for key, patterns in value.items():
        name = str(key).rsplit("/", 1)[-1]
        if (
            not isinstance(key, str)
            or len(name) > MAX_LABEL_NAME
            or not LABEL_NAME_PATTERN.match(name)
        ):
            raise fail(f"{where}.{key}", key, "node selector keys must be Kubernetes label keys")
        selectors[key] = read_patterns(
            fail, f"{where}.{key}", patterns, "fnmatch patterns of allowed label values"
        )
    return selectors


def read_toleration(fail: Fail, where: str, value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise fail(
            where, value, "a mapping of key and optional operator, value, effect is required"
        )
    check_known_keys(fail, where, value, _TOLERATION_FIELDS)
    entry = {name: value[name] for name in _TOLERATION_FIELDS if name in value}
    for name, item in entry.items():
        if not isinstance(item, str):
            raise fail(f"{where}.{name}", item, "a string is required (quote it in YAML)")
    if "key" not in entry:
        raise fail(
            f"{where}.key",
            None,
            "the field is required: the taint key a request "
            "may tolerate ('' with operator Exists: every taint)",
        )
    if entry.get("operator", "Equal") not in TOLERATION_OPERATORS:
        raise fail(
            f"{where}.operator", entry["operator"], "allowed: " + ", ".join(TOLERATION_OPERATORS)
        )
    if "effect" in entry and entry["effect"] not in TOLERATION_EFFECTS:
        raise fail(f"{where}.effect", entry["effect"], "allowed: " + ", ".join(TOLERATION_EFFECTS))
    if entry.get("operator") == "Exists" and entry.get("value"):
        raise fail(f"{where}.value", entry["value"], "no value is allowed with operator Exists")
    if entry["key"] == "" and entry.get("operator") != "Exists":
        raise fail(
            f"{where}.operator",
            entry.get("operator"),
            "an empty key (every taint) needs operator Exists",
        )
    return entry


def read_tolerations(fail: Fail, where: str, value: object) -> tuple[dict[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise fail(where, value, "a list of allowed tolerations is allowed")
    return tuple(
        read_toleration(fail, f"{where}[{index}]", item) for index, item in enumerate(value)
    )


def read_pod_id(fail: Fail, where: str, value: object) -> int:
    """A uid or gid a tenant's pods may run as."""
    allowed = (
        f"a whole number from {MIN_POD_ID} to {MAX_POD_ID}, not "
        + " or ".join(str(reserved) for reserved in RESERVED_POD_IDS)
        + " (nobody, (uint16)-1)"
    )
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not MIN_POD_ID <= value <= MAX_POD_ID
        or value in RESERVED_POD_IDS
    ):
        raise fail(where, value, allowed)
    return value


def read_pod_user(fail: Fail, where: str, data: Mapping, name: str) -> PodUser:
    """`uid` and `gid` of a tenant entry at `where`; gid defaults to uid, uid to one
    derived from the tenant's name (`tenant_model.derive_pod_user`)."""
    if "uid" not in data:
        if "gid" in data:
            raise fail(f"{where}.uid", None, "the field is required when gid is given")
        return derive_pod_user(name)
    uid = read_pod_id(fail, f"{where}.uid", data["uid"])
    gid = read_pod_id(fail, f"{where}.gid", data["gid"]) if "gid" in data else uid
    return PodUser(uid, gid)
