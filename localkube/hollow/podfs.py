"""The simulated filesystem of a hollow pod: a directory under the pod's state dir.

Exec into a hollow pod (shell.py) reads and writes here, so a file delivered into the pod is
really there and a later `cat` returns it. Paths are resolved as in the container (absolute, or
relative to the working directory) and can never leave the pod's root: `..` stops at `/`, and
nothing here creates symbolic links; files are opened without following one anyway.
"""

from __future__ import annotations

import os
import posixpath
import shutil

from localkube.errors import LocalkubeError

ROOTFS = "rootfs"
MAX_FILE_BYTES = 4 * 1024 * 1024
PRIVATE_DIR_MODE = 0o700


class PodFsError(LocalkubeError, OSError):
    """A path cannot be used; the message reads like the shell's own."""


def build_root(pod_dir: str) -> str:
    return os.path.join(pod_dir, ROOTFS)


def create_root(pod_dir: str, directories: list[str]) -> str:
    """Make the pod's root with `directories` (mount paths, /tmp) in it; returns the root."""
    root = build_root(pod_dir)
    os.makedirs(root, mode=PRIVATE_DIR_MODE, exist_ok=True)
    for directory in ["/tmp", *directories]:
        os.makedirs(host_path(root, "/", directory), mode=PRIVATE_DIR_MODE, exist_ok=True)
    return root


def host_path(root: str, cwd: str, path: str) -> str:
    """Where the container's `path` lies on the host."""
    inside = posixpath.normpath(posixpath.join("/", cwd, path))
    return os.path.join(root, inside.lstrip("/")) if inside != "/" else root


def read_file(root: str, cwd: str, path: str) -> bytes:
    target = host_path(root, cwd, path)
    if os.path.isdir(target):
        raise PodFsError(f"{path}: Is a directory")
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        raise PodFsError(f"{path}: No such file or directory") from None
    with os.fdopen(fd, "rb") as f:
        return f.read(MAX_FILE_BYTES + 1)[:MAX_FILE_BYTES]


def write_file(root: str, cwd: str, path: str, data: bytes, append: bool = False) -> None:
    target = host_path(root, cwd, path)
    if os.path.isdir(target):
        raise PodFsError(f"cannot create {path}: Is a directory")
    size = os.path.getsize(target) if append and os.path.isfile(target) else 0
    if size + len(data) > MAX_FILE_BYTES:
        raise PodFsError(
            f"cannot write {path}: File too large (a simulated pod's files hold "
            f"at most {MAX_FILE_BYTES} bytes)"
        )
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(target, flags, 0o600)
    except OSError:
        raise PodFsError(f"cannot create {path}: Directory nonexistent") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def move(root: str, cwd: str, source: str, destination: str) -> None:
    src, dst = host_path(root, cwd, source), host_path(root, cwd, destination)
    if not os.path.lexists(src):
        raise PodFsError(f"cannot stat '{source}': No such file or directory")
    if os.path.isdir(dst):
        dst = os.path.join(dst, os.path.basename(src))
    try:
        os.replace(src, dst)
    except OSError as error:
        raise PodFsError(f"cannot move '{source}' to '{destination}': {error.strerror}") from None


def remove(root: str, cwd: str, path: str, recursive: bool) -> None:
    target = host_path(root, cwd, path)
    if target == root:
        raise PodFsError("it is dangerous to operate recursively on '/'")
    if os.path.isdir(target) and not os.path.islink(target):
        if not recursive:
            raise PodFsError(f"cannot remove '{path}': Is a directory")
        shutil.rmtree(target)
    elif os.path.lexists(target):
        os.unlink(target)
    else:
        raise PodFsError(f"cannot remove '{path}': No such file or directory")


def make_directory(root: str, cwd: str, path: str, parents: bool) -> None:
    target = host_path(root, cwd, path)
    try:
        if parents:
            os.makedirs(target, mode=PRIVATE_DIR_MODE, exist_ok=True)
        else:
            os.mkdir(target, PRIVATE_DIR_MODE)
    except OSError as error:
        raise PodFsError(f"cannot create directory '{path}': {error.strerror}") from None


def list_directory(root: str, cwd: str, path: str) -> list[str]:
    target = host_path(root, cwd, path)
    if os.path.isdir(target):
        return sorted(os.listdir(target))
    if os.path.lexists(target):
        return [path]
    raise PodFsError(f"cannot access '{path}': No such file or directory")


def check_path(root: str, cwd: str, flag: str, path: str) -> bool:
    target = host_path(root, cwd, path)
    return {
        "-e": os.path.exists,
        "-f": os.path.isfile,
        "-d": os.path.isdir,
        "-s": lambda p: os.path.isfile(p) and os.path.getsize(p) > 0,
    }[flag](target)
