"""RESULTS.md section 3: whole-run overhead of `digits-ps`, trigger → success (bench_wholerun.py).

The phase table and what explains the largest phases: the TensorFlow import
and each task process importing its DAG file (figures from section 4's
measurement). Its own module so each section of bench/report.py can be read alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.stats import format_summary, markdown_table, verdict

PHASE_TITLES = {
    "airflow_scheduling": "Airflow scheduling (trigger → first task, gaps between tasks)",
    "validate_and_fetch_bundle": "validate + fetch_bundle (request check, bundle snapshot in S3)",
    "pod_start": "pod start (launch task: objects created → all Running with IPs)",
    "clusterspec_delivery": "ClusterSpec delivery (clusterspec task)",
    "tensorflow_import": "TensorFlow import + gRPC server start (ps/workers, median)",
    "training": "training (the chief's training loop, `train_seconds`)",
    "chief_setup_eval_save_upload": "chief: model/dataset setup, evaluation, save, model upload",
    "end_noticed_and_train_task": "end of training noticed (trigger) → train task done",
    "archive": "archive (logs, run.json)",
    "teardown": "teardown (objects gone)",
    "publish": "publish (latest pointer, Asset event)",
}


def section_wholerun(
    data: Mapping[str, Any],
    submit_parse: Mapping[str, Any] | None,
    submit_imports: Mapping[str, float] | None = None,
) -> list[str]:
    summary = data["summary"]
    rows = [
        [PHASE_TITLES.get(name, name), format_summary(value)]
        for name, value in summary["phases"].items()
    ]
    rows.append(["**total: trigger → success**", format_summary(summary["total_s"])])
    rows.append(["**everything but training**", format_summary(summary["all_but_training_s"])])
    target = data.get("target_s", 15)
    met = summary["all_but_training_s"]["median"] <= target
    phases = summary["phases"]
    overhead = {k: v["median"] for k, v in phases.items() if k != "training"}
    top = sorted(overhead.items(), key=lambda kv: -kv[1])[:3]
    return [
        "## 3. Whole-run overhead: `digits-ps` trigger → success (Airflow standalone, TensorFlow)",
        "",
        "Triggered through the REST API of the tenant's submit DAG (`tfjob_submit__<tenant>`); "
        "phases from task-instance times, the chief's `train_seconds` (run.json metrics) and the "
        "pods' CRI log timestamps. The phases add up to the "
        f"total. Runs: {summary['total_s']['n']}.",
        "",
        markdown_table(["phase", "median (min–max, n)"], rows),
        "",
        f"Target everything but training ≤ {target} s: {verdict(met)} "
        f"(median {summary['all_but_training_s']['median']:.1f} s). Largest shares besides "
        f"training: "
        + ", ".join(f"{PHASE_TITLES.get(k, k).split(' (')[0]} {v:.1f} s" for k, v in top)
        + ".",
        "",
        *describe_tensorflow_import(data),
    ] + describe_task_starts(data, submit_parse, submit_imports)


def describe_tensorflow_import(data: Mapping[str, Any]) -> list[str]:
    """`import tensorflow` alone and in 4 processes at once: what the pods of a ps job pay."""
    alone, together = data.get("tf_import_alone_s"), data.get("tf_import_four_at_once_s")
    if not alone or not together:
        return []
    return [
        f"Profile of the TensorFlow import (fresh processes, bytecode cached, after the runs): "
        f"alone {alone[0]:.1f} s; 4 at once, as chief, ps and 2 workers start together on the "
        f"2 cores: {', '.join(f'{s:.1f}' for s in sorted(together))} s, "
        f"{max(together) / alone[0]:.1f}× the import alone. 4 imports on 2 cores explain 2×; "
        "the rest is the other work on the shared machine at that moment (load averages "
        "above). The chief waits for the slowest replica, so this is the floor of the phase "
        "on this machine, and by itself more than the 15 s target allows besides the rest.",
        "",
    ]


def describe_task_starts(
    data: Mapping[str, Any],
    submit_parse: Mapping[str, Any] | None,
    submit_imports: Mapping[str, float] | None = None,
) -> list[str]:
    """How much of the run is task processes importing their DAG file before they work."""
    if not submit_parse:
        return []
    each = submit_parse["median"]
    phases = data["summary"]["phases"]
    quickest = min(
        phases[name]["median"]
        for name in ("clusterspec_delivery", "archive", "teardown", "publish")
        if name in phases
    )
    return [
        f"Every task process imports dags/tfjob_submit.py before its task runs: {each:.1f} s "
        "in a fresh process (measurement 4, under that step's load), an upper bound here: "
        f"the quickest task rows above take {quickest:.1f} s from start to end, import "
        "included. With bytecode cached (the first step of `make bench`) the DAG file's own "
        "imports are the provider's KubernetesPodOperator module and the Kubernetes clients, "
        "which `TrainingLaunchOperator` (a KubernetesPodOperator subclass) needs at parse time.",
        "",
    ] + describe_imports(submit_imports)


def describe_imports(imports: Mapping[str, float] | None) -> list[str]:
    if not imports:
        return []
    listed = ", ".join(f"`{module}` {seconds:.1f} s" for module, seconds in imports.items())
    return [
        "What the DAG file adds to a process that already has Airflow's core (`python -X "
        f"importtime`, cumulative, one run): {listed}.",
        "",
    ]
