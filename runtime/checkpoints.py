"""Checkpoints in the pod: restored before the program starts, copied to S3 while it runs.

A restarted gang, or a run that warm-starts from another, must find the
latest checkpoint in `CHECKPOINT_DIR` although the pod holds no credentials,
only presigned grants (docs/architecture.md, "The pod protocol").

Restore (init container, `fetch.py`): `$TFJOB_ACCESS_DIR/restore.json` lists
files with presigned GET URLs. The whole list is judged before any byte is
downloaded (every path inside CHECKPOINT_DIR, the count and the total size
within their limits); each download is cut at its listed size and must match
it. `RestoreRefused` means the list or a file is refused, `TransferError` a
download failed.

Sync (the model owner's bootstrap) is checkpoint_sync.py's; the names both
halves share (the directory, the pointer's name) are here.

URLs and policies are credentials: no message here holds one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field

from runtime import transfer
from runtime.bundleformat import MAX_NAME_COMPONENT_BYTES, MAX_PATH_BYTES
from runtime.errors import PodError
from runtime.protocol import RESTORE_FILE

CHECKPOINTS_SUBDIR = "checkpoints"  # of the workspace, and of the run prefix in S3
POINTER_NAME = "checkpoint"
RESTORE_VERSION = 1
MAX_RESTORE_JSON_BYTES = 16 * 1024**2
DEFAULT_MAX_RESTORE_FILES = 10_000
DEFAULT_MAX_RESTORE_BYTES = 20 * 1024**3
TOO_LARGE_CODE = "EntityTooLarge"  # transfer.download_to_file's code for max_bytes


def locate_checkpoint_dir(workspace: str) -> str:
    return os.path.join(workspace, CHECKPOINTS_SUBDIR)


class RestoreRefused(PodError):
    """restore.json, or a file it lists, is refused: the message says what and the limit."""


@dataclass(frozen=True)
class RestoreFile:
    path: str
    size: int
    url: str = field(repr=False)  # a credential


@dataclass(frozen=True)
class RestorePlan:
    source: str
    step: int | None
    files: tuple[RestoreFile, ...]

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)


def check_relative_path(path: object, where: str) -> str:
    """A plain relative path with '/' separators, or RestoreRefused naming `where`."""
    allowed = "a relative path inside CHECKPOINT_DIR is required"
    if not isinstance(path, str) or not path:
        raise RestoreRefused(f"{where}: {path!r} given; {allowed}")
    parts = path.split("/")
    if path.startswith("/") or "\\" in path or "\x00" in path:
        raise RestoreRefused(f"{where}: {path!r} given; {allowed} (no leading '/', no '\\')")
    if any(part in ("", ".", "..") for part in parts):
        raise RestoreRefused(f"{where}: {path!r} given; {allowed} (no '..', '.' or empty parts)")
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:
        raise RestoreRefused(f"{where}: {path!r} given; not valid UTF-8") from None
    if len(encoded) > MAX_PATH_BYTES or any(
        len(part.encode()) > MAX_NAME_COMPONENT_BYTES for part in parts
    ):
        raise RestoreRefused(
            f"{where}: path too long; at most {MAX_PATH_BYTES} bytes, "
            f"{MAX_NAME_COMPONENT_BYTES} per name"
        )
    return path


def check_no_file_dir_clash(paths: list[str]) -> None:
    """Refuse a path that is also another one's directory (`a` and `a/b`): it cannot be written."""
    parents = {"/".join(p.split("/")[:end]): p for p in paths for end in range(1, p.count("/") + 1)}
    for path in paths:
        if path in parents:
            raise RestoreRefused(
                f"{RESTORE_FILE}: {path!r} is listed as a file and as the directory of "
                f"{parents[path]!r}"
            )


def read_restore_plan(path: str, max_files: int, max_bytes: int) -> RestorePlan | None:
    """Read and judge restore.json; None when there is none. Nothing is downloaded here."""
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return None
    if size > MAX_RESTORE_JSON_BYTES:
        raise RestoreRefused(
            f"{RESTORE_FILE}: {size} bytes; at most {MAX_RESTORE_JSON_BYTES} are read"
        )
    with open(path, "rb") as stream:
        body = stream.read(MAX_RESTORE_JSON_BYTES + 1)
    if len(body) > MAX_RESTORE_JSON_BYTES:
        raise RestoreRefused(f"{RESTORE_FILE}: over {MAX_RESTORE_JSON_BYTES} bytes")
    try:
        raw = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RestoreRefused(f"{RESTORE_FILE}: not JSON ({type(exc).__name__})") from None
    if not isinstance(raw, dict):
        raise RestoreRefused(f"{RESTORE_FILE}: a JSON object is required")
    files = raw.get("files", [])
    if not isinstance(files, list):
        raise RestoreRefused(f"{RESTORE_FILE}: files: a list is required")
    if raw.get("version", RESTORE_VERSION) != RESTORE_VERSION:
        raise RestoreRefused(
            f"{RESTORE_FILE}: version {raw.get('version')!r} given; this reader knows "
            f"{RESTORE_VERSION}"
        )
    source, step = raw.get("source") or "", raw.get("step")
    if not isinstance(source, str):
        raise RestoreRefused(f"{RESTORE_FILE}: source: a string or null is required")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        raise RestoreRefused(f"{RESTORE_FILE}: step: {step!r} given; an integer or null")
    if len(files) > max_files:
        raise RestoreRefused(
            f"{RESTORE_FILE}: {len(files)} files listed; the limit is {max_files} "
            "(TFJOB_MAX_RESTORE_FILES)"
        )
    entries = [
        check_restore_entry(item, f"{RESTORE_FILE}: files[{i}]") for i, item in enumerate(files)
    ]
    paths = [entry.path for entry in entries]
    if len(set(paths)) != len(paths):
        twice = sorted(p for p in set(paths) if paths.count(p) > 1)[0]
        raise RestoreRefused(f"{RESTORE_FILE}: {twice!r} is listed twice")
    check_no_file_dir_clash(paths)
    plan = RestorePlan(source, step, tuple(entries))
    if plan.total_size > max_bytes:
        raise RestoreRefused(
            f"{RESTORE_FILE}: the files add up to {plan.total_size} bytes; the limit is "
            f"{max_bytes} (TFJOB_MAX_RESTORE_BYTES)"
        )
    return plan


def check_restore_entry(item: object, where: str) -> RestoreFile:
    if not isinstance(item, dict):
        raise RestoreRefused(f"{where}: an object is required")
    path = check_relative_path(item.get("path"), f"{where}.path")
    size, url = item.get("size"), item.get("url")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise RestoreRefused(f"{where}.size: {size!r} given; a non-negative integer is required")
    if not isinstance(url, str) or not url:
        raise RestoreRefused(f"{where}.url: a presigned URL is required")
    return RestoreFile(path, size, url)


def restore_checkpoints(plan: RestorePlan, checkpoint_dir: str) -> int:
    """Download every file of the plan into `checkpoint_dir`; returns the bytes written.

    Each file arrives in a private directory beside `checkpoint_dir` and is
    renamed into place once its size is the listed one.
    """
    os.makedirs(checkpoint_dir, exist_ok=True)
    root = os.path.realpath(checkpoint_dir)
    scratch = tempfile.mkdtemp(prefix=".restoring-", dir=os.path.dirname(root))
    total = 0
    try:
        for index, entry in enumerate(plan.files):
            dest = os.path.join(root, *entry.path.split("/"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if os.path.commonpath([root, os.path.realpath(os.path.dirname(dest))]) != root:
                raise RestoreRefused(f"{entry.path}: its directory leads out of CHECKPOINT_DIR")
            partial = os.path.join(scratch, str(index))
            try:
                size = transfer.download_to_file(entry.url, partial, max_bytes=entry.size)
            except transfer.TransferError as exc:
                if exc.code == TOO_LARGE_CODE:
                    raise RestoreRefused(
                        f"{entry.path}: longer than the {entry.size} bytes restore.json lists"
                    ) from None
                raise
            if size != entry.size:
                raise RestoreRefused(
                    f"{entry.path}: {size} bytes downloaded; restore.json lists {entry.size}"
                )
            os.replace(partial, dest)
            total += size
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return total


def describe_restore(plan: RestorePlan, total: int) -> str:
    step = "unknown" if plan.step is None else plan.step
    return (
        f"restored {len(plan.files)} checkpoint files ({total} bytes, step {step}) "
        f"from {plan.source or 'an unnamed source'}"
    )
