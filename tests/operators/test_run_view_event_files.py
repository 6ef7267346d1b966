"""Scalars read from TensorBoard event files' bytes (runview/eventfiles.py): both scalar kinds,
a file cut inside a record, oversized and corrupt records, and the bounds. The files are framed
by tensorboard's own RecordWriter (its CRCs), so the framing is checked against theirs.
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys

import pytest
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from tensorboard.summary.writer.record_writer import RecordWriter

from harness.event_files import DT_DOUBLE, DT_HALF, DT_INT64, frame, simple_event, tensor_event
from runview.eventfiles import (
    MAX_POINTS,
    MAX_RECORD_BYTES,
    MAX_TAG_CHARS,
    MAX_TAGS,
    EventFileScalars,
    RecordSplitter,
    compute_masked_crc32c,
    read_scalar_tensor,
)


def read_scalars(data: bytes, chunk: int = 7) -> tuple[EventFileScalars, RecordSplitter]:
    scalars, splitter = EventFileScalars(), RecordSplitter()
    for at in range(0, len(data), chunk):
        scalars.add_records(splitter.feed(data[at : at + chunk]))
    return scalars, splitter


def points(scalars: EventFileScalars, tag: str) -> list[tuple[int, float]]:
    return list(scalars.series[tag].iter_points())


def test_the_length_crc_is_tensorflows_masked_crc32c():
    for data in (b"", b"\x00" * 8, struct.pack("<Q", 123456), b"tfevents"):
        assert compute_masked_crc32c(data) == masked_crc32c(data)


def test_simple_value_scalars_of_tf1_are_read_per_tag_by_step():
    data = frame(
        *(simple_event(step, loss=1.0 / (step + 1), accuracy=step / 10) for step in range(5))
    )
    scalars, splitter = read_scalars(data)
    assert points(scalars, "loss") == [(s, pytest.approx(1.0 / (s + 1))) for s in range(5)]
    assert [v for _, v in points(scalars, "accuracy")] == pytest.approx([0, 0.1, 0.2, 0.3, 0.4])
    assert splitter.consumed == len(data) and not splitter.broken


def test_v2_tensor_scalars_are_read_with_the_metadata_on_the_first_event_only():
    data = frame(
        tensor_event(0, "epoch_loss", 0.5),
        tensor_event(1, "epoch_loss", 0.25, metadata=False),
        tensor_event(2, "epoch_loss", 0.125, metadata=False, dtype=DT_DOUBLE),
        tensor_event(3, "lr", 0.5, dtype=DT_HALF),
        tensor_event(4, "images_seen", 640, dtype=DT_INT64),
    )
    scalars, _ = read_scalars(data)
    assert points(scalars, "epoch_loss") == [(0, 0.5), (1, 0.25), (2, 0.125)]
    assert points(scalars, "lr") == [(3, 0.5)]
    assert points(scalars, "images_seen") == [(4, 640.0)]


def test_tensors_of_other_plugins_and_non_scalar_tensors_are_not_curves():
    histogram = tensor_event(0, "weights", 1.0)
    histogram.summary.value[0].metadata.plugin_data.plugin_name = "histograms"
    vector = tensor_event(0, "pair", 1.0)
    vector.summary.value[0].tensor.tensor_shape.dim.add(size=2)
    vector.summary.value[0].tensor.tensor_content = struct.pack("<ff", 1.0, 2.0)
    scalars, _ = read_scalars(frame(histogram, vector, simple_event(0, loss=float("nan"))))
    assert scalars.series == {}
    assert read_scalar_tensor(vector.summary.value[0].tensor) is None


def test_a_file_cut_inside_its_last_record_is_read_up_to_the_last_complete_one():
    whole = frame(*(simple_event(step, loss=float(step)) for step in range(4)))
    last_record = len(frame(simple_event(3, loss=3.0))) - len(frame())
    for cut in (1, 5, 12, last_record - 1):
        scalars, splitter = read_scalars(whole[:-cut])
        assert [s for s, _ in points(scalars, "loss")] == [0, 1, 2]
        assert splitter.consumed == len(whole) - last_record and not splitter.broken
    # The file grows: reading on from `consumed` gives the rest, nothing twice.
    rest = RecordSplitter(splitter.consumed)
    scalars.add_records(rest.feed(whole[splitter.consumed :]))
    assert [s for s, _ in points(scalars, "loss")] == [0, 1, 2, 3]
    assert rest.consumed == len(whole)


def test_a_record_over_the_size_limit_is_stepped_over_without_being_held():
    payload = Event(step=1, file_version="x" * (MAX_RECORD_BYTES + 1)).SerializeToString()
    header = struct.pack("<Q", len(payload))
    # The data's CRC is not checked (nor computed here: pure Python takes seconds for 16 MiB).
    big = header + struct.pack("<I", masked_crc32c(header)) + payload + b"\0\0\0\0"
    data = frame(simple_event(0, loss=1.0)) + big + frame(simple_event(2, loss=0.5))
    scalars, splitter = read_scalars(data, chunk=1024 * 1024)
    assert points(scalars, "loss") == [(0, 1.0), (2, 0.5)]
    assert splitter.skipped == 1 and splitter.consumed == len(data)
    assert len(splitter._buffer) < 2 * 1024 * 1024


def test_a_bad_length_crc_ends_the_files_reading_and_corrupt_data_is_skipped():
    good = frame(simple_event(0, loss=1.0))
    garbage = struct.pack("<Q", 2**40) + b"\x00\x00\x00\x00" + b"junk"
    scalars, splitter = read_scalars(good + garbage + frame(simple_event(9, loss=9.0)))
    assert splitter.broken and points(scalars, "loss") == [(0, 1.0)]
    buffer = io.BytesIO()
    RecordWriter(buffer).write(b"\xff\xff\xff not an event")
    scalars, splitter = read_scalars(good + buffer.getvalue() + frame(simple_event(9, loss=9.0)))
    assert scalars.undecodable == 1 and [s for s, _ in points(scalars, "loss")] == [0, 9]


def test_tags_are_bounded_in_number_and_length():
    many = simple_event(0, **{f"t{i}": 1.0 for i in range(MAX_TAGS + 5)})
    long_tag = simple_event(1, **{"x" * (MAX_TAG_CHARS + 1): 1.0})
    scalars, _ = read_scalars(frame(many, long_tag), chunk=4096)
    assert len(scalars.series) == MAX_TAGS and scalars.tags_dropped == 6


def test_a_long_series_keeps_at_most_max_points_spread_over_the_whole_training():
    data = frame(*(simple_event(step, loss=float(step)) for step in range(10 * MAX_POINTS + 3)))
    scalars, _ = read_scalars(data, chunk=65536)
    kept = points(scalars, "loss")
    assert len(kept) <= MAX_POINTS + 1
    assert kept[0][0] == 0 and kept[-1][0] == 10 * MAX_POINTS + 2
    gaps = {b[0] - a[0] for a, b in zip(kept[:-2], kept[1:-1], strict=True)}
    assert len(gaps) == 1  # evenly spread


def test_reading_event_files_imports_no_tensorflow():
    data = frame(simple_event(0, loss=1.0))
    code = (
        "import sys\n"
        "import plugins.tfjob_plugin, runview.api\n"
        "from runview.eventfiles import EventFileScalars, RecordSplitter\n"
        "from runview.eventcurves import EventCurves\n"
        f"s = EventFileScalars(); s.add_records(RecordSplitter().feed({data!r}))\n"
        "assert s.series['loss'].last == (0, 1.0)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
