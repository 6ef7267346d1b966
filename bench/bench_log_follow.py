#!/usr/bin/env python3
"""What following a replica's log costs the triggerer, per MiB, before and after issue 27.

The train trigger follows the deciding replicas' logs on the triggerer's event
loop, which every run's trigger shares. This drives the trigger's own
`_follow_log` of two implementations over the same synthetic logs in one
process: the old one (operators/triggers.py as of --old-commit, read from git
and loaded as a module) and the one in the working tree. The stream hands over
its bytes the way aiohttp does when they are already buffered (the iterator
never suspends), in chunks of --chunk-kib; the live-log bound
(LIVE_LOG_MAX_BYTES) is lifted so both follow every byte.

Cases: ordinary 100-byte lines (--lines-mib MiB of them), and one line of each
--line-mib size without a newline between two short lines. For each: seconds
in all, ms per MiB, and the loop's longest stall (the longest gap between two
ticks of another coroutine that yields at every turn), medians over --repeat.

    .venv/bin/python bench/bench_log_follow.py [--line-mib 4 8 16 32] [--repeat 3] --out F
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

from bench.stats import summarise  # noqa: E402

MIB = 1024 * 1024
OLD_COMMIT = "71c72db"  # the last commit before the bounded follower
ORDINARY_LINE = b"step 123 loss=0.123456 accuracy=0.987654 " + b"." * 58 + b"\n"  # 100 bytes


def load_old_triggers(commit: str) -> ModuleType:
    """operators/triggers.py as of `commit`, as its own module beside today's."""
    source = subprocess.run(
        ["git", "show", f"{commit}:operators/triggers.py"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(f"/tmp/bench_log_follow_triggers_{commit}.py")
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"triggers_{commit}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


class BufferedLog:
    """A `follow` response whose bytes are all buffered: `iter_any` never suspends."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self.data, self.chunk = data, chunk
        self.content = self

    async def __aenter__(self) -> BufferedLog:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        return None

    async def iter_any(self) -> Any:
        view = memoryview(self.data)
        for at in range(0, len(self.data), self.chunk):
            yield bytes(view[at : at + self.chunk])


class FollowCore:
    def __init__(self, response: BufferedLog) -> None:
        self.response = response

    async def read_namespaced_pod_log(self, pod: str, namespace: str, **kwargs: Any) -> Any:
        return self.response


def make_trigger(module: ModuleType) -> Any:
    trigger = module.TrainingTrigger(
        namespace="bench",
        selector="tfjob.io/run=bench",
        expected_pods=["bench-chief-0"],
        deciding=["chief-0"],
        deadline=time.time() + 3600,
        kubernetes_conn_id="kubernetes_default",
    )
    logger = logging.getLogger(f"bench.follow.{module.__name__}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    trigger._log = logger
    return trigger


async def follow_once(module: ModuleType, data: bytes, chunk: int) -> tuple[float, float, int]:
    """(seconds, the loop's longest stall in seconds, lines logged) of following `data`."""
    trigger = make_trigger(module)
    gaps = [0.0]
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    streamed: dict[str, int] = {}
    started = time.perf_counter()
    await trigger._follow_log(
        FollowCore(BufferedLog(data, chunk)), "bench-chief-0", "chief-0", streamed
    )
    took = time.perf_counter() - started
    done.set()
    await ticker
    return took, max(gaps), streamed.get("chief-0", 0)


def build_cases(line_mib: list[int], lines_mib: int) -> list[tuple[str, bytes]]:
    cases = []
    if lines_mib:
        count = lines_mib * MIB // len(ORDINARY_LINE)
        cases.append((f"{lines_mib} MiB of 100-byte lines", ORDINARY_LINE * count))
    for size in line_mib:
        cases.append((f"one {size} MiB line", b"first\n" + b"x" * (size * MIB) + b"\nlast\n"))
    return cases


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from operators import triggers as new

    bound = new.LIVE_LOG_MAX_BYTES
    new.LIVE_LOG_MAX_BYTES = 1 << 40  # follow every byte, as the old one did
    try:
        rows = measure_cases(args, {"before": load_old_triggers(args.old_commit), "after": new})
    finally:
        new.LIVE_LOG_MAX_BYTES = bound
    return {
        "old_commit": args.old_commit,
        "chunk_kib": args.chunk_kib,
        "repeat": args.repeat,
        "line_max_bytes": new.LineSplitter().max_bytes,
        "cases": rows,
    }


def measure_cases(
    args: argparse.Namespace, implementations: dict[str, ModuleType]
) -> list[dict[str, Any]]:
    rows = []
    for case, data in build_cases(args.line_mib, args.lines_mib):
        mib = len(data) / MIB
        row: dict[str, Any] = {"case": case, "mib": mib}
        for label, module in implementations.items():
            runs = [
                asyncio.run(follow_once(module, data, args.chunk_kib * 1024))
                for _ in range(args.repeat)
            ]
            seconds = summarise(r[0] for r in runs)
            row[label] = {
                "seconds": seconds.as_dict(),
                "ms_per_mib": summarise(r[0] * 1000 / mib for r in runs).as_dict(),
                "max_stall_ms": summarise(r[1] * 1000 for r in runs).as_dict(),
                "lines": runs[0][2],
            }
            print(
                f"log-follow {case} {label}: {row[label]['ms_per_mib']['median']:.1f} ms/MiB, "
                f"loop stalled up to {row[label]['max_stall_ms']['median']:.1f} ms "
                f"({seconds.format()})",
                flush=True,
            )
        rows.append(row)
    return rows


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--line-mib", type=int, nargs="*", default=[4, 8, 16, 32])
    parser.add_argument("--lines-mib", type=int, default=32)
    parser.add_argument("--chunk-kib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--old-commit", default=OLD_COMMIT)
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    result = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
