"""tshell list and download, and what every run command shares.

Why this exists: a person follows a run without opening the Airflow UI. This
module holds the run's view through Airflow's REST API (tasks, XComs, run
state, replica pods) and the patient calls that ride out a busy Airflow (every
command's session and error handling are tshell/command.py's); `submit`
(tshell/runs/submit.py), `status` (tshell/runs/status.py), `logs` (tshell/runs/logs.py) and `cancel`
(tshell/runs/cancel.py) build on it.

A run is an Airflow DAG run. `RUN` is its run id; the DAG is found among the
TF-on-K8s DAGs the user may read (tshell/runs/lookup.py) unless `--dag` names it, and
Airflow's 403 becomes a sentence naming the user, the deed and the run.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO, TypeVar

from runtime.backoff import BackoffPolicy, LastDelay, RetryState, call_with_backoff
from tfjob.pipeline_ids import ATTEMPTS_KEY, LAUNCH_TASK, TRAIN_TASK, VALIDATE_TASK
from tfjob.records.run import RunDescription
from tshell.airflow_client import (
    AirflowClientError,
    AirflowServerError,
    AirflowSession,
    AirflowUnreachableError,
)
from tshell.command import open_session, set_command
from tshell.config import TshellConfig
from tshell.exitcodes import ExitCode
from tshell.replica_logs import list_replica_pods, make_core_api
from tshell.runs.files import describe_download, download_run_files
from tshell.runs.lookup import (
    RunRef,
    explain_forbidden_on_run,
    find_run,
    list_training_runs,
)
from tshell.runs.views import (
    emit_json,
    format_duration,
    format_table,
    short_time,
    summarize_run,
)

# apache-airflow-client (seconds to import) is imported inside the commands that use it,
# so `tshell --help` and `tshell pack` stay fast (tests/test_code_guards.py LAZY_IMPORTS).

T = TypeVar("T")
POLL_INTERVAL_S = 2.0
# How long a following command (--wait, --follow, cancel) rides out an unreachable Airflow.
UNREACHABLE_PATIENCE_S = 120.0
LIST_LIMIT = 50


class RunState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"

    @property
    def is_finished(self) -> bool:
        return self in (RunState.SUCCESS, RunState.FAILED)


class ArtifactKind(enum.StrEnum):
    MODEL = "model"
    LOGS = "logs"


FINISHED_TASK_STATES = {"success", "failed", "skipped", "upstream_failed", "removed"}
TASK_SUMMARY_FIELDS = ("task_id", "state", "try_number", "start_date", "end_date", "duration")


# --- Airflow reads ------------------------------------------------------------------------


def list_task_instances(session: AirflowSession, ref: RunRef) -> list[dict[str, Any]]:
    page = session.get_json(f"{ref.path}/taskInstances", {"limit": 100})
    return sorted(
        page["task_instances"], key=lambda ti: (ti.get("start_date") or "~", ti["task_id"])
    )


def fetch_task_xcom(
    session: AirflowSession,
    ref: RunRef,
    task_id: str,
    key: str = "return_value",
    kind: type = dict,
) -> Any:
    """A task's XCom `key` as a `kind` (dict, list), or None while it has none (or another)."""
    try:
        entry = session.get_json(
            f"{ref.path}/taskInstances/{task_id}/xcomEntries/{key}",
            {"deserialize": "true"},
        )
    except AirflowClientError:
        return None
    value = entry.get("value")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, kind) else None


def fetch_attempts(session: AirflowSession, ref: RunRef) -> list[dict[str, Any]] | None:
    """`train`'s XCom `attempts`: each gang of the run (restart policy), once train ran."""
    return fetch_task_xcom(session, ref, TRAIN_TASK, ATTEMPTS_KEY, list)


def fetch_replica_endpoints(session: AirflowSession, ref: RunRef) -> dict[str, Any] | None:
    """The `launch` task's XCom ({role: [ip:port, …]}), once it exists."""
    return fetch_task_xcom(session, ref, LAUNCH_TASK)


def fetch_run_description(session: AirflowSession, ref: RunRef) -> RunDescription | None:
    """What `validate` recorded about the run (request, namespace, run_key), once it ran;
    None before, and for a description this tshell cannot read."""
    value = fetch_task_xcom(session, ref, VALIDATE_TASK)
    if value is None:
        return None
    try:
        return RunDescription.from_payload(value)
    except (KeyError, TypeError, ValueError):
        return None


# --- commands -----------------------------------------------------------------------------


def call_patiently(operation: Callable[[], T], patience: float = UNREACHABLE_PATIENCE_S) -> T:
    """`operation()` (a read, or a write safe to repeat), retried while Airflow is
    unreachable or answers 502/503/504 (a proxy, a restart), for up to `patience` seconds.

    Following a run takes minutes; one slow or failed answer of a busy API server should
    not end it.
    """
    policy = BackoffPolicy(
        first_delay=POLL_INTERVAL_S,
        factor=1.0,
        budget=patience,
        budget_from_first_failure=True,
        last_delay=LastDelay.WHOLE,
    )

    def note(state: RetryState) -> None:
        if state.attempt == 1:
            sys.stderr.write(f"note: {state.error}; retrying for {patience:.0f} s\n")

    return call_with_backoff(
        operation, policy, on=(AirflowUnreachableError, AirflowServerError), on_retry=note
    )


class ReplicaWatcher:
    """Phases of a run's replica pods, when tshell can reach the cluster; else nothing.

    The pods are named by what `validate` recorded, so nothing is looked up
    before that task has run; any failure to reach the cluster leaves the
    view to Airflow's task states.
    """

    def __init__(self, config: TshellConfig, session: AirflowSession, ref: RunRef) -> None:
        self.config, self.session, self.ref = config, session, ref
        self.described: RunDescription | None = None
        self.core: Any = None

    def list_pods(self) -> list[Any] | None:
        if not self.config.kubeconfig:
            return None
        if self.described is None:
            self.described = fetch_run_description(self.session, self.ref)
            if self.described is None:
                return None
        try:
            if self.core is None:
                self.core = make_core_api(self.config.kubeconfig)
            described = self.described
            return list_replica_pods(self.core, described.namespace, described.run_key, None, None)
        except Exception:  # noqa: BLE001 - a cluster we cannot read just adds nothing
            return None


def follow_run(
    session: AirflowSession,
    ref: RunRef,
    out: TextIO,
    poll_interval: float = POLL_INTERVAL_S,
    replicas: ReplicaWatcher | None = None,
) -> dict[str, Any]:
    """Print task state changes, the replicas' addresses and pod phases until the run ends."""
    seen: dict[str, str] = {}
    phases: dict[str, str] = {}
    endpoints_shown = False
    while True:
        run = call_patiently(lambda: session.get_json(ref.path))
        stamp = time.strftime("%H:%M:%S")
        for task in call_patiently(lambda: list_task_instances(session, ref)):
            state = task.get("state") or "none"
            if seen.get(task["task_id"]) != state:
                seen[task["task_id"]] = state
                out.write(f"{stamp}  {task['task_id']:<14} {state}\n")
        if not endpoints_shown and seen.get(LAUNCH_TASK) == "success":
            endpoints = fetch_replica_endpoints(session, ref)
            if endpoints:
                for role, addresses in endpoints.items():
                    out.write(f"           replicas {role}: {', '.join(map(str, addresses))}\n")
                endpoints_shown = True
        if replicas is not None and seen.get(VALIDATE_TASK) == "success":
            for pod in replicas.list_pods() or []:
                if phases.get(pod.replica_id) != pod.phase:
                    phases[pod.replica_id] = pod.phase
                    out.write(f"{stamp}  {'pod ' + pod.replica_id:<14} {pod.phase}\n")
        out.flush()
        if RunState(run["state"]).is_finished:
            return run
        time.sleep(poll_interval)


def cmd_list(args: argparse.Namespace, out: TextIO) -> ExitCode:
    _, session = open_session()
    found, dag_tenants = list_training_runs(session, args.dag, args.state, args.limit)
    runs = [summarize_run(r, dag_tenants.get(r["dag_id"])) for r in found]
    if args.tenant:
        runs = [r for r in runs if r["tenant"] == args.tenant]
    if args.json:
        emit_json(runs, out)
        return ExitCode.OK
    headers = ("run id", "dag", "state", "name", "tenant", "started", "duration")
    rows = [
        [
            r["run_id"],
            r["dag_id"],
            r["state"],
            r["name"],
            r["tenant"],
            short_time(r["start_date"]),
            format_duration(r["duration"]),
        ]
        for r in runs
    ]
    out.write(format_table(headers, rows) + "\n")
    return ExitCode.OK


def cmd_download(args: argparse.Namespace, out: TextIO) -> ExitCode:
    """The run's model or logs into DIR, through Airflow (tshell reads no S3 itself)."""
    _, session = open_session()
    run = find_run(session, args.run, args.dag)
    ref = RunRef(run["dag_id"], run["dag_run_id"])
    target = Path(args.dir)
    with explain_forbidden_on_run(session, "read", ref):
        where, written = download_run_files(session, ref, args.what, target)
    if args.json:
        emit_json([str(p) for p in written], out)
    else:
        out.write(describe_download(where, written, target) + "\n")
    return ExitCode.OK


# --- argument parsing ---------------------------------------------------------------------


def add_common(
    parser: argparse.ArgumentParser, run_arg: bool = True, json_arg: bool = True
) -> None:
    if run_arg:
        parser.add_argument("run", metavar="RUN", help="the run id (Airflow dag_run_id)")
    parser.add_argument("--dag", help="the DAG of the run (default: whichever DAG has it)")
    if json_arg:
        parser.add_argument("--json", action="store_true", help="machine-readable output")


def register(subparsers: Any) -> None:
    """Add list and download to tshell's subcommands (status: tshell/runs/status.py)."""
    listing = subparsers.add_parser("list", help="recent runs")
    add_common(listing, run_arg=False)
    listing.add_argument("--tenant", help="only this tenant's runs")
    listing.add_argument(
        "--state", choices=[s.value for s in RunState], help="only runs in this state"
    )
    listing.add_argument("--limit", type=int, default=LIST_LIMIT)
    set_command(listing, cmd_list)

    download = subparsers.add_parser(
        "download", help="download a run's model or logs (Airflow serves them)"
    )
    add_common(download)
    download.add_argument("what", choices=[k.value for k in ArtifactKind])
    download.add_argument("dir", metavar="DIR", help="local directory to write into")
    set_command(download, cmd_download)
