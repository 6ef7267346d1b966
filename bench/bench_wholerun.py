#!/usr/bin/env python3
"""Measurement 3: trigger → success of `digits-ps`, split into phases (issue 8).

    python bench/bench_wholerun.py --world DIR [--repeat 5]

The real example (bundles/digits-ps: TensorFlow ParameterServerStrategy,
chief + ps + 2 workers, 400 steps) is packed, uploaded to the world's S3 and
submitted through the REST API of the world's Airflow (the world tenant's
submit DAG `tfjob_submit__test`, as `tshell submit` does). Phases come from the task
instances' start/end times (REST), the run's metrics (`train_seconds`, the
chief's own training-loop time, also in run.json) and the pods' log
timestamps (CRI, read while the pods exist): TensorFlow import = from
`cluster.json` delivered (end of `clusterspec`) to the ps/workers' first line
(`serving at`, printed right after `import tensorflow` and the gRPC server
start). Airflow scheduling is what is left: trigger → first task, and every
gap between one task's end and the next one's start. Writes
bench/out/wholerun.json; exits 1 when Airflow answered a 5xx (counted by the
REST client, bench/airflow_runs.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

from bench.airflow_runs import (  # noqa: E402
    SUBMIT_DAG_ID,
    await_run,
    parse_time,
    read_task_instances,
    task_spans,
    trigger_run,
)
from bench.stats import summarise  # noqa: E402
from bench.world import load_airflow, load_world  # noqa: E402
from runtime.protocol import MAIN_CONTAINER  # noqa: E402
from tfjob import naming  # noqa: E402
from tfjob.pipeline_ids import (  # noqa: E402
    ARCHIVE_TASK,
    CLUSTERSPEC_TASK,
    FETCH_BUNDLE_TASK,
    LAUNCH_TASK,
    PUBLISH_TASK,
    TEARDOWN_TASK,
    TRAIN_TASK,
    VALIDATE_TASK,
)

BUNDLE_KEY = "bundles/digits-ps.tar.gz"
RUN_TIMEOUT_S = 600
WATCH_INTERVAL_S = 0.5
PHASES = (
    "airflow_scheduling",
    "validate_and_fetch_bundle",
    "pod_start",
    "clusterspec_delivery",
    "tensorflow_import",
    "training",
    "chief_setup_eval_save_upload",
    "end_noticed_and_train_task",
    "archive",
    "teardown",
    "publish",
)


def upload_bundle(world: Any, folder: Path) -> str:
    from runtime.bundle import write_bundle

    out = folder / "digits-ps.tar.gz"
    write_bundle(REPO / "bundles" / "digits-ps", out, "digits-ps")
    world.s3.client().upload_file(str(out), world.bucket, BUNDLE_KEY)
    return f"s3://{world.bucket}/{BUNDLE_KEY}"


def build_conf(world: Any, bundle: str) -> dict[str, Any]:
    body = yaml.safe_load((REPO / "bundles" / "digits-ps" / "request.yaml").read_text())
    body.update(tenant="test", bundle=bundle, output=f"s3://{world.bucket}/outputs/digits-ps")
    return {k: v for k, v in body.items() if v is not None}


class PodLogWatcher(threading.Thread):
    """Reads the run's pod logs (with timestamps) while the pods exist: first `serving at` of ps and
    workers, and the chief's last line once its container ended."""

    def __init__(self, world: Any, namespace: str, selector: str) -> None:
        super().__init__(daemon=True)
        self.api = world.kube.core_v1()
        self.namespace, self.selector = namespace, selector
        self.serving: dict[str, float] = {}
        self.chief_last_line: float | None = None
        self.chief_finished_at: float | None = None  # the container's finishedAt (pod status)
        self.stop_event = threading.Event()

    def read_lines(self, pod: str) -> list[tuple[float, str]]:
        raw = self.api.read_namespaced_pod_log(
            pod, self.namespace, container=MAIN_CONTAINER, timestamps=True, _preload_content=False
        ).data.decode("utf-8", "replace")
        lines = []
        for line in raw.splitlines():
            stamp, _, text = line.partition(" ")
            when = parse_time(stamp)
            if when is not None:
                lines.append((when, text))
        return lines

    def run(self) -> None:
        while not self.stop_event.is_set() and self.chief_last_line is None:
            try:
                self.look()
            except Exception as exc:  # pods come and go; keep watching
                print(f"log watcher: {type(exc).__name__}: {exc}", file=sys.stderr)
            self.stop_event.wait(WATCH_INTERVAL_S)

    def look(self) -> None:
        for pod in self.api.list_namespaced_pod(self.namespace, label_selector=self.selector).items:
            name = pod.metadata.name
            role = pod.metadata.labels.get(naming.LABEL_ROLE)
            statuses = {s.name: s for s in (pod.status.container_statuses or [])}
            main = statuses.get(MAIN_CONTAINER)
            if main is None or (main.state.running is None and main.state.terminated is None):
                continue
            if role == "chief":
                if main.state.terminated is not None:
                    finished = main.state.terminated.finished_at
                    self.chief_finished_at = finished.timestamp() if finished else None
                    lines = self.read_lines(name)
                    self.chief_last_line = lines[-1][0] if lines else None
            elif name not in self.serving:
                for when, text in self.read_lines(name):
                    if "serving at" in text:
                        self.serving[name] = when
                        break


def measure_run(world: Any, airflow: Any, conf: dict[str, Any]) -> dict[str, Any]:

    run_id, sent = trigger_run(airflow, conf)
    key = naming.run_key(conf["name"], SUBMIT_DAG_ID, run_id)
    watcher = PodLogWatcher(world, world_namespace(), naming.run_selector(key))
    watcher.start()
    run = await_run(airflow, run_id, RUN_TIMEOUT_S)
    watcher.stop_event.set()
    watcher.join(5)
    spans = task_spans(read_task_instances(airflow, run_id))
    if run["state"] != "success":
        raise RuntimeError(
            f"digits-ps run {run_id} ended {run['state']}: { {k: v for k, v in spans.items()} }"
        )
    manifest = json.loads(
        world.s3_text(f"outputs/digits-ps/runs/{SUBMIT_DAG_ID}/{run_id}/run.json")
    )
    return split_phases(
        sent,
        parse_time(run["end_date"]),
        spans,
        manifest["metrics"],
        list(watcher.serving.values()),
        watcher.chief_last_line,
    ) | {"run_id": run_id}


def world_namespace() -> str:
    from harness.pipeline_fixtures import NAMESPACE

    return NAMESPACE


def split_phases(
    sent: float,
    ended: float,
    spans: dict[str, dict[str, float | None]],
    metrics: dict[str, Any],
    serving: list[float],
    chief_last_line: float | None,
) -> dict[str, Any]:
    """The phases of one run (seconds); scheduling is the remainder, so they add up to the total."""

    def work(task: str) -> float:
        return (spans[task]["end"] or 0.0) - (spans[task]["start"] or 0.0)

    delivered = spans[CLUSTERSPEC_TASK]["end"] or 0.0
    train_end = spans[TRAIN_TASK]["end"] or 0.0
    training = float(metrics.get("train_seconds") or 0.0)
    import_s = (sorted(serving)[len(serving) // 2] - delivered) if serving else None
    chief_end = chief_last_line if chief_last_line is not None else train_end
    phases = {
        "validate_and_fetch_bundle": work(VALIDATE_TASK) + work(FETCH_BUNDLE_TASK),
        "pod_start": work(LAUNCH_TASK),
        "clusterspec_delivery": work(CLUSTERSPEC_TASK),
        "tensorflow_import": import_s if import_s is not None else 0.0,
        "training": training,
        "chief_setup_eval_save_upload": chief_end - delivered - (import_s or 0.0) - training,
        "end_noticed_and_train_task": train_end - chief_end,
        "archive": work(ARCHIVE_TASK),
        "teardown": work(TEARDOWN_TASK),
        "publish": work(PUBLISH_TASK),
    }
    total = ended - sent
    # The clusterspec→train gap and the train task's own start are inside the training window above.
    phases["airflow_scheduling"] = total - sum(phases.values())
    return {
        "total_s": total,
        "phases": phases,
        "all_but_training_s": total - training,
        "import_measured": import_s is not None,
        "chief_end_measured": chief_last_line is not None,
    }


def time_tensorflow_imports(at_once: int) -> list[float]:
    """Seconds of `import tensorflow` in `at_once` fresh processes started together.

    The profile behind the whole run's largest phase: the pods of a ps job
    (chief, ps, 2 workers) import TensorFlow at the same moment on the same cores.
    """
    import subprocess

    code = "import time; t = time.perf_counter(); import tensorflow; print(time.perf_counter() - t)"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        for _ in range(at_once)
    ]
    outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    return [float(out.strip().splitlines()[-1]) for out in outputs]


def main() -> int:
    import time

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", required=True, type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="start no further run when the last run's time would pass this (at least 1 run)",
    )
    parser.add_argument("--out", type=Path, default=BENCH / "out" / "wholerun.json")
    parser.add_argument(
        "--no-import-profile",
        action="store_true",
        help="skip timing `import tensorflow` alone and 4 at once after the runs",
    )
    args = parser.parse_args()
    began = time.monotonic()
    world, _record = load_world(args.world)
    airflow = load_airflow(args.world)
    conf = build_conf(world, upload_bundle(world, args.world))
    runs = []
    for attempt in range(args.repeat):
        started = time.monotonic()
        result = measure_run(world, airflow, conf)
        runs.append(result)
        phases = ", ".join(f"{k} {v:.1f}" for k, v in result["phases"].items())
        print(
            f"digits-ps try {attempt + 1}: {result['total_s']:.1f}s total, "
            f"{result['all_but_training_s']:.1f}s besides training ({phases})",
            flush=True,
        )
        last = time.monotonic() - started
        if args.budget_s is not None and time.monotonic() - began + last > args.budget_s:
            print(f"digits-ps: budget of {args.budget_s:.0f}s reached after {attempt + 1} runs")
            break
    alone, together = [], []
    if not args.no_import_profile:
        alone = time_tensorflow_imports(1)
        together = time_tensorflow_imports(4)
        print(
            f"digits-ps import tensorflow: alone {alone[0]:.1f}s, 4 at once {together}", flush=True
        )
    summary = {
        "total_s": summarise(r["total_s"] for r in runs).as_dict(),
        "all_but_training_s": summarise(r["all_but_training_s"] for r in runs).as_dict(),
        "phases": {p: summarise(r["phases"][p] for r in runs).as_dict() for p in PHASES},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "runs": runs,
                "summary": summary,
                "target_s": 15,
                "tf_import_alone_s": alone,
                "tf_import_four_at_once_s": together,
                "server_errors": {str(c): n for c, n in sorted(airflow.server_errors.items())},
            },
            indent=1,
        )
    )
    if airflow.server_errors:  # PostgreSQL takes concurrent writers: a 5xx is a bug to see
        print(f"digits-ps: FAILED: Airflow answered 5xx {dict(airflow.server_errors)}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
