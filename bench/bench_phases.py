#!/usr/bin/env python3
"""Measurement 3b: the per-phase trace of `digits-ps` runs, this tree against 71c72db (issue 29).

    python -m bench.bench_phases measure --world DIR [--tree PATH] [--label NAME] [--repeat 5]
    python -m bench.bench_phases compare [--baseline 71c72db] [--repeat 5] [--out FILE]

`measure` traces runs on a started world (bench/world.py up + airflow-up) with
bench/trace_run.py, which reads Airflow's REST API only, so it traces a world
of any tree: `--tree` is the tree whose own bench code packs the bundle and
builds the request. `compare` makes a `git worktree` of the baseline commit,
starts that tree's world with its own bench/world.py (PYTHONPATH=the tree, so
its packages win over the editable install; the DAG's `fileloc` is checked),
measures, stops it, then does the same for this tree, one world at a time,
and removes the worktree. Each run records the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.airflow_runs import SUBMIT_DAG_ID, await_run, parse_time, trigger_run
from bench.bench_wholerun import PodLogWatcher
from bench.trace_run import (
    CLUSTERSPEC_TASK,
    median_serving_delay,
    read_trace,
    split_run,
    summarise_runs,
)
from bench.world import load_airflow, load_world

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
BASELINE = "71c72db"
RUN_TIMEOUT_S = 600
WORLD_STEP_TIMEOUT_S = 900
CURRENT = "current"
NAMESPACE = "tfjob-test"  # the bench world's namespace in every tree (pipeline fixtures)
# Packs digits-ps and builds its request with the tree's own bench code (its bundle format,
# its request model), printed as JSON; the tree's bench/ and tests/ are on sys.path as its
# world.py puts them.
PREPARE_CODE = """
import json, sys
from pathlib import Path
tree, folder = Path(sys.argv[1]), Path(sys.argv[2])
sys.path[:0] = [str(tree / "bench"), str(tree / "tests"), str(tree)]
import bench_wholerun, world
w, _ = world.load_world(folder)
print("CONF " + json.dumps(bench_wholerun.build_conf(w, bench_wholerun.upload_bundle(w, folder))))
"""


def tree_env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def prepare_conf(tree: Path, folder: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PREPARE_CODE, str(tree), str(folder)],
        cwd=tree,
        env=tree_env(tree),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("CONF "))
    return json.loads(line[len("CONF ") :])


def check_dag_file(airflow: Any, tree: Path) -> str:
    """The submit DAG's file must be the tree's: proof the world runs that tree's code."""
    fileloc = airflow.request("GET", f"/api/v2/dags/{SUBMIT_DAG_ID}/details")["fileloc"]
    if not str(fileloc).startswith(str(tree.resolve()) + os.sep):
        raise RuntimeError(f"world of {tree} runs the DAG file {fileloc}, not that tree's")
    return str(fileloc)


def trace_one_run(world: Any, airflow: Any, conf: dict[str, Any]) -> dict[str, Any]:
    run_id, sent = trigger_run(airflow, conf)
    watcher = PodLogWatcher(world, NAMESPACE, "")  # one run at a time: every pod is this run's
    watcher.start()
    run = await_run(airflow, run_id, RUN_TIMEOUT_S)
    watcher.stop_event.set()
    watcher.join(5)
    trace = read_trace(airflow, run_id)
    if run["state"] != "success":
        raise RuntimeError(f"digits-ps run {run_id} ended {run['state']}")
    ends = {ti["task_id"]: ti.get("end_date") for ti in trace["task_instances"]}
    tf_import = median_serving_delay(
        list(watcher.serving.values()), parse_time(ends.get(CLUSTERSPEC_TASK))
    )
    result = split_run(trace, watcher.chief_finished_at, tf_import)
    return result | {
        "sent": sent,
        "chief_exit": watcher.chief_finished_at,
        "load_average": list(os.getloadavg()),
        "trace": trace,
    }


def measure(folder: Path, tree: Path, repeat: int) -> dict[str, Any]:
    world, _record = load_world(folder)
    airflow = load_airflow(folder)
    fileloc = check_dag_file(airflow, tree)
    conf = prepare_conf(tree, folder)
    runs = []
    for attempt in range(repeat):
        result = trace_one_run(world, airflow, conf)
        runs.append(result)
        head = ", ".join(f"{k} {v:.1f}" for k, v in result["headline"].items() if v is not None)
        print(f"phases try {attempt + 1}: {head}; load {result['load_average']}", flush=True)
    return {
        "dag_file": fileloc,
        "runs": runs,
        "summary": summarise_runs(runs),
        "server_errors": {str(c): n for c, n in sorted(airflow.server_errors.items())},
    }


def world_step(tree: Path, step: str, folder: Path) -> None:
    """`bench/world.py STEP DIR` of the tree itself, with its packages first on the path."""
    subprocess.run(
        [sys.executable, str(tree / "bench" / "world.py"), step, str(folder)],
        cwd=tree,
        env=tree_env(tree),
        check=True,
        timeout=WORLD_STEP_TIMEOUT_S,
    )


def measure_tree(tree: Path, repeat: int) -> dict[str, Any]:
    """Start the tree's world, trace `repeat` runs, stop it (always)."""
    folder = Path(tempfile.mkdtemp(prefix="tfjob-phases-"))
    began = time.monotonic()
    try:
        world_step(tree, "up", folder)
        world_step(tree, "airflow-up", folder)
        print(f"phases: world of {tree} up in {time.monotonic() - began:.0f}s", flush=True)
        return measure(folder, tree, repeat) | {"tree": str(tree)}
    finally:
        world_step(tree, "down", folder)
        shutil.rmtree(folder, ignore_errors=True)


def compare(baseline: str, repeat: int, baseline_repeat: int, out: Path) -> dict[str, Any]:
    """The baseline commit's tree, then this tree, each in its own world, one at a time; `out`
    is written after each tree, so a failure in this tree's world keeps the baseline's runs."""
    results: dict[str, Any] = {}
    data = {"baseline": baseline if baseline_repeat > 0 else None, "trees": results}
    if baseline_repeat > 0:
        worktree = Path(tempfile.gettempdir()) / f"wt-{baseline}"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(worktree), baseline], cwd=REPO, check=True
        )
        try:
            results[baseline] = measure_tree(worktree, baseline_repeat)
        except (subprocess.SubprocessError, RuntimeError, OSError) as error:
            # e.g. its Airflow not answering in time on a loaded machine: say so, go on
            print(f"phases: {baseline} not measured: {error}", flush=True)
            results[baseline] = {"error": f"{type(error).__name__}: {error}"[:600]}
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, check=False
            )
        write_json(out, data)
    results[CURRENT] = measure_tree(REPO, repeat)
    return data


def write_json(out: Path, data: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("measure", help="trace runs on a started world")
    one.add_argument("--world", required=True, type=Path)
    one.add_argument("--tree", type=Path, default=REPO, help="the tree the world runs")
    one.add_argument("--label", default=CURRENT)
    both = sub.add_parser("compare", help="the baseline commit's world, then this tree's")
    both.add_argument("--baseline", default=BASELINE)
    both.add_argument(
        "--baseline-repeat", type=int, default=None, help="runs on the baseline (default --repeat)"
    )
    for each in (one, both):
        each.add_argument("--repeat", type=int, default=5)
        each.add_argument("--out", type=Path, default=BENCH / "out" / "phases.json")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if args.command == "measure":
        data = {
            "baseline": None,
            "trees": {args.label: measure(args.world, args.tree.resolve(), args.repeat)},
        }
    else:
        again = args.repeat if args.baseline_repeat is None else args.baseline_repeat
        data = compare(args.baseline, args.repeat, again, args.out)
    write_json(args.out, data)
    errors = {k: v["server_errors"] for k, v in data["trees"].items() if v.get("server_errors")}
    if errors:
        print(f"phases: FAILED: Airflow answered 5xx {errors}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
