"""Files written so that a crash cannot lose or tear them: what scripts/s3_store.py builds on.

Why this exists: a file is durable only once its bytes are fsync'ed *and* the
directory entry naming it is: a rename or a new file can vanish at a crash
until its directory is fsync'ed too. These helpers do both, every time:

- `write_new_file`: a file that did not exist, fsync'ed before it returns;
- `replace_file`: atomically swap a file's content (temporary file, fsync,
  rename, fsync of the directory), so a reader sees the old or the new
  content, never a part;
- `make_dir`: `mkdir -p` with mode 0700, each new directory made durable.

Files are 0600 and directories 0700 from their creation. Temporary files
start with `TMP_PREFIX`; whoever owns the directory removes leftovers of a
crash (scripts/s3_store.py does when it opens).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

TMP_PREFIX = ".tmp-"
DIR_MODE = 0o700
FILE_MODE = 0o600


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dir(path: Path) -> None:
    """mkdir -p with mode 0700; each directory made is made durable (its parent fsync'ed)."""
    if path.is_dir():
        return
    for each in [*reversed(path.parents), path]:
        if not each.is_dir():
            each.mkdir(mode=DIR_MODE, exist_ok=True)
            fsync_dir(each.parent)


def write_new_file(path: Path, chunks: Iterable[bytes]) -> tuple[int, str]:
    """Write chunks to a file that must not exist yet, fsync it; its size and SHA-256."""
    digest = hashlib.sha256()
    size = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        with os.fdopen(fd, "wb", closefd=False) as out:
            for chunk in chunks:
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
            out.flush()
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)
    return size, digest.hexdigest()


def replace_file(path: Path, content: bytes) -> None:
    """Atomically and durably: write a temporary file, fsync, rename over path, fsync the dir."""
    tmp = path.with_name(f"{TMP_PREFIX}{secrets.token_hex(8)}")
    write_new_file(tmp, [content])
    os.replace(tmp, path)
    fsync_dir(path.parent)
