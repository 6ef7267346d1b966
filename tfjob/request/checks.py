"""Checks of single request fields: names, quantities, label maps, argv
lists and environment variables, and the request's size caps.

Pure functions that `tfjob/request/model.py`'s validators call; each raises the
request's `RequestError` (through `invalid`) naming what is allowed. The size
caps bound what one request can make every pod spec, watcher and XCom carry
(docs/request.md, "Size limits"); `check_request_size` runs before the model
reads anything else, and stops counting as soon as a cap is passed.
"""

import re
from collections.abc import Mapping

from pydantic_core import PydanticCustomError

from tfjob.quantity import is_quantity
from tfjob.request.errors import RequestError, Unquoted, invalid
from tfjob.s3url import is_valid_bucket_name, split_s3_url

DNS_LABEL_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LABEL_VALUE_PATTERN = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
LABEL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
RESERVED_ENV_PREFIX = "TFJOB_"
MAX_ENV_VALUE_BYTES = 32 * 1024
MAX_ENV_ENTRIES = 256
MAX_ARG_BYTES = 32 * 1024
MAX_ARGS = 1024
MAX_REQUEST_BYTES = 256 * 1024  # the request as JSON, or its file's text
# Set by the manifest or the bootstrap; a request value would be overwritten.
RESERVED_ENV_NAMES = frozenset(
    {
        "TF_CONFIG",
        "POD_IP",
        "POD_NAME",
        "PS_HOSTS",
        "WORKER_HOSTS",
        "CHIEF_HOSTS",
        "JOB_NAME",
        "TASK_INDEX",
        "DATA_DIR",
        "MODEL_DIR",
        "LOG_DIR",
        "METRICS_FILE",
    }
)


def check_dns_label(value: str, max_len: int) -> str:
    if not isinstance(value, str) or len(value) > max_len or not DNS_LABEL_PATTERN.match(value):
        raise invalid(
            f"a DNS-1123 label is allowed: lowercase letters, digits and '-', starting and "
            f"ending with a letter or digit, at most {max_len} characters",
            value,
        )
    return value


def check_quantity(value: object) -> object:
    if isinstance(value, bool):
        raise invalid("a Kubernetes quantity such as 500m, 2, 1Gi is allowed", value)
    if isinstance(value, int | float):
        value = str(value)
    if not isinstance(value, str) or not is_quantity(value):
        raise invalid("a Kubernetes quantity such as 500m, 2, 1Gi is allowed", value)
    return value


def check_label_map(value: object, what: str) -> object:
    if not isinstance(value, Mapping):
        return value
    for key, item in value.items():
        name = str(key).rsplit("/", 1)[-1]
        if not isinstance(key, str) or len(name) > 63 or not LABEL_NAME_PATTERN.match(name):
            raise invalid(f"{what} keys must be Kubernetes label keys", key, str(key))
        if not isinstance(item, str) or len(item) > 63 or not LABEL_VALUE_PATTERN.match(item):
            raise invalid(
                f"{what} values must be Kubernetes label values (strings of at most 63 "
                "letters, digits, '-', '_', '.'; quote numbers in YAML)",
                item,
                str(key),
            )
    return value


def check_s3_url(value: str, shape: str) -> tuple[str, str]:
    """(bucket, key) of an s3:// URL of the given shape; the key must not be empty."""
    parts = split_s3_url(value)
    if parts is None:
        raise invalid(f"an {shape} URL is allowed", value)
    bucket, key = parts
    if not is_valid_bucket_name(bucket):
        raise invalid(
            f"an {shape} URL with a valid bucket name (3-63 lowercase letters, "
            "digits, '.', '-') is allowed",
            value,
        )
    if not key.strip("/"):
        raise invalid(f"an {shape} URL with a non-empty key is allowed", value)
    return bucket, key


def check_argv(value: object, field_name: str) -> list[str]:
    """An argv list (entrypoint: non-empty, of non-empty strings) or args."""
    if isinstance(value, str):
        raise invalid(
            'an argv list is allowed, e.g. ["python3", "train.py"]; shell strings are not run',
            value,
        )
    if not isinstance(value, list | tuple):
        raise invalid("a list of strings is allowed", value)
    check_argv_size(value, field_name)
    if field_name == "entrypoint" and not value:
        raise invalid('a non-empty argv list is required, e.g. ["python3", "train.py"]', value)
    for index, item in enumerate(value):
        if not isinstance(item, str) or (field_name == "entrypoint" and not item):
            raise invalid(
                "every argv item must be a non-empty string (quote numbers in YAML)"
                if field_name == "entrypoint"
                else "every argument must be a string (quote numbers in YAML)",
                item,
                f"[{index}]",
            )
    return list(value)


def check_env(value: object) -> object:
    """Extra environment variables: valid names, none reserved, string values."""
    if not isinstance(value, Mapping):
        raise invalid("a mapping of variable names to strings is allowed", value)
    check_env_size(value)
    for key, item in value.items():
        if not isinstance(key, str) or not ENV_NAME_PATTERN.match(key):
            raise invalid(
                "environment names are letters, digits and '_', not starting with a digit",
                key,
                str(key),
            )
        if key.startswith(RESERVED_ENV_PREFIX) or key in RESERVED_ENV_NAMES:
            raise invalid(
                f"the name is reserved for TF-on-K8s (names starting with "
                f"{RESERVED_ENV_PREFIX}, and {', '.join(sorted(RESERVED_ENV_NAMES))}"
                "); choose another",
                key,
                key,
            )
        if not isinstance(item, str):
            raise invalid("environment values must be strings (quote them in YAML)", item, key)
    return value


def encoded_size(text: str) -> int:
    """Bytes of `text` in UTF-8 (lone surrogates count as the 3 bytes they would take)."""
    return len(text.encode("utf-8", errors="surrogatepass"))


def check_argv_size(value: object, field_name: str) -> None:
    """At most MAX_ARGS items of at most MAX_ARG_BYTES each (non-strings are left to check_argv)."""
    if not isinstance(value, list | tuple):
        return
    if len(value) > MAX_ARGS:
        raise invalid(f"at most {MAX_ARGS} items are allowed", Unquoted(f"{len(value)} items"))
    for index, item in enumerate(value):
        if isinstance(item, str) and len(item) > MAX_ARG_BYTES // 4:
            size = encoded_size(item)
            if size > MAX_ARG_BYTES:
                raise invalid(
                    f"at most {MAX_ARG_BYTES} bytes are allowed in one "
                    + ("argument" if field_name == "args" else "argv item"),
                    Unquoted(f"{size} bytes"),
                    f"[{index}]",
                )


def check_env_size(value: object) -> None:
    """At most MAX_ENV_ENTRIES variables whose values hold at most MAX_ENV_VALUE_BYTES each."""
    if not isinstance(value, Mapping):
        return
    if len(value) > MAX_ENV_ENTRIES:
        raise invalid(
            f"at most {MAX_ENV_ENTRIES} variables are allowed", Unquoted(f"{len(value)} variables")
        )
    for key, item in value.items():
        if isinstance(item, str) and len(item) > MAX_ENV_VALUE_BYTES // 4:
            size = encoded_size(item)
            if size > MAX_ENV_VALUE_BYTES:
                raise invalid(
                    f"at most {MAX_ENV_VALUE_BYTES} bytes are allowed in one environment value",
                    Unquoted(f"{size} bytes"),
                    str(key),
                )


def _raise_request_too_large(size: int, what: str) -> None:
    raise RequestError(
        "",
        Unquoted(f"{size} bytes{what}"),
        f"at most {MAX_REQUEST_BYTES} bytes are allowed for a whole request",
    )


def check_text_size(size: int) -> None:
    """A request file's (or text's) size, known before it is read."""
    if size > MAX_REQUEST_BYTES:
        _raise_request_too_large(size, " of text")


def measure_json_size(data: object, limit: int) -> int:
    """The size of `data` as compact JSON, counted only up to just past `limit`: a value
    built with repeated references (a YAML alias bomb) costs no more than `limit` to reject."""
    total, stack = 0, [data]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str):
            total += 2 + (len(item) if len(item) > limit else encoded_size(item))
        elif isinstance(item, Mapping):
            total += 2 + 2 * len(item)
            for key, value in item.items():
                stack.append(str(key))
                stack.append(value)
        elif isinstance(item, list | tuple):
            total += 2 + len(item)
            stack.extend(item)
        else:
            total += len(str(item))
    return total


def check_request_size(data: Mapping[str, object]) -> None:
    """The caps on env, entrypoint and args (naming the field), then the whole request's size.

    Raises RequestError; run on the raw mapping before the model reads any value."""
    checks = (
        ("env", check_env_size),
        ("entrypoint", lambda v: check_argv_size(v, "entrypoint")),
        ("args", lambda v: check_argv_size(v, "args")),
    )
    for name, check in checks:
        try:
            check(data.get(name))
        except PydanticCustomError as error:
            context = error.context or {}
            where = context.get("field", "")
            field = f"{name}.{where}" if where and not where.startswith("[") else name + where
            raise RequestError(field, context.get("given"), context.get("allowed", "")) from None
    size = measure_json_size(data, MAX_REQUEST_BYTES)
    if size > MAX_REQUEST_BYTES:
        _raise_request_too_large(size, " or more as JSON")
