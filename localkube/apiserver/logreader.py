"""Reading a container's CRI log file for `pods/log` in bounded memory and time.

A log file can hold max_size bytes (10 MiB by default, localkube/logrotation.py) and is
read on the API server's event loop, so nothing here reads a whole file: `tailLines`
walks back from the end in blocks, `sinceSeconds`/`sinceTime` bisects the file by its
timestamps (lines are written in time order), and the text is rendered and handed on a
block at a time, so the caller can stop at `limitBytes` having read little more.

Only the current file is served, as a kubelet's `ReadLogs` does: rotated files are for
the node's log collectors. A `follow` stream that sees its file rotated drains the old
file and goes on from the start of the new one.
"""

from __future__ import annotations

import asyncio
import datetime
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

BLOCK_BYTES = 64 * 1024
# A CRI line holds at most 16 KiB of text plus its header; a longer run of bytes without
# a newline is not one the kubelet wrote, and is handed on in pieces of this size.
MAX_RAW_LINE_BYTES = 256 * 1024
FOLLOW_POLL_S = 0.05
HEAD_BYTES = 64  # "<RFC3339Nano> <stdout|stderr> <F|P> " and a little more
YIELD_EVERY_LINES = 16  # at most ~256 KiB of a log read between two turns of the event loop


@dataclass
class ReadWindow:
    """What to render of a log: from where, with which options."""

    tail_lines: int | None = None
    since: datetime.datetime | None = None
    timestamps: bool = False


def parse_timestamp(text: str) -> datetime.datetime:
    text = text.rstrip("Z")
    if "." in text:
        head, frac = text.split(".", 1)
        text = f"{head}.{frac[:6]}"
    moment = datetime.datetime.fromisoformat(text)
    return moment.replace(tzinfo=datetime.UTC)


def line_stamp(line: bytes) -> datetime.datetime | None:
    try:
        return parse_timestamp(line.split(b" ", 1)[0].decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        return None


def is_partial(line: bytes) -> bool:
    parts = line.split(b" ", 3)
    return len(parts) >= 3 and parts[2] == b"P"


class Renderer:
    """Turns CRI lines into the text the API returns, honouring timestamps and since."""

    def __init__(self, window: ReadWindow) -> None:
        self.window = window
        self.in_partial = False
        self.skipping = False  # the line being continued was written before `since`

    def render(self, raw: bytes) -> bytes | None:
        parts = raw.rstrip(b"\n").split(b" ", 3)
        if len(parts) < 3:
            return None
        stamp, tag = parts[0], parts[2]
        text = parts[3] if len(parts) > 3 else b""
        if self.in_partial:
            skip = self.skipping
        else:
            moment = None if self.window.since is None else line_stamp(raw)
            skip = moment is not None and moment < self.window.since
        self.skipping = skip
        if skip:
            self.in_partial = tag == b"P"
            return None
        prefix = stamp + b" " if self.window.timestamps and not self.in_partial else b""
        self.in_partial = tag == b"P"
        return prefix + text + (b"" if tag == b"P" else b"\n")


def complete_end(handle: BinaryIO) -> int:
    """The offset just past the file's last newline (a line being written is left out)."""
    end = os.fstat(handle.fileno()).st_size
    pos = end
    while pos > 0:
        size = min(BLOCK_BYTES, pos)
        handle.seek(pos - size)
        found = handle.read(size).rfind(b"\n")
        if found >= 0:
            return pos - size + found + 1
        pos -= size
        if end - pos > MAX_RAW_LINE_BYTES:
            return end
    return 0


def iter_lines_backward(handle: BinaryIO, end: int) -> Iterator[tuple[int, bytes]]:
    """(offset, head) of each line before `end` (a line boundary), the last one first; the
    head is the line's first HEAD_BYTES (its timestamp, stream and tag), not the whole line."""
    pos, carry = end, b""
    while pos > 0:
        size = min(BLOCK_BYTES, pos)
        pos -= size
        handle.seek(pos)
        data = handle.read(size) + carry
        stop = len(data)
        while True:
            newline = data.rfind(b"\n", 0, stop - 1)
            if newline < 0:
                break
            yield pos + newline + 1, data[newline + 1 : min(stop, newline + 1 + HEAD_BYTES)]
            stop = newline + 1
        carry = data[:stop]
        if len(carry) > MAX_RAW_LINE_BYTES:
            return  # not a file the kubelet wrote: start after it
    if carry:
        yield 0, carry[:HEAD_BYTES]


async def find_tail_start(handle: BinaryIO, end: int, lines: int) -> int:
    """Where the last `lines` logical lines begin (P lines join the next line into one).

    Long lines make this read far back (64 CRI lines per MiB-long line): the event loop
    gets a turn every YIELD_EVERY_LINES lines."""
    if lines <= 0:
        return end
    start, count, first = end, 0, True
    for seen, (offset, line) in enumerate(iter_lines_backward(handle, end)):
        if not first and not is_partial(line):
            count += 1
            if count == lines:
                return start
        first, start = False, offset
        if seen % YIELD_EVERY_LINES == YIELD_EVERY_LINES - 1:
            await asyncio.sleep(0)
    return start


def next_line_start(handle: BinaryIO, offset: int, end: int) -> int:
    """The first line start at or after `offset` (`end` when none is before it)."""
    if offset <= 0:
        return 0
    pos = offset - 1
    while pos < end:
        handle.seek(pos)
        data = handle.read(min(BLOCK_BYTES, end - pos))
        found = data.find(b"\n")
        if found >= 0:
            return pos + found + 1
        pos += len(data)
        if not data or pos - offset > MAX_RAW_LINE_BYTES:
            return end
    return end


def read_line_at(handle: BinaryIO, offset: int) -> bytes:
    handle.seek(offset)
    return handle.readline(MAX_RAW_LINE_BYTES)


def find_since_start(handle: BinaryIO, end: int, since: datetime.datetime) -> int:
    """The first line written at or after `since`, found by bisection (lines are in time order)."""
    low, high = 0, end  # low: a line start before `since` (or 0); high: one at/after it (or end)
    while high - low > BLOCK_BYTES:
        probe = next_line_start(handle, (low + high) // 2, high)
        if probe >= high:
            break
        moment = line_stamp(read_line_at(handle, probe))
        if moment is not None and moment < since:
            low = probe
        else:
            high = probe
    offset = low
    while offset < high:
        line = read_line_at(handle, offset)
        if not line:
            break
        moment = line_stamp(line)
        if moment is None or moment >= since:
            return offset
        offset += len(line)
    return high


def iter_blocks(handle: BinaryIO, start: int, end: int) -> Iterator[list[bytes]]:
    """The complete lines between `start` and `end`, a block's worth at a time."""
    handle.seek(start)
    pos, carry = start, b""
    while pos < end:
        data = handle.read(min(BLOCK_BYTES, end - pos))
        if not data:
            break
        pos += len(data)
        lines = (carry + data).split(b"\n")
        carry = lines.pop()
        if len(carry) > MAX_RAW_LINE_BYTES:
            lines.append(carry)
            carry = b""
        yield lines
    if carry:
        yield [carry]


def render_lines(renderer: Renderer, lines: list[bytes]) -> bytes:
    return b"".join(out for out in map(renderer.render, lines) if out is not None)


async def stream_log(
    path: Path, handle: BinaryIO, window: ReadWindow, follow: bool, done: Callable[[], bool]
) -> AsyncIterator[bytes]:
    """The rendered log of `path`, opened as `handle` (which this closes): the window's part of
    what the file holds now, then (following) what is appended, across rotations, until
    `done()` and the file is drained."""
    renderer = Renderer(window)
    try:
        end = complete_end(handle)
        start = 0
        if window.tail_lines is not None:
            start = await find_tail_start(handle, end, window.tail_lines)
        if window.since is not None:
            start = max(start, find_since_start(handle, end, window.since))
        for lines in iter_blocks(handle, start, end):
            text = render_lines(renderer, lines)
            if text:
                yield text
            await asyncio.sleep(0)  # a long read must not hold the event loop
        if not follow:
            return
        handle.seek(end)
        async for text in follow_file(path, handle, renderer, done):
            yield text
    finally:
        handle.close()


def is_rotated(path: Path, handle: BinaryIO) -> bool:
    try:
        return os.stat(path).st_ino != os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
        return False  # between the rename and the new file: not yet


async def follow_file(
    path: Path, handle: BinaryIO, renderer: Renderer, done: Callable[[], bool]
) -> AsyncIterator[bytes]:
    """Lines appended after the handle's position; the handle is replaced on rotation."""
    renderer.window.since = None
    buffer = b""
    try:
        while True:
            finished = done()
            chunk = handle.read(BLOCK_BYTES)
            if chunk:
                lines = (buffer + chunk).split(b"\n")
                buffer = lines.pop()
                if len(buffer) > MAX_RAW_LINE_BYTES:
                    lines.append(buffer)
                    buffer = b""
                text = render_lines(renderer, lines)
                if text:
                    yield text
                await asyncio.sleep(0)
                continue
            if is_rotated(path, handle):
                handle.close()
                handle, buffer = path.open("rb"), b""
                continue
            if finished:
                return
            await asyncio.sleep(FOLLOW_POLL_S)
    finally:
        handle.close()
