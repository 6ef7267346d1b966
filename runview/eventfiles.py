"""Scalar curves from TensorBoard event files, read from bytes as they arrive.

Why this exists: TensorFlow programs log with `tf.summary` or Keras' TensorBoard
callback, which write event files (TFRecord framing around `Event` protos), and
the TFJob tab draws those scalars. This module is the pure part: bytes in,
points out, no I/O (runview/eventcurves.py reads the objects from S3).

Reading:
- A record is `uint64 length, uint32 masked CRC-32C of length, data, uint32
  CRC of data` (little endian). Only complete records are decoded, so a file
  still being appended is read up to its last complete record and `consumed`
  says where to go on next time. The length's CRC is checked (a bad one ends the
  file's reading: a garbage length must not be believed); the data's is not
  (a pure-Python CRC over 50 MiB costs seconds): corrupt data fails to decode
  as an `Event` and is skipped. A record over MAX_RECORD_BYTES (an image, a
  graph) is stepped over without being held.
- Scalars come in two kinds: tf1 / `tf.summary.scalar` v1 `simple_value`, and
  v2 tensors (`summary.value[].tensor`) whose tag's metadata names the plugin
  `scalars`. Writers put the metadata on a tag's first event only, so it is
  remembered per tag for the rest of the file.
- Bounded: at most MAX_TAGS tags per file, tag names up to MAX_TAG_CHARS,
  finite numbers only, and MAX_POINTS points per series (when full, every
  other point goes and then only every second one is kept, so a long training
  still shows its whole curve; the newest point is always kept).

`tensorboard`'s protos are imported when the first file is decoded, not when
the plugin loads: every Airflow process loads the plugin, only the API server
reads curves. TensorFlow is never imported (tensorboard.compat.proto is
standalone protobuf).
"""

from __future__ import annotations

import functools
import math
import struct
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.tensor_pb2 import TensorProto

EVENT_FILE_MARKER = "tfevents"  # TensorFlow names event files events.out.tfevents.<time>.<host>…
SCALARS_PLUGIN = "scalars"
MAX_RECORD_BYTES = 16 * 1024 * 1024
MAX_TAGS = 64
MAX_TAG_CHARS = 128
MAX_POINTS = 500
HEADER_BYTES = 12  # the length and its CRC
_HEADER = struct.Struct("<QI")
FOOTER_BYTES = 4  # the data's CRC

# TensorFlow's DataType numbers (tensorboard/compat/proto/types.proto) -> struct format.
_SCALAR_FORMATS = {1: "<f", 2: "<d", 3: "<i", 9: "<q", 19: "<e"}
_VALUE_FIELDS = {1: "float_val", 2: "double_val", 3: "int_val", 9: "int64_val", 19: "half_val"}


def _build_crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE = _build_crc32c_table()


def compute_masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (Castagnoli) of `data`; used on the 8-byte lengths only."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@functools.lru_cache(maxsize=4096)
def compute_length_crc(length: int) -> int:
    """The masked CRC a record's length must carry (lengths repeat: computed once each)."""
    return compute_masked_crc32c(struct.pack("<Q", length))


class RecordSplitter:
    """Complete TFRecord payloads from chunks of one file, fed in order from `start`."""

    def __init__(self, start: int = 0) -> None:
        self.consumed = start  # the file offset just after the last complete record
        self.skipped = 0  # records over MAX_RECORD_BYTES stepped over
        self.broken = False  # a length's CRC failed: nothing after it is read
        self._buffer = bytearray()
        self._skip = 0  # bytes of an oversized record still to step over
        self._skip_end = start  # the offset after that record

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        if self.broken:
            return
        if self._skip:
            step = min(self._skip, len(chunk))
            self._skip -= step
            chunk = chunk[step:]
            if not self._skip:
                self.consumed = self._skip_end
        self._buffer += chunk
        buffer, at = self._buffer, 0
        while len(buffer) - at >= HEADER_BYTES:
            length, crc = _HEADER.unpack_from(buffer, at)
            if compute_length_crc(length) != crc:
                self.broken = True
                break
            end = at + HEADER_BYTES + length + FOOTER_BYTES
            if length > MAX_RECORD_BYTES:
                self.skipped += 1
                self._skip_end = self.consumed + (end - at)
                available = len(buffer) - at
                if available >= end - at:
                    self.consumed, at = self._skip_end, end
                    continue
                self._skip, at = end - at - available, len(buffer)
                break
            if len(buffer) < end:
                break
            yield bytes(buffer[at + HEADER_BYTES : end - FOOTER_BYTES])
            self.consumed += end - at
            at = end
        del self._buffer[:at]


@dataclass(slots=True)
class Series:
    """One tag's points, thinned to at most MAX_POINTS as it grows."""

    steps: array = field(default_factory=lambda: array("q"))
    values: array = field(default_factory=lambda: array("d"))
    stride: int = 1
    seen: int = 0
    last: tuple[int, float] | None = None

    def add(self, step: int, value: float) -> None:
        seen, self.seen, self.last = self.seen, self.seen + 1, (step, value)
        if seen % self.stride:
            return
        self.steps.append(step)
        self.values.append(value)
        if len(self.steps) > MAX_POINTS:
            self.steps, self.values = self.steps[::2], self.values[::2]
            self.stride *= 2

    def iter_points(self) -> Iterator[tuple[int, float]]:
        yield from zip(self.steps, self.values, strict=True)
        if self.last is not None and (not self.steps or self.steps[-1] != self.last[0]):
            yield self.last


@dataclass
class EventFileScalars:
    """What one event file reported so far: its series per tag and the tags' plugins."""

    series: dict[str, Series] = field(default_factory=dict)
    plugins: dict[str, str] = field(default_factory=dict)  # tag -> plugin, from first metadata
    undecodable: int = 0
    tags_dropped: int = 0

    def add_records(self, records: Iterable[bytes]) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        for data in records:
            event = Event()
            try:
                event.ParseFromString(data)
            except Exception:  # noqa: BLE001 - protobuf's DecodeError: a corrupt record
                self.undecodable += 1
                continue
            self.add_event(event)

    def add_event(self, event: Event) -> None:
        if not event.HasField("summary"):
            return
        step = event.step
        for value in event.summary.value:
            tag = value.tag
            if value.HasField("metadata") and tag not in self.plugins:
                self.remember_plugin(tag, value.metadata.plugin_data.plugin_name)
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                number: float | None = value.simple_value
            elif kind == "tensor" and self.plugins.get(tag) == SCALARS_PLUGIN:
                number = read_scalar_tensor(value.tensor)
            else:
                continue
            if number is None or not math.isfinite(number):
                continue
            series = self.series.get(tag)
            if series is None:
                series = self.add_series(tag)
            if series is not None:
                series.add(step, number)

    def remember_plugin(self, tag: str, plugin: str) -> None:
        if plugin and len(self.plugins) < 4 * MAX_TAGS:
            self.plugins[tag] = plugin

    def add_series(self, tag: str) -> Series | None:
        if len(tag) > MAX_TAG_CHARS or len(self.series) >= MAX_TAGS:
            self.tags_dropped += 1
            return None
        series = self.series[tag] = Series()
        return series


def read_scalar_tensor(tensor: TensorProto) -> float | None:
    """The number a one-element tensor holds (float, double, half, int32, int64), else None."""
    if any(dim.size != 1 for dim in tensor.tensor_shape.dim):
        return None
    layout = _SCALAR_FORMATS.get(tensor.dtype)
    if layout is None:
        return None
    if tensor.tensor_content:
        if len(tensor.tensor_content) != struct.calcsize(layout):
            return None
        return float(struct.unpack(layout, tensor.tensor_content)[0])
    values = getattr(tensor, _VALUE_FIELDS[tensor.dtype])
    if len(values) != 1:
        return None
    if tensor.dtype == 19:  # half_val holds the 16 bits in an int
        return float(struct.unpack("<e", struct.pack("<H", values[0] & 0xFFFF))[0])
    return float(values[0])
