"""Where the seconds of one pipeline run go, read from Airflow's REST API only (issue 29).

Only the REST API is read (task instances, the DAG's task graph, each task's
log, one XCom), so the same code traces a world of any version of this
project, 71c72db's included. Each task's log is Airflow's structured JSON
whose events mark the task process's life:

    ::group::Pre Execute       the task process is up
    DAG bundles loaded         the execution API's ti-run answered
    Worker startup parse complete   the DAG file is parsed (`dag_file_parse_ms`)
    ::endgroup::               pre-execute done: the operator starts
    ::group::Post Execute      the operator returned (or deferred)
    Pausing task as DEFERRED   the process hands the task to the triggerer

A deferred task (train) has two processes in one try's log; the second one is
woken by the trigger, which is measured from the chief's exit (pod status).
The functions below `read_trace` are pure: tests/bench/test_bench_trace_run.py
feeds them a recorded run's REST answers.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.airflow_runs import SUBMIT_DAG_ID, parse_time, read_pages
from bench.stats import summarise

PRE_EXECUTE = "::group::Pre Execute"
BUNDLES_LOADED = "DAG bundles loaded"
PARSE_COMPLETE = "Worker startup parse complete"
END_GROUP = "::endgroup::"
POST_EXECUTE = "::group::Post Execute"
DEFERRED = "Pausing task as DEFERRED"

# The phases of one task process, in order; each is the time between two marks.
TASK_PHASES = (
    "pickup",  # upstream's end → scheduled; resumed: the chief's exit → scheduled
    "queue",  # scheduled → queued
    "process_start",  # queued → Pre Execute (the executor forks, the interpreter and Airflow load)
    "ti_run_api",  # Pre Execute → DAG bundles loaded
    "dag_parse",  # DAG bundles loaded → parse complete
    "prepare",  # parse complete → pre-execute done
    "work",  # the operator's own work
    "finish",  # Post Execute → end (deferred: → post-execute done)
)
RESUMED_SUFFIX = " (resumed)"
CLUSTERSPEC_TASK = "clusterspec"
TRAIN_TASK = "train"
PUBLISH_TASK = "publish"
METRICS_KEY = "metrics"
LOG_ROW_LIMIT = 20_000  # events read of one task's log; a digits-ps task writes < 100


@dataclass(frozen=True)
class ProcessMarks:
    """The marks of one task process, epoch seconds (None: the log has no such event)."""

    pre_execute: float
    bundles_loaded: float | None
    parse_complete: float | None
    parse_ms: float | None
    pre_done: float | None
    post_execute: float | None
    post_done: float | None  # the `::endgroup::` closing post-execute
    deferred: bool


def read_log_events(
    airflow: Any, run_id: str, task_id: str, try_number: int, dag_id: str = SUBMIT_DAG_ID
) -> list[dict[str, Any]]:
    """The structured events of one try's log (REST, JSON, the whole content)."""
    answer = airflow.request(
        "GET",
        f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
        "?full_content=true",
    )
    content = answer.get("content") or []
    if len(content) > LOG_ROW_LIMIT:
        raise ValueError(
            f"log of {task_id} try {try_number}: {len(content)} events; at most "
            f"{LOG_ROW_LIMIT} are read"
        )
    return [e for e in content if isinstance(e, dict)]


def read_trace(airflow: Any, run_id: str, dag_id: str = SUBMIT_DAG_ID) -> dict[str, Any]:
    """Every REST answer one run's trace needs, as recorded in the test fixture."""
    run = airflow.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
    tasks = airflow.request("GET", f"/api/v2/dags/{dag_id}/tasks")["tasks"]
    instances = read_pages(
        airflow, f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances", "task_instances"
    )
    logs = {
        ti["task_id"]: read_log_events(airflow, run_id, ti["task_id"], ti["try_number"], dag_id)
        for ti in instances
        if ti.get("try_number")
    }
    try:
        metrics = airflow.request(
            "GET",
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{TRAIN_TASK}"
            f"/xcomEntries/{METRICS_KEY}?deserialize=true",
        ).get("value")
    except Exception as exc:  # an older tree may push no metrics XCom; the phase is then unknown
        print(f"trace: no train metrics XCom ({type(exc).__name__})", flush=True)
        metrics = None
    return {
        "dag_run": run,
        "tasks": [
            {"task_id": t["task_id"], "downstream_task_ids": t.get("downstream_task_ids") or []}
            for t in tasks
        ],
        "task_instances": instances,
        "logs": logs,
        "metrics": metrics,
    }


def mark_processes(events: Sequence[Mapping[str, Any]]) -> list[ProcessMarks]:
    """The task processes of one try's log, each from its `Pre Execute` on."""
    timed = [
        (when, str(e.get("event", "")), e)
        for e in events
        if (when := parse_time(e.get("timestamp"))) is not None
    ]
    starts = [i for i, (_, text, _) in enumerate(timed) if text.startswith(PRE_EXECUTE)]
    processes = []
    for n, first in enumerate(starts):
        part = timed[first : starts[n + 1] if n + 1 < len(starts) else len(timed)]
        processes.append(mark_process(part))
    return processes


def mark_process(part: Sequence[tuple[float, str, Mapping[str, Any]]]) -> ProcessMarks:
    def first(prefix: str, after: float | None = None) -> tuple[float, Mapping[str, Any]] | None:
        for when, text, event in part:
            if text.startswith(prefix) and (after is None or when >= after):
                return when, event
        return None

    loaded = first(BUNDLES_LOADED)
    parsed = first(PARSE_COMPLETE)
    pre_done = first(END_GROUP, parsed[0] if parsed else None)
    post = first(POST_EXECUTE)
    # the triggerer's lines of a deferred task follow in the same log: the process ends here
    post_done = first(END_GROUP, post[0]) if post else None
    parse_ms = parsed[1].get("dag_file_parse_ms") if parsed else None
    return ProcessMarks(
        pre_execute=part[0][0],
        bundles_loaded=loaded[0] if loaded else None,
        parse_complete=parsed[0] if parsed else None,
        parse_ms=float(parse_ms) if parse_ms is not None else None,
        pre_done=pre_done[0] if pre_done else None,
        post_execute=post[0] if post else None,
        post_done=post_done[0] if post_done else None,
        deferred=first(DEFERRED) is not None,
    )


def span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else end - start


def split_process(
    marks: ProcessMarks,
    woken: float | None,
    scheduled: float | None,
    queued: float | None,
    ended: float | None,
) -> dict[str, float | None]:
    """One process's phases; `woken` is what the scheduler reacted to (upstream's end, the
    chief's exit). Without its own scheduled/queued times (a deferred task's first process:
    the task instance keeps only the last ones) pick-up + queue + process start is one span."""
    if scheduled is None or queued is None:
        pickup, queue, process_start = None, None, span(woken, marks.pre_execute)
    else:
        pickup, queue = span(woken, scheduled), span(scheduled, queued)
        process_start = span(queued, marks.pre_execute)
    end = marks.post_done if marks.deferred or ended is None else ended
    return {
        "pickup": pickup,
        "queue": queue,
        "process_start": process_start,
        "ti_run_api": span(marks.pre_execute, marks.bundles_loaded),
        "dag_parse": span(marks.bundles_loaded, marks.parse_complete),
        "prepare": span(marks.parse_complete, marks.pre_done),
        "work": span(marks.pre_done, marks.post_execute),
        "finish": span(marks.post_execute, end),
    }


def upstream_ends(
    tasks: Sequence[Mapping[str, Any]], ends: Mapping[str, float | None]
) -> dict[str, float | None]:
    """task → the latest end of its upstream tasks (None for a root task)."""
    found: dict[str, float | None] = {t["task_id"]: None for t in tasks}
    for task in tasks:
        for down in task["downstream_task_ids"]:
            end = ends.get(task["task_id"])
            if end is not None and (found.get(down) is None or end > found[down]):
                found[down] = end
    return found


def split_run(
    trace: Mapping[str, Any],
    chief_exit: float | None,
    tf_import_s: float | None,
) -> dict[str, Any]:
    """Per task (a deferred task's resumed process as `<task> (resumed)`) its phases, and the
    issue's headline figures; seconds."""
    run = trace["dag_run"]
    queued_at = parse_time(run.get("queued_at")) or parse_time(run.get("start_date"))
    instances = {ti["task_id"]: ti for ti in trace["task_instances"]}
    ends = {task: parse_time(ti.get("end_date")) for task, ti in instances.items()}
    upstream = upstream_ends(trace["tasks"], ends)
    tasks: dict[str, dict[str, float | None]] = {}
    parse_ms: dict[str, list[float]] = {}
    for task_id, ti in instances.items():
        processes = mark_processes(trace["logs"].get(task_id, []))
        if not processes:
            continue
        woken = upstream.get(task_id) if upstream.get(task_id) is not None else queued_at
        scheduled, queued = parse_time(ti.get("scheduled_when")), parse_time(ti.get("queued_when"))
        ended = ends.get(task_id)
        if len(processes) == 1:
            tasks[task_id] = split_process(processes[0], woken, scheduled, queued, ended)
        else:  # deferred: the instance's scheduled/queued times are the resumed process's
            tasks[task_id] = split_process(processes[0], woken, None, None, None)
            tasks[task_id + RESUMED_SUFFIX] = split_process(
                processes[-1], chief_exit, scheduled, queued, ended
            )
        parse_ms[task_id] = [p.parse_ms for p in processes if p.parse_ms is not None]
    run_end = parse_time(run.get("end_date")) or max((e for e in ends.values() if e), default=None)
    metrics = read_metrics(trace.get("metrics"))
    training = metrics.get("train_seconds")
    total = span(queued_at, run_end)
    besides = None
    if total is not None and training is not None and tf_import_s is not None:
        besides = total - float(training) - tf_import_s
    return {
        "run_id": run.get("dag_run_id"),
        "tasks": tasks,
        "dag_parse_ms": parse_ms,
        "tries": {t: ti.get("try_number") for t, ti in instances.items()},
        "headline": {
            "submit_to_clusterspec": span(queued_at, ends.get(CLUSTERSPEC_TASK)),
            "chief_exit_to_published": span(chief_exit, run_end),
            "besides_import_and_training": besides,
            "total": total,
            "tensorflow_import": tf_import_s,
            "training_loop": float(training) if training is not None else None,
        },
    }


def read_metrics(value: object) -> dict[str, Any]:
    """train's metrics XCom as REST gave it: a mapping, or its JSON text."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return dict(value) if isinstance(value, dict) else {}


def sum_phases(tasks: Mapping[str, Mapping[str, float | None]]) -> dict[str, float]:
    """Each phase summed over the run's task processes; a resumed process's pick-up is the
    trigger's wake-up and a deferred one's finish the deferral, each kept apart."""
    totals = {phase: 0.0 for phase in TASK_PHASES}
    totals |= {"deferral": 0.0, "trigger_wake_up": 0.0}
    resumed = {t[: -len(RESUMED_SUFFIX)] for t in tasks if t.endswith(RESUMED_SUFFIX)}
    for task, phases in tasks.items():
        for phase, value in phases.items():
            if value is None:
                continue
            if task.endswith(RESUMED_SUFFIX) and phase == "pickup":
                totals["trigger_wake_up"] += value
            elif task in resumed and phase == "finish":
                totals["deferral"] += value
            else:
                totals[phase] += value
    return totals


def median_serving_delay(serving: Sequence[float], delivered: float | None) -> float | None:
    """TensorFlow import + gRPC server start: ClusterSpec delivered → the replicas' median
    first `serving at` line."""
    if not serving or delivered is None:
        return None
    return statistics.median(serving) - delivered


def summarise_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians (min–max, n) of the headline figures, the phases summed over tasks, and each
    task's phases; None for a figure no run measured."""

    def of(values: list[float | None]) -> dict[str, float | int] | None:
        found = [v for v in values if v is not None]
        return summarise(found).as_dict() if found else None

    sums = [sum_phases(r["tasks"]) for r in runs]
    tasks = list(dict.fromkeys(t for r in runs for t in r["tasks"]))
    return {
        "headline": {k: of([r["headline"][k] for r in runs]) for k in runs[0]["headline"]},
        "phases": {k: of([s[k] for s in sums]) for k in sums[0]},
        "tasks": {
            t: {p: of([r["tasks"].get(t, {}).get(p) for r in runs]) for p in TASK_PHASES}
            for t in tasks
        },
        "load_average_1m": of([r["load_average"][0] for r in runs]),
    }
