"""One training run as the "TFJob" tab of a DAG run shows it, built from the run's XComs.

The pipeline already passes everything worth seeing through XCom (the run
description, the pods' endpoints, the ClusterSpec, the replicas' end states,
metrics, the archive's S3 addresses); this module only gathers and renders it,
so the plugin that serves it (plugins/tfjob_plugin.py) stays thin and this is
tested without Airflow.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

from tfjob.pipeline_ids import (
    ARCHIVE_TASK,
    ATTEMPTS_KEY,
    CLUSTERSPEC_TASK,
    FETCH_BUNDLE_TASK,
    LAUNCH_FAILURE_KEY,
    LAUNCH_TASK,
    PUBLISH_TASK,
    RESTARTED_CLUSTER_KEY,
    TEARDOWN_TASK,
    TRAIN_TASK,
    VALIDATE_TASK,
)

PIPELINE = (VALIDATE_TASK, FETCH_BUNDLE_TASK, LAUNCH_TASK, CLUSTERSPEC_TASK, TRAIN_TASK,
            ARCHIVE_TASK, TEARDOWN_TASK, PUBLISH_TASK)
RETURN_VALUE = "return_value"

XComValues = Mapping[tuple[str, str], Any]


def summarize_run(dag_id: str, run_id: str, run_state: str | None, xcoms: XComValues,
                  task_states: Mapping[str, str | None]) -> dict[str, Any] | None:
    """The run's job view; None when the run is not a training run (validate pushed nothing)."""
    described = xcoms.get((VALIDATE_TASK, RETURN_VALUE))
    if not described:
        return None
    request = described.get("request") or {}
    archived = xcoms.get((ARCHIVE_TASK, RETURN_VALUE)) or {}
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "state": run_state,
        "job": {
            "name": request.get("name"),
            "tenant": request.get("tenant"),
            "mode": request.get("mode"),
            "image": request.get("image"),
            "replicas": request.get("replicas"),
            "namespace": described.get("namespace"),
            "run_key": described.get("run_key"),
        },
        "tasks": [{"task_id": task, "state": task_states.get(task)} for task in PIPELINE
                  if task in task_states],
        "bundle": xcoms.get((FETCH_BUNDLE_TASK, RETURN_VALUE)),
        "endpoints": xcoms.get((LAUNCH_TASK, RETURN_VALUE)),
        "launch_failure": xcoms.get((LAUNCH_TASK, LAUNCH_FAILURE_KEY)),
        # A restarted gang's ClusterSpec (train's) replaces the first gang's.
        "cluster_spec": xcoms.get((TRAIN_TASK, RESTARTED_CLUSTER_KEY))
        or (xcoms.get((CLUSTERSPEC_TASK, RETURN_VALUE)) or {}).get("cluster"),
        "attempts": xcoms.get((TRAIN_TASK, ATTEMPTS_KEY)) or [],
        "replicas": xcoms.get((TRAIN_TASK, "replicas")) or [],
        "metrics": xcoms.get((TRAIN_TASK, "metrics")),
        "model": archived.get("model"),
        "logs": archived.get("logs") or [],
        "run_json": archived.get("run_json"),
        "published": xcoms.get((PUBLISH_TASK, RETURN_VALUE)),
    }


def _cell(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "<span class=none>-</span>"
    if isinstance(value, (dict, list)):
        return f"<pre>{html.escape(json.dumps(value, indent=2, sort_keys=True))}</pre>"
    return html.escape(str(value))


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render_run_page(summary: Mapping[str, Any]) -> str:
    """A self-contained HTML page (no script, no outside asset) for the UI's iframe."""
    job = summary["job"]
    replicas = [[f"{r.get('role')}-{r.get('index')}", r.get("pod"), r.get("phase"),
                 r.get("exit_code"), r.get("reason")] for r in summary["replicas"]]
    model = summary.get("model") or {}
    attempts = [[a.get("number"), a.get("outcome"), a.get("started"), a.get("ended"),
                 a.get("restored_checkpoint_step"), a.get("failed_replica"), a.get("exit_code"),
                 a.get("reason")]
                for a in summary.get("attempts") or []]
    sections = [
        ("Job", _table(["field", "value"], [[key, value] for key, value in job.items()])),
        ("Tasks", _table(["task", "state"],
                         [[t["task_id"], t["state"]] for t in summary["tasks"]])),
        ("ClusterSpec", _cell(summary.get("cluster_spec"))),
        ("Replicas", _table(["replica", "pod", "phase", "exit code", "reason"], replicas)),
        ("Attempts", _table(["attempt", "outcome", "started", "ended", "resumed from step",
                             "failed replica", "exit code", "reason"], attempts)),
        ("Metrics", _cell(summary.get("metrics"))),
        ("Outputs", _table(["what", "where"], [
            ["model", model.get("uri")], ["run manifest", summary.get("run_json")],
            *[["log", uri] for uri in summary.get("logs") or []],
            ["published", (summary.get("published") or {}).get("model")],
        ])),
    ]
    if summary.get("launch_failure"):
        sections.insert(1, ("Launch failure", _cell(summary["launch_failure"])))
    title = f"{job.get('name')} · {summary['run_id']}"
    body = "".join(f"<h2>{html.escape(name)}</h2>{content}" for name, content in sections)
    return (
        "<!doctype html><html><head><meta charset=utf-8>"
        f"<title>{html.escape(title)}</title><style>"
        "body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}"
        "pre{margin:0}.none{color:#999}"
        f"</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p>run state: {_cell(summary.get('state'))}</p>{body}</body></html>"
    )
