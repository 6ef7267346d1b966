"""The local S3's store seen from outside the server: who holds it, how much it holds, removing it.

`make clean-state` (scripts/clean_state.py) asks these before it deletes buckets and objects:
`find_store_holder` (is a server using the store?), `measure_store` (what would go) and
`remove_store` (under the store's lock, so no server starts on it meanwhile). The layout and
the lock are scripts/s3_store.py's; nothing here writes into a store.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from scripts.s3_store import (  # noqa: E402
    BUCKET_FILE,
    BUCKETS_DIR,
    DATA_NAME,
    LOCK_FILE,
    OBJECTS_DIR,
    RECORD_NAME,
    StoreSize,
    lock_store,
    read_holder_pid,
)


def find_store_holder(root: Path) -> int | None:
    """The pid of the process that holds the store at root (0 when unknown), None when free."""
    try:
        fd = os.open(root / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return read_holder_pid(root) or 0
    finally:
        os.close(fd)  # releases our shared lock, if taken
    return None


def remove_store(root: Path) -> None:
    """Delete the store at root (nothing when there is none); StoreError while a server
    holds it. The lock is held while deleting, so no server starts on it meanwhile."""
    if not root.exists():
        return
    fd = lock_store(root)
    try:
        shutil.rmtree(root)
    finally:
        os.close(fd)


def measure_store(root: Path) -> StoreSize:
    """How many buckets, objects and data bytes the store at root holds (read-only)."""
    buckets = objects = data_bytes = 0
    buckets_dir = root / BUCKETS_DIR
    if not buckets_dir.is_dir():
        return StoreSize(0, 0, 0)
    for bucket in buckets_dir.iterdir():
        if not (bucket / BUCKET_FILE).is_file():
            continue
        buckets += 1
        for path in (bucket / OBJECTS_DIR).iterdir():
            if RECORD_NAME.fullmatch(path.name):
                objects += 1
            elif DATA_NAME.fullmatch(path.name):
                data_bytes += path.stat().st_size
    return StoreSize(buckets, objects, data_bytes)
