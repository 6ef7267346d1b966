#!/usr/bin/env python3
"""Pack + upload of a large bundle: tshell's path against `tar czf` + a plain boto3 `upload_file`.

    .venv/bin/python bench/bench_pack_upload.py [--size-mb 500] [--repeat 1]

Both sides run in the same process run, against the same local S3 server
process (scripts/s3_server.py on a free port), over the same generated tree:
a data/ of float32 feature arrays (half-compressible, like real training
data), random bytes (incompressible: images, already-compressed files) and
CSV text, plus a small code/. The report is the ratio tshell / baseline
(aim: at or under 1.0); results also go to bench/out/pack_upload.json.

tshell's side is `tshell push`: it packs and uploads each part as soon as it
is compressed, and does more than the baseline (hashes every file for the
manifest, verifies the upload's ETag), so the ratio includes that work.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from harness.s3_fixtures import start_s3_server, stop_s3_server  # noqa: E402
from tshell.pack_commands import push_directory  # noqa: E402
from tshell.s3_upload import DEFAULT_CONCURRENCY, DEFAULT_PART_SIZE  # noqa: E402

MIB = 1024 * 1024


def generate_tree(root: Path, size_mb: int, seed: int = 7) -> int:
    """code/ with a few scripts and data/ of mixed files adding up to ~size_mb MiB."""
    rng = random.Random(seed)
    (root / "code").mkdir(parents=True)
    for index in range(5):
        (root / "code" / f"module_{index}.py").write_text("def f(x):\n    return x * 2\n" * 200)
    data = root / "data"
    data.mkdir()
    target = size_mb * MIB
    written = 0
    index = 0
    while written < target:
        kind = index % 4
        chunk = min(32 * MIB, target - written)
        path = data / f"part-{index:04d}"
        if kind in (0, 1):  # float32 features: random mantissas, repetitive exponents
            import numpy as np

            generator = np.random.default_rng(seed + index)
            path = path.with_suffix(".f32")
            path.write_bytes(generator.standard_normal(chunk // 4, dtype=np.float32).tobytes())
        elif kind == 2:
            path = path.with_suffix(".bin")
            path.write_bytes(os.urandom(chunk))
        else:
            path = path.with_suffix(".csv")
            rows = "".join(f"{i},{rng.random():.6f},{rng.randint(0, 9)}\n" for i in range(20000))
            text = (rows * (chunk // len(rows) + 1))[:chunk]
            path.write_text(text)
        written += chunk
        index += 1
    return written


def run_tshell_side(client, tree: Path, out_dir: Path, bucket: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """What `tshell push` does: pack, uploading each part as it is compressed, then verify."""
    started = time.perf_counter()
    info, result = push_directory(
        client,
        tree,
        f"s3://{bucket}/bench/",
        "tshell",
        out_dir,
        DEFAULT_PART_SIZE,
        DEFAULT_CONCURRENCY,
    )
    done = time.perf_counter()
    return {"total_s": done - started, "archive_bytes": info.archive_size, "parts": result.parts}


def run_baseline_side(client, tree: Path, out_dir: Path, bucket: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    archive = out_dir / "baseline.tar.gz"
    started = time.perf_counter()
    subprocess.run(["tar", "czf", str(archive), "-C", str(tree), "code", "data"], check=True)
    packed = time.perf_counter()
    client.upload_file(str(archive), bucket, "bench/baseline.tar.gz")
    done = time.perf_counter()
    return {
        "pack_s": packed - started,
        "upload_s": done - packed,
        "total_s": done - started,
        "archive_bytes": archive.stat().st_size,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "pack_upload.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pack-") as tmp:
        work = Path(tmp)
        tree = work / "tree"
        size = generate_tree(tree, args.size_mb)
        server, process = start_s3_server(work, ("bench",))
        try:
            client = server.client()
            runs = []
            for attempt in range(args.repeat):
                # Alternate the order so page cache and server warm-up favour neither side.
                sides = [("baseline", run_baseline_side), ("tshell", run_tshell_side)]
                result = {
                    name: side(client, tree, work, "bench")
                    for name, side in sides[:: 1 - 2 * (attempt % 2)]
                }
                result["ratio"] = result["tshell"]["total_s"] / result["baseline"]["total_s"]
                runs.append(result)
                for name in ("tshell.tar.gz", "baseline.tar.gz"):
                    (work / name).unlink()
        finally:
            stop_s3_server(process)
    ratios = sorted(r["ratio"] for r in runs)
    median = ratios[len(ratios) // 2]
    report = {
        "tree_bytes": size,
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "runs": runs,
        "median_ratio": median,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    for run in runs:
        t, b = run["tshell"], run["baseline"]
        print(
            f"tree {size / MIB:.0f} MiB | tshell push (pack while uploading) {t['total_s']:.1f}s"
            f" ({t['archive_bytes'] / MIB:.0f} MiB)"
            f" | tar czf {b['pack_s']:.1f}s + upload_file {b['upload_s']:.1f}s"
            f" = {b['total_s']:.1f}s ({b['archive_bytes'] / MIB:.0f} MiB)"
            f" | ratio {run['ratio']:.2f}"
        )
    print(
        f"median ratio tshell / baseline over {len(runs)} run(s): {median:.2f} (aim <= 1.0); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
