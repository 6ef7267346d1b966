#!/usr/bin/env python3
"""Measurement 6: gang restarts: their latency, and the training a restart loses (issue 15).

    python bench/bench_restart.py --world DIR [--cases drain:4:10 kill:4:60 ...] [--repeat 3]

A case is `how:replicas:checkpoint_interval`. Each job is a parameter-server
gang of the stand-in program (chief + 1 ps + workers; the chief trains one
step a second and writes a TensorFlow-shaped checkpoint each step into
CHECKPOINT_DIR, which its bootstrap syncs to S3 every `checkpoint_interval`
seconds). It goes through the product's own task code in this process
(bench/driver.py): launch and ClusterSpec delivery as in measurement 1, then
the training trigger until it reports the failure, then exactly what `train`
does on a restart: `restart.judge_failed_attempt` and
`restart.start_new_gang` (stop the failed gang with grace, stage the run's
checkpoints into restore.json, create the new gang, wait until it runs,
deliver its ClusterSpec). Then teardown, and nothing of the job may be left.

How the replica is lost, once the chief has trained past a random step
between `interval + 2` and `2 × interval + 2` (so the failure falls at a
random point of the sync cycle):
- `drain`: the last worker is deleted with its grace period (a node drain, an
  eviction). The chief's bootstrap syncs once more on SIGTERM, so nothing
  trained up to the failure should be lost;
- `kill`: the chief, which owns the checkpoints, is deleted with grace 0 (a
  force delete; what a lost node or an OOM kill comes to): no last sync, the
  new gang resumes from the last periodic one.

Figures per job: restart latency = the trigger's failure event → every
replica of the new gang running with its ClusterSpec, split by the log lines
of `start_new_gang`; the chief's step at the failure (read from its
CHECKPOINT_DIR by an exec just before the loss), the step the new gang
restored, and their difference, the steps lost (each step is a second of
training). The new chief must print "resumed from step <restored>". Writes
bench/out/restart.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent

from bench.stats import summarise  # noqa: E402
from bench.world import load_world  # noqa: E402
from tfjob.pipeline_ids import GRANTS_KEY, LAUNCH_TASK, VALIDATE_TASK, request_dag_id  # noqa: E402

TRAIN_TIMEOUT_S = 600
FAILURE_NOTICE_TIMEOUT_S = 120
RESUME_TIMEOUT_S = 120
HOWS = ("drain", "kill")
# The phases of start_new_gang, by the first words of the log line that ends each.
PHASE_MARKS = (
    ("staged_s", "attempt 2: restoring"),
    ("staged_s", "attempt 2: no checkpoint"),
    ("created_s", "attempt 2: created"),
    ("running_s", "attempt 2: every replica runs"),
)


@dataclass(frozen=True)
class Case:
    how: str
    replicas: int
    interval: int

    @classmethod
    def parse(cls, text: str) -> Case:
        try:
            how, replicas, interval = text.split(":")
            case = cls(how, int(replicas), int(interval))
        except ValueError:
            raise SystemExit(
                f"--cases: {text!r} given; each is how:replicas:interval, e.g. drain:4:10"
            ) from None
        if case.how not in HOWS or case.replicas < 3 or case.interval < 1:
            raise SystemExit(
                f"--cases: {text!r} given; how is one of {', '.join(HOWS)}, "
                "replicas at least 3 (chief, ps, worker), interval at least 1 s"
            )
        return case

    @property
    def label(self) -> str:
        return f"{self.how}:{self.replicas}:{self.interval}"


class StampedLog(logging.Handler):
    """The log `start_new_gang` writes to, each message with its perf_counter stamp."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.perf_counter(), record.getMessage()))

    def first(self, words: str) -> float | None:
        return next((t for t, line in self.lines if line.startswith(words)), None)


def build_request(world: Any, name: str, case: Case) -> dict[str, Any]:
    workers = case.replicas - 2
    behaviour = {"*": {"sleep": 3600}, "chief-0": {"sleep": 3600, "checkpoint_every": 1}}
    return world.request(
        name,
        mode="distributed",
        strategy="parameter_server",
        replicas={"chief": 1, "ps": 1, "worker": workers},
        success_policy="chief",
        max_restarts=1,
        checkpoint_interval=case.interval,
        startup_timeout=240,
        active_deadline=TRAIN_TIMEOUT_S,
        env={"STANDIN_BEHAVIOUR": json.dumps(behaviour)},
    )


def exec_in(api: Any, namespace: str, pod: str, script: str) -> str:
    from kubernetes.stream import stream

    from runtime.protocol import MAIN_CONTAINER

    return stream(
        api.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        command=["sh", "-c", script],
        container=MAIN_CONTAINER,
        stdin=False,
        stdout=True,
        stderr=True,
        tty=False,
    )


def read_chief_step(api: Any, namespace: str, pod: str) -> int:
    """The chief's latest checkpoint step (0 before its first), from its CHECKPOINT_DIR."""
    text = exec_in(
        api,
        namespace,
        pod,
        'cat "${TFJOB_WORKSPACE:-/tfjob/workspace}/checkpoints/checkpoint" 2>/dev/null || true',
    )
    if '"ckpt-' not in text:
        return 0
    return int(text.split('"ckpt-', 1)[1].split('"', 1)[0])


def await_chief_step(api: Any, namespace: str, pod: str, step: int) -> int:
    deadline = time.monotonic() + step * 3 + 120
    while time.monotonic() < deadline:
        seen = read_chief_step(api, namespace, pod)
        if seen >= step:
            return seen
        time.sleep(min(1.0, max(0.2, (step - seen) / 2)))
    raise RuntimeError(f"the chief of pod {pod} did not reach step {step}")


def lose_replica(api: Any, namespace: str, pods: dict[str, str], how: str) -> int:
    """Lose one replica as `how` says; returns the chief's step just before."""
    from kubernetes import client as k8s

    step = read_chief_step(api, namespace, pods["chief-0"])
    if how == "drain":
        last = max((r for r in pods if r.startswith("worker-")), key=lambda r: int(r[7:]))
        api.delete_namespaced_pod(pods[last], namespace)  # its own grace period
    else:
        api.delete_namespaced_pod(
            pods["chief-0"], namespace, body=k8s.V1DeleteOptions(grace_period_seconds=0)
        )
    return step


def await_resumed(api: Any, namespace: str, pod: str, step: int | None) -> None:
    """The new chief said it resumed from the restored step (or trains from scratch)."""
    from runtime.protocol import MAIN_CONTAINER

    wanted = f"resumed from step {step}" if step else "TF_CONFIG="
    deadline = time.monotonic() + RESUME_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            text = api.read_namespaced_pod_log(pod, namespace, container=MAIN_CONTAINER)
        except Exception:  # noqa: BLE001 - not started yet
            text = ""
        if wanted in text:
            return
        time.sleep(0.5)
    raise RuntimeError(f"the new chief ({pod}) never printed {wanted!r}")


def measure_job(world: Any, case: Case, attempt: int, rng: random.Random) -> dict[str, Any]:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    from bench import driver
    from operators import restart
    from operators.runinfo import read_run
    from operators.settings import KUBERNETES_CONN_ID
    from tfjob.records.run import GrantPlan
    from tfjob.restart_policy import Decision, RestartPolicy

    name = f"restart-{case.how}-n{case.replicas}-i{case.interval}-r{attempt}"
    path = world.write_request(build_request(world, name, case))
    run = driver.DrivenRun(str(path), f"bench__{uuid.uuid4().hex[:12]}", request_dag_id(name))
    driver.validate_and_fetch(run)
    driver.launch(run)
    driver.deliver_cluster_spec(run)
    info = read_run(run.store[(VALIDATE_TASK, "return_value")])
    api = KubernetesHook(conn_id=KUBERNETES_CONN_ID).core_v1_client
    pods = {
        f"{role}-{index}": pod
        for (role, index), pod in zip(info.replica_ids(), info.pod_names(), strict=True)
    }
    try:
        target = rng.randint(case.interval + 2, 2 * case.interval + 2)
        await_chief_step(api, info.namespace, pods["chief-0"], target)
        step_at_failure = lose_replica(api, info.namespace, pods, case.how)
        lost_at = time.perf_counter()
        event = driver.await_training_end(run, FAILURE_NOTICE_TIMEOUT_S)
        noticed = time.perf_counter()
        if event.state != "failed":
            raise RuntimeError(f"job {name}: the trigger reported {event.state}, not the loss")
        history = restart.first_attempt(run.store.get((LAUNCH_TASK, "ready_at")))
        verdict, history = restart.judge_failed_attempt(
            RestartPolicy.of(info.request), history, event
        )
        if verdict.decision is not Decision.RESTART:
            raise RuntimeError(f"job {name}: not restarted: {verdict.reason}")
        log = logging.getLogger(f"bench.restart.{name}")
        log.propagate = False
        log.setLevel(logging.INFO)
        stamps = StampedLog()
        log.addHandler(stamps)
        payload = run.store.get((LAUNCH_TASK, GRANTS_KEY))
        plan = GrantPlan.from_payload(payload) if payload else None
        started = restart.start_new_gang(api, info, history, plan, log)
        ready = time.perf_counter()
        restored = started.attempts[-1].restored_checkpoint_step
        await_resumed(api, info.namespace, pods["chief-0"], restored)
    finally:
        driver.teardown(run)
    left = world.run_objects(name)
    if left:
        raise RuntimeError(f"job {name}: objects left after teardown: {left}")
    phases = {key: stamps.first(words) for key, words in PHASE_MARKS if stamps.first(words)}
    return {
        "case": case.label,
        "how": case.how,
        "replicas": case.replicas,
        "interval_s": case.interval,
        "failed_replica": event.failed.replica_id,
        "loss_to_noticed_s": noticed - lost_at,
        "restart_latency_s": ready - noticed,
        "stop_and_stage_s": (phases.get("staged_s", ready) - noticed),
        "stage_to_created_s": (phases["created_s"] - phases["staged_s"])
        if "created_s" in phases and "staged_s" in phases
        else None,
        "created_to_running_s": (phases["running_s"] - phases["created_s"])
        if "running_s" in phases and "created_s" in phases
        else None,
        "delivery_s": ready - phases["running_s"] if "running_s" in phases else None,
        "step_at_failure": step_at_failure,
        "restored_step": restored,
        "steps_lost": max(0, step_at_failure - (restored or 0)),
        # what start_new_gang said, seconds after the failure was noticed
        "restart_log": [[round(t - noticed, 3), line[:300]] for t, line in stamps.lines],
    }


def summarise_restart(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per case: medians of the latency, its parts, and the steps lost."""
    by_case: dict[str, dict[str, Any]] = {}
    for label in dict.fromkeys(job["case"] for job in jobs):
        group = [job for job in jobs if job["case"] == label]
        row: dict[str, Any] = {key: group[0][key] for key in ("how", "replicas", "interval_s")}
        for key in (
            "loss_to_noticed_s",
            "restart_latency_s",
            "stop_and_stage_s",
            "stage_to_created_s",
            "created_to_running_s",
            "delivery_s",
            "steps_lost",
        ):
            values = [job[key] for job in group if job[key] is not None]
            row[key] = summarise(values).as_dict() if values else None
        row["restored_steps"] = [job["restored_step"] for job in group]
        row["steps_at_failure"] = [job["step_at_failure"] for job in group]
        by_case[label] = row
    return by_case


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", required=True, type=Path)
    parser.add_argument(
        "--cases",
        nargs="+",
        type=Case.parse,
        default=[Case.parse(c) for c in ("drain:4:10", "drain:16:10", "kill:4:10", "kill:4:60")],
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--out", type=Path, default=BENCH / "out" / "restart.json")
    args = parser.parse_args()
    world, record = load_world(args.world)
    os.environ.update(record["env"])  # before Airflow is imported: it reads its config then
    rng = random.Random(args.seed)
    jobs = []
    began = time.monotonic()
    for attempt in range(args.repeat):
        for case in args.cases:
            job = measure_job(world, case, attempt, rng)
            jobs.append(job)
            print(
                f"restart {case.label} try {attempt + 1}: {job['failed_replica']} lost at step "
                f"{job['step_at_failure']}, noticed in {job['loss_to_noticed_s']:.2f}s, new gang "
                f"running with its ClusterSpec {job['restart_latency_s']:.2f}s later, restored "
                f"step {job['restored_step']} ({job['steps_lost']} lost)",
                flush=True,
            )
    report = {
        "jobs": jobs,
        "summary": summarise_restart(jobs),
        "wall_s": time.monotonic() - began,
        "seed": args.seed,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
