"""What the TFJob tab reads from Kubernetes while a run is active, read at most once per 2 s.

Why this exists: every open tab polls the view's JSON, and a run's tab may be
open in many browsers; Kubernetes must not pay for each of them. Reads go
through one `LiveReads` per API server: a pod listing per run and a log tail
per pod (its last LOG_TAIL_LINES lines within LOG_TAIL_MAX_BYTES) are each
kept for `ttl_s` (2 s) and shared by every request in that time; a request
arriving while the same read is in flight waits for it instead of starting
another. The tab's curves go through the same table (per run: 2 s while it is
live, longer once archived, keyed by the archive they were read from).
Entries of runs nobody asks about any more are dropped once the table holds
MAX_ENTRIES.

The readers (`read_pods`, `read_log`) are passed in, so this is tested with
fakes and a fake clock; runview/api.py gives it the Kubernetes connection's.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TypeVar

from operators.replicas import read_replica_status
from runview.run import count_gang_restarts
from tfjob.jsontypes import JsonObject
from tfjob.naming import ANNOTATION_ATTEMPTS, run_selector
from tfjob.tenants.usage import count_pod_gpus

TTL_S = 2.0
MAX_ENTRIES = 512
LOG_TAIL_LINES = 2000  # a live tail's lines: the curves and the log pane read this many

PodReader = Callable[[str, str], list[JsonObject]]  # (namespace, selector) -> pods
LogReader = Callable[[str, str, int], str]  # (namespace, pod, tail lines) -> text
Read = TypeVar("Read")


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    value: object = None
    read_at: float | None = None


class LiveReads:
    """Kubernetes reads shared by every open tab: one per key per `ttl_s`."""

    def __init__(
        self,
        read_pods: PodReader,
        read_log: LogReader,
        ttl_s: float = TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read_pods, self._read_log = read_pods, read_log
        self.ttl_s, self._clock = ttl_s, clock
        self._entries: dict[Hashable, _Entry] = {}
        self._table_lock = threading.Lock()
        self.reads = 0  # Kubernetes calls made, for the tests and the benchmark

    def _entry(self, key: Hashable) -> _Entry:
        with self._table_lock:
            entry = self._entries.get(key)
            if entry is None:
                if len(self._entries) >= MAX_ENTRIES:
                    oldest = min(self._entries, key=lambda k: self._entries[k].read_at or 0.0)
                    del self._entries[oldest]
                entry = self._entries[key] = _Entry()
            return entry

    def share_read(
        self, key: Hashable, read: Callable[[], Read], ttl_s: float | None = None
    ) -> Read:
        """`read()`'s answer for `key`, read at most once per `ttl_s` (this table's unless
        given: the tab's archived curves are kept longer, their key names the archive they
        were read from); the tenants page's cluster-wide listings go through here too."""
        ttl_s = self.ttl_s if ttl_s is None else ttl_s
        entry = self._entry(key)
        with entry.lock:  # a second caller waits for the read in flight and shares it
            now = self._clock()
            if entry.read_at is None or now - entry.read_at >= ttl_s:
                self.reads += 1
                entry.value = read()
                entry.read_at = self._clock()
            return entry.value

    def list_pods(self, namespace: str, run_key: str) -> list[JsonObject]:
        """The run's pods as the API's dicts, at most `ttl_s` old."""
        return self.share_read(
            ("pods", namespace, run_key), lambda: self._read_pods(namespace, run_selector(run_key))
        )

    def read_log_tail(self, namespace: str, pod: str) -> str:
        """The last LOG_TAIL_LINES lines of the pod's training container, at most `ttl_s` old."""
        return self.share_read(
            ("log", namespace, pod), lambda: self._read_log(namespace, pod, LOG_TAIL_LINES)
        )


def count_restarts(pod: JsonObject) -> int:
    """The container's own restarts, plus the gang's restarts before this pod was made (the
    attempts record its pods carry): the same count the tab shows after the run."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_ATTEMPTS)
    try:
        history = json.loads(text) if text else []
    except ValueError:
        history = []  # not ours to judge (operators/restart.py reads it the same way)
    gang = count_gang_restarts(history if isinstance(history, list) else [])
    return gang + sum(int(s.get("restartCount") or 0) for s in statuses)


def describe_live_replicas(pods: list[JsonObject]) -> list[JsonObject]:
    """One row per pod, in the shape of train's `replicas` XCom, plus GPUs and restarts."""
    rows = []
    for pod in pods:
        row = read_replica_status(pod).to_payload()
        row["gpus"] = count_pod_gpus(pod)
        row["restarts"] = count_restarts(pod)
        rows.append(row)
    return rows
