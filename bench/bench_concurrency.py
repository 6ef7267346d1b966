#!/usr/bin/env python3
"""Measurement 5: 20 distributed stand-in jobs submitted at once, Airflow's parallelism (issue 8).

    python bench/bench_concurrency.py --world DIR [--jobs 20] [--train-seconds 15]

Every job (chief + ps + 2 workers, the stand-in program: its chief "trains"
for `--train-seconds`, the ps runs until torn down) is triggered through the
REST API of the world tenant's submit DAG (`tfjob_submit__test`) within a
second of the others, against the world's Airflow (this repo's airflow.cfg:
its `parallelism`, 16 on PostgreSQL; LocalExecutor).
While they run, the task instances of all runs are sampled every second:
which are `running` (each holds one of the executor's slots), which wait for
one (`scheduled`, `queued`) and which are `deferred` (waiting in the
triggerer, holding none); the machine's CPU time is read from /proc/stat
around the burst. Reported: all succeed; every 5xx answer the bench's client
got from Airflow (goal 0: PostgreSQL takes concurrent writers; any 5xx fails
the measurement); slots held by train tasks while training (deferred) jobs
exist; the most jobs training at once; how long tasks waited from queued to
started; jobs per minute (jobs / (last success − first trigger)). Writes
bench/out/concurrency.json; exits 1 when a job failed or a 5xx was seen.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

from bench.airflow_runs import (  # noqa: E402
    FINISHED,
    SUBMIT_DAG_ID,
    parse_time,
    read_dag_runs,
    read_task_instances,
    trigger_run,
)
from bench.stats import summarise  # noqa: E402
from bench.world import airflow_parallelism, load_airflow, load_world  # noqa: E402
from tfjob.pipeline_ids import TRAIN_TASK  # noqa: E402

SAMPLE_INTERVAL_S = 1.0
RUN_TIMEOUT_S = 660
WAITING = ("scheduled", "queued")  # ready to run, waiting for an executor slot or its start


def build_conf(world: Any, name: str, train_seconds: int) -> dict[str, Any]:
    body = world.request(
        name,
        mode="distributed",
        strategy="parameter_server",
        replicas={"chief": 1, "ps": 1, "worker": 2},
        success_policy="chief",
        startup_timeout=240,
        active_deadline=900,
        env={"STANDIN_BEHAVIOUR": json.dumps({"chief-0": {"sleep": train_seconds}})},
    )
    return body


def summarise_samples(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """From samples of {t, running: [task ids], deferred: [task ids], waiting: [task ids]}:
    slot use while training, and how many slots were in use on average (time-weighted).

    A train task in `deferred` waits in the triggerer and holds no executor slot; it is
    `running` (holding one) only while it starts and defers, and when it resumes to finish.
    """
    train_running = sum(s["running"].count(TRAIN_TASK) for s in samples)
    train_deferred = sum(s["deferred"].count(TRAIN_TASK) for s in samples)
    observed = train_running + train_deferred
    span = samples[-1]["t"] - samples[0]["t"] if len(samples) > 1 else 0.0
    pairs = list(zip(samples, samples[1:], strict=False))

    def area(count: Any) -> float:  # seconds-weighted: samples come slower when Airflow is busy
        return sum(count(before) * (after["t"] - before["t"]) for before, after in pairs)

    running_area = area(lambda s: len(s["running"]))
    return {
        "samples": len(samples),
        "samples_with_training": sum(1 for s in samples if TRAIN_TASK in s["deferred"]),
        "max_running": max((len(s["running"]) for s in samples), default=0),
        "mean_running": running_area / span if span > 0 else 0.0,
        "max_waiting": max((len(s.get("waiting", [])) for s in samples), default=0),
        "max_training_at_once": max((s["deferred"].count(TRAIN_TASK) for s in samples), default=0),
        "max_slots_held_by_training_jobs": max(
            (s.get("held_by_training_jobs", 0) for s in samples), default=0
        ),
        "train_running_samples": train_running,
        "train_deferred_samples": train_deferred,
        "train_running_s": area(lambda s: s["running"].count(TRAIN_TASK)),
        "train_deferred_s": area(lambda s: s["deferred"].count(TRAIN_TASK)),
        "train_share_in_slot": train_running / observed if observed else 0.0,
    }


def read_cpu_times() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return (total - idle) / ticks, total / ticks


def summarise_task_waits(instances: list[dict[str, Any]]) -> dict[str, Any]:
    """Queued → started per task instance (the executor starting its process), and how long the
    tasks other than `train` (which defers) held their slot."""
    waits, held = [], []
    for ti in instances:
        queued, start, end = (
            parse_time(ti.get(k)) for k in ("queued_when", "start_date", "end_date")
        )
        if queued is not None and start is not None and start >= queued:
            waits.append(start - queued)
        if ti["task_id"] != TRAIN_TASK and start is not None and end is not None:
            held.append(end - start)
    return {
        "queued_to_start_s": summarise(waits).as_dict() if waits else None,
        "queued_to_start_p90_s": percentile_90(waits),
        "task_in_slot_s": summarise(held).as_dict() if held else None,
        "slot_seconds_besides_train": sum(held),
    }


def percentile_90(values: list[float]) -> float | None:
    return statistics.quantiles(values, n=10)[-1] if len(values) >= 2 else None


def read_log_lines(body: Any) -> list[str]:
    """The text lines of Airflow 3's structured task log (`content`: events or strings)."""
    content = body.get("content", body) if isinstance(body, dict) else body
    if isinstance(content, str):
        return content.splitlines()
    lines = []
    for entry in content or []:
        if isinstance(entry, dict):
            extra = {k: v for k, v in entry.items() if k not in ("event", "timestamp", "logger")}
            level = str(entry.get("level", "")).upper()
            lines.append(
                f"{entry.get('timestamp', '')} {level} {entry.get('event', '')}"
                + (
                    f" {json.dumps(extra, default=str)[:400]}"
                    if "error_detail" in extra or "exception" in extra
                    else ""
                )
            )
        else:
            lines.append(str(entry))
    return lines


def explain_failures(airflow: Any, states: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """For each run that did not succeed: its failed tasks and the known cause in their logs."""
    failures = []
    for run_id, run in states.items():
        if run["state"] == "success":
            continue
        for ti in read_task_instances(airflow, run_id):
            if ti["state"] != "failed":
                continue
            path = (
                f"/api/v2/dags/{SUBMIT_DAG_ID}/dagRuns/{run_id}/taskInstances/{ti['task_id']}"
                f"/logs/{max(1, ti.get('try_number') or 1)}"
            )
            try:
                lines = read_log_lines(airflow.request("GET", path))
            except Exception as exc:  # the figure stands without the reason
                lines = [f"log not readable: {exc}"]
            text = "\n".join(lines)
            cause = (
                "DagBag import timeout" if "DagBag import timeout" in text else "see the log tail"
            )
            failures.append(
                {"run_id": run_id, "task": ti["task_id"], "cause": cause, "log_tail": lines[-40:]}
            )
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", required=True, type=Path)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--train-seconds", type=int, default=15)
    parser.add_argument("--out", type=Path, default=BENCH / "out" / "concurrency.json")
    args = parser.parse_args()
    world, _record = load_world(args.world)
    airflow = load_airflow(args.world)
    stamp = time.strftime("%H%M%S")
    runs: dict[str, float] = {}
    cpu_before = read_cpu_times()
    for index in range(args.jobs):
        run_id, sent = trigger_run(
            airflow, build_conf(world, f"conc-{stamp}-{index}", args.train_seconds)
        )
        runs[run_id] = sent
    first = min(runs.values())
    samples = []
    states: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        instances = [ti for ti in read_task_instances(airflow, "~") if ti["dag_run_id"] in runs]
        training_runs = {
            ti["dag_run_id"]
            for ti in instances
            if ti["task_id"] == TRAIN_TASK and ti["state"] == "deferred"
        }
        samples.append(
            {
                "t": time.time() - first,
                "running": [ti["task_id"] for ti in instances if ti["state"] == "running"],
                "deferred": [ti["task_id"] for ti in instances if ti["state"] == "deferred"],
                "waiting": [ti["task_id"] for ti in instances if ti["state"] in WAITING],
                # slots held by jobs whose pods are training right now (train deferred)
                "held_by_training_jobs": sum(
                    1
                    for ti in instances
                    if ti["state"] == "running" and ti["dag_run_id"] in training_runs
                ),
            }
        )
        for run in read_dag_runs(airflow, SUBMIT_DAG_ID):
            if run["dag_run_id"] in runs and run["state"] in FINISHED:
                states[run["dag_run_id"]] = run
        if len(states) == len(runs):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{len(runs) - len(states)} of {len(runs)} runs unfinished after {RUN_TIMEOUT_S}s"
            )
        time.sleep(SAMPLE_INTERVAL_S)
    cpu_after = read_cpu_times()
    load_after = os.getloadavg()
    ends = {r: parse_time(s["end_date"]) for r, s in states.items()}
    durations = [ends[r] - runs[r] for r in runs]
    span = max(ends.values()) - first
    instances = [ti for ti in read_task_instances(airflow, "~") if ti["dag_run_id"] in runs]
    report = {
        "jobs": args.jobs,
        "succeeded": sum(1 for s in states.values() if s["state"] == "success"),
        "parallelism": airflow_parallelism(),
        "database": "postgresql",
        "train_seconds": args.train_seconds,
        "span_s": span,
        "jobs_per_minute": args.jobs / span * 60,
        "trigger_to_end_s": summarise(durations).as_dict(),
        "trigger_to_end_p90_s": percentile_90(durations),
        "server_errors": {str(code): n for code, n in sorted(airflow.server_errors.items())},
        "server_error_count": sum(airflow.server_errors.values()),
        "slots": summarise_samples(samples),
        "tasks": summarise_task_waits(instances),
        "cpu": {
            "cores": os.cpu_count(),
            "busy_share": (cpu_after[0] - cpu_before[0]) / max(1e-9, cpu_after[1] - cpu_before[1]),
            "load_after": load_after,
        },
        "failures": explain_failures(airflow, states),
        "timeline": samples,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(
        f"concurrency: {report['succeeded']}/{args.jobs} succeeded in {span:.1f}s "
        f"({report['jobs_per_minute']:.2f} jobs/min), parallelism {report['parallelism']}, "
        f"5xx answers {report['server_error_count']} {report['server_errors']}; "
        f"cores {report['cpu']['busy_share']:.0%} busy; slots {report['slots']}; "
        f"tasks {report['tasks']}",
        flush=True,
    )
    if report["server_error_count"]:
        print(f"concurrency: FAILED: Airflow answered 5xx {report['server_errors']}", flush=True)
    ok = report["succeeded"] == args.jobs and not report["server_error_count"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
