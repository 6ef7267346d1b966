"""Moving bytes to and from S3 with presigned requests, standard library only.

Pods hold no cloud credentials: they get a presigned GET URL for the bundle
and a presigned POST policy (or presigned PUT URLs) for their run's prefix.
This module speaks plain HTTP(S) with urllib so any TensorFlow image works.

Presigned URLs and policies are credentials: no message here ever contains a
query string or a policy signature; `redact_url` keeps scheme, host and path.
Transient failures (5xx, connection errors, truncated bodies) are retried with
exponential back-off; 4xx answers are final and reported with S3's error code.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import secrets
import socket
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from runtime.backoff import BackoffPolicy, RetryState, call_with_backoff
from runtime.errors import PodError

DEFAULT_RETRIES = 5
DEFAULT_TIMEOUT_S = 60.0
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
MAX_PATIENT_BACKOFF_S = 30.0
# Between two tries of one request; and of a patient upload (S3 down for minutes).
TRANSFER_BACKOFF = BackoffPolicy(first_delay=FIRST_BACKOFF_S, max_delay=MAX_BACKOFF_S)
PATIENT_BACKOFF = BackoffPolicy(first_delay=FIRST_BACKOFF_S, max_delay=MAX_PATIENT_BACKOFF_S)
CHUNK_BYTES = 1024 * 1024

ProgressCallback = Callable[[int, int], None]


class TransferError(PodError):
    """A download or upload failed for good; the message never holds a credential."""

    def __init__(
        self,
        message: str,
        status: int | None = None,
        code: str | None = None,
        transient: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.transient = transient  # worth trying again later (5xx, 429, network)


@dataclass(frozen=True)
class UploadPolicy:
    """The content of upload.json: presigned POST policies, each for one key or key prefix.

    `grants` maps a name relative to `prefix` (`model/` is a key prefix,
    `metrics.json` one exact key) to the form fields of its policy.
    """

    url: str
    prefix: str
    grants: dict[str, dict[str, str]]
    expires_at: str = ""
    bucket: str = ""

    @classmethod
    def from_json(cls, raw: dict[str, object]) -> UploadPolicy:
        missing = [k for k in ("url", "prefix", "grants") if k not in raw]
        if missing:
            raise TransferError(
                f"upload.json: missing {', '.join(missing)}; needs url, prefix, grants"
            )
        if raw.get("method", "POST") != "POST":
            raise TransferError(
                f"upload.json: method {raw.get('method')!r} given; only POST is supported"
            )
        grants = raw["grants"]
        if not isinstance(grants, dict) or not all(
            isinstance(g, dict) and isinstance(g.get("fields"), dict) for g in grants.values()
        ):
            raise TransferError('upload.json: grants must map names to {"fields": {...}}')
        return cls(
            url=str(raw["url"]),
            prefix=str(raw["prefix"]),
            grants={
                str(name): {str(k): str(v) for k, v in grant["fields"].items()}
                for name, grant in grants.items()
            },
            expires_at=str(raw.get("expires_at", "")),
            bucket=str(raw.get("bucket", "")),
        )

    def fields_for(self, key: str) -> dict[str, str]:
        """The form fields of the grant covering `key`; TransferError when none does."""
        relative = key[len(self.prefix) :] if key.startswith(self.prefix) else None
        for name, fields in self.grants.items():
            if relative is not None and (
                relative == name or (name.endswith("/") and relative.startswith(name))
            ):
                return dict(fields)
        granted = ", ".join(self.prefix + name for name in sorted(self.grants))
        raise TransferError(f"upload of {key}: no grant covers this key; granted: {granted}")


def load_upload_policy(path: str | os.PathLike[str]) -> UploadPolicy:
    """Read upload.json; a missing or malformed file is a TransferError naming it."""
    try:
        with open(path, encoding="utf-8") as stream:
            raw = json.load(stream)
    except (OSError, ValueError) as exc:
        raise TransferError(f"upload grant {path}: {exc}") from None
    if not isinstance(raw, dict):
        raise TransferError(f"upload grant {path}: a JSON object is required")
    return UploadPolicy.from_json(raw)


def redact_url(url: str) -> str:
    """scheme://host/path of a URL: what may be shown of a presigned URL."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def describe_http_error(exc: urllib.error.HTTPError) -> tuple[str | None, str]:
    """S3's error code and message from an error answer's XML body."""
    try:
        body = exc.read(64 * 1024)
    except (OSError, http.client.HTTPException):
        body = b""
    try:
        root = ET.fromstring(body)
        code = root.findtext("Code")
        message = root.findtext("Message") or ""
        return code, message
    except ET.ParseError:
        return None, body[:200].decode("utf-8", "replace")


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code >= 500 or exc.code == 429
    if isinstance(getattr(exc, "reason", None), (FileNotFoundError, PermissionError, ValueError)):
        return False  # file:// URLs and malformed URLs do not get better by waiting
    return isinstance(
        exc,
        (
            urllib.error.URLError,
            ConnectionError,
            socket.timeout,
            http.client.HTTPException,
            TimeoutError,
        ),
    )


def _with_retries(action: Callable[[], object], what: str, retries: int) -> object:
    """`action()` with up to `retries` more tries after transient failures; every
    failure that ends the tries becomes a TransferError naming `what`."""
    try:
        return call_with_backoff(
            action, TRANSFER_BACKOFF.with_changes(attempts=retries + 1), on=_is_transient
        )
    except TransferError:
        raise
    except urllib.error.HTTPError as exc:
        code, message = describe_http_error(exc)
        raise TransferError(
            f"{what}: HTTP {exc.code} {code or ''}: {message}".replace("  ", " "),
            exc.code,
            code,
            transient=_is_transient(exc),
        ) from None
    except Exception as exc:  # noqa: BLE001 - classified by _is_transient
        reason = getattr(exc, "reason", exc)
        raise TransferError(
            f"{what}: {type(exc).__name__}: {reason}", transient=_is_transient(exc)
        ) from None


def download_to_file(
    url: str,
    dest: str | os.PathLike[str],
    retries: int = DEFAULT_RETRIES,
    timeout: float = DEFAULT_TIMEOUT_S,
    progress: ProgressCallback | None = None,
    max_bytes: int | None = None,
) -> int:
    """Stream `url` into `dest` (via a temporary name); returns the byte count.

    An object over `max_bytes` is refused (TransferError with code
    "EntityTooLarge", never retried): by its Content-Length before any byte is
    read, or once more than `max_bytes` arrived when the length is absent or wrong.
    """
    target = Path(dest)
    partial = target.with_name(f".{target.name}.partial")
    what = f"download of {redact_url(url)}"

    def too_large(size: str) -> TransferError:
        return TransferError(
            f"{what}: {size} bytes; the limit is {max_bytes}", code="EntityTooLarge"
        )

    def attempt() -> int:
        with urllib.request.urlopen(url, timeout=timeout) as answer, open(partial, "wb") as sink:
            expected = answer.headers.get("Content-Length")
            total = int(expected) if expected and expected.isdigit() else -1
            if max_bytes is not None and total > max_bytes:
                raise too_large(str(total))
            done = 0
            while chunk := answer.read(CHUNK_BYTES):
                done += len(chunk)
                if max_bytes is not None and done > max_bytes:
                    raise too_large(f"over {done}")
                sink.write(chunk)
                if progress:
                    progress(done, total)
            if total >= 0 and done != total:
                raise http.client.IncompleteRead(b"", total - done)
        os.replace(partial, target)
        return done

    try:
        return int(_with_retries(attempt, what, retries))  # type: ignore[arg-type]
    finally:
        partial.unlink(missing_ok=True)


def _multipart_body(
    fields: dict[str, str], file_path: Path, boundary: str
) -> tuple[list[bytes], int]:
    """The parts around the file content of a multipart/form-data POST, and the total length."""
    head = bytearray()
    for name, value in fields.items():
        head += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        head += value.encode() + b"\r\n"
    # S3 ignores every field after `file`, so the file must come last.
    filename = file_path.name.replace('"', "_")
    head += (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    return [bytes(head), tail], len(head) + file_path.stat().st_size + len(tail)


def _stream_file(file_path: Path, head: bytes, tail: bytes) -> Iterator[bytes]:
    yield head
    with open(file_path, "rb") as stream:
        while chunk := stream.read(CHUNK_BYTES):
            yield chunk
    yield tail


def post_file(
    policy: UploadPolicy,
    key: str,
    file_path: str | os.PathLike[str],
    retries: int = DEFAULT_RETRIES,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> None:
    """Upload one file to `key` with a presigned POST policy (multipart/form-data built by hand)."""
    path = Path(file_path)
    what = f"upload of {key} to {redact_url(policy.url)}"
    fields = policy.fields_for(key)
    fields["key"] = key
    boundary = "tfjob-" + secrets.token_hex(16)
    (head, tail), length = _multipart_body(fields, path, boundary)

    def attempt() -> None:
        request = urllib.request.Request(
            policy.url,
            data=_stream_file(path, head, tail),
            method="POST",
            headers={
                "Content-Type": f"multipart/form-data; boundary={boundary}",
                "Content-Length": str(length),
            },
        )
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            answer.read()

    _with_retries(attempt, what, retries)


def post_file_patiently(
    load_policy: Callable[[], UploadPolicy],
    key: str,
    file_path: str | os.PathLike[str],
    patience_s: float,
    log: Callable[[str], None],
    timeout: float = DEFAULT_TIMEOUT_S,
) -> None:
    """`post_file` that keeps trying for `patience_s` seconds, reading the policy anew each time.

    S3 may be down for minutes and a grant may expire before Airflow's refresh
    lands in the mounted Secret: both are retried (an expired policy only; any
    other refusal is final), with back-off from FIRST_BACKOFF_S to
    MAX_PATIENT_BACKOFF_S, and each retry is logged.
    """
    policy = PATIENT_BACKOFF.with_changes(budget=patience_s)

    def attempt() -> None:
        post_file(load_policy(), key, file_path, retries=0, timeout=timeout)

    def note(state: RetryState) -> None:
        log(
            f"{state.error}; attempt {state.attempt} failed, "
            f"retrying in {state.delay:.1f}s ({state.left:.0f}s left)"
        )

    def give_up(state: RetryState) -> None:
        exc = state.error
        assert isinstance(exc, TransferError)
        raise TransferError(
            f"{exc} (gave up after {state.attempt} attempt(s) in {state.elapsed:.0f}s)",
            exc.status,
            exc.code,
        ) from None

    call_with_backoff(
        attempt,
        policy,
        on=lambda exc: isinstance(exc, TransferError) and is_worth_retrying(exc),
        on_retry=note,
        on_give_up=give_up,
    )


def is_worth_retrying(exc: TransferError) -> bool:
    """A transient failure, or a grant that expired (Airflow refreshes grants)."""
    return exc.transient or (exc.status == 403 and "expired" in str(exc).lower())


def put_file(
    url: str,
    file_path: str | os.PathLike[str],
    retries: int = DEFAULT_RETRIES,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> None:
    """Upload one file with a presigned PUT URL (the signature binds the key)."""
    path = Path(file_path)
    length = path.stat().st_size

    def attempt() -> None:
        with open(path, "rb") as body:
            request = urllib.request.Request(
                url, data=body, method="PUT", headers={"Content-Length": str(length)}
            )
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                answer.read()

    _with_retries(attempt, f"upload to {redact_url(url)}", retries)


def sha256_of(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()
