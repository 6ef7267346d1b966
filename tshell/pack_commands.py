"""`tshell pack`, `tshell upload` and `tshell push`: from a directory to a bundle in S3.

pack writes the bundle format of `runtime/bundle.py` (the one place that
knows it). upload sends a file with boto3's managed transfer; push packs and
uploads at the same time, sending each part as soon as it is compressed. Both
then check that S3 holds the same bytes. The uploads and their checks are
s3_upload.py's; this module holds the commands and their output.

The S3 client, and where a destination URL puts the file, are tshell's one
way to S3 (s3_client.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from runtime.bundle import LARGE_FILE_BYTES, BundleError, BundleInfo, write_bundle
from tshell.command import set_command
from tshell.exitcodes import CommandError, ExitCode
from tshell.progress import ProgressBar, format_bytes
from tshell.s3_client import make_s3_client, s3_destination
from tshell.s3_upload import (
    DEFAULT_CONCURRENCY,
    DEFAULT_PART_SIZE,
    MIB,
    StreamingUpload,
    UploadError,
    UploadResult,
    upload_file,
    verify_uploaded,
)

if TYPE_CHECKING:
    from botocore.client import BaseClient

    from tshell.command import Subparsers

# The prefix of these commands' error messages (tshell/command.py).
ERROR_PREFIX = "tshell: "


def pack_directory(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str] | None,
    name: str | None,
    show_progress: bool | None = None,
    bar: ProgressBar | None = None,
    on_archive_bytes: Callable[[bytes], None] | None = None,
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


def push_directory(
    client: BaseClient,
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


def register(subparsers: Subparsers) -> None:
    pack = subparsers.add_parser(
        "pack", help="pack DIR into <name>.tar.gz (code/, data/, MANIFEST.json)"
    )
    pack.add_argument("directory", help="DIR with code/ and data/ (or only code, packed as code/)")
    pack.add_argument("-o", "--output", help="archive path or directory (default ./<name>.tar.gz)")
    pack.add_argument("--name", help="bundle name (default: DIR's name)")
    set_command(pack, run_pack, ERROR_PREFIX)

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
        set_command(sub, func, ERROR_PREFIX)


def run_pack(args: argparse.Namespace, out: TextIO) -> ExitCode:
    try:
        info = pack_directory(args.directory, args.output, args.name)
    except BundleError as exc:
        raise CommandError(str(exc), ExitCode.FAILED) from None
    print_bundle(info, out)
    return ExitCode.OK


def print_bundle(info: BundleInfo, out: TextIO) -> None:
    print(
        f"{info.path}  {format_bytes(info.archive_size)} ({info.archive_size} bytes), "
        f"{len(info.manifest.files)} files, {format_bytes(info.manifest.total_size)} unpacked",
        file=out,
    )
    print(f"sha256 {info.archive_sha256}", file=out)


def describe_upload(result: UploadResult) -> str:
    size = f"{format_bytes(result.size)} ({result.size} bytes)"
    return f"{result.uri}  {size} in {result.parts} part(s)"


def check_part_size(part_size_mib: int) -> None:
    if part_size_mib < 5:
        raise CommandError(
            f"--part-size: {part_size_mib} given; S3 requires at least 5 MiB parts",
            ExitCode.INVALID_REQUEST,
        )


def run_upload(args: argparse.Namespace, out: TextIO) -> ExitCode:
    path = Path(args.source)
    if not path.is_file():
        raise CommandError(f"upload: {args.source!r} is not a file", ExitCode.INVALID_REQUEST)
    # A file of one part is one PUT: the part size does not matter then.
    if path.stat().st_size > args.part_size * MIB:
        check_part_size(args.part_size)
    try:
        client = make_s3_client(args.aws_conn_id)
        with ProgressBar(f"upload {path.name}", path.stat().st_size) as bar:
            result = upload_file(
                client, path, args.destination, args.part_size * MIB, args.concurrency, None, bar
            )
    except (UploadError, ValueError) as exc:
        raise CommandError(str(exc), ExitCode.FAILED) from None
    print(describe_upload(result), file=out)
    print(f"sha256 {result.sha256}; verified: {result.verified_by}", file=out)
    return ExitCode.OK


def run_push(args: argparse.Namespace, out: TextIO) -> ExitCode:
    check_part_size(args.part_size)
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
            raise CommandError(str(exc), ExitCode.FAILED) from None
    print_bundle(info, out)
    print(describe_upload(result), file=out)
    print(f"verified: {result.verified_by}", file=out)
    return ExitCode.OK
