"""The benchmarks' pure parts: every module imports; the summaries and report say the right thing.

Not a timed test: nothing here starts a service or measures a clock.
"""

from __future__ import annotations

import importlib

import pytest

from harness.repo_root import REPO_ROOT

BENCH = REPO_ROOT / "bench"

from bench import (  # noqa: E402
    apicount,  # noqa: E402
    report,  # noqa: E402
    report_parse,  # noqa: E402
    stats,  # noqa: E402
)

MODULES = [
    "apicount",
    "stats",
    "driver",
    "world",
    "airflow_runs",
    "report",
    "report_startup",
    "report_naive",
    "report_wholerun",
    "report_parse",
    "report_concurrency",
    "report_pack_upload",
    "report_scale",
    "run_all",
    "bench_startup",
    "bench_naive",
    "bench_parse",
    "bench_wholerun",
    "bench_concurrency",
    "bench_scale",
]


@pytest.mark.parametrize("name", MODULES)
def test_every_benchmark_module_imports(name):
    module = importlib.import_module(f"bench.{name}")
    assert module.__doc__, f"bench/{name}.py needs a module docstring saying why it exists"


def test_summary_is_median_min_max_of_the_values():
    summary = stats.summarise([3.0, 1.0, 2.0, 10.0, 4.0])
    assert (summary.median, summary.low, summary.high, summary.count) == (3.0, 1.0, 10.0, 5)
    assert summary.format() == "3.00 s (1.00–10.00, n=5)"
    assert stats.summarise([2, 4]).median == 3.0
    assert stats.summary_from_dict(summary.as_dict()) == summary


def test_summary_of_nothing_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="at least 1 measurement"):
        stats.summarise([])


def test_ratio_and_line_fit():
    assert stats.ratio(6, 3) == 2 and stats.ratio(1, 0) is None
    assert stats.format_ratio(None) == "n/a" and stats.format_ratio(1.5) == "1.50×"
    slope, intercept = stats.fit_line([2, 8, 32, 2], [26, 44, 116, 26])
    assert slope == pytest.approx(3.0) and intercept == pytest.approx(20.0)
    with pytest.raises(ValueError, match="distinct x"):
        stats.fit_line([8, 8], [1, 2])


def test_markdown_table_escapes_pipes_and_checks_row_width():
    table = stats.markdown_table(["a", "b"], [["x|y", 1]])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| x\\|y | 1 |"]
    with pytest.raises(ValueError, match="has 1 cells"):
        stats.markdown_table(["a", "b"], [["only one"]])


def test_api_calls_are_classified_by_verb_and_kind():
    calls = [
        apicount.classify_call("POST", "http://h/api/v1/namespaces/ns/pods"),
        apicount.classify_call("GET", "http://h/api/v1/namespaces/ns/pods", [("watch", True)]),
        apicount.classify_call(
            "GET", "http://h/api/v1/namespaces/ns/pods?watch=True&labelSelector=a"
        ),
        apicount.classify_call("GET", "ws://h/api/v1/namespaces/ns/pods/p-1/exec?command=sh"),
        apicount.classify_call("DELETE", "http://h/api/v1/namespaces/ns/configmaps/c"),
    ]
    assert apicount.summarise_calls(calls) == {
        "DELETE configmaps": 1,
        "EXEC pods/exec": 1,
        "POST pods": 1,
        "WATCH pods": 2,
    }


def test_replica_shapes_add_up_and_tiny_jobs_are_refused():
    from bench import bench_startup

    for count in (2, 8, 32):
        replicas, policy, deciding = bench_startup.replica_shape(count)
        assert sum(replicas.values()) == count and replicas["ps"] >= 1 and replicas["worker"] >= 1
        assert deciding.split("-")[0] == policy.removesuffix("0")
    with pytest.raises(ValueError, match="at least 2"):
        bench_startup.replica_shape(1)


def job(count, delivered, requests):
    return {
        "replicas": count,
        "launch_to_running_s": 1.0 + count / 10,
        "running_to_delivered_s": delivered,
        "exit_to_gone_s": 0.5,
        "exit_to_seen_s": 0.25 if count > 2 else None,
        "chief_exit_to_gone_s": 0.75,
        "launch_prepare_s": 0.25,
        "launch_create_pods_s": count * 0.02,
        "launch_pods_start_s": 1.0,
        "requests_total": requests,
        "requests": {"launch": requests},
        "request_kinds": {"POST pods": count},
    }


def test_startup_summary_groups_by_replicas_and_fits_requests():
    from bench import bench_startup

    summary = bench_startup.summarise_startup(
        [job(2, 0.1, 26), job(2, 0.3, 26), job(8, 0.2, 44), job(32, 0.9, 116)]
    )
    assert summary["by_replicas"]["2"]["running_to_delivered_s"]["median"] == pytest.approx(0.2)
    assert summary["requests_fit"]["per_replica"] == pytest.approx(3.0)
    assert summary["by_replicas"]["2"]["exit_to_seen_s"] is None  # never measured: no summary
    assert summary["by_replicas"]["8"]["exit_to_seen_s"]["median"] == 0.25


def test_whole_run_phases_add_up_to_the_total():
    from bench import bench_wholerun

    spans = {
        task: {"queued": None, "start": start, "end": end}
        for task, start, end in [
            ("validate", 2, 3),
            ("fetch_bundle", 4, 5),
            ("launch", 6, 9),
            ("clusterspec", 10, 11),
            ("train", 11.5, 60),
            ("archive", 61, 62),
            ("teardown", 63, 64),
            ("publish", 65, 66),
        ]
    }
    result = bench_wholerun.split_phases(
        0.0, 67.0, spans, {"train_seconds": 30}, [16.0, 15.0, 17.0], 55.0
    )
    phases = result["phases"]
    assert phases["tensorflow_import"] == pytest.approx(
        5.0
    )  # median serving line 16 - delivered 11
    assert phases["chief_setup_eval_save_upload"] == pytest.approx(55 - 11 - 5 - 30)
    assert phases["end_noticed_and_train_task"] == pytest.approx(5.0)
    assert sum(phases.values()) == pytest.approx(result["total_s"]) == pytest.approx(67.0)
    assert result["all_but_training_s"] == pytest.approx(37.0)


def test_timestamps_of_airflow_and_cri_logs_parse_to_the_same_clock():
    from bench.airflow_runs import parse_time

    assert parse_time("2026-12-02T13:30:23.579169Z") == pytest.approx(
        parse_time("2026-12-02T13:30:23.579169123Z")
    )
    assert parse_time("2026-12-02T13:30:23+00:00") == pytest.approx(
        parse_time("2026-12-02T13:30:23Z")
    )
    assert parse_time(None) is None


def test_concurrency_counts_how_long_train_tasks_hold_slots():
    from bench import bench_concurrency

    samples = [
        {"t": 0, "running": ["validate"] * 4, "deferred": []},
        {"t": 1, "running": ["train", "launch"], "deferred": ["train"]},
        {"t": 2, "running": ["archive"], "deferred": ["train", "train"]},
    ]
    slots = bench_concurrency.summarise_samples(samples)
    assert slots["max_running"] == 4 and slots["max_training_at_once"] == 2
    assert slots["samples_with_training"] == 2
    assert (slots["train_running_samples"], slots["train_deferred_samples"]) == (1, 3)
    assert slots["train_share_in_slot"] == pytest.approx(0.25)


def test_parse_profile_lines_give_the_shares_of_yaml_and_dag_building():
    profile = "\n".join(
        [
            "   ncalls  tottime  percall  cumtime  percall filename:lineno(function)",
            "1 0 0 12.486 0 /work/main/dags/tfjob_requests.py:24(build_all)",
            "1000 0 0 5.920 0 /work/main/tfjob/request.py:494(load_request)",
            "1000 0 0 5.465 0 /x/yaml/__init__.py:117(safe_load)",
            "1001 0 0 6.535 0 /work/main/operators/dag_factory.py:59(build_training_dag)",
            "29033/8009 1.9 0 3.915 0 /x/airflow/sdk/bases/operator.py:513(apply_defaults)",
        ]
    )
    parts = report_parse.read_profile_parts(profile)
    assert parts == {
        "build_all": 12.486,
        "load_request": 5.92,
        "yaml_safe_load": 5.465,
        "build_training_dag": 6.535,
        "operator_init": 3.915,
    }
    text = report_parse.describe_parse_profile(profile, {"safe_load_ms": 2.1, "csafe_load_ms": 0.3})
    assert "5.5 s (44%)" in text and "7× faster" in text
    assert report_parse.keep_profile_lines(profile)[1] == (
        "1 0 0 12.486 0 dags/tfjob_requests.py:24(build_all)"
    )


def test_report_names_targets_met_and_missing_measurements():
    from bench import bench_startup

    startup = {
        "summary": bench_startup.summarise_startup([job(2, 0.1, 26), job(32, 2.0, 116)]),
        "teardown_grace_s": 10,
    }
    naive = {
        "summary": {
            "32": {
                "start_to_running_s": {"median": 9.6, "min": 9, "max": 10, "n": 1},
                "slots_while_running": {"median": 32, "min": 32, "max": 32, "n": 1},
                "slot_seconds": {"median": 100, "min": 100, "max": 100, "n": 1},
            }
        }
    }
    text = report.build_report(
        {"startup": startup, "naive": naive, "parse": {"error": "failed (exit 1)"}},
        {"cpu": "Test CPU", "cores": 2, "memory_gib": 24},
        {"date": "today", "wall_s": 600},
    )
    assert "Test CPU, 2 cores" in text and "wall time 10.0 min" in text
    assert "0.22 s: met" in text  # 2 replicas: 0.1 s against 0.2 + 0.02
    assert "0.52 s: NOT met" in text  # 32 replicas: 2.0 s against 0.2 + 0.32
    assert "2.29×" in text  # 32 replicas: naive 9.6 s / ours 1.0 + 32/10 = 4.2 s
    assert "| 32 | 0.25 s (n=1) | 0.64 s (n=1) | – |" in text  # launch breakdown; naive has none
    assert "11 s: met (max)" in text  # teardown 0.75 s after the chief's exit, grace 10 s
    assert "Not measured in this run: failed (exit 1)" in text
    assert "## 3. Whole-run overhead" in text and "Not measured in this run: not run" in text


def test_importtime_lines_give_cumulative_seconds_of_the_first_import():
    from bench import bench_parse

    text = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       787 |    2624482 |               kubernetes",
            "import time:      7105 |   11430729 | operators.dag_factory",
            "import time:        10 |         20 | kubernetes",
            "something else",
        ]
    )
    found = bench_parse.parse_importtime(text, ("operators.dag_factory", "kubernetes", "absent"))
    assert found == {"operators.dag_factory": 11.430729, "kubernetes": 2.624482}
    assert list(found) == ["operators.dag_factory", "kubernetes"]  # in the order asked for


def test_whole_runs_get_what_is_left_of_the_budget_after_concurrency():
    from bench import run_all

    assert run_all.plan_wholerun_budget(300) == pytest.approx(480)  # capped by the step timeout
    assert run_all.plan_wholerun_budget(1300) == pytest.approx(
        run_all.BUDGET_S - 1300 - run_all.CONCURRENCY_ESTIMATE_S - 30
    )
    late = run_all.BUDGET_S - run_all.CONCURRENCY_ESTIMATE_S
    assert run_all.plan_wholerun_budget(late) == pytest.approx(60)  # late: still one run


def test_concurrency_reads_structured_and_plain_task_logs():
    from bench import bench_concurrency

    structured = {
        "content": [
            {"timestamp": "t1", "level": "info", "event": "starting"},
            {"timestamp": "t2", "level": "error", "event": "Task failed", "error_detail": [1]},
        ]
    }
    lines = bench_concurrency.read_log_lines(structured)
    assert lines[0] == "t1 INFO starting"
    assert lines[1].startswith("t2 ERROR Task failed {") and "error_detail" in lines[1]
    assert bench_concurrency.read_log_lines({"content": "a\nb"}) == ["a", "b"]


def test_the_restart_section_tables_each_case_and_says_how_latency_and_loss_behave():
    from bench import bench_restart

    def restart_job(case: str, latency: float, at: int, restored: int | None) -> dict:
        how, replicas, interval = case.split(":")
        return {
            "case": case,
            "how": how,
            "replicas": int(replicas),
            "interval_s": int(interval),
            "loss_to_noticed_s": 0.1,
            "restart_latency_s": latency,
            "stop_and_stage_s": latency / 4,
            "stage_to_created_s": 0.05,
            "created_to_running_s": latency / 2,
            "delivery_s": latency / 4,
            "step_at_failure": at,
            "restored_step": restored,
            "steps_lost": max(0, at - (restored or 0)),
        }

    jobs = [
        restart_job("drain:4:10", 2.0, 15, 15),
        restart_job("drain:4:10", 2.2, 17, 17),
        restart_job("drain:16:10", 6.0, 20, 20),
        restart_job("kill:4:60", 2.1, 90, 60),
        restart_job("kill:4:60", 2.3, 100, None),
    ]
    summary = bench_restart.summarise_restart(jobs)
    assert summary["kill:4:60"]["steps_lost"] == {"median": 65.0, "min": 30.0, "max": 100.0, "n": 2}
    text = report.build_report(
        {"restart": {"summary": summary}}, {}, {"wall_s": 60, "budget_s": 1800}
    )
    assert "## 6. Gang restarts" in text and "target under 30 min: met" in text
    assert "| drain:4:10 |" in text and "2.10 s (2.00–2.20, n=2)" in text
    assert "15→15, 17→17" in text and "90→60, 100→None" in text
    # 16 replicas in 2.86x the time of 4 (6.0 against 2.1): 4x the replicas
    assert "grows less than linearly" in text and "2.9× the time of 4" in text
    assert "force-deleted: 65 steps lost (median; 30–100)" in text
    assert "expected half-interval of 30" in text
    assert "a worker drained: 0 steps lost" in text


def test_a_restart_case_names_what_is_wrong_with_it():
    from bench import bench_restart

    assert bench_restart.Case.parse("kill:16:60") == bench_restart.Case("kill", 16, 60)
    for bad in ("kill:16", "evict:4:10", "drain:2:10", "drain:4:x"):
        with pytest.raises(SystemExit, match="--cases"):
            bench_restart.Case.parse(bad)


def scale_job(replicas: int, running_s: float, gone_s: float) -> dict:
    counts = {
        "server": {"CREATE pods": replicas, "PATCH pods/status": replicas},
        "client": {"POST pods": replicas},
    }
    return {
        "replicas": replicas,
        "launch_to_running_s": running_s,
        "launch_create_pods_s": 1.0,
        "running_to_delivered_s": 1.0,
        "decision_to_gone_s": gone_s,
        "client_requests_per_replica": 1.0,
        "server_requests_per_replica": 2.0,
        "apiserver_peak_kib": 102400,
        "phases": {"launch": counts},
    }


def test_scale_section_says_what_grows_faster_than_linearly_and_checks_the_targets():
    from bench import report_scale

    jobs = [scale_job(128, 2.0, 1.0), scale_job(1024, 40.0, 8.0)]
    keys = (
        "launch_to_running_s",
        "launch_create_pods_s",
        "running_to_delivered_s",
        "decision_to_gone_s",
        "client_requests_per_replica",
        "server_requests_per_replica",
        "apiserver_peak_kib",
    )
    summary = {
        str(j["replicas"]): {k: stats.summarise([j[k]]).as_dict() for k in keys} for j in jobs
    }
    text = "\n".join(
        report_scale.section_scale(
            {
                "nodes": 16,
                "repeat": 1,
                "summary": summary,
                "jobs": jobs,
                "notes": ["delivery is O(n²)"],
            }
        )
    )
    # 2 s → 40 s for 8× the replicas: n^1.44; 1 s → 8 s: n^1.00
    assert (
        "launch → all Running: 2.00 s at 128 → 40.00 s at 1024 replicas, ∝ n^1.44: grows "
        "faster than linearly" in text
    )
    assert (
        "teardown → all gone: 1.00 s at 128 → 8.00 s at 1024 replicas, ∝ n^1.00: grows "
        "about linearly or less" in text
    )
    assert "all Running ≤ 30 s after launch starts: 40.00 — NOT met" in text
    assert "every pod gone ≤ 15 s after the decision: 8.00 — met" in text
    assert "| launch | CREATE pods | 1024 | 1.00 | – | 0.00 |" in text
    assert "| launch | POST pods | – | 0.00 | 1024 | 1.00 |" in text
    assert "or serialises the gang, and why:\n\n- delivery is O(n²)" in text
    # Jobs measured before the load average was recorded show none; later ones show it.
    assert "| API server peak RSS | load average |" in text and "| 100 MiB | – |" in text
    summary["1024"]["load_average_1m"] = stats.summarise([3.25]).as_dict()
    text = "\n".join(
        report_scale.section_scale({"nodes": 16, "repeat": 1, "summary": summary, "jobs": jobs})
    )
    assert "| 100 MiB | 3.2 (n=1) |" in text
    assert "What one ClusterSpec exec costs" not in text  # not measured by these jobs


def test_scale_section_shows_what_one_delivery_exec_costs_when_measured():
    from bench import report_scale

    jobs = [scale_job(128, 2.0, 1.0), scale_job(1024, 20.0, 8.0)]
    figures = {128: (4.6 * 1024, 1.9, 1.4), 1024: (18.0 * 1024, 2.6, 1.7)}
    summary = {}
    for job in jobs:
        size, product, server = figures[job["replicas"]]
        job |= {
            "cluster_file_bytes": size,
            "delivery_product_cpu_ms_per_exec": product,
            "delivery_apiserver_cpu_ms_per_exec": server,
        }
        summary[str(job["replicas"])] = {
            k: stats.summarise([v]).as_dict()
            for k, v in job.items()
            if isinstance(v, int | float) and k != "replicas"
        }
    text = "\n".join(
        report_scale.section_scale({"nodes": 16, "repeat": 1, "summary": summary, "jobs": jobs})
    )
    assert (
        "| replicas | largest cluster.json | product CPU / exec | API server CPU / exec |" in text
    )
    assert "| 1024 | 18.0 KiB | 2.60 ms (n=1) | 1.70 ms (n=1) |" in text
