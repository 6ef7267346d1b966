"""How big a container's log may grow: a kubelet's containerLogMaxSize and containerLogMaxFiles.

`localkube up --container-log-max-size 10Mi --container-log-max-files 5` records them in
DIR/localkube.json; each kubelet reads them from there and hands them to every container's
shim (kubelet/logwriter.py rotates the log). A container's log then takes at most about
max_size × max_files of disk (the current file plus max_files - 1 rotated ones).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_MAX_SIZE = "10Mi"
DEFAULT_MAX_FILES = 5
MIN_MAX_BYTES = 64 * 1024  # a few CRI lines (each at most 16 KiB of text)
MIN_MAX_FILES = 2  # as the kubelet: the file being written and one rotated
SIZE_PATTERN = re.compile(r"^([0-9]+)(Ki|Mi|Gi|K|M|G)?$")
UNITS = {None: 1, "K": 1000, "M": 1000**2, "G": 1000**3, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}


@dataclass(frozen=True)
class LogRotation:
    max_bytes: int
    max_files: int

    def to_json(self) -> dict:
        return {"max_bytes": self.max_bytes, "max_files": self.max_files}

    def shim_fields(self) -> dict:
        """What a shim's spec carries of it."""
        return {"log_max_bytes": self.max_bytes, "log_max_files": self.max_files}


def parse_log_size(text: str) -> int:
    """Bytes of a Kubernetes-style size (`10Mi`, `512Ki`, `1G`, `65536`); ValueError otherwise."""
    match = SIZE_PATTERN.match(str(text).strip())
    if not match:
        raise ValueError(
            f"container log max size {text!r} given; a size such as 10Mi, 512Ki or 1G is allowed"
        )
    size = int(match.group(1)) * UNITS[match.group(2)]
    if size < MIN_MAX_BYTES:
        raise ValueError(
            f"container log max size {text!r} given; at least {MIN_MAX_BYTES // 1024}Ki is allowed"
        )
    return size


def build_log_rotation(max_size: str, max_files: int) -> LogRotation:
    """The rotation of `up`'s options; ValueError naming the option when one is not allowed."""
    if max_files < MIN_MAX_FILES:
        raise ValueError(
            f"container log max files {max_files} given; at least {MIN_MAX_FILES} is allowed"
        )
    return LogRotation(parse_log_size(max_size), max_files)


DEFAULT_LOG_ROTATION = build_log_rotation(DEFAULT_MAX_SIZE, DEFAULT_MAX_FILES)


def log_rotation_of_cluster(info: dict) -> LogRotation:
    """The rotation recorded in localkube.json (the default when none is, or it is broken)."""
    entry = info.get("container_logs") or {}
    try:
        return LogRotation(
            max(int(entry["max_bytes"]), MIN_MAX_BYTES),
            max(int(entry["max_files"]), MIN_MAX_FILES),
        )
    except (KeyError, TypeError, ValueError):
        return DEFAULT_LOG_ROTATION
