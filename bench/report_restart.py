"""RESULTS.md section 6: gang restarts, their latency and the training they lose (bench_restart.py).

One row per case (how the replica was lost, replicas, checkpoint interval),
the parts of the latency, and sentences computed from the figures: how the
latency grows with the gang, and what a lost checkpoint owner costs against
the interval. Its own module so each section of bench/report.py can be read
alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.stats import format_summary, markdown_table, ratio

HOW_WORDS = {
    "drain": "a worker deleted with its grace period (drain, eviction)",
    "kill": "the chief (checkpoint owner) deleted with grace 0 (force delete, lost node, OOM)",
}


def describe_growth(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The latency of the largest drained gang against the smallest, per replica."""
    drained = sorted(
        (row for row in rows.values() if row["how"] == "drain"), key=lambda row: row["replicas"]
    )
    if len(drained) < 2 or not drained[0]["restart_latency_s"]:
        return []
    small, large = drained[0], drained[-1]
    small_s = small["restart_latency_s"]["median"]
    large_s = large["restart_latency_s"]["median"]
    grown = ratio(large_s, small_s) or 0.0
    sized = large["replicas"] / small["replicas"]
    shape = "less than linearly" if grown < sized else "at least linearly"
    return [
        f"Restart latency grows {shape} with the gang: {large['replicas']} replicas take "
        f"{grown:.1f}× the time of {small['replicas']} ({large_s:.2f} s against {small_s:.2f} s, "
        f"{sized:.0f}× the replicas). The stop waits for every old pod's containers to end "
        "(grace period honoured, no two gangs alive at once); creating the pods is one "
        "request each; the new pods start in parallel on two cores; the delivery is one exec "
        "per replica, 8 at a time.",
        "",
    ]


def describe_loss(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = []
    for row in rows.values():
        lost = row.get("steps_lost")
        if not lost:
            continue
        if row["how"] == "drain":
            lines.append(
                f"- {row['replicas']} replicas, interval {row['interval_s']} s, a worker "
                f"drained: {lost['median']:.0f} steps lost (median, max {lost['max']:.0f}): "
                "the chief's bootstrap syncs once more on SIGTERM, within its grace period, "
                "so the new gang starts from the step the chief had when the gang was stopped."
            )
        else:
            lines.append(
                f"- {row['replicas']} replicas, interval {row['interval_s']} s, the "
                f"checkpoint owner force-deleted: {lost['median']:.0f} steps lost (median; "
                f"{lost['min']:.0f}–{lost['max']:.0f}), against an expected half-interval of "
                f"{row['interval_s'] / 2:.0f}: with no last sync the new gang resumes from the "
                "last periodic one, so a restart loses up to one interval of training."
            )
    if not lines:
        return []
    return [
        "Training lost per restart (the stand-in trains a step a second, so a step is a "
        "second of training):",
        "",
        *lines,
        "",
    ]


def section_restart(data: Mapping[str, Any]) -> list[str]:
    rows = data["summary"]
    table = markdown_table(
        [
            "case",
            "replica lost",
            "replicas",
            "checkpoint interval",
            "loss → noticed",
            "noticed → new gang running with its ClusterSpec",
            "of which: stop + stage checkpoints",
            "create",
            "pods start",
            "ClusterSpec delivery",
            "steps lost",
            "steps at the loss → restored",
        ],
        [
            [
                label,
                HOW_WORDS.get(row["how"], row["how"]),
                row["replicas"],
                f"{row['interval_s']} s",
                format_summary(row["loss_to_noticed_s"]),
                format_summary(row["restart_latency_s"]),
                format_summary(row["stop_and_stage_s"]),
                format_summary(row["stage_to_created_s"]),
                format_summary(row["created_to_running_s"]),
                format_summary(row["delivery_s"]),
                format_summary(row["steps_lost"], unit="", digits=0),
                ", ".join(
                    f"{a}→{b}"
                    for a, b in zip(row["steps_at_failure"], row["restored_steps"], strict=True)
                ),
            ]
            for label, row in rows.items()
        ],
    )
    return [
        "## 6. Gang restarts: latency and training lost per restart (localkube, stand-in program)",
        "",
        "Method (bench/bench_restart.py): a parameter-server gang of the stand-in program "
        "(chief, 1 ps, workers; the chief writes a checkpoint a second into CHECKPOINT_DIR, "
        "which its bootstrap copies to S3 every checkpoint interval) goes through the product's "
        "own task code: launch, delivery, the training trigger until it reports the loss, then "
        "what `train` does on a restart (`restart.judge_failed_attempt`, "
        "`restart.start_new_gang`: stop the gang with grace and wait until its pods are gone, "
        "stage the run's checkpoints, create the new gang, wait until it runs, deliver its "
        "ClusterSpec). The replica is lost at a random step between interval + 2 and "
        "2 × interval + 2, i.e. at a random point of the sync cycle. Restart latency = the "
        "trigger's failure event → every replica of the new gang running with its ClusterSpec; "
        "the new chief then prints `resumed from step <restored>` (checked). Airflow's own "
        "scheduling of the resumed `train` (seconds, section 3) is not in these figures.",
        "",
        table,
        "",
        *describe_growth(rows),
        *describe_loss(rows),
    ]
