#!/usr/bin/env python3
"""localkube performance: watch event latency and how fast 100 trivial pods reach Running.

    .venv/bin/python bench/bench_localkube.py [--pods 100] [--events 50]

Starts its own localkube (`python -m localkube up --port 0` in a temp dir, kubelets included,
so it needs root), then:
- watch latency: a watch on configmaps is open; the time from sending each create to receiving
  its ADDED event, over --events creates (target: median < 50 ms);
- pods: --pods pods running `sleep 30` are created back to back; the time until all are Running
  as seen through the API (target: 100 in < 10 s on 2 cores), then the time until all are gone
  after one deletecollection.
Figures are printed and written to bench/out/localkube.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import kubernetes
from kubernetes import watch

REPO = Path(__file__).resolve().parent.parent
TIMEOUT_S = 120.0


def measure_watch_latency(core, events: int) -> list[float]:
    since = core.list_namespaced_config_map("default").metadata.resource_version
    sent: dict[str, float] = {}
    latencies: list[float] = []
    connected = threading.Event()

    def consume() -> None:
        stream = watch.Watch()
        connected.set()
        for event in stream.stream(
            core.list_namespaced_config_map, "default", resource_version=since, timeout_seconds=60
        ):
            name = event["object"].metadata.name
            if event["type"] == "ADDED" and name in sent:
                latencies.append(time.monotonic() - sent[name])
            if len(latencies) >= events:
                stream.stop()

    consumer = threading.Thread(target=consume)
    consumer.start()
    connected.wait()
    time.sleep(0.5)
    for i in range(events):
        name = f"bench-{i}"
        sent[name] = time.monotonic()
        core.create_namespaced_config_map("default", {"metadata": {"name": name}})
        time.sleep(0.02)
    consumer.join(TIMEOUT_S)
    return latencies


def measure_pods(core, count: int) -> dict[str, float]:
    start = time.monotonic()
    for i in range(count):
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": f"bench-{i}", "labels": {"bench": "1"}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "busybox:1", "command": ["sleep", "30"]}],
                },
            },
        )
    created = time.monotonic() - start
    running = 0
    while time.monotonic() - start < TIMEOUT_S:
        pods = core.list_namespaced_pod("default", label_selector="bench=1").items
        running = sum(1 for p in pods if p.status.phase == "Running")
        if running == count:
            break
        time.sleep(0.1)
    all_running = time.monotonic() - start
    start = time.monotonic()
    core.delete_collection_namespaced_pod("default", label_selector="bench=1")
    while (
        time.monotonic() - start < TIMEOUT_S
        and core.list_namespaced_pod("default", label_selector="bench=1").items
    ):
        time.sleep(0.1)
    return {
        "created_s": created,
        "all_running_s": all_running,
        "running": running,
        "all_deleted_s": time.monotonic() - start,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--events", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lk-bench-") as tmp:
        state_dir = Path(tmp) / "localkube"
        subprocess.run(
            [sys.executable, "-m", "localkube", "up", "--state-dir", str(state_dir), "--port", "0"],
            check=True,
            cwd=REPO,
        )
        try:
            info = json.loads((state_dir / "localkube.json").read_text())
            configuration = kubernetes.client.Configuration()
            # The kubeconfig carries the server, its CA and the bearer token.
            kubernetes.config.load_kube_config(
                config_file=info["kubeconfig"], client_configuration=configuration
            )
            core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))
            latencies = measure_watch_latency(core, args.events)
            pods = measure_pods(core, args.pods)
        finally:
            subprocess.run(
                [sys.executable, "-m", "localkube", "down", "--state-dir", str(state_dir)], cwd=REPO
            )
    result = {
        "watch_latency_ms": {
            "median": statistics.median(latencies) * 1000,
            "p90": sorted(latencies)[int(len(latencies) * 0.9)] * 1000,
            "events": len(latencies),
        },
        "pods": {"count": args.pods, **pods},
    }
    out = REPO / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "localkube.json").write_text(json.dumps(result, indent=2))
    print(
        f"watch latency: median {result['watch_latency_ms']['median']:.1f} ms, "
        f"p90 {result['watch_latency_ms']['p90']:.1f} ms over {len(latencies)} events"
    )
    print(
        f"{args.pods} pods: created in {pods['created_s']:.1f} s, {pods['running']} Running "
        f"after {pods['all_running_s']:.1f} s, all deleted {pods['all_deleted_s']:.1f} s "
        "after one deletecollection"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
