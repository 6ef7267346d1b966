"""Container log files: rotated by size as they are written, read from the end for pods/log."""

import asyncio
import datetime
import os
import random
from pathlib import Path

import pytest

from localkube.apiserver.logreader import (
    FOLLOW_POLL_S,
    ReadWindow,
    Renderer,
    find_since_start,
    find_tail_start,
    parse_timestamp,
    stream_log,
)
from localkube.kubelet.logwriter import (
    PARTIAL_LINE_LIMIT,
    LogWriter,
    list_rotated,
    remove_earlier_runs,
)
from localkube.logrotation import build_log_rotation, log_rotation_of_cluster

KIB = 1024
LINE = b"n%05d " + b"x" * 240 + b"\n"
MIB = 1024 * KIB


class CountingReader:
    """A binary file that counts the bytes read through it."""

    def __init__(self, path: Path) -> None:
        self.handle = path.open("rb")
        self.bytes_read = 0

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.bytes_read += len(data)
        return data

    def readline(self, size: int = -1) -> bytes:
        data = self.handle.readline(size)
        self.bytes_read += len(data)
        return data

    def seek(self, offset: int) -> int:
        return self.handle.seek(offset)

    def fileno(self) -> int:
        return self.handle.fileno()


def write_cri_log(path: Path, count: int, start: datetime.datetime, width: int = 100) -> None:
    """`count` lines, one per second from `start`, every seventh cut into P + F parts."""
    with path.open("wb") as handle:
        for index in range(count):
            moment = start + datetime.timedelta(seconds=index)
            stamp = moment.strftime("%Y-%m-%dT%H:%M:%S.%f").encode() + b"000Z"
            text = b"line %d " % index + b"x" * width
            if index % 7 == 3:
                handle.write(b"%s stdout P %s\n" % (stamp, text[:10]))
                text = text[10:]
            handle.write(b"%s stdout F %s\n" % (stamp, text))


def render_whole(path: Path, window: ReadWindow) -> bytes:
    """What pods/log answered before it read from the end: everything rendered, then tailed."""
    renderer = Renderer(window)
    out = [renderer.render(line) for line in path.read_bytes().splitlines(keepends=True)]
    text = [o for o in out if o is not None]
    if window.tail_lines is None:
        return b"".join(text)
    lines, current = [], b""
    for chunk in text:
        current += chunk
        if chunk.endswith(b"\n"):
            lines.append(current)
            current = b""
    if current:
        lines.append(current)
    return b"".join(lines[-window.tail_lines :] if window.tail_lines > 0 else [])


async def collect(path: Path, window: ReadWindow, follow=False, done=lambda: True) -> bytes:
    stream = stream_log(path, path.open("rb"), window, follow, done)
    return b"".join([chunk async for chunk in stream])


def test_the_writer_rotates_before_the_file_passes_its_cap(tmp_path):
    path = tmp_path / "0.log"
    writer = LogWriter(str(path), max_bytes=256 * KIB, max_files=3)
    for _ in range(100):  # ~130 MiB of CRI lines: 64 KiB reads of short lines, as from `yes`
        writer.feed("stdout", b"y\n" * (32 * KIB))
    rotated = list_rotated(str(path))
    assert len(rotated) == 2
    for name in [str(path), *rotated]:
        assert os.path.getsize(name) <= 256 * KIB
    assert path.read_bytes().startswith(b"20") and path.read_bytes().endswith(b" stdout F y\n")


def test_the_writer_cuts_long_lines_into_partial_ones(tmp_path):
    path = tmp_path / "0.log"
    writer = LogWriter(str(path), max_bytes=64 * KIB, max_files=2)
    writer.feed("stdout", b"z" * (3 * PARTIAL_LINE_LIMIT + 1) + b"\n")
    tags = [line.split(b" ")[2] for line in path.read_bytes().splitlines()]
    assert tags == [b"P", b"P", b"P", b"F"] or len(list_rotated(str(path))) == 1


def test_the_writer_keeps_relaying_when_the_disk_refuses(tmp_path):
    path = tmp_path / "0.log"
    writer = LogWriter(str(path))
    writer.file.close()
    writer.file = open(os.devnull, "rb", buffering=0)  # every write fails
    writer.feed("stdout", b"lost\n")
    assert writer.dropped_bytes > 0


def test_a_new_run_keeps_only_the_previous_runs_log(tmp_path):
    for name in ("0.log", "0.log.20261207-010101.000000001", "1.log", "2.log", "notes"):
        (tmp_path / name).write_text("x")
    remove_earlier_runs(str(tmp_path / "3.log"), 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2.log", "notes"]


def test_rotation_settings_come_from_localkube_json_with_defaults():
    assert log_rotation_of_cluster({}).to_json() == {"max_bytes": 10 * MIB, "max_files": 5}
    recorded = {"container_logs": build_log_rotation("512Ki", 3).to_json()}
    assert log_rotation_of_cluster(recorded).shim_fields() == {
        "log_max_bytes": 512 * KIB,
        "log_max_files": 3,
    }
    with pytest.raises(ValueError, match="at least 2 is allowed"):
        build_log_rotation("10Mi", 1)
    with pytest.raises(ValueError, match="a size such as 10Mi"):
        build_log_rotation("ten", 5)


@pytest.mark.parametrize("tail", [None, 0, 1, 3, 50, 5000])
@pytest.mark.parametrize("since_index", [None, 0, 500, 1999, 3000])
@pytest.mark.parametrize("timestamps", [False, True])
def test_reading_from_the_end_renders_what_reading_everything_did(
    tmp_path, tail, since_index, timestamps
):
    start = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
    path = tmp_path / "0.log"
    write_cri_log(path, 2000, start)
    since = None if since_index is None else start + datetime.timedelta(seconds=since_index)
    window = ReadWindow(tail, since, timestamps)
    expected = render_whole(path, ReadWindow(tail, since, timestamps))
    if since is not None and tail is not None:  # tail first, then since, as a kubelet
        expected = render_whole(path, ReadWindow(None, since, timestamps))
        wanted = render_whole(path, ReadWindow(tail, None, timestamps)).count(b"\n")
        kept = expected.splitlines(keepends=True)
        expected = b"".join(kept[-wanted:] if wanted else [])
    assert asyncio.run(collect(path, window)) == expected


def test_tail_and_since_read_a_few_blocks_of_a_large_file(tmp_path):
    start = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
    path = tmp_path / "0.log"
    write_cri_log(path, 60_000, start, width=150)  # ~12 MiB
    end = path.stat().st_size
    reader = CountingReader(path)
    offset = asyncio.run(find_tail_start(reader, end, 100))
    assert reader.bytes_read < 256 * KIB
    assert path.read_bytes()[offset:].count(b" F ") == 100
    reader = CountingReader(path)
    moment = start + datetime.timedelta(seconds=59_990)
    offset = find_since_start(reader, end, moment)
    assert reader.bytes_read < 2 * MIB
    first = path.read_bytes()[offset:].split(b" ", 1)[0].decode()
    assert parse_timestamp(first) == moment


def test_following_goes_on_in_the_new_file_after_a_rotation(tmp_path):
    path = tmp_path / "0.log"
    writer = LogWriter(str(path), max_bytes=64 * KIB, max_files=5)
    writer.feed("stdout", b"before\n")
    wrote = asyncio.Event()

    async def scenario() -> bytes:
        async def write_more() -> None:
            await asyncio.sleep(0.1)
            for index in range(2000):  # ~500 KiB: several rotations, at most one per poll
                writer.feed("stdout", LINE % index)
                if index % 100 == 99:
                    await asyncio.sleep(FOLLOW_POLL_S * 1.5)
            wrote.set()

        task = asyncio.ensure_future(write_more())
        text = await collect(path, ReadWindow(), follow=True, done=wrote.is_set)
        await task
        return text

    text = asyncio.run(scenario())
    assert len(list_rotated(str(path))) == 4
    assert text == b"before\n" + b"".join(LINE % i for i in range(2000))


def test_a_random_file_is_tailed_as_rendering_everything_tails_it(tmp_path):
    chooser = random.Random(27)
    start = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
    path = tmp_path / "0.log"
    with path.open("wb") as handle:
        for index in range(1500):
            stamp = (start + datetime.timedelta(milliseconds=index)).strftime(
                "%Y-%m-%dT%H:%M:%S.%f"
            )
            tag = chooser.choice([b"P", b"F", b"F"])
            text = b"w" * chooser.choice([0, 1, 40, 20_000])
            handle.write(b"%s000Z stderr %s %s\n" % (stamp.encode(), tag, text))
    for tail in (1, 2, 10, 400):
        window = ReadWindow(tail, None, False)
        assert asyncio.run(collect(path, window)) == render_whole(path, window)
