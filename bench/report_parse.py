"""RESULTS.md section 4: DAG parse time of 1,000 request files (bench_parse.py).

Also reads the `pstats` listing bench_parse.py saves (`--profile`) to say which
parts of building the request DAGs cost what. Its own module so each section of
bench/report.py can be read alone; the profile reading is tested in
tests/bench/test_bench_stats.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.stats import format_ratio, format_summary, markdown_table, ratio, verdict

PROFILE_PARTS = {  # name: (a fragment of the file, the function)
    "build_all": ("", "(build_all)"),
    "load_request": ("", "(load_request)"),
    "yaml_safe_load": ("", "(safe_load)"),
    "yaml_load": ("yaml/__init__.py", "(load)"),
    "build_training_dag": ("", "(build_training_dag)"),
    "taskflow_call": ("sdk/bases/decorator.py", "(__call__)"),
    "operator_init": ("", "(apply_defaults)"),
}


def read_profile_parts(profile: str) -> dict[str, float]:
    """Cumulative seconds of a few known functions from a `pstats` listing."""
    parts: dict[str, float] = {}
    for line in profile.splitlines():
        fields = line.split()
        if len(fields) < 6:
            continue
        for name, (fragment, marker) in PROFILE_PARTS.items():
            if name not in parts and fragment in fields[-1] and fields[-1].endswith(marker):
                try:
                    parts[name] = float(fields[3])
                except ValueError:
                    pass
    return parts


def keep_profile_lines(profile: str, limit: int = 24) -> list[str]:
    """The listing's header and the lines of our code, YAML and operator construction."""
    kept = []
    for line in profile.splitlines():
        if not line.strip():
            continue
        ours = any(p in line for p in ("/dags/", "/operators/", "/tfjob/", "yaml/__init__"))
        if "ncalls" in line or ours or "apply_defaults" in line:
            kept.append(
                line.replace("/work/main/.venv/lib/python3.11/site-packages/", "").replace(
                    "/work/main/", ""
                )
            )
    return kept[:limit]


def describe_parse_profile(profile: str, yaml_ms: Mapping[str, float] | None) -> str:
    parts = read_profile_parts(profile)
    if "build_all" not in parts:
        return ""
    total = parts["build_all"]

    def share(name: str) -> str:
        return f"{parts.get(name, 0.0):.1f} s ({(parts.get(name, 0.0) / total):.0%})"

    faster = ""
    if yaml_ms:
        faster = (
            f" (libyaml is installed: `yaml.load(text, Loader=yaml.CSafeLoader)` reads an example "
            f"request in {yaml_ms['csafe_load_ms']:.2f} ms against "
            f"{yaml_ms['safe_load_ms']:.2f} ms, "
            f"{ratio(yaml_ms['safe_load_ms'], yaml_ms['csafe_load_ms']) or 0:.0f}× faster)"
        )
    if "yaml_load" in parts:
        reader = (
            "PyYAML with libyaml's parser (`yaml.load(..., CSafeLoader)`; its resolver and "
            "constructor stay Python)"
        )
        parts["yaml"] = parts["yaml_load"]
    else:
        reader = "PyYAML's pure-Python `yaml.safe_load`"
        parts["yaml"] = parts.get("yaml_safe_load", 0.0)
    taskflow = (
        f", of which the TaskFlow path of the six `@task` tasks (`decorator.py __call__`: "
        f"signature and return-type inspection, then `PythonOperator`) {share('taskflow_call')}"
        if "taskflow_call" in parts
        else ""
    )
    return (
        f"Under the profiler, building the request DAGs took {total:.1f} s: reading the "
        f"request files {share('load_request')}, of which {reader} "
        f"{share('yaml')}{faster}; building each 8-task DAG "
        f"{share('build_training_dag')}{taskflow}"
        + (
            "; all 8 operators together spend "
            f"{parts['operator_init']:.1f} s in Airflow's operator construction "
            "(`BaseOperator.__init__` through `apply_defaults`)."
            if "operator_init" in parts
            else "."
        )
    )


def describe_parse_gap(data: Mapping[str, Any]) -> list[str]:
    """Without the profiler's overhead: what each part costs of the request file's parse."""
    parts = read_profile_parts(data.get("profile") or "")
    if "build_all" not in parts or "operator_init" not in parts:
        return []
    real = data["slowest_file_s"]["median"]
    scale = real / parts["build_all"]
    operators = parts["operator_init"] * scale
    taskflow = parts.get("taskflow_call", 0.0) * scale
    yaml_s = (parts.get("yaml_load") or parts.get("yaml_safe_load") or 0.0) * scale
    return [
        f"Scaled to the real {real:.1f} s of dags/tfjob_requests.py (the profiler's overhead "
        f"taken out in proportion): Airflow constructing the 8,000 operators ~{operators:.1f} s, "
        f"the TaskFlow decorator path of 6,000 of them ~{taskflow:.1f} s (overlapping the "
        f"former), YAML ~{yaml_s:.1f} s. What is left to cut in our code: building the six "
        "`@task` tasks as plain `PythonOperator`s (with the `multiple_outputs` TaskFlow infers "
        "today: True for validate, fetch_bundle, archive and publish, whose return type is a "
        "`dict`; so XCom keys stay the same) skips the "
        "decorator's signature and type-hint inspection; the YAML is already on libyaml. The "
        "floor is Airflow's own per-operator cost times 8 tasks × 1,000 DAGs in one file "
        "(one process, one core); with 2 cores busy with other work, it alone is about the "
        "5 s target.",
        "",
    ]


def section_parse(data: Mapping[str, Any]) -> list[str]:
    full = data["full_parse_s"]["median"]
    rows = [
        [
            f"{data['files']} request files ({data['dags']} DAGs)",
            format_summary(data["full_parse_s"]),
        ],
        [
            "baseline: no request files (submit DAGs, janitor)",
            format_summary(data["empty_parse_s"]),
        ],
        ["per request file (difference / files)", f"{data['per_request_ms']:.1f} ms"],
        [
            "dags/tfjob_submit.py alone (what each task process imports first)",
            format_summary(data.get("submit_parse_s")),
        ],
        [f"slowest file ({data['slowest_file']})", format_summary(data["slowest_file_s"])],
        [
            "`import airflow` + DagBag class (not in the figures above)",
            format_summary(data["airflow_import_s"]),
        ],
    ]
    out = [
        "## 4. DAG parse time: 1,000 request files",
        "",
        "Airflow's `DagBag` over dags/ in a fresh process per repetition, TFJOB_REQUESTS_DIR "
        "pointing at "
        "a temporary folder of request files (the four examples under new names).",
        "",
        markdown_table(["what", "median (min–max, n)"], rows),
        "",
        f"Target < {data['target_s']} s in total: {verdict(full < data['target_s'])}; "
        f"ratio to Airflow's {data['import_timeout_s']} s import timeout: "
        f"{format_ratio(ratio(data['slowest_file_s']['median'], data['import_timeout_s']))} "
        "(all request DAGs come from one file, dags/tfjob_requests.py, so the timeout applies to "
        "all 1,000 together).",
        "",
    ]
    if data.get("profile"):
        out += [
            describe_parse_profile(data["profile"], data.get("yaml_ms")),
            "",
            *describe_parse_gap(data),
            "The profile's lines for our code, YAML and operator construction (cumulative time):",
            "",
            "```",
            *keep_profile_lines(data["profile"]),
            "```",
            "",
        ]
    return out
