"""The log-following bench (RESULTS.md section 8): it runs both followers, and its section
says what was measured and whether the target was met.

The small run here checks the measurement still works (the old follower is read from
git), not its figures.
"""

from __future__ import annotations

import argparse

from bench import (
    bench_log_follow,  # noqa: E402
    report,  # noqa: E402
)
from bench.report_log_follow import section_log_follow  # noqa: E402


def figures(median: float) -> dict:
    return {"median": median, "min": median, "max": median, "n": 1}


def case(name: str, mib: float, before_ms: float, after_ms: float, stalls: tuple) -> dict:
    return {
        "case": name,
        "mib": mib,
        "before": {"ms_per_mib": figures(before_ms), "max_stall_ms": figures(stalls[0])},
        "after": {"ms_per_mib": figures(after_ms), "max_stall_ms": figures(stalls[1])},
    }


def test_the_section_compares_before_and_after_and_judges_the_longest_line():
    result = {
        "old_commit": "71c72db",
        "chunk_kib": 64,
        "repeat": 1,
        "line_max_bytes": 65536,
        "cases": [
            case("one 4 MiB line", 4, 100.0, 2.0, (400.0, 8.0)),
            case("one 32 MiB line", 32, 900.0, 2.5, (29000.0, 9.5)),
        ],
    }
    text = "\n".join(section_log_follow(result))
    assert "## 8. Following a replica's log" in text
    assert "| one 32 MiB line | 900.0 ms (n=1) | 2.5 ms (n=1) | 360.0× |" in text
    assert "a 32 MiB line stalls the loop under 100 ms: 9.5 ms, met (before: 29000 ms)" in text


def test_a_stall_over_the_target_is_reported_as_not_met():
    result = {"cases": [case("one 32 MiB line", 32, 900.0, 800.0, (29000.0, 250.0))]}
    assert "250.0 ms, NOT met" in "\n".join(section_log_follow(result))


def test_the_report_says_when_the_log_follow_bench_did_not_run():
    text = report.build_report({"log_follow": {"error": "failed (exit 1)"}}, {}, {})
    assert "## 8. Following a replica's log in the triggerer (issue 27)" in text
    assert "Not measured in this run: failed (exit 1)" in text


def test_a_small_run_measures_the_old_follower_from_git_and_the_new_one(tmp_path):
    args = argparse.Namespace(
        line_mib=[1], lines_mib=1, chunk_kib=64, repeat=1, old_commit=bench_log_follow.OLD_COMMIT
    )
    result = bench_log_follow.measure(args)
    rows = {row["case"]: row for row in result["cases"]}
    assert set(rows) == {"1 MiB of 100-byte lines", "one 1 MiB line"}
    long_line = rows["one 1 MiB line"]
    assert long_line["before"]["lines"] == long_line["after"]["lines"] == 3
    ordinary = rows["1 MiB of 100-byte lines"]
    assert ordinary["before"]["lines"] == ordinary["after"]["lines"] == 1024 * 1024 // 100
