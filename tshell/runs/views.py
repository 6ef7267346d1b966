"""How the run commands show runs and tasks: aligned tables, short times, JSON.

Why this exists: tables by default for people, `--json` for scripts; one place
decides what a run summary holds so both forms agree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TextIO

from tfjob.jsontypes import JsonObject
from tfjob.pipeline_ids import request_name_of_dag, tenant_of_submit_dag


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[("" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def short_time(value: str | None) -> str:
    return value[:19].replace("T", " ") if value else ""


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def summarize_run(run: JsonObject, dag_tenant: str | None = None) -> JsonObject:
    """The run's line of `tshell list`. A run of a request-file DAG has no conf (a scheduled
    one never has): its name comes from the DAG id, its tenant from the DAG's tag
    (`dag_tenant`); a submit DAG's tenant is in its id."""
    conf = run.get("conf") or {}
    dag_id = run["dag_id"]
    return {
        "run_id": run["dag_run_id"],
        "dag_id": dag_id,
        "state": run["state"],
        "name": conf.get("name") or request_name_of_dag(dag_id),
        "tenant": conf.get("tenant") or dag_tenant or tenant_of_submit_dag(dag_id),
        "start_date": run.get("start_date"),
        "end_date": run.get("end_date"),
        "duration": run.get("duration"),
    }


def task_rows(tasks: Sequence[JsonObject]) -> list[list[object]]:
    return [
        [
            t["task_id"],
            t.get("state") or "none",
            t.get("try_number"),
            short_time(t.get("start_date")),
            format_duration(t.get("duration")),
        ]
        for t in tasks
    ]


TASK_HEADERS = ("task", "state", "try", "started", "duration")
ATTEMPT_HEADERS = (
    "attempt",
    "outcome",
    "started",
    "ended",
    "from step",
    "replica",
    "exit",
    "reason",
)


def attempt_rows(attempts: Sequence[JsonObject]) -> list[list[object]]:
    """One row per gang of the run (train's XCom `attempts`, as run.json lists them)."""
    return [
        [
            a.get("number"),
            a.get("outcome"),
            short_time(a.get("started")),
            short_time(a.get("ended")),
            a.get("restored_checkpoint_step"),  # the checkpoint the gang resumed from
            a.get("failed_replica"),
            a.get("exit_code"),
            a.get("reason"),
        ]
        for a in attempts
    ]


def emit_json(value: object, out: TextIO) -> None:
    out.write(json.dumps(value, indent=2, default=str) + "\n")
