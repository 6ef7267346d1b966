"""Reading replica logs: lines of bounded length, the `[role-index]` prefix, the last
lines, the metrics line.

A replica's log is untrusted: one line may be gigabytes long. `LineSplitter`
turns a stream of byte chunks into lines of at most `LOG_LINE_MAX_BYTES`
(a longer line is cut there and ends with `… [line cut at N bytes]`; the
rest of it is dropped up to the next newline). It keeps the pending part of
a line as a list of chunks, so the work per chunk is proportional to the
chunk, never to what came before, and it never holds more than one line's
bound plus one chunk. The trigger's live follower and train's copy of the
logs both count lines through it, so they agree on what a line is.

The bootstrap prints one line `TFJOB_METRICS <json>` when the program wrote
metrics (docs/architecture.md); this module finds it. Pure text in, text out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from operators.settings import LOG_LINE_MAX_BYTES
from runtime.protocol import METRICS_MARKER
from tfjob.jsontypes import JsonObject

TAIL_LINES = 20


def describe_cut_line(max_bytes: int) -> bytes:
    """What ends a line cut at `max_bytes`."""
    return f"\u2026 [line cut at {max_bytes} bytes]".encode()


class LineSplitter:
    """Lines (bytes, without the newline) out of a byte stream fed chunk by chunk.

    A line longer than `max_bytes` is given as its first `max_bytes` bytes plus
    the cut marker as soon as it passes the bound; the rest of it, up to the
    next newline, is dropped. `finish()` gives the last line when the stream
    did not end with a newline.
    """

    def __init__(self, max_bytes: int = LOG_LINE_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._pending: list[bytes] = []  # the current line's parts, at most max_bytes in all
        self._pending_size = 0
        self._dropping = False  # the current line was cut: skip to the next newline
        self.cut_lines = 0  # lines cut so far

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines this chunk completes (or cuts)."""
        parts = chunk.split(b"\n")
        rest = parts.pop()  # after the chunk's last newline: the start of the next line
        lines: list[bytes] = []
        if parts:
            if self._dropping:  # the first newline ends the line that was cut
                self._dropping = False
            else:
                self._add(parts[0], lines)
                if self._dropping:
                    self._dropping = False
                else:
                    lines.append(self._take())
            for line in parts[1:]:  # whole lines within the chunk
                lines.append(line if len(line) <= self.max_bytes else self._cut(line))
        if rest and not self._dropping:
            self._add(rest, lines)
        return lines

    def finish(self) -> list[bytes]:
        """The last line, when the stream ended without a newline after it."""
        if self._pending_size and not self._dropping:
            return [self._take()]
        return []

    def _add(self, part: bytes, lines: list[bytes]) -> None:
        room = self.max_bytes - self._pending_size
        if len(part) <= room:
            if part:
                self._pending.append(part)
                self._pending_size += len(part)
            return
        self._pending.append(part)
        lines.append(self._cut(self._take()))
        self._dropping = True

    def _cut(self, line: bytes) -> bytes:
        self.cut_lines += 1
        return line[: self.max_bytes] + describe_cut_line(self.max_bytes)

    def _take(self) -> bytes:
        line = b"".join(self._pending)
        self._pending.clear()
        self._pending_size = 0
        return line


def split_bounded_lines(data: bytes, max_bytes: int = LOG_LINE_MAX_BYTES) -> list[bytes]:
    """The lines of a whole log, each cut at `max_bytes` as the live follower cuts them."""
    splitter = LineSplitter(max_bytes)
    return splitter.feed(data) + splitter.finish()


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


def extract_metrics(text: str) -> JsonObject | None:
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
    per_replica: Iterable[tuple[str, JsonObject | None]],
) -> JsonObject | None:
    """The metrics of the first replica that has some (the model owner prints them)."""
    for _replica_id, metrics in per_replica:
        if metrics is not None:
            return metrics
    return None
