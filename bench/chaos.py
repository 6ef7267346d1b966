#!/usr/bin/env python3
"""`make chaos`: runs through the real pipeline while faults land at random times and phases.

    .venv/bin/python -m bench.chaos [--runs 30] [--faults 12] [--seed 0]
                                    [--out bench/out/chaos-<seed>.json] [--results RESULTS.md]

Starts its own self-healing embedded default (bench/chaos_world.py: `scripts/services.py up`
in a temporary state dir, free ports), then submits the planned runs (bench/chaos_plan.py:
stand-ins, single and parameter-server, over two tenants; the first a scheduled request
file) in waves of concurrent runs. While a wave runs, each of its planned faults waits for
its run to reach the fault's phase (the run's task states over Airflow's REST API), waits
its delay, and is injected (bench/chaos_faults.py); the faults of a wave run side by side.
After the last wave it reads back what happened (bench/chaos_observe.py), stops the world,
checks every invariant (bench/chaos_invariants.py) and writes the JSON (`--out`) and, with
`--results`, the chaos section of that RESULTS.md (bench/report_chaos.py) from `--out` and
each `--also` JSON. Exits 1 on any violation (and on a soak that broke: its traceback).
`--seed` makes it reproducible: the same runs and the same fault plan.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import report_chaos
from bench.airflow_runs import FINISHED, parse_time, trigger_run
from bench.chaos_faults import NODES, FaultNotApplicable, Target, inject
from bench.chaos_invariants import RunSeen, SoakSeen, check_soak
from bench.chaos_observe import (
    TrackedRun,
    find_credential_hits,
    find_objects_left,
    observe_run,
    read_latest,
    read_task_states,
)
from bench.chaos_plan import (
    POD_FAULTS,
    PlannedFault,
    PlannedRun,
    build_fault_plan,
    build_run_plan,
    read_phase,
)
from bench.chaos_world import (
    ChaosWorld,
    await_dags,
    build_request,
    prepare_world,
    run_deadline_s,
    start_world,
    stop_world,
    write_scheduled_request,
)
from tfjob.naming import tenant_namespace
from tfjob.pipeline_ids import request_dag_id, submit_dag_id

BENCH = Path(__file__).resolve().parent
POLL_S = 1.0
OBJECTS_GONE_TIMEOUT_S = 120


def submit(world: ChaosWorld, run: PlannedRun) -> TrackedRun:
    if run.scheduled:
        write_scheduled_request(world, run)
        return TrackedRun(run, request_dag_id(run.name), None, time.time())
    dag_id = submit_dag_id(run.tenant)
    run_id, sent = trigger_run(world.airflow(), build_request(run), dag_id)
    return TrackedRun(run, dag_id, run_id, sent)


def refresh(world: ChaosWorld, tracked: TrackedRun) -> None:
    """The run's id (a scheduled one's, once its DAG ran) and final state; a service down
    for a moment (a fault) leaves both as they were."""
    try:
        airflow = world.airflow()
        if tracked.run_id is None:
            answer = airflow.request("GET", f"/api/v2/dags/{tracked.dag_id}/dagRuns")
            runs = answer.get("dag_runs") or []
            if not runs:
                return
            tracked.run_id = runs[0]["dag_run_id"]
        run = airflow.request("GET", f"/api/v2/dags/{tracked.dag_id}/dagRuns/{tracked.run_id}")
    except Exception as error:  # a fault: Airflow, its database or the network down
        print(f"chaos: reading {tracked.planned.name}: {error!r}", flush=True)
        return
    if run["state"] in FINISHED:
        tracked.state, tracked.ended_at = run["state"], parse_time(run["end_date"])


def await_phase(world: ChaosWorld, fault: PlannedFault, run: TrackedRun) -> bool:
    """Until `run` is in the fault's phase (True), or beyond it, or ended (False)."""
    order = list(type(fault.phase))
    deadline = run.submitted_at + run_deadline_s(run.planned)
    while time.time() < deadline:
        refresh(world, run)
        if run.state is not None or run.run_id is None:
            if run.state is not None:
                return False
            time.sleep(POLL_S)
            continue
        try:
            phase = read_phase(read_task_states(world.airflow(), run.dag_id, run.run_id))
        except Exception as error:  # a fault elsewhere; ask again
            print(f"chaos: phase of {run.planned.name}: {error!r}", flush=True)
            phase = None
        if phase is fault.phase:
            return True
        if phase is not None and order.index(phase) > order.index(fault.phase):
            return False
        time.sleep(POLL_S)
    return False


def carry_out(
    world: ChaosWorld, fault: PlannedFault, run: TrackedRun, wave: list[TrackedRun], began: float
) -> dict[str, Any]:
    """Wait for the phase, then inject; the record of what happened."""
    row = {"index": fault.index, "kind": fault.kind.value, "phase": fault.phase.value}
    row |= {"run": run.planned.name, "delay_s": fault.delay_s}
    if not await_phase(world, fault, run):
        return row | {"status": "skipped", "detail": f"the run was past {fault.phase.value}"}
    time.sleep(fault.delay_s)
    target = Target(tenant_namespace(run.planned.tenant), run.planned.name, run.dag_id, run.run_id)
    row["at_s"] = round(time.time() - began, 1)
    # the runs in flight when it lands (an injector may return after they ended: `up` again)
    hit = [run] if fault.kind in POD_FAULTS else [r for r in wave if r.state is None]
    try:
        detail = inject(world, fault.kind, target, random.Random(fault.index))
    except FaultNotApplicable as error:
        return row | {"status": "skipped", "detail": str(error)}
    for each in hit:
        each.faults.append(fault.kind)
    print(f"chaos: fault {fault.index} {fault.kind.value} on {run.planned.name}: {detail}")
    return row | {"status": "injected", "detail": detail}


def run_wave(
    world: ChaosWorld, runs: list[PlannedRun], faults: list[PlannedFault], began: float
) -> tuple[list[TrackedRun], list[dict[str, Any]]]:
    """Submit the wave's runs, carry out its faults side by side, wait for its runs' ends."""
    wave = [submit(world, run) for run in runs]
    rows: list[dict[str, Any]] = []

    def one(fault: PlannedFault) -> None:
        run = wave[fault.index % len(wave)]
        try:
            rows.append(carry_out(world, fault, run, wave, began))
        except Exception as error:  # the injector broke: the soak says so, the wave goes on
            row = {"index": fault.index, "kind": fault.kind.value, "phase": fault.phase.value}
            rows.append(row | {"run": run.planned.name, "status": "error", "detail": repr(error)})

    threads = [threading.Thread(target=one, args=(fault,), daemon=True) for fault in faults]
    for thread in threads:
        thread.start()
    while waiting := [
        run
        for run in wave
        if run.state is None and time.time() < run.submitted_at + run_deadline_s(run.planned)
    ]:
        for run in waiting:
            refresh(world, run)
        time.sleep(POLL_S * 2)
    for thread in threads:
        thread.join()
    return wave, sorted(rows, key=lambda row: row["index"])


def await_objects_gone(world: ChaosWorld, namespaces: list[str]) -> list[str]:
    deadline = time.monotonic() + OBJECTS_GONE_TIMEOUT_S
    while (left := find_objects_left(world, namespaces)) and time.monotonic() < deadline:
        time.sleep(2)
    return left


def run_soak(seed: int, runs: int, faults: int, keep: bool) -> tuple[dict[str, Any], int]:
    plan = build_run_plan(seed, runs)
    waves = max(run.wave for run in plan) + 1
    fault_plan = build_fault_plan(seed, faults, waves)
    folder = Path(tempfile.mkdtemp(prefix="chaos-"))
    world = prepare_world(folder)
    began = time.time()
    tracked: list[TrackedRun] = []
    injected: list[dict[str, Any]] = []
    try:
        start_world(world)
        await_dags(world, sorted({submit_dag_id(run.tenant) for run in plan}))
        world_up_s = time.time() - began
        print(f"chaos: world up in {world_up_s:.0f} s ({folder})", flush=True)
        for wave in range(waves):
            wave_runs = [run for run in plan if run.wave == wave]
            wave_faults = [fault for fault in fault_plan if fault.wave == wave]
            wave_tracked, wave_injected = run_wave(world, wave_runs, wave_faults, began)
            tracked += wave_tracked
            injected += wave_injected
        NODES.finish()
        namespaces = sorted({tenant_namespace(run.tenant) for run in plan})
        objects_left = await_objects_gone(world, namespaces)
        observed = tuple(observe_run(world, run) for run in tracked)
        outputs = sorted({run.output for run in observed})
        seen = SoakSeen(
            runs=observed,
            latest={output: read_latest(world, output) for output in outputs},
            objects_left=tuple(objects_left),
            credential_hits=tuple(find_credential_hits(world)),
        )
    finally:
        leftovers = [] if keep else stop_world(world)
    seen = SoakSeen(**{**seen.__dict__, "leftovers": tuple(leftovers)})
    violations = check_soak(seen)
    summary = report_chaos.summarise(
        seed=seed,
        injected=injected,
        runs=[describe_run(run) for run in seen.runs],
        violations=violations,
        duration_s=time.time() - began,
        world_up_s=world_up_s,
        command=f"python -m bench.chaos --runs {runs} --faults {faults} --seed {seed}",
    )
    if not keep:
        shutil.rmtree(folder, ignore_errors=True)
    return summary, summary["violation_count"]


def describe_run(run: RunSeen) -> dict[str, Any]:
    took = round(run.ended_at - run.submitted_at, 1) if run.ended_at else None
    faults = [kind.value for kind in run.faults]
    return {"name": run.name, "state": run.state, "run_id": run.run_id, "took_s": took} | {
        "faults": faults,
        "restarts": run.restarts,
        "failure_reason": run.failure_reason[-600:],
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--faults", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="default: bench/out/chaos-<seed>.json")
    parser.add_argument("--results", type=Path, help="a RESULTS.md whose chaos section to write")
    parser.add_argument("--also", type=Path, nargs="*", default=[], help="other soaks' JSON")
    parser.add_argument("--keep-world", action="store_true", help="leave the world running")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # run_all.py or make stopping the soak with SIGTERM: unwind, so its world is stopped too.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    out = args.out or BENCH / "out" / f"chaos-{args.seed}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    summary, violations = run_soak(args.seed, args.runs, args.faults, args.keep_world)
    out.write_text(json.dumps(summary, indent=1))
    print(report_chaos.build_section([summary]))
    if args.results:
        report_chaos.write_section(args.results, [out, *args.also])
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
