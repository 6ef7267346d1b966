"""A replica printing one huge line must not stall the triggerer (issue 27 item 2).

The trigger's live follower shares the triggerer's event loop with every other
run's trigger. These tests feed it a 32 MiB line without a newline, the way
aiohttp hands over bytes it has already buffered (the iterator never suspends),
and check that each chunk costs the loop little, that another coroutine keeps
ticking, and that the lines around the cut line come out whole.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from operators import triggers
from operators.podlogs import LineSplitter, describe_cut_line, split_bounded_lines
from operators.settings import LIVE_LOG_MAX_BYTES, LOG_LINE_MAX_BYTES
from operators.triggers import TrainingTrigger

MIB = 1024 * 1024
CUT = describe_cut_line(LOG_LINE_MAX_BYTES).decode()


class LineRecorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class BufferedLog:
    """A `follow` response whose bytes are all buffered: `iter_any` never suspends."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.content = self
        self.costs: list[float] = []  # seconds the consumer took per chunk

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info) -> None:
        return None

    async def iter_any(self):
        for chunk in self.chunks:
            handed = time.perf_counter()
            yield chunk
            self.costs.append(time.perf_counter() - handed)


class FollowCore:
    def __init__(self, response: BufferedLog) -> None:
        self.response = response
        self.asked: dict = {}

    async def read_namespaced_pod_log(self, pod, namespace, **kwargs):
        self.asked = kwargs
        return self.response


def make_trigger() -> tuple[TrainingTrigger, LineRecorder]:
    trigger = TrainingTrigger(
        namespace="ns",
        selector="tfjob.io/run=job-1234abcd",
        expected_pods=["job-1234abcd-chief-0"],
        deciding=["chief-0"],
        deadline=time.time() + 60,
        kubernetes_conn_id="kubernetes_default",
    )
    recorder = LineRecorder()
    logger = logging.getLogger(f"test.follow.{id(trigger)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(recorder)
    trigger._log = logger
    return trigger, recorder


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[at : at + size] for at in range(0, len(data), size)]


async def follow_while_ticking(
    trigger: TrainingTrigger, core: FollowCore
) -> tuple[dict, list[float]]:
    """Follow the log while another coroutine ticks; (streamed, the gaps between ticks)."""
    streamed: dict[str, int] = {}
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)  # the ticker runs before the follower starts
    await trigger._follow_log(core, "job-1234abcd-chief-0", "chief-0", streamed)
    done.set()
    await ticker
    return streamed, gaps


@pytest.mark.parametrize("chunk_size", [16 * 1024, 64 * 1024])
def test_a_32_mib_line_costs_the_loop_little_and_another_trigger_keeps_ticking(
    chunk_size, monkeypatch
):
    monkeypatch.setattr(triggers, "LIVE_LOG_MAX_BYTES", 64 * MIB)  # follow all 32 MiB of it
    line = b"x" * (32 * MIB)
    response = BufferedLog(chunked(b"step 1\n" + line + b"\nstep 2\n", chunk_size))
    trigger, recorder = make_trigger()
    core = FollowCore(response)

    started = time.perf_counter()
    streamed, gaps = asyncio.run(follow_while_ticking(trigger, core))
    took = time.perf_counter() - started
    longest_gap = max(gaps)

    # A quadratic follower re-reads all it holds per chunk and, on a buffered
    # stream, never lets the ticker run: seconds, not milliseconds.
    assert max(response.costs) < 0.1, f"the slowest chunk cost the loop {max(response.costs):.3f}s"
    assert longest_gap < 0.1, f"another coroutine waited {longest_gap:.3f}s for a tick"
    assert took < 10, f"following 32 MiB took {took:.1f}s"
    # The follower gives the loop a turn after every chunk, buffered or not.
    assert len(gaps) >= len(response.chunks)
    assert streamed == {"chief-0": 3}
    assert recorder.messages == [
        "[chief-0] step 1",
        "[chief-0] " + "x" * LOG_LINE_MAX_BYTES + CUT,
        "[chief-0] step 2",
    ]


def test_the_follower_asks_kubernetes_for_a_bounded_log():
    trigger, _recorder = make_trigger()
    core = FollowCore(BufferedLog([b"a\n"]))
    asyncio.run(follow_while_ticking(trigger, core))
    assert core.asked["follow"] is True
    assert core.asked["limit_bytes"] == LIVE_LOG_MAX_BYTES


def test_the_follower_stops_at_the_live_bound_even_when_the_server_ignores_it(monkeypatch):
    monkeypatch.setattr(triggers, "LIVE_LOG_MAX_BYTES", 10)
    trigger, recorder = make_trigger()
    core = FollowCore(BufferedLog([b"0123\n", b"456789ab\n", b"never read\n"]))
    streamed, _gaps = asyncio.run(follow_while_ticking(trigger, core))
    assert streamed == {"chief-0": 2}
    assert recorder.messages[:2] == ["[chief-0] 0123", "[chief-0] 45678"]
    assert "live log stopped after 10 bytes" in recorder.messages[-1]


def test_a_line_cut_in_one_chunk_drops_its_rest_up_to_the_newline():
    splitter = LineSplitter(max_bytes=4)
    assert splitter.feed(b"ok\nabcdefgh") == [b"ok", b"abcd" + describe_cut_line(4)]
    assert splitter.feed(b"ijkl") == []  # still the cut line: dropped
    assert splitter.feed(b"mn\nnext\nla") == [b"next"]
    assert splitter.finish() == [b"la"]
    assert splitter.cut_lines == 1


def test_a_line_of_exactly_the_bound_is_kept_whole_and_one_byte_more_is_cut():
    assert split_bounded_lines(b"abcd\nabcde\n", max_bytes=4) == [
        b"abcd",
        b"abcd" + describe_cut_line(4),
    ]


def test_a_line_split_over_many_chunks_comes_out_whole():
    splitter = LineSplitter(max_bytes=100)
    lines = []
    for byte in b"hello world\nbye":
        lines += splitter.feed(bytes([byte]))
    assert lines == [b"hello world"]
    assert splitter.finish() == [b"bye"]


def test_the_splitter_never_holds_more_than_one_line_bound():
    splitter = LineSplitter(max_bytes=1024)
    for _ in range(1000):
        splitter.feed(b"y" * 4096)
    assert splitter._pending_size <= 1024
    assert splitter.finish() == []  # the cut line was given when it passed the bound


def test_the_trigger_event_carries_counts_not_log_text():
    event = triggers.TrainingEvent(
        triggers.TrainingState.SUCCEEDED, deciding=("chief-0",), streamed={"chief-0": 3}
    )
    assert event.to_payload()["streamed"] == {"chief-0": 3}
    assert "x" * 100 not in repr(event.to_payload())
