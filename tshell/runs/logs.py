"""tshell logs: a run's logs from the best source there is.

Why this exists: a person wants the replicas' output wherever it is now. Once
the run is archived, `<output>/runs/<dag_id>/<run_id>/logs/<role>-<index>.log`
in S3, which Airflow serves (tshell/runs/files.py); while it runs, the replica
pods (when tshell can reach the cluster); otherwise the Airflow task log of
`train`, where each replica's line is prefixed with `[<role>-<index>]`.
Airflow's continuation token is a position in a log merged from changing
sources, so a follower deduplicates entries.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from tfjob.jsontypes import JsonObject
from tfjob.pipeline_ids import TRAIN_TASK
from tfjob.records.run import RunDescription
from tshell.airflow_client import AirflowSession
from tshell.command import open_session, set_command
from tshell.config import TshellConfig
from tshell.exitcodes import CommandError, ExitCode
from tshell.replica_logs import (
    ReplicaLogError,
    iter_replica_logs,
    list_replica_pods,
    make_core_api,
)
from tshell.runs.commands import (
    FINISHED_TASK_STATES,
    POLL_INTERVAL_S,
    RunState,
    add_common,
    call_patiently,
    fetch_run_description,
    list_task_instances,
)
from tshell.runs.files import write_archived_logs
from tshell.runs.lookup import RunRef, explain_forbidden_on_run, find_run, quote

REPLICA_LOG_PREFIX = "[{role}-{index}]"


def fetch_task_log(
    session: AirflowSession,
    ref: RunRef,
    task_id: str,
    try_number: int,
    continuation_token: str | None = None,
    seen: set[tuple[str, str]] | None = None,
) -> tuple[list[str], str | None]:
    """Lines of one task try's log after `continuation_token`, and the token to continue.

    Airflow's token is a position in the log as merged from its sources (the
    worker's served log while the task runs, the files after, the trigger's
    log while deferred); when those change between two reads, a position can
    land before entries already returned. Entries whose (timestamp, text) is
    in `seen` are skipped and new ones added, so a follower prints each once.
    """
    params: JsonObject = {"full_content": "false"}
    if continuation_token:
        params["token"] = continuation_token
    body = session.get_json(f"{ref.path}/taskInstances/{quote(task_id)}/logs/{try_number}", params)
    lines = []
    for item in body.get("content") or []:
        if isinstance(item, dict):
            event = str(item.get("event", ""))
            key = (str(item.get("timestamp") or ""), event)
            if seen is not None and key[0]:
                if key in seen:
                    continue
                seen.add(key)
            if event.startswith("::group::") or event == "::endgroup::":
                continue
            lines.extend(event.splitlines() or [""])
            for error in item.get("error_detail") or []:
                lines.append(f"  {error.get('exc_type')}: {error.get('exc_value')}")
        else:
            lines.extend(str(item).splitlines())
    return lines, body.get("continuation_token")


def select_replica_lines(lines: Sequence[str], role: str | None, index: int | None) -> list[str]:
    """Only the lines of one replica (prefix removed); every line when no role is given."""
    if role is None:
        return list(lines)
    prefix = REPLICA_LOG_PREFIX.format(role=role, index=0 if index is None else index)
    return [line[len(prefix) :].lstrip() for line in lines if line.startswith(prefix)]


def iter_live_log(
    session: AirflowSession, ref: RunRef, task_id: str, follow: bool, poll_interval: float
) -> Iterator[str]:
    """Lines of the task's latest try; with `follow`, keep reading until the task ends."""
    token: str | None = None
    seen: set[tuple[str, str]] = set()
    while True:
        tasks = {t["task_id"]: t for t in call_patiently(lambda: list_task_instances(session, ref))}
        task = tasks.get(task_id)
        if task is None:
            raise CommandError(
                f"run {ref.run_id!r} has no task {task_id!r} (tasks: "
                f"{', '.join(sorted(tasks)) or 'none yet'})",
                ExitCode.NOT_FOUND,
            )
        finished = (task.get("state") or "none") in FINISHED_TASK_STATES
        if task.get("try_number"):
            read = functools.partial(
                fetch_task_log, session, ref, task_id, task["try_number"], token, seen
            )
            lines, token = call_patiently(read)
            yield from lines
        if not follow or finished:
            return
        time.sleep(poll_interval)


def write_pod_logs(
    config: TshellConfig,
    session: AirflowSession,
    ref: RunRef,
    described: RunDescription,
    args: argparse.Namespace,
    out: TextIO,
) -> bool:
    """Print the replica pods' logs live from Kubernetes; False when there are no pods (yet)."""
    namespace, run_key = described.namespace, described.run_key
    index = args.index if args.role is not None else None
    try:
        core = make_core_api(config.kubeconfig)
        pods = list_replica_pods(core, namespace, run_key, args.role, index)
        # Following a run that is still launching: wait for its pods, not for nothing.
        while not pods and args.follow:
            run = call_patiently(lambda: session.get_json(ref.path))
            if RunState(run["state"]).is_finished:
                return False
            time.sleep(args.poll_interval)
            pods = list_replica_pods(core, namespace, run_key, args.role, index)
        if not pods:
            return False
        for line in iter_replica_logs(core, namespace, pods, args.follow):
            out.write(line + "\n")
            out.flush()
    except ReplicaLogError as error:
        raise CommandError(str(error), ExitCode.NOT_FOUND) from None
    return True


def cmd_logs(args: argparse.Namespace, out: TextIO) -> ExitCode:
    """Logs from the best source: the archive (through Airflow) once the run ended, the pods
    while it runs, else Airflow's task log."""
    config, session = open_session()
    run = find_run(session, args.run, args.dag)
    ref = RunRef(run["dag_id"], run["dag_run_id"])
    with explain_forbidden_on_run(session, "read", ref):
        if args.task is None:
            if RunState(run["state"]).is_finished:
                printed, where = write_archived_logs(session, ref, args.role, args.index, out)
                if printed:
                    return ExitCode.OK
                sys.stderr.write(
                    f"note: no archived log {where} of this run; showing the Airflow task log\n"
                )
            elif config.kubeconfig and (described := fetch_run_description(session, ref)):
                if write_pod_logs(config, session, ref, described, args, out):
                    return ExitCode.OK
                sys.stderr.write(
                    "note: no replica pods of this run; showing the Airflow task log\n"
                )
        task_id = args.task or TRAIN_TASK
        for line in iter_live_log(session, ref, task_id, args.follow, args.poll_interval):
            for selected in select_replica_lines([line], args.role, args.index):
                out.write(selected + "\n")
                out.flush()
        return ExitCode.OK


def register(subparsers: Any) -> None:
    """Add `logs` to tshell's subcommands."""
    logs = subparsers.add_parser(
        "logs",
        help="logs of a run: archived (served by Airflow), live from its pods, or "
        "Airflow's task log",
    )
    add_common(logs, json_arg=False)
    logs.add_argument("--role", help="replica role (chief, ps, worker, evaluator)")
    logs.add_argument("--index", type=int, default=0, help="replica index (default 0)")
    logs.add_argument("--task", help=f"an Airflow task's log instead (default {TRAIN_TASK})")
    logs.add_argument(
        "--follow", "-f", action="store_true", help="keep printing until the task ends"
    )
    logs.add_argument(
        "--poll-interval", type=float, default=POLL_INTERVAL_S, help=argparse.SUPPRESS
    )
    set_command(logs, cmd_logs)
