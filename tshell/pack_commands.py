"""`tshell pack`, `tshell upload` and `tshell push`: from a directory to a bundle in S3.

pack writes the bundle format of `runtime/bundle.py` (the one place that
knows it). upload sends a file with boto3's managed transfer (multipart and
parallel above the threshold); push packs and uploads at the same time,
sending each part as soon as it is compressed (`StreamingUpload`).

Both then check that S3 holds the same bytes: they know the ETag S3 must
report for these bytes and this part size (MD5 of the part MD5s and `-N`,
or the plain MD5 for a single PUT) and compare it and the size with
`head_object`. Where S3's ETag is not an MD5 (SSE-KMS objects) they download
the object and compare sha256.

The S3 client, and where a destination URL puts the file, are tshell's one
way to S3 (s3_client.py).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.bundle import LARGE_FILE_BYTES, BundleError, BundleInfo, write_bundle
from tshell.errors import TshellError
from tshell.progress import ProgressBar, format_bytes
from tshell.s3_client import make_s3_client, s3_destination

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
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
    client: Any,
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
    hashed: dict[str, Any] = {}
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
    client: Any, bucket: str, key: str, size: int, expected: str, parts: int, sha256: str
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


def verify_by_download(client: Any, bucket: str, key: str, sha256: str) -> str:
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


def pack_directory(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str] | None,
    name: str | None,
    show_progress: bool | None = None,
    bar: ProgressBar | None = None,
    on_archive_bytes: Any = None,
) -> BundleInfo:
    """Pack with a progress bar; warnings about large or skipped files go to stderr."""
    src_path = Path(src)
    bundle_name = name or src_path.resolve().name
    out_path = Path(out) if out else Path(f"{bundle_name}.tar.gz")
    if out_path.is_dir():
        out_path = out_path / f"{bundle_name}.tar.gz"
    bar = bar or ProgressBar(f"pack {bundle_name}", 0, enabled=show_progress)
    try:
        info = write_bundle(
            src_path, out_path, bundle_name, progress=bar.set, on_archive_bytes=on_archive_bytes
        )
    finally:
        bar.close()
    for entry in info.large_files:
        print(
            f"tshell: warning: {entry.path} is {format_bytes(entry.size)} "
            f"(over {format_bytes(LARGE_FILE_BYTES)}); every pod downloads it at start: "
            "consider keeping large data in S3 and reading it directly",
            file=sys.stderr,
        )
    for skipped in info.skipped:
        print(
            f"tshell: note: {src_path / skipped} is not packed (only code/ and data/ are)",
            file=sys.stderr,
        )
    return info


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
        client: Any,
        bucket: str,
        key: str,
        part_size: int,
        concurrency: int,
        progress: ProgressBar | None = None,
    ) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.client, self.bucket, self.key = client, bucket, key
        self.part_size = part_size
        self.progress = progress
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="tshell-part")
        # Bounds memory: at most this many parts are held while waiting for the network.
        self.slots = threading.BoundedSemaphore(concurrency + 2)
        self.buffer = bytearray()
        self.part_md5s: list[bytes] = []
        self.futures: list[Any] = []
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

    def _upload_part(self, number: int, part: bytes) -> dict[str, Any]:
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


def push_directory(
    client: Any,
    src: str | os.PathLike[str],
    dest: str,
    name: str | None,
    workdir: str | os.PathLike[str],
    part_size: int = DEFAULT_PART_SIZE,
    concurrency: int = DEFAULT_CONCURRENCY,
    show_progress: bool | None = None,
) -> tuple[BundleInfo, UploadResult]:
    """Pack `src` and upload the archive while it is being written, then verify it in S3."""
    bundle_name = name or Path(src).resolve().name
    bucket, key = s3_destination(dest, f"{bundle_name}.tar.gz")
    bar = ProgressBar(f"push {bundle_name}", 0, enabled=show_progress)
    stream = StreamingUpload(client, bucket, key, part_size, concurrency)
    try:
        info = pack_directory(src, workdir, bundle_name, bar=bar, on_archive_bytes=stream.write)
        expected, parts = stream.finish()
    except BaseException as exc:
        stream.abort()
        if isinstance(exc, (BundleError, KeyboardInterrupt)):
            raise
        raise UploadError(f"upload to s3://{bucket}/{key} failed: {exc}") from None
    verified_by = verify_uploaded(
        client, bucket, key, info.archive_size, expected, parts, info.archive_sha256
    )
    result = UploadResult(
        f"s3://{bucket}/{key}", info.archive_size, info.archive_sha256, expected, parts, verified_by
    )
    return info, result


# --------------------------------------------------------------------------- commands


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    pack = subparsers.add_parser(
        "pack", help="pack DIR into <name>.tar.gz (code/, data/, MANIFEST.json)"
    )
    pack.add_argument("directory", help="DIR with code/ and data/ (or only code, packed as code/)")
    pack.add_argument("-o", "--output", help="archive path or directory (default ./<name>.tar.gz)")
    pack.add_argument("--name", help="bundle name (default: DIR's name)")
    pack.set_defaults(func=run_pack)

    for name, func, text in (
        ("upload", run_upload, "upload FILE to s3://bucket/prefix/ and verify it"),
        ("push", run_push, "pack DIR and upload the bundle"),
    ):
        sub = subparsers.add_parser(name, help=text)
        sub.add_argument("source", help="FILE" if name == "upload" else "DIR")
        sub.add_argument("destination", help="s3://bucket/prefix/ (ends in /) or s3://bucket/key")
        if name == "push":
            sub.add_argument("--name", help="bundle name (default: DIR's name)")
        sub.add_argument(
            "--part-size",
            type=int,
            default=DEFAULT_PART_SIZE // MIB,
            metavar="MiB",
            help=f"multipart part size and threshold (default {DEFAULT_PART_SIZE // MIB})",
        )
        sub.add_argument(
            "--concurrency", type=int, default=DEFAULT_CONCURRENCY, help="parallel part uploads"
        )
        sub.add_argument(
            "--aws-conn-id", help="use this Airflow AWS connection instead of boto3's defaults"
        )
        sub.set_defaults(func=func)


def run_pack(args: argparse.Namespace) -> int:
    try:
        info = pack_directory(args.directory, args.output, args.name)
    except BundleError as exc:
        print(f"tshell: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print_bundle(info)
    return EXIT_OK


def print_bundle(info: BundleInfo) -> None:
    print(
        f"{info.path}  {format_bytes(info.archive_size)} ({info.archive_size} bytes), "
        f"{len(info.manifest.files)} files, {format_bytes(info.manifest.total_size)} unpacked"
    )
    print(f"sha256 {info.archive_sha256}")


def _upload_with_bar(args: argparse.Namespace, path: Path, sha256: str | None) -> int:
    if args.part_size < 5 and path.stat().st_size > args.part_size * MIB:
        print(
            f"tshell: --part-size: {args.part_size} given; S3 requires at least 5 MiB parts",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        client = make_s3_client(args.aws_conn_id)
        with ProgressBar(f"upload {path.name}", path.stat().st_size) as bar:
            result = upload_file(
                client, path, args.destination, args.part_size * MIB, args.concurrency, sha256, bar
            )
    except (UploadError, ValueError) as exc:
        print(f"tshell: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(
        f"{result.uri}  {format_bytes(result.size)} ({result.size} bytes) in {result.parts} part(s)"
    )
    print(f"sha256 {result.sha256}; verified: {result.verified_by}")
    return EXIT_OK


def run_upload(args: argparse.Namespace) -> int:
    path = Path(args.source)
    if not path.is_file():
        print(f"tshell: upload: {args.source!r} is not a file", file=sys.stderr)
        return EXIT_USAGE
    return _upload_with_bar(args, path, None)


def run_push(args: argparse.Namespace) -> int:
    if args.part_size < 5:
        print(
            f"tshell: --part-size: {args.part_size} given; S3 requires at least 5 MiB parts",
            file=sys.stderr,
        )
        return EXIT_USAGE
    with tempfile.TemporaryDirectory(prefix="tshell-push-") as tmp:
        try:
            client = make_s3_client(args.aws_conn_id)
            info, result = push_directory(
                client,
                args.source,
                args.destination,
                args.name,
                tmp,
                args.part_size * MIB,
                args.concurrency,
            )
        except (BundleError, UploadError, ValueError) as exc:
            print(f"tshell: {exc}", file=sys.stderr)
            return EXIT_FAILED
    print_bundle(info)
    print(
        f"{result.uri}  {format_bytes(result.size)} ({result.size} bytes) in {result.parts} part(s)"
    )
    print(f"verified: {result.verified_by}")
    return EXIT_OK
