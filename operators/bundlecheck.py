"""The fetch_bundle task's work: check the bundle in S3 and snapshot it for the run.

An archive over the compressed-size limit (S3's Content-Length, from a HEAD)
is refused before any byte is downloaded; the download itself stops if more
bytes arrive than the HEAD announced (the object changed in between). The
bundle is downloaded once, checked with the one bundle safety check
(`runtime.bundle.verify_bundle`: every member matches the manifest's size and
sha256, nothing unsafe) and copied to `<run prefix>/bundle.tar.gz`.
Pods fetch the snapshot, never the original key, so an upload during the run
cannot change what a running job trains on.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from operators import settings
from operators.errors import PipelineError
from runtime.bundle import BundleError, Refusal, verify_bundle
from tfjob.records.outcomes import BundleIdentity
from tfjob.runlayout import BUNDLE_SNAPSHOT_FILE, RunLayout
from tfjob.s3url import parse_s3_url

if TYPE_CHECKING:
    from botocore.client import BaseClient


class BundleMissing(PipelineError, FileNotFoundError):
    """The request's bundle is not in S3."""


def hash_archive(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def snapshot_bundle(
    s3: BaseClient,
    bundle_uri: str,
    layout: RunLayout,
    max_total_size: int,
    max_compressed_size: int | None = None,
) -> BundleIdentity:
    """Check the bundle and copy it to the run's snapshot; return its identity.

    `max_compressed_size` defaults to settings.MAX_BUNDLE_COMPRESSED_SIZE.
    BundleMissing when the key is absent, BundleError when the bundle is refused.
    """
    from botocore.exceptions import ClientError

    if max_compressed_size is None:
        max_compressed_size = settings.MAX_BUNDLE_COMPRESSED_SIZE

    bucket, key = parse_s3_url(bundle_uri)
    try:
        head = s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code"))
        if code in ("404", "NoSuchKey", "NotFound"):
            raise BundleMissing(
                f"bundle {bundle_uri}: no object with key {key!r} in bucket {bucket!r}; "
                "upload it first (tshell push DIR s3://...)"
            ) from None
        raise
    announced = int(head["ContentLength"])
    if announced > max_compressed_size:
        raise BundleError(
            bundle_uri,
            Refusal.ARCHIVE_TOO_LARGE,
            f"{announced} bytes in S3; the limit is {max_compressed_size} bytes",
        )
    received = 0

    def stop_past_the_head(count: int) -> None:
        nonlocal received
        received += count
        if received > announced:  # the key was overwritten after the HEAD; a retry may pass
            raise ValueError(
                f"bundle {bundle_uri}: over {announced} bytes arrived, the size S3 announced; "
                "was it replaced during the download?"
            )

    with tempfile.TemporaryDirectory(prefix="tfjob-bundle-") as tmp:
        local = Path(tmp) / BUNDLE_SNAPSHOT_FILE
        s3.download_file(bucket, key, str(local), Callback=stop_past_the_head)
        size, sha256 = hash_archive(local)
        if size != head["ContentLength"]:
            raise ValueError(
                f"bundle {bundle_uri}: downloaded {size} bytes, S3 says {head['ContentLength']}"
            )
        manifest = verify_bundle(local, max_total_size)
        snapshot = layout.bundle_snapshot
        # Upload the bytes we checked (not a server-side copy of the key, which could have changed).
        s3.upload_file(str(local), snapshot.bucket, snapshot.key)
    return BundleIdentity(
        source=bundle_uri,
        source_etag=head.get("ETag", "").strip('"'),
        snapshot=snapshot.uri,
        size=size,
        sha256=sha256,
        name=manifest.name,
        created=manifest.created,
        files=len(manifest.files),
        total_size=manifest.total_size,
    )
