#!/usr/bin/env python3
"""`make bench`: every measurement of issue 8 in one run, then bench/RESULTS.md.

    .venv/bin/python bench/run_all.py [--quick] [--only NAME ...] [--keep-world]

Order (each measurement is its own process, see bench/world.py for why):
pack+upload and DAG parse first (no services), then the shared world (S3,
localkube, Airflow DB) for start-up (1) and naive (2), then `airflow
standalone` for whole-run (3) and concurrency (5); Airflow starts only after
1 and 2 so its idle work does not disturb them. A measurement that fails is
reported as failed in RESULTS.md and the others still run. The whole run is
sized to stay under 20 minutes on 2 cores: 5 repetitions everywhere except
the TensorFlow whole run (5 runs, fewer only if the budget left when it
starts runs out: it says so) and concurrency (one burst of 10 jobs); the
naive way runs 8 and 32 replicas (2 fit in Airflow's 4 slots anyway).
`--quick` does 1 repetition of everything (development).

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
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(BENCH))

from report import build_report  # noqa: E402
from world import load_world, start_world, start_world_airflow, stop_world  # noqa: E402

PY = sys.executable
PACK_SIZE_MB = 40
STEP_TIMEOUT_S = {
    "pack_upload": 300,
    "parse": 420,
    "startup": 420,
    "naive": 420,
    "wholerun": 600,
    "concurrency": 600,
}
BUDGET_S = 20 * 60
CONCURRENCY_ESTIMATE_S = 150  # measured 98 s at 16:45 UTC with bytecode cached
WHOLERUN_MAX_RUNS = 5
MEASUREMENTS = ("pack_upload", "parse", "startup", "naive", "wholerun", "concurrency")


def describe_machine() -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kib = int(
            next(
                line.split()[1]
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")
            )
        )
    except (OSError, StopIteration, ValueError):
        mem_kib = 0
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem_kib / 2**20,
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def load_text() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run_measurement(name: str, argv: list[str], env: dict[str, str] | None) -> dict[str, Any]:
    """Run one measurement process; its output goes to bench/out/<name>.log."""
    OUT.mkdir(parents=True, exist_ok=True)
    log = OUT / f"{name}.log"
    started = time.monotonic()
    print(f"==> {name}: {' '.join(argv[1:])}", flush=True)
    with log.open("w") as handle:
        try:
            done = subprocess.run(
                argv,
                env=env,
                cwd=REPO,
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=STEP_TIMEOUT_S[name],
            )
            status = "ok" if done.returncode == 0 else f"failed (exit {done.returncode})"
        except subprocess.TimeoutExpired:
            status = f"failed (over {STEP_TIMEOUT_S[name]} s)"
    seconds = time.monotonic() - started
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith(
            ("startup ", "naive ", "parse ", "digits-ps ", "concurrency:", "median ratio", "tree ")
        ):
            print(f"    {line}", flush=True)
    print(f"    {name}: {status} in {seconds:.0f}s (log {log.relative_to(REPO)})", flush=True)
    return {"status": status, "seconds": seconds, "load_after": load_text()}


def read_result(name: str, step: dict[str, Any] | None) -> dict[str, Any]:
    path = OUT / f"{name}.json"
    if step is None:
        return {"error": "skipped (--only)"}
    # A measurement that wrote its figures but exits non-zero (concurrency: not every job
    # succeeded) is still reported; the step table shows its status.
    if not path.exists():
        tail = (
            (OUT / f"{name}.log").read_text(errors="replace").strip().splitlines()[-3:]
            if (OUT / f"{name}.log").exists()
            else []
        )
        return {
            "error": f"{step['status']}; last lines of bench/out/{name}.log: "
            + " / ".join(tail)[-600:]
        }
    return json.loads(path.read_text())


def plan_wholerun_budget(elapsed_s: float) -> float:
    """Seconds the TensorFlow whole runs may take so that concurrency (~4 min) still fits."""
    left = BUDGET_S - elapsed_s - CONCURRENCY_ESTIMATE_S - 30
    return min(STEP_TIMEOUT_S["wholerun"] - 120.0, max(60.0, left))


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
    folder: Path, wanted: set[str], quick: bool, steps: dict[str, Any], began: float
) -> None:
    """1 and 2 against the world; then Airflow, 3 and 5."""
    reps = "1" if quick else "5"
    print("==> world: S3 server, localkube, Airflow DB", flush=True)
    started = time.monotonic()
    start_world(folder)
    steps["world up"] = {"status": "ok", "seconds": time.monotonic() - started}
    env = load_world(folder)[1]["env"]
    common = ["--world", str(folder)]
    if "startup" in wanted:
        steps["startup"] = run_measurement(
            "startup", [PY, str(BENCH / "bench_startup.py"), *common, "--repeat", reps], env
        )
    if "naive" in wanted:
        steps["naive"] = run_measurement(
            "naive",
            [
                PY,
                str(BENCH / "bench_naive.py"),
                *common,
                "--replicas",
                "8",
                "32",
                "--repeat",
                reps,
            ],
            env,
        )
    if not wanted & {"wholerun", "concurrency"}:
        return
    print("==> airflow standalone", flush=True)
    started = time.monotonic()
    start_world_airflow(folder)
    steps["airflow up"] = {"status": "ok", "seconds": time.monotonic() - started}
    if "wholerun" in wanted:
        steps["wholerun"] = run_measurement(
            "wholerun",
            [
                PY,
                str(BENCH / "bench_wholerun.py"),
                *common,
                "--repeat",
                "1" if quick else str(WHOLERUN_MAX_RUNS),
                "--budget-s",
                f"{plan_wholerun_budget(time.monotonic() - began):.0f}",
            ],
            env,
        )
    if "concurrency" in wanted:
        steps["concurrency"] = run_measurement(
            "concurrency",
            [PY, str(BENCH / "bench_concurrency.py"), *common, "--jobs", "2" if quick else "10"],
            env,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 repetition of everything")
    parser.add_argument("--only", nargs="+", choices=MEASUREMENTS, default=list(MEASUREMENTS))
    parser.add_argument(
        "--keep-world", action="store_true", help="leave the services up (debugging)"
    )
    parser.add_argument("--results", type=Path, default=BENCH / "RESULTS.md")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="measure nothing; write RESULTS.md again from bench/out/ (after changing report.py)",
    )
    args = parser.parse_args()
    if args.report_only:
        return write_results(args.results, json.loads((OUT / "run.json").read_text()))
    reps = "1" if args.quick else "5"
    wanted = set(args.only)
    began = time.monotonic()
    run: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_start": load_text(),
        "command": "make bench"
        + (f" (run_all.py {' '.join(sys.argv[1:])})" if sys.argv[1:] else ""),
        "steps": {},
        "pack_note": f"Run from run_all.py with --size-mb {PACK_SIZE_MB} --repeat {reps} "
        "(its default of 500 MiB x 3 would take ~10 min of the 20-minute budget).",
    }
    steps = run["steps"]
    steps["bytecode"] = compile_bytecode()
    for old in OUT.glob("*.json"):
        if old.stem in wanted:
            old.unlink()
    if "pack_upload" in wanted:
        steps["pack_upload"] = run_measurement(
            "pack_upload",
            [
                PY,
                str(BENCH / "bench_pack_upload.py"),
                "--size-mb",
                str(PACK_SIZE_MB),
                "--repeat",
                reps,
            ],
            None,
        )
    if "parse" in wanted:
        steps["parse"] = run_measurement(
            "parse", [PY, str(BENCH / "bench_parse.py"), "--repeat", reps, "--profile"], None
        )
    if wanted & {"startup", "naive", "wholerun", "concurrency"}:
        folder = Path(tempfile.mkdtemp(prefix="bench-world-"))
        try:
            run_world_measurements(folder, wanted, args.quick, steps, began)
        finally:
            if args.keep_world:
                print(
                    f"world kept in {folder}; stop it with: python bench/world.py down {folder}",
                    flush=True,
                )
            else:
                stop_world(folder)
                shutil.rmtree(folder, ignore_errors=True)
    run["wall_s"] = time.monotonic() - began
    run["load_end"] = load_text()
    (OUT / "run.json").write_text(json.dumps(run, indent=1))
    write_results(args.results, run)
    return 0 if all(s["status"] == "ok" for s in steps.values()) else 1


def write_results(path: Path, run: dict[str, Any]) -> int:
    steps = run["steps"]
    results = {name: read_result(name, steps.get(name)) for name in MEASUREMENTS}
    path.write_text(build_report(results, describe_machine(), run))
    print(
        f"==> wrote {path}; total time of the run {run['wall_s'] / 60:.1f} min "
        f"({run['wall_s']:.0f} s)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
