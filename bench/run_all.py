#!/usr/bin/env python3
"""`make bench`: every measurement of issue 8 in one run, then bench/RESULTS.md.

    .venv/bin/python bench/run_all.py [--quick] [--only NAME ...] [--keep-world]

Order (each measurement is its own process, see bench/world.py for why):
pack+upload, DAG parse, the trigger's log following (8: one 4/8/16/32 MiB
line and 32 MiB of ordinary lines, old follower from git against today's;
1 MiB in --quick), the local S3 gate's cost per request (9: 60 GETs and 60
POSTs of 1 MiB each side; 5 in --quick) and the scale step (7: gangs of 128-1,024 replicas on
simulated nodes, its own localkube per job; 32 replicas in --quick; then 7b:
10, 50 and 100 concurrent 8-replica jobs through an Airflow of its own on
simulated nodes, not in --quick) first (no shared services), then the shared world (S3,
localkube, PostgreSQL, Airflow DB) for start-up (1), naive (2) and gang
restarts (6), then `airflow standalone` for whole-run (3) and concurrency
(5). The per-phase trace (3b) runs before the shared world in two worlds of its
own (71c72db's tree, then this one, 5 runs each); in --quick one run on the
shared Airflow, no baseline. Airflow starts only after 1, 2 and 6 so its idle work does not disturb
them. A measurement that fails is reported as failed in RESULTS.md, the
others still run, and the exit status is 1. Without 7b (`--only` the
others), the run is sized to stay under 30 minutes on 2 cores; 7b's 100 jobs
alone take most of an hour there. Sizes: 5 repetitions everywhere except the TensorFlow
whole run (5 runs, fewer only if the budget left when it starts runs out: it
says so), concurrency (one burst of 20 jobs) and restarts (3 of each case,
~9 min: a 60 s checkpoint interval needs over a minute of training per job);
the naive way runs 8 and 32 replicas.

`--only NAME ...` measures those alone and replaces only their sections (and
their rows of the step table) in the existing RESULTS.md; the other sections
stay as they were (report.merge_report).

`--quick` (`make bench-quick`, run by .ci/run) is a check that every
measurement still runs, not a measurement: 1 repetition, small sizes (an 8
MiB pack, 100 request files, 2 and 8 replicas, one TensorFlow run without the
import profile; no 7b, which make test runs), about 3 minutes on 2 cores. It writes its
logs, JSON and report to bench/out/quick/ and refuses to write
bench/RESULTS.md or bench/out/*.json, so it never replaces the figures of a
full run; it exits 1 when any measurement failed (a 5xx from Airflow fails
whole-run and concurrency) or when something of the world was left running.
A measurement that runs past its step timeout is stopped with its whole
process group (SIGINT, then SIGKILL), so nothing it started outlives it.

First step: byte-compile the venv and the repo (`compileall`, a no-op when
done). Without it every process (each Airflow task, each pod's `import
tensorflow`) compiled the Kubernetes clients and TensorFlow from source again:
the environment sets PYTHONDONTWRITEBYTECODE=1 and `uv pip install` writes no
.pyc files, so nothing was ever cached (measured: 10 s of `compile` in one
DagBag parse).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
QUICK_OUT = OUT / "quick"
RESULTS = BENCH / "RESULTS.md"

from bench import report_chaos  # noqa: E402
from bench.bench_sizes import FULL, QUICK, Sizes  # noqa: E402
from bench.measurement_process import (  # noqa: E402
    STEP_TIMEOUT_S,
    describe_machine,
    load_text,
    read_result,
    run_measurement,
)
from bench.report import build_report, merge_report  # noqa: E402
from bench.world import (  # noqa: E402
    airflow_parallelism,
    find_leftovers,
    load_world,
    start_world,
    start_world_airflow,
    stop_world,
)

PY = sys.executable
BUDGET_S = 30 * 60
# 20 jobs at parallelism 16 on PostgreSQL: 385 s on 2026-12-03 17:30 UTC (load average ~18,
# other work on the machine included); 10 jobs at parallelism 4 on SQLite took 98 s.
CONCURRENCY_ESTIMATE_S = 390
MEASUREMENTS = (
    "pack_upload",
    "parse",
    "scale",
    "startup",
    "naive",
    "restart",
    "wholerun",
    "phases",
    "concurrency",
    "log_follow",
    "s3_gate",
    "event_curves",
)


def plan_wholerun_budget(elapsed_s: float) -> float:
    """Seconds the TensorFlow whole runs may take so that concurrency (~4 min) still fits."""
    left = BUDGET_S - elapsed_s - CONCURRENCY_ESTIMATE_S - 30
    return min(STEP_TIMEOUT_S["wholerun"] - 120.0, max(60.0, left))


def on_shared_airflow(sizes: Sizes) -> set[str]:
    """3b runs on the shared world when it has no baseline (--quick), else in worlds of its own."""
    return set() if sizes.phases_baseline_runs else {"phases"}


def compile_bytecode() -> dict[str, Any]:
    """Byte-compile the venv's packages and the repo once (see the module docstring)."""
    started = time.monotonic()
    site = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    folders = [
        site / "site-packages",
        *(REPO / d for d in ("tfjob", "operators", "runtime", "dags", "tshell", "localkube")),
    ]
    done = subprocess.run(
        [PY, "-m", "compileall", "-q", "-j", "2", *map(str, folders)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seconds = time.monotonic() - started
    # compileall exits 1 when a file does not compile (a few test fixtures of packages do)
    print(f"==> bytecode: compileall in {seconds:.0f}s (exit {done.returncode})", flush=True)
    return {"status": "ok", "seconds": seconds}


def run_world_measurements(
    folder: Path, wanted: set[str], sizes: Sizes, out: Path, steps: dict[str, Any], began: float
) -> None:
    """1, 2 and 6 against the world; then Airflow, 3 and 5."""
    reps = str(sizes.repeat)
    print("==> world: S3 server, localkube, PostgreSQL, Airflow DB", flush=True)
    started = time.monotonic()
    start_world(folder)
    steps["world up"] = {"status": "ok", "seconds": time.monotonic() - started}
    env = load_world(folder)[1]["env"]

    def measure(name: str, *options: str) -> None:
        """bench_<name>.py against the world, its figures into <out>/<name>.json."""
        steps[name] = run_measurement(
            name,
            [
                PY,
                str(BENCH / f"bench_{name}.py"),
                "--world",
                str(folder),
                *options,
                "--out",
                str(out / f"{name}.json"),
            ],
            env,
            out,
        )

    if "startup" in wanted:
        measure("startup", "--replicas", *map(str, sizes.startup_replicas), "--repeat", reps)
    if "naive" in wanted:
        measure("naive", "--replicas", *map(str, sizes.naive_replicas), "--repeat", reps)
    if "restart" in wanted:
        measure("restart", "--cases", *sizes.restart_cases, "--repeat", str(sizes.restart_repeat))
    if not wanted & {"wholerun", "concurrency", *on_shared_airflow(sizes)}:
        return
    print("==> airflow standalone", flush=True)
    started = time.monotonic()
    start_world_airflow(folder)
    steps["airflow up"] = {"status": "ok", "seconds": time.monotonic() - started}
    if "wholerun" in wanted:
        measure(
            "wholerun",
            "--repeat",
            str(sizes.wholerun_runs),
            "--budget-s",
            f"{plan_wholerun_budget(time.monotonic() - began):.0f}",
            *([] if sizes.tensorflow_import_profile else ["--no-import-profile"]),
        )
    if "phases" in wanted & on_shared_airflow(sizes):
        argv = [PY, "-m", "bench.bench_phases", "measure", "--world", str(folder)]
        argv += ["--repeat", str(sizes.phases_runs), "--out", str(out / "phases.json")]
        steps["phases"] = run_measurement("phases", argv, env, out)
    if "concurrency" in wanted:
        measure(
            "concurrency",
            "--jobs",
            str(sizes.concurrency_jobs),
            "--train-seconds",
            str(sizes.train_seconds),
        )


def stop_and_check_world(folder: Path, steps: dict[str, Any]) -> None:
    """Stop the world; a process or PostgreSQL directory of it still there fails the run."""
    started = time.monotonic()
    status = "ok"
    try:
        roots = stop_world(folder)
        left = find_leftovers([folder, *map(Path, roots)])
    except Exception as error:  # reported as the step's status; the run fails
        status = f"failed ({error!r})"[:300]
    else:
        if left:
            status = "failed (left behind: " + "; ".join(left)[:300] + ")"
    shutil.rmtree(folder, ignore_errors=True)
    steps["world down"] = {"status": status, "seconds": time.monotonic() - started}
    print(f"==> world down: {status}", flush=True)


def describe_command(argv: list[str]) -> str:
    """How this run was started, as the report names it."""
    if argv == ["--quick"]:
        return "make bench-quick"
    return f".venv/bin/python bench/run_all.py {' '.join(argv)}" if argv else "make bench"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="check that every measurement runs: 1 repetition, small sizes, into bench/out/quick/",
    )
    parser.add_argument("--only", nargs="+", choices=MEASUREMENTS, default=list(MEASUREMENTS))
    parser.add_argument(
        "--keep-world", action="store_true", help="leave the services up (debugging)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="logs and JSON (bench/out/, --quick: bench/out/quick/)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="the report (bench/RESULTS.md; --quick: RESULTS.md in --out)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="measure nothing; write RESULTS.md again from bench/out/ (after changing report.py)",
    )
    args = parser.parse_args()
    args.out = (args.out or (QUICK_OUT if args.quick else OUT)).resolve()
    args.results = (args.results or (args.out / "RESULTS.md" if args.quick else RESULTS)).resolve()
    if args.quick and (args.results == RESULTS.resolve() or args.out == OUT.resolve()):
        parser.error(
            "--quick writes neither bench/RESULTS.md nor bench/out/ itself (its figures are a "
            "check, not a measurement); give another --out/--results or leave them out"
        )
    return args


def main() -> int:
    args = parse_args()
    if args.report_only:
        return write_results(
            args.results, json.loads((args.out / "run.json").read_text()), args.out
        )
    # `make` or CI stopping the bench with SIGTERM: unwind, so the world is stopped too.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    sizes = QUICK if args.quick else FULL
    wanted = set(args.only)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    run: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_start": load_text(),
        "command": describe_command(sys.argv[1:]),
        "quick": args.quick,
        "measured": [name for name in MEASUREMENTS if name in wanted],
        "airflow_parallelism": airflow_parallelism(),
        "budget_s": BUDGET_S,
        "steps": {},
        "pack_note": f"Run from run_all.py with --size-mb {sizes.pack_mb} --repeat {sizes.repeat} "
        "(its default of 500 MiB x 3 would take ~10 min of the 20-minute budget).",
    }
    steps = run["steps"]
    steps["bytecode"] = compile_bytecode()
    for old in out.glob("*.json"):
        if old.stem in wanted or (old.stem == "concurrent_scale" and "scale" in wanted):
            old.unlink()
    if "pack_upload" in wanted:
        steps["pack_upload"] = run_measurement(
            "pack_upload",
            [
                PY,
                str(BENCH / "bench_pack_upload.py"),
                "--size-mb",
                str(sizes.pack_mb),
                "--repeat",
                str(sizes.repeat),
                "--out",
                str(out / "pack_upload.json"),
            ],
            None,
            out,
        )
    if "parse" in wanted:
        steps["parse"] = run_measurement(
            "parse",
            [
                PY,
                str(BENCH / "bench_parse.py"),
                "--files",
                str(sizes.request_files),
                "--repeat",
                str(sizes.repeat),
                "--profile",
                "--out",
                str(out / "parse.json"),
            ],
            None,
            out,
        )
    if "log_follow" in wanted:
        # In-process, no services: the trigger's log follower, before (from git) and after.
        steps["log_follow"] = run_measurement(
            "log_follow",
            [
                PY,
                str(BENCH / "bench_log_follow.py"),
                "--line-mib",
                *map(str, sizes.log_follow_line_mib),
                "--lines-mib",
                str(sizes.log_follow_lines_mib),
                "--repeat",
                str(sizes.log_follow_repeat),
                "--out",
                str(out / "log_follow.json"),
            ],
            None,
            out,
        )
    if "s3_gate" in wanted:
        # In-process, no services: one moto store behind the gate and without it.
        steps["s3_gate"] = run_measurement(
            "s3_gate",
            [
                PY,
                str(BENCH / "bench_s3_gate.py"),
                "--requests",
                str(sizes.s3_gate_requests),
                "--out",
                str(out / "s3_gate.json"),
            ],
            None,
            out,
        )
    if "event_curves" in wanted:
        # Its own S3 server; TensorFlow writes the event files in a child process.
        steps["event_curves"] = run_measurement(
            "event_curves",
            [PY, str(BENCH / "bench_event_curves.py"), "--mib", str(sizes.event_curves_mib)]
            + ["--out", str(out / "event_curves.json")],
            None,
            out,
        )
    if sizes.chaos_runs and wanted == set(MEASUREMENTS):
        # Its own self-healing services (scripts/services.py up); exits 1 on any violation.
        argv = [PY, "-m", "bench.chaos", "--runs", str(sizes.chaos_runs), "--seed", "1"]
        argv += ["--faults", str(sizes.chaos_faults), "--out", str(out / "chaos.json")]
        steps["chaos"] = run_measurement("chaos", argv, None, out)
    if "scale" in wanted:
        # Its own localkube of simulated nodes per job: no shared world, no Airflow.
        steps["scale"] = run_measurement(
            "scale",
            [
                PY,
                str(BENCH / "bench_scale.py"),
                "--replicas",
                *map(str, sizes.scale_replicas),
                "--repeat",
                str(sizes.scale_repeat),
                "--out",
                str(out / "scale.json"),
            ],
            None,
            out,
        )
    if "scale" in wanted and sizes.scale_jobs:
        # 7b: concurrent jobs through Airflow on simulated nodes, its own world (Airflow too)
        steps["concurrent_scale"] = run_measurement(
            "concurrent_scale",
            [
                PY,
                str(BENCH / "bench_concurrent_scale.py"),
                "--jobs",
                *map(str, sizes.scale_jobs),
                "--run-seconds",
                str(sizes.scale_run_seconds),
                "--out",
                str(out / "concurrent_scale.json"),
            ],
            None,
            out,
        )
    if "phases" in wanted and sizes.phases_baseline_runs:
        # 3b: the baseline commit's world, then this tree's, each its own (before the shared one)
        argv = [PY, "-m", "bench.bench_phases", "compare", "--repeat", str(sizes.phases_runs)]
        argv += ["--baseline-repeat", str(sizes.phases_baseline_runs)]
        steps["phases"] = run_measurement(
            "phases", [*argv, "--out", str(out / "phases.json")], None, out
        )
    shared = {"startup", "naive", "restart", "wholerun", "concurrency", *on_shared_airflow(sizes)}
    if wanted & shared:
        folder = Path(tempfile.mkdtemp(prefix="bench-world-"))
        try:
            run_world_measurements(folder, wanted, sizes, out, steps, began)
        finally:
            if args.keep_world:
                print(
                    f"world kept in {folder}; stop it with: python bench/world.py down {folder}",
                    flush=True,
                )
            else:
                stop_and_check_world(folder, steps)
    run["wall_s"] = time.monotonic() - began
    run["load_end"] = load_text()
    (out / "run.json").write_text(json.dumps(run, indent=1))
    write_results(args.results, run, out)
    failed = [name for name, step in steps.items() if step["status"] != "ok"]
    if failed:
        print(f"==> FAILED: {', '.join(failed)} (see their logs in {out})", flush=True)
    return 1 if failed else 0


def write_results(path: Path, run: dict[str, Any], out: Path) -> int:
    """The report of `run`; after `--only` (not --quick), merged into the existing one."""
    steps = run["steps"]
    results = {
        name: read_result(name, steps.get(name), out)
        for name in (*MEASUREMENTS, "concurrent_scale")
    }
    text = build_report(results, describe_machine(), run)
    measured = run.get("measured", list(MEASUREMENTS))
    partial = set(measured) != set(MEASUREMENTS) and not run.get("quick")
    if partial and path.exists():
        text = merge_report(path.read_text(), text, measured, run)
    if path.exists():  # the chaos soak's section is `make chaos`'s, not measured here
        text = report_chaos.keep_section(path.read_text(), text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(
        f"==> wrote {path}; total time of the run {run['wall_s'] / 60:.1f} min "
        f"({run['wall_s']:.0f} s)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
