"""What a gang restores before its programs start: the pure part of checkpoints.

Why this exists: Airflow decides what the replicas of a gang find in their
`CHECKPOINT_DIR` (a restarted gang: the run's own checkpoints; a first gang
with `warm_start`: those of an earlier run) and hands them one presigned GET
per file in `restore.json` (docs/architecture.md, "The pod protocol"). The
choice of files, the limits, the step a checkpoint holds and the document's
shape are plain data, decided here; listing, signing and the Secret are
operators/restore.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tfjob.errors import TfjobError
from tfjob.jsontypes import JsonObject

POINTER_NAME = "checkpoint"  # TensorFlow's pointer to the latest checkpoint
RESTORE_VERSION = 1
# The pod refuses more than this too (runtime/checkpoints.py reads the same numbers
# from TFJOB_MAX_RESTORE_FILES / TFJOB_MAX_RESTORE_BYTES, defaults equal).
MAX_RESTORE_FILES = 10_000
MAX_RESTORE_BYTES = 20 * 1024**3
MAX_POINTER_BYTES = 64 * 1024

_POINTER_LINE = re.compile(r'^model_checkpoint_path:\s*"(?P<path>[^"]*)"\s*$', re.MULTILINE)
_STEP_SUFFIX = re.compile(r"-(?P<step>\d+)$")


class RestoreTooLarge(TfjobError):
    """The checkpoints to restore are over what a pod may be handed."""


@dataclass(frozen=True)
class CheckpointFile:
    """One object to restore: its path under CHECKPOINT_DIR, size and S3 key."""

    path: str
    size: int
    key: str


def select_checkpoint_files(
    objects: Iterable[tuple[str, int]], prefix: str
) -> list[CheckpointFile]:
    """The files to restore from (key, size) pairs listed under `prefix`, by path.

    Folder markers (keys ending in '/') and keys whose path the pod would refuse
    (empty parts, `.`, `..`) are left out; RestoreTooLarge when the rest is over
    MAX_RESTORE_FILES or MAX_RESTORE_BYTES, naming both.
    """
    files = []
    for key, size in objects:
        if not key.startswith(prefix) or key.endswith("/"):
            continue
        path = key[len(prefix) :]
        if any(part in ("", ".", "..") for part in path.split("/")) or "\\" in path:
            continue
        files.append(CheckpointFile(path, int(size), key))
    total = sum(item.size for item in files)
    if len(files) > MAX_RESTORE_FILES or total > MAX_RESTORE_BYTES:
        raise RestoreTooLarge(
            f"the checkpoints under {prefix} are {len(files)} files, {total} bytes; a gang "
            f"restores at most {MAX_RESTORE_FILES} files and {MAX_RESTORE_BYTES} bytes "
            "(keep fewer checkpoints, e.g. CheckpointManager's max_to_keep)"
        )
    return sorted(files, key=lambda item: item.path)


def find_pointer(files: Sequence[CheckpointFile]) -> CheckpointFile | None:
    """The top-level `checkpoint` pointer among the files, if any."""
    return next((item for item in files if item.path == POINTER_NAME), None)


def parse_checkpoint_step(pointer_text: str) -> int | None:
    """The step of the checkpoint a TensorFlow pointer file names (`ckpt-12` -> 12)."""
    match = _POINTER_LINE.search(pointer_text)
    if not match:
        return None
    name = match.group("path").replace("\\", "/").rsplit("/", 1)[-1]
    suffix = _STEP_SUFFIX.search(name)
    return int(suffix.group("step")) if suffix else None


def build_restore_document(
    source: str | None, step: int | None, files: Sequence[CheckpointFile], urls: Mapping[str, str]
) -> JsonObject:
    """restore.json: each file with its presigned GET (`urls` by key)."""
    return {
        "version": RESTORE_VERSION,
        "source": source,
        "step": step,
        "files": [{"path": item.path, "size": item.size, "url": urls[item.key]} for item in files],
    }


def build_empty_restore() -> JsonObject:
    """restore.json of a gang that starts from scratch."""
    return build_restore_document(None, None, [], {})


__all__ = [
    "MAX_POINTER_BYTES",
    "MAX_RESTORE_BYTES",
    "MAX_RESTORE_FILES",
    "POINTER_NAME",
    "CheckpointFile",
    "RestoreTooLarge",
    "build_empty_restore",
    "build_restore_document",
    "find_pointer",
    "parse_checkpoint_step",
    "select_checkpoint_files",
]
