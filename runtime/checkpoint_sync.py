"""Folders copied to S3 while the program runs: the checkpoint sync and the summaries sync.

One machinery (`FolderSync`) for both: a daemon thread uploads every interval
each new or changed regular file (size, mtime) of a local folder to a key
folder its grant names; `finish` stops it and makes one last, patient pass. A
file that grew (TensorFlow appends to its event files) is sent again whole;
an unchanged one never. Nothing is ever deleted from S3.

- Checkpoints (the model owner): CHECKPOINT_DIR to `<prefix>checkpoints/`.
  Guarantee: a `checkpoint` file (TensorFlow's pointer to the latest
  checkpoint) in S3 names only files already in S3. TensorFlow writes a
  checkpoint's files before the pointer and deletes old ones only after
  moving it, so each pointer is read before the other files are listed and
  uploaded after them from that snapshot: while the file still holds the
  snapshot, or when the checkpoint it names (`<p>.index` and every
  `<p>.data-*` shard) is uploaded. Otherwise the snapshot may name files
  deleted before the listing, and the next pass sends the pointer.
- Summaries (every replica): TENSORBOARD_DIR to the one folder its
  `tensorboard.json` grants (`tensorboard/<role>-<index>/` of the run), no
  pointer rule.

URLs and policies are credentials: no message here holds one. Restoring before the
program starts is checkpoints.py's.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from runtime import transfer
from runtime.checkpoints import CHECKPOINTS_SUBDIR, POINTER_NAME

# A periodic pass gives up fast (the next one is an interval away) so that
# stopping the thread never waits long for an unreachable S3.
PERIODIC_RETRIES = 1
PERIODIC_TIMEOUT_S = 30.0
# What a TensorFlow pointer names, and the data shards of a checkpoint (TF1 Saver V2 and TF2).
NAMED_CHECKPOINT_RE = re.compile(rb'^model_checkpoint_path:\s*"([^"]+)"', re.MULTILINE)
DATA_SHARD_RE = re.compile(r"^\.data-(\d+)-of-(\d+)$")

Log = Callable[[str], None]
# send(relative path, local file): upload one file of the synced folder.
Send = Callable[[str, str], None]
# The key folder (ending in '/') a grant lets the sync write, from the grant itself.
KeyFolder = Callable[[transfer.UploadPolicy], str]


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
    pointers_last: bool = True,
) -> PassResult:
    """Upload what changed since `uploaded` (updated as files go), pointers last.

    `uploaded` maps a relative path to (size, mtime_ns) for a file, or to the
    content for a pointer. A file that vanishes mid-pass is skipped; any
    other failure ends the pass (its pointers are not sent). Without
    `pointers_last` (summaries) a `checkpoint` file is a file like any other.
    """
    pointers = read_pointers(checkpoint_dir) if pointers_last else {}
    files = sent_bytes = 0
    for relative, path, info in walk_regular_files(checkpoint_dir):
        if pointers_last and os.path.basename(path) == POINTER_NAME:
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
    if not pointers:
        return PassResult(files, sent_bytes)
    still = read_pointers(checkpoint_dir)
    changed = {
        relative: content
        for relative, content in pointers.items()
        if uploaded.get(relative) != content
        and (
            still.get(relative) == content
            or is_named_checkpoint_uploaded(relative, content, uploaded, checkpoint_dir)
        )
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
    shards = [
        DATA_SHARD_RE.match(path[len(named) :]) for path in uploaded if path.startswith(named)
    ]
    found = {(int(m.group(1)), int(m.group(2))) for m in shards if m}
    counts = {count for _, count in found}
    return len(counts) == 1 and {index for index, _ in found} == set(range(counts.pop()))


def locate_checkpoint_folder(policy: transfer.UploadPolicy) -> str:
    """`<prefix>checkpoints/`: where the model owner's checkpoints go (upload.json)."""
    return f"{policy.prefix}{CHECKPOINTS_SUBDIR}/"


def locate_granted_folder(policy: transfer.UploadPolicy) -> str:
    """The one key folder a single-folder grant names (tensorboard.json: the replica's own)."""
    folders = [name for name in policy.grants if name.endswith("/")]
    if len(policy.grants) != 1 or len(folders) != 1:
        raise transfer.TransferError(
            f"a single-folder grant must grant exactly one folder; it grants {len(policy.grants)} "
            "names"
        )
    return policy.prefix + folders[0]


@dataclass(frozen=True)
class SyncTarget:
    """What a FolderSync copies: its name in the log, where its keys go, the pointer rule."""

    name: str
    key_folder: KeyFolder
    pointers_last: bool


CHECKPOINTS = SyncTarget("checkpoint sync", locate_checkpoint_folder, pointers_last=True)
SUMMARIES = SyncTarget("tensorboard sync", locate_granted_folder, pointers_last=False)


class FolderSync:
    """Copies a folder to its grant's key folder every `interval_s` and once at the end.

    The grant (`policy_path`) is read at each upload: Airflow refreshes the
    grants while the program runs. `start` before the program starts;
    `finish` once it has exited (stop, join, final pass bounded by
    `final_patience_s`).
    """

    def __init__(
        self,
        target: SyncTarget,
        local_dir: str,
        policy_path: str,
        interval_s: float,
        final_patience_s: float,
        log: Log,
    ) -> None:
        self.target = target
        self.local_dir = local_dir
        self.policy_path = policy_path
        self.interval_s = interval_s
        self.final_patience_s = final_patience_s
        self.log = log
        self.uploaded: dict[str, object] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=target.name.replace(" ", "-"), daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        deadline = time.monotonic() + self.final_patience_s
        self._pass(
            f"final {self.target.name}",
            self._send_patiently(deadline),
            lambda: False,
            "S3 keeps what earlier passes uploaded",
        )

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._pass(
                self.target.name,
                self._send_quickly,
                self._stop.is_set,
                "the next pass tries again",
            )

    def _pass(self, what: str, send: Send, stopping: Callable[[], bool], after: str) -> None:
        try:
            result = sync_pass(
                self.local_dir, self.uploaded, send, stopping, self.target.pointers_last
            )
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
        return self.target.key_folder(policy) + relative

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
