"""bench/RESULTS.md from the measurements' JSON files: the header, then one section each.

Pure: `build_report(results, machine, run)` turns plain data into Markdown, so
its arithmetic and verdicts are tested without running anything
(tests/test_bench_stats.py). A measurement that failed or was skipped gets a
line saying so instead of its section. Each section's text lives in its own
module, named after the measurement: report_startup.py (1), report_naive.py
(2), report_wholerun.py (3), report_parse.py (4), report_concurrency.py (5),
report_pack_upload.py; this one puts them in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from report_concurrency import section_concurrency
from report_naive import section_naive
from report_pack_upload import section_pack
from report_parse import section_parse
from report_startup import section_startup
from report_wholerun import section_wholerun
from stats import markdown_table, verdict


def build_report(
    results: Mapping[str, Any], machine: Mapping[str, Any], run: Mapping[str, Any]
) -> str:
    """The whole RESULTS.md; `results[name]` is the measurement's JSON, or {"error": text}."""
    out = [
        "# Benchmark results",
        "",
        f"- machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, "
        f"{machine.get('memory_gib', 0):.0f} GiB, {machine.get('system', '')}, Python "
        f"{machine.get('python', '')}",
        f"- date: {run.get('date', '?')}; load average at start {run.get('load_start', '?')}, "
        f"at end {run.get('load_end', '?')}",
        f"- command: `{run.get('command', 'make bench')}`; wall time "
        f"{run.get('wall_s', 0) / 60:.1f} min (total time of the run; target under 20 min: "
        f"{verdict(run.get('wall_s', 0) < 20 * 60)})",
        "- the machine is shared: other engineers' tests and demos ran during the measurement "
        "(see the load averages); every figure is under that load.",
        "- figures: median (min–max, n) over repetitions in this run; ratios against baselines "
        "measured "
        "in this same run. Raw data: bench/out/*.json (git-ignored).",
        "",
    ]
    steps = run.get("steps") or {}
    if steps:
        out += [
            markdown_table(
                ["step", "status", "seconds"],
                [
                    [name, s.get("status"), f"{s.get('seconds', 0):.0f}"]
                    for name, s in steps.items()
                ],
            ),
            "",
        ]

    notes = run.get("notes") or []
    if notes:
        out += ["## Notes on this run", "", *(f"- {note}" for note in notes), ""]

    def has(name: str) -> bool:
        return name in results and "error" not in results[name]

    def missing(title: str, name: str) -> list[str]:
        reason = results.get(name, {}).get("error", "not run")
        return [f"## {title}", "", f"Not measured in this run: {reason}", ""]

    out += (
        section_startup(results["startup"])
        if has("startup")
        else missing("1. Start-up overhead", "startup")
    )
    out += (
        section_naive(results["naive"], results.get("startup") if has("startup") else None)
        if has("naive")
        else missing("2. Against the naive way", "naive")
    )
    out += (
        section_wholerun(
            results["wholerun"],
            results["parse"].get("submit_parse_s") if has("parse") else None,
            results["parse"].get("submit_imports_s") if has("parse") else None,
        )
        if has("wholerun")
        else missing("3. Whole-run overhead", "wholerun")
    )
    out += (
        section_parse(results["parse"]) if has("parse") else missing("4. DAG parse time", "parse")
    )
    out += (
        section_concurrency(results["concurrency"])
        if has("concurrency")
        else missing("5. Concurrency", "concurrency")
    )
    if has("pack_upload"):
        out += section_pack(results["pack_upload"], run.get("pack_note", ""))
    return "\n".join(out).rstrip() + "\n"
