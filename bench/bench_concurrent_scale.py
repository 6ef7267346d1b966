#!/usr/bin/env python3
"""Measurement 7b: many concurrent 8-replica jobs across 4 tenants through Airflow (issue 18).

    python bench/bench_concurrent_scale.py [--jobs 10 50 100] [--nodes 16] [--run-seconds 30]

Starts its own world (bench/scale_world.py: S3, localkube of `--nodes` simulated nodes,
PostgreSQL, `airflow standalone` with LocalExecutor and a triggerer, 4 tenants) and, for each
size, triggers that many jobs at once through the REST API of the tenants' submit DAGs (as
`tshell submit` does), round robin over the tenants. Each job is chief + ps + 6 workers of the
stand-in request; its pods are hollow: the request's `env` sets `LOCALKUBE_SIMULATE_RUN_SECONDS`
and `..._RUN_AFTER_FILE` (localkube/README.md), so every replica "runs" that long once its
cluster.json is delivered and exits 0, and nothing else of the product knows. The batches run
one after another in the same world; counters are differences.

A job counts as succeeded when its task instances were read and every task but `publish`
succeeded: hollow pods upload no model, so `publish` fails with "no model" (the run's state
is then `failed`).

Per run: trigger → all 8 pods Running (the bench's own pod watch), → ClusterSpec delivered
(end of the `clusterspec` task), chief exit (watch) → every object gone (its last pod DELETED
and the `teardown` task's end, whichever is later), trigger → run end. Per batch: makespan
(first trigger → last run end), API requests by verb and resource (localkube's
`GET /localkube/v1/requests`, the batch's difference, and per replica), every 2 s: Airflow task
slots held (`running` task instances in the metadata DB) and `deferred` ones, the triggerer's
open connections to the API server and its RSS (its process tree), the API server's RSS and
its open client connections. Writes bench/out/concurrent_scale.json (or `--out`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent

from bench import (  # noqa: E402
    procprobe,  # noqa: E402
    scale_world,  # noqa: E402
)
from bench.airflow_runs import (  # noqa: E402
    FINISHED,
    parse_time,
    read_dag_runs,
    read_task_instances,
    trigger_run,
)
from bench.stats import summarise  # noqa: E402
from bench.world import find_leftovers, load_airflow, load_world, stop_world  # noqa: E402
from runtime.protocol import CLUSTERSPEC_FILE, CONFIG_DIR  # noqa: E402
from tfjob import naming  # noqa: E402
from tfjob.pipeline_ids import (  # noqa: E402
    CLUSTERSPEC_TASK,
    PUBLISH_TASK,
    TEARDOWN_TASK,
    submit_dag_id,
)

REPLICAS = {"chief": 1, "ps": 1, "worker": 6}
SAMPLE_INTERVAL_S = 2.0
SLOT_STATES = ("running", "deferred", "queued", "scheduled")


class PodWatch(threading.Thread):
    """One watch of every run pod (all namespaces): when each was first Running, when the chief
    ended, when each was DELETED. Its own requests (a list, a watch) are in the API counts."""

    def __init__(self, core: Any) -> None:
        super().__init__(daemon=True)
        self.core = core
        self.pods: dict[str, dict[str, Any]] = {}
        self.stopping = False

    def run(self) -> None:
        from kubernetes import watch

        # Each watch goes on from the last event seen: a new watch from nothing would list the
        # pods that exist and never tell of those deleted in between (their DELETED is lost).
        resume: str | None = None
        while not self.stopping:
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    self.core.list_pod_for_all_namespaces,
                    label_selector=naming.LABEL_RUN,
                    timeout_seconds=30,
                    **({"resource_version": resume} if resume else {}),
                ):
                    self.record(event["type"], event["object"], time.time())
                    resume = event["object"].metadata.resource_version
                    if self.stopping:
                        break
            except Exception as error:  # a dropped watch: watch again (logged, not hidden)
                if getattr(error, "status", None) == 410:
                    resume = None  # too old: list again (deletions in the gap are not seen)
                print(f"pod watch: {error!r}; watching again", flush=True)
                time.sleep(0.5)

    def record(self, kind: str, pod: Any, now: float) -> None:
        meta = pod.metadata
        key = f"{meta.namespace}/{meta.name}/{meta.uid}"
        seen = self.pods.setdefault(
            key,
            {
                "run_id": (meta.annotations or {}).get(naming.ANNOTATION_RUN_ID),
                "role": (meta.labels or {}).get(naming.LABEL_ROLE),
                "running": None,
                "ended": None,
                "deleted": None,
            },
        )
        phase = pod.status.phase if pod.status else None
        if phase == "Running" and seen["running"] is None:
            seen["running"] = now
        if phase in ("Succeeded", "Failed") and seen["ended"] is None:
            seen["ended"] = now
        if kind == "DELETED":
            seen["deleted"] = now


class Sampler(threading.Thread):
    """Every 2 s: Airflow's task instances by state, the triggerer's and API server's state."""

    def __init__(self, database_url: str, triggerer: int, apiserver: int, port: int) -> None:
        super().__init__(daemon=True)
        import sqlalchemy

        self.engine = sqlalchemy.create_engine(database_url)
        self.query = sqlalchemy.text(
            "SELECT state, count(*) FROM task_instance WHERE state IN "
            "('running', 'deferred', 'queued', 'scheduled') GROUP BY state"
        )
        self.triggerer, self.apiserver, self.port = triggerer, apiserver, port
        self.samples: list[dict[str, Any]] = []
        self.stopping = threading.Event()

    def sample(self) -> dict[str, Any]:
        with self.engine.connect() as connection:
            states = dict(connection.execute(self.query).all())
        tree = procprobe.list_descendants(self.triggerer)
        return {
            "t": time.time(),
            **{state: int(states.get(state, 0)) for state in SLOT_STATES},
            "triggerer_connections": procprobe.count_connections(tree, self.port),
            "triggerer_rss_kib": procprobe.read_rss_kib(tree),
            "apiserver_rss_kib": procprobe.read_rss_kib([self.apiserver]),
            "apiserver_connections": procprobe.count_connections(
                [self.apiserver], self.port, remote=False
            ),
        }

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.samples.append(self.sample())
            except Exception as error:  # one lost sample; say so
                print(f"sampler: {error!r}", flush=True)
            self.stopping.wait(SAMPLE_INTERVAL_S)


def build_conf(world: Any, tenant: str, name: str, run_seconds: int) -> dict[str, Any]:
    return world.request(
        name,
        tenant=tenant,
        output=scale_world.output_prefix(world.bucket, tenant) + name,
        mode="distributed",
        strategy="parameter_server",
        replicas=dict(REPLICAS),
        success_policy="chief",
        startup_timeout=600,
        active_deadline=1800,
        resources={role: {"cpu": "10m", "memory": "16Mi"} for role in REPLICAS},
        # every replica "runs" run_seconds once its ClusterSpec is delivered, as the real
        # program waits for it (a clock from the container's start would end before delivery)
        env={
            "LOCALKUBE_SIMULATE_RUN_SECONDS": str(run_seconds),
            "LOCALKUBE_SIMULATE_RUN_AFTER_FILE": f"{CONFIG_DIR}/{CLUSTERSPEC_FILE}",
        },
    )


def await_runs(airflow: Any, runs: dict[str, dict[str, Any]], timeout: float) -> None:
    """Until every run finished; each run's state and end in `runs`."""
    deadline = time.monotonic() + timeout
    dags = sorted({run["dag_id"] for run in runs.values()})
    while True:
        for dag_id in dags:
            for run in read_dag_runs(airflow, dag_id):
                mine = runs.get(run["dag_run_id"])
                if mine is not None and run["state"] in FINISHED:
                    mine["state"], mine["end"] = run["state"], parse_time(run["end_date"])
        left = [r for r in runs.values() if r.get("state") is None]
        if not left:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(left)} of {len(runs)} runs unfinished after {timeout:.0f}s")
        time.sleep(3.0)


def measure_run(
    run_id: str, run: dict[str, Any], spans: dict[str, Any], pods: list[dict[str, Any]]
) -> dict[str, Any]:
    """The four figures of one run (None where the run did not get that far)."""
    sent = run["sent"]
    running = [p["running"] for p in pods]
    chief = [p["ended"] for p in pods if p["role"] == "chief" and p["ended"]]
    gone = [p["deleted"] for p in pods]
    teardown = (spans.get(TEARDOWN_TASK) or {}).get("end")
    clusterspec = (spans.get(CLUSTERSPEC_TASK) or {}).get("end")
    all_gone = max(gone + [teardown]) if None not in gone and teardown and gone else None
    expected = sum(REPLICAS.values())
    return {
        "run_id": run_id,
        "dag_id": run["dag_id"],
        "state": run.get("state"),
        "pods_seen": len(pods),
        "to_all_running_s": (max(running) - sent)
        if len(running) >= expected and None not in running
        else None,
        "to_clusterspec_s": clusterspec - sent if clusterspec else None,
        "chief_exit_to_gone_s": all_gone - min(chief) if chief and all_gone else None,
        "to_end_s": run["end"] - sent if run.get("end") else None,
        "tasks_read": len(spans),
        "tasks_not_succeeded": {
            t: s["state"] for t, s in spans.items() if s.get("state") != "success"
        },
    }


def diff_counts(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in sorted(after) if after[k] - before.get(k, 0)}


def count_left_objects(core: Any) -> int:
    """Run objects (pods, ConfigMaps, Secrets) still in any namespace."""
    selector = naming.LABEL_RUN
    return sum(
        len(list_all(label_selector=selector).items)
        for list_all in (
            core.list_pod_for_all_namespaces,
            core.list_config_map_for_all_namespaces,
            core.list_secret_for_all_namespaces,
        )
    )


def measure_batch(folder: Path, jobs: int, run_seconds: int, timeout: float) -> dict[str, Any]:
    world, _ = load_world(folder)
    airflow = load_airflow(folder)
    pids = scale_world.read_localkube_pids(folder)
    standalone = json.loads((folder / "airflow.json").read_text())["pid"]
    triggerer = procprobe.find_process(standalone, "triggerer")
    if triggerer is None:
        raise RuntimeError(f"no triggerer process under airflow standalone (pid {standalone})")
    core = world.kube.core_v1()
    watcher = PodWatch(core)
    watcher.start()
    from harness.postgres_fixtures import airflow_database_url

    home = json.loads((folder / "airflow.json").read_text())["home"]
    sampler = Sampler(airflow_database_url(Path(home)), triggerer, pids["apiserver"], pids["port"])
    counts_before = world.kube.request("GET", "/localkube/v1/requests")["counts"]
    sampler.start()
    stamp = time.strftime("%H%M%S")
    runs: dict[str, dict[str, Any]] = {}
    for index in range(jobs):
        tenant = scale_world.TENANTS[index % len(scale_world.TENANTS)]
        dag_id = submit_dag_id(tenant)
        run_id, sent = trigger_run(
            airflow, build_conf(world, tenant, f"cs{jobs}-{stamp}-{index}", run_seconds), dag_id
        )
        runs[run_id] = {"dag_id": dag_id, "sent": sent}
    try:
        await_runs(airflow, runs, timeout)
    finally:
        time.sleep(SAMPLE_INTERVAL_S * 2)  # the last deletions and a sample after them
        sampler.stopping.set()
        sampler.join()
        watcher.stopping = True
    counts = diff_counts(
        world.kube.request("GET", "/localkube/v1/requests")["counts"], counts_before
    )
    spans: dict[str, dict[str, Any]] = {}
    for dag_id in sorted({r["dag_id"] for r in runs.values()}):
        for ti in read_task_instances(airflow, "~", dag_id):
            spans.setdefault(ti["dag_run_id"], {})[ti["task_id"]] = {
                "end": parse_time(ti.get("end_date")),
                "state": ti.get("state"),
            }
    by_run: dict[str, list[dict[str, Any]]] = {}
    for pod in watcher.pods.values():
        by_run.setdefault(pod["run_id"], []).append(pod)
    per_run = [measure_run(r, run, spans.get(r, {}), by_run.get(r, [])) for r, run in runs.items()]
    replicas = jobs * sum(REPLICAS.values())
    samples = sampler.samples
    first = min(r["sent"] for r in runs.values())
    ends = [r["end"] for r in runs.values() if r.get("end")]

    def median_of(key: str) -> dict[str, Any] | None:
        values = [r[key] for r in per_run if r[key] is not None]
        return summarise(values).as_dict() if values else None

    def peak(key: str) -> int:
        return max((s[key] for s in samples), default=0)

    return {
        "jobs": jobs,
        "replicas": replicas,
        "run_seconds": run_seconds,
        # every task but `publish` succeeded: hollow pods upload no model, so publish fails
        "succeeded": sum(
            1
            for r in per_run
            if r["tasks_read"]
            and set(r["tasks_not_succeeded"]) <= {PUBLISH_TASK}
            and r["state"] in FINISHED
        ),
        "states": {
            s: sum(1 for r in per_run if r["state"] == s)
            for s in sorted({str(r["state"]) for r in per_run})
        },
        "makespan_s": max(ends) - first if ends else None,
        "to_all_running_s": median_of("to_all_running_s"),
        "to_clusterspec_s": median_of("to_clusterspec_s"),
        "chief_exit_to_gone_s": median_of("chief_exit_to_gone_s"),
        "to_end_s": median_of("to_end_s"),
        "api_requests": counts,
        "api_requests_total": sum(counts.values()),
        "api_requests_per_replica": sum(counts.values()) / replicas,
        "peak_running_slots": peak("running"),
        "peak_deferred": peak("deferred"),
        "peak_waiting": max((s["queued"] + s["scheduled"] for s in samples), default=0),
        "peak_triggerer_connections": peak("triggerer_connections"),
        "peak_apiserver_connections": peak("apiserver_connections"),
        "peak_triggerer_rss_mib": peak("triggerer_rss_kib") / 1024,
        "peak_apiserver_rss_mib": peak("apiserver_rss_kib") / 1024,
        "objects_left": count_left_objects(core),
        "airflow_server_errors": dict(airflow.server_errors),
        "runs": per_run,
        "timeline": [{**s, "t": s["t"] - first} for s in samples],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--nodes", type=int, default=16)
    # Training must outlast the batch's spread of ClusterSpec deliveries (and train's own start),
    # or no trigger ever waits: at 20 s, 10 jobs never had a train task deferred.
    parser.add_argument("--run-seconds", type=int, default=150)
    parser.add_argument("--batch-timeout-s", type=float, default=1500.0)
    parser.add_argument("--out", type=Path, default=BENCH / "out" / "concurrent_scale.json")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-cscale-"))
    result: dict[str, Any] = {
        "nodes": args.nodes,
        "tenants": list(scale_world.TENANTS),
        "replicas_per_job": dict(REPLICAS),
        "batches": [],
    }
    started = time.monotonic()
    ok = True
    try:
        scale_world.start_scale_world(folder, args.nodes, max(args.jobs))
        result["world_up_s"] = time.monotonic() - started
        for jobs in args.jobs:
            batch = measure_batch(folder, jobs, args.run_seconds, args.batch_timeout_s)
            result["batches"].append(batch)
            ok = ok and batch["succeeded"] == jobs and not batch["objects_left"]
            print(
                f"concurrent-scale {jobs} jobs: {batch['succeeded']}/{jobs} succeeded "
                f"{batch['states']}, makespan {batch['makespan_s']:.0f}s, "
                f"{batch['api_requests_per_replica']:.1f} API requests/replica, triggerer "
                f"peak {batch['peak_triggerer_connections']} connections "
                f"{batch['peak_triggerer_rss_mib']:.0f} MiB, slots peak "
                f"{batch['peak_running_slots']}",
                flush=True,
            )
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1))
    finally:
        roots = stop_world(folder)
        left = find_leftovers([folder, *map(Path, roots)])
        shutil.rmtree(folder, ignore_errors=True)
        result["left_behind"] = left
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    if left:
        print(f"concurrent-scale: left behind: {left}", flush=True)
    return 0 if ok and not left else 1


if __name__ == "__main__":
    sys.exit(main())
