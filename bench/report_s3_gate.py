"""RESULTS.md's section 9: the local S3 gate's cost per request (bench_s3_gate.py, issue 26)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.stats import format_summary, markdown_table, verdict

HEADING = "## 9. The local S3 gate's cost per request (issue 26)"


def section_s3_gate(data: Mapping[str, Any]) -> list[str]:
    target = float(data.get("target_ratio", 1.2))
    cases = data.get("cases", [])
    rows = [
        [
            case["case"],
            format_summary(case["gate_ms"], "ms", 1),
            format_summary(case["no_gate_ms"], "ms", 1),
            f"{case['ratio']:.2f}",
            f"{case['extra_ms']:+.1f} ms",
        ]
        for case in cases
    ]
    worst = max((case["ratio"] for case in cases), default=None)
    judged = (
        f"Worst median ratio {worst:.2f} (target ≤ {target:g}): {verdict(worst <= target)}."
        if worst is not None
        else "No case was measured."
    )
    return [
        HEADING,
        "",
        "What a pod's request costs through the pods' listener (pods identity lookup, "
        "signature or policy, the form read once, the reach rules) against the same moto "
        "store served with no gate, in one process, the two taking turns request by request; "
        f"{data.get('requests', '?')} requests of each kind per side, each on a new "
        "connection, as a pod sends them (bench/bench_s3_gate.py).",
        "",
        markdown_table(["request", "gate", "no gate", "ratio", "extra (medians)"], rows),
        "",
        judged,
        "",
    ]
