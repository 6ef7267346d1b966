"""tshell submit: a request file becomes a run of its tenant's submit DAG.

Why this exists: a person submits a request file and follows the run without
opening the Airflow UI. The request is validated locally first (the same
`tfjob.request.model` model the DAG uses), so most mistakes never reach the server;
what the server still refuses (400/422) is shown with the field it names.

The tenant decides the DAG: `tfjob_submit__<tenant>` (tfjob.naming), one per
tenant, so that Airflow's roles decide who may submit for whom. Its 403 (the
user's roles do not grant that DAG) and 404 (no such tenant DAG) are told
apart here, each with what to do.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from tfjob.jsontypes import JsonObject
from tfjob.kubeflow.convert import Destination
from tfjob.pipeline_ids import submit_dag_id
from tfjob.request.model import RequestError, load_request
from tshell.airflow_client import AirflowNotFoundError, AirflowSession
from tshell.command import open_session, set_command
from tshell.exitcodes import CommandError, ExitCode
from tshell.kubeflow_commands import add_destination_options, destination_of, tfjob_request_data
from tshell.runs.commands import (
    POLL_INTERVAL_S,
    ReplicaWatcher,
    RunState,
    call_patiently,
    follow_run,
)
from tshell.runs.lookup import RunRef, explain_forbidden, run_ui_url
from tshell.runs.views import emit_json, summarize_run

# --- request and conf -------------------------------------------------------------------


def parse_set_value(text: str) -> Any:
    """A --set value as YAML would read it (3 → int, true → bool, [a, b] → list)."""
    try:
        return yaml.safe_load(text) if text != "" else ""
    except yaml.YAMLError:
        return text


def apply_overrides(data: JsonObject, overrides: Sequence[str]) -> JsonObject:
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


def read_request_file(path: Path) -> JsonObject:
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


def build_conf(
    path: Path, overrides: Sequence[str], destination: Destination | None = None
) -> JsonObject:
    """The validated request of `path` (a request, or a Kubeflow TFJob converted with
    `destination`) with `overrides`, as the DAG run's conf."""
    converted = tfjob_request_data(path, destination or Destination())
    data = apply_overrides(read_request_file(path) if converted is None else converted, overrides)
    try:
        request = load_request(data)
    except RequestError as exc:
        raise CommandError(f"{path}: {exc}", ExitCode.INVALID_REQUEST) from None
    return request.model_dump(mode="json")


# --- trigger ------------------------------------------------------------------------------


def trigger_submit_run(session: AirflowSession, conf: JsonObject) -> tuple[RunRef, str]:
    """Trigger the submit DAG of the request's tenant with `conf`; the run and its state."""
    from airflow_client.client.api.dag_run_api import DagRunApi
    from airflow_client.client.models.trigger_dag_run_post_body import TriggerDAGRunPostBody

    tenant = conf["tenant"]
    # A run id of our own: a try whose answer was lost (a timeout, a 502/503/504) is looked up
    # before asking again, so a busy Airflow never gets the same request twice.
    ref = RunRef(
        submit_dag_id(tenant), f"manual__{datetime.datetime.now(datetime.UTC).isoformat()}"
    )
    tried = False

    def trigger(api: Any) -> Any:
        body = TriggerDAGRunPostBody(dag_run_id=ref.run_id, conf=conf, logical_date=None)
        return DagRunApi(api).trigger_dag_run(ref.dag_id, body)

    def trigger_once() -> str:
        nonlocal tried
        if tried:
            try:
                return session.get_json(ref.path)["state"]
            except AirflowNotFoundError:
                pass
        tried = True
        return str(session.call(trigger, f"trigger of DAG {ref.dag_id!r}").state.value)

    # Without a role for the DAG, Airflow answers 403 even when the DAG does not exist.
    with explain_forbidden(session, f"submit for tenant {tenant}", f"DAG {ref.dag_id}"):
        try:
            return ref, call_patiently(trigger_once)
        except AirflowNotFoundError:
            raise CommandError(
                f"tenant {tenant!r} has no submit DAG on {session.url} (Airflow answered 404 "
                f"for DAG {ref.dag_id}): check the tenant's name with `tshell tenants list` "
                f"and deploy/tenants.yaml; a tenant just added has its DAG once Airflow has "
                f"parsed it (see the Airflow UI for import errors)",
                ExitCode.NOT_FOUND,
            ) from None


def cmd_submit(args: argparse.Namespace, out: TextIO) -> ExitCode:
    conf = build_conf(Path(args.request), args.set or [], destination_of(args))
    config, session = open_session()
    ref, state = trigger_submit_run(session, conf)
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
    return ExitCode.OK if final["state"] == RunState.SUCCESS else ExitCode.FAILED


def register(subparsers: Any) -> None:
    """Add `submit` to tshell's subcommands."""
    submit = subparsers.add_parser(
        "submit", help="validate a request and start a training run of its tenant"
    )
    submit.add_argument("request", help="request file, or Kubeflow TFJob file (.yaml or .json)")
    add_destination_options(submit)
    submit.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a request field, dotted for nesting (replicas.worker=3)",
    )
    submit.add_argument("--wait", action="store_true", help="follow the run to its end")
    submit.add_argument("--json", action="store_true", help="machine-readable output")
    submit.add_argument(
        "--poll-interval", type=float, default=POLL_INTERVAL_S, help=argparse.SUPPRESS
    )
    set_command(submit, cmd_submit)
