"""tshell status: a run's state, tasks, attempts and replicas, once or redrawn live.

Why this exists apart from tshell/runs/commands.py: status is read by people while a
training runs, so it has a live form, `--watch` (like `kubectl get -w`, but
for a run): every poll it redraws one frame (tasks, the replicas with their
pod phase and the latest point of each replica's curves) in place on a
terminal, or writes a new frame when something changed when the output is a
file or a pipe; it ends with the run. The curves' points are the
`TFJOB_METRIC {json}` lines of the replicas (runtime/metric_lines.py), read
from `train`'s task log, where the trigger writes each replica's lines with a
`[<role>-<index>]` prefix; Airflow serves that log to anyone who may read the
run, so no cluster access is needed. A run whose task failed ends with the
reason (tshell/runs/failure.py).
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from runtime.metric_lines import MetricPoint, parse_metric_line
from tfjob.jsontypes import JsonObject
from tfjob.pipeline_ids import TRAIN_TASK
from tshell.airflow_client import AirflowClientError, AirflowSession
from tshell.command import open_session, set_command
from tshell.exitcodes import CommandError, ExitCode
from tshell.runs.commands import (
    POLL_INTERVAL_S,
    TASK_SUMMARY_FIELDS,
    ReplicaWatcher,
    RunState,
    add_common,
    call_patiently,
    fetch_attempts,
    fetch_replica_endpoints,
    fetch_run_description,
    list_task_instances,
)
from tshell.runs.failure import read_run_failure
from tshell.runs.logs import fetch_task_log
from tshell.runs.lookup import RunRef, explain_forbidden_on_run, find_run, run_ui_url
from tshell.runs.views import (
    ATTEMPT_HEADERS,
    TASK_HEADERS,
    attempt_rows,
    emit_json,
    format_duration,
    format_table,
    short_time,
    summarize_run,
    task_rows,
)

CLEAR_SCREEN = "\x1b[H\x1b[J"
# The curve columns a frame shows at most (step first), so that it fits a terminal.
MAX_METRIC_COLUMNS = 4
_REPLICA_LINE = re.compile(r"^\[(?P<replica>[a-z]+-\d+)\] (?P<text>.*)$")


def cmd_status(args: argparse.Namespace, out: TextIO) -> ExitCode:
    if args.watch and args.json:
        raise CommandError(
            "--watch redraws a table for people; leave out --json (or poll "
            "`tshell status RUN --json` yourself)",
            ExitCode.INVALID_REQUEST,
        )
    config, session = open_session()
    run = find_run(session, args.run, args.dag)
    ref = RunRef(run["dag_id"], run["dag_run_id"])
    if args.watch:
        with explain_forbidden_on_run(session, "read", ref):
            watch_run(
                session,
                ref,
                ReplicaWatcher(config, session, ref),
                out,
                args.poll_interval,
                out.isatty(),
            )
        return ExitCode.OK
    with explain_forbidden_on_run(session, "read", ref):
        tasks = list_task_instances(session, ref)
        described = fetch_run_description(session, ref)
        summary = summarize_run(run, described.tenant if described else None)
        pods = ReplicaWatcher(config, session, ref).list_pods()
        attempts = fetch_attempts(session, ref)
        # A failed task's error is the reason, even while archive and teardown still run.
        failed = any(t.get("state") == "failed" for t in tasks)
        if args.json:
            summary["attempts"] = attempts
            summary["tasks"] = [{k: t.get(k) for k in TASK_SUMMARY_FIELDS} for t in tasks]
            summary["replicas"] = fetch_replica_endpoints(session, ref)
            summary["pods"] = (
                None
                if pods is None
                else [{"replica": p.replica_id, "pod": p.name, "phase": p.phase} for p in pods]
            )
            summary["url"] = run_ui_url(session, ref)
            failure = read_run_failure(session, ref, tasks) if failed else None
            summary["failure"] = failure.to_payload() if failure else None
            emit_json(summary, out)
            return ExitCode.OK
        out.write(f"run      {ref.run_id}\nDAG      {ref.dag_id}\nstate    {run['state']}\n")
        if summary["name"]:
            out.write(f"request  {summary['name']} (tenant {summary['tenant']})\n")
        out.write(f"started  {short_time(run.get('start_date'))}\n")
        if run.get("end_date"):
            out.write(
                f"ended    {short_time(run['end_date'])} ({format_duration(run.get('duration'))})\n"
            )
        out.write(f"UI       {run_ui_url(session, ref)}\n\n")
        out.write(format_table(TASK_HEADERS, task_rows(tasks)) + "\n")
        if attempts and len(attempts) > 1:  # a restarted run: each gang, and why it ended
            out.write("\n" + format_table(ATTEMPT_HEADERS, attempt_rows(attempts)) + "\n")
        endpoints = fetch_replica_endpoints(session, ref)
        if endpoints:
            out.write("\nreplicas\n")
            for role, addresses in endpoints.items():
                out.write(f"  {role}: {', '.join(map(str, addresses))}\n")
        if pods:
            out.write(
                "\n"
                + format_table(
                    ("replica", "phase", "pod"), [[p.replica_id, p.phase, p.name] for p in pods]
                )
                + "\n"
            )
        failure = read_run_failure(session, ref, tasks) if failed else None
        if failure is not None:  # last: the reason is what the user reads first
            out.write("\n" + "\n".join(failure.describe()) + "\n")
        return ExitCode.OK


# --- --watch ------------------------------------------------------------------------------


class CurveReader:
    """The latest curve point of each replica, from `train`'s task log, read on from where
    the last poll stopped (a new try of train is read from its start)."""

    def __init__(self, session: AirflowSession, ref: RunRef) -> None:
        self.session, self.ref = session, ref
        self.latest: dict[str, MetricPoint] = {}
        self._try: int | None = None
        self._token: str | None = None
        self._seen: set[tuple[str, str]] = set()

    def read(self, train: Mapping[str, object] | None) -> dict[str, MetricPoint]:
        if train is None or train.get("state") in (None, "none", "scheduled", "queued"):
            return self.latest
        try_number = int(train.get("try_number") or 1)
        if try_number != self._try:
            self._try, self._token, self._seen = try_number, None, set()
        try:
            lines, token = fetch_task_log(
                self.session, self.ref, TRAIN_TASK, try_number, self._token, self._seen
            )
        except AirflowClientError:  # the log is not there yet, or Airflow blinked: next poll
            return self.latest
        self._token = token or self._token
        self.latest.update(read_latest_points(lines))
        return self.latest


def read_latest_points(lines: Sequence[str]) -> dict[str, MetricPoint]:
    """{replica: its last point} from task-log lines prefixed `[<role>-<index>] `."""
    latest: dict[str, MetricPoint] = {}
    for line in lines:
        match = _REPLICA_LINE.match(line)
        if match:
            point = parse_metric_line(match.group("text"))
            if point is not None:
                latest[match.group("replica")] = point
    return latest


def choose_metric_names(points: Mapping[str, MetricPoint]) -> list[str]:
    """The curve columns: `step` first, then the names in the order first reported."""
    names = list(dict.fromkeys(name for point in points.values() for name in point))
    names.sort(key=lambda name: name != "step")  # stable: the rest keep their order
    return names[:MAX_METRIC_COLUMNS]


def format_metric(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if value.is_integer() and abs(value) < 1e12 else f"{value:.4g}"


def render_watch_frame(
    run: Mapping[str, object],
    tasks: Sequence[JsonObject],
    replicas: Sequence[tuple[str, str, str]],
    points: Mapping[str, MetricPoint],
    attempts: Sequence[JsonObject] | None,
    now: str,
) -> str:
    """One frame of `--watch`: the run, its tasks, and one row per replica (`replicas`: (id,
    phase, pod) from the cluster, else none) with the latest point of its curves."""
    duration = run.get("duration")
    lines = [
        f"run {run['dag_run_id']} ({run['dag_id']}): {run['state']}"
        + (f", {format_duration(duration)}" if duration else "")
        + f"   at {now}",
        "",
        format_table(TASK_HEADERS, task_rows(tasks)),
    ]
    if attempts and len(attempts) > 1:
        lines += ["", format_table(ATTEMPT_HEADERS, attempt_rows(attempts))]
    names = choose_metric_names(points)
    known = {replica for replica, _, _ in replicas}
    rows = [
        [replica, phase, pod, *(format_metric(points.get(replica, {}).get(n)) for n in names)]
        for replica, phase, pod in replicas
    ]
    rows += [
        [replica, "", "", *(format_metric(points[replica].get(n)) for n in names)]
        for replica in sorted(points)
        if replica not in known
    ]
    if rows:
        lines += ["", format_table(("replica", "phase", "pod", *names), rows)]
    return "\n".join(lines) + "\n"


def watch_run(
    session: AirflowSession,
    ref: RunRef,
    replicas: ReplicaWatcher,
    out: TextIO,
    poll_interval: float,
    redraw: bool,
) -> JsonObject:
    """Draw frames until the run ends (see the module docstring); return the finished run."""
    curves = CurveReader(session, ref)
    shown = None
    while True:
        run = call_patiently(lambda: session.get_json(ref.path))
        tasks = call_patiently(lambda: list_task_instances(session, ref))
        train = next((t for t in tasks if t["task_id"] == TRAIN_TASK), None)
        points = curves.read(train)
        pods = [(p.replica_id, p.phase, p.name) for p in replicas.list_pods() or []]
        frame = render_watch_frame(
            run, tasks, pods, points, fetch_attempts(session, ref), time.strftime("%H:%M:%S")
        )
        finished = RunState(run["state"]).is_finished
        body = frame.split("\n", 1)[1]  # the clock in the first line changes every poll
        if redraw:
            out.write(CLEAR_SCREEN + frame)
        elif body != shown or finished:
            out.write(("\n" if shown is not None else "") + frame)
        shown = body
        if finished:
            failure = read_run_failure(session, ref, tasks)
            if failure is not None:
                out.write("\n" + "\n".join(failure.describe()) + "\n")
            out.flush()
            return run
        out.flush()
        time.sleep(poll_interval)


def register(subparsers: Any) -> None:
    status = subparsers.add_parser("status", help="state of a run and its tasks (--watch: live)")
    add_common(status)
    status.add_argument(
        "--watch",
        action="store_true",
        help="redraw tasks, replicas and their latest metrics until the run ends",
    )
    status.add_argument(
        "--poll-interval", type=float, default=POLL_INTERVAL_S, help=argparse.SUPPRESS
    )
    set_command(status, cmd_status)
