"""RESULTS.md section 8: what following a replica's log costs the triggerer (bench_log_follow.py).

Its own module so each section of bench/report.py can be read alone; pure,
tested in tests/bench/test_bench_stats.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.stats import format_ratio, format_summary, markdown_table, ratio, verdict

# Issue 27: a 32 MiB line must cost the triggerer's loop less than this (its longest stall).
STALL_TARGET_MS = 100.0


def section_log_follow(result: Mapping[str, Any]) -> list[str]:
    cases = result.get("cases") or []
    rows = []
    for case in cases:
        before, after = case["before"], case["after"]
        rows.append(
            [
                case["case"],
                format_summary(before["ms_per_mib"], "ms", 1),
                format_summary(after["ms_per_mib"], "ms", 1),
                format_ratio(
                    ratio(before["ms_per_mib"]["median"], after["ms_per_mib"]["median"]), 1
                ),
                format_summary(before["max_stall_ms"], "ms", 1),
                format_summary(after["max_stall_ms"], "ms", 1),
            ]
        )
    long_lines = [c for c in cases if c["case"].startswith("one ")]
    worst = max(long_lines, key=lambda c: c["mib"], default=None)
    out = [
        "## 8. Following a replica's log in the triggerer (issue 27)",
        "",
        f"The train trigger's `_follow_log`, before (operators/triggers.py at "
        f"{result.get('old_commit', '?')}, read from git) and after (the working tree), in one "
        f"process over the same synthetic logs, handed over in {result.get('chunk_kib', '?')} "
        "KiB chunks that are already buffered (the stream never suspends, as aiohttp's does "
        "when bytes wait), the live-log bound lifted so both follow every byte. ms per MiB of "
        "log (the seconds of the whole follow over its size), and the loop's longest stall "
        "(the longest gap between two ticks of another coroutine on the same loop): "
        f"median (min–max, n) of {result.get('repeat', '?')} runs.",
        "",
        markdown_table(
            [
                "log",
                "before ms/MiB",
                "after ms/MiB",
                "speed-up",
                "before longest stall",
                "after longest stall",
            ],
            rows,
        ),
        "",
    ]
    if worst is not None:
        stall = worst["after"]["max_stall_ms"]["median"]
        out += [
            f"- target (issue 27): a {worst['mib']:.0f} MiB line stalls the loop under "
            f"{STALL_TARGET_MS:.0f} ms: {stall:.1f} ms, {verdict(stall < STALL_TARGET_MS)} "
            f"(before: {worst['before']['max_stall_ms']['median']:.0f} ms).",
        ]
    out += [
        "- why: before, the follower appended each chunk to one bytes buffer and split all of it "
        "again (quadratic in the line's length) and never yielded while bytes were buffered; "
        f"after, a line is cut at {result.get('line_max_bytes', 65536)} bytes with a marker, "
        "the pending part is a list of chunks (work per chunk proportional to the chunk) and "
        "the follower yields after every chunk and every 128 lines.",
        "- ordinary lines cost about the same before and after: the per-line `log.info` "
        "dominates; after, the longest stall is one chunk's lines instead of the whole log.",
        "",
    ]
    return out
