"""A dependency-free progress bar on stderr for long work (pack, upload).

Drawn only when stderr is a terminal (or TSHELL_PROGRESS=1), at most ten
times a second, and safe to feed from several threads (boto3's transfer
callbacks arrive from its worker threads).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

REDRAW_INTERVAL_S = 0.1
BAR_WIDTH = 30


def format_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


class ProgressBar:
    def __init__(
        self, label: str, total: int, stream: TextIO | None = None, enabled: bool | None = None
    ) -> None:
        self.label = label
        self.total = max(total, 0)
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = os.environ.get("TSHELL_PROGRESS") == "1" or self.stream.isatty()
        self.enabled = enabled
        self.done = 0
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._lock = threading.Lock()

    def add(self, count: int) -> None:
        with self._lock:
            self.done += count
            self._maybe_draw()

    def set(self, done: int, total: int | None = None) -> None:
        with self._lock:
            self.done = done
            if total is not None and total > 0:
                self.total = total
            self._maybe_draw()

    def _maybe_draw(self) -> None:
        now = time.monotonic()
        if self.enabled and now - self._last_draw >= REDRAW_INTERVAL_S:
            self._last_draw = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        fraction = min(self.done / self.total, 1.0) if self.total else 0.0
        filled = int(fraction * BAR_WIDTH)
        rate = self.done / max(now - self.started, 1e-6)
        self.stream.write(
            f"\r{self.label} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {fraction:6.1%} "
            f"{format_bytes(self.done)}/{format_bytes(self.total)} {format_bytes(rate)}/s "
        )
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            with self._lock:
                self._draw(time.monotonic())
                self.stream.write("\n")
                self.stream.flush()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
