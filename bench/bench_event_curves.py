#!/usr/bin/env python3
"""The TFJob tab's curves from a run's event files: first read, cached reads, memory.

    .venv/bin/python bench/bench_event_curves.py [--mib 50] [--repeat 20] --out FILE

Issue 31's target: with 50 MiB of event files under one run's `tensorboard/`
folders, the tab's curves JSON answers within 200 ms once the run was read
(cached), and the plugin's process grows by less than 64 MiB. Steps:

1. A child process writes the event files with TensorFlow (the measuring
   process never imports it): `chief-0/train/` as Keras' callback and
   `tf.summary` write them (v2 scalar tensors, a histogram every 100 steps),
   and three workers' folders of tf1-style `simple_value` events framed by
   `tf.io.TFRecordWriter`; `--mib` in all.
2. They go into a local S3 server (harness/s3_fixtures.py, a free port) under
   a run's prefix (tfjob/runlayout.py).
3. This process reads them as the /curves route does after its 2 s sharing
   (runview/eventcurves.py `EventCurves.read_run`, with the JSON encoding of the
   answer): once (the first read), then `--repeat` times unchanged (cached: one
   listing, nothing read; and as many bare listings of the folder, for
   comparison), then after one file grew by 1 MiB (only those bytes
   read). RSS (VmRSS) and its peak (VmHWM) before and after, from /proc.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

import boto3  # noqa: E402

from bench.stats import summarise  # noqa: E402
from harness.s3_fixtures import start_s3_server, stop_s3_server  # noqa: E402
from runview.eventcurves import EventCurves  # noqa: E402
from runview.files import RunStorage  # noqa: E402
from tfjob.runlayout import RunLayout  # noqa: E402

MIB = 1024 * 1024
DAG, RUN = "tfjob__bench", "manual__1"
TARGET_CACHED_MS = 200.0
TARGET_RSS_MIB = 64.0
WORKERS = ("worker-0", "worker-1", "worker-2")
TAGS = ("loss", "accuracy", "learning_rate", "grad_norm")
GROWTH_FILE = "growth.tfrecords"


def write_event_files(folder: Path, mib: float) -> None:
    """Event files of `mib` MiB in all under `folder`/<replica>/ (runs in a child: TensorFlow)."""
    import tensorflow as tf  # only here: the measuring process must not hold TensorFlow
    from tensorboard.compat.proto.event_pb2 import Event

    share = int(mib * MIB / (len(WORKERS) + 1))
    chief = folder / "chief-0" / "train"
    writer = tf.summary.create_file_writer(str(chief), max_queue=10_000, flush_millis=60_000)
    step = 0
    with writer.as_default():
        while step % 500 or sum(f.stat().st_size for f in chief.glob("*")) < share:
            for tag in TAGS:
                tf.summary.scalar(tag, 1.0 / (step + 1), step=step)
            if step % 100 == 0:
                tf.summary.histogram("weights", tf.random.normal([1000]), step=step)
            step += 1
            if step % 500 == 0:
                writer.flush()
    writer.close()
    for replica in WORKERS:
        (folder / replica).mkdir(parents=True)
        path = folder / replica / f"events.out.tfevents.1765100000.{replica}.1"
        with tf.io.TFRecordWriter(str(path)) as records:
            records.write(Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString())
            step = 0
            while step % 1000 or path.stat().st_size < share:
                records.write(build_worker_event(Event, step))
                step += 1
                if step % 1000 == 0:
                    records.flush()
    # What the last worker appends next: 1 MiB of whole records (the "grown" read).
    with tf.io.TFRecordWriter(str(folder.parent / GROWTH_FILE)) as records:
        while step % 1000 or (folder.parent / GROWTH_FILE).stat().st_size < MIB:
            records.write(build_worker_event(Event, step))
            step += 1
            if step % 1000 == 0:
                records.flush()


def build_worker_event(event_class: Any, step: int) -> bytes:
    event = event_class(wall_time=1765100000.0 + step, step=step)
    for tag in TAGS:
        event.summary.value.add(tag=tag, simple_value=1.0 / (step + 1))
    return event.SerializeToString()


def list_folder(s3: Any, bucket: str, prefix: str) -> float:
    """ms of one bare listing of the folder: what a cached read cannot do without."""
    begun = time.perf_counter()
    s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1000)
    return (time.perf_counter() - begun) * 1000


def read_memory() -> dict[str, float]:
    """VmRSS and VmHWM of this process in MiB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) / 1024
    return fields


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    files = workdir / "events"
    started = time.monotonic()
    subprocess.run(
        [sys.executable, __file__, "write", "--mib", str(args.mib), "--dir", str(files)],
        check=True,
        cwd=REPO,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    write_s = time.monotonic() - started
    server, process = start_s3_server(workdir)
    try:
        s3 = boto3.client(
            "s3",
            endpoint_url=server.endpoint,
            aws_access_key_id=server.access_key,
            aws_secret_access_key=server.secret_key,
            region_name=server.region,
        )
        layout = RunLayout.for_run(f"s3://{server.bucket}/bench", DAG, RUN)
        storage = RunStorage(layout=layout, aws_conn_id="bench")
        paths = sorted(p for p in files.rglob("*") if p.is_file())
        for path in paths:
            replica, _, rest = path.relative_to(files).as_posix().partition("/")
            key = layout.replica_tensorboard(*replica.rsplit("-", 1)).child(rest).key
            s3.upload_file(str(path), server.bucket, key)
        total = sum(p.stat().st_size for p in paths)
        curves = EventCurves(ttl_s=0.0)  # every read lists: the route's path after its 2 s

        def read_once() -> tuple[float, dict[str, Any]]:
            begun = time.perf_counter()
            answer = curves.read_run((DAG, RUN), s3, storage)
            json.dumps(answer)
            return (time.perf_counter() - begun) * 1000, answer

        s3.list_objects_v2(Bucket=server.bucket, MaxKeys=1)  # the client's connection is made
        before = read_memory()
        first_ms, answer = read_once()
        after_first = read_memory()
        cached = [read_once()[0] for _ in range(args.repeat)]
        listing = [list_folder(s3, server.bucket, layout.tensorboard.key) for _ in cached]
        grown = paths[-1]
        extra = (workdir / GROWTH_FILE).read_bytes()
        replica, _, rest = grown.relative_to(files).as_posix().partition("/")
        key = layout.replica_tensorboard(*replica.rsplit("-", 1)).child(rest).key
        s3.put_object(Bucket=server.bucket, Key=key, Body=grown.read_bytes() + extra)
        read_before = curves.bytes_read
        grown_ms, grown_answer = read_once()
        after = read_memory()
    finally:
        stop_s3_server(process)
    points = {curve: len(p) for curve, p in answer["curves"].items()}
    print(
        f"event-curves: {total / MIB:.1f} MiB in {len(paths)} files; first read "
        f"{first_ms:.0f} ms, cached {summarise(cached).format('ms', 1)}, grown by 1 MiB "
        f"{grown_ms:.0f} ms; RSS +{after['VmRSS'] - before['VmRSS']:.1f} MiB "
        f"(peak +{after['VmHWM'] - before['VmRSS']:.1f})",
        flush=True,
    )
    return {
        "mib": total / MIB,
        "files": len(paths),
        "write_s": write_s,
        "first_read_ms": first_ms,
        "cached_ms": summarise(cached).as_dict(),
        "listing_ms": summarise(listing).as_dict(),
        "grown_read_ms": grown_ms,
        "grown_bytes_read": curves.bytes_read - read_before,
        "bytes_read": curves.bytes_read,
        "curves": points,
        "tags": sorted({k for p in grown_answer["curves"]["chief-0/train"] for k in p} - {"step"}),
        "rss_before_mib": before["VmRSS"],
        "rss_growth_mib": after["VmRSS"] - before["VmRSS"],
        "rss_growth_first_read_mib": after_first["VmRSS"] - before["VmRSS"],
        "peak_growth_mib": after["VmHWM"] - max(before["VmHWM"], before["VmRSS"]),
        "repeat": args.repeat,
        "load": os.getloadavg()[0],
        "target_cached_ms": TARGET_CACHED_MS,
        "target_rss_mib": TARGET_RSS_MIB,
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=("measure", "write"), default="measure")
    parser.add_argument("--mib", type=float, default=50.0)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--dir", type=Path, help="write: where the event files go")
    parser.add_argument("--out", type=Path)
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if args.command == "write":
        write_event_files(args.dir, args.mib)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-event-curves-") as workdir:
        result = measure(args, Path(workdir))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
