#!/usr/bin/env python3
"""Measurement 4: DAG parse time with 1,000 request files (issue 8).

    python bench/bench_parse.py [--files 1000] [--repeat 5] [--profile]

A temporary requests folder gets `--files` request files (the four examples
of dags/requests/ under new names, in turn); the repo's dags/ folder is parsed
with Airflow's `DagBag` in a fresh process per repetition, with
TFJOB_REQUESTS_DIR pointing at it, as the DAG processor would. Baselines in
the same run: the same with an empty requests folder, and dags/tfjob_submit.py
alone (what every task process of a submit DAG's run imports before its
task starts, so part of each task's time in measurement 3). All request
DAGs come from one Python file (dags/tfjob_requests.py), so Airflow's 30 s
`dagbag_import_timeout` applies to the whole folder, not per request. With
`--profile`, one extra parse runs under cProfile and the top functions by
cumulative time go into the report. Writes bench/out/parse.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

from bench.stats import summarise  # noqa: E402

PARSE_SCRIPT = r"""
import json, sys, time
began = time.perf_counter()
from airflow.dag_processing.dagbag import DagBag
imported = time.perf_counter()
profile = sys.argv[2] == "profile"
if profile:
    import cProfile, pstats, io
    profiler = cProfile.Profile()
    profiler.enable()
started = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1], safe_mode=False)
done = time.perf_counter()
result = {"airflow_import_s": imported - began, "parse_s": done - started, "dags": len(bag.dags),
          "import_errors": {k: str(v)[:300] for k, v in bag.import_errors.items()},
          "files": {s.file: s.duration.total_seconds() if hasattr(s.duration, "total_seconds")
                    else float(s.duration) for s in bag.dagbag_stats}}
if profile:
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(80)
    result["profile"] = out.getvalue()
print("PARSE_RESULT " + json.dumps(result))
"""


def write_request_files(folder: Path, count: int) -> None:
    """`count` valid request files made from the examples, each with its own name."""
    examples = [
        yaml.safe_load(p.read_text()) for p in sorted((REPO / "dags" / "requests").glob("*.yaml"))
    ]
    for index in range(count):
        body = dict(examples[index % len(examples)])
        body["name"] = f"{body['name']}-{index:04d}"
        (folder / f"{body['name']}.yaml").write_text(yaml.safe_dump(body, sort_keys=False))


def parse_once(
    requests_dir: Path, home: Path, profile: bool = False, dag_folder: Path = REPO / "dags"
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW_CONFIG=str(REPO / "airflow.cfg"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        TFJOB_REQUESTS_DIR=str(requests_dir),
        AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT="120",
        PYTHONPATH=str(REPO),
    )
    argv = [sys.executable, "-c", PARSE_SCRIPT, str(dag_folder), "profile" if profile else "plain"]
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    for line in done.stdout.splitlines():
        if line.startswith("PARSE_RESULT "):
            return json.loads(line[len("PARSE_RESULT ") :])
    raise RuntimeError(f"DagBag parse gave no result (rc {done.returncode}): {done.stderr[-3000:]}")


SUBMIT_FILE = "tfjob_submit.py"
IMPORT_SCRIPT = "import airflow.sdk, airflow.models, runpy, sys; runpy.run_path(sys.argv[1])"
IMPORT_MODULES = (
    "operators.dag_factory",
    "operators.launch",
    "airflow.providers.cncf.kubernetes.operators.pod",
    "kubernetes",
    "kubernetes_asyncio",
    "operators.train",
    "tfjob.request.model",
)


def profile_dag_file_imports(
    home: Path, dag_file: Path = REPO / "dags" / "tfjob_submit.py"
) -> dict:
    """Cumulative import seconds of the modules a DAG file pulls in beyond Airflow's core.

    `python -X importtime`, with airflow.sdk and airflow.models imported first (a task process
    has them already), so the figures are what the DAG file itself adds.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home), AIRFLOW_CONFIG=str(REPO / "airflow.cfg"), PYTHONPATH=str(REPO)
    )
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", IMPORT_SCRIPT, str(dag_file)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return parse_importtime(done.stderr, IMPORT_MODULES)


def parse_importtime(text: str, modules: tuple[str, ...]) -> dict[str, float]:
    """{module: cumulative seconds} from `-X importtime` output (first import of each module)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = [p.strip() for p in line[len("import time:") :].split("|")]
        if len(parts) == 3 and parts[1].isdigit() and parts[2] in modules and parts[2] not in found:
            found[parts[2]] = int(parts[1]) / 1e6
    return {m: found[m] for m in modules if m in found}


def time_yaml_loaders(repeat: int = 300) -> dict[str, float]:
    """Milliseconds per load of an example request: PyYAML's pure-Python vs libyaml loader."""
    import time

    text = (REPO / "dags" / "requests" / "digits-ps.yaml").read_text()
    began = time.perf_counter()
    for _ in range(repeat):
        yaml.safe_load(text)
    middle = time.perf_counter()
    for _ in range(repeat):
        yaml.load(text, Loader=yaml.CSafeLoader)
    done = time.perf_counter()
    return {
        "safe_load_ms": (middle - began) / repeat * 1000,
        "csafe_load_ms": (done - middle) / repeat * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", type=Path, default=BENCH / "out" / "parse.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-parse-") as tmp:
        work = Path(tmp)
        full, empty, home = work / "requests", work / "empty", work / "airflow"
        for folder in (full, empty, home):
            folder.mkdir()
        write_request_files(full, args.files)
        runs: dict[str, list[dict[str, Any]]] = {"full": [], "empty": []}
        # dags/tfjob_submit.py alone is DagBag's own per-file figure of the empty parse
        # (no separate process: each costs an interpreter and Airflow's import, ~5 s).
        cases = (
            ("empty", empty, REPO / "dags"),
            ("full", full, REPO / "dags"),
        )
        for attempt in range(args.repeat):
            for label, folder, dag_folder in cases:
                result = parse_once(folder, home, dag_folder=dag_folder)
                runs[label].append(result)
                print(
                    f"parse {label} try {attempt + 1}: {result['parse_s']:.2f}s, "
                    f"{result['dags']} DAGs, "
                    f"{len(result['import_errors'])} import errors",
                    flush=True,
                )
        profile = parse_once(full, home, profile=True)["profile"] if args.profile else None
        imports = profile_dag_file_imports(home)
    for label, results in runs.items():
        if any(r["import_errors"] for r in results):
            raise RuntimeError(f"{label}: import errors: {results[0]['import_errors']}")
    full_s = summarise(r["parse_s"] for r in runs["full"])
    empty_s = summarise(r["parse_s"] for r in runs["empty"])
    requests_file = max(runs["full"][0]["files"], key=lambda f: runs["full"][0]["files"][f])
    report = {
        "files": args.files,
        "dags": runs["full"][0]["dags"],
        "full_parse_s": full_s.as_dict(),
        "empty_parse_s": empty_s.as_dict(),
        "submit_parse_s": summarise(r["files"][SUBMIT_FILE] for r in runs["empty"]).as_dict(),
        "per_request_ms": (full_s.median - empty_s.median) / args.files * 1000,
        "slowest_file": requests_file,
        "slowest_file_s": summarise(r["files"][requests_file] for r in runs["full"]).as_dict(),
        "airflow_import_s": summarise(r["airflow_import_s"] for r in runs["full"]).as_dict(),
        "import_timeout_s": 30,
        "target_s": 5,
        "profile": profile,
        "submit_imports_s": imports,
        "yaml_ms": time_yaml_loaders() if getattr(yaml, "__with_libyaml__", False) else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
