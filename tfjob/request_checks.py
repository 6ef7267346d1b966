"""Checks of single request fields: names, quantities, label maps.

Pure functions that `tfjob/request.py`'s validators call; each raises the
request's `RequestError` (through `invalid`) naming what is allowed.
"""

import re
from collections.abc import Mapping
from typing import Any

from tfjob.quantity import is_quantity
from tfjob.request_errors import invalid
from tfjob.s3url import is_valid_bucket_name, split_s3_url

DNS_LABEL_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LABEL_VALUE_PATTERN = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
LABEL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")

def check_dns_label(value: str, max_len: int) -> str:
    if not isinstance(value, str) or len(value) > max_len or not DNS_LABEL_PATTERN.match(value):
        raise invalid(
            f"a DNS-1123 label is allowed: lowercase letters, digits and '-', starting and "
            f"ending with a letter or digit, at most {max_len} characters", value)
    return value


def check_quantity(value: Any) -> Any:
    if isinstance(value, bool):
        raise invalid("a Kubernetes quantity such as 500m, 2, 1Gi is allowed", value)
    if isinstance(value, int | float):
        value = str(value)
    if not isinstance(value, str) or not is_quantity(value):
        raise invalid("a Kubernetes quantity such as 500m, 2, 1Gi is allowed", value)
    return value


def check_label_map(value: Any, what: str) -> Any:
    if not isinstance(value, Mapping):
        return value
    for key, item in value.items():
        name = str(key).rsplit("/", 1)[-1]
        if not isinstance(key, str) or len(name) > 63 or not LABEL_NAME_PATTERN.match(name):
            raise invalid(f"{what} keys must be Kubernetes label keys", key, str(key))
        if not isinstance(item, str) or len(item) > 63 or not LABEL_VALUE_PATTERN.match(item):
            raise invalid(
                f"{what} values must be Kubernetes label values (strings of at most 63 "
                "letters, digits, '-', '_', '.'; quote numbers in YAML)", item, str(key))
    return value


def check_s3_url(value: str, shape: str) -> tuple[str, str]:
    """(bucket, key) of an s3:// URL of the given shape; the key must not be empty."""
    parts = split_s3_url(value)
    if parts is None:
        raise invalid(f"an {shape} URL is allowed", value)
    bucket, key = parts
    if not is_valid_bucket_name(bucket):
        raise invalid(f"an {shape} URL with a valid bucket name (3-63 lowercase letters, "
                       "digits, '.', '-') is allowed", value)
    if not key.strip("/"):
        raise invalid(f"an {shape} URL with a non-empty key is allowed", value)
    return bucket, key
