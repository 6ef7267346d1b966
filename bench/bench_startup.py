#!/usr/bin/env python3
"""Measurement 1: start-up overhead vs replica count, and API requests per job (issue 8).

    python bench/bench_startup.py --world DIR [--replicas 2 8 32] [--repeat 5]

For each replica count, `--repeat` jobs of the stand-in program (no
TensorFlow: it waits for cluster.json, then the chief exits 0; ps and the
other workers run until torn down, like TensorFlow's) go through the
product's own task code in this process (bench/driver.py): launch start →
every pod Running with an IP (`TrainingLaunchOperator.execute`); → ClusterSpec
delivered to every pod (`steps.deliver_cluster_spec`); the trigger sees the
chief's exit (`TrainingTrigger.run`) → every object gone (`steps.teardown`).
API requests are counted on the client side (bench/apicount.py). Writes
bench/out/startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent

from bench.airflow_runs import parse_time  # noqa: E402
from bench.apicount import ApiCounter, find_span, summarise_calls  # noqa: E402
from bench.stats import fit_line, summarise  # noqa: E402
from bench.world import load_world  # noqa: E402
from tfjob.pipeline_ids import VALIDATE_TASK, request_dag_id  # noqa: E402

TRAIN_TIMEOUT_S = 300
# Everything but the deciding replica runs until teardown, as TensorFlow's ps and PSS workers do.
LINGER = {"*": {"sleep": 3600}}


def replica_shape(count: int) -> tuple[dict[str, int], str, str]:
    """(replicas, success_policy, deciding replica) for a parameter-server job of `count` pods."""
    if count < 2:
        raise ValueError(
            f"--replicas: {count} given; a distributed job needs at least 2 (ps + worker)"
        )
    if count == 2:
        return {"ps": 1, "worker": 1}, "worker0", "worker-0"
    ps = max(1, count // 16)
    return {"chief": 1, "ps": ps, "worker": count - 1 - ps}, "chief", "chief-0"


def build_request(world: Any, name: str, count: int) -> dict[str, Any]:
    replicas, policy, deciding = replica_shape(count)
    behaviour = {**LINGER, deciding: {}}
    return world.request(
        name,
        mode="distributed",
        strategy="parameter_server",
        replicas=replicas,
        success_policy=policy,
        startup_timeout=240,
        active_deadline=900,
        env={"STANDIN_BEHAVIOUR": json.dumps(behaviour)},
    )


def measure_job(
    world: Any, counter: ApiCounter, count: int, attempt: int, profiled: bool = False
) -> dict[str, Any]:
    from bench import driver

    name = f"startup-n{count}-r{attempt}"
    path = world.write_request(build_request(world, name, count))
    run = driver.DrivenRun(str(path), f"bench__{uuid.uuid4().hex[:12]}", request_dag_id(name))
    driver.validate_and_fetch(run)
    counter.take()
    calls: dict[str, Any] = {}
    started = run.stamp("launch_start")
    driver.launch(run)
    run.stamp("all_running")
    calls["launch"] = counter.take()
    driver.deliver_cluster_spec(run)
    run.stamp("delivered")
    calls["clusterspec"] = counter.take()
    profile = profile_exec(world, run) if profiled else None
    counter.take()
    event = driver.await_training_end(run, TRAIN_TIMEOUT_S)
    run.stamp("exit_seen")
    seen_at = time.time()
    calls["train"] = counter.take()
    if event.state != "succeeded":
        raise RuntimeError(f"job {name}: training ended {event.state}: {event.failed}")
    driver.teardown(run)
    run.stamp("all_gone")
    gone_at = time.time()
    _replicas, _policy, deciding = replica_shape(count)
    finished = next(
        (r.finished_at for r in event.replicas if r.replica_id == deciding),
        None,
    )
    exited_at = parse_time(finished)
    calls["teardown"] = counter.take()
    left = world.run_objects(name)
    if left:
        raise RuntimeError(f"job {name}: objects left after teardown: {left}")
    t = run.times
    creating = find_span(calls["launch"], "POST", "pods")
    return {
        "replicas": count,
        "launch_to_running_s": t["all_running"] - started,
        "running_to_delivered_s": t["delivered"] - t["all_running"],
        # inside launch: before the first pod is created (leftovers, presign, ConfigMap, Secret),
        # creating the pods one by one, and the cluster starting them
        "launch_prepare_s": creating[0] - started if creating else None,
        "launch_create_pods_s": creating[1] - creating[0] if creating else None,
        "launch_pods_start_s": t["all_running"] - creating[1] if creating else None,
        "exit_to_gone_s": t["all_gone"] - t["exit_seen"],
        # the kubelet's finishedAt (same machine clock): exit → the trigger's event → all gone
        "exit_to_seen_s": seen_at - exited_at if exited_at else None,
        "chief_exit_to_gone_s": gone_at - exited_at if exited_at else None,
        "requests": {phase: len(items) for phase, items in calls.items()},
        "requests_total": sum(len(items) for items in calls.values()),
        "request_kinds": summarise_calls([c for items in calls.values() for c in items]),
        "exec_profile": profile,
    }


PARALLEL_PROFILE_EXECS = 16
PARALLEL_PROFILE_REPEAT = 5


def profile_exec(world: Any, run: Any, repeat: int = 10) -> dict[str, Any]:
    """Where one delivery's time goes: an API round trip, an exec of `true`, a whole delivery.

    Against a pod of `run` that keeps running (ps-0), in the same world, right after its delivery.
    """
    import time as clock

    from kubernetes.stream import stream

    from operators.delivery import DELIVERY_WORKERS, deliver_cluster_file
    from operators.runinfo import read_run
    from runtime.protocol import MAIN_CONTAINER

    info = read_run(run.store[(VALIDATE_TASK, "return_value")])
    pod = next(name for name in info.pod_names() if "-ps-" in name)
    api = world.kube.core_v1()

    def timed(action: Any, times: int = repeat) -> dict[str, float | int]:
        spent = []
        for _ in range(times):
            began = clock.perf_counter()
            action()
            spent.append(clock.perf_counter() - began)
        return summarise(spent).as_dict()

    def exec_true() -> None:
        stream(
            api.connect_get_namespaced_pod_exec,
            pod,
            info.namespace,
            command=["true"],
            container=MAIN_CONTAINER,
            stdin=False,
            stdout=True,
            stderr=True,
            tty=False,
        )

    content = json.dumps({"tf_config": {"cluster": {}, "task": {"type": "worker", "index": 0}}})

    def deliver_many(workers: int) -> None:
        # PARALLEL_PROFILE_EXECS delivery-shaped execs into the one running pod, `workers` at a
        # time, each thread with its own client (what deliver_cluster_files does across a job's
        # pods). Each call writes its own file: the contract's temp name is one per pod, and
        # concurrent writes into one pod would race on it.
        from concurrent.futures import ThreadPoolExecutor

        from operators.delivery import clone_core_api

        clients = [clone_core_api(api) for _ in range(workers)]

        def deliver(i: int) -> None:
            stream(
                clients[i % workers].connect_get_namespaced_pod_exec,
                pod,
                info.namespace,
                command=[
                    "sh",
                    "-c",
                    'printf "%s" "$1" > /tfjob/config/.bench-$2.tmp'
                    " && mv /tfjob/config/.bench-$2.tmp /tfjob/config/bench-$2.json",
                    "sh",
                    content,
                    str(i),
                ],
                container=MAIN_CONTAINER,
                stdin=False,
                stdout=True,
                stderr=True,
                tty=False,
            )

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(deliver, range(PARALLEL_PROFILE_EXECS)))

    return {
        "get_pod_s": timed(lambda: api.read_namespaced_pod(pod, info.namespace)),
        "exec_true_s": timed(exec_true),
        "deliver_one_s": timed(lambda: deliver_cluster_file(api, info.namespace, pod, content)),
        "parallel_execs": PARALLEL_PROFILE_EXECS,
        "deliver_serial_s": timed(lambda: deliver_many(1), PARALLEL_PROFILE_REPEAT),
        "deliver_parallel_s": timed(
            lambda: deliver_many(DELIVERY_WORKERS), PARALLEL_PROFILE_REPEAT
        ),
    }


def summarise_present(values: Any) -> dict[str, float | int] | None:
    """Summary of the values that were measured (not None), or None when none was."""
    present = [v for v in values if v is not None]
    return summarise(present).as_dict() if present else None


def summarise_startup(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per replica count: summaries of each timing and the request count; a line fit of requests."""
    by_count: dict[int, list[dict[str, Any]]] = {}
    for job in jobs:
        by_count.setdefault(job["replicas"], []).append(job)
    rows = {}
    for count, group in sorted(by_count.items()):
        rows[str(count)] = {
            key: summarise_present(j.get(key) for j in group)
            for key in (
                "launch_to_running_s",
                "launch_prepare_s",
                "launch_create_pods_s",
                "launch_pods_start_s",
                "running_to_delivered_s",
                "exit_to_gone_s",
                "exit_to_seen_s",
                "chief_exit_to_gone_s",
                "requests_total",
            )
        }
        rows[str(count)]["requests_by_phase"] = group[-1]["requests"]
        rows[str(count)]["request_kinds"] = group[-1]["request_kinds"]
    counts = sorted(by_count)
    fit = None
    if len(counts) >= 2:
        slope, intercept = fit_line(
            [j["replicas"] for j in jobs], [j["requests_total"] for j in jobs]
        )
        fit = {"per_replica": slope, "constant": intercept}
    profile = next((j["exec_profile"] for j in jobs if j.get("exec_profile")), None)
    return {"by_replicas": rows, "requests_fit": fit, "exec_profile": profile}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", required=True, type=Path)
    parser.add_argument("--replicas", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=BENCH / "out" / "startup.json")
    args = parser.parse_args()
    world, record = load_world(args.world)
    os.environ.update(record["env"])  # before Airflow is imported: it reads its config then
    counter = ApiCounter().install()
    jobs = []
    began = time.monotonic()
    for attempt in range(args.repeat):
        for count in args.replicas:
            job = measure_job(world, counter, count, attempt, profiled=attempt == 0 and count == 2)
            jobs.append(job)
            print(
                f"startup n={count} try {attempt + 1}: running {job['launch_to_running_s']:.2f}s, "
                f"delivered +{job['running_to_delivered_s']:.2f}s, gone "
                f"{job['exit_to_gone_s']:.2f}s "
                f"after exit, {job['requests_total']} API requests",
                flush=True,
            )
    from operators.settings import TEARDOWN_GRACE_SECONDS

    report = {
        "jobs": jobs,
        "summary": summarise_startup(jobs),
        "wall_s": time.monotonic() - began,
        "teardown_grace_s": TEARDOWN_GRACE_SECONDS,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
