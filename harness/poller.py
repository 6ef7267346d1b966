"""A thread that keeps calling one action and times each call: how end-to-end tests watch a
shared part (a health route, a log route) stay responsive while a test floods it."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable


class Poller(threading.Thread):
    """Calls `action` until stopped, `pause` seconds apart, recording how long each call
    took and what failed."""

    def __init__(self, action: Callable[[], object], pause: float) -> None:
        super().__init__(daemon=True)
        self.action, self.pause = action, pause
        self.durations: list[float] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self.action()
            except Exception as error:  # noqa: BLE001 - reported by the test
                self.errors.append(repr(error))
            self.durations.append(time.monotonic() - started)
            self.stop.wait(self.pause)

    def p95(self) -> float:
        return statistics.quantiles(self.durations, n=20)[-1]
