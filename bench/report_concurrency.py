"""RESULTS.md section 5: a burst of distributed jobs under Airflow's slots (bench_concurrency.py).

Slots held, 5xx answers, jobs per minute against the last run on SQLite, what
bounds jobs per minute now, and the failed tasks with their log tails. Its own
module so each section of bench/report.py can be read alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.stats import format_ratio, format_summary, markdown_table, ratio, verdict

# The last concurrency run on SQLite (bench/RESULTS.md of 2026-12-02 17:41 UTC, before the
# metadata database moved to PostgreSQL): the baseline of the jobs-per-minute ratio.
SQLITE_BASELINE = {
    "date": "2026-12-02",
    "jobs": 10,
    "parallelism": 4,
    "jobs_per_minute": 6.28,
    "load": "0.7 4.1 6.0 at start, 3.1 4.2 5.6 at end",
}
# The cores count as the bound when the machine was at least this busy during the burst.
CPU_BOUND_SHARE = 0.85


def section_concurrency(data: Mapping[str, Any]) -> list[str]:
    slots = data["slots"]
    tasks = data.get("tasks") or {}
    cpu = data.get("cpu") or {}
    errors = data.get("server_error_count")
    base = SQLITE_BASELINE
    speedup = ratio(data["jobs_per_minute"], base["jobs_per_minute"])
    p90 = data.get("trigger_to_end_p90_s")
    # runs before the seconds were recorded sampled once a second: a sample was ~1 s
    in_slot_s = slots.get("train_running_s", slots["train_running_samples"])
    deferred_s = slots.get("train_deferred_s", slots["train_deferred_samples"])
    rows = [
        ["jobs succeeded", f"{data['succeeded']} / {data['jobs']}"],
        ["jobs per minute (jobs / (last end − first trigger))", f"{data['jobs_per_minute']:.2f}"],
        [
            f"against the last run on SQLite ({base['date']}: {base['jobs']} jobs, parallelism "
            f"{base['parallelism']}, {base['jobs_per_minute']:.2f} jobs/min)",
            format_ratio(speedup),
        ],
        [
            "5xx answers from Airflow seen by the bench's client (goal 0)",
            "not counted"
            if errors is None
            else f"{errors}"
            + (
                f" ({', '.join(f'{n}× {c}' for c, n in data['server_errors'].items())})"
                if errors
                else ""
            ),
        ],
        [
            "trigger → end per job",
            format_summary(data["trigger_to_end_s"])
            + (f"; 90th percentile {p90:.2f} s" if p90 is not None else ""),
        ],
        ["most jobs training (train deferred, no slot) at once", slots["max_training_at_once"]],
        [
            "worker slots held by jobs while their pods train (train deferred), most at once",
            slots.get("max_slots_held_by_training_jobs", "–"),
        ],
        [
            "task instances running (executor slots): most at once; time-weighted mean",
            f"{slots['max_running']} of {data['parallelism']}"
            + (f"; {slots['mean_running']:.1f}" if "mean_running" in slots else ""),
        ],
        [
            "per job, train task in a slot (execute, then finish) vs deferred (no slot), ~s",
            f"{in_slot_s / data['jobs']:.0f} s vs {deferred_s / data['jobs']:.0f} s "
            f"({slots['train_share_in_slot']:.0%} of its samples in a slot)",
        ],
    ]
    if tasks:
        wait_p90 = tasks.get("queued_to_start_p90_s")
        rows += [
            [
                "most task instances waiting (scheduled or queued) at once",
                slots.get("max_waiting", "–"),
            ],
            [
                "task queued → started (the executor starting its process)",
                format_summary(tasks.get("queued_to_start_s"))
                + (f"; 90th percentile {wait_p90:.2f} s" if wait_p90 is not None else ""),
            ],
            [
                "task start → end, tasks other than train (a slot held)",
                format_summary(tasks.get("task_in_slot_s")),
            ],
        ]
    if cpu:
        rows.append(
            [
                "the machine's CPU busy over the burst (all its work, others' included)",
                f"{cpu['busy_share']:.0%} of {cpu['cores']} cores; load average after "
                + " ".join(f"{x:.1f}" for x in cpu.get("load_after", [])),
            ]
        )
    held = slots.get("max_slots_held_by_training_jobs")
    all_ok = data["succeeded"] == data["jobs"]
    none_held = held == 0 and slots["train_deferred_samples"] > 0
    no_errors = errors == 0
    met = all_ok and none_held and no_errors and slots["max_running"] <= data["parallelism"]
    failures = data.get("failures") or []
    failed_text = []
    if failures:
        listed = "; ".join(f"task `{f['task']}` of {f['run_id']}: {f['cause']}" for f in failures)
        tails = [
            f"Log tail of `{f['task']}` ({f['run_id']}):\n\n```\n"
            + "\n".join(line[:300] for line in f.get("log_tail", [])[-25:])
            + "\n```\n"
            for f in failures
            if f.get("log_tail")
        ]
        why = (
            " A DagBag import timeout means the task process could not import "
            "dags/tfjob_submit.py within Airflow's `dagbag_import_timeout` while "
            f"{slots['max_running']} task processes and the jobs' pods shared the cores (the "
            "file alone takes the time in 4; its imports are listed in 3)."
            if any(f["cause"] == "DagBag import timeout" for f in failures)
            else ""
        )
        failed_text = [f"Failed: {listed}.{why}", "", *tails]
    return [
        f"## 5. Concurrency: {data['jobs']} distributed stand-in jobs at once, parallelism "
        f"{data['parallelism']}",
        "",
        f'chief + ps + 2 workers each; the chief "trains" for {data["train_seconds"]} s. '
        f"Airflow's metadata database: {data.get('database', 'sqlite')}. Task instances of all "
        "runs sampled over the REST API, a second apart plus the time the API took to answer "
        f"({slots['samples']} samples in {data.get('span_s', 0):.0f} s); `running` "
        "holds an executor slot, `deferred` (the train task while the pods train) does not.",
        "",
        markdown_table(["what", "value"], rows),
        "",
        f"All succeed ({verdict(all_ok)}), no worker slot held while training "
        f"({verdict(none_held)}) and no 5xx answer ({verdict(no_errors)}): {verdict(met)}. The "
        "train task still holds a slot while it starts and defers (`execute`) and when it resumes "
        "to read the logs (`finish`): each is a whole Airflow task process (start, DAG-file "
        "import as in 3 and 4, API round trips); the pods train meanwhile.",
        "",
        describe_bound(data),
        "",
        *failed_text,
    ]


def describe_errors(data: Mapping[str, Any]) -> str:
    count = data.get("server_error_count")
    if count is None:
        return "not counted"
    by_status = ", ".join(f"{n}× {code}" for code, n in data.get("server_errors", {}).items())
    return f"{count} ({by_status})" if count else "0"


def describe_bound(data: Mapping[str, Any]) -> str:
    """What bounded jobs per minute in this run, judged from the slots and the CPU figures."""
    slots, cpu = data["slots"], data.get("cpu") or {}
    parallelism = data["parallelism"]
    base = SQLITE_BASELINE
    compare = (
        f"The ratio compares a burst of {data['jobs']} with one of {base['jobs']}: a larger "
        "burst spreads the first tasks' start and the last job's end over more jobs."
        if data["jobs"] != base["jobs"]
        else ""
    )
    if "mean_running" not in slots or not cpu:
        return (
            f"What bounds jobs per minute: the jobs' tasks queue for the {parallelism} slots. "
            + compare
        ).strip()
    busy = cpu["busy_share"]
    load = " ".join(f"{x:.1f}" for x in cpu.get("load_after", []))
    in_slot = (data.get("tasks") or {}).get("task_in_slot_s")
    queued = (data.get("tasks") or {}).get("queued_to_start_s")
    speedup = format_ratio(ratio(data["jobs_per_minute"], base["jobs_per_minute"]))
    if slots["max_running"] >= parallelism and slots["mean_running"] >= 0.75 * parallelism:
        bound = (
            f"What bounds jobs per minute: the {parallelism} slots (all in use most of the "
            f"burst, {slots['mean_running']:.1f} on average)."
        )
    elif busy >= CPU_BOUND_SHARE:
        held = (
            f" yet each task other than train held its slot a median {in_slot['median']:.0f} s "
            f"(up to {in_slot['max']:.0f} s) where section 3 shows the same tasks taking 1–2 s "
            "one job at a time"
            if in_slot
            else ""
        )
        bound = (
            f"What bounds jobs per minute: the {cpu['cores']} cores, not the {parallelism} "
            f"slots. The cores were {busy:.0%} busy over the burst (load average {load} at its "
            "end; other work on the shared machine included), at most "
            f"{slots['max_running']} of the {parallelism} slots were in use "
            f"({slots['mean_running']:.1f} on average) and tasks started "
            + (f"a median {queued['median']:.1f} s " if queued else "soon ")
            + f"after they were queued,{held}: every task is a whole Python process "
            "(interpreter, Airflow, the DAG file, API round trips), and that many at once, next "
            "to the scheduler, API server, triggerer, DAG processor, PostgreSQL and the jobs' "
            "pods, share the cores. The train task, slowed the same way, was often still "
            "launching when its pods had already trained (the share of its life in a slot "
            "above). In this run more slots did not raise jobs per minute: against "
            f"{base['parallelism']} slots on SQLite (load average {base['load']}) the rate is "
            f"{speedup}, under another load and with another burst size, so not a clean "
            "comparison of slot counts. PostgreSQL took away the 5xx answers, not the CPU cost "
            "of a task; more cores, or "
            "fewer and cheaper task processes per job, would."
        )
    else:
        bound = (
            f"What bounds jobs per minute: neither the {parallelism} slots (at most "
            f"{slots['max_running']} in use, {slots['mean_running']:.1f} on average) nor the "
            f"{cpu['cores']} cores alone ({busy:.0%} busy): the jobs' own length (the pods "
            "start, train, are torn down) and Airflow's scheduling loop between one task's end "
            "and the next one's queueing."
        )
    return f"{bound} {compare}".strip()
