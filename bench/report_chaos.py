"""The chaos soak's report: its JSON summary and its section of bench/RESULTS.md.

Why this exists: the figure users ask for is "faults injected, runs that ended as they
should, anything lost": faults by kind and phase (and those the soak could not inject, with
why), runs by outcome, each invariant's violations (goal 0) and how long the soak took.
Several soaks (different seeds) are one section: `write_section` replaces the section of
RESULTS.md with all the soak JSONs given.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.chaos_invariants import Check, Violation

SECTION_TITLE = "## Chaos soak (issue 30)"
FULL_SOAK_RUNS = 30


def summarise(
    *,
    seed: int,
    injected: Sequence[Mapping[str, Any]],
    runs: Sequence[Mapping[str, Any]],
    violations: Mapping[Check, list[Violation]],
    duration_s: float,
    world_up_s: float,
    command: str,
) -> dict[str, Any]:
    """The soak's JSON: `injected` rows have kind, phase, run, status ("injected" or
    "skipped"), detail; `runs` rows have name, state."""
    done = [row for row in injected if row["status"] == "injected"]
    return {
        "seed": seed,
        "command": command,
        "duration_s": round(duration_s, 1),
        "world_up_s": round(world_up_s, 1),
        "faults_by_kind_and_phase": count_by(done, ("kind", "phase")),
        "faults_skipped": [row for row in injected if row["status"] != "injected"],
        "faults_injected": list(injected),
        "runs_by_outcome": dict(Counter(str(row.get("state")) for row in runs)),
        "runs": list(runs),
        "violations": {
            check.name: [v.to_payload() for v in found] for check, found in violations.items()
        },
        "violation_count": sum(len(found) for found in violations.values()),
    }


def count_by(rows: Sequence[Mapping[str, Any]], keys: tuple[str, ...]) -> dict[str, int]:
    counted = Counter(" / ".join(str(row[key]) for key in keys) for row in rows)
    return dict(sorted(counted.items()))


def build_section(soaks: Sequence[Mapping[str, Any]]) -> str:
    """RESULTS.md's chaos section from one or more soak summaries."""
    lines = [SECTION_TITLE, ""]
    if not soaks:
        return "\n".join([*lines, "No soak recorded.", ""])
    lines += [
        "| seed | runs | faults injected (skipped) | outcomes | violations | soak (world up) |",
        "|---|---|---|---|---|---|",
    ]
    for soak in soaks:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(soak["runs_by_outcome"].items()))
        injected = sum(soak["faults_by_kind_and_phase"].values())
        lines.append(
            f"| {soak['seed']} | {len(soak['runs'])} | {injected} ({len(soak['faults_skipped'])})"
            f" | {outcomes} | {soak['violation_count']} | {soak['duration_s'] / 60:.1f} min"
            f" ({soak['world_up_s']:.0f} s) |"
        )
    lines += ["", "Faults by kind / phase (all soaks):", ""]
    total: Counter[str] = Counter()
    for soak in soaks:
        total.update(soak["faults_by_kind_and_phase"])
    lines += [f"- {name}: {count}" for name, count in sorted(total.items())] or ["- none"]
    lines += ["", "Violations by check (all soaks):", ""]
    for check in Check:
        found = [v for soak in soaks for v in soak["violations"].get(check.name, [])]
        lines.append(f"- {check.value}: {len(found)}")
        lines += [f"  - {v['run'] or 'world'}: {v['detail']}" for v in found[:10]]
    skipped = [row for soak in soaks for row in soak["faults_skipped"]]
    if skipped:
        lines += ["", "Faults not injected (and why):", ""]
        lines += [f"- {row['kind']} in {row['phase']}: {row['detail']}" for row in skipped]
    lines += ["", "Commands: " + "; ".join(f"`{soak['command']}`" for soak in soaks)]
    full = {soak["seed"] for soak in soaks if len(soak["runs"]) >= FULL_SOAK_RUNS}
    if len(full) < 2:
        lines += [
            "",
            f"Soaks of {FULL_SOAK_RUNS} runs with different seeds recorded: {len(full)} of the 2 "
            "issue 30 asks for; `make chaos SEED=0` then `make chaos SEED=1` adds them here.",
        ]
    lines.append("")
    return "\n".join(lines)


SECTION = re.compile(rf"^{re.escape(SECTION_TITLE)}\n.*?(?=^## |\Z)", re.M | re.S)


def keep_section(old: str, new: str) -> str:
    """`new` RESULTS.md (run_all.py's, which measures no soak) with `old`'s chaos section."""
    found = SECTION.search(old)
    if found is None or SECTION.search(new):
        return new
    return new.rstrip("\n") + "\n\n" + found.group(0).rstrip("\n") + "\n"


def write_section(results: Path, soak_files: Sequence[Path]) -> None:
    """Replace (or append) the chaos section of `results` with these soaks' summaries."""
    unique = dict.fromkeys(path.resolve() for path in soak_files)  # once each, in order
    soaks = [json.loads(path.read_text()) for path in unique]
    text = results.read_text() if results.exists() else ""
    section = build_section(soaks)
    if SECTION.search(text):
        text = SECTION.sub(lambda _match: section + "\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    results.write_text(text)
