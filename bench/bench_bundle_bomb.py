#!/usr/bin/env python3
"""How fast, and in how little memory, a header bomb is refused (issue 12).

    .venv/bin/python bench/bench_bundle_bomb.py [--repeat 5] [--payload-mib 64]

Three archives of about the same compressed size (~64 KB): a pax header bomb
(one 'x' header announcing --payload-mib MiB), a GNU long-name bomb ('L'), and
a normal bundle (random bytes, so it does not compress). Each is verified
--repeat times, each time in a fresh process so the peak RSS is its own; the
report is the median (min-max) of the call's time and of its RSS growth
(ru_maxrss after minus before). Results also go to bench/out/bundle_bomb.json.
Before the fix, the 64 MiB pax bomb took ~0.7 s and ~190 MiB (FACTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from harness.bundle_fixtures import write_header_bomb  # noqa: E402
from runtime.bundle import write_bundle  # noqa: E402

PROBE = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from runtime.bundle import BundleError, verify_bundle
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
try:
    verify_bundle(sys.argv[2])
    outcome = "accepted"
except BundleError as exc:
    outcome = exc.reason.name
seconds = time.perf_counter() - started
growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"outcome": outcome, "seconds": seconds, "growth_kib": growth}))
"""


def probe(archive: Path) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(REPO), str(archive)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout)


def describe(values: list[float], unit: str, scale: float) -> str:
    scaled = [v * scale for v in values]
    return f"{statistics.median(scaled):.2f} {unit} ({min(scaled):.2f}-{max(scaled):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--payload-mib", type=int, default=64)
    args = parser.parse_args()
    payload = args.payload_mib * 1024 * 1024
    with tempfile.TemporaryDirectory(prefix="bench-bundle-bomb-") as tmp:
        work = Path(tmp)
        pax = write_header_bomb(work / "pax.tar.gz", tarfile.XHDTYPE, payload)
        gnu = write_header_bomb(work / "gnu.tar.gz", tarfile.GNUTYPE_LONGNAME, payload)
        source = work / "normal" / "data"
        source.mkdir(parents=True)
        (source / "random.bin").write_bytes(os.urandom(pax.stat().st_size))
        normal = write_bundle(work / "normal", work / "normal.tar.gz", "normal").path
        cases = {"pax header bomb": pax, "GNU long-name bomb": gnu, "normal bundle": normal}
        results = {}
        for label, archive in cases.items():
            runs = [probe(archive) for _ in range(args.repeat)]
            results[label] = {"compressed_bytes": archive.stat().st_size, "runs": runs}
            print(
                f"{label:20} {archive.stat().st_size:>7} B compressed  "
                f"{runs[0]['outcome']:16} "
                f"time {describe([r['seconds'] for r in runs], 'ms', 1000)}  "
                f"RSS growth {describe([r['growth_kib'] for r in runs], 'MiB', 1 / 1024)}"
            )
    out = REPO / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bundle_bomb.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
