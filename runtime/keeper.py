"""Second container of the model-owning pod: `python3 -m runtime.keeper [list | read ...]`.

The model lives in the pod's emptyDir workspace, which exists only as long as
the pod does, and a pod's containers can be exec'd into only while they run.
When the main container `tensorflow` exits 74 (its model upload failed: S3
down, a grant that expired), the model would be lost with the pod. This
container (same image, workspace mounted read-only, no credentials) keeps
running, so Airflow's `archive` can still read the model through exec and
upload it with its own S3 client (docs/architecture.md, "The pod protocol").

- no arguments: sleep until SIGTERM or SIGINT, then exit 0 (teardown deletes
  the pod with a grace period; as pid 1 it must handle the signals itself);
- `list`: JSON `{"version": 1, "files": [{"path", "size", "sha256"}, ...]}` of
  every file under `model/` and of `metrics.json` when present; paths are
  relative to the workspace (`model/<relative path>`, `metrics.json`);
- `read PATH OFFSET LENGTH`: base64 of that byte range of one such file
  (LENGTH at most MAX_READ_BYTES); anything outside `model/` and
  `metrics.json` (absolute paths, `..`, symbolic links that lead out) is
  refused with exit code 77.

Standard library only; shipped to pods as the `runtime` package, like every runtime/*.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import stat
import sys

from runtime.errors import PodError
from runtime.protocol import (
    ENV_WORKSPACE,
    EXIT_KEEPER_NOT_FOUND,
    EXIT_KEEPER_REFUSED,
    EXIT_USAGE,
    WORKSPACE_DIR,
)

LIST_VERSION = 1
MODEL_DIR = "model"
METRICS_FILE = "metrics.json"
MAX_READ_BYTES = 16 * 1024 * 1024
HASH_CHUNK_BYTES = 1024 * 1024
USAGE = "usage: keeper.py [list | read PATH OFFSET LENGTH]"


class PathRefused(PodError):
    """A path the keeper does not serve (exit EXIT_KEEPER_REFUSED)."""


def log(message: str) -> None:
    print(f"tfjob-keeper: {message}", file=sys.stderr, flush=True)


def workspace_dir() -> str:
    return os.path.realpath(os.environ.get(ENV_WORKSPACE, WORKSPACE_DIR))


def model_root(workspace: str) -> str:
    root = os.path.join(workspace, MODEL_DIR)
    if os.path.islink(root):  # a model/ that leads elsewhere would open everything there
        raise PathRefused(f"{root} is a symbolic link; only a real directory is served")
    return root


def resolve_readable(workspace: str, path: str) -> str:
    """The real path of workspace-relative `path`, if it is one the keeper serves."""
    if not path or "\x00" in path or os.path.isabs(path):
        raise PathRefused(f"{path!r}: a path relative to the workspace is required")
    if os.path.normpath(path) == METRICS_FILE:
        full = os.path.join(workspace, METRICS_FILE)
        if os.path.islink(full):
            raise PathRefused(f"{path}: a symbolic link; only a regular file is served")
        return full
    root = model_root(workspace)
    full = os.path.realpath(os.path.join(workspace, path))
    if not full.startswith(root + os.sep):
        raise PathRefused(f"{path}: outside {MODEL_DIR}/ and {METRICS_FILE}")
    return full


def is_regular_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def describe(workspace: str, relative: str) -> dict[str, object]:
    full = resolve_readable(workspace, relative)
    return {"path": relative, "size": os.stat(full).st_size, "sha256": sha256_of(full)}


def list_outputs(workspace: str) -> dict[str, object]:
    """Every file the keeper serves, model files in path order, then metrics.json."""
    files = []
    root = model_root(workspace)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            relative = os.path.relpath(os.path.join(dirpath, name), workspace)
            relative = relative.replace(os.sep, "/")
            try:
                full = resolve_readable(workspace, relative)
            except PathRefused as exc:
                log(f"not listed: {exc}")
                continue
            if is_regular_file(full):
                files.append(describe(workspace, relative))
    metrics = os.path.join(workspace, METRICS_FILE)
    if is_regular_file(metrics) and not os.path.islink(metrics):
        files.append(describe(workspace, METRICS_FILE))
    return {"version": LIST_VERSION, "files": files}


def read_range(workspace: str, path: str, offset: int, length: int) -> bytes:
    if offset < 0 or not 0 <= length <= MAX_READ_BYTES:
        raise ValueError(
            f"OFFSET {offset}, LENGTH {length} given; OFFSET >= 0 and 0 <= LENGTH <= "
            f"{MAX_READ_BYTES} are allowed"
        )
    full = resolve_readable(workspace, path)
    if not is_regular_file(full):
        raise FileNotFoundError(f"{path}: no such file")
    with open(full, "rb") as stream:
        stream.seek(offset)
        return stream.read(length)


def keep() -> int:
    def stop(signum: int, _frame: object) -> None:
        # print() is not reentrant; os.write is safe in a handler.
        os.write(2, f"tfjob-keeper: {signal.Signals(signum).name}; exiting\n".encode())
        raise SystemExit(0)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    log(f"keeping {workspace_dir()}/{MODEL_DIR} readable until SIGTERM")
    while True:
        signal.pause()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        return keep()
    workspace = workspace_dir()
    try:
        if args == ["list"]:
            print(json.dumps(list_outputs(workspace), sort_keys=True))
            return 0
        if len(args) == 4 and args[0] == "read":
            try:
                offset, length = int(args[2]), int(args[3])
            except ValueError:
                log(f"OFFSET and LENGTH must be integers; {USAGE}")
                return EXIT_USAGE
            data = read_range(workspace, args[1], offset, length)
            sys.stdout.write(base64.b64encode(data).decode("ascii"))
            sys.stdout.flush()
            return 0
    except PathRefused as exc:
        log(f"refused: {exc}")
        return EXIT_KEEPER_REFUSED
    except FileNotFoundError as exc:
        log(str(exc))
        return EXIT_KEEPER_NOT_FOUND
    except ValueError as exc:
        log(str(exc))
        return EXIT_USAGE
    log(USAGE)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
