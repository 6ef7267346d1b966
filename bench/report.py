"""bench/RESULTS.md from the measurements' JSON files: the header, then one section each.

Pure: `build_report(results, machine, run)` turns plain data into Markdown, so
its arithmetic and verdicts are tested without running anything
(tests/bench/test_bench_stats.py). A measurement that failed or was skipped gets a
line saying so instead of its section. Each section's text lives in its own
module, named after the measurement: report_startup.py (1), report_naive.py
(2), report_wholerun.py (3), report_parse.py (4), report_concurrency.py (5),
report_restart.py (6), report_scale.py (7), report_log_follow.py (8),
report_s3_gate.py (9), report_event_curves.py (10), report_pack_upload.py; this one puts
them in order.

`merge_report` serves `run_all.py --only NAME`: the sections measured again
replace theirs in the existing RESULTS.md (and their rows of its step table),
the others stay as they were, and a line in the header says what was measured
when.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bench.report_concurrency import section_concurrency
from bench.report_concurrent_scale import section_concurrent_scale
from bench.report_event_curves import section_event_curves
from bench.report_log_follow import section_log_follow
from bench.report_naive import section_naive
from bench.report_pack_upload import section_pack
from bench.report_parse import section_parse
from bench.report_restart import section_restart
from bench.report_s3_gate import section_s3_gate
from bench.report_scale import section_scale
from bench.report_startup import section_startup
from bench.report_wholerun import section_phases, section_wholerun
from bench.stats import markdown_table, verdict

# Each measurement's section starts with a line beginning with its heading.
SECTION_HEADINGS = {
    "startup": "## 1.",
    "naive": "## 2.",
    "wholerun": "## 3.",
    "phases": "## 3b.",
    "parse": "## 4.",
    "concurrency": "## 5.",
    "restart": "## 6.",
    "scale": "## 7.",
    "log_follow": "## 8.",
    "s3_gate": "## 9.",
    "event_curves": "## 10.",
    "pack_upload": "## Bundle pack + upload",
}
REMEASURED = "- re-measured"


def build_report(
    results: Mapping[str, Any], machine: Mapping[str, Any], run: Mapping[str, Any]
) -> str:
    """The whole RESULTS.md; `results[name]` is the measurement's JSON, or {"error": text}."""
    budget_s = run.get("budget_s", 20 * 60)  # runs before gang restarts were measured had 20 min
    out = [
        "# Benchmark results",
        "",
        f"- machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, "
        f"{machine.get('memory_gib', 0):.0f} GiB, {machine.get('system', '')}, Python "
        f"{machine.get('python', '')}",
        f"- date: {run.get('date', '?')}; load average at start {run.get('load_start', '?')}, "
        f"at end {run.get('load_end', '?')}",
        f"- command: `{run.get('command', 'make bench')}`; wall time "
        f"{run.get('wall_s', 0) / 60:.1f} min (total time of the run; target under "
        f"{budget_s / 60:.0f} min: {verdict(run.get('wall_s', 0) < budget_s)})",
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
        section_naive(
            results["naive"],
            results.get("startup") if has("startup") else None,
            run.get("airflow_parallelism", 4),  # runs before it was recorded had 4
        )
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
        section_phases(results["phases"])
        if has("phases")
        else missing("3b. Per-phase trace of `digits-ps` (issue 29)", "phases")
    )
    out += (
        section_parse(results["parse"]) if has("parse") else missing("4. DAG parse time", "parse")
    )
    out += (
        section_concurrency(results["concurrency"])
        if has("concurrency")
        else missing("5. Concurrency", "concurrency")
    )
    out += (
        section_restart(results["restart"])
        if has("restart")
        else missing("6. Gang restarts", "restart")
    )
    out += (
        section_scale(results["scale"]) if has("scale") else missing("7. Scale (issue 18)", "scale")
    )
    if "concurrent_scale" in results:  # 7b sits inside section 7: `--only scale` redoes both
        out += section_concurrent_scale(results.get("concurrent_scale") or {"error": "not run"})
    out += (
        section_log_follow(results["log_follow"])
        if has("log_follow")
        else missing("8. Following a replica's log in the triggerer (issue 27)", "log_follow")
    )
    out += (
        section_s3_gate(results["s3_gate"])
        if has("s3_gate")
        else missing("9. The local S3 gate's cost per request (issue 26)", "s3_gate")
    )
    out += (
        section_event_curves(results["event_curves"])
        if has("event_curves")
        else missing("10. The TFJob tab's curves from event files (issue 31)", "event_curves")
    )
    if has("pack_upload"):
        out += section_pack(results["pack_upload"], run.get("pack_note", ""))
    return "\n".join(out).rstrip() + "\n"


def split_sections(text: str) -> tuple[list[str], list[list[str]]]:
    """(header lines, sections): each section is its lines, from its `## ` heading on."""
    header: list[str] = []
    sections: list[list[str]] = []
    for line in text.rstrip("\n").split("\n"):
        if line.startswith("## "):
            sections.append([line])
        elif sections:
            sections[-1].append(line)
        else:
            header.append(line)
    return header, sections


def find_section(sections: list[list[str]], name: str) -> int | None:
    heading = SECTION_HEADINGS[name]
    return next((i for i, lines in enumerate(sections) if lines[0].startswith(heading)), None)


def merge_report(old: str, new: str, measured: Iterable[str], run: Mapping[str, Any]) -> str:
    """`old` RESULTS.md with the sections and step-table rows of `measured` taken from `new`
    (both made by build_report); one header line names what was measured again, when and how."""
    measured = [name for name in SECTION_HEADINGS if name in set(measured)]
    old_header, old_sections = split_sections(old)
    new_header, new_sections = split_sections(new)
    for name in measured:
        fresh = find_section(new_sections, name)
        if fresh is None:
            continue
        at = find_section(old_sections, name)
        if at is None:
            old_sections.append(new_sections[fresh])
        else:
            old_sections[at] = new_sections[fresh]
    header = [
        line
        for line in old_header
        # an earlier re-measurement of the same sections is replaced by this one
        if not (line.startswith(REMEASURED) and set(remeasured_names(line)) <= set(measured))
    ]
    for name in measured:
        row = next((line for line in new_header if line.startswith(f"| {name} |")), None)
        if row is None:
            continue
        at = next((i for i, line in enumerate(header) if line.startswith(f"| {name} |")), None)
        if at is not None:
            header[at] = row
        else:
            last_row = max((i for i, line in enumerate(header) if line.startswith("|")), default=-1)
            header.insert(last_row + 1 if last_row >= 0 else len(header), row)
    note = (
        f"{REMEASURED} {run.get('date', '?')}: "
        + ", ".join(f"section {SECTION_HEADINGS[n][3:].rstrip('.')} ({n})" for n in measured)
        + f" with `{run.get('command', '?')}`, wall time {run.get('wall_s', 0) / 60:.1f} min, "
        f"load average at start {run.get('load_start', '?')}, at end {run.get('load_end', '?')}; "
        "the other sections and step rows are from the run above."
    )
    at = next((i for i, line in enumerate(header) if line.startswith("- figures:")), None)
    header.insert(at + 1 if at is not None else len(header), note)
    body = ["\n".join(lines).rstrip("\n") + "\n" for lines in old_sections]
    return "\n".join(header).rstrip("\n") + "\n\n" + "\n".join(body)


def remeasured_names(line: str) -> list[str]:
    return [name for name in SECTION_HEADINGS if f"({name})" in line]
