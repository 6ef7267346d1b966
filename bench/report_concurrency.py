"""RESULTS.md section 5: 10 distributed jobs at once under parallelism 4 (bench_concurrency.py).

Slots held, jobs per minute, and the failed tasks with their log tails. Its own
module so each section of bench/report.py can be read alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stats import format_summary, markdown_table, verdict


def section_concurrency(data: Mapping[str, Any]) -> list[str]:
    slots = data["slots"]
    rows = [
        ["jobs succeeded", f"{data['succeeded']} / {data['jobs']}"],
        ["jobs per minute (jobs / (last end − first trigger))", f"{data['jobs_per_minute']:.2f}"],
        ["trigger → end per job", format_summary(data["trigger_to_end_s"])],
        ["most jobs training (train deferred, no slot) at once", slots["max_training_at_once"]],
        [
            "worker slots held by jobs while their pods train (train deferred), most at once",
            slots.get("max_slots_held_by_training_jobs", "–"),
        ],
        [
            "most task instances running at once (executor slots)",
            f"{slots['max_running']} of {data['parallelism']}",
        ],
        [
            "per job, train task in a slot (execute, then finish) vs deferred (no slot), ~s",
            f"{slots['train_running_samples'] / data['jobs']:.0f} s vs "
            f"{slots['train_deferred_samples'] / data['jobs']:.0f} s "
            f"({slots['train_share_in_slot']:.0%} of its sampled life in a slot)",
        ],
    ]
    held = slots.get("max_slots_held_by_training_jobs")
    all_ok = data["succeeded"] == data["jobs"]
    none_held = held == 0 and slots["train_deferred_samples"] > 0
    met = all_ok and none_held and slots["max_running"] <= data["parallelism"]
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
            "dags/tfjob_submit.py within Airflow's 30 s `dagbag_import_timeout` while 4 task "
            "processes and the jobs' pods shared the two cores (the file alone takes the time "
            "in 4; its imports are listed in 3)."
            if any(f["cause"] == "DagBag import timeout" for f in failures)
            else " In the rehearsal before this run, the same kind of failure was a DagBag "
            "import timeout of dags/tfjob_submit.py (30 s) while the task process started."
        )
        failed_text = [f"Failed: {listed}.{why}", "", *tails]
    return [
        "## 5. Concurrency: 10 distributed stand-in jobs at once, parallelism 4",
        "",
        f'chief + ps + 2 workers each; the chief "trains" for {data["train_seconds"]} s. Task '
        "instances of all runs sampled every second over the REST API; `running` holds an "
        "executor slot, `deferred` (the train task while the pods train) does not.",
        "",
        markdown_table(["what", "value"], rows),
        "",
        f"All succeed ({verdict(all_ok)}) and no worker slot held while training "
        f"({verdict(none_held)}): {verdict(met)}. The train "
        "task still holds one while it starts and defers (`execute`) and when it resumes to "
        "read the logs (`finish`): each is a whole Airflow task process (start, DAG-file "
        "import as in 3 and 4, API round trips); the pods train meanwhile. With a "
        f"{data['train_seconds']} s stand-in training that is a large share of the task's "
        "life; with real training it is the same few seconds. The jobs' other tasks queue for "
        "the 4 slots, which is what bounds jobs per minute.",
        "",
        *failed_text,
    ]
