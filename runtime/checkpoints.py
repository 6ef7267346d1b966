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

Sync (the model owner's bootstrap): a daemon thread uploads every interval
each new or changed regular file (size, mtime) to `<prefix>checkpoints/<path>`;
`finish` stops it and makes one last, patient pass. Guarantee: a `checkpoint`
file (TensorFlow's pointer to the latest checkpoint) in S3 names only files
already in S3. TensorFlow writes a checkpoint's files before the pointer and
deletes old ones only after moving it, so each pointer is read before the
other files are listed and uploaded after them from that snapshot: while the
file still holds the snapshot, or when the checkpoint it names (`<p>.index`
and every `<p>.data-*` shard) is uploaded. Otherwise the snapshot may name
files deleted before the listing, and the next pass sends the pointer.
Nothing is ever deleted from S3.

URLs and policies are credentials: no message here holds one.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

if __package__:  # the host imports runtime.checkpoints
    from . import transfer
    from .bundleformat import MAX_NAME_COMPONENT_BYTES, MAX_PATH_BYTES
    from .errors import PodError
    from .protocol import RESTORE_FILE
else:  # a pod: siblings by flat name
    import transfer  # type: ignore[no-redef]
    from bundleformat import MAX_NAME_COMPONENT_BYTES, MAX_PATH_BYTES  # type: ignore[no-redef]
    from errors import PodError  # type: ignore[no-redef]
    from protocol import RESTORE_FILE  # type: ignore[no-redef]

CHECKPOINTS_SUBDIR = "checkpoints"  # of the workspace, and of the run prefix in S3
POINTER_NAME = "checkpoint"
RESTORE_VERSION = 1
MAX_RESTORE_JSON_BYTES = 16 * 1024**2
DEFAULT_MAX_RESTORE_FILES = 10_000
DEFAULT_MAX_RESTORE_BYTES = 20 * 1024**3
TOO_LARGE_CODE = "EntityTooLarge"  # transfer.download_to_file's code for max_bytes
# A periodic pass gives up fast (the next one is an interval away) so that
# stopping the thread never waits long for an unreachable S3.
PERIODIC_RETRIES = 1
PERIODIC_TIMEOUT_S = 30.0
# What a TensorFlow pointer names, and the data shards of a checkpoint (TF1 Saver V2 and TF2).
NAMED_CHECKPOINT_RE = re.compile(rb'^model_checkpoint_path:\s*"([^"]+)"', re.MULTILINE)
DATA_SHARD_RE = re.compile(r"^\.data-(\d+)-of-(\d+)$")

Log = Callable[[str], None]
# send(relative path, local file): upload one file of CHECKPOINT_DIR.
Send = Callable[[str, str], None]


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
    entries = [check_restore_entry(item, f"{RESTORE_FILE}: files[{i}]")
               for i, item in enumerate(files)]
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


@dataclass(frozen=True)
class PassResult:
    files: int = 0
    bytes: int = 0


class PassStopped(Exception):
    """Not an error: the sync is stopping, and a periodic pass ends early, without its
    pointers. Raised and caught inside this module only."""


def walk_regular_files(checkpoint_dir: str) -> list[tuple[str, str, os.stat_result]]:
    """(relative path, path, lstat) of every regular file, links not followed, sorted."""
    found = []
    for dirpath, dirnames, filenames in os.walk(checkpoint_dir):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(info.st_mode):
                relative = os.path.relpath(path, checkpoint_dir).replace(os.sep, "/")
                found.append((relative, path, info))
    return found


def read_pointers(checkpoint_dir: str) -> dict[str, bytes]:
    """The content of every `checkpoint` file, by relative path (one that vanished is left out)."""
    pointers = {}
    for relative, path, _ in walk_regular_files(checkpoint_dir):
        if os.path.basename(path) == POINTER_NAME:
            try:
                with open(path, "rb") as stream:
                    pointers[relative] = stream.read()
            except FileNotFoundError:
                continue
    return pointers


def sync_pass(
    checkpoint_dir: str,
    uploaded: dict[str, object],
    send: Send,
    stopping: Callable[[], bool] = lambda: False,
) -> PassResult:
    """Upload what changed since `uploaded` (updated as files go), pointers last.

    `uploaded` maps a relative path to (size, mtime_ns) for a file, or to the
    content for a pointer. A file that vanishes mid-pass is skipped; any
    other failure ends the pass (its pointers are not sent).
    """
    pointers = read_pointers(checkpoint_dir)
    files = sent_bytes = 0
    for relative, path, info in walk_regular_files(checkpoint_dir):
        if os.path.basename(path) == POINTER_NAME:
            continue
        version = (info.st_size, info.st_mtime_ns)
        if uploaded.get(relative) == version:
            continue
        if stopping():
            raise PassStopped
        try:
            send(relative, path)
        except (OSError, transfer.TransferError):
            if os.path.lexists(path):
                raise
            continue  # TensorFlow deleted an old checkpoint meanwhile
        uploaded[relative] = version
        files, sent_bytes = files + 1, sent_bytes + info.st_size
    still = read_pointers(checkpoint_dir)
    changed = {
        relative: content
        for relative, content in pointers.items()
        if uploaded.get(relative) != content
        and (still.get(relative) == content
             or is_named_checkpoint_uploaded(relative, content, uploaded, checkpoint_dir))
    }
    if changed:
        with tempfile.TemporaryDirectory(prefix="tfjob-checkpoint-") as private:
            snapshot = os.path.join(private, POINTER_NAME)
            for relative, content in sorted(changed.items()):
                if stopping():
                    raise PassStopped
                with open(snapshot, "wb") as stream:
                    stream.write(content)
                send(relative, snapshot)
                uploaded[relative] = content
                files, sent_bytes = files + 1, sent_bytes + len(content)
    return PassResult(files, sent_bytes)


def is_named_checkpoint_uploaded(
    pointer: str, content: bytes, uploaded: dict[str, object], checkpoint_dir: str
) -> bool:
    """Whether the checkpoint a pointer names has its `.index` and every data shard uploaded."""
    match = NAMED_CHECKPOINT_RE.search(content)
    if match is None:
        return False
    named = match.group(1).decode("utf-8", "replace")
    if os.path.isabs(named):  # TF1's Saver writes absolute paths
        named = os.path.relpath(named, os.path.abspath(checkpoint_dir)).replace(os.sep, "/")
    else:
        named = posixpath.join(posixpath.dirname(pointer), named)
    named = posixpath.normpath(named)
    if named == ".." or named.startswith("../") or f"{named}.index" not in uploaded:
        return False
    shards = [DATA_SHARD_RE.match(path[len(named):]) for path in uploaded if path.startswith(named)]
    found = {(int(m.group(1)), int(m.group(2))) for m in shards if m}
    counts = {count for _, count in found}
    return len(counts) == 1 and {index for index, _ in found} == set(range(counts.pop()))


class CheckpointSync:
    """Copies CHECKPOINT_DIR to `<prefix>checkpoints/` every `interval_s` and once at the end.

    `upload.json` is read at each upload: Airflow refreshes the grants while
    the program runs. `start` before the program starts; `finish` once it
    has exited (stop, join, final pass bounded by `final_patience_s`).
    """

    def __init__(
        self,
        checkpoint_dir: str,
        policy_path: str,
        interval_s: float,
        final_patience_s: float,
        log: Log,
    ) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.policy_path = policy_path
        self.interval_s = interval_s
        self.final_patience_s = final_patience_s
        self.log = log
        self.uploaded: dict[str, object] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint-sync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        deadline = time.monotonic() + self.final_patience_s
        self._pass(
            "final checkpoint sync",
            self._send_patiently(deadline),
            lambda: False,
            "S3 keeps what earlier passes uploaded",
        )

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._pass(
                "checkpoint sync", self._send_quickly, self._stop.is_set,
                "the next pass tries again",
            )

    def _pass(self, what: str, send: Send, stopping: Callable[[], bool], after: str) -> None:
        try:
            result = sync_pass(self.checkpoint_dir, self.uploaded, send, stopping)
        except PassStopped:
            return
        except (transfer.TransferError, OSError) as exc:
            self.log(f"{what} failed: {exc}; {after}")
            return
        if result.files:
            self.log(f"{what}: uploaded {result.files} files ({result.bytes} bytes)")

    def _load_policy(self) -> transfer.UploadPolicy:
        return transfer.load_upload_policy(self.policy_path)

    def _key(self, policy: transfer.UploadPolicy, relative: str) -> str:
        return f"{policy.prefix}{CHECKPOINTS_SUBDIR}/{relative}"

    def _send_quickly(self, relative: str, path: str) -> None:
        policy = self._load_policy()
        transfer.post_file(
            policy, self._key(policy, relative), path, PERIODIC_RETRIES, PERIODIC_TIMEOUT_S
        )

    def _send_patiently(self, deadline: float) -> Send:
        def send(relative: str, path: str) -> None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise transfer.TransferError(
                    f"out of time after {self.final_patience_s:g}s (TFJOB_UPLOAD_PATIENCE)"
                )
            key = self._key(self._load_policy(), relative)
            transfer.post_file_patiently(self._load_policy, key, path, left, self.log)

        return send
