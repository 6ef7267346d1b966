"""Measurement 7b (bench/bench_concurrent_scale.py): its smallest size end to end, and its probes.

The end-to-end test runs the bench at its smallest size (its own world: S3, localkube of
simulated nodes, PostgreSQL, `airflow standalone`), 2 jobs on 2 tenants, and checks that every
job succeeded, nothing was left and the report has every column and a row per batch. The probe
tests read this process's own sockets and memory from /proc.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.repo_root import REPO_ROOT

BENCH = REPO_ROOT / "bench"
# Long enough that `train` defers before the chief ends (its trigger's connections are seen).
RUN_SECONDS = 30

from bench import (  # noqa: E402
    procprobe,  # noqa: E402
    report_concurrent_scale,  # noqa: E402
)


def test_the_probe_counts_this_process_s_connections_to_a_port() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert procprobe.count_connections([os.getpid()], port) == 0
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        accepted = [server.accept()[0] for _ in clients]
        try:
            assert procprobe.count_connections([os.getpid()], port) == 3
            # the server side: connections whose local port is `port`
            assert procprobe.count_connections([os.getpid()], port, remote=False) == 3
        finally:
            for sock in clients + accepted:
                sock.close()


def test_the_probe_finds_a_child_by_its_command_and_reads_its_memory() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "probe-marker"])
    try:
        assert procprobe.find_process(os.getpid(), "probe-marker") == child.pid
        assert procprobe.find_process(os.getpid(), "no-such-marker") is None
        assert procprobe.read_rss_kib([child.pid]) > 1000
    finally:
        child.kill()
        child.wait()


def test_growth_says_which_figures_grow_faster_than_the_jobs() -> None:
    def batch(jobs: int, makespan: float, connections: int) -> dict:
        return {"jobs": jobs, "makespan_s": makespan, "peak_triggerer_connections": connections}

    lines = report_concurrent_scale.describe_growth(
        [batch(10, 100.0, 90), batch(100, 1000.0, 9000)]
    )
    assert any("makespan" in line and "grows linearly or less" in line for line in lines)
    assert any("open connections" in line and "faster than linearly" in line for line in lines)


@pytest.mark.e2e
@pytest.mark.slow
def test_the_smallest_batch_runs_end_to_end_and_the_report_has_every_column(
    tmp_path: Path,
) -> None:
    out = tmp_path / "concurrent_scale.json"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_concurrent_scale.py"),
            "--jobs",
            "2",
            "--run-seconds",
            str(RUN_SECONDS),
            "--batch-timeout-s",
            "300",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=540,
        cwd=REPO_ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["left_behind"] == []
    (batch,) = result["batches"]
    assert batch["succeeded"] == 2 and batch["objects_left"] == 0
    assert batch["replicas"] == 16
    for run in batch["runs"]:
        assert run["pods_seen"] == 8
        for key in ("to_all_running_s", "to_clusterspec_s", "chief_exit_to_gone_s", "to_end_s"):
            assert run[key] is not None and run[key] > 0, (key, run)
        # every replica "ran" RUN_SECONDS after its ClusterSpec came, so the run ends after that
        assert run["to_end_s"] > run["to_clusterspec_s"] + RUN_SECONDS
    assert batch["api_requests"]["CONNECT pods/exec"] >= 16  # the ClusterSpec, to every pod
    # per run: its watch, the chief's log stream, the grants' keep-alive; one stream per
    # replica (before issue 18's fix) held 10 per run of 8
    assert 1 <= batch["peak_triggerer_connections"] <= 4 * 2
    assert batch["peak_triggerer_rss_mib"] > 50 and batch["peak_apiserver_rss_mib"] > 10
    assert batch["peak_running_slots"] >= 1
    text = "\n".join(report_concurrent_scale.section_concurrent_scale(result))
    header = next(line for line in text.splitlines() if line.startswith("| jobs |"))
    for column in report_concurrent_scale.COLUMNS:
        assert f"| {column} |" in header, (column, header)
    assert any(line.startswith("| 2 | 16 | 2/2 |") for line in text.splitlines())
