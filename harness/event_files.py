"""TensorBoard event files made without TensorFlow, for the tests of the TFJob tab's curves.

Events are tensorboard's protos; `frame` wraps them in TFRecord framing with tensorboard's
own RecordWriter (its pure-Python CRCs: fine for the small files of tests, seconds per MiB).
"""

from __future__ import annotations

import io
import struct

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.summary.writer.record_writer import RecordWriter

DT_FLOAT, DT_DOUBLE, DT_INT64, DT_HALF = 1, 2, 9, 19  # TensorFlow's DataType numbers


def simple_event(step: int, **values: float) -> Event:
    event = Event(step=step, wall_time=1.0)
    for tag, number in values.items():
        event.summary.value.add(tag=tag, simple_value=number)
    return event


def tensor_event(
    step: int, tag: str, number: float, *, metadata: bool = True, dtype: int = DT_FLOAT
) -> Event:
    """A v2 `tf.summary.scalar` event: a scalar tensor, the plugin named on the first only."""
    event = Event(step=step, wall_time=1.0)
    value = event.summary.value.add(tag=tag)
    if metadata:
        value.metadata.plugin_data.plugin_name = "scalars"
    value.tensor.dtype = dtype
    layout = {DT_FLOAT: "<f", DT_DOUBLE: "<d", DT_INT64: "<q", DT_HALF: "<e"}[dtype]
    value.tensor.tensor_content = struct.pack(layout, number)
    return event


def frame(*events: Event) -> bytes:
    buffer = io.BytesIO()
    writer = RecordWriter(buffer)
    writer.write(Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString())
    for event in events:
        writer.write(event.SerializeToString())
    return buffer.getvalue()
