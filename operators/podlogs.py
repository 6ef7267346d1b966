"""Reading replica logs: the `[role-index]` prefix, the last lines, the metrics line.

The bootstrap prints one line `TFJOB_METRICS <json>` when the program wrote
metrics (docs/architecture.md); this module finds it. Pure text in, text out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from runtime.protocol import METRICS_MARKER

TAIL_LINES = 20


def split_log_lines(text: str) -> list[str]:
    """The lines of a log as the live stream counts them: split on newline only."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def decode_log_line(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r")


def prefix_lines(replica_id: str, text: str, skip: int = 0) -> list[str]:
    """Every line of `text` as `[role-index] line`, leaving out the first `skip` lines."""
    return [f"[{replica_id}] {line.rstrip(chr(13))}" for line in split_log_lines(text)[skip:]]


def tail_lines(text: str, count: int = TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-count:])


def extract_metrics(text: str) -> dict[str, Any] | None:
    """The last `TFJOB_METRICS <json>` object in a log; None when there is none or not JSON."""
    found = None
    for line in text.splitlines():
        at = line.find(METRICS_MARKER)
        if at < 0:
            continue
        try:
            value = json.loads(line[at + len(METRICS_MARKER) :])
        except ValueError:
            continue
        if isinstance(value, dict):
            found = value
    return found


def merge_metrics(
    per_replica: Iterable[tuple[str, dict[str, Any] | None]],
) -> dict[str, Any] | None:
    """The metrics of the first replica that has some (the model owner prints them)."""
    for _replica_id, metrics in per_replica:
        if metrics is not None:
            return metrics
    return None
