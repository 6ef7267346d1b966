"""tshell submit, status, list, logs, cancel and download: training runs through Airflow's REST API.

Why this exists: a person submits a request file and follows the run without
opening the Airflow UI. The request is validated locally first (the same
`tfjob.request` model the DAG uses), so most mistakes never reach the server;
what the server still refuses (400/422) is shown with the field it names.

A run is an Airflow DAG run. `RUN` is its run id; the DAG is found by searching
every DAG unless `--dag` names it. While a run is active its logs come from the
Airflow task log of the `train` task, where each replica's line is prefixed
with `[<role>-<index>]`; once archived they come from
`<output>/runs/<run_id>/logs/<role>-<index>.log` in S3, `<output>` being the
request's `output` (the run's conf).
"""

from __future__ import annotations

import argparse
import datetime
import enum
import functools
import json
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

import yaml

from tshell.airflow_client import (
    AirflowClientError,
    AirflowNotFoundError,
    AirflowServerError,
    AirflowSession,
    AirflowUnreachableError,
)
from tshell.config import ConfigError, TshellConfig, load_config
from tshell.run_errors import CommandError, ExitCode
from tshell.run_storage import (
    download_prefix,
    list_s3_keys,
    make_s3_client,
    read_s3_text,
    run_output_prefix,
)
from tshell.run_views import (
    TASK_HEADERS,
    emit_json,
    format_duration,
    format_table,
    short_time,
    summarize_run,
    task_rows,
)

# apache-airflow-client (seconds to import), boto3 and the request model are imported
# inside the commands that use them, so `tshell --help` and `tshell pack` stay fast.

T = TypeVar("T")
SUBMIT_DAG_ID = "tfjob_submit"
DAG_ID_PREFIX = "tfjob"
TRAIN_TASK_ID = "train"
VALIDATE_TASK_ID = "validate"
LAUNCH_TASK_ID = "launch"
REPLICA_LOG_PREFIX = "[{role}-{index}]"
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
ACTIVE_TASK_STATES = {
    "scheduled",
    "queued",
    "running",
    "deferred",
    "up_for_retry",
    "up_for_reschedule",
    "restarting",
    "awaiting_input",
}
# Trigger rules of tasks that run whatever happened upstream (teardown: all_done_setup_success).
CLEANUP_TRIGGER_RULES = {"all_done", "all_done_setup_success", "always"}
CANCEL_NOTE = "cancelled with tshell"
CANCEL_ROUNDS = 3
CANCEL_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class RunRef:
    dag_id: str
    run_id: str

    @property
    def path(self) -> str:
        return f"/api/v2/dags/{quote(self.dag_id)}/dagRuns/{quote(self.run_id)}"


def quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


# --- request and conf -------------------------------------------------------------------


def parse_set_value(text: str) -> Any:
    """A --set value as YAML would read it (3 → int, true → bool, [a, b] → list)."""
    try:
        return yaml.safe_load(text) if text != "" else ""
    except yaml.YAMLError:
        return text


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """`data` with each `dotted.key=value` of `overrides` set (a copy; nested maps created).

    Values read as YAML (3 is a number, [a, b] a list), except under `env`, which
    holds strings only.
    """
    result = json.loads(json.dumps(data))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CommandError(
                f"--set {item!r}: KEY=VALUE is required (e.g. replicas.worker=3)",
                ExitCode.INVALID_REQUEST,
            )
        target = result
        parts = key.split(".")
        for part in parts[:-1]:
            child = target.setdefault(part, {})
            if not isinstance(child, dict):
                raise CommandError(
                    f"--set {item!r}: {part!r} is not a mapping in the request",
                    ExitCode.INVALID_REQUEST,
                )
            target = child
        # Environment values are strings by contract; everything else reads as YAML.
        target[parts[-1]] = value if parts[0] == "env" else parse_set_value(value)
    return result


def read_request_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CommandError(
            f"request file {str(path)!r} does not exist", ExitCode.INVALID_REQUEST
        ) from None
    except yaml.YAMLError as exc:
        raise CommandError(
            f"request file {str(path)!r} is not valid YAML/JSON: {exc}", ExitCode.INVALID_REQUEST
        ) from None
    if not isinstance(data, dict):
        raise CommandError(
            f"request file {str(path)!r}: a mapping of request fields is required",
            ExitCode.INVALID_REQUEST,
        )
    return data


def build_conf(path: Path, overrides: Sequence[str]) -> dict[str, Any]:
    """The validated request of `path` with `overrides`, as the DAG run's conf."""
    from tfjob.request import RequestError, load_request

    data = apply_overrides(read_request_file(path), overrides)
    try:
        request = load_request(data)
    except RequestError as exc:
        raise CommandError(f"{path}: {exc}", ExitCode.INVALID_REQUEST) from None
    return request.model_dump(mode="json")


# --- Airflow reads ------------------------------------------------------------------------


def run_ui_url(session: AirflowSession, ref: RunRef) -> str:
    return f"{session.url}/dags/{quote(ref.dag_id)}/runs/{quote(ref.run_id)}"


def find_run(session: AirflowSession, run_id: str, dag_id: str | None = None) -> dict[str, Any]:
    """The DAG run `run_id` (of `dag_id`, or of whichever DAG has it)."""
    if dag_id:
        try:
            return session.get_json(RunRef(dag_id, run_id).path)
        except AirflowNotFoundError:
            raise CommandError(
                f"unknown run {run_id!r} of DAG {dag_id!r}; `tshell list` shows the runs",
                ExitCode.NOT_FOUND,
            ) from None
    page = session.get_json(
        "/api/v2/dags/~/dagRuns", {"run_id_prefix_pattern": run_id, "limit": 100}
    )
    matches = [run for run in page["dag_runs"] if run["dag_run_id"] == run_id]
    if not matches:
        raise CommandError(
            f"unknown run {run_id!r}: no DAG on {session.url} has it; `tshell list` shows the runs",
            ExitCode.NOT_FOUND,
        )
    if len(matches) > 1:
        dags = ", ".join(sorted(run["dag_id"] for run in matches))
        raise CommandError(
            f"run {run_id!r} exists in several DAGs ({dags}); choose one with --dag",
            ExitCode.NOT_FOUND,
        )
    return matches[0]


def list_task_instances(session: AirflowSession, ref: RunRef) -> list[dict[str, Any]]:
    page = session.get_json(f"{ref.path}/taskInstances", {"limit": 100})
    return sorted(
        page["task_instances"], key=lambda ti: (ti.get("start_date") or "~", ti["task_id"])
    )


def fetch_task_xcom(session: AirflowSession, ref: RunRef, task_id: str) -> dict[str, Any] | None:
    """A task's return-value XCom as a dict, or None while it has none (or is not a dict)."""
    try:
        entry = session.get_json(
            f"{ref.path}/taskInstances/{task_id}/xcomEntries/return_value",
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
    return value if isinstance(value, dict) else None


def fetch_replica_endpoints(session: AirflowSession, ref: RunRef) -> dict[str, Any] | None:
    """The `launch` task's XCom ({role: [ip:port, …]}), once it exists."""
    return fetch_task_xcom(session, ref, LAUNCH_TASK_ID)


def fetch_run_description(session: AirflowSession, ref: RunRef) -> dict[str, Any] | None:
    """What `validate` recorded about the run (request, namespace, run_key), once it ran."""
    value = fetch_task_xcom(session, ref, VALIDATE_TASK_ID)
    return value if value is not None and "run_key" in value else None


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
    params: dict[str, Any] = {"full_content": "false"}
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


# --- commands -----------------------------------------------------------------------------


def open_session() -> tuple[TshellConfig, AirflowSession]:
    try:
        config = load_config()
    except ConfigError as exc:
        raise CommandError(str(exc), ExitCode.CONFIG_ERROR) from None
    return config, AirflowSession(config.airflow)


def call_patiently(operation: Callable[[], T], patience: float = UNREACHABLE_PATIENCE_S) -> T:
    """`operation()` (a read, or a write safe to repeat), retried while Airflow is
    unreachable or answers 5xx, for up to `patience` seconds.

    Following a run takes minutes; one slow or failed answer of a busy API server should
    not end it.
    """
    first_failure: float | None = None
    while True:
        try:
            return operation()
        except (AirflowUnreachableError, AirflowServerError) as error:
            now = time.monotonic()
            if first_failure is None:
                first_failure = now
                sys.stderr.write(f"note: {error}; retrying for {patience:.0f} s\n")
            if now - first_failure > patience:
                raise
            time.sleep(POLL_INTERVAL_S)


class ReplicaWatcher:
    """Phases of a run's replica pods, when tshell can reach the cluster; else nothing.

    The pods are named by what `validate` recorded, so nothing is looked up
    before that task has run; any failure to reach the cluster leaves the
    view to Airflow's task states.
    """

    def __init__(self, config: TshellConfig, session: AirflowSession, ref: RunRef) -> None:
        self.config, self.session, self.ref = config, session, ref
        self.described: dict[str, Any] | None = None
        self.core: Any = None

    def list_pods(self) -> list[Any] | None:
        if not self.config.kubeconfig:
            return None
        from tshell.replica_logs import list_replica_pods, make_core_api

        if self.described is None:
            self.described = fetch_run_description(self.session, self.ref)
            if self.described is None:
                return None
        try:
            if self.core is None:
                self.core = make_core_api(self.config.kubeconfig)
            namespace, run_key = self.described["namespace"], self.described["run_key"]
            return list_replica_pods(self.core, namespace, run_key, None, None)
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
        if not endpoints_shown and seen.get(LAUNCH_TASK_ID) == "success":
            endpoints = fetch_replica_endpoints(session, ref)
            if endpoints:
                for role, addresses in endpoints.items():
                    out.write(f"           replicas {role}: {', '.join(map(str, addresses))}\n")
                endpoints_shown = True
        if replicas is not None and seen.get(VALIDATE_TASK_ID) == "success":
            for pod in replicas.list_pods() or []:
                if phases.get(pod.replica_id) != pod.phase:
                    phases[pod.replica_id] = pod.phase
                    out.write(f"{stamp}  {'pod ' + pod.replica_id:<14} {pod.phase}\n")
        out.flush()
        if RunState(run["state"]).is_finished:
            return run
        time.sleep(poll_interval)


def cmd_submit(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from airflow_client.client.api.dag_run_api import DagRunApi
    from airflow_client.client.models.trigger_dag_run_post_body import TriggerDAGRunPostBody

    conf = build_conf(Path(args.request), args.set or [])
    config, session = open_session()
    # A run id of our own: a try whose answer was lost (a timeout, a 5xx) is looked up
    # before asking again, so a busy Airflow never gets the same request twice.
    ref = RunRef(args.dag, f"manual__{datetime.datetime.now(datetime.UTC).isoformat()}")
    tried = False

    def trigger(api: Any) -> Any:
        body = TriggerDAGRunPostBody(dag_run_id=ref.run_id, conf=conf, logical_date=None)
        return DagRunApi(api).trigger_dag_run(args.dag, body)

    def trigger_once() -> str:
        nonlocal tried
        if tried:
            try:
                return session.get_json(ref.path)["state"]
            except AirflowNotFoundError:
                pass
        tried = True
        return str(session.call(trigger, f"trigger of DAG {args.dag!r}").state.value)

    try:
        state = call_patiently(trigger_once)
    except AirflowNotFoundError:
        raise CommandError(
            f"DAG {args.dag!r} does not exist on {session.url} (not parsed yet, "
            f"or a parse error: see the Airflow UI)",
            ExitCode.NOT_FOUND,
        ) from None
    if args.json and not args.wait:
        emit_json(
            {
                "run_id": ref.run_id,
                "dag_id": ref.dag_id,
                "url": run_ui_url(session, ref),
                "state": state,
            },
            out,
        )
        return ExitCode.OK
    # With --json --wait, stdout carries only the final JSON; people read progress on stderr.
    progress = sys.stderr if args.json else out
    progress.write(
        f"submitted run {ref.run_id}\n  DAG: {ref.dag_id}\n  UI:  {run_ui_url(session, ref)}\n"
    )
    if not args.wait:
        return ExitCode.OK
    watcher = ReplicaWatcher(config, session, ref)
    final = follow_run(session, ref, progress, args.poll_interval, watcher)
    if args.json:
        emit_json(summarize_run(final) | {"url": run_ui_url(session, ref)}, out)
    else:
        out.write(f"run {ref.run_id}: {final['state']}\n")
    return ExitCode.OK if final["state"] == RunState.SUCCESS else ExitCode.RUN_FAILED


def cmd_status(args: argparse.Namespace, out: TextIO) -> ExitCode:
    config, session = open_session()
    run = find_run(session, args.run, args.dag)
    ref = RunRef(run["dag_id"], run["dag_run_id"])
    tasks = list_task_instances(session, ref)
    summary = summarize_run(run)
    pods = ReplicaWatcher(config, session, ref).list_pods()
    if args.json:
        summary["tasks"] = [
            {
                k: t.get(k)
                for k in ("task_id", "state", "try_number", "start_date", "end_date", "duration")
            }
            for t in tasks
        ]
        summary["replicas"] = fetch_replica_endpoints(session, ref)
        summary["pods"] = (
            None
            if pods is None
            else [{"replica": p.replica_id, "pod": p.name, "phase": p.phase} for p in pods]
        )
        summary["url"] = run_ui_url(session, ref)
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
    return ExitCode.OK


def cmd_list(args: argparse.Namespace, out: TextIO) -> ExitCode:
    _, session = open_session()
    params: dict[str, Any] = {"limit": args.limit, "order_by": "-run_after"}
    if args.dag:
        path = f"/api/v2/dags/{quote(args.dag)}/dagRuns"
    else:
        path = "/api/v2/dags/~/dagRuns"
        params["dag_id_prefix_pattern"] = DAG_ID_PREFIX
    if args.state:
        params["state"] = args.state
    runs = [summarize_run(r) for r in session.get_json(path, params)["dag_runs"]]
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


def write_archived_logs(
    config: TshellConfig, bucket: str, prefix: str, role: str | None, index: int, out: TextIO
) -> bool:
    """Print the run's archived logs from S3 (one replica, or all with headers); False if none."""
    s3 = make_s3_client(config)
    if role is not None:
        text = read_s3_text(s3, bucket, f"{prefix}logs/{role}-{index}.log")
        if text is None:
            return False
        out.write(text if text.endswith("\n") or not text else text + "\n")
        return True
    keys = sorted(list_s3_keys(s3, bucket, prefix + "logs/"))
    for key in keys:
        out.write(f"==> {key.rsplit('/', 1)[-1]} <==\n")
        out.write((read_s3_text(s3, bucket, key) or "").rstrip("\n") + "\n")
    return bool(keys)


def write_pod_logs(
    config: TshellConfig,
    session: AirflowSession,
    ref: RunRef,
    described: dict[str, Any],
    args: argparse.Namespace,
    out: TextIO,
) -> bool:
    """Print the replica pods' logs live from Kubernetes; False when there are no pods (yet)."""
    from tshell.replica_logs import (
        ReplicaLogError,
        iter_replica_logs,
        list_replica_pods,
        make_core_api,
    )

    namespace, run_key = described["namespace"], described["run_key"]
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
    """Logs from the best source: S3 once archived, the pods while running, else Airflow."""
    config, session = open_session()
    run = find_run(session, args.run, args.dag)
    ref = RunRef(run["dag_id"], run["dag_run_id"])
    if args.task is None:
        described = fetch_run_description(session, ref)
        if RunState(run["state"]).is_finished:
            bucket, prefix = run_output_prefix(run, args.output, described)
            if write_archived_logs(config, bucket, prefix, args.role, args.index, out):
                return ExitCode.OK
            sys.stderr.write(
                f"note: no archived log under s3://{bucket}/{prefix}logs/; "
                f"showing the Airflow task log\n"
            )
        elif described and config.kubeconfig:
            if write_pod_logs(config, session, ref, described, args, out):
                return ExitCode.OK
            sys.stderr.write("note: no replica pods of this run; showing the Airflow task log\n")
    task_id = args.task or TRAIN_TASK_ID
    for line in iter_live_log(session, ref, task_id, args.follow, args.poll_interval):
        for selected in select_replica_lines([line], args.role, args.index):
            out.write(selected + "\n")
            out.flush()
    return ExitCode.OK


def list_cleanup_task_ids(session: AirflowSession, dag_id: str) -> set[str]:
    """Tasks that run whatever happened upstream (teardown, archive): cancel spares them."""
    tasks = session.get_json(f"/api/v2/dags/{quote(dag_id)}/tasks")["tasks"]
    return {t["task_id"] for t in tasks if t.get("trigger_rule") in CLEANUP_TRIGGER_RULES}


def fail_active_tasks(session: AirflowSession, ref: RunRef, spared: set[str]) -> list[str]:
    """Mark every started, unfinished task of the run failed, except `spared`; their ids."""
    from airflow_client.client.api.task_instance_api import TaskInstanceApi
    from airflow_client.client.models.patch_task_instance_body import PatchTaskInstanceBody
    from airflow_client.client.models.task_instance_state import TaskInstanceState

    failed = []
    for task in list_task_instances(session, ref):
        if task["task_id"] in spared or (task.get("state") or "none") not in ACTIVE_TASK_STATES:
            continue

        def patch(
            api: Any, task_id: str = task["task_id"], map_index: int = task["map_index"]
        ) -> Any:
            body = PatchTaskInstanceBody(new_state=TaskInstanceState.FAILED, note=CANCEL_NOTE)
            return TaskInstanceApi(api).patch_task_instance(
                ref.dag_id,
                ref.run_id,
                task_id,
                body,
                map_index=None if map_index < 0 else map_index,
            )

        # Setting failed again is harmless: a call whose answer was lost may be repeated.
        what = f"cancel of task {task['task_id']!r}"
        call_patiently(lambda p=patch, w=what: session.call(p, w))
        failed.append(task["task_id"])
    return failed


def cmd_cancel(args: argparse.Namespace, out: TextIO) -> ExitCode:
    _, session = open_session()
    run = find_run(session, args.run, args.dag)
    ref = RunRef(run["dag_id"], run["dag_run_id"])
    if RunState(run["state"]).is_finished:
        out.write(f"run {ref.run_id} already ended: {run['state']}\n")
        return ExitCode.OK
    # Not PATCH dagRun state=failed first: Airflow then marks every task that has not
    # started SKIPPED, teardown included, so pods would stay behind. Failing the active
    # tasks lets the scheduler run archive and teardown; the run is marked failed after.
    spared = list_cleanup_task_ids(session, ref.dag_id)
    failed: list[str] = []
    for _ in range(CANCEL_ROUNDS):  # a task may be scheduled between listing and patching
        newly = fail_active_tasks(session, ref, spared)
        if not newly:
            break
        failed += newly
    if not failed:
        mark_run_failed(session, ref)
        out.write(f"run {ref.run_id} marked failed before any task started\n")
        return ExitCode.OK
    kept = ", ".join(sorted(spared)) or "none"
    out.write(f"run {ref.run_id}: failed {', '.join(failed)}; cleanup tasks ({kept}) still run\n")
    if args.no_wait:
        return ExitCode.OK
    await_tasks_finished(session, ref, args.timeout, args.poll_interval)
    # A DAG whose leaves are cleanup tasks would otherwise end "success".
    if session.get_json(ref.path)["state"] != RunState.FAILED:
        mark_run_failed(session, ref)
    out.write(f"run {ref.run_id} cancelled: failed, cleanup done\n")
    return ExitCode.OK


def mark_run_failed(session: AirflowSession, ref: RunRef) -> None:
    from airflow_client.client.api.dag_run_api import DagRunApi
    from airflow_client.client.models.dag_run_mutable_states import DagRunMutableStates
    from airflow_client.client.models.dag_run_patch_body import DAGRunPatchBody

    def patch_run(api: Any) -> Any:
        body = DAGRunPatchBody(state=DagRunMutableStates.FAILED, note=CANCEL_NOTE)
        return DagRunApi(api).patch_dag_run(ref.dag_id, ref.run_id, body)

    call_patiently(lambda: session.call(patch_run, f"cancel of run {ref.run_id!r}"))


def await_tasks_finished(
    session: AirflowSession, ref: RunRef, timeout: float, poll_interval: float
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        tasks = call_patiently(lambda: list_task_instances(session, ref))
        unfinished = [
            t["task_id"] for t in tasks if (t.get("state") or "none") not in FINISHED_TASK_STATES
        ]
        if not unfinished:
            return
        if time.monotonic() > deadline:
            raise CommandError(
                f"run {ref.run_id}: tasks {', '.join(unfinished)} still not finished "
                f"after {timeout:.0f} s; see `tshell status {ref.run_id}`",
                ExitCode.AIRFLOW_ERROR,
            )
        time.sleep(poll_interval)


def cmd_download(args: argparse.Namespace, out: TextIO) -> ExitCode:
    config, session = open_session()
    run = find_run(session, args.run, args.dag)
    described = fetch_run_description(session, RunRef(run["dag_id"], run["dag_run_id"]))
    bucket, prefix = run_output_prefix(run, args.output, described)
    target = Path(args.dir)
    written = download_prefix(make_s3_client(config), bucket, f"{prefix}{args.what}/", target)
    if args.json:
        emit_json([str(p) for p in written], out)
    else:
        out.write(
            f"downloaded {len(written)} files from s3://{bucket}/{prefix}{args.what}/ to {target}\n"
        )
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
    """Add submit, status, list, logs, cancel and download to tshell's subcommands."""
    submit = subparsers.add_parser("submit", help="validate a request and start a training run")
    submit.add_argument("request", help="request file (.yaml or .json)")
    submit.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a request field, dotted for nesting (replicas.worker=3)",
    )
    submit.add_argument("--wait", action="store_true", help="follow the run to its end")
    submit.add_argument(
        "--dag", default=SUBMIT_DAG_ID, help=f"DAG to trigger (default {SUBMIT_DAG_ID})"
    )
    submit.add_argument("--json", action="store_true", help="machine-readable output")
    submit.add_argument(
        "--poll-interval", type=float, default=POLL_INTERVAL_S, help=argparse.SUPPRESS
    )
    submit.set_defaults(func=wrap_command(cmd_submit))

    status = subparsers.add_parser("status", help="state of a run and its tasks")
    add_common(status)
    status.set_defaults(func=wrap_command(cmd_status))

    listing = subparsers.add_parser("list", help="recent runs")
    add_common(listing, run_arg=False)
    listing.add_argument("--tenant", help="only this tenant's runs")
    listing.add_argument(
        "--state", choices=[s.value for s in RunState], help="only runs in this state"
    )
    listing.add_argument("--limit", type=int, default=LIST_LIMIT)
    listing.set_defaults(func=wrap_command(cmd_list))

    logs = subparsers.add_parser(
        "logs", help="logs of a run: archived in S3, live from its pods, or from Airflow"
    )
    add_common(logs, json_arg=False)
    logs.add_argument("--role", help="replica role (chief, ps, worker, evaluator)")
    logs.add_argument("--index", type=int, default=0, help="replica index (default 0)")
    logs.add_argument("--task", help=f"an Airflow task's log instead (default {TRAIN_TASK_ID})")
    logs.add_argument(
        "--follow", "-f", action="store_true", help="keep printing until the task ends"
    )
    logs.add_argument("--output", help="the run's output s3://bucket/prefix, if not in its conf")
    logs.add_argument(
        "--poll-interval", type=float, default=POLL_INTERVAL_S, help=argparse.SUPPRESS
    )
    logs.set_defaults(func=wrap_command(cmd_logs))

    cancel = subparsers.add_parser(
        "cancel", help="stop a run: its active tasks fail, teardown still removes the pods"
    )
    add_common(cancel, json_arg=False)
    cancel.add_argument(
        "--no-wait",
        action="store_true",
        help="return once the active tasks are failed, before cleanup ends",
    )
    cancel.add_argument(
        "--timeout",
        type=float,
        default=CANCEL_TIMEOUT_S,
        help=f"seconds to wait for cleanup (default {CANCEL_TIMEOUT_S:.0f})",
    )
    cancel.add_argument(
        "--poll-interval", type=float, default=POLL_INTERVAL_S, help=argparse.SUPPRESS
    )
    cancel.set_defaults(func=wrap_command(cmd_cancel))

    download = subparsers.add_parser("download", help="download a run's model or logs from S3")
    add_common(download)
    download.add_argument("what", choices=[k.value for k in ArtifactKind])
    download.add_argument("dir", metavar="DIR", help="local directory to write into")
    download.add_argument(
        "--output", help="the run's output s3://bucket/prefix, if not in its conf"
    )
    download.set_defaults(func=wrap_command(cmd_download))


def wrap_command(handler: Callable[[argparse.Namespace, TextIO], ExitCode]) -> Callable[..., int]:
    """`handler` as tshell's `func(args) -> int`; errors become a message and an exit code."""

    def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
        try:
            return int(handler(args, out or sys.stdout))
        except CommandError as exc:
            sys.stderr.write(f"error: {exc}\n")
            return int(exc.code)
        except AirflowClientError as exc:
            sys.stderr.write(f"error: {exc}\n")
            not_found = isinstance(exc, AirflowNotFoundError)
            return int(ExitCode.NOT_FOUND if not_found else ExitCode.AIRFLOW_ERROR)

    run.__name__ = handler.__name__
    return run
