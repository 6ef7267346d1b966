"""RESULTS.md section 2: ours against N plain KubernetesPodOperator executions (bench_naive.py).

Compares the naive run's figures with section 1's launch times from the same
run; its own module so each section of bench/report.py can be read alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.stats import format_ratio, format_summary, markdown_table, ratio


def section_naive(
    naive: Mapping[str, Any], startup: Mapping[str, Any] | None, parallelism: int = 16
) -> list[str]:
    rows, phases = [], []
    for count, row in naive["summary"].items():
        ours = (startup or {}).get("summary", {}).get("by_replicas", {}).get(count)
        ours_s = ours["launch_to_running_s"]["median"] if ours else None
        naive_s = row["start_to_running_s"]["median"]
        rows.append(
            [
                count,
                format_summary(ours["launch_to_running_s"]) if ours else "–",
                format_summary(row["start_to_running_s"]),
                format_ratio(ratio(naive_s, ours_s)) if ours_s else "n/a",
                "1 during launch, 0 while training (deferred)",
                f"{row['slots_while_running']['median']:.0f}",
                format_summary(row["slot_seconds"], "slot-s", 1),
            ]
        )
        if ours and ours.get("launch_create_pods_s"):
            phases.append(
                [
                    count,
                    format_summary(ours.get("launch_prepare_s")),
                    format_summary(ours.get("launch_create_pods_s")),
                    format_summary(row.get("create_pods_s")),
                    format_summary(ours.get("launch_pods_start_s")),
                    format_summary(row.get("pods_start_s")),
                ]
            )
    breakdown = []
    if phases:
        breakdown = [
            "Where the launch time goes (from the send times of the API requests): ours "
            "prepares (leftover check, presigned URLs, ConfigMap, Secret) and then creates the "
            "pods one after another in one task; the naive executions create theirs in parallel "
            "threads; after the last create, the cluster starts the pods either way.",
            "",
            markdown_table(
                [
                    "replicas",
                    "ours: before the first pod",
                    "ours: first → last pod created",
                    "naive: first → last pod created",
                    "ours: last created → all Running",
                    "naive: last created → all Running",
                ],
                phases,
            ),
            "",
        ]
    return [
        "## 2. Against the naive way: N plain KubernetesPodOperator executions",
        "",
        "Same pods (the launch task's manifests as `full_pod_spec`, ConfigMap/Secret made "
        "before the clock starts), each launched by the provider's unchanged "
        "`KubernetesPodOperator.execute` in its own thread (one worker slot each, as N "
        "parallel tasks would hold); time from the first execute to every pod Running with an "
        "IP, seen by a watch. The naive pods get no ClusterSpec (nobody gathers the IPs); the "
        "bench writes one into each so they end. Ours: launch → all Running from measurement 1, "
        "same world, same run.",
        "",
        markdown_table(
            [
                "replicas",
                "ours: launch → all Running",
                "naive: all Running",
                "ratio naive / ours",
                "slots held, ours",
                "slots held while replicas run, naive",
                "naive slot-seconds for a job that trains ~0 s",
            ],
            rows,
        ),
        "",
        "A ratio above 1 means ours has every pod Running sooner. Not run here, but it follows "
        f"from the slots: with this repo's Airflow parallelism of {parallelism}, the naive way "
        f"cannot even start a gang of more than {parallelism} replicas: task {parallelism + 1} "
        "waits for a slot that a running replica never frees, so a "
        "TensorFlow job that needs all of them deadlocks; ours holds at most 1 slot per job at "
        "any time.",
        "",
    ] + breakdown
