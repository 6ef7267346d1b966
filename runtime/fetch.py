"""Init container `fetch-bundle`: download the run's bundle and extract it safely.

Reads the presigned GET URL from `$TFJOB_ACCESS_DIR/bundle_url` (default
/tfjob/access), downloads it, verifies it against its manifest and extracts
`code/` and `data/` into `$TFJOB_WORKSPACE` (default /tfjob/workspace) with
the one bundle safety check (`bundle.extract_bundle`). The URL is a
credential and is never printed.

Then it restores the checkpoints `$TFJOB_ACCESS_DIR/restore.json` lists into
`$TFJOB_WORKSPACE/checkpoints` (`checkpoints.py`); that list is judged before
the bundle is downloaded, so a refused one downloads nothing.

With `$TFJOB_NO_BUNDLE=1` (a request without a bundle: the program is in the image) no
bundle is read or downloaded: `code/` and `data/` are created empty, and the restore
below runs as with a bundle.

Exit codes: 0 done, 2 configuration missing, 65 bundle or restore refused
(including an archive over `$TFJOB_MAX_BUNDLE_COMPRESSED_BYTES`, refused
before it is downloaded, and a checkpoint longer or shorter than listed),
74 download failed.
"""

from __future__ import annotations

import os
import sys
import time

from runtime import bundle, bundleformat, checkpoints, transfer
from runtime.protocol import (
    ACCESS_DIR,
    BUNDLE_URL_FILE,
    ENV_ACCESS_DIR,
    ENV_MAX_BUNDLE_BYTES,
    ENV_MAX_BUNDLE_COMPRESSED_BYTES,
    ENV_MAX_RESTORE_BYTES,
    ENV_MAX_RESTORE_FILES,
    ENV_NO_BUNDLE,
    ENV_WORKSPACE,
    EXIT_FETCH_DOWNLOAD_FAILED,
    EXIT_FETCH_REFUSED,
    EXIT_USAGE,
    RESTORE_FILE,
    WORKSPACE_DIR,
)

EXIT_OK = 0
DOWNLOAD_NAME = ".bundle.tar.gz"
TOO_LARGE_CODE = "EntityTooLarge"  # transfer.download_to_file's code for max_bytes


def log(message: str) -> None:
    print(f"fetch-bundle: {message}", file=sys.stderr, flush=True)


def read_limit(variable: str, default: int) -> int | None:
    """A byte limit from the environment; None (and a message) when it is not a number."""
    text = os.environ.get(variable, str(default))
    try:
        return int(text)
    except ValueError:
        log(f"{variable}: {text!r} given; a whole number of bytes is required")
        return None


def main() -> int:
    access_dir = os.environ.get(ENV_ACCESS_DIR, ACCESS_DIR)
    workspace = os.environ.get(ENV_WORKSPACE, WORKSPACE_DIR)
    max_total = read_limit(ENV_MAX_BUNDLE_BYTES, bundle.DEFAULT_MAX_TOTAL_SIZE)
    max_compressed = read_limit(ENV_MAX_BUNDLE_COMPRESSED_BYTES, bundle.DEFAULT_MAX_COMPRESSED_SIZE)
    max_restore_files = read_limit(ENV_MAX_RESTORE_FILES, checkpoints.DEFAULT_MAX_RESTORE_FILES)
    max_restore_bytes = read_limit(ENV_MAX_RESTORE_BYTES, checkpoints.DEFAULT_MAX_RESTORE_BYTES)
    if (
        max_total is None
        or max_compressed is None
        or max_restore_files is None
        or max_restore_bytes is None
    ):
        return EXIT_USAGE
    no_bundle = os.environ.get(ENV_NO_BUNDLE) == "1"
    url = "" if no_bundle else read_bundle_url(access_dir)
    if url is None:
        return EXIT_USAGE
    try:
        restore = checkpoints.read_restore_plan(
            os.path.join(access_dir, RESTORE_FILE), max_restore_files, max_restore_bytes
        )
    except checkpoints.RestoreRefused as exc:
        log(f"checkpoint restore refused: {exc}")
        return EXIT_FETCH_REFUSED
    except OSError as exc:
        log(f"cannot read {RESTORE_FILE} in {access_dir}: {exc.strerror}")
        return EXIT_USAGE

    os.makedirs(workspace, exist_ok=True)
    if no_bundle:
        for folder in bundleformat.TOP_DIRS:  # code/, data/ as a bundle has them
            os.makedirs(os.path.join(workspace, folder), exist_ok=True)
        log(f"no bundle: the program is in the image; {workspace}'s code/ and data/ are empty")
    else:
        result = fetch_bundle(url, workspace, max_total, max_compressed)
        if result != EXIT_OK:
            return result
    if restore is not None and restore.files:
        return restore_listed_checkpoints(restore, checkpoints.locate_checkpoint_dir(workspace))
    return EXIT_OK


def read_bundle_url(access_dir: str) -> str | None:
    """The presigned URL in the access Secret; None (and a message) when it is missing."""
    url_file = os.path.join(access_dir, BUNDLE_URL_FILE)
    try:
        with open(url_file, encoding="utf-8") as stream:
            url = stream.read().strip()
    except OSError as exc:
        log(
            f"cannot read {url_file}: {exc.strerror}; "
            f"the pod needs the access Secret mounted at {access_dir}"
        )
        return None
    if not url:
        log(f"{url_file} is empty")
        return None
    return url


def fetch_bundle(url: str, workspace: str, max_total: int, max_compressed: int) -> int:
    """Download, verify and extract the bundle into `workspace`; fetch's exit code."""
    archive = os.path.join(workspace, DOWNLOAD_NAME)
    started = time.monotonic()
    try:
        size = transfer.download_to_file(url, archive, max_bytes=max_compressed)
    except transfer.TransferError as exc:
        if exc.code == TOO_LARGE_CODE:
            refusal = bundle.BundleError(
                bundle.ARCHIVE_MEMBER, bundle.Refusal.ARCHIVE_TOO_LARGE, str(exc)
            )
            log(str(refusal))
            return EXIT_FETCH_REFUSED
        log(str(exc))
        return EXIT_FETCH_DOWNLOAD_FAILED
    try:
        manifest = bundle.extract_bundle(archive, workspace, max_total)
    except bundle.BundleError as exc:
        log(str(exc))
        return EXIT_FETCH_REFUSED
    finally:
        try:
            os.unlink(archive)
        except FileNotFoundError:
            pass
    seconds = time.monotonic() - started
    log(
        f"bundle {manifest.name!r} (created {manifest.created}): {len(manifest.files)} files, "
        f"{manifest.total_size} bytes, archive {size} bytes, "
        f"verified and extracted into {workspace} in {seconds:.1f}s"
    )
    return EXIT_OK


def restore_listed_checkpoints(plan: checkpoints.RestorePlan, checkpoint_dir: str) -> int:
    """Download the plan's files into CHECKPOINT_DIR; returns fetch's exit code."""
    try:
        total = checkpoints.restore_checkpoints(plan, checkpoint_dir)
    except checkpoints.RestoreRefused as exc:
        log(f"checkpoint restore refused: {exc}")
        return EXIT_FETCH_REFUSED
    except (transfer.TransferError, OSError) as exc:
        log(f"checkpoint restore failed: {exc}")
        return EXIT_FETCH_DOWNLOAD_FAILED
    log(checkpoints.describe_restore(plan, total))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
