"""A local copy of a run's TensorBoard event files, kept up to date through Airflow.

Why this exists: `tshell tensorboard` (tshell/runs/tensorboard.py) serves runs
from local folders, and a live run's event files grow while it trains. Each
replica's summaries lie under the run's `tensorboard/<role>-<index>/`
(tfjob/runlayout.py); Airflow lists and serves them with the user's rights on
the run (tshell/runs/files.py), so no S3 credential is needed here either.

Guarantees:
- only what changed is fetched again: a file is downloaded when the listing's
  size or last-modified time differs from what the last sync recorded (the
  files API lists no ETag), or when the local copy is gone or of another size;
- a run whose listed files add up to more than the cap (`MAX_RUN_BYTES`, or
  the caller's) is refused before any byte is downloaded, and a sync stops
  when more than the cap arrives (a live run's files grow after the listing);
- a file appears under its name only once complete (files.write_atomically);
  nothing is written outside the run's folder; files the run no longer has
  are removed, and only files this mirror wrote.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tfjob.runlayout import TENSORBOARD_DIR
from tshell.airflow_client import AirflowNotFoundError, AirflowSession
from tshell.exitcodes import CommandError, ExitCode
from tshell.progress import format_bytes
from tshell.runs.files import RunFile, copy_run_file, list_run_files, write_atomically
from tshell.runs.lookup import RunRef

MAX_RUN_BYTES = 1024**3  # per run; --max-run-bytes changes it
STATE_FILE = ".tshell-sync.json"  # what the last sync copied: path -> [size, last_modified]
EVENT_FILE_MARK = "tfevents"  # TensorBoard reads files whose name holds it
# What TensorBoard's --logdir_spec cannot hold in a run's name (`name:dir,name:dir`).
NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.+=@-]")


@dataclass(frozen=True)
class SyncResult:
    """What one sync of a run did, and where the run's event files are."""

    source: str  # s3://…/tensorboard/, for messages
    downloaded: tuple[str, ...]  # paths relative to the run's tensorboard folder
    kept: int
    removed: int
    total_bytes: int
    event_files: int

    def describe(self) -> str:
        return (
            f"{self.event_files} event files ({format_bytes(self.total_bytes)}) "
            f"from {self.source}: "
            f"{len(self.downloaded)} downloaded, {self.kept} unchanged, {self.removed} removed"
        )


@dataclass(frozen=True)
class RunMirror:
    """One run, the local folder its event files go to, and its name in TensorBoard."""

    ref: RunRef
    folder: Path
    name: str

    @property
    def logdir_spec(self) -> str:
        return f"{self.name}:{self.folder}"


def name_run_for_board(ref: RunRef, qualify: bool = False) -> str:
    """The run's name in TensorBoard: its run id (with its DAG when `qualify`), made safe
    for --logdir_spec (no ':' or ',')."""
    name = f"{ref.dag_id}.{ref.run_id}" if qualify else ref.run_id
    return NAME_UNSAFE.sub("_", name)


def plan_mirrors(refs: list[RunRef], cache_dir: Path) -> list[RunMirror]:
    """Each run's folder `<cache>/<dag>/<run>` and its TensorBoard name, unique among them;
    a run named twice is refused."""
    if len(set(refs)) != len(refs):
        twice = sorted({r.run_id for r in refs if refs.count(r) > 1})
        raise CommandError(
            f"run {', '.join(twice)} is named more than once; name each run once",
            ExitCode.INVALID_REQUEST,
        )
    plain = [name_run_for_board(r) for r in refs]
    mirrors = []
    for ref, name in zip(refs, plain, strict=True):
        if plain.count(name) > 1:
            name = name_run_for_board(ref, qualify=True)
        folder = cache_dir / ref.dag_id / ref.run_id
        if "," in str(folder):
            raise CommandError(
                f"cache folder {str(folder)!r}: TensorBoard's --logdir_spec cannot hold a ','; "
                f"choose another --cache-dir",
                ExitCode.INVALID_REQUEST,
            )
        mirrors.append(RunMirror(ref, folder, name))
    return mirrors


def read_sync_state(folder: Path) -> dict[str, list[object]]:
    try:
        state = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def write_sync_state(folder: Path, state: dict[str, list[object]]) -> None:
    def fill(stream: BinaryIO) -> None:
        stream.write(json.dumps(state, sort_keys=True).encode())

    write_atomically(folder / STATE_FILE, fill)


def list_run_events(
    session: AirflowSession, ref: RunRef, max_bytes: int
) -> tuple[str, tuple[RunFile, ...]]:
    """(the run's tensorboard folder in S3, its files); an empty tuple before the run has
    any. Refuses a listing Airflow cut short, or one over `max_bytes`."""
    try:
        listing = list_run_files(session, ref, TENSORBOARD_DIR)
    except AirflowNotFoundError:  # no run description (yet): no files either
        return f"the run's prefix (Airflow knows none for run {ref.run_id} yet)", ()
    source = f"{listing.run_prefix}{TENSORBOARD_DIR}"
    if listing.truncated:
        raise CommandError(
            f"{source} holds more than {listing.limit} files, more than Airflow lists at "
            f"once; nothing was downloaded",
            ExitCode.FAILED,
        )
    total = sum(f.size for f in listing.files)
    if total > max_bytes:
        raise CommandError(
            f"{source} holds {format_bytes(total)} ({total} bytes), over the "
            f"{format_bytes(max_bytes)} a run may sync (--max-run-bytes {max_bytes}); "
            f"nothing was downloaded",
            ExitCode.FAILED,
        )
    return source, listing.files


def local_path_of(mirror: RunMirror, path: str) -> Path:
    """Where the run's file `path` (relative to the run prefix) goes; refuses one leaving
    the run's folder."""
    root = mirror.folder.resolve()
    destination = (root / path[len(TENSORBOARD_DIR) :]).resolve()
    if not destination.is_relative_to(root) or destination == root:
        raise CommandError(
            f"{path}: refusing a file that leaves {mirror.folder}", ExitCode.AIRFLOW_ERROR
        )
    return destination


def sync_run_events(
    session: AirflowSession, mirror: RunMirror, max_bytes: int = MAX_RUN_BYTES
) -> SyncResult:
    """Bring the run's local folder up to date with its `tensorboard/` in S3 (see module)."""
    source, files = list_run_events(session, mirror.ref, max_bytes)
    mirror.folder.mkdir(parents=True, exist_ok=True)
    previous = read_sync_state(mirror.folder)
    state: dict[str, list[object]] = {}
    downloaded = []
    kept = fetched = 0
    for item in files:
        relative = item.path[len(TENSORBOARD_DIR) :]
        destination = local_path_of(mirror, item.path)
        seen = [item.size, item.last_modified]
        unchanged = (
            previous.get(relative) == seen
            and destination.is_file()
            and destination.stat().st_size == item.size
        )
        if unchanged:
            kept += 1
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)

            def fill(stream: BinaryIO, path: str = item.path) -> None:
                def write(chunk: bytes) -> None:
                    nonlocal fetched
                    fetched += len(chunk)
                    if fetched > max_bytes:  # a file grew after the listing
                        raise CommandError(
                            f"{source}: more than the {format_bytes(max_bytes)} a run may "
                            f"sync arrived (--max-run-bytes {max_bytes}); {path} not kept",
                            ExitCode.FAILED,
                        )
                    stream.write(chunk)

                copy_run_file(session, mirror.ref, path, write)

            write_atomically(destination, fill)
            downloaded.append(relative)
        state[relative] = seen
    removed = 0
    for relative in set(previous) - set(state):
        gone = local_path_of(mirror, TENSORBOARD_DIR + relative)
        if gone.is_file():
            gone.unlink()
            removed += 1
    write_sync_state(mirror.folder, state)
    return SyncResult(
        source,
        tuple(downloaded),
        kept,
        removed,
        sum(f.size for f in files),
        sum(EVENT_FILE_MARK in f.path.rsplit("/", 1)[-1] for f in files),
    )
