"""A run's training curves from its TensorBoard event files in S3, cached per run.

Why this exists: replicas sync their TENSORBOARD_DIR to the run's
`tensorboard/<role>-<index>/` folders while they train and at exit
(tfjob/runlayout.py), and the TFJob tab polls the curves every 2 s. Event files
grow to tens of MiB; reading them again on each poll would cost seconds and
memory. So each run's state is kept (`EventCurves`, one per API server):
- per event file its key, ETag and size, and how far it was read (the end of
  its last complete record): an unchanged listing answers the answer built last
  time; a grown file is read from that offset on (an S3 ranged GET), a new file
  from its start, a shrunk or replaced one again from its start;
- bounded: at most MAX_EVENT_FILES objects listed, MAX_EVENT_BYTES_PER_RUN bytes
  read per run over the cache entry's life (the answer then says it was cut),
  a series' points thinned (runview/eventfiles.py), MAX_CURVES curves, and at
  most MAX_CACHED_RUNS runs kept (the least recently asked for goes first);
- the folder listed at most once per TTL_S (2 s) per run, for every open tab
  (`find_recent_answer`; the caller connects to S3 only when there is none).
The objects are read with the run's own S3 connection under its own prefix
(runview/files.py), as the tab's other S3 reads are.

A curve is a replica's folder, or a sub-folder of it (Keras' callback writes
`train/` and `validation/`): `worker-0`, `chief-0/validation`. Its points are
the tab's shape (`{"step": s, "<tag>": value, …}`, one per step), so the page
draws them as it draws `TFJOB_METRIC` points.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runview.eventfiles import (
    EVENT_FILE_MARKER,
    MAX_POINTS,
    EventFileScalars,
    RecordSplitter,
)
from runview.files import RunFile, RunStorage, describe_storage_failure, list_run_files
from runview.logs import check_replica_id
from tfjob.jsontypes import JsonObject

if TYPE_CHECKING:
    from botocore.client import BaseClient

MAX_EVENT_FILES = 1000
MAX_EVENT_BYTES_PER_RUN = 128 * 1024 * 1024
MAX_CACHED_RUNS = 8
MAX_CURVES = 64
READ_CHUNK_BYTES = 1024 * 1024
TTL_S = 2.0  # a run's folder is listed at most this often, whatever the number of open tabs


@dataclass
class EventFileState:
    etag: str = ""
    size: int = -1
    offset: int = 0  # the end of the last complete record read
    broken: bool = False
    scalars: EventFileScalars = field(default_factory=EventFileScalars)


@dataclass
class RunEventState:
    lock: threading.Lock = field(default_factory=threading.Lock)
    files: dict[str, EventFileState] = field(default_factory=dict)
    bytes_read: int = 0
    cut: bool = False
    version: tuple[tuple[str, str, int], ...] | None = None
    answer: JsonObject | None = None
    listed_at: float = -math.inf


class EventCurves:
    """Every run's event-file state, read on demand and kept for the next request."""

    def __init__(
        self,
        max_runs: int = MAX_CACHED_RUNS,
        max_bytes: int = MAX_EVENT_BYTES_PER_RUN,
        ttl_s: float = TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_runs, self.max_bytes = max_runs, max_bytes
        self.ttl_s, self._clock = ttl_s, clock
        self._runs: OrderedDict[Hashable, RunEventState] = OrderedDict()
        self._table_lock = threading.Lock()
        self.bytes_read = 0  # over every run, for the tests and the benchmark

    def _run_state(self, key: Hashable) -> RunEventState:
        with self._table_lock:
            state = self._runs.get(key)
            if state is None:
                state = self._runs[key] = RunEventState()
                while len(self._runs) > self.max_runs:
                    self._runs.popitem(last=False)
            self._runs.move_to_end(key)
            return state

    def find_recent_answer(self, key: Hashable) -> JsonObject | None:
        """The run's answer when its folder was listed less than `ttl_s` ago, else None."""
        with self._table_lock:
            state = self._runs.get(key)
            if state is None or state.answer is None:
                return None
            if self._clock() - state.listed_at >= self.ttl_s:
                return None
            self._runs.move_to_end(key)
            return state.answer

    def read_run(self, key: Hashable, s3: BaseClient, storage: RunStorage) -> JsonObject:
        """{"source": "events", "curves": {curve: points}, "event_files": what was read}."""
        folder = storage.layout.path_of(storage.layout.tensorboard.key)
        listed_at = self._clock()
        listing = list_run_files(s3, storage, folder, limit=MAX_EVENT_FILES)
        files = [f for f in listing.files if name_curve(f.path[len(folder) :]) is not None]
        state = self._run_state(key)
        with state.lock:
            version = tuple((f.path, f.etag, f.size) for f in files)
            if state.answer is not None and version == state.version:
                state.listed_at = max(state.listed_at, listed_at)
                return state.answer
            for run_file in files:
                self._read_new_bytes(s3, storage, state, run_file)
            for gone in set(state.files) - {f.path for f in files}:
                del state.files[gone]
            state.answer = build_answer(state, folder, listing.truncated, self.max_bytes)
            state.version, state.listed_at = version, listed_at
            return state.answer

    def _read_new_bytes(
        self, s3: BaseClient, storage: RunStorage, state: RunEventState, run_file: RunFile
    ) -> None:
        known = state.files.get(run_file.path)
        if known is not None and (known.etag, known.size) == (run_file.etag, run_file.size):
            return
        if known is None or run_file.size < known.offset:
            known = state.files[run_file.path] = EventFileState()
        if known.broken:
            known.etag, known.size = run_file.etag, run_file.size
            return
        wanted = run_file.size - known.offset
        budget = self.max_bytes - state.bytes_read
        if wanted > budget:
            state.cut = True
            wanted = budget
        if wanted <= 0:
            return
        splitter = RecordSplitter(known.offset)
        try:
            answer = s3.get_object(
                Bucket=storage.bucket,
                Key=storage.layout.file(run_file.path).key,
                Range=f"bytes={known.offset}-{known.offset + wanted - 1}",
            )
            for chunk in answer["Body"].iter_chunks(READ_CHUNK_BYTES):
                known.scalars.add_records(splitter.feed(chunk))
        except Exception as error:  # noqa: BLE001 - translated below
            raise describe_storage_failure(storage, run_file.path, error) from None
        state.bytes_read += wanted
        self.bytes_read += wanted
        known.offset, known.broken = splitter.consumed, splitter.broken
        known.etag, known.size = run_file.etag, run_file.size


def name_curve(path: str) -> str | None:
    """`worker-0` for `worker-0/events.out.tfevents…`, `chief-0/validation` for a file in
    its sub-folder; None for anything that is not an event file in a replica's folder."""
    parts = path.split("/")
    if len(parts) < 2 or EVENT_FILE_MARKER not in parts[-1]:
        return None
    try:
        check_replica_id(parts[0])
    except ValueError:
        return None
    return "/".join(parts[:-1])


def build_answer(
    state: RunEventState, folder: str, listing_cut: bool, max_bytes: int
) -> JsonObject:
    """The tab's JSON from every file's series: one point per step per curve."""
    merged: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for path in sorted(state.files):
        curve = name_curve(path[len(folder) :])
        if curve is None:
            continue
        tags = merged.setdefault(curve, {})
        for tag, series in state.files[path].scalars.series.items():
            tags.setdefault(tag, []).extend(series.iter_points())
    curves: JsonObject = {}
    for curve in sorted(merged)[:MAX_CURVES]:
        by_step: dict[int, JsonObject] = {}
        for tag, points in merged[curve].items():
            for step, value in thin_points(sorted(points, key=lambda p: p[0])):
                by_step.setdefault(step, {"step": step})[tag] = value
        if by_step:
            curves[curve] = [by_step[step] for step in sorted(by_step)]
    notes = []
    if listing_cut:
        notes.append(f"only the first {MAX_EVENT_FILES} event files are read")
    if state.cut:
        notes.append(f"event files read up to {max_bytes // (1024 * 1024)} MiB for this run")
    if len(merged) > MAX_CURVES:
        notes.append(f"only the first {MAX_CURVES} of {len(merged)} curves are shown")
    answer: JsonObject = {
        "source": "events",
        "curves": curves,
        "event_files": {"files": len(state.files), "bytes_read": state.bytes_read},
    }
    if notes:
        answer["note"] = "; ".join(notes) + " (open TensorBoard for everything)"
    return answer


def thin_points(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """At most MAX_POINTS of `points`, evenly spread, the last one kept."""
    if len(points) <= MAX_POINTS:
        return points
    stride = -(-len(points) // MAX_POINTS)
    kept = points[::stride]
    if kept[-1] != points[-1]:
        kept[-1] = points[-1]
    return kept
