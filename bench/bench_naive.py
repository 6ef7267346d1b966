#!/usr/bin/env python3
"""Measurement 2: the same N replicas as N plain KubernetesPodOperator executions (issue 8).

    python bench/bench_naive.py --world DIR [--replicas 8 32] [--repeat 5]

What a user without this project writes: one KubernetesPodOperator task per
replica. Each execution here is the provider's unchanged
`KubernetesPodOperator.execute` (default: not deferrable, follows the pod's
log, deletes the pod at the end) in its own thread, as N worker slots of an
executor would run them at once; the pods are the very pods the launch task
creates (`tfjob.manifests.build_pod_manifests`, given as `full_pod_spec`,
ConfigMap and Secret made beforehand, outside the clock), so only the way of
launching differs. Timed: first execute starts → every pod Running with an IP
(seen by a watch of our own, with the same gang verdict the launch task
uses). Worker slots: each execution holds its slot until its pod ends, so N
slots are held for as long as the replicas run; slot-seconds are summed.
The pods get no ClusterSpec from anyone (the naive way has none); the
benchmark writes one into each so the stand-ins exit and every execution
ends normally. The model owner's keeper container (tfjob/manifests.py: it
keeps the chief's pod alive until teardown, so archive can copy a model out)
is left out: it is ours, a naive user has none, and with it the chief's pod
never ends, so its KubernetesPodOperator would wait out END_TIMEOUT_S.
Writes bench/out/naive.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent

from bench.apicount import ApiCounter, find_span  # noqa: E402
from bench.bench_startup import replica_shape, summarise_present  # noqa: E402
from bench.world import load_world  # noqa: E402
from tfjob.pipeline_ids import FETCH_BUNDLE_TASK, VALIDATE_TASK, request_dag_id  # noqa: E402

RUNNING_TIMEOUT_S = 240
END_TIMEOUT_S = 240


class NaiveTaskInstance:
    """The few TaskInstance attributes KubernetesPodOperator reads (labels, try number, XCom)."""

    def __init__(self, dag_id: str, task_id: str, run_id: str) -> None:
        self.dag_id, self.task_id, self.run_id = dag_id, task_id, run_id
        self.try_number = 1
        self.map_index = -1
        self.start_date = None

    def xcom_push(self, key: str, value: Any) -> None:
        pass


def prepare_run(world: Any, name: str, count: int) -> Any:
    """Validate and snapshot the request, and create the run's ConfigMap and Secret (untimed)."""
    from bench import driver
    from bench.bench_startup import build_request
    from operators import kubeobjects
    from operators.grants import plan_grants, sign_grants
    from operators.launch import read_runtime_files
    from operators.runinfo import read_run
    from tfjob.manifests import (
        build_access_secret,
        build_runtime_configmap,
        build_tensorboard_secrets,
        build_upload_secret,
    )

    body = build_request(world, name, count)
    body["env"] = {
        "STANDIN_BEHAVIOUR": json.dumps({"*": {"sleep": 0}})
    }  # everyone exits once released
    path = world.write_request(body)
    # The request file's own DAG id: validate holds a file to the DAG it makes.
    run = driver.DrivenRun(str(path), f"naive__{uuid.uuid4().hex[:12]}", request_dag_id(name))
    driver.validate_and_fetch(run)
    info = read_run(run.store[(VALIDATE_TASK, "return_value")])
    plan = plan_grants(info, run.store[(FETCH_BUNDLE_TASK, "return_value")]["snapshot"])
    grants = sign_grants(plan)
    api = world.kube.core_v1()
    kubeobjects.create_objects(
        api,
        info.namespace,
        [
            build_runtime_configmap(info.identity(), read_runtime_files(), info.request.tenant),
            build_access_secret(info.identity(), grants.bundle_url, info.request.tenant),
            build_upload_secret(info.identity(), grants.upload, info.request.tenant),
            *build_tensorboard_secrets(info.identity(), grants.tensorboard, info.request.tenant),
        ],
    )
    return run, info


def run_naive(world: Any, counter: ApiCounter, count: int, attempt: int) -> dict[str, Any]:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
    from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator

    from operators import kubeobjects
    from operators.delivery import deliver_cluster_file
    from operators.replicas import GangState, judge_gang_start
    from runtime.protocol import KEEPER_CONTAINER, MAIN_CONTAINER
    from tfjob.manifests import build_pod_manifests

    name = f"naive-n{count}-r{attempt}"
    run, info = prepare_run(world, name, count)
    manifests = build_pod_manifests(info.request, info.identity())
    for manifest in manifests:  # the naive way has no keeper (see the module docstring)
        spec = manifest["spec"]
        spec["containers"] = [c for c in spec["containers"] if c["name"] != KEEPER_CONTAINER]
    api = world.kube.core_v1()
    held: dict[str, tuple[float, float]] = {}
    errors: list[str] = []

    def execute(manifest: dict[str, Any]) -> None:
        pod_name = manifest["metadata"]["name"]
        operator = KubernetesPodOperator(
            task_id=pod_name,
            namespace=info.namespace,
            name=pod_name,
            random_name_suffix=False,
            full_pod_spec=PodGenerator.deserialize_model_dict(manifest),
            base_container_name=MAIN_CONTAINER,
            get_logs=True,
            on_finish_action="delete_pod",
        )
        ti = NaiveTaskInstance(run.dag_id, pod_name, run.run_id)
        context = {"ti": ti, "task_instance": ti, "run_id": run.run_id, "dag": None}
        began = time.perf_counter()
        try:
            operator.execute(context)
        except Exception as exc:  # reported, the measurement of this try is void
            errors.append(f"{pod_name}: {type(exc).__name__}: {exc}")
        held[pod_name] = (began, time.perf_counter())

    counter.take()
    threads = [threading.Thread(target=execute, args=(m,), daemon=True) for m in manifests]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    expected = info.pod_names()
    pods = kubeobjects.watch_run_pods(
        api,
        info.namespace,
        info.selector,
        time.monotonic() + RUNNING_TIMEOUT_S,
        lambda p: judge_gang_start(p, expected).state is not GangState.STARTING,
    )
    all_running = time.perf_counter()
    verdict = judge_gang_start(pods, expected)
    if verdict.state is not GangState.READY:
        raise RuntimeError(f"naive n={count}: the pods did not all start: {verdict}")
    slots_while_running = sum(1 for t in threads if t.is_alive())
    creating = find_span(counter.take(), "POST", "pods")
    # Release the stand-ins (the naive way would need its own ClusterSpec plumbing).
    for pod_name in expected:
        deliver_cluster_file(
            api,
            info.namespace,
            pod_name,
            json.dumps({"tf_config": {"cluster": {}, "task": {"type": "worker", "index": 0}}}),
        )
    for thread in threads:
        thread.join(END_TIMEOUT_S)
    ended = time.perf_counter()
    stuck = sorted(p for p in expected if p not in held)
    kubeobjects.delete_run_objects(api, info.namespace, info.selector, grace_period_seconds=0)
    if errors:
        raise RuntimeError(f"naive n={count}: executions failed: {errors[:3]}")
    if stuck:  # their slot-seconds would be missing from the sum
        raise RuntimeError(
            f"naive n={count}: {len(stuck)} executions still waiting for their pod "
            f"{END_TIMEOUT_S} s after release: {stuck[:3]}"
        )
    return {
        "replicas": count,
        "start_to_running_s": all_running - started,
        "create_pods_s": creating[1] - creating[0] if creating else None,
        "pods_start_s": all_running - creating[1] if creating else None,
        "slots_while_running": slots_while_running,
        "slot_seconds": sum(end - began for began, end in held.values()),
        "wall_s": ended - started,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", required=True, type=Path)
    parser.add_argument("--replicas", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=BENCH / "out" / "naive.json")
    args = parser.parse_args()
    world, record = load_world(args.world)
    os.environ.update(record["env"])  # before Airflow is imported: it reads its config then
    for count in args.replicas:
        replica_shape(count)  # fail early on a bad count
    counter = ApiCounter().install()
    jobs = []
    for attempt in range(args.repeat):
        for count in args.replicas:
            job = run_naive(world, counter, count, attempt)
            jobs.append(job)
            print(
                f"naive n={count} try {attempt + 1}: all running after "
                f"{job['start_to_running_s']:.2f}s, "
                f"{job['slots_while_running']} slots held, {job['slot_seconds']:.1f} slot-seconds",
                flush=True,
            )
    summary = {}
    for count in args.replicas:
        group = [j for j in jobs if j["replicas"] == count]
        summary[str(count)] = {
            key: summarise_present(j.get(key) for j in group)
            for key in (
                "start_to_running_s",
                "create_pods_s",
                "pods_start_s",
                "slots_while_running",
                "slot_seconds",
            )
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"jobs": jobs, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
