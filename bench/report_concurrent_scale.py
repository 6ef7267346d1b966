"""RESULTS.md subsection 7b: concurrent 8-replica jobs through Airflow (bench_concurrent_scale.py).

One row per batch size (medians over the batch's runs of the four per-run latencies, the
makespan, API requests per replica, the peaks of the triggerer's open connections, task slots
and memory), the largest batch's requests by verb and resource, the triggerer's memory against
its 1 GiB limit, and sentences computed from the figures: which figure grows faster than the
number of jobs (its growth exponent between the smallest and the largest batch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bench.stats import format_summary, markdown_table, verdict

HEADING = "### 7b. Concurrent jobs through Airflow"
TRIGGERER_LIMIT_MIB = 1024.0
# Above this exponent against the job count a figure grows faster than linearly (1.0 is linear;
# the margin absorbs the noise of a shared machine).
SUPERLINEAR_EXPONENT = 1.15
COLUMNS = (
    "jobs",
    "replicas",
    "succeeded",
    "trigger → all Running",
    "→ ClusterSpec delivered",
    "chief exit → all gone",
    "trigger → run end",
    "makespan",
    "API requests / replica",
    "peak triggerer connections",
    "peak task slots running",
    "peak deferred",
    "peak triggerer RSS",
    "peak API server RSS",
    "objects left",
)
# Totals per batch (not per run) whose growth against the job count is judged.
GROWING = {
    "makespan_s": "the batch's makespan",
    "api_requests_total": "API requests",
    "peak_triggerer_connections": "the triggerer's open connections to the API server",
    "peak_triggerer_rss_mib": "the triggerer's memory",
    "peak_apiserver_rss_mib": "the API server's memory",
}
PER_RUN = {
    "to_all_running_s": "trigger → all Running (median per run)",
    "to_clusterspec_s": "trigger → ClusterSpec (median per run)",
    "chief_exit_to_gone_s": "chief exit → all gone (median per run)",
}


def growth_exponent(small: tuple[int, float], large: tuple[int, float]) -> float | None:
    """k in value ∝ jobs^k between two sizes; None when a value is not positive."""
    (n1, v1), (n2, v2) = small, large
    if v1 <= 0 or v2 <= 0 or n1 == n2:
        return None
    return math.log(v2 / v1) / math.log(n2 / n1)


def build_row(batch: Mapping[str, Any]) -> list[str]:
    return [
        str(batch["jobs"]),
        str(batch["replicas"]),
        f"{batch['succeeded']}/{batch['jobs']}",
        format_summary(batch.get("to_all_running_s")),
        format_summary(batch.get("to_clusterspec_s")),
        format_summary(batch.get("chief_exit_to_gone_s")),
        format_summary(batch.get("to_end_s")),
        "–" if batch.get("makespan_s") is None else f"{batch['makespan_s']:.0f} s",
        f"{batch['api_requests_per_replica']:.1f}",
        str(batch["peak_triggerer_connections"]),
        str(batch["peak_running_slots"]),
        str(batch["peak_deferred"]),
        f"{batch['peak_triggerer_rss_mib']:.0f} MiB",
        f"{batch['peak_apiserver_rss_mib']:.0f} MiB",
        str(batch["objects_left"]),
    ]


def describe_growth(batches: list[Mapping[str, Any]]) -> list[str]:
    """One sentence per figure: its value at the smallest and largest batch, its exponent."""
    if len(batches) < 2:
        return ["One batch size only: no growth to compare."]
    small, large = batches[0], batches[-1]
    lines = []
    pairs = [(key, words, small.get(key), large.get(key)) for key, words in GROWING.items()]
    pairs += [
        (key, words, (small.get(key) or {}).get("median"), (large.get(key) or {}).get("median"))
        for key, words in PER_RUN.items()
    ]
    for _key, words, v1, v2 in pairs:
        if v1 is None or v2 is None:
            continue
        k = growth_exponent((small["jobs"], float(v1)), (large["jobs"], float(v2)))
        if k is None:
            continue
        shape = "faster than linearly" if k > SUPERLINEAR_EXPONENT else "linearly or less"
        lines.append(
            f"- {words}: {float(v1):.1f} at {small['jobs']} jobs → {float(v2):.1f} at "
            f"{large['jobs']}, ∝ jobs^{k:.2f}: grows {shape}."
        )
    return lines


def section_concurrent_scale(result: Mapping[str, Any]) -> list[str]:
    """The subsection's lines (it sits inside section 7, after the single-gang tables)."""
    if "error" in result:
        return [HEADING, "", f"Not measured: {result['error']}", ""]
    batches = sorted(result.get("batches") or [], key=lambda b: b["jobs"])
    if not batches:
        return [HEADING, "", "Not measured: no batch finished.", ""]
    largest = batches[-1]
    peak_rss = max(b["peak_triggerer_rss_mib"] for b in batches)
    sizes = ", ".join(str(b["jobs"]) for b in batches)
    out = [
        HEADING,
        "",
        f"`bench/bench_concurrent_scale.py`: batches of {sizes}"
        f" jobs of {sum(result['replicas_per_job'].values())} replicas "
        f"({', '.join(f'{n} {r}' for r, n in result['replicas_per_job'].items())}) triggered at "
        f"once through the REST API of {len(result['tenants'])} tenants' submit DAGs, real "
        f"`airflow standalone` (LocalExecutor, triggerer, PostgreSQL), S3 and localkube with "
        f'{result["nodes"]} simulated nodes; every replica "runs" {largest["run_seconds"]} s '
        "once its ClusterSpec is delivered (`LOCALKUBE_SIMULATE_RUN_SECONDS` and "
        "`..._RUN_AFTER_FILE` in the request's `env`). Latencies: median "
        "(min–max, n runs) of the batch; peaks: sampled every 2 s.",
        "",
        markdown_table(COLUMNS, [build_row(b) for b in batches]),
        "",
        f"The triggerer stays under 1 GiB: {verdict(peak_rss < TRIGGERER_LIMIT_MIB)} "
        f"(peak {peak_rss:.0f} MiB, its whole process tree).",
        "",
        f"API requests of the {largest['jobs']}-job batch by verb and resource (localkube's "
        "count: the product's, the simulated kubelet's, Airflow's and the bench's own pod "
        "watch together):",
        "",
        markdown_table(
            ("request", "count", "per replica"),
            [
                (kind, n, f"{n / largest['replicas']:.2f}")
                for kind, n in sorted(largest["api_requests"].items(), key=lambda kv: -kv[1])
            ],
        ),
        "",
        "Growth from the smallest to the largest batch:",
        "",
        *describe_growth(batches),
        "",
    ]
    if result.get("notes"):
        out += [*result["notes"], ""]
    return out
