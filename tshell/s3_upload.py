"""Bytes to S3, and proof that S3 holds them: tshell's uploads.

`upload_file` sends a file with boto3's managed transfer (multipart and parallel above
the threshold); `StreamingUpload` is a multipart upload fed while the archive is still
being written (`tshell push`). Both are then checked (`verify_uploaded`): the ETag S3
must report for these bytes and this part size (MD5 of the part MD5s and `-N`, or the
plain MD5 for a single PUT) and the size are compared with `head_object`; where S3's
ETag is not an MD5 (SSE-KMS objects) the object is downloaded and its sha256 compared.
The commands that use them are pack_commands.py's.
"""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tfjob.jsontypes import JsonObject
from tshell.errors import TshellError
from tshell.progress import ProgressBar
from tshell.s3_client import s3_destination

if TYPE_CHECKING:
    from botocore.client import BaseClient

MIB = 1024 * 1024
DEFAULT_PART_SIZE = 8 * MIB
DEFAULT_CONCURRENCY = 10
SHA256_METADATA_KEY = "sha256"


class UploadError(TshellError):
    """An upload failed or S3 does not hold what was sent."""


@dataclass(frozen=True)
class UploadResult:
    uri: str
    size: int
    sha256: str
    etag: str
    parts: int
    verified_by: str


# --------------------------------------------------------------------------- library


def expected_etag(path: Path, threshold: int, part_size: int) -> tuple[str, str, int]:
    """(sha256, the ETag S3 reports for this file uploaded with these settings, number of parts)."""
    from s3transfer.utils import ChunksizeAdjuster

    size = path.stat().st_size
    sha = hashlib.sha256()
    multipart = size >= threshold
    chunk = ChunksizeAdjuster().adjust_chunksize(part_size, size) if multipart else max(size, 1)
    part_digests: list[bytes] = []
    with open(path, "rb") as stream:
        while True:
            part = stream.read(chunk)
            if not part and part_digests:
                break
            sha.update(part)
            part_digests.append(hashlib.md5(part, usedforsecurity=False).digest())
            if not part or not multipart:
                break
    if multipart:
        combined = hashlib.md5(b"".join(part_digests), usedforsecurity=False).hexdigest()
        return sha.hexdigest(), f"{combined}-{len(part_digests)}", len(part_digests)
    return sha.hexdigest(), part_digests[0].hex(), 1


def upload_file(
    client: BaseClient,
    path: str | os.PathLike[str],
    dest: str,
    part_size: int = DEFAULT_PART_SIZE,
    concurrency: int = DEFAULT_CONCURRENCY,
    sha256: str | None = None,
    progress: ProgressBar | None = None,
) -> UploadResult:
    """Upload `path` to `dest` (multipart + parallel above `part_size`) and verify what S3 holds."""
    from boto3.s3.transfer import TransferConfig

    file_path = Path(path)
    bucket, key = s3_destination(dest, file_path.name)
    size = file_path.stat().st_size
    config = TransferConfig(
        multipart_threshold=part_size,
        multipart_chunksize=part_size,
        max_concurrency=concurrency,
        use_threads=True,
    )
    # Hash while the upload runs: both read the same (cached) file.
    hashed: JsonObject = {}
    hasher = threading.Thread(
        target=lambda: hashed.update(
            zip(
                ("sha256", "etag", "parts"),
                expected_etag(file_path, part_size, part_size),
                strict=True,
            )
        ),
        name="tshell-hash",
    )
    hasher.start()
    extra = {"Metadata": {SHA256_METADATA_KEY: sha256}} if sha256 else None
    try:
        client.upload_file(
            str(file_path),
            bucket,
            key,
            ExtraArgs=extra,
            Config=config,
            Callback=progress.add if progress else None,
        )
    except (
        Exception
    ) as exc:  # boto3 raises several unrelated types (S3UploadFailedError, ClientError, ...)
        raise UploadError(f"upload of {file_path} to s3://{bucket}/{key} failed: {exc}") from None
    finally:
        hasher.join()
    if sha256 and sha256 != hashed["sha256"]:
        raise UploadError(
            f"{file_path} changed while uploading (sha256 {hashed['sha256']}, packed as {sha256})"
        )
    verified_by = verify_uploaded(
        client, bucket, key, size, hashed["etag"], hashed["parts"], hashed["sha256"]
    )
    etag = verified_by.split()[1] if verified_by.startswith("ETag ") else ""
    return UploadResult(
        f"s3://{bucket}/{key}", size, hashed["sha256"], etag, hashed["parts"], verified_by
    )


def verify_uploaded(
    client: BaseClient, bucket: str, key: str, size: int, expected: str, parts: int, sha256: str
) -> str:
    """Check that S3 holds `size` bytes whose ETag is `expected`; say how it was verified."""
    head = client.head_object(Bucket=bucket, Key=key)
    etag = str(head.get("ETag", "")).strip('"')
    if head.get("ContentLength") != size:
        raise UploadError(
            f"s3://{bucket}/{key}: S3 holds {head.get('ContentLength')} bytes; {size} were sent"
        )
    if etag == expected:
        return f"ETag {etag} matches the local MD5 of {parts} part(s)"
    if len(etag.split("-")[0]) != 32:  # not an MD5 (e.g. SSE-KMS): compare the content itself
        return verify_by_download(client, bucket, key, sha256)
    raise UploadError(
        f"s3://{bucket}/{key}: S3's ETag {etag} differs from the local {expected}; "
        "the upload is corrupt"
    )


def verify_by_download(client: BaseClient, bucket: str, key: str, sha256: str) -> str:
    digest = hashlib.sha256()
    body = client.get_object(Bucket=bucket, Key=key)["Body"]
    for chunk in iter(lambda: body.read(MIB), b""):
        digest.update(chunk)
    if digest.hexdigest() != sha256:
        raise UploadError(
            f"s3://{bucket}/{key}: downloaded sha256 {digest.hexdigest()} "
            f"differs from the local {sha256}"
        )
    return "sha256 of the downloaded object matches"


class StreamingUpload:
    """A multipart upload fed with an archive's bytes while they are being written.

    `tshell push` hands this to `write_bundle`, so parts go up in parallel
    while later parts are still being compressed: push takes about
    max(pack, upload) rather than their sum. Part MD5s are taken as the bytes
    pass, which gives the expected ETag without reading the file again.
    Archives smaller than one part go up with a single PUT.
    """

    def __init__(
        self,
        client: BaseClient,
        bucket: str,
        key: str,
        part_size: int,
        concurrency: int,
        progress: ProgressBar | None = None,
    ) -> None:
        self.client, self.bucket, self.key = client, bucket, key
        self.part_size = part_size
        self.progress = progress
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="tshell-part")
        # Bounds memory: at most this many parts are held while waiting for the network.
        self.slots = threading.BoundedSemaphore(concurrency + 2)
        self.buffer = bytearray()
        self.part_md5s: list[bytes] = []
        self.futures: list[object] = []
        self.upload_id: str | None = None
        self.size = 0

    def write(self, data: bytes) -> None:
        self.buffer += data
        self.size += len(data)
        while len(self.buffer) >= self.part_size:
            part = bytes(self.buffer[: self.part_size])
            del self.buffer[: self.part_size]
            self._submit(part)

    def _submit(self, part: bytes) -> None:
        for future in self.futures:
            if future.done() and future.exception() is not None:
                raise future.exception()  # stop packing at the first failed part
        if self.upload_id is None:
            answer = self.client.create_multipart_upload(Bucket=self.bucket, Key=self.key)
            self.upload_id = answer["UploadId"]
        self.part_md5s.append(hashlib.md5(part, usedforsecurity=False).digest())
        number = len(self.part_md5s)
        self.slots.acquire()
        self.futures.append(self.pool.submit(self._upload_part, number, part))

    def _upload_part(self, number: int, part: bytes) -> JsonObject:
        try:
            answer = self.client.upload_part(
                Bucket=self.bucket,
                Key=self.key,
                UploadId=self.upload_id,
                PartNumber=number,
                Body=part,
            )
            if self.progress:
                self.progress.add(len(part))
            return {"PartNumber": number, "ETag": answer["ETag"]}
        finally:
            self.slots.release()

    def finish(self) -> tuple[str, int]:
        """Send what is left and complete; returns (expected ETag, number of parts)."""
        if self.upload_id is None:
            body = bytes(self.buffer)
            self.client.put_object(Bucket=self.bucket, Key=self.key, Body=body)
            if self.progress:
                self.progress.add(len(body))
            return hashlib.md5(body, usedforsecurity=False).hexdigest(), 1
        if self.buffer:
            self._submit(bytes(self.buffer))
            self.buffer.clear()
        parts = [future.result() for future in self.futures]
        self.client.complete_multipart_upload(
            Bucket=self.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            MultipartUpload={"Parts": parts},
        )
        self.pool.shutdown()
        combined = hashlib.md5(b"".join(self.part_md5s), usedforsecurity=False).hexdigest()
        return f"{combined}-{len(self.part_md5s)}", len(self.part_md5s)

    def abort(self) -> None:
        for future in self.futures:
            future.cancel()
        self.pool.shutdown(wait=True)
        if self.upload_id is not None:
            try:
                self.client.abort_multipart_upload(
                    Bucket=self.bucket, Key=self.key, UploadId=self.upload_id
                )
            except Exception:  # noqa: BLE001 - best effort; the original error matters more
                pass
