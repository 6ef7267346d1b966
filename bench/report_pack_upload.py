"""RESULTS.md's bundle pack + upload section (bench_pack_upload.py, the bundles engineer's).

Not one of the numbered measurements; its own module so each section of
bench/report.py can be read alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.stats import markdown_table


def section_pack(data: Mapping[str, Any], note: str) -> list[str]:
    rows = [
        [
            i + 1,
            f"{r['tshell']['total_s']:.1f} s",
            f"{r['baseline']['total_s']:.1f} s",
            f"{r['ratio']:.2f}",
        ]
        for i, r in enumerate(data["runs"])
    ]
    return [
        "## Bundle pack + upload (bench/bench_pack_upload.py, the bundles engineer's)",
        "",
        f"{note} Tree {data['tree_bytes'] / 2**20:.0f} MiB; `tshell push` vs `tar czf` + boto3 "
        "`upload_file`.",
        "",
        markdown_table(["run", "tshell push", "tar czf + upload_file", "ratio"], rows),
        "",
        f"Median ratio tshell / baseline: {data['median_ratio']:.2f} (aim ≤ 1.0).",
        "",
    ]
