#!/usr/bin/env python3
"""Measurement 5: 10 distributed stand-in jobs submitted at once, Airflow parallelism 4 (issue 8).

    python bench/bench_concurrency.py --world DIR [--jobs 10] [--train-seconds 15]

Every job (chief + ps + 2 workers, the stand-in program: its chief "trains"
for `--train-seconds`, the ps runs until torn down) is triggered through the
REST API of the world tenant's submit DAG (`tfjob_submit__test`) within a
second of the others, against the world's Airflow (this repo's airflow.cfg:
parallelism 4, LocalExecutor).
While they run, the task instances of all runs are sampled every second:
which are `running` (each holds one of the executor's 4 slots) and which are
`deferred` (waiting in the triggerer, holding none). Reported: all succeed;
slots held by train tasks while training (deferred) jobs exist; the most
jobs training at once; jobs per minute (jobs / (last success − first
trigger)). Writes bench/out/concurrency.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(BENCH))

from airflow_runs import (  # noqa: E402
    FINISHED,
    SUBMIT_DAG_ID,
    parse_time,
    read_task_instances,
    trigger_run,
)
from stats import summarise  # noqa: E402
from world import load_airflow, load_world  # noqa: E402

SAMPLE_INTERVAL_S = 1.0
RUN_TIMEOUT_S = 540
PARALLELISM = 4


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
    """From samples of {t, running: [task ids], deferred: [task ids]}: slot use while training.

    A train task in `deferred` waits in the triggerer and holds no executor slot; it is
    `running` (holding one) only while it starts and defers, and when it resumes to finish.
    """
    train_running = sum(s["running"].count("train") for s in samples)
    train_deferred = sum(s["deferred"].count("train") for s in samples)
    observed = train_running + train_deferred
    return {
        "samples": len(samples),
        "samples_with_training": sum(1 for s in samples if "train" in s["deferred"]),
        "max_running": max((len(s["running"]) for s in samples), default=0),
        "max_training_at_once": max((s["deferred"].count("train") for s in samples), default=0),
        "max_slots_held_by_training_jobs": max(
            (s.get("held_by_training_jobs", 0) for s in samples), default=0
        ),
        "train_running_samples": train_running,
        "train_deferred_samples": train_deferred,
        "train_share_in_slot": train_running / observed if observed else 0.0,
    }


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
    parser.add_argument("--jobs", type=int, default=15)
    parser.add_argument("--train-seconds", type=int, default=15)
    parser.add_argument("--out", type=Path, default=BENCH / "out" / "concurrency.json")
    args = parser.parse_args()
    world, _record = load_world(args.world)
    airflow = load_airflow(args.world)
    stamp = time.strftime("%H%M%S")
    runs: dict[str, float] = {}
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
            if ti["task_id"] == "train" and ti["state"] == "deferred"
        }
        samples.append(
            {
                "t": time.time() - first,
                "running": [ti["task_id"] for ti in instances if ti["state"] == "running"],
                "deferred": [ti["task_id"] for ti in instances if ti["state"] == "deferred"],
                # slots held by jobs whose pods are training right now (train deferred)
                "held_by_training_jobs": sum(
                    1
                    for ti in instances
                    if ti["state"] == "running" and ti["dag_run_id"] in training_runs
                ),
            }
        )
        listing = airflow.request("GET", f"/api/v2/dags/{SUBMIT_DAG_ID}/dagRuns?limit=1000")
        for run in listing["dag_runs"]:
            if run["dag_run_id"] in runs and run["state"] in FINISHED:
                states[run["dag_run_id"]] = run
        if len(states) == len(runs):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{len(runs) - len(states)} of {len(runs)} runs unfinished after {RUN_TIMEOUT_S}s"
            )
        time.sleep(SAMPLE_INTERVAL_S)
    ends = {r: parse_time(s["end_date"]) for r, s in states.items()}
    durations = [ends[r] - runs[r] for r in runs]
    span = max(ends.values()) - first
    report = {
        "jobs": args.jobs,
        "succeeded": sum(1 for s in states.values() if s["state"] == "success"),
        "parallelism": PARALLELISM,
        "train_seconds": args.train_seconds,
        "span_s": span,
        "jobs_per_minute": args.jobs / span * 60,
        "trigger_to_end_s": summarise(durations).as_dict(),
        "slots": summarise_samples(samples),
        "failures": explain_failures(airflow, states),
        "timeline": samples,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(
        f"concurrency: {report['succeeded']}/{args.jobs} succeeded in {span:.1f}s "
        f"({report['jobs_per_minute']:.1f} jobs/min); slots {report['slots']}",
        flush=True,
    )
    return 0 if report["succeeded"] == args.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
