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
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT_RETRIES = 5
DEFAULT_TIMEOUT_S = 60.0
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
CHUNK_BYTES = 1024 * 1024

ProgressCallback = Callable[[int, int], None]


class TransferError(Exception):
    """A download or upload failed for good; the message never holds a credential."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class UploadPolicy:
    """The content of upload.json: a presigned POST limited to one key prefix."""

    url: str
    fields: dict[str, str]
    prefix: str
    expires_at: str
    bucket: str = ""

    @classmethod
    def from_json(cls, raw: dict[str, object]) -> UploadPolicy:
        missing = [k for k in ("url", "fields", "prefix") if k not in raw]
        if missing:
            raise TransferError(
                f"upload.json: missing {', '.join(missing)}; needs url, fields, prefix"
            )
        if raw.get("method", "POST") != "POST":
            raise TransferError(
                f"upload.json: method {raw.get('method')!r} given; only POST is supported"
            )
        fields = raw["fields"]
        if not isinstance(fields, dict):
            raise TransferError("upload.json: fields must be an object")
        return cls(
            url=str(raw["url"]),
            fields={str(k): str(v) for k, v in fields.items()},
            prefix=str(raw["prefix"]),
            expires_at=str(raw.get("expires_at", "")),
            bucket=str(raw.get("bucket", "")),
        )


def load_upload_policy(path: str | os.PathLike[str]) -> UploadPolicy:
    with open(path, encoding="utf-8") as stream:
        return UploadPolicy.from_json(json.load(stream))


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
    delay = FIRST_BACKOFF_S
    for attempt in range(retries + 1):
        try:
            return action()
        except urllib.error.HTTPError as exc:
            code, message = describe_http_error(exc)
            if not _is_transient(exc) or attempt == retries:
                raise TransferError(
                    f"{what}: HTTP {exc.code} {code or ''}: {message}".replace("  ", " "),
                    exc.code,
                    code,
                ) from None
        except Exception as exc:  # noqa: BLE001 - classified below
            if not _is_transient(exc) or attempt == retries:
                if isinstance(exc, TransferError):
                    raise
                reason = getattr(exc, "reason", exc)
                raise TransferError(f"{what}: {type(exc).__name__}: {reason}") from None
        time.sleep(delay)
        delay = min(delay * 2, MAX_BACKOFF_S)
    raise AssertionError("unreachable")


def download_to_file(
    url: str,
    dest: str | os.PathLike[str],
    retries: int = DEFAULT_RETRIES,
    timeout: float = DEFAULT_TIMEOUT_S,
    progress: ProgressCallback | None = None,
) -> int:
    """Stream `url` into `dest` (via a temporary name); returns the byte count."""
    target = Path(dest)
    partial = target.with_name(f".{target.name}.partial")
    what = f"download of {redact_url(url)}"

    def attempt() -> int:
        with urllib.request.urlopen(url, timeout=timeout) as answer, open(partial, "wb") as sink:
            expected = answer.headers.get("Content-Length")
            total = int(expected) if expected and expected.isdigit() else -1
            done = 0
            while chunk := answer.read(CHUNK_BYTES):
                sink.write(chunk)
                done += len(chunk)
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
    fields = dict(policy.fields)
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
